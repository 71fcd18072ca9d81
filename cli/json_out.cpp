#include "cli/json_out.hpp"

#include <cmath>

#include "topology/bound.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::cli {

Json number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void write_json(std::ostream& out, const Json& j) {
  out << dump_json(j) << "\n";
}

Json error_json(const std::string& command, const std::string& message, int exit_code) {
  Json e;
  e["command"] = command;
  e["message"] = message;
  e["exit_code"] = exit_code;
  return Json{{"error", std::move(e)}};
}

Json config_error_json(const std::string& command, const topology::ConfigError& e, int exit_code) {
  Json j = error_json(command, e.what(), exit_code);
  j["error"]["file"] = e.where().file;
  j["error"]["line"] = e.where().line;
  j["error"]["column"] = e.where().column;
  return j;
}

Json plan_json(const topology::Grid& grid, const topology::Plan& plan) {
  Json j;
  j["algorithm"] = topology::algorithm_name(plan.algorithm);
  j["ranks"] = plan.ranks;
  j["root"] = plan.root;
  j["size"] = plan.size;
  j["wan_streams"] = plan.wan_streams;
  j["lanes"] = plan.lanes;
  // Both bounds for this root and size: the max-flow one is what "x bound"
  // figures use; lower_bound_seconds is the simple one (docs/ALGORITHMS.md).
  const topology::MaxFlowBound bound = topology::max_flow_bound(grid, plan.root);
  j["max_flow_bound_seconds"] = number(bound.seconds(plan.size));
  j["max_flow_rate_bps"] = number(grid.size() > 1 ? bound.rate_bps : 0);
  j["max_flow_bottleneck_rank"] = bound.bottleneck_rank;
  j["lower_bound_seconds"] = number(topology::lower_bound_seconds(grid, plan.root, plan.size));
  Json& nodes = j["nodes"] = Json::array();
  for (int r = 0; r < grid.size(); ++r) {
    const auto& n = grid.nodes[static_cast<size_t>(r)];
    nodes.push_back({{"rank", r},
                     {"name", n.name},
                     {"site", grid.sites[static_cast<size_t>(n.site)].name},
                     {"nics", n.nics.size()}});
  }
  const std::vector<topology::LinkPace> paces = topology::default_link_paces(grid, plan);
  Json& transfers = j["transfers"] = Json::array();
  for (const auto& t : plan.transfers) {
    const topology::LinkPace* pace =
        topology::find_pace(paces, t.from, t.to, t.lane_from, t.lane_to);
    transfers.push_back({{"from", t.from},
                         {"to", t.to},
                         {"offset", t.offset},
                         {"length", t.length},
                         {"lane_from", t.lane_from},
                         {"lane_to", t.lane_to},
                         {"streams", t.streams},
                         {"pace_bps", number(pace ? pace->bytes_per_second * 8 : 0)},
                         {"paced_streams", pace ? pace->streams : 0}});
  }
  Json& multicasts = j["multicasts"] = Json::array();
  for (const auto& m : plan.multicasts)
    multicasts.push_back({{"from", m.from},
                          {"lane", m.lane},
                          {"offset", m.offset},
                          {"length", m.length},
                          {"to", m.to}});
  j["max_rate_bps"] = number(grid.max_rate_bps);  // appended last: older readers keep their order
  return j;
}

JsonRequest json_request(const std::vector<std::string>& args) {
  JsonRequest r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;  // what follows is a program's arguments, not ours
    if (r.command.empty() && !a.empty() && a.front() != '-') r.command = a;
    if (a == "--json") r.json = true;
    if (r.command == "plan" &&
        (a == "--format=json" || a == "-fjson" ||
         ((a == "--format" || a == "-f") && i + 1 < args.size() && args[i + 1] == "json")))
      r.json = true;
  }
  return r;
}

}  // namespace gridbcast::cli
