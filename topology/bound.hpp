// The max-flow lower bound for one broadcast (issue 14, "The right bound").
//
// A broadcast from the root at rate r is possible exactly when every receiver
// v can get r from the root on its own: Edmonds' theorem on packing
// arborescences says the best rate any broadcast sustains is
//
//     lambda = min over receivers v of maxflow(root -> v)
//
// in the grid's capacity graph (docs/ALGORITHMS.md, "The max-flow bound"):
//
//          WAN link (bw, both ways)
//   [sw A] <----------------------> [sw B]      one vertex per site's switch
//    ^   |                           ^   |
//  C_u  C_u                        C_w  C_w      per node u: out_u -> sw (C_u),
//    |   v                           |   v       sw -> in_u (C_u), in_u -> out_u (inf)
//  out_u <- in_u                   out_w <- in_w
//
// C_u is the node's total NIC bandwidth, each direction. Pure: no sockets.
#pragma once

#include <cstdint>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::topology {

// One class of receivers that share a max-flow: non-root nodes of one site with
// the same total NIC bandwidth (swapping two of them maps the graph onto itself
// and fixes the root, so their max-flows are equal).
struct ReceiverClass {
  int rank = 0;          // the lowest rank of the class, for reports
  int members = 0;       // how many receivers it stands for
  double rate_bps = 0;   // maxflow(root -> rank), bits per second
  double latency_s = 0;  // least one-way WAN latency from the root's site
};

struct MaxFlowBound {
  std::vector<ReceiverClass> classes;  // empty for a grid of one node
  double rate_bps = 0;                 // lambda: the smallest class rate
  int bottleneck_rank = -1;            // a receiver with rate lambda (-1: none)
  double latency_s = 0;                // the largest class latency

  // max over classes of latency + bytes * 8 / rate: no receiver holds the last
  // byte before its own path latency plus its own cut's time (see bound.cpp).
  double seconds(std::uint64_t bytes) const;
};

// Throws std::out_of_range for a root outside the grid and std::invalid_argument
// naming the rank when some receiver cannot be reached (max-flow 0).
MaxFlowBound max_flow_bound(const Grid& grid, int root);

// max_flow_bound(grid, root).seconds(bytes); 0 for a grid of one node.
double max_flow_bound_seconds(const Grid& grid, int root, std::uint64_t bytes);

}  // namespace gridbcast::topology
