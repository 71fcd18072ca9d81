// Plans as text for people, JSON for tools and Graphviz dot for pictures.
#pragma once

#include <string>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

std::string json_escape(const std::string& s);
// {"algorithm", "ranks", "root", "size", "wan_streams", "nodes": [...], "transfers": [...]}
std::string plan_to_json(const Grid& grid, const Plan& plan);
std::string plan_to_text(const Grid& grid, const Plan& plan);
// Sites as clusters, lanes as colours, WAN hops bold.
std::string plan_to_dot(const Grid& grid, const Plan& plan);

}  // namespace gridbcast::topology
