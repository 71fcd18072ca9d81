// A topology restricted to some of its ranks: what a broadcast inside a
// subgroup (an MPI communicator from split or dup) plans over. Pure data.
#pragma once

#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::runtime {

// Node i of the result is grid.nodes[ranks[i]]; `ranks` must be ascending,
// unique and in range (std::invalid_argument otherwise), so every site's nodes
// stay contiguous. Sites without a member are dropped; WAN links between the
// remaining sites are kept, and two remaining sites that were only connected
// through dropped ones get a link summarising that path (latencies added, the
// smallest bandwidth and stream count), so every WAN path still exists.
topology::Grid restrict_grid(const topology::Grid& grid, const std::vector<int>& ranks);

}  // namespace gridbcast::runtime
