#include "topology/plan/pacing.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace gridbcast::topology {

namespace {

struct Link {
  int from, to, lane_from, lane_to;
  auto key() const { return std::tie(from, to, lane_from, lane_to); }
  bool operator<(const Link& o) const { return key() < o.key(); }
};

// One end of the plan's links: per (rank, lane) how many links use it, and per
// (rank, NIC) which lanes do.
struct Side {
  std::map<std::pair<int, int>, int> links_on_lane;
  std::map<std::pair<int, int>, std::set<int>> lanes_on_nic;

  void add(const Grid& grid, int rank, int lane) {
    ++links_on_lane[{rank, lane}];
    lanes_on_nic[{rank, nic(grid, rank, lane)}].insert(lane);
  }
  static int nic(const Grid& grid, int rank, int lane) {
    return grid.nodes[static_cast<size_t>(rank)].lane_nic_index(lane);
  }
  // The bandwidth (bit/s) one link on this lane can count on.
  double part(const Grid& grid, int rank, int lane) const {
    const int n = nic(grid, rank, lane);
    const double nic_bps =
        grid.nodes[static_cast<size_t>(rank)].nics[static_cast<size_t>(n)].bandwidth_bps;
    return nic_bps / static_cast<double>(lanes_on_nic.at({rank, n}).size()) /
           static_cast<double>(links_on_lane.at({rank, lane}));
  }
};

}  // namespace

std::vector<LinkPace> link_paces(const Grid& grid, const Plan& plan) {
  if (!grid.pace_lanes || plan.algorithm != Algorithm::kMultilane) return {};
  std::map<Link, int> streams;  // the most streams a transfer on the link asks for
  for (const Transfer& t : plan.transfers) {
    if (t.length == 0) continue;
    int& s = streams[{t.from, t.to, t.lane_from, t.lane_to}];
    s = std::max({s, t.streams, 1});
  }
  Side out, in;
  // Plan links over each WAN link, by direction (site the data leaves).
  std::map<std::pair<const WanLink*, int>, int> over_wan;
  for (const auto& [l, s] : streams) {
    out.add(grid, l.from, l.lane_from);
    in.add(grid, l.to, l.lane_to);
    const int sa = grid.site_of(l.from), sb = grid.site_of(l.to);
    if (sa == sb) continue;
    int site = sa;
    for (const WanLink* w : grid.wan_path(sa, sb)) {
      ++over_wan[{w, site}];
      site = w->site_a == site ? w->site_b : w->site_a;
    }
  }
  std::vector<LinkPace> paces;
  for (const auto& [l, s] : streams) {
    double bps = std::min(out.part(grid, l.from, l.lane_from), in.part(grid, l.to, l.lane_to));
    const int sa = grid.site_of(l.from), sb = grid.site_of(l.to);
    int site = sa;
    if (sa != sb)
      for (const WanLink* w : grid.wan_path(sa, sb)) {
        bps = std::min(bps, w->bandwidth_bps / over_wan.at({w, site}));
        site = w->site_a == site ? w->site_b : w->site_a;
      }
    if (!(bps > 0) || bps == std::numeric_limits<double>::infinity()) continue;
    paces.push_back({l.from, l.to, l.lane_from, l.lane_to,
                     bps / static_cast<double>(s) * kPacedPayloadShare / 8});
  }
  return paces;
}

double pace_of(const std::vector<LinkPace>& paces, int from, int to, int lane_from, int lane_to) {
  const auto key = std::tie(from, to, lane_from, lane_to);
  const auto it =
      std::lower_bound(paces.begin(), paces.end(), key, [](const LinkPace& p, const auto& k) {
        return std::tie(p.from, p.to, p.lane_from, p.lane_to) < k;
      });
  if (it == paces.end() || std::tie(it->from, it->to, it->lane_from, it->lane_to) != key) return 0;
  return it->bytes_per_second;
}

}  // namespace gridbcast::topology
