// What the file-broadcast suites over loopback share: every rank's
// broadcast_file (or broadcast_tree) result or error, a short communicator
// timeout for the failure cases, and a source file written in one step.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "files/file_broadcast.hpp"
#include "files/file_tree.hpp"
#include "runtime/buffer.hpp"
#include "support/ranks.hpp"

namespace gridbcast::files::runs {

// Each rank's result or error.
template <typename Result>
struct Outcomes {
  std::map<int, Result> results;
  std::map<int, std::string> errors;
};
using Outcome = Outcomes<FileResult>;
using TreeOutcome = Outcomes<TreeResult>;

// Every rank runs `broadcast` (broadcast_file or broadcast_tree) with its spec.
template <typename Result>
Outcomes<Result> run_each(gridbcast::testing::Ranks& ranks, int root,
                          const std::function<FileSpec(int)>& spec_of,
                          Result (*broadcast)(runtime::Communicator&, const FileSpec&, int)) {
  Outcomes<Result> out;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    try {
      Result r = broadcast(c, spec_of(c.rank()), root);
      std::lock_guard lock(m);
      out.results[c.rank()] = std::move(r);
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      out.errors[c.rank()] = e.what();
    }
  });
  return out;
}

inline Outcome run(gridbcast::testing::Ranks& ranks, int root,
                   const std::function<FileSpec(int)>& spec_of) {
  return run_each(ranks, root, spec_of, &broadcast_file);
}

inline TreeOutcome run_tree(gridbcast::testing::Ranks& ranks, int root,
                            const std::function<FileSpec(int)>& spec_of) {
  return run_each(ranks, root, spec_of, &broadcast_tree);
}

// A hostile root: rank 0 runs `root_sends` (what a root that is not
// gridbcast could put on the wire) while every other rank runs
// broadcast_tree with its spec. Returns the others' errors.
inline std::map<int, std::string> tree_errors_under_root(
    gridbcast::testing::Ranks& ranks, const std::function<void(runtime::Communicator&)>& root_sends,
    const std::function<FileSpec(int)>& spec_of) {
  std::map<int, std::string> errors;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    if (c.rank() == 0) {
      root_sends(c);
      return;
    }
    try {
      broadcast_tree(c, spec_of(c.rank()), 0);
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors[c.rank()] = e.what();
    }
  });
  return errors;
}

// Each rank's spec with only its output: DIR/nR.
inline std::function<FileSpec(int)> output_in(const std::filesystem::path& dir) {
  return [dir](int r) {
    FileSpec s;
    s.output = (dir / ("n" + std::to_string(r))).string();
    return s;
  };
}

// What a root broadcasts first of a tree: the header (no error) and the
// manifest.
inline void send_tree_start(runtime::Communicator& c, const std::string& manifest,
                            std::uint64_t batch_bytes, std::uint64_t batch_files, bool packed) {
  std::string header =
      encode_tree_header({false, manifest.size(), batch_bytes, batch_files, packed, ""});
  c.bcast(header.data(), header.size(), 0);
  std::string copy = manifest;
  c.bcast(copy.data(), copy.size(), 0);
}

// `size` bytes that no compressor shrinks (runtime::fill_pattern's).
inline std::string pattern_bytes(std::uint64_t size, std::uint64_t seed) {
  std::string s(size, '\0');
  runtime::fill_pattern(reinterpret_cast<std::byte*>(s.data()), size, seed);
  return s;
}

inline runtime::CommOptions quick_timeout() {
  runtime::CommOptions o;
  o.timeout = std::chrono::milliseconds(3000);
  return o;
}

inline void write_file(const std::filesystem::path& p, const std::string& data,
                       mode_t mode = 0640) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  ::chmod(p.c_str(), mode);
}

}  // namespace gridbcast::files::runs
