// `gridbcast launch --file`: from the command line's files and output to the
// job's parameters, with every usage error found before any rank starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "job/params.hpp"
#include "topology/grid.hpp"

namespace gridbcast::cli {

struct FileJobRequest {
  std::vector<std::string> files;  // as given; "-" (standard input) only alone
  std::string output;              // the --output pattern
  std::uint64_t window_bytes = 0;
  bool resume = false;
  std::string compress = "auto";  // --compress
  bool one_host = false;          // every rank on the root's host (local and netns backends)
  int root = 0;
};

// Fills `params` (files, size, file_count, the source's mode, mtime and
// identity, window, resume, output). One file: OUTPUT is its copy (a trailing
// / appends its name). Several: OUTPUT is the directory that receives each
// under its own name, and two with the same name are refused. A copy that
// would be a source on the root's host is refused for every rank there.
// Usage errors throw CLI::ValidationError naming the option; a source that
// cannot be read throws std::runtime_error. Returns the spooled copy of
// standard input to remove when the job ends ("" when there is none).
std::string prepare_file_job(const FileJobRequest& request, const topology::Grid& grid,
                             job::JobParams& params);

}  // namespace gridbcast::cli
