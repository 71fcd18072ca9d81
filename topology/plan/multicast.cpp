// Multicast inside each site, a reliable ring behind it (Hoefler, Siebert and
// Rehm, "A practically constant-time MPI Broadcast Algorithm for large-scale
// InfiniBand clusters with Multicast", 2007), sites chained over the WAN:
//
//   site A:  root ~~multicast lane 0~~> every other node of A
//            root ──► a1 ──► a2 ──► ... ──► tail       (the ring, ring lane)
//   WAN:     tail(A) lane 0 ══► entry(B) lane 0        (the site chain's streams)
//   site B:  entry ~~multicast~~> ...; entry ──► b1 ──► ... ──► tail(B) ══► ...
//
// The plan's transfers are a pipelined chain, so they alone deliver every
// byte: the runtime's datagrams are best effort. What multicast buys is that
// every ring member holds (and forwards) a segment as soon as its datagrams
// arrived, so the ring's hops run side by side and a site's latency does not
// grow with its size; a member that lost datagrams waits for its predecessor.
// The ring runs on lane 1 when ranks have two lanes or more, so the datagrams
// (lane 0) and the ring's TCP do not share a NIC on two-NIC nodes.
#include <stdexcept>
#include <string>

#include "topology/plan/builder.hpp"

namespace gridbcast::topology {
namespace {

// The node a site's data enters by: the root in its own site, elsewhere the
// node with the most bandwidth (the lowest rank on a tie).
int entry_node(const Grid& grid, int site, int root) {
  const auto& ranks = grid.sites[static_cast<size_t>(site)].ranks;
  if (grid.site_of(root) == site) return root;
  int best = ranks.front();
  for (int r : ranks)
    if (grid.nodes[static_cast<size_t>(r)].total_bandwidth_bps() >
        grid.nodes[static_cast<size_t>(best)].total_bandwidth_bps())
      best = r;
  return best;
}

}  // namespace

Plan build_multicast(const Grid& grid, int root, std::uint64_t size) {
  if (std::string why = algorithm_unavailable(grid, Algorithm::kMulticast); !why.empty())
    throw std::invalid_argument(why);
  detail::PlanBuilder b(grid, Algorithm::kMulticast, root, size);
  constexpr int kMulticastLane = 0;
  const int ring_lane = b.plan_lanes() >= 2 ? 1 : 0;
  std::vector<Multicast> multicasts;
  int previous_tail = -1;
  for (int site : grid.site_chain(grid.site_of(root))) {
    const auto& ranks = grid.sites[static_cast<size_t>(site)].ranks;
    const int entry = entry_node(grid, site, root);
    if (previous_tail >= 0) b.send(previous_tail, entry, 0, size, 0, 0);
    // The ring: the entry, then the site's other ranks in ascending order
    // from the entry on, wrapping around.
    std::vector<int> ring{entry};
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] > entry) ring.push_back(ranks[i]);
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] < entry) ring.push_back(ranks[i]);
    if (ring.size() > 1 && size > 0) {
      Multicast m{entry, kMulticastLane, 0, size, {}};
      for (int r : ranks)
        if (r != entry) m.to.push_back(r);
      multicasts.push_back(std::move(m));
    }
    for (size_t i = 1; i < ring.size(); ++i) b.send(ring[i - 1], ring[i], 0, size, ring_lane);
    previous_tail = ring.back();
  }
  Plan plan = std::move(b).finish();
  plan.multicasts = std::move(multicasts);
  return plan;
}

}  // namespace gridbcast::topology
