// What a launched job does, as the launcher tells every rank (no Asio here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::job {

struct JobParams {
  std::string algorithm = "auto";  // a registry name, "auto", or "random" (per iteration)
  int root = 0;
  std::uint64_t size = 0;  // bytes; with random_sizes, the largest size
  int iterations = 1;
  bool random_roots = false;  // each iteration's root drawn from `seed`
  bool random_sizes = false;  // each iteration's size drawn from [0, size]
  std::uint64_t seed = 1;
  std::uint64_t segment_bytes = 0;  // 0: topology's or automatic
  std::int64_t timeout_ms = 30'000;
  std::string file;    // the root's input file; empty: generated data
  std::string output;  // where other ranks write it; {rank} and {node} are replaced
  bool verify = true;  // SHA-256 of every copy against the root's
  // The ranks run a user program (`gridbcast launch TOPOLOGY -- PROGRAM`, an MPI
  // program on libgridbcast_mpi) instead of the broadcast job above.
  bool program = false;
  // `gridbcast bench`: a BenchSpec (runtime/bench.hpp), encoded; the ranks run
  // the sweep instead of the iterations above. Empty: not a bench job.
  std::string bench;
  // Where every rank finds its TLS certificates (`launch --cert-dir`); empty:
  // each rank's GRIDBCAST_CERT_DIR. A path, never a secret: keys stay in files.
  std::string cert_dir;

  std::vector<std::string> to_fields() const;
  static JobParams from_fields(const std::vector<std::string>& fields, size_t first);
};

struct Iteration {
  int root;
  std::uint64_t size;
  std::string algorithm;  // registry name or "auto"
};

// The same on every rank and in the launcher: derived from params and the index.
Iteration iteration_at(const JobParams& p, int index, const topology::Grid& grid);

// Output path for a rank: {rank} and {node} substituted.
std::string output_path(const std::string& pattern, int rank, const std::string& node);

}  // namespace gridbcast::job
