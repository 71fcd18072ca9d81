// `gridbcast probe`: what to measure, and what the measurements say, as pure
// data (the runtime moves the bytes, runtime/probe.hpp). Three steps:
//
//   probe_grid(declared)        the grid the probe job runs on: one lane per
//                               NIC (lane j binds NIC j), nothing paced
//   probe_schedule(grid)        phases of flows, the same on every rank; each
//                               node takes part in a constant number of flows
//                               per phase, so the time does not grow with the
//                               grid
//   estimate(grid, phases, samples)
//                               per NIC its send and receive rate, per site
//                               its one-hop latency, per WAN link its latency
//                               and bandwidth; the measured Grid and a table
//                               of declared against measured
//
// The phases, each run by every rank at once after the launcher's Go:
//
//   latency          ping-pong on a ring per NIC index inside every site
//                    (node i -> i+1), and between two nodes of each WAN link
//   nic j alone      (nodes with two or more NICs) rate on ring +1 of NIC j,
//                    for every NIC index but the last
//   ring ahead       rate on the rings of every NIC index at once, i -> i+1
//   ring behind      the same the other way, i -> i-1: every NIC sends to
//                    and receives from both its ring neighbours, so a fast
//                    NIC next to a fast one is seen at its own rate
//   wan, one way     every WAN link from its first site to its second,
//                    between up to `wan_pairs` node pairs on each common
//                    NIC, each flow with the link's stream count
//   wan, other way   the same back
//   confirm          (only where needed: confirm_phases) fans for NICs that
//                    met only slower partners and measured below their claim
//
// A link i -> k runs at min(send of i, receive of k): a NIC's send rate is the
// best of its flows out, its receive rate the best of its flows in, over the
// two ring phases; the NIC's figure (one for both ways) is their mean when within 25 % of each
// other, else the higher. Measured "all at once" is what a broadcast, which uses every lane, gets;
// "alone" only shows whether NICs share a rate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::topology {

struct ProbeSettings {
  // Each rate phase inside the sites; its window is 40 % of it (a shaper's
  // burst counts less in a longer one).
  double lan_seconds = 0.4;
  // Each WAN rate phase, at least 60 one-way latencies of the slowest link
  // (TCP needs a few round trips to open its window).
  double wan_seconds = 0.75;
  double latency_seconds = 0.2;  // the ping phase: pings until this or `pings`
  int pings = 12;                // per latency flow, at most (at least 2 are made)
  int wan_pairs = 8;             // node pairs per WAN link and direction, at most
};

enum class ProbeKind : std::uint8_t { kRate = 0, kLatency = 1 };

// One measurement. On the probe grid lane j is NIC j at both ends, so
// (nic_from, nic_to) are also the connection's lanes.
struct ProbeFlow {
  ProbeKind kind = ProbeKind::kRate;
  int from = 0;
  int to = 0;
  int nic_from = 0;
  int nic_to = 0;
  int streams = 1;
  // The connections' stream ids: stream .. stream + streams - 1. No two flows
  // of a schedule share a connection (from, to, nics, stream), so a receiver
  // may close its flow's connections when its window is over.
  int stream = 0;
  int wan = -1;  // index into Grid::wan when the flow crosses that link, else -1

  bool operator==(const ProbeFlow&) const = default;
};

// What a phase measures; the estimate reads its samples by it.
enum class ProbePhaseKind : std::uint8_t {
  kLatency = 0,  // ping-pong inside the sites and over every WAN link
  kAlone = 1,    // one NIC index's ring alone
  kRing = 2,     // every NIC index's ring at once (ahead, or behind)
  kWan = 3,      // every WAN link one way
  kConfirm = 4,  // fans for NICs that met only slower partners
};
inline constexpr std::uint8_t kLastProbePhaseKind = 4;

struct ProbePhase {
  std::string name;
  double seconds = 0;
  std::vector<ProbeFlow> flows;
  ProbePhaseKind kind = ProbePhaseKind::kRing;
};

// A rate flow's receiver counts what arrives in the middle of the phase, from
// 30 % to 70 % of its seconds after the rank began it (the launcher's Go):
// every flow of the phase runs then (they start within a few round trips of
// the Go), so the rates of flows that share a NIC or a link add up. At the
// end of the window it closes the flow's connections and the sender stops:
// no queue is drained.
inline constexpr double kProbeWindowFrom = 0.3;
inline constexpr double kProbeWindowTo = 0.7;
// Stream ids of the flows inside the sites count down from here, one per
// phase; WAN rate flows use 0 and up, below them.
inline constexpr int kProbeTopStream = 63;

// What the measuring end of a flow found: the receiver of a rate flow, the
// sender of a latency flow.
struct ProbeSample {
  int flow = 0;             // index into its phase's flows
  std::uint64_t bytes = 0;  // rate: payload bytes counted in the window
  double seconds = 0;       // rate: the window's length
  double rtt_min_s = 0;     // latency: the least round trip
  double rtt_median_s = 0;
  int pings = 0;

  double rate_bps() const { return seconds > 0 ? static_cast<double>(bytes) * 8 / seconds : 0; }
};

// The grid the probe job runs on: `declared` with every NIC at one bandwidth
// and as many lanes as the largest NIC count (at least 2), so lane j binds
// NIC j on every node that has one, and no pacing.
Grid probe_grid(const Grid& declared);

// Throws std::invalid_argument for settings out of range.
std::vector<ProbePhase> probe_schedule(const Grid& grid, const ProbeSettings& settings = {});

// A pairwise flow runs at the slower end: a NIC whose every partner on the
// rings was slower than it cannot be told from a NIC as slow as they are (a
// lone 100 Mbit/s NIC among 50 Mbit/s ones measures 50). When such a NIC
// measured more than 25 % below its declared figure, a confirmation phase
// gives it partners of its own, enough of them together to carry the
// declared figure, sending to it and receiving from it at once ("fan in and
// out"); its figure is then the sum. "Measured more than 25 % below" is
// below 0.75 of the declared figure; "only slower partners" is no partner
// more than 15 % faster than it. At most kMaxConfirmPhases in all, each
// partner in one target's fan per phase; their stream ids are reserved by
// the schedule. Empty when nothing needs confirming. `phases` and `samples`
// are what ran so far.
inline constexpr int kMaxConfirmPhases = 2;
std::vector<ProbePhase> confirm_phases(const Grid& declared, const std::vector<ProbePhase>& phases,
                                       const std::vector<std::vector<ProbeSample>>& samples,
                                       const ProbeSettings& settings = {});

// The flows of `phase` in which `rank` sends or receives.
std::vector<int> flows_of(const ProbePhase& phase, int rank);

// One line of the declared-against-measured table.
struct ProbeRow {
  std::string what;  // "a1 nic 0 (10.1.1.1) send", "site a one hop", "wan a-b latency"
  std::string unit;  // "bit/s" or "s"
  std::optional<double> declared;  // none: the topology says nothing of it
  std::optional<double> measured;  // none: nothing measured it
  bool lower_bound = false;  // the measurement is a floor (e.g. the NICs, not the WAN, limited it)
  std::string note;
  // Measured and declared differ by more than 25 % of the declared figure
  // (a lower bound only when it is above the declared figure by that much).
  bool flagged() const;
};

struct ProbeEstimate {
  Grid measured;                   // declared, with every measured figure put in
  std::vector<ProbeRow> rows;      // in grid order: NICs, sites, WAN links
  std::vector<std::string> notes;  // NICs that share a rate, what was not measured
  int flagged = 0;
};

// `declared` is the user's topology; `phases` the schedule that ran (on
// probe_grid(declared)); `samples[i]` every sample of phase i. Throws
// std::invalid_argument for samples that do not fit the schedule.
ProbeEstimate estimate(const Grid& declared, const std::vector<ProbePhase>& phases,
                       const std::vector<std::vector<ProbeSample>>& samples);

}  // namespace gridbcast::topology
