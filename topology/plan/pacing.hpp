// Pacing the connections of a multilane plan, as pure data.
//
// A multilane plan keeps every one of its connections busy from start to end,
// each with an equal part of its lane's NIC. TCP does not share a NIC so:
// flows in one FIFO (a switch port, a host queue without fair queueing) split
// it unevenly for seconds, and in a pipeline the slowest flow sets everyone's
// pace. Where two lanes share a NIC, two flows between the same two nodes
// share one queue; on testbed-hetero-nics that cost 6-10 % of the rate
// (docs/PERFORMANCE.md, "Heterogeneous grids and k lanes"). Capping each
// connection at its part (SO_MAX_PACING_RATE) takes the contest away.
//
//   link L: rank A lane i -> rank B lane j, S streams
//   sender part   = bandwidth(A's NIC of lane i) / (lanes A sends on over that NIC)
//                   / (links A sends on over lane i)
//   receiver part = bandwidth(B's NIC of lane j) / (lanes B receives on over that NIC)
//                   / (links B receives on over lane j)
//   WAN part      = bandwidth(W) / (plan links over W that way), for each WAN
//                   link W on the path
//   pace of each of L's streams = min(parts) / S' x kPacedPayloadShare, bytes/s
//   S' = the streams that carry segments: S, or fewer when L has fewer
//        segments than streams (segments are dealt round-robin). Paced at
//        min(parts) / S, the one segment of 64 KiB over a WAN link of four
//        streams took four times as long (testbed-hetero-nics).
//
// Only multilane plans: there every link is busy throughout, while in trees
// and chains a link's part changes as others start and stop. Only when the
// grid asks (defaults.pace_lanes), since it trusts the bandwidths the topology
// declares: a NIC faster than declared would be held to the declared rate.
//
// Rate limits (defaults.max_rate or --max-rate for what each node sends in
// all; a WAN link's max_rate for all that crosses it each way) are paced in
// every plan: with pace_lanes in multilane as parts of the lanes' shares
// (lane_shares scales a node's sending lanes down to its max_rate) and of the
// WAN links' rates (WanLink::rate_bps); otherwise
//   pace of each of L's streams = min(max_rate / (links A sends on),
//                                     WAN max_rate / (plan links over W that way))
//                                 / S x kPacedPayloadShare
// The executor runs a node's transfers at once (each as its bytes arrive),
// so an even split adds up to the limit; where a plan's phases use different
// links (scatter, then allgather) each phase stays below it.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

// TCP payload per byte a NIC's bandwidth counts: 1448 bytes of data (1500-byte
// IP packet, TCP timestamps) in a 1514-byte Ethernet frame. Kernel pacing counts
// payload; shapers and switch ports count frames.
inline constexpr double kPacedPayloadShare = kPayloadEfficiency;

struct LinkPace {
  int from = 0;
  int to = 0;
  int lane_from = 0;
  int lane_to = 0;
  double bytes_per_second = 0;  // for each stream of the link; never 0 in the list
  int streams = 1;              // the streams that share the link's part (carry segments)

  bool operator==(const LinkPace&) const = default;
};

// What each lane `plan` uses gets of its NIC, in bit/s, keyed (rank, lane,
// egress): the NIC's bandwidth over the plan's lanes that use it that way, as
// TCP shares a NIC among connections that all have data. A lane alone on its
// NIC (or the only one the plan uses there) gets all of it. A node's sending
// lanes are scaled down together to its max_rate. The simulator's lane
// resources and the paces below both start from this.
std::map<std::tuple<int, int, bool>, double> lane_shares(const Grid& grid, const Plan& plan);

// The paces of `plan`'s links on `grid`, ordered by (from, to, lane_from,
// lane_to), one per link that carries bytes; empty when nothing asks for
// pacing (pace_lanes in a multilane plan, a rate limit in any).
// With `segment_bytes` 0 every stream of a link is taken to carry segments,
// so bytes_per_second x streams is each link's part whatever the segment:
// what the simulator and the selection price (they charge a link its part,
// segment by segment). The executor gives the segment it cuts with.
std::vector<LinkPace> link_paces(const Grid& grid, const Plan& plan,
                                 std::uint64_t segment_bytes = 0);
// Whether link_paces paces anything in `plan`: pace_lanes in a multilane
// plan, a rate limit in any.
bool plan_is_paced(const Grid& grid, const Plan& plan);
// The paces the executor sets when no segment is asked for (the plan's
// resolve_segment_bytes): what `plan` prints.
std::vector<LinkPace> default_link_paces(const Grid& grid, const Plan& plan);

// One link's entry in `paces` (as link_paces returns), null when it has none.
const LinkPace* find_pace(const std::vector<LinkPace>& paces, int from, int to, int lane_from,
                          int lane_to);
// The pace of one link in `paces` (as link_paces returns), 0 when it has none.
double pace_of(const std::vector<LinkPace>& paces, int from, int to, int lane_from, int lane_to);

}  // namespace gridbcast::topology
