#include "topology/plan/format.hpp"

#include <cstdio>
#include <map>
#include <sstream>

#include "topology/bound.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::topology {

namespace {

// A DOT quoted string's contents: quotes, backslashes and newlines escaped, other
// control characters as spaces (names come from the topology file).
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return out;
}

}  // namespace

std::string rate_limits_text(const Grid& grid) {
  std::string out = "limits:";
  std::string sep = " ";
  if (grid.max_rate_bps > 0) {
    out += sep + "each node sends at most " + format_bandwidth(grid.max_rate_bps) + " (max_rate)";
    sep = "; ";
  }
  for (const WanLink& l : grid.wan)
    if (l.max_rate_bps > 0) {
      out += sep + "WAN " + grid.sites[static_cast<size_t>(l.site_a)].name + " - " +
             grid.sites[static_cast<size_t>(l.site_b)].name + " at most " +
             format_bandwidth(l.max_rate_bps) + " each way";
      sep = "; ";
    }
  return out;
}

std::string plan_to_text(const Grid& grid, const Plan& plan) {
  std::ostringstream o;
  auto name = [&](int r) {
    return grid.nodes[static_cast<size_t>(r)].name + "(" + std::to_string(r) + ")";
  };
  o << algorithm_name(plan.algorithm) << ": " << plan.ranks << " ranks in " << grid.sites.size()
    << " site(s), root " << name(plan.root) << ", " << format_bytes(plan.size) << ", "
    << plan.transfers.size() << " transfers, " << plan.lanes << " lanes\n";
  if (grid.size() > 1) {
    const MaxFlowBound bound = max_flow_bound(grid, plan.root);
    char line[160];
    std::snprintf(line, sizeof line, "bound: max-flow %.6f s, simple %.6f s; ",
                  bound.seconds(plan.size), lower_bound_seconds(grid, plan.root, plan.size));
    o << line << format_bandwidth(bound.rate_bps) << " to " << name(bound.bottleneck_rank)
      << " at worst\n";
  }
  if (grid.rate_limited()) o << rate_limits_text(grid) << "\n";
  const std::vector<LinkPace> paces = default_link_paces(grid, plan);
  if (!paces.empty()) {
    if (grid.pace_lanes && plan.algorithm == Algorithm::kMultilane)
      o << "paced: each connection at most its part of the NICs and WAN links "
           "(defaults.pace_lanes)\n";
    else
      o << "paced: each connection at most its part of the rate limits\n";
  }
  // Group by sending site, then by sender, so each site's trees read top-down.
  std::map<int, std::vector<size_t>> by_site;
  for (size_t i = 0; i < plan.transfers.size(); ++i)
    by_site[grid.site_of(plan.transfers[i].from)].push_back(i);
  for (const auto& [site, idx] : by_site) {
    o << "site " << grid.sites[static_cast<size_t>(site)].name << ":\n";
    for (size_t i : idx) {
      const auto& t = plan.transfers[i];
      const bool wan = grid.site_of(t.from) != grid.site_of(t.to);
      o << "  " << name(t.from) << " lane " << t.lane_from << (wan ? " ==WAN==> " : " --> ")
        << name(t.to) << " lane " << t.lane_to << "  bytes [" << t.offset << ", "
        << t.offset + t.length << ")";
      const LinkPace* pace = find_pace(paces, t.from, t.to, t.lane_from, t.lane_to);
      if (t.streams > 1) o << " over " << t.streams << " streams";
      if (pace && t.streams > 1 && pace->streams < t.streams)
        o << " (" << pace->streams << " with segments)";
      if (pace)
        o << ", paced at " << format_bandwidth(pace->bytes_per_second * 8)
          << (pace->streams > 1 ? " each" : "");
      o << "\n";
    }
    for (const auto& m : plan.multicasts) {
      if (grid.site_of(m.from) != site) continue;
      o << "  " << name(m.from) << " lane " << m.lane << " ~~multicast~~> " << m.to.size()
        << " rank(s) of the site  bytes [" << m.offset << ", " << m.offset + m.length
        << ") (best effort; the transfers deliver every byte)\n";
    }
  }
  return o.str();
}

std::string plan_to_dot(const Grid& grid, const Plan& plan) {
  static const char* kLaneColours[] = {"blue", "red"};
  std::ostringstream o;
  o << "digraph gridbcast {\n  label=\"" << algorithm_name(plan.algorithm) << ", " << plan.ranks
    << " ranks, root " << plan.root << ", " << plan.size << " bytes\";\n  node [shape=box];\n";
  for (size_t s = 0; s < grid.sites.size(); ++s) {
    o << "  subgraph cluster_" << s << " {\n    label=\"" << dot_escape(grid.sites[s].name)
      << "\";\n";
    for (int r : grid.sites[s].ranks)
      o << "    r" << r << " [label=\"" << dot_escape(grid.nodes[static_cast<size_t>(r)].name)
        << "\\nrank " << r << "\"" << (r == plan.root ? ", style=filled, fillcolor=gold" : "")
        << "];\n";
    o << "  }\n";
  }
  for (const auto& t : plan.transfers) {
    const bool wan = grid.site_of(t.from) != grid.site_of(t.to);
    o << "  r" << t.from << " -> r" << t.to << " [color=" << kLaneColours[t.lane_from % 2]
      << ", label=\"[" << t.offset << "," << t.offset + t.length << ")"
      << (t.streams > 1 ? " x" + std::to_string(t.streams) : "") << "\""
      << (wan ? ", style=bold, penwidth=3" : "") << "];\n";
  }
  for (const auto& m : plan.multicasts)
    for (int r : m.to)
      o << "  r" << m.from << " -> r" << r << " [style=dashed, color=gray, label=\"multicast\"];\n";
  o << "}\n";
  return o.str();
}

}  // namespace gridbcast::topology
