#include "cli/file_job.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>

#include "files/file_sink.hpp"
#include "files/file_source.hpp"
#include "files/file_tree.hpp"

namespace gridbcast::cli {

std::string prepare_file_job(const FileJobRequest& req, const topology::Grid& grid,
                             job::JobParams& params) {
  namespace fs = std::filesystem;
  const bool several = req.files.size() > 1;
  std::string spool;
  std::vector<std::string> sources = req.files;
  for (const auto& f : req.files)
    if (f == "-" && several)
      throw CLI::ValidationError("--file", "- (standard input) cannot be one of several files");
  if (req.files.front() == "-") {
    if (req.output.empty() || req.output.back() == '/')
      throw CLI::ValidationError("--output",
                                 "--file - needs --output naming the copies' file, not a "
                                 "directory");
    // Standard input has no size in advance: spooled to a file first.
    const char* tmp = std::getenv("TMPDIR");
    spool = files::spool_to_file(0, tmp && *tmp ? tmp : "/tmp");
    sources = {spool};
  }
  try {
    std::vector<std::string> names;
    params.files.clear();
    params.size = 0;  // the bytes of the regular files
    params.file_count = 0;
    for (const auto& src : sources) {
      params.files.push_back(fs::absolute(src).lexically_normal().string());
      if (several) {
        std::string name;
        try {
          name = files::source_name(src);
        } catch (const std::runtime_error& e) {
          throw CLI::ValidationError("--file", e.what());
        }
        for (const auto& n : names)
          if (n == name)
            throw CLI::ValidationError("--file", "two files would be copied as \"" + name + "\" (" +
                                                     src + " is the second)");
        names.push_back(name);
      }
      for (const auto& e : files::scan_tree(params.files.back())) {
        params.size += e.size;
        if (e.kind == files::TreeEntry::Kind::kFile) ++params.file_count;
      }
    }
    // Mode, mtime and identity of a single source, for the ranks' checks.
    const files::FileMeta meta = files::stat_file(params.files.front());
    params.file_mode = several ? 0 : meta.mode;
    params.file_mtime_ns = several ? 0 : meta.mtime.ns_saturated();
    params.source_dev = several ? 0 : meta.dev;
    params.source_ino = several ? 0 : meta.ino;
    params.window_bytes = req.window_bytes;
    if (params.window_bytes < 2) throw CLI::ValidationError("--window", "must be at least 2 bytes");
    params.resume = req.resume;
    if (!files::parse_compression(req.compress))
      throw CLI::ValidationError("--compress",
                                 "must be auto, zstd or off, not \"" + req.compress + "\"");
    params.compress = req.compress;
    params.output = req.output;
    if (several) {
      while (params.output.size() > 1 && params.output.back() == '/') params.output.pop_back();
    } else if (!params.output.empty() && params.output.back() == '/') {
      params.output += fs::path(req.files.front()).filename().string();
    }
    // A copy over a source destroys it: refused for every rank on the root's
    // host (all of them with the local and netns backends) before any rank
    // starts; the ranks check each file again by device and inode.
    const auto& root_node = grid.nodes[static_cast<size_t>(req.root)];
    for (int r = 0; r < grid.size(); ++r) {
      const auto& node = grid.nodes[static_cast<size_t>(r)];
      if (r == req.root || (!req.one_host && node.host != root_node.host)) continue;
      const std::string out = job::output_path(params.output, r, node.name);
      for (const auto& src : params.files) {
        try {
          files::refuse_copy_over_source(several ? out + "/" + files::source_name(src) : out, src,
                                         files::stat_file(src));
        } catch (const std::runtime_error& e) {
          throw CLI::ValidationError(
              "--output", "rank " + std::to_string(r) + " (node " + node.name + "): " + e.what());
        }
      }
    }
  } catch (...) {
    if (!spool.empty()) ::unlink(spool.c_str());
    throw;
  }
  return spool;
}

}  // namespace gridbcast::cli
