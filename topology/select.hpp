// Choices made with the cost model: the segment size of a plan, and the
// algorithm `auto` runs (select_broadcast), with the model's prediction for
// each candidate. Pure: no sockets.
//
// Segments. A pipelined plan's time is about
//
//     T(s) = max(M / R, busiest lane: B / r + ceil(B / s) c) + depth(s) - p / R
//
// where M is the message, R the max-flow rate, B the bytes a lane carries at
// rate r, c the work one segment costs each end (CostModel::
// segment_overhead_s) and depth(s) the longest chain of hops from the root,
// each costing p / (the hop's rate) + c + its latency and hop overhead
// (CostModel::hop_overhead_s): the pipeline's fill. p is what a hop holds
// back: min(s, CostModel::forward_bytes), since a rank forwards a segment
// as it arrives (cut-through, runtime/executor.cpp); s for store and
// forward (forward_bytes 0: the MPI provider's PMPI path).
// Store and forward: small segments fill the pipeline sooner and cost more
// frames. Cut-through: the fill no longer grows with s, and the largest
// segment wins until a link's parallel streams would idle between their
// frames long enough to restart (kStreamIdleRestartSeconds). model_segment
// takes the s among powers of two from 16 KiB to 4 MiB that minimises T,
// within that limit. Measured on testbed-8x8 (multilane, 1 MiB, store and
// forward): 64 KiB segments 1.73 x the bound, 16 KiB 1.04 x (docs/
// PERFORMANCE.md, "Segments from the model"); with cut-through, 512 KiB
// 1.10-1.13 x, 16 KiB 1.16-1.23 x ("Cut-through").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topology/plan/plan.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::topology {

// The model's estimate of `plan` on `grid` with segments of `segment` bytes
// (the formula above; one pass over the transfers).
double analytic_seconds(const Grid& grid, const Plan& plan, std::uint64_t segment,
                        const CostModel& model = {});

// The candidate segment with the least analytic_seconds (a tie goes to the
// larger); the message itself when it is smaller than the smallest candidate.
std::uint64_t model_segment(const Grid& grid, const Plan& plan, const CostModel& model = {});

// The model's time for `plan` cut into `segment`s: simulated within
// kMaxSimulatedRanks, kMaxSimulatedBytes and kMaxSimulatedSegments,
// analytic_seconds beyond. What predict() and the block choice price.
double model_seconds(const Grid& grid, const Plan& plan, std::uint64_t segment,
                     const CostModel& model = {});

// Circulant's block, which is also its segment (one block, one frame), so
// it shapes the plan itself: the model builds the plan each candidate block
// gives (the powers of two model_segment tries) and prices it with
// model_seconds, under `model` (a plan built without one, as build_plan
// builds them, has the default model's block). Searched from the largest
// down, stopping once two in a row price above the best (the time falls as
// the fill shortens, then rises as rounds multiply), so a large message
// never builds the plans of its smallest blocks; it also stops at the first
// block the transfer cap grows (the smaller ones cut about alike), before
// a block that would put more than kCirculantMaxBlocksForTags blocks on one
// MPI link, and before a plan of more than kCirculantSearchTransfers
// transfers (on testbed-8x8 a 1 GiB message stops at 256 KiB blocks, whose
// fill is about 66 ms of 43 s). The largest block within
// kCirculantBlockMarginPercent of the fastest wins (whole
// microseconds): the model does not see what a frame costs ranks that share
// cores beyond the lanes it loads. The choice is kept for the process (by
// grid, root, size and model), since every broadcast builds its plan.
inline constexpr std::uint64_t kCirculantMaxBlocksForTags = 32768;  // MPI_TAG_UB's least + 1
inline constexpr std::uint64_t kCirculantSearchTransfers = std::uint64_t{1} << 16;
// Measured on testbed-8x8, 16 MiB, in one testbed: 64 KiB blocks 1.20-1.26 s
// against 16 KiB's 1.37-1.51 s, which the model (analytic past 4 MiB) had
// priced 11 % faster (64 MiB: 64 KiB 3.54 and 4.12 s against 32 KiB's 3.67
// and 4.22, priced 1.8 % faster). With 1 % the model chose 16 KiB at 16 MiB
// and 32 KiB at 64 MiB; with 5 %, 32 KiB and 64 KiB, and still 16 KiB at
// 1 MiB, where 32 KiB prices 18 % slower.
inline constexpr long long kCirculantBlockMarginPercent = 5;
std::uint64_t model_circulant_block(const Grid& grid, int root, std::uint64_t size,
                                    const CostModel& model = {});

// Below 16 KiB a rank's own work per frame (system calls, wake-ups) decides,
// which the model prices only roughly: measured on testbed-8x8 (multilane,
// 1 MiB, host BBR), 4 KiB segments took 1.63 x the bound, 8 KiB 1.16 x and
// 16 KiB 1.04 x, where the model at 20 us a segment preferred 4 KiB.
inline constexpr std::uint64_t kSmallestModelSegment = 16 * 1024;
inline constexpr std::uint64_t kLargestModelSegment = 4 * 1024 * 1024;
// Linux's least retransmission timeout: a TCP stream idle for longer starts
// again from its initial window (net.ipv4.tcp_slow_start_after_idle). The
// model's segment is never so large that a stream of a link with several
// waits this long between two of its frames.
inline constexpr double kStreamIdleRestartSeconds = 0.2;
// `auto` runs multilane where the model prices it within this many percent
// of the fastest candidate: the model is not that exact, and on such a near
// tie multilane measured faster (testbed-hetero-3x, 64 MiB: chain priced
// 0.3 % faster, measured 1.113-1.125 x the bound against multilane's
// 1.097-1.099 x, docs/PERFORMANCE.md, "Cut-through").
inline constexpr long long kMultilaneTiePercent = 1;

// Algorithms. `auto` runs the plan the cost model predicts fastest for the
// grid, root and size (select_broadcast), among model_candidates(): the
// algorithms whose prices the emulated grid confirmed best (docs/ALGORITHMS.md,
// "Selection"; docs/PERFORMANCE.md, "Selection from the model"). Each is priced with its
// own model_segment; the simulator prices grids up to kMaxSimulatedRanks
// ranks and sizes up to kMaxSimulatedBytes, analytic_seconds the rest. A
// size class (an eighth of an octave: the sizes that share their leading
// four bits, so within 12.5 % of each other) is priced once, at its middle
// (priced_size), and cached for the process: every rank prices alike and
// compares whole microseconds, so all choose the same plan without a word
// between them. Thresholds given (the environment's GRIDBCAST_SMALL_BYTES,
// GRIDBCAST_MULTICAST_BYTES, GRIDBCAST_MULTICAST_MIN_SITE_NODES, or the
// provider's configuration) override the model with the thresholds' rule
// (threshold_algorithm). Multicast is not a candidate: the simulator does
// not price datagrams, and it has not measured faster than multilane or
// binomial at any size (docs/PERFORMANCE.md, "Multicast"); the thresholds
// still select it.
struct Prediction {
  Algorithm algorithm = Algorithm::kMultilane;
  std::uint64_t segment_bytes = 0;
  double seconds = 0;
};
struct Selection {
  Algorithm chosen = Algorithm::kMultilane;  // what `auto` runs
  std::string why;                           // "the model's fastest", "the thresholds given", ...
  std::vector<Prediction> predictions;       // the model's, fastest first (empty: none priced)
  std::uint64_t priced_bytes = 0;            // the size the class was priced at
  double bound_seconds = 0;                  // the max-flow bound at that size
  std::string method;                        // "simulated" or "analytic"
};
inline constexpr int kMaxSimulatedRanks = 256;
inline constexpr std::uint64_t kMaxSimulatedBytes = std::uint64_t{4} << 20;

// The size a size's class is priced at: itself below 16 bytes, else the
// middle of the sizes that share its leading four bits (1 MiB -> 1 MiB +
// 64 KiB; 3 MiB -> 3 MiB + 128 KiB).
std::uint64_t priced_size(std::uint64_t size);

// What `auto` may run, in the order that breaks a tie.
const std::vector<Algorithm>& model_candidates();

// The model's time for `algorithm` at exactly `size` bytes with its
// resolved segment: simulated within the limits above, analytic beyond.
Prediction predict(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size,
                   const CostModel& model = {});

Selection select_broadcast(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds = {}, const CostModel& model = {});
// What `auto` runs: select_broadcast(...).chosen (the thresholds' rule,
// unpriced, when thresholds are given).
Algorithm select_algorithm(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds = {}, const CostModel& model = {});
// What `auto` chose, remembered by (root, priced size) for one grid: the
// model prices a class once per process, and a communicator that keeps one
// of these skips even select_broadcast's lookup, whose key grows with the
// grid. Bounded: past 4096 classes it forgets, and a miss asks again.
class AutoChoices {
 public:
  Algorithm choose(const Grid& grid, int root, std::uint64_t bytes,
                   const SelectionThresholds& thresholds);

 private:
  std::map<std::pair<int, std::uint64_t>, Algorithm> by_class_;
};

// "auto runs binomial (the model's fastest); the model: binomial 0.0108 s =
// 1.07 x the bound, multilane (segment 16 KiB) 0.0131 s = 1.30 x the bound,
// ... (simulated at 768 B)"
std::string describe(const Selection& s);

}  // namespace gridbcast::topology
