// `gridbcast bench`, the rank side: sweeps sizes x algorithms with one of three
// ways of timing a broadcast (de Supinski and Karonis, "Accurately measuring
// MPI broadcasts in a computational grid", HPDC 1999). No Asio here.
//
//   ack      (default) for each non-root rank i in turn: measure the round trip
//            root <-> i, then repeat [sync; root starts the clock; broadcast;
//            i acknowledges; root stops the clock]; OL_i = elapsed - RTT_i / 2.
//            Only the root's clock is read, so no clocks need to agree; the
//            broadcast time is max over i of the mean OL_i.
//   barrier  repeat [sync; every rank times its own broadcast call]; a rank's
//            time starts when it leaves the sync, so skew between ranks leaving
//            it shows up as error (the reason for the ack method).
//   rounds   repeat [sync; R broadcasts back to back; every rank reports; the
//            root divides the time until the last report by R]: successive
//            broadcasts may overlap in the pipeline, as in a loop of MPI_Bcast.
//
// "sync" is untimed: every rank reports to the root, which answers go or stop,
// so the next sample starts with every rank idle. A series (one per rank i
// for ack, one for the others) repeats until its standard deviation is under
// `target_rel_stdev` of its mean (after `min_iterations`), or `max_iterations`,
// or `max_seconds` for the point; the point says which stopped it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/communicator.hpp"

namespace gridbcast::job {

enum class BenchMethod { kAck, kBarrier, kRounds };
const char* bench_method_name(BenchMethod m);
// Throws std::invalid_argument naming the choices.
BenchMethod parse_bench_method(const std::string& name);

struct BenchSpec {
  std::vector<std::uint64_t> sizes;
  std::vector<std::string> algorithms;  // registry names or "auto"
  BenchMethod method = BenchMethod::kAck;
  int warmup = 1;            // untimed broadcasts before each series
  int min_iterations = 5;    // samples per series before the stdev may stop it
  int max_iterations = 100;  // the cap per series
  double target_rel_stdev = 0.03;
  double max_seconds = 10;  // per point (algorithm x size), all series together
  int rounds = 10;          // broadcasts per sample with the rounds method
  std::uint64_t seed = 1;   // the root's data

  std::string encode() const;                        // one line, for the control channel
  static BenchSpec decode(const std::string& text);  // throws std::runtime_error
  std::uint64_t largest_size() const;
};

// Why a series stopped.
enum class BenchStop { kStdev, kCap, kTime };
const char* bench_stop_name(BenchStop s);

// One algorithm at one size, as the root measured it. Per-rank latencies are
// the mean of that rank's samples (ack: OL_i; barrier: its own call; rounds:
// one value for the whole job, stored for every non-root rank).
struct BenchPoint {
  std::string algorithm;  // as requested ("auto" included)
  std::string used;       // what ran (auto resolved)
  std::uint64_t bytes = 0;
  int root = 0;
  std::vector<double> rank_us;         // per rank; the root's entry is 0
  int iterations = 0;                  // samples in the longest series
  double rel_stdev = 0;                // the worst series' standard deviation / mean
  BenchStop stop = BenchStop::kStdev;  // the worst series' reason
  double rtt_us = 0;                   // ack: the largest round trip subtracted (halved)
  bool verified = false;               // every rank's copy matched the root's data

  // Over the non-root ranks (a single rank: all 0).
  double avg_us() const;
  double min_us() const;
  double max_us() const;  // the broadcast time: until the last rank holds the data

  std::string encode() const;
  static BenchPoint decode(const std::string& text);  // throws std::runtime_error
};

// Runs the sweep on this rank (every rank calls it with the same spec and root;
// `buffer` holds spec.largest_size() bytes). On the root `on_point` sees each
// point as it completes; other ranks return without calling it. Every rank
// checks its copy after each point; a mismatch throws on that rank. Throws
// std::runtime_error naming the peer when communication fails.
// On the root, `on_alive` (if given) is called at most about once a second
// between samples, so whoever waits for points can tell a slow point from a
// stalled root.
void run_bench(runtime::Communicator& comm, const BenchSpec& spec, int root, std::byte* buffer,
               const std::function<void(const BenchPoint&)>& on_point,
               const std::function<void()>& on_alive = {});

}  // namespace gridbcast::job
