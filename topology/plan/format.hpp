// Plans as text for people and Graphviz dot for pictures (JSON for tools is
// rendered in cli/json_out.cpp).
#pragma once

#include <string>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

std::string plan_to_text(const Grid& grid, const Plan& plan);
// Sites as clusters, lanes as colours, WAN hops bold.
std::string plan_to_dot(const Grid& grid, const Plan& plan);

}  // namespace gridbcast::topology
