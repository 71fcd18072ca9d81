// A Grid written back as a site-config: YAML that load_grid_string reads into
// the same Grid (every node its own entry, every figure exact, in bits and
// nanoseconds), with optional comments beside the figures, e.g. where
// `gridbcast probe -o FILE` says how and when each was measured.
#pragma once

#include <map>
#include <string>

#include "topology/grid.hpp"

namespace gridbcast::topology {

// Comments by place: "top" (before everything), "site:S" (site S's latency),
// "nic:R:J" (NIC J of rank R's bandwidth), "wan:I:latency",
// "wan:I:bandwidth". A comment is one line; line breaks in it are spaces.
using GridComments = std::map<std::string, std::string>;

std::string grid_to_yaml(const Grid& grid, const GridComments& comments = {});

}  // namespace gridbcast::topology
