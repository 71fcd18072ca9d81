#include "files/file_tree.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>

#include "files/beneath.hpp"
#include "files/compress.hpp"
#include "files/file_batch.hpp"
#include "files/file_io.hpp"
#include "files/file_sink.hpp"
#include "topology/bound.hpp"

namespace gridbcast::files {
namespace {

namespace fs = std::filesystem;

FileTime mtime_of(const struct stat& st) {
  return FileTime::of(st.st_mtim);
}

TreeEntry entry_of(const std::string& full, const std::string& rel) {
  struct stat st {};
  if (::lstat(full.c_str(), &st) != 0) throw file_error(full, "cannot stat");
  TreeEntry e;
  e.path = rel;
  e.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  e.mtime = mtime_of(st);
  if (S_ISREG(st.st_mode)) {
    e.kind = TreeEntry::Kind::kFile;
    e.size = static_cast<std::uint64_t>(st.st_size);
  } else if (S_ISDIR(st.st_mode)) {
    e.kind = TreeEntry::Kind::kDirectory;
  } else if (S_ISLNK(st.st_mode)) {
    e.kind = TreeEntry::Kind::kSymlink;
    std::error_code ec;
    e.target = fs::read_symlink(full, ec).string();
    if (ec) throw std::runtime_error(full + ": cannot read the symbolic link: " + ec.message());
  } else {
    throw std::runtime_error(full + ": not a regular file, directory or symbolic link");
  }
  return e;
}

void walk(const std::string& base, const std::string& rel, std::vector<TreeEntry>& out) {
  std::vector<std::string> names;
  const std::string dir = rel.empty() ? base : base + "/" + rel;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) throw std::runtime_error(dir + ": cannot list the directory: " + ec.message());
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string r = rel.empty() ? n : rel + "/" + n;
    out.push_back(entry_of(base + "/" + r, r));
    if (out.back().kind == TreeEntry::Kind::kDirectory) walk(base, r, out);
  }
}

std::string join(const std::string& base, const std::string& rel) {
  return rel.empty() ? base : base.empty() ? rel : base + "/" + rel;
}

// The source directory a file below it was read from: its path less `rel`.
std::string join_path(const std::string& full, const std::string& rel) {
  return full.substr(0, full.size() - std::min(full.size(), rel.size() + 1));
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<TreeEntry> scan_tree(const std::string& source) {
  std::vector<TreeEntry> out;
  // The source itself is followed if it is a symlink (as opening a file is).
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) throw file_error(source, "cannot stat");
  TreeEntry top;
  top.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  top.mtime = mtime_of(st);
  if (S_ISREG(st.st_mode)) {
    top.kind = TreeEntry::Kind::kFile;
    top.size = static_cast<std::uint64_t>(st.st_size);
    out.push_back(top);
  } else if (S_ISDIR(st.st_mode)) {
    top.kind = TreeEntry::Kind::kDirectory;
    out.push_back(top);
    walk(source, "", out);
  } else {
    throw std::runtime_error(source + ": not a regular file or a directory");
  }
  return out;
}

std::string source_name(const std::string& source) {
  fs::path p = fs::path(source).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == ".." || name == "/")
    throw std::runtime_error(source +
                             ": has no name to copy it under (give it as a path "
                             "ending in a file or directory name)");
  return name;
}

TreeResult broadcast_tree(runtime::Communicator& comm, const FileSpec& spec, int root) {
  const int rank = comm.rank();
  const bool is_root = rank == root;
  const auto who = [&](int r) { return rank_name(comm, r); };

  // The connections between the root and every other rank, which the first
  // file's go and reports take, are made while the manifest comes (on
  // testbed-2x4 the root's go to site b waited 60 ms for them).
  const std::vector<runtime::P2pRequest> lines = open_lines(comm, root, kTreeContext);
  // One file's windows: their connections begin with the job, not after the
  // three headers (on testbed-2x4 a 64 MiB file's first window reached site
  // b 0.19 s after site a, a lag it kept to the end).
  if (spec.sources.empty() && spec.expected_size)
    prepare_file(comm, spec, *spec.expected_size, root);
  // The manifest: its length (or the root's error) in a fixed header, then it.
  std::string manifest, error;
  // The root's: where each entry is read. A file below a source directory is
  // opened from that directory's descriptor, never through a link.
  struct ReadFrom {
    std::string path;  // for messages, and to open a source that is a file
    int dir = -1;      // index into source_dirs, or -1
    std::string rel;   // below it
  };
  std::vector<ReadFrom> read_from;
  std::vector<UniqueFd> source_dirs;
  // The root's: opens entry i's source, below its directory without
  // following links (or the source itself when it is a file).
  const auto open_source_of = [&](size_t i) {
    const ReadFrom& from = read_from.at(i);
    if (from.dir < 0) return FileSource::open(from.path);
    UniqueFd fd = open_beneath(source_dirs.at(static_cast<size_t>(from.dir)).get(),
                               join_path(from.path, from.rel), from.rel, O_RDONLY | O_NONBLOCK);
    return FileSource::adopt(fd.release(), from.path);
  };
  // Small files go in batches (files/file_batch.hpp); the root says whether
  // they travel packed.
  const std::uint64_t root_batch_bytes = batch_bytes_for_window(spec.window_bytes);
  const std::uint64_t root_batch_files = batch_files_for_timeout(comm.timeout());
  bool root_packed = spec.compress == Compression::kZstd;
  std::string batch_why;
  if (is_root) {
    try {
      std::vector<TreeEntry> all;
      const auto add_source = [&](const std::string& src, const std::string& name) {
        auto entries = scan_tree(src);
        int dir = -1;
        if (entries.front().kind == TreeEntry::Kind::kDirectory) {
          UniqueFd fd(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
          if (!fd) throw file_error(src, "cannot open the directory");
          source_dirs.push_back(std::move(fd));
          dir = static_cast<int>(source_dirs.size()) - 1;
        }
        for (auto& e : entries) {
          read_from.push_back({join(src, e.path), dir, e.path});
          e.path = join(name, e.path);
          all.push_back(std::move(e));
        }
      };
      if (spec.sources.empty()) {
        add_source(spec.source, "");
      } else {
        std::vector<std::string> names;
        for (const auto& src : spec.sources) {
          const std::string name = source_name(src);
          if (std::find(names.begin(), names.end(), name) != names.end())
            throw std::runtime_error("two sources would be copied as \"" + name +
                                     "\"; one of them is " + src);
          names.push_back(name);
          add_source(src, name);
        }
      }
      manifest = encode_manifest(all);
      if (manifest.size() > kMaxManifestBytes)
        throw std::runtime_error(spec.source + ": too many entries for one job (a manifest of " +
                                 std::to_string(manifest.size()) + " bytes, at most " +
                                 std::to_string(kMaxManifestBytes) + ")");
      if (spec.compress == Compression::kAuto && all.size() > 1) {
        // The best rate the grid allows from this root, in bytes per second.
        const double network =
            comm.size() > 1 ? topology::max_flow_bound(comm.grid(), root).rate_bps / 8 : 0;
        const CompressionChoice c = choose_batch_compression(
            all, plan_batches(all, root_batch_bytes, root_batch_files), open_source_of, network);
        root_packed = c.compress;
        batch_why = std::string("auto chose ") + (c.compress ? "zstd" : "off") +
                    " for the small files: " + c.why;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::string header(kTreeHeaderBytes, '\0');
  if (is_root)
    header = encode_tree_header(
        {!error.empty(), manifest.size(), root_batch_bytes, root_batch_files, root_packed, error});
  // The root does not wait for the headers to arrive (the first file's
  // windows follow them on every link in order); they end before it returns.
  InFlight headers_going(comm);
  broadcast_header(comm, header.data(), header.size(), root, spec.algorithm, headers_going);
  std::uint64_t batch_bytes = 0, batch_files = 0;
  bool packed = false;
  {
    TreeHeader h;
    try {
      h = decode_tree_header(header);
    } catch (const FileWireError& e) {
      throw std::runtime_error(who(rank) + ": refused before anything was written: " + e.what());
    }
    if (h.failed) {
      if (is_root) throw std::runtime_error(who(rank) + ": " + h.error);
      throw std::runtime_error(who(rank) + ": stopped: the root, " + who(root) +
                               ", cannot send: " + h.error);
    }
    manifest.resize(h.manifest_bytes);
    batch_bytes = h.batch_bytes;
    batch_files = h.batch_files;
    packed = h.batch_packed;
  }
  broadcast_header(comm, manifest.data(), manifest.size(), root, spec.algorithm, headers_going);
  std::vector<TreeEntry> entries;
  try {
    entries = decode_manifest(manifest);
  } catch (const FileWireError& e) {
    throw std::runtime_error(who(rank) + ": refused before anything was written: " + e.what());
  }
  const bool single =
      entries.front().path.empty() && entries.front().kind == TreeEntry::Kind::kFile;

  TreeResult result;
  result.path = is_root && spec.sources.empty() ? spec.source : spec.output;
  std::string digest_input;
  try {
    // Every other rank's output root, held open for the whole tree.
    UniqueFd out;
    if (!is_root && !single) out = open_output_dir(spec.output, spec.dir_mode);
    // The directory an entry goes into, made where missing, never through a link.
    const auto parent_dir = [&](const std::string& path) {
      return make_beneath(out.get(), spec.output, parent_of(path),
                          static_cast<mode_t>(spec.dir_mode));
    };
    // Files first: those alone in manifest order, then the small ones in
    // batches (their directories are made 0700 on the way); then the empty
    // directories and symlinks; then directory modes and mtimes, deepest
    // first, so that writing a child does not change them.
    BatchPlan plan;
    plan.bytes = batch_bytes;
    plan.packed = packed;
    if (!single && batch_bytes > 0) plan.batches = plan_batches(entries, batch_bytes, batch_files);
    const auto& batches = plan.batches;
    std::vector<bool> batched(entries.size(), false);
    for (const auto& b : batches)
      for (size_t i : b) batched[i] = true;
    // By entry, so that reports and the digest follow the manifest.
    std::vector<std::optional<FileResult>> done(entries.size());
    const auto open_sink_of = [&](size_t i, const FileMeta& meta, const SinkOptions& so) {
      const std::string& p = entries[i].path;
      SinkOptions below = so;
      below.replace_symlink = true;
      return FileSink::open_in(parent_dir(p), join(spec.output, parent_of(p)), name_of(p), meta,
                               below);
    };
    for (size_t i = 0; i < entries.size(); ++i) {
      const TreeEntry& e = entries[i];
      if (e.kind != TreeEntry::Kind::kFile || batched[i]) continue;
      FileSpec fs_spec = spec;
      fs_spec.sources.clear();
      fs_spec.source = is_root ? read_from.at(i).path : std::string();
      fs_spec.output = join(spec.output, e.path);
      fs_spec.expected_size = single && spec.expected_size ? spec.expected_size : e.size;
      if (!single) {
        // Each file of a tree is compared with itself (the root's header
        // carries its device and inode), not with the directory's.
        fs_spec.source_dev = fs_spec.source_ino = 0;
        if (is_root && read_from.at(i).dir >= 0)
          fs_spec.open_source = [&open_source_of, i] { return open_source_of(i); };
        if (!is_root)
          fs_spec.open_sink = [&open_sink_of, i](const FileMeta& meta, const SinkOptions& so) {
            return open_sink_of(i, meta, so);
          };
      }
      done[i] = broadcast_file(comm, fs_spec, root);
    }
    BatchIo io;
    io.open_source = open_source_of;
    io.open_sink = open_sink_of;
    io.path = [&](size_t i) {
      return is_root ? read_from.at(i).path : join(spec.output, entries[i].path);
    };
    io.sync_dirs = [&](const std::vector<size_t>& files) {
      std::set<std::string> dirs;
      for (size_t i : files) dirs.insert(parent_of(entries[i].path));
      for (const std::string& d : dirs) {
        const UniqueFd fd =
            make_beneath(out.get(), spec.output, d, static_cast<mode_t>(spec.dir_mode));
        if (::fsync(fd.get()) != 0)
          throw file_error(join(spec.output, d), "cannot fsync the directory");
      }
    };
    io.after_batch = spec.after_batch;
    io.on_arrival = spec.on_batch_arrival;
    for (auto& [i, r] : broadcast_batches(comm, spec, root, entries, plan, io))
      done[i] = std::move(r);
    result.batches = batches.size();
    for (size_t i = 0; i < entries.size(); ++i) {
      const TreeEntry& e = entries[i];
      if (e.kind != TreeEntry::Kind::kFile) continue;
      FileResult r = std::move(done[i]).value();
      r.name = !e.path.empty() ? e.path
                               : fs::path(is_root ? spec.source : spec.output).filename().string();
      if (batched[i]) ++result.files_batched;
      ++result.files;
      result.bytes += r.size;
      result.chunks += r.chunks;
      result.chunks_sent += r.chunks_sent;
      result.chunks_digested += r.chunks_digested;
      result.check_seconds += r.check_seconds;
      result.bytes_sent += r.bytes_sent;
      result.wire_bytes += r.wire_bytes;
      if (r.compressed) ++result.files_compressed;
      if (result.compression_why.empty()) result.compression_why = r.compression_why;
      if (batched[i] && result.compression_why.empty()) result.compression_why = batch_why;
      if (!r.algorithm.empty()) result.algorithm = r.algorithm;
      digest_input += e.path + '\0' + r.root_digest + '\0';
      result.per_file.push_back(std::move(r));
    }
    for (const auto& e : entries) {
      if (e.kind == TreeEntry::Kind::kDirectory) {
        ++result.directories;
        if (!is_root)
          make_beneath(out.get(), spec.output, e.path, static_cast<mode_t>(spec.dir_mode));
      } else if (e.kind == TreeEntry::Kind::kSymlink) {
        ++result.symlinks;
        if (!is_root)
          place_symlink_at(parent_dir(e.path).get(), join(spec.output, parent_of(e.path)),
                           name_of(e.path), e.target);
      }
      if (e.kind != TreeEntry::Kind::kFile)
        digest_input +=
            e.path + '\0' + std::to_string(static_cast<int>(e.kind)) + '\0' + e.target + '\0';
    }
    if (!is_root) {
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (it->kind != TreeEntry::Kind::kDirectory) continue;
        const std::string p = join(spec.output, it->path);
        const UniqueFd d = open_beneath(out.get(), spec.output, it->path, O_RDONLY | O_DIRECTORY);
        if (::fchmod(d.get(), static_cast<mode_t>(it->mode & 01777)) != 0)
          throw file_error(p, "cannot set the mode");
        const struct timespec times[2] = {{0, UTIME_OMIT}, it->mtime.timespec()};
        if (::futimens(d.get(), times) != 0)
          throw file_error(p, "cannot set the modification time");
      }
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind("rank ", 0) == 0) throw;
    throw std::runtime_error(who(rank) + ": " + what);
  }
  result.root_digest = single
                           ? result.per_file.front().root_digest
                           : to_hex(sha256(reinterpret_cast<const std::byte*>(digest_input.data()),
                                           digest_input.size()));
  headers_going.wait();
  close_lines(comm, root, lines, kTreeContext);
  take_notes(comm);
  return result;
}

}  // namespace gridbcast::files
