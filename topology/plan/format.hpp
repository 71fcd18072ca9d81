// Plans as text for people and Graphviz dot for pictures (JSON for tools is
// rendered in cli/json_out.cpp).
#pragma once

#include <string>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

std::string plan_to_text(const Grid& grid, const Plan& plan);
// "limits: each node sends at most 2 Gbit/s (max_rate); WAN a - b at most
// 500 Mbit/s each way": the grid's rate limits (Grid::rate_limited).
std::string rate_limits_text(const Grid& grid);
// Sites as clusters, lanes as colours, WAN hops bold.
std::string plan_to_dot(const Grid& grid, const Plan& plan);

}  // namespace gridbcast::topology
