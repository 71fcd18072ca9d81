// What the file-broadcast suites over loopback share: every rank's
// broadcast_file result or error, a short communicator timeout for the
// failure cases, and a source file written in one step.
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
#include "support/ranks.hpp"

namespace gridbcast::files::runs {

// Each rank's result or error.
struct Outcome {
  std::map<int, FileResult> results;
  std::map<int, std::string> errors;
};

inline Outcome run(gridbcast::testing::Ranks& ranks, int root,
                   const std::function<FileSpec(int)>& spec_of) {
  Outcome out;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    try {
      FileResult r = broadcast_file(c, spec_of(c.rank()), root);
      std::lock_guard lock(m);
      out.results[c.rank()] = r;
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      out.errors[c.rank()] = e.what();
    }
  });
  return out;
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
