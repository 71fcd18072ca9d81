#include "topology/plan/pacing.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "topology/plan/segments.hpp"

namespace gridbcast::topology {

namespace {

struct Link {
  int from, to, lane_from, lane_to;
  auto key() const { return std::tie(from, to, lane_from, lane_to); }
  bool operator<(const Link& o) const { return key() < o.key(); }
};

}  // namespace

std::map<std::tuple<int, int, bool>, double> lane_shares(const Grid& grid, const Plan& plan) {
  std::map<std::tuple<int, int, bool>, std::set<int>> lanes_on_nic;  // (rank, NIC, egress)
  auto use = [&](int rank, int lane, bool egress) {
    const int nic = grid.nodes[static_cast<size_t>(rank)].lane_nic_index(lane);
    lanes_on_nic[{rank, nic, egress}].insert(lane);
  };
  for (const Transfer& t : plan.transfers) {
    use(t.from, t.lane_from, true);
    use(t.to, t.lane_to, false);
  }
  std::map<std::tuple<int, int, bool>, double> shares;
  for (const auto& [key, lanes] : lanes_on_nic) {
    const auto [rank, nic, egress] = key;
    const double bps =
        grid.nodes[static_cast<size_t>(rank)].nics[static_cast<size_t>(nic)].bandwidth_bps /
        static_cast<double>(lanes.size());
    for (const int lane : lanes) shares[{rank, lane, egress}] = bps;
  }
  // A node's max_rate caps what it sends over all its NICs: the lanes it
  // sends on share it in proportion to their parts of the NICs.
  if (grid.max_rate_bps > 0) {
    std::map<int, double> sending;  // rank -> its egress shares together
    for (const auto& [key, bps] : shares)
      if (std::get<2>(key)) sending[std::get<0>(key)] += bps;
    for (auto& [key, bps] : shares) {
      const double total = std::get<2>(key) ? sending.at(std::get<0>(key)) : 0;
      if (total > grid.max_rate_bps) bps *= grid.max_rate_bps / total;
    }
  }
  return shares;
}

namespace {

// pace_lanes holds multilane plans to their lanes' parts.
bool lanes_paced(const Grid& grid, const Plan& plan) {
  return grid.pace_lanes && plan.algorithm == Algorithm::kMultilane;
}

}  // namespace

bool plan_is_paced(const Grid& grid, const Plan& plan) {
  return lanes_paced(grid, plan) || grid.rate_limited();
}

std::vector<LinkPace> link_paces(const Grid& grid, const Plan& plan, std::uint64_t segment_bytes) {
  if (!plan_is_paced(grid, plan)) return {};
  struct LinkUse {
    int streams = 1;             // the most streams a transfer on the link asks for
    std::uint64_t segments = 0;  // of segment_bytes, when given
    std::vector<std::pair<const WanLink*, int>> wan;  // each hop, with the site it leaves
  };
  std::map<Link, LinkUse> links;
  for (const Transfer& t : plan.transfers)
    if (t.length > 0) {
      LinkUse& u = links[{t.from, t.to, t.lane_from, t.lane_to}];
      u.streams = std::max(u.streams, t.streams);
      if (segment_bytes > 0) u.segments += (t.length + segment_bytes - 1) / segment_bytes;
    }
  // How many links each lane carries, and each WAN link each way.
  std::map<std::tuple<int, int, bool>, int> links_on_lane;  // (rank, lane, egress)
  std::map<std::pair<const WanLink*, int>, int> over_wan;
  std::map<int, int> links_from;  // rank -> the links it sends on
  for (auto& [l, u] : links) {
    ++links_from[l.from];
    ++links_on_lane[{l.from, l.lane_from, true}];
    ++links_on_lane[{l.to, l.lane_to, false}];
    int site = grid.site_of(l.from);
    for (const WanLink* w : grid.wan_path(site, grid.site_of(l.to))) {
      u.wan.emplace_back(w, site);
      ++over_wan[{w, site}];
      site = w->site_a == site ? w->site_b : w->site_a;
    }
  }
  const auto shares = lane_shares(grid, plan);
  auto part = [&](int rank, int lane, bool egress) {
    return shares.at({rank, lane, egress}) / links_on_lane.at({rank, lane, egress});
  };
  std::vector<LinkPace> paces;
  for (const auto& [l, u] : links) {
    double bps = std::numeric_limits<double>::infinity();
    if (lanes_paced(grid, plan)) {
      // The parts of the NICs (a node's max_rate already shared among its
      // lanes: lane_shares) and of the WAN links' rates.
      bps = std::min(part(l.from, l.lane_from, true), part(l.to, l.lane_to, false));
      for (const auto& hop : u.wan) bps = std::min(bps, hop.first->rate_bps() / over_wan.at(hop));
    } else {
      // The limits alone, in any plan: a node's max_rate split evenly over the
      // links it sends on (they run at once; a plan's later phase, as an
      // allgather after its scatter, stays below it), and a WAN link's over
      // the plan's links that cross it that way.
      if (grid.max_rate_bps > 0) bps = std::min(bps, grid.max_rate_bps / links_from.at(l.from));
      for (const auto& hop : u.wan)
        if (hop.first->max_rate_bps > 0)
          bps = std::min(bps, hop.first->max_rate_bps / over_wan.at(hop));
    }
    if (!(bps > 0) || bps == std::numeric_limits<double>::infinity()) continue;
    // The streams that carry segments share the link's part: segments are
    // dealt round-robin, so with fewer segments than streams some stay idle.
    const int carrying =
        std::max(segment_bytes > 0
                     ? static_cast<int>(std::min(static_cast<std::uint64_t>(u.streams), u.segments))
                     : u.streams,
                 1);
    paces.push_back({l.from, l.to, l.lane_from, l.lane_to,
                     bps / static_cast<double>(carrying) * kPacedPayloadShare / 8, carrying});
  }
  return paces;
}

std::vector<LinkPace> default_link_paces(const Grid& grid, const Plan& plan) {
  if (plan.size == 0 || !plan_is_paced(grid, plan)) return {};
  return link_paces(grid, plan, resolve_segment_bytes(grid, plan, 0));
}

const LinkPace* find_pace(const std::vector<LinkPace>& paces, int from, int to, int lane_from,
                          int lane_to) {
  const auto key = std::tie(from, to, lane_from, lane_to);
  const auto it =
      std::lower_bound(paces.begin(), paces.end(), key, [](const LinkPace& p, const auto& k) {
        return std::tie(p.from, p.to, p.lane_from, p.lane_to) < k;
      });
  if (it == paces.end() || std::tie(it->from, it->to, it->lane_from, it->lane_to) != key)
    return nullptr;
  return &*it;
}

double pace_of(const std::vector<LinkPace>& paces, int from, int to, int lane_from, int lane_to) {
  const LinkPace* p = find_pace(paces, from, to, lane_from, lane_to);
  return p ? p->bytes_per_second : 0;
}

}  // namespace gridbcast::topology
