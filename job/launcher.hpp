// `gridbcast launch` and `gridbcast bench`: starts one rank per node through a
// backend, runs the rendezvous, then the driver of the job's kind (broadcast,
// bench or program), and returns what happened as data; cli/ renders it. If
// any rank fails, it stops the others and names the first cause. No Asio here.
//
// Liveness is judged by progress, not by wall-clock time: every rank reports
// about once a second (the bytes it moved while a broadcast runs, a heartbeat
// otherwise). A rank that sends nothing for the silence limit is called
// stopped; a broadcast in which no rank moved a byte for --timeout (plus a
// margin for the ranks' own, more precise, deadlines) is called stalled. A
// broadcast that keeps moving may last hours.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "job/backend.hpp"
#include "job/bench.hpp"
#include "job/params.hpp"
#include "job/protocol.hpp"
#include "job/straggler.hpp"
#include "topology/grid.hpp"
#include "topology/probe.hpp"

namespace gridbcast::job {

// One progress report of a running broadcast, for a terminal line or a JSON
// record (`launch --progress FILE`).
struct ProgressSample {
  int iteration = 0;
  int iterations = 1;
  double elapsed_s = 0;
  std::uint64_t bytes_total = 0;  // size x receiving ranks
  std::uint64_t bytes_held = 0;   // received by the non-root ranks so far
  int ranks_done = 0;
  int ranks = 0;
  double rate_bytes_per_s = 0;  // over the last few seconds
  double eta_s = -1;            // -1: unknown
};

struct LaunchOptions {
  topology::Grid grid;
  std::string yaml_text;  // the topology as given, sent to every rank
  JobParams params;
  std::string listen_address = "127.0.0.1";  // the control listener
  std::uint16_t listen_port = 0;
  std::int64_t startup_timeout_ms = 60'000;
  // Program mode: how long a rank may send nothing (no heartbeat) before the
  // job fails naming it, when params.timeout_ms is 0 (no --timeout).
  std::int64_t program_silence_ms = 30'000;
  // Program mode: the command every rank runs, for messages.
  std::vector<std::string> program;
  // Called about once a second while a broadcast lasts over a second.
  std::function<void(const ProgressSample&)> on_progress;
  // Bench mode: each point as the root reports it.
  std::function<void(const BenchPoint&)> on_bench_point;
  // Probe mode: the topology as declared (`grid` is topology::probe_grid of
  // it), so the launcher can confirm NICs measured below their claim
  // (topology::confirm_phases). Without it, no confirmation.
  std::optional<topology::Grid> probe_declared;
  // Broadcasts of 3 or more ranks: watch for stragglers with this rule
  // (job/straggler.hpp); one found ends the run as a loss whose cause says
  // so (LaunchResult::LostRank::straggler). Unset: no watch.
  std::optional<StragglerRule> stragglers;
};

struct SlowestRank {
  std::string site;
  int rank = -1;
  std::string node;
  double seconds = 0;
};

struct IterationSummary {
  int root = 0;
  std::uint64_t bytes = 0;
  std::string algorithm;
  double seconds = 0;  // from the root's start to the last rank's end
  std::uint64_t max_rss_bytes = 0;
};

struct BroadcastSummary {
  std::string algorithm;  // of the last iteration
  int ranks = 0;
  int sites = 0;
  std::uint64_t bytes = 0;  // of the last iteration
  int root = 0;
  std::uint64_t segment_bytes = 0;  // the broadcast's segment; with --file, the file's chunk
  std::vector<IterationSummary> iterations;
  // Both bounds for the last iteration's root and size: the simple one
  // (topology::lower_bound_seconds) and the max-flow one the ratio uses.
  double lower_bound_seconds = 0;
  double max_flow_bound_seconds = 0;
  // Every NIC is a loopback address: all ranks share this host's cores and
  // memory, which the bound (from the topology's NIC bandwidths) knows nothing
  // of. 0 otherwise; else the fastest NIC's declared bandwidth.
  double loopback_nic_bps = 0;
  // launch --probe: the bound above is the measured network's; this is the
  // declared topology's for the same root and size, and `measured` says when
  // and how the figures were measured. 0 and empty without --probe.
  double declared_max_flow_bound_seconds = 0;
  std::string measured;
  bool verified = false;
  std::string sha256;
  std::uint64_t rejected_connections = 0;  // summed over ranks
  std::uint64_t peak_rss_bytes = 0;        // the largest rank's
  std::vector<SlowestRank> slowest_per_site;
  // --file: where each non-root rank's copy is (rank, node, path).
  struct Copy {
    int rank;
    std::string node;
    std::string path;
  };
  std::vector<Copy> copies;
  // --file: each regular file the root sent in the last iteration, in order.
  std::vector<control::FileRecord> files;
  // A job that healed: the nodes lost on the way, which hold no verified
  // copy, each with its first run's rank and why it was lost. The summary
  // above is of the survivors' run (its ranks given as first-run numbers).
  struct Missing {
    int rank;
    std::string node;
    std::string cause;
  };
  std::vector<Missing> missing;
  // Nodes set aside as stragglers (LaunchOptions::stragglers) and finished
  // after the others, from the root alone: why, their rate while they held
  // the others back, and how long their own copy then took. Their copies
  // are among `copies` and counted in `ranks`.
  struct Straggler {
    int rank;
    std::string node;
    std::string cause;
    double rate_bytes_per_s;
    double seconds;
  };
  std::vector<Straggler> stragglers;
  // A job that healed around WAN links that moved nothing (job/cut.hpp):
  // each by its sites' names, and what showed it. Every node still got its
  // copy, over the other links.
  struct RoutedAround {
    std::string site_a, site_b;
    std::string cause;
  };
  std::vector<RoutedAround> routed_around;
  // --file, one file: the ranks that became the source when the one before
  // them was lost (the first root, or a source lost while stragglers took
  // their copies), each sending its own verified copy, in order; `after` is
  // why the one before it was lost.
  struct TookOver {
    int rank;
    std::string node;
    int lost_rank;
    std::string lost_node;
    std::string after;
  };
  std::vector<TookOver> took_over;
};

struct BenchOutcome {
  std::vector<BenchPoint> points;
  std::uint64_t rejected_connections = 0;
  std::uint64_t peak_rss_bytes = 0;  // the largest rank's
};

// A probe job's measurements: the schedule that ran and each phase's samples.
struct ProbeOutcome {
  std::vector<topology::ProbePhase> phases;
  std::vector<std::vector<topology::ProbeSample>> samples;
};

struct LaunchResult {
  // 0 on success. A failed program job exits with the failing rank's status or
  // MPI_Abort code (1 when there is none); any other failure is 1.
  int status = 0;
  // On failure: the first cause, then what followed (at most a few).
  std::string failure;
  std::vector<std::string> then;
  // On failure: the ranks that died or went silent, with why; and whether
  // such a loss is the first cause (then the others' errors most likely
  // followed from it, and the survivors can go on without them).
  struct LostRank {
    int rank = -1;
    std::string cause;
    bool straggler = false;       // alive, but set aside as a straggler
    double rate_bytes_per_s = 0;  // a straggler's rate while it held the others back
  };
  std::vector<LostRank> lost;
  bool lost_first = false;
  // On failure headed by a cut (job/cut.hpp): WAN links that moved nothing
  // between sites the root's site still reaches another way, by their
  // sites' names; the others can go on without them.
  std::vector<BroadcastSummary::RoutedAround> routed_around;
  // On failure of a --file broadcast: the ranks, not lost, whose copy of an
  // iteration was committed and verified (their Done said so; where the
  // root's Done of that iteration came, its digest is the same), each with
  // its latest such copy. A lost root can be healed from one of them.
  struct Held {
    int rank = -1;
    int iteration = 0;
    std::string sha256;  // the root digest it verified its chunks against
  };
  std::vector<Held> held;
  std::optional<BroadcastSummary> broadcast;
  std::optional<BenchOutcome> bench;
  std::optional<ProbeOutcome> probe;
};

// Runs the job; `err` gets only what must be said while it runs (the
// external backend's instructions, rejected control connections).
LaunchResult launch(const LaunchOptions& options, Backend& backend, std::ostream& err);

}  // namespace gridbcast::job
