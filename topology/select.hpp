// Choices made with the cost model: the segment size of a plan; and the
// model's prediction for each candidate algorithm beside what `auto` runs
// (select_broadcast). Pure: no sockets.
//
// Segments. A pipelined plan's time is about
//
//     T(s) = max(M / R, busiest lane: B / r + ceil(B / s) c) + depth(s) - s / R
//
// where M is the message, R the max-flow rate, B the bytes a lane carries at
// rate r, c the work one segment costs each end (CostModel::
// segment_overhead_s) and depth(s) the longest chain of hops from the root,
// each costing s / (the hop's rate) + c + its latency: the pipeline's fill.
// Small segments fill it sooner and cost more frames; model_segment takes
// the s among powers of two from 16 KiB to 4 MiB that minimises T. Measured
// on testbed-8x8 (multilane, 1 MiB): 64 KiB segments 1.73 x the bound,
// 16 KiB 1.04 x (docs/PERFORMANCE.md, "Segments from the model").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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

// Below 16 KiB a rank's own work per frame (system calls, wake-ups) decides,
// which the model prices only roughly: measured on testbed-8x8 (multilane,
// 1 MiB, host BBR), 4 KiB segments took 1.63 x the bound, 8 KiB 1.16 x and
// 16 KiB 1.04 x, where the model at 20 us a segment preferred 4 KiB.
inline constexpr std::uint64_t kSmallestModelSegment = 16 * 1024;
inline constexpr std::uint64_t kLargestModelSegment = 4 * 1024 * 1024;

// Algorithms. `auto` runs the thresholds' rule (threshold_algorithm:
// binomial below 64 KiB, multilane above), and select_broadcast says what the
// cost model predicts for each candidate beside it (`plan`, `launch -v`,
// `simulate -a auto`). The model does not choose yet: below about 64 KiB it
// prices a hop's software cost (a wake-up, a system call, on the emulated
// grid about 0.5 ms with 16 ranks on 2 cores) at 30 us, and predicted
// multilane and binomial alike at 1 KiB on testbed-8x8 where binomial
// measured 11 % faster (docs/PERFORMANCE.md, "Segments from the model").
// The candidates priced are the algorithms whose predictions were checked
// against the emulated grid: multilane and binomial, each with its
// model_segment; the simulator prices grids up to kMaxSimulatedRanks ranks
// and sizes up to kMaxSimulatedBytes, analytic_seconds the rest. A size
// class (the sizes of one bit width) is priced once, at the middle of the
// class, and cached.
struct Prediction {
  Algorithm algorithm = Algorithm::kMultilane;
  std::uint64_t segment_bytes = 0;
  double seconds = 0;
};
struct Selection {
  Algorithm chosen = Algorithm::kMultilane;  // what `auto` runs
  std::string why;                           // "below 64 KiB", "GRIDBCAST_SMALL_BYTES given", ...
  std::vector<Prediction> predictions;       // the model's, fastest first (empty: none priced)
  std::uint64_t priced_bytes = 0;            // the size the class was priced at
  double bound_seconds = 0;                  // the max-flow bound at that size
  std::string method;                        // "simulated" or "analytic"
};
inline constexpr int kMaxSimulatedRanks = 256;
inline constexpr std::uint64_t kMaxSimulatedBytes = std::uint64_t{4} << 20;

Selection select_broadcast(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds = {}, const CostModel& model = {});
// What `auto` runs: select_broadcast(...).chosen, without the pricing.
Algorithm select_algorithm(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds = {});
// "auto runs binomial (below 64 KiB); the model: multilane (segment 16 KiB)
// 0.0107 s = 1.06 x the bound, binomial 0.0108 s = 1.07 x (simulated at 768 B)"
std::string describe(const Selection& s);

}  // namespace gridbcast::topology
