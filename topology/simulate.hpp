// `gridbcast simulate`: prices a Plan with a cost model instead of a network.
//
// Every transfer is cut into the executor's segments (topology/plan/segments.hpp:
// a link's segments dealt round-robin over its streams), each stream sending
// its own in plan order. A segment is ready when the bytes it carries have reached its
// sender and the one before it on its stream has been written; it then occupies
// the sender's NIC (egress), the receiver's NIC (ingress) and, between sites,
// the WAN bundle, each for bytes / that resource's rate, and arrives one hop
// latency after the slowest of them. Segments are placed in order of readiness
// at the earliest time every resource they need is free, also in a gap an
// earlier segment left (list scheduling with insertion), so flows through one
// NIC take turns at it: the fair share a fair-queueing host or switch gives
// them, and what the emulated grid's NICs do (docs/TESTBED.md). A WAN bundle of S streams runs at
// min(link bandwidth, S x one stream's TCP limit), where one stream is held to
// window / RTT and, under loss-based congestion control, to the Mathis limit
// MSS x 1.22 / (RTT x sqrt(loss)); under BBR to (1 - loss) x window / RTT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

// How one TCP stream reacts to random loss.
enum class Congestion {
  kLossBased,  // reno, cubic (Linux's default): held to the Mathis limit under loss
  kBbr,        // BBR: paced at the measured delivery rate; random loss only costs
               // the retransmitted share
};
// "reno", "cubic" -> kLossBased, "bbr" -> kBbr; nullopt for anything else.
std::optional<Congestion> parse_congestion(std::string_view name);

// Cut-through: a rank forwards a segment once this much of it has arrived
// (all of it, if shorter), and the rest as it lands (runtime/executor.cpp),
// so each hop delays a segment by a piece, not by the whole segment.
inline constexpr std::uint64_t kForwardBytes = 16 * 1024;

struct CostModel {
  // The hosts' default; a path whose topology names a congestion control
  // (Grid::congestion_between) uses that.
  Congestion congestion = Congestion::kLossBased;
  double lan_latency_s = 30e-6;  // one hop inside a site whose topology gives no latency
  double tcp_window_bytes = 4.0 * (1 << 20);  // largest window one stream reaches
  double mss_bytes = 1448;                    // for the loss limit
  // TCP payload per byte a shaper counts: 1448 of a 1514-byte Ethernet frame
  // (HTB and most NIC rates count headers).
  double payload_efficiency = kPayloadEfficiency;
  std::uint64_t segment_bytes = 0;  // 0: resolve_segment_bytes (the grid's, else the model's)
  // The work one segment costs each end beyond its bytes: the sender's
  // gathered write, the receiver's two reads, a coroutine's wake-up and the
  // held-bytes bookkeeping (runtime/executor.cpp), about three system calls
  // and a dispatch. It occupies the sending and the receiving lane, so
  // smaller segments fill the pipeline sooner but cost more each: the
  // trade-off the segment choice weighs (topology/select.hpp). An estimate
  // from the code, checked against the emulated grid in docs/PERFORMANCE.md.
  double segment_overhead_s = 20e-6;
  // The software time each hop adds to a segment's way without holding a
  // lane: the receiver's wake-up before it can forward. 0 on hosts with a
  // core to spare for each rank (lan_latency_s covers the stack); where
  // ranks share cores it is what a wake-up waits for one, which the
  // topology gives (defaults.hop_overhead, Grid::hop_overhead_s). It makes
  // a plan's hop count price right at small sizes, where the count decides
  // between algorithms (topology/select.hpp).
  double hop_overhead_s = 0;
  // The frame header each segment carries (kFrameOverheadBytes).
  std::uint64_t frame_header_bytes = 32;
  // How much of a segment a rank holds before it forwards it (kForwardBytes;
  // 0: the whole segment, store and forward).
  std::uint64_t forward_bytes = kForwardBytes;
};
// The model of an executor that forwards whole segments (the MPI provider's
// PMPI path), and the segment a stream's windows take (runtime/communicator.cpp).
inline CostModel store_and_forward_model() {
  CostModel m;
  m.forward_bytes = 0;
  return m;
}

// lanes/wire.hpp's kFrameHeaderBytes (topology does not see lanes/).
inline constexpr std::uint64_t kFrameOverheadBytes = 32;

struct SimResult {
  std::vector<double> finish_s;  // per rank: when it holds every byte (root: 0)
  double makespan_s = 0;         // the last rank's finish
  int slowest_rank = 0;
  std::uint64_t segments = 0;
};

// Throws std::length_error when the plan cuts into more than
// kMaxSimulatedSegments segments (simulated_segments): the simulator holds
// about 300 bytes a segment, and 1 GiB on ten sites of a thousand nodes
// would be 330 million of them (95 GiB). analytic_seconds
// (topology/select.hpp) prices such plans in one pass over the transfers.
SimResult simulate(const Grid& grid, const Plan& plan, const CostModel& model = {});

// 24 million segments: about 7 GiB of simulator state. 64 MiB on ten sites
// of a thousand nodes (20.5 million) is simulated.
inline constexpr std::uint64_t kMaxSimulatedSegments = 24'000'000;
// The segments `plan` cuts into with the model's segment, without cutting
// them: each transfer's length over the segment, rounded up.
std::uint64_t simulated_segments(const Grid& grid, const Plan& plan, const CostModel& model = {});

// The per-segment cost the model charges on `grid`: the topology's
// segment_overhead if it gives one, else the model's.
double segment_overhead(const Grid& grid, const CostModel& model);
// The per-hop software time on `grid`: the topology's hop_overhead if it
// gives one, else the model's.
double hop_overhead(const Grid& grid, const CostModel& model);

// One TCP stream's throughput limit in bytes/s under a round-trip time and loss,
// for the model's congestion control.
double tcp_stream_limit(double rtt_s, double loss, const CostModel& model);

// A WAN link whose declared streams cannot carry what a broadcast needs of
// it under its loss: one transfer's bundle of `streams` TCP streams reaches
// `carried_bps` (each held to `stream_bps` by tcp_stream_limit over the
// link's round trip), where `needed` streams (kMaxWanStreams + 1: more than
// a link may have) would carry `wanted_bps`: the
// link's rate, or less when `broadcast_bps` (the max-flow bound's rate; 0:
// none) is less. The simulator prices every transfer that crosses the link
// so; `plan` and `launch` say so. `congestion` is what decided: the link's
// or the topology's congestion control, else "" for the hosts' default
// (`hosts`).
struct StreamShortfall {
  const WanLink* link = nullptr;
  int streams = 0;
  int needed = 0;
  double stream_bps = 0, carried_bps = 0, wanted_bps = 0;
  std::string congestion;
};
std::vector<StreamShortfall> stream_shortfalls(const Grid& grid, Congestion hosts,
                                               double broadcast_bps);
// "WAN link a-b: its 8 streams carry at most 295 Mbit/s at 0.01 % loss and a
// 40 ms round trip (36.9 Mbit/s a stream under ...); 28 would carry the
// 1 Gbit/s a broadcast needs across it (...)".
std::string describe(const Grid& grid, const StreamShortfall& s);

// The lower bound for one broadcast on a topology: the message over the
// smallest of the root's outbound, any node's inbound and any WAN link's
// bandwidth, plus the longest root-to-rank WAN latency.
double lower_bound_seconds(const Grid& grid, int root, std::uint64_t bytes);

// A synthetic grid for --scale: `sites` sites of `nodes` nodes, two 10 Gbit
// NICs each, chained by 10 ms, 10 Gbit WAN links of 4 streams. `mixed_nics`:
// node n has instead, by n mod 4, 2 x 10, 25 + 10, 4 x 10 or 1 x 40 Gbit.
Grid synthetic_grid(int sites, int nodes, bool mixed_nics = false);

}  // namespace gridbcast::topology
