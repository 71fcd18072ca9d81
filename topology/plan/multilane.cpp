// Multi-lane tree broadcast (Chiba, Endo, Matsuoka), generalised to k lanes.
//
// Two lanes (k = 2). The root splits the message into halves A = [0, ceil(M/2))
// and B = the rest. In every site the members (its nodes, less the root) form
// two binary trees in heap layout; Tree A carries A and Tree B carries B, one
// lane per child:
//
//        root                 lane 0: A          lane 1: B
//       /    \.
//     a0      b0              a0 = root of Tree A, b0 = root of Tree B
//    /  \    /  \.
//   a1  a2  b1  b2            a parent sends its half to its two children,
//                             one child on each lane
//   leaf swap: a1, a2 (whose lanes are idle) send A to b0..b2, and b1, b2 send
//   B to a0..a2, each on the lane its receiver expects the other half on.
//
// Every member then receives A on one lane and B on the other, and sends at most
// one half per lane. Each site is left with exactly two idle sending slots; they
// feed the two tree roots of the next site in the chain over the WAN.
//
// Lanes: a member's lane for its own tree's half is fixed by its heap position
// (Tree A: root 0, first child 1, second child 0; Tree B: root 1, first child 0,
// second child 1); it receives the other half on the other lane. A switch per
// lane (multi-rail) means lane_from == lane_to inside a site. With these choices
// the idle slots of one tree match the other tree's needs lane by lane for every
// member count (checked for all counts by tests/topology/plan_properties_test).
//
// k lanes (Grid::lane_count, 1..8). Lanes are taken in pairs, and each pair
// runs the two-lane scheme above on two pieces of the message, with the pair's
// lanes in place of lanes 0 and 1. Even k: the message is cut into k pieces,
// piece i = [ceil(iM/k), ceil((i+1)M/k)), and the pairs are (0,1), (2,3), ...
// Odd k: 2k pieces, and pair i is lanes (i, i+1 mod k), so every lane is in two
// pairs (k = 1: lane 0 twice). Every member receives each piece once and moves
// one part, M/k, in and out per lane (odd k: two pieces of M/2k); every pair
// leaves two idle slots per site, which feed that pair's trees in the next
// site. Every flow of a node carries the same number of bytes: a NIC shared
// equally among its flows (TCP, and the emulated grid) then gives each piece
// the rate it needs. (A lane paired with itself would carry two flows of half
// the rate beside another lane's one flow, and run at 2/3 of the bound on a
// 100 + 50 Mbit/s pair: measured, docs/PERFORMANCE.md.) k = 2 is exactly the
// two-lane plan.
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "topology/plan/builder.hpp"

namespace gridbcast::topology {
namespace {

struct Slot {
  int rank;
  int lane;
};

struct Half {
  std::uint64_t offset;
  std::uint64_t length;
};

struct TreeShape {
  int root_lane;   // lane the tree root receives its half on
  int first_lane;  // lane to a first child (odd heap index)
};

constexpr TreeShape kTreeA{0, 1};
constexpr TreeShape kTreeB{1, 0};

int own_lane(const TreeShape& shape, size_t index) {
  if (index == 0) return shape.root_lane;
  return index % 2 == 1 ? shape.first_lane : 1 - shape.first_lane;
}

// One lane pair's two trees. Slots carry pair-local lanes 0 and 1; `lanes`
// maps them to the grid's lanes when a transfer is emitted.
class SiteTrees {
 public:
  SiteTrees(detail::PlanBuilder& b, std::array<Half, 2> halves, std::array<int, 2> lanes)
      : b_(b), halves_(halves), lanes_(lanes) {}

  // Builds one site. `sources[h]` sends half h to the site (the root's lanes in
  // the root site, the previous site's idle slots elsewhere). Returns the site's
  // idle sending slots, in a deterministic order.
  std::vector<Slot> build(const std::vector<int>& members, std::array<Slot, 2> sources,
                          bool sources_inside_site) {
    const size_t n = members.size();
    const size_t k_a = (n + 1) / 2;
    std::array<std::vector<int>, 2> tree;
    tree[0].assign(members.begin(), members.begin() + static_cast<long>(k_a));
    tree[1].assign(members.begin() + static_cast<long>(k_a), members.end());
    const std::array<TreeShape, 2> shapes{kTreeA, kTreeB};

    std::vector<Slot> idle;
    if (n == 0) {
      // Only the root: both its lanes stay idle for the next site.
      if (sources_inside_site) idle = {sources[0], sources[1]};
      return idle;
    }

    // Sources feed the tree roots. An empty Tree B (one member) means the lone
    // member takes B straight from the source, on its other lane.
    for (int h = 0; h < 2; ++h) {
      const auto& t = tree[static_cast<size_t>(h)];
      const Slot src = sources[static_cast<size_t>(h)];
      if (!t.empty()) {
        emit(src, t[0], h, shapes[static_cast<size_t>(h)].root_lane);
      } else {
        emit(src, tree[0][0], h, 1 - kTreeA.root_lane);
      }
    }

    // Tree edges, parent before child (heap order is causal).
    std::array<std::vector<Slot>, 2> free_slots;
    for (int h = 0; h < 2; ++h) {
      const auto& t = tree[static_cast<size_t>(h)];
      const auto& shape = shapes[static_cast<size_t>(h)];
      for (size_t i = 1; i < t.size(); ++i)
        emit(Slot{t[(i - 1) / 2], own_lane(shape, i)}, t[i], h, own_lane(shape, i));
      for (size_t i = 0; i < t.size(); ++i) {
        for (size_t c : {2 * i + 1, 2 * i + 2}) {
          if (c >= t.size())
            free_slots[static_cast<size_t>(h)].push_back(Slot{t[i], own_lane(shape, c)});
        }
      }
    }

    // Leaf swap: the idle slots of tree h deliver half h to every member of the
    // other tree, on the lane that member keeps for the other half. Shallow
    // slots go to shallow receivers to keep the depth low.
    for (int h = 0; h < 2; ++h) {
      // An empty tree's half came straight from the source (above).
      if (tree[static_cast<size_t>(h)].empty()) continue;
      auto& slots = free_slots[static_cast<size_t>(h)];
      const auto& other = tree[static_cast<size_t>(1 - h)];
      const auto& other_shape = shapes[static_cast<size_t>(1 - h)];
      std::vector<bool> used(slots.size(), false);
      for (size_t j = 0; j < other.size(); ++j) {
        const int lane = 1 - own_lane(other_shape, j);
        size_t s = 0;
        while (s < slots.size() && (used[s] || slots[s].lane != lane)) ++s;
        if (s == slots.size())
          throw std::logic_error("multilane: no idle lane-" + std::to_string(lane) +
                                 " slot for the leaf swap (" + std::to_string(n) + " members)");
        used[s] = true;
        emit(slots[s], other[j], h, lane);
      }
      for (size_t s = 0; s < slots.size(); ++s)
        if (!used[s]) idle.push_back(slots[s]);
    }
    return idle;
  }

 private:
  void emit(Slot from, int to, int half, int lane_to) {
    const Half& part = halves_[static_cast<size_t>(half)];
    b_.send(from.rank, to, part.offset, part.length, lanes_[static_cast<size_t>(from.lane)],
            lanes_[static_cast<size_t>(lane_to)]);
  }

  detail::PlanBuilder& b_;
  std::array<Half, 2> halves_;
  std::array<int, 2> lanes_;
};

// The lane pairs and their halves. Even k: pair j is lanes (2j, 2j+1) with
// parts 2j and 2j+1 of k. Odd k: pair i is lanes (i, i+1 mod k) with pieces 2i
// and 2i+1 of 2k, so each lane is in two pairs and carries two pieces (k = 1:
// lanes (0, 0), the halves). Either way every flow of a node moves the same
// number of bytes, so a NIC that shares its bandwidth equally among flows
// gives every part the rate it needs.
std::vector<SiteTrees> lane_pairs(detail::PlanBuilder& b, int k) {
  const std::uint64_t size = b.size();
  const bool odd = k % 2 == 1;
  const int pieces = odd ? 2 * k : k;
  using detail::part_begin;
  std::vector<SiteTrees> pairs;
  for (int i = 0; i < (odd ? k : k / 2); ++i) {
    const std::uint64_t begin = part_begin(size, pieces, 2 * i);
    const std::uint64_t mid = part_begin(size, pieces, 2 * i + 1);
    const std::uint64_t end = part_begin(size, pieces, 2 * i + 2);
    const std::array<int, 2> lanes =
        odd ? std::array<int, 2>{i, (i + 1) % k} : std::array<int, 2>{2 * i, 2 * i + 1};
    pairs.emplace_back(b, std::array<Half, 2>{Half{begin, mid - begin}, Half{mid, end - mid}},
                       lanes);
  }
  return pairs;
}

}  // namespace

Plan build_multilane(const Grid& grid, int root, std::uint64_t size) {
  detail::PlanBuilder b(grid, Algorithm::kMultilane, root, size);
  std::vector<SiteTrees> pairs = lane_pairs(b, b.plan_lanes());

  // Each pair's sources: the root's two (pair-local) lanes, then the previous
  // site's idle slots of that pair.
  std::vector<std::array<Slot, 2>> sources(pairs.size(), {Slot{root, 0}, Slot{root, 1}});
  bool root_site = true;
  for (int site : grid.site_chain(grid.site_of(root))) {
    std::vector<int> members;
    for (int r : grid.sites[static_cast<size_t>(site)].ranks)
      if (r != root) members.push_back(r);
    // Prefer a Tree A member for half A: it holds A one hop earlier.
    const size_t k_a = (members.size() + 1) / 2;
    auto in_tree_a = [&](int rank) {
      for (size_t i = 0; i < k_a; ++i)
        if (members[i] == rank) return true;
      return members.empty();
    };
    for (size_t j = 0; j < pairs.size(); ++j) {
      std::vector<Slot> idle = pairs[j].build(members, sources[j], root_site);
      if (idle.size() < 2) {
        // Cannot happen for a site with members (exactly two slots stay idle).
        throw std::logic_error("multilane: site " + grid.sites[static_cast<size_t>(site)].name +
                               " has no idle slots to feed the next site");
      }
      if (!in_tree_a(idle[0].rank) && in_tree_a(idle[1].rank)) std::swap(idle[0], idle[1]);
      sources[j] = {idle[0], idle[1]};
    }
    root_site = false;
  }
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
