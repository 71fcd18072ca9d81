// What a launched job does, as the launcher tells every rank (no Asio here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/grid.hpp"
#include "topology/probe.hpp"

namespace gridbcast::job {

// What every rank does once the rendezvous is over; the launcher runs the
// matching driver (job/launcher.cpp), and so does each rank.
enum class JobKind : std::uint8_t {
  kBroadcast = 0,  // `gridbcast launch`: iterations of one broadcast (data or --file)
  kBench = 1,      // `gridbcast bench`: a sweep of sizes x algorithms
  kProgram = 2,    // `gridbcast launch -- PROGRAM`: an MPI program on every rank
  kProbe = 3,      // `gridbcast probe`: measure the network (topology/probe.hpp)
};
std::string job_kind_name(JobKind kind);

struct JobParams {
  JobKind kind = JobKind::kBroadcast;
  std::string algorithm = "auto";  // a registry name, "auto", or "random" (per iteration)
  int root = 0;
  std::uint64_t size = 0;  // bytes; with random_sizes, the largest size
  int iterations = 1;
  bool random_roots = false;  // each iteration's root drawn from `seed`
  bool random_sizes = false;  // each iteration's size drawn from [0, size]
  std::uint64_t seed = 1;
  std::uint64_t segment_bytes = 0;  // 0: topology's or automatic
  std::int64_t timeout_ms = 30'000;
  // The root's input files or directories (absolute); empty: generated data.
  // One: `output` is its copy. Several: `output` is a directory that receives
  // each under its own name.
  std::vector<std::string> files;
  std::uint64_t file_count = 0;  // regular files under `files` as the launcher saw them
  std::string output;            // where other ranks write it; {rank} and {node} are replaced
  // The source file as the launcher saw it on the root's host, so a rank can
  // refuse a destination that is the source and give its copy the same mode and
  // modification time.
  std::uint32_t file_mode = 0;     // permission bits of st_mode
  std::int64_t file_mtime_ns = 0;  // since the epoch
  std::uint64_t source_dev = 0;
  std::uint64_t source_ino = 0;
  std::uint64_t window_bytes = 0;  // file streaming window per rank; 0: the default
  bool resume = false;             // keep chunks a destination already holds
  // --file, one file: the root sends its own copy (at its `output` path),
  // not `files`: the first root was lost and this rank held a verified copy
  // (cli/launch.cpp's heal). Its partial beside the copy, from the run that
  // lost the root, is removed once the broadcast succeeds.
  bool source_is_copy = false;
  std::string compress = "off";  // --file: off, zstd or auto (files::parse_compression)
  bool verify = true;            // SHA-256 of every copy against the root's
  // kBench: a BenchSpec (job/bench.hpp), encoded.
  std::string bench;
  // Where every rank finds its TLS certificates (`launch --cert-dir`); empty:
  // each rank's GRIDBCAST_CERT_DIR. A path, never a secret: keys stay in files.
  std::string cert_dir;
  // A job that heals runs again over the survivors of a loss, renumbered:
  // label[r] is rank r's number in the first run, which {rank} in `output`
  // keeps meaning. Empty: every rank is its own label.
  std::vector<std::int32_t> rank_labels;
  // kProbe: how long each phase runs and how many pings a latency flow makes;
  // every rank derives the same schedule from these and the topology.
  topology::ProbeSettings probe;

  bool program() const { return kind == JobKind::kProgram; }
  int label(int rank) const {
    return rank_labels.empty() ? rank : rank_labels.at(static_cast<size_t>(rank));
  }
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
