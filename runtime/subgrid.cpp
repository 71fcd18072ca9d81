#include "runtime/subgrid.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

namespace gridbcast::runtime {
namespace {

int find(std::vector<int>& parent, int x) {
  while (parent[static_cast<size_t>(x)] != x)
    x = parent[static_cast<size_t>(x)] =
        parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
  return x;
}

}  // namespace

topology::Grid restrict_grid(const topology::Grid& grid, const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= grid.size())
      throw std::invalid_argument("rank " + std::to_string(ranks[i]) +
                                  " is outside the topology's " + std::to_string(grid.size()) +
                                  " ranks");
    if (i > 0 && ranks[i] <= ranks[i - 1])
      throw std::invalid_argument("a subgroup's ranks must be ascending and unique");
  }
  topology::Grid out;
  out.name = grid.name;
  out.source = grid.source;
  out.segment_bytes = grid.segment_bytes;
  out.congestion = grid.congestion;
  out.pace_lanes = grid.pace_lanes;
  out.max_rate_bps = grid.max_rate_bps;
  out.segment_overhead_s = grid.segment_overhead_s;
  out.hop_overhead_s = grid.hop_overhead_s;
  // The members' transport opened the world's lanes: plan for exactly those.
  out.lanes = grid.lane_count();
  std::vector<int> site_map(grid.sites.size(), -1);  // old site -> new site
  for (int r : ranks) {
    const int old_site = grid.site_of(r);
    int& s = site_map[static_cast<size_t>(old_site)];
    if (s < 0) {
      s = static_cast<int>(out.sites.size());
      topology::Site site;
      site.name = grid.sites[static_cast<size_t>(old_site)].name;
      site.where = grid.sites[static_cast<size_t>(old_site)].where;
      site.multicast = grid.sites[static_cast<size_t>(old_site)].multicast;
      out.sites.push_back(site);
    }
    topology::Node node = grid.nodes[static_cast<size_t>(r)];
    node.site = s;
    out.sites[static_cast<size_t>(s)].ranks.push_back(out.size());
    out.nodes.push_back(std::move(node));
  }
  // Sites come out in the order of their first member; since ranks ascend and
  // sites are contiguous in rank order, that is the original site order.
  std::vector<int> parent(out.sites.size());
  std::iota(parent.begin(), parent.end(), 0);
  // The original links each of out.wan stands for (its path), for the limits.
  std::vector<std::vector<const topology::WanLink*>> hops_of;
  for (const auto& link : grid.wan) {
    const int a = site_map[static_cast<size_t>(link.site_a)];
    const int b = site_map[static_cast<size_t>(link.site_b)];
    if (a < 0 || b < 0) continue;
    topology::WanLink l = link;
    l.site_a = a;
    l.site_b = b;
    out.wan.push_back(l);
    hops_of.push_back({&link});
    parent[static_cast<size_t>(find(parent, a))] = find(parent, b);
  }
  std::vector<int> old_of(out.sites.size());
  for (size_t s = 0; s < site_map.size(); ++s)
    if (site_map[s] >= 0) old_of[static_cast<size_t>(site_map[s])] = static_cast<int>(s);
  for (int a = 0; a < static_cast<int>(out.sites.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(out.sites.size()); ++b) {
      if (find(parent, a) == find(parent, b)) continue;
      std::vector<const topology::WanLink*> path;
      try {
        path = grid.wan_path(old_of[static_cast<size_t>(a)], old_of[static_cast<size_t>(b)]);
      } catch (const std::invalid_argument&) {
        continue;  // not connected in the original either
      }
      topology::WanLink l;
      l.site_a = a;
      l.site_b = b;
      l.bandwidth_bps = 0;
      l.streams = 0;
      double kept = 1.0;
      for (const auto* hop : path) {
        l.latency_s += hop->latency_s;
        l.bandwidth_bps = l.bandwidth_bps == 0 ? hop->bandwidth_bps
                                               : std::min(l.bandwidth_bps, hop->bandwidth_bps);
        l.streams = l.streams == 0 ? hop->streams : std::min(l.streams, hop->streams);
        l.tls = l.tls || hop->tls;
        if (l.congestion.empty()) l.congestion = hop->congestion;
        kept *= 1.0 - hop->loss;
        l.where = hop->where;
      }
      l.loss = 1.0 - kept;
      if (l.streams == 0) l.streams = 1;
      out.wan.push_back(l);
      hops_of.push_back(path);
      parent[static_cast<size_t>(find(parent, a))] = find(parent, b);
    }
  }
  // A WAN link's max_rate is for everything that crosses it: where several
  // links of the subgrid stand for paths through one original link, each gets
  // an equal part of its limit, so their paces together stay within it.
  std::map<const topology::WanLink*, int> uses;
  for (const auto& hops : hops_of)
    for (const auto* hop : hops) ++uses[hop];
  for (size_t i = 0; i < out.wan.size(); ++i) {
    double limit = 0;
    for (const auto* hop : hops_of[i])
      if (hop->max_rate_bps > 0) {
        const double part = hop->max_rate_bps / uses.at(hop);
        limit = limit == 0 ? part : std::min(limit, part);
      }
    out.wan[i].max_rate_bps = limit;
  }
  return out;
}

}  // namespace gridbcast::runtime
