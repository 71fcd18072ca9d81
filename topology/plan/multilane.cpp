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
// Feeding from the top. The idle slots of a heap are at its bottom, so a site
// fed from a leaf of the one before waits for that site's whole depth: ten
// chained sites of a thousand nodes wait nine times nine hops. Where another
// site follows, each tree's root keeps one slot for the next site and has one
// child, below which the rest form the heap:
//
//        a0 ──► WAN (next site's Tree A)       a0's other lane: a0' below
//        │
//        a0'          the tree is one hop deeper; the next site starts
//       /   \.        log2(n) hops sooner
//     a1'   a2' ...
//
// Both trees do so once Tree B has kBothTopMembers. With an odd member count
// Tree B's free slots are one short of Tree A's swap; Tree A has one to spare,
// and a Tree A member that the swap gave half B already relays it to the last
// Tree A member (leaf_swap). Without an orientation that serves the swap,
// the heaps stay (none is known: every count up to 300 has one). The lanes
// below the top are oriented so that the swap is served lane by lane (the
// first orientation pair that is, in a fixed order: every rank finds the
// same).
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
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
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

// From this many members in the smaller tree (Tree B), both trees feed the
// next site from their tops, where the leaf swap allows it: each half then
// leaves the site one hop below its source instead of at the bottom of its
// tree. The site's own trees are one hop deeper, which costs it less than
// the next site saves (testbed-8x8, 1 MiB: the model's 65.0 ms became
// 61.7 ms, docs/PERFORMANCE.md); no shipped topology is priced slower.
constexpr size_t kBothTopMembers = 2;

int own_lane(const TreeShape& shape, size_t index) {
  if (index == 0) return shape.root_lane;
  return index % 2 == 1 ? shape.first_lane : 1 - shape.first_lane;
}

// Where a tree's members sit: a heap (index i's parent (i - 1) / 2), or, fed
// from the top, member 0 above a heap of the others (index i >= 1 at heap
// position i - 1). lane(i): the lane member i receives its own half on, and
// its parent sends it on.
struct Layout {
  TreeShape shape;    // member 0's lane, and the heap's orientation below it
  bool top = false;   // member 0 keeps a slot for the next site
  TreeShape below{};  // with top: the heap under member 0

  size_t parent(size_t i) const { return top ? (i == 1 ? 0 : (i - 2) / 2 + 1) : (i - 1) / 2; }
  int lane(size_t i) const {
    if (!top) return own_lane(shape, i);
    return i == 0 ? shape.root_lane : own_lane(below, i - 1);
  }
  // (member, lane) of every child slot no member takes, shallow first.
  std::vector<std::pair<size_t, int>> free_slots(size_t n) const {
    std::vector<std::pair<size_t, int>> out;
    if (!top) {
      for (size_t i = 0; i < n; ++i)
        for (size_t c : {2 * i + 1, 2 * i + 2})
          if (c >= n) out.emplace_back(i, own_lane(shape, c));
      return out;
    }
    const size_t m = n - 1;  // the heap under member 0
    for (size_t k = 0; k < m; ++k)
      for (size_t c : {2 * k + 1, 2 * k + 2})
        if (c >= m) out.emplace_back(k + 1, own_lane(below, c));
    return out;
  }
};

// One transfer of the leaf swap: member `from` of tree `from_tree` sends half
// `half` on `lane` to member `to` of the other tree (1 - half).
struct SwapEdge {
  int half;
  int from_tree;
  size_t from;
  int lane;
  size_t to;
};

// The leaf swap for these layouts, in a causal order: the free slots of tree
// h deliver half h to every member of the other tree, on the lane that member
// keeps for the other half, shallow slots first. Where they run short (both
// trees fed from the top with an odd member count: the smaller tree has one
// free slot too few), a free slot left over in the other tree relays the
// half, from a member that the swap gave it already. `left`: each tree's
// free slots the swap did not take, in their order (the site's idle slots).
struct Swap {
  std::vector<SwapEdge> edges;
  std::array<std::vector<std::pair<size_t, int>>, 2> left;
};
// nullopt when the slots do not cover every member this way. Linear in the
// members: each lane's slots are taken in order from a cursor (a relay, at
// most one a tree, looks further).
std::optional<Swap> leaf_swap(const std::array<Layout, 2>& layout, const std::array<size_t, 2>& n) {
  std::array<std::vector<std::pair<size_t, int>>, 2> slots;
  std::array<std::vector<bool>, 2> used;
  std::array<std::array<std::vector<size_t>, 2>, 2> by_lane;  // [tree][lane]: indexes into slots
  std::array<std::array<size_t, 2>, 2> cursor{};              // [tree][lane]: next to look at
  for (size_t h = 0; h < 2; ++h) {
    slots[h] = layout[h].free_slots(n[h]);
    used[h].assign(slots[h].size(), false);
    for (size_t s = 0; s < slots[h].size(); ++s)
      by_lane[h][static_cast<size_t>(slots[h][s].second)].push_back(s);
  }
  // The first free slot of `tree` on `lane` whose member is in `holders`
  // (any member without).
  const auto take = [&](size_t tree, int lane,
                        const std::vector<bool>* holders) -> std::optional<size_t> {
    const auto& list = by_lane[tree][static_cast<size_t>(lane)];
    size_t& c = cursor[tree][static_cast<size_t>(lane)];
    while (c < list.size() && used[tree][list[c]]) ++c;
    for (size_t k = c; k < list.size(); ++k) {
      const size_t s = list[k];
      if (used[tree][s] || (holders != nullptr && !(*holders)[slots[tree][s].first])) continue;
      used[tree][s] = true;
      return slots[tree][s].first;
    }
    return std::nullopt;
  };
  Swap out;
  for (size_t h = 0; h < 2; ++h) {
    if (n[h] == 0) continue;  // an empty tree's half comes straight from the source
    const size_t other = 1 - h;
    std::vector<bool> holds(n[other], false);  // members of `other` given half h
    std::vector<size_t> short_of;
    for (size_t j = 0; j < n[other]; ++j) {
      const int lane = 1 - layout[other].lane(j);
      if (const auto from = take(h, lane, nullptr)) {
        out.edges.push_back({static_cast<int>(h), static_cast<int>(h), *from, lane, j});
        holds[j] = true;
      } else {
        short_of.push_back(j);
      }
    }
    for (const size_t j : short_of) {
      const int lane = 1 - layout[other].lane(j);
      const auto from = take(other, lane, &holds);
      if (!from) return std::nullopt;
      out.edges.push_back({static_cast<int>(h), static_cast<int>(other), *from, lane, j});
      holds[j] = true;
    }
  }
  for (size_t h = 0; h < 2; ++h)
    for (size_t s = 0; s < slots[h].size(); ++s)
      if (!used[h][s]) out.left[h].push_back(slots[h][s]);
  return out;
}

// Each tree's layout: a heap, or fed from the top where it pays and a next
// site follows, with the first orientation below the top whose leaf swap
// works (leaf_swap; tests/topology/plan_properties_test checks that the
// heaps' does for every member count). Both trees keep their top once the
// smaller has kBothTopMembers (with an odd count, the larger tree's spare
// slot relays the smaller's half to its last member); an orientation pair
// exists for every count checked (4 to 300 members,
// Multilane.ANextSiteIsFedFromTheTopOfBothTrees), and without one the heaps
// stay.
struct Layouts {
  std::array<Layout, 2> layout;
  Swap swap;
};
Layouts layouts(const std::array<std::vector<int>, 2>& tree, bool next_site) {
  const std::array<size_t, 2> n{tree[0].size(), tree[1].size()};
  const std::array<Layout, 2> heaps{Layout{kTreeA}, Layout{kTreeB}};
  const std::array<TreeShape, 4> orientations{TreeShape{0, 1}, TreeShape{1, 0}, TreeShape{0, 0},
                                              TreeShape{1, 1}};
  const auto search = [&](std::array<bool, 2> top) -> std::optional<Layouts> {
    for (const TreeShape a : orientations)
      for (const TreeShape b : orientations) {
        std::array<Layout, 2> l{Layout{kTreeA, top[0], a}, Layout{kTreeB, top[1], b}};
        if (auto swap = leaf_swap(l, n)) return Layouts{l, std::move(*swap)};
      }
    return std::nullopt;
  };
  if (next_site && n[1] >= kBothTopMembers)
    if (auto l = search({true, true})) return std::move(*l);
  auto swap = leaf_swap(heaps, n);
  if (!swap)
    throw std::logic_error("multilane: no leaf swap for trees of " + std::to_string(n[0]) +
                           " and " + std::to_string(n[1]) + " members");
  return Layouts{heaps, std::move(*swap)};
}

// One lane pair's two trees. Slots carry pair-local lanes 0 and 1; `lanes`
// maps them to the grid's lanes when a transfer is emitted.
class SiteTrees {
 public:
  SiteTrees(detail::PlanBuilder& b, std::array<Half, 2> halves, std::array<int, 2> lanes)
      : b_(b), halves_(halves), lanes_(lanes) {}

  // Builds one site. `sources[h]` sends half h to the site (the root's lanes in
  // the root site, the previous site's idle slots elsewhere). Returns the site's
  // idle sending slots, in a deterministic order: slots kept at a tree's top
  // for the next site first. `next_site`: another site follows in the chain.
  std::vector<Slot> build(const std::vector<int>& members, std::array<Slot, 2> sources,
                          bool sources_inside_site, bool next_site) {
    const size_t n = members.size();
    const size_t k_a = (n + 1) / 2;
    std::array<std::vector<int>, 2> tree;
    tree[0].assign(members.begin(), members.begin() + static_cast<long>(k_a));
    tree[1].assign(members.begin() + static_cast<long>(k_a), members.end());

    std::vector<Slot> idle;
    if (n == 0) {
      // Only the root: both its lanes stay idle for the next site.
      if (sources_inside_site) idle = {sources[0], sources[1]};
      return idle;
    }
    const Layouts chosen = layouts(tree, next_site);
    const std::array<Layout, 2>& layout = chosen.layout;

    // Sources feed the tree roots. An empty Tree B (one member) means the lone
    // member takes B straight from the source, on its other lane.
    for (int h = 0; h < 2; ++h) {
      const auto& t = tree[static_cast<size_t>(h)];
      const Slot src = sources[static_cast<size_t>(h)];
      if (!t.empty()) {
        emit(src, t[0], h, layout[static_cast<size_t>(h)].lane(0));
      } else {
        emit(src, tree[0][0], h, 1 - layout[0].lane(0));
      }
    }

    // Tree edges, parent before child (heap order is causal).
    for (int h = 0; h < 2; ++h) {
      const auto& t = tree[static_cast<size_t>(h)];
      const Layout& l = layout[static_cast<size_t>(h)];
      for (size_t i = 1; i < t.size(); ++i)
        emit(Slot{t[l.parent(i)], l.lane(i)}, t[i], h, l.lane(i));
      if (l.top && !t.empty()) idle.push_back(Slot{t[0], 1 - l.lane(1)});
    }

    // Leaf swap (leaf_swap): every member receives the other half on the
    // lane it keeps for it. Shallow slots go to shallow receivers to keep
    // the depth low. The slots it leaves are idle, for the next site.
    for (const SwapEdge& e : chosen.swap.edges)
      emit(Slot{tree[static_cast<size_t>(e.from_tree)][e.from], e.lane},
           tree[static_cast<size_t>(1 - e.half)][e.to], e.half, e.lane);
    for (size_t h = 0; h < 2; ++h)
      for (const auto& [member, lane] : chosen.swap.left[h])
        idle.push_back(Slot{tree[h][member], lane});
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
  const std::vector<int> chain = grid.site_chain(grid.site_of(root));
  for (size_t position = 0; position < chain.size(); ++position) {
    const int site = chain[position];
    const bool next_site = position + 1 < chain.size();
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
      std::vector<Slot> idle = pairs[j].build(members, sources[j], root_site, next_site);
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
