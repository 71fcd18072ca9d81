// Property tests over every algorithm, many shapes, roots and sizes: coverage,
// causality, exactness and the multilane invariants (topology/plan/verify.cpp).
#include <gtest/gtest.h>

#include <map>

#include <set>
#include <tuple>

#include "support/grids.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/verify.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;

constexpr std::uint64_t kSizes[] = {0, 1, 7, (1u << 20) + 3};

std::vector<int> roots_for(int p) {
  std::set<int> r{0, p / 2, p - 1};
  return {r.begin(), r.end()};
}

void expect_all_properties(const Grid& grid, Algorithm a) {
  for (int root : roots_for(grid.size())) {
    for (std::uint64_t size : kSizes) {
      const Plan plan = build_plan(grid, a, root, size);
      const PlanCheck check = verify_plan(grid, plan);
      ASSERT_TRUE(check.ok()) << algorithm_name(a) << " p=" << grid.size()
                              << " sites=" << grid.sites.size() << " root=" << root
                              << " size=" << size << ": " << check.errors.front();
      EXPECT_EQ(plan.ranks, grid.size());
      EXPECT_EQ(plan.root, root);
      EXPECT_EQ(plan.size, size);
      if (size == 0) {
        EXPECT_TRUE(plan.transfers.empty());
      }
    }
  }
}

class EveryAlgorithm : public ::testing::TestWithParam<Algorithm> {};

TEST_P(EveryAlgorithm, OneSiteOfEveryCountUpTo64) {
  for (int n = 1; n <= 64; ++n) expect_all_properties(make_grid({n}), GetParam());
}

TEST_P(EveryAlgorithm, TwoAndThreeSites) {
  const int counts[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17};
  for (int a : counts)
    for (int b : counts) expect_all_properties(make_grid({a, b}), GetParam());
  for (int a : {1, 3, 8})
    for (int b : {1, 2, 7})
      for (int c : {1, 4, 9}) expect_all_properties(make_grid({a, b, c}), GetParam());
}

TEST_P(EveryAlgorithm, LargeSamplesUpTo300) {
  for (auto shape : std::vector<std::vector<int>>{{100}, {211}, {300}, {100, 100, 100}, {5, 290}})
    expect_all_properties(make_grid(shape), GetParam());
}

TEST_P(EveryAlgorithm, OneNicNodesStillUseTwoLanes) {
  expect_all_properties(make_grid({6, 5}, 2, 1), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Plans, EveryAlgorithm,
                         ::testing::Values(Algorithm::kMultilane, Algorithm::kBinomial,
                                           Algorithm::kScatterRd, Algorithm::kScatterRing,
                                           Algorithm::kScatterRingTuned, Algorithm::kChain,
                                           Algorithm::kBinary, Algorithm::kMulticast,
                                           Algorithm::kCirculant),
                         [](const auto& p) { return std::string(algorithm_name(p.param)); });

TEST(Multilane, LaneMatchingHoldsForEveryMemberCountInRootAndOtherSites) {
  // Root sites have n-1 members, other sites n: cover both for n up to 300,
  // in a middle site too (it feeds the next from the tops of its trees).
  for (int n = 1; n <= 300; ++n) {
    const Grid g = make_grid({n, n, n});
    const Plan plan = build_multilane(g, 0, 1000);
    const PlanCheck check = verify_plan(g, plan);
    ASSERT_TRUE(check.ok()) << "n=" << n << ": " << check.errors.front();
  }
}

// A site followed by another feeds it from the top of its trees once Tree B
// has two members (kBothTopMembers): the rank that sends each half over the
// WAN is the one that took that half into the site, so the next site waits
// one hop for it, not the site's depth. With an odd member count Tree A's
// spare slot relays half B to Tree A's last member (leaf_swap). A smaller
// site, and the last, keep the heaps.
TEST(Multilane, ANextSiteIsFedFromTheTopOfBothTrees) {
  for (const int n : {5, 6, 7, 8, 9, 16, 17, 40, 41, 255}) {
    const Grid g = make_grid({n, n, n});
    const Plan plan = build_multilane(g, 0, 1 << 20);
    const PlanCheck check = verify_plan(g, plan);
    ASSERT_TRUE(check.ok()) << n << ": " << check.errors.front();
    for (const int site : {0, 1}) {
      // Who took each half into this site, and who sends it on.
      std::map<std::uint64_t, int> entered, sent_on;
      for (const Transfer& t : plan.transfers) {
        const bool from_here = g.site_of(t.from) == site, to_here = g.site_of(t.to) == site;
        if (to_here && (!from_here || t.from == plan.root)) entered.emplace(t.offset, t.to);
        if (from_here && g.site_of(t.to) == site + 1) sent_on[t.offset] = t.from;
      }
      ASSERT_EQ(sent_on.size(), 2u) << n << " site " << site;
      for (const auto& [offset, from] : sent_on)
        EXPECT_EQ(from, entered.at(offset)) << n << " site " << site << " half at " << offset;
    }
  }
  // Every count from 4 members on feeds both halves from the top: the lane
  // search found an orientation (without one the builder falls back to the
  // heaps).
  for (int n = 4; n <= 300; ++n) {
    const Grid g = make_grid({n, n, n});
    const Plan plan = build_multilane(g, 0, 1000);
    std::map<std::uint64_t, int> entry, feeder;
    for (const Transfer& t : plan.transfers) {
      if (g.site_of(t.from) == 0 && g.site_of(t.to) == 1) entry.emplace(t.offset, t.to);
      if (g.site_of(t.from) == 1 && g.site_of(t.to) == 2) feeder.emplace(t.offset, t.from);
    }
    ASSERT_EQ(feeder, entry) << "n=" << n;
  }
  // Small trees keep the heap: the last leaf's slot feeds the next site.
  const Grid small = make_grid({3, 3, 3});
  const Plan plan = build_multilane(small, 0, 1000);
  ASSERT_TRUE(verify_plan(small, plan).ok());
  for (const Transfer& t : plan.transfers) {
    if (small.site_of(t.from) == 1 && small.site_of(t.to) == 2) {
      EXPECT_NE(t.from, small.sites[1].ranks.front()) << "the heap's root has two children";
    }
  }
}

// The same on chains of unequal sites, with the root first or last, for 1 to
// 4 lanes (odd counts pair each lane twice): every plan checks, and every
// site of 4 or more members that feeds another sends each piece on from
// the rank that took it into the site.
TEST(Multilane, BothTopsHoldOnUnequalChainsForEveryLaneCount) {
  for (int nics = 1; nics <= 4; ++nics)
    for (const std::vector<int>& shape : std::vector<std::vector<int>>{
             {5, 4, 7}, {8, 3, 9}, {2, 6, 5}, {12, 1, 5}, {7, 7}, {9, 17, 4}}) {
      const Grid g = make_grid(shape, 3, nics);
      for (const int root : {0, g.size() - 1}) {
        SCOPED_TRACE(::testing::Message() << nics << " NICs, root " << root << ", sites "
                                          << ::testing::PrintToString(shape));
        const Plan plan = build_multilane(g, root, 1 << 20);
        const PlanCheck check = verify_plan(g, plan);
        ASSERT_TRUE(check.ok()) << check.errors.front();
        std::map<std::pair<int, std::uint64_t>, int> entered;  // (site, offset) -> rank
        for (const Transfer& t : plan.transfers)
          if (g.site_of(t.from) != g.site_of(t.to) || t.from == plan.root)
            entered.emplace(std::make_pair(g.site_of(t.to), t.offset), t.to);
        for (const Transfer& t : plan.transfers) {
          const int site = g.site_of(t.from);
          if (site == g.site_of(t.to)) continue;
          const int members = static_cast<int>(g.sites[static_cast<size_t>(site)].ranks.size()) -
                              (g.site_of(plan.root) == site ? 1 : 0);
          if (members < 4) continue;
          EXPECT_EQ(t.from, entered.at({site, t.offset})) << "piece at " << t.offset;
        }
      }
    }
}

TEST(Multilane, EveryNonRootRankReceivesHalfOnEachLane) {
  const Grid g = make_grid({8, 8});
  const std::uint64_t m = 1001;
  const PlanCheck check = verify_plan(g, build_multilane(g, 3, m));
  ASSERT_TRUE(check.ok());
  for (int r = 0; r < g.size(); ++r) {
    if (r == 3) continue;
    EXPECT_EQ(check.stats.in_bytes[0][static_cast<size_t>(r)] +
                  check.stats.in_bytes[1][static_cast<size_t>(r)],
              m);
    EXPECT_GT(check.stats.in_bytes[0][static_cast<size_t>(r)], 0u) << r;
    EXPECT_GT(check.stats.in_bytes[1][static_cast<size_t>(r)], 0u) << r;
  }
  EXPECT_EQ(check.stats.wan_bytes, m);
}

// k lanes (issue 14): every lane count 1..8, on many shapes and roots.
TEST(MultilaneKLanes, EveryLaneCountHoldsEveryProperty) {
  for (int k = 1; k <= kMaxLanes; ++k) {
    for (auto shape : std::vector<std::vector<int>>{
             {1}, {2}, {3}, {7}, {16}, {33}, {1, 1}, {2, 5}, {8, 8}, {5, 1, 9}, {3, 17, 4}}) {
      Grid g = make_grid(shape, 2, k);
      ASSERT_EQ(g.lane_count(), std::max(k, 2));
      g.lanes = k;
      SCOPED_TRACE("k=" + std::to_string(k));
      expect_all_properties(g, Algorithm::kMultilane);
    }
  }
}

TEST(MultilaneKLanes, EveryRankReceivesOnePartOnEveryLane) {
  for (int k = 1; k <= kMaxLanes; ++k) {
    Grid g = make_grid({9, 6, 4}, 3, 1);  // one NIC: lanes are sockets, the plan is the same
    g.lanes = k;
    const std::uint64_t m = 10'007;
    const Plan plan = build_multilane(g, 4, m);
    EXPECT_EQ(plan.lanes, k);
    const PlanCheck check = verify_plan(g, plan);
    ASSERT_TRUE(check.ok()) << "k=" << k << ": " << check.errors.front();
    // One part of M/k per lane, within rounding (odd k: two pieces of M/2k).
    const auto uk = static_cast<std::uint64_t>(k);
    const std::uint64_t part = k % 2 == 0 ? (m + uk - 1) / uk : 2 * ((m + 2 * uk - 1) / (2 * uk));
    for (int r = 0; r < g.size(); ++r) {
      if (r == 4) continue;
      const auto ur = static_cast<size_t>(r);
      std::uint64_t total = 0;
      for (int lane = 0; lane < k; ++lane) {
        const std::uint64_t in = check.stats.in_bytes[static_cast<size_t>(lane)][ur];
        EXPECT_GE(in + 2, m / uk) << "k=" << k << " rank " << r;
        EXPECT_LE(in, part) << "k=" << k << " rank " << r << " lane " << lane;
        total += in;
      }
      EXPECT_EQ(total, m) << "k=" << k << " rank " << r;
    }
    EXPECT_EQ(check.stats.wan_bytes, 2 * m);
  }
}

TEST(MultilaneKLanes, EveryFlowOfANodeCarriesTheSameBytes) {
  // Equal flows: a NIC that shares its bandwidth equally among flows gives
  // every piece the rate it needs (no lane carries two flows of half the rate
  // beside another lane's one).
  for (int k = 1; k <= kMaxLanes; ++k) {
    Grid g = make_grid({7, 5}, 2, 1);
    g.lanes = k;
    const std::uint64_t m = 4'200'000;  // 5000 x 840, a multiple of k and 2k for every k <= 8
    const Plan plan = build_multilane(g, 0, m);
    std::set<std::uint64_t> lengths;
    for (const Transfer& t : plan.transfers) lengths.insert(t.length);
    EXPECT_EQ(lengths.size(), 1u) << "k=" << k;
    EXPECT_EQ(*lengths.begin(), k % 2 == 0 ? m / static_cast<std::uint64_t>(k)
                                           : m / (2 * static_cast<std::uint64_t>(k)))
        << "k=" << k;
  }
}

TEST(MultilaneKLanes, TwoLanesAreExactlyTheTwoLanePlan) {
  // A grid of two-NIC nodes picks 2 lanes by itself; saying 2 changes nothing,
  // and the plan's halves are [0, ceil(M/2)) and the rest, as before k lanes.
  Grid g = make_grid({5, 8, 3});
  ASSERT_EQ(g.lane_count(), 2);
  const Plan automatic = build_multilane(g, 2, 999);
  g.lanes = 2;
  const Plan explicit_two = build_multilane(g, 2, 999);
  EXPECT_EQ(automatic.transfers, explicit_two.transfers);
  for (const Transfer& t : automatic.transfers) {
    EXPECT_TRUE((t.offset == 0 && t.length == 500) || (t.offset == 500 && t.length == 499))
        << t.offset << "+" << t.length;
    EXPECT_LE(t.lane_from, 1);
  }
}

TEST(MultilaneKLanes, LaneCountFollowsTheNicsUnlessSet) {
  EXPECT_EQ(make_grid({3}, 1, 1).lane_count(), 2);
  EXPECT_EQ(make_grid({3}, 1, 3).lane_count(), 3);
  EXPECT_EQ(make_grid({3}, 1, 4).lane_count(), 4);
  EXPECT_EQ(make_grid({3}, 1, 12).lane_count(), kMaxLanes);
  Grid g = make_grid({3}, 1, 4);
  g.lanes = 3;
  EXPECT_EQ(g.lane_count(), 3);
  // A plan for another lane count is refused by the checker.
  Plan p = build_multilane(g, 0, 100);
  g.lanes = 2;
  const PlanCheck check = verify_plan(g, p);
  ASSERT_FALSE(check.ok());
  EXPECT_NE(check.errors.front().find("3 lanes, the topology 2"), std::string::npos)
      << check.errors.front();
}

// Bandwidth-aware lanes (issue 14, part 3): lanes go to NICs in proportion to
// their bandwidth, and the automatic lane count is the one with the best rate.
Node node_with(std::vector<double> mbits) {
  Node n;
  for (double m : mbits) n.nics.push_back(Nic{"10.0.0.1", m * 1e6, ""});
  return n;
}

std::vector<int> lane_nics(const Node& n, int lanes) {
  std::vector<int> out;
  for (int l = 0; l < lanes; ++l) out.push_back(n.lane_nic_index(l));
  return out;
}

TEST(LaneNics, EqualNicsTakeLanesInTurnAndFasterNicsTakeMore) {
  EXPECT_EQ(lane_nics(node_with({100}), 4), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(lane_nics(node_with({100, 100}), 5), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(lane_nics(node_with({50, 50, 50}), 4), (std::vector<int>{0, 1, 2, 0}));
  // 100 + 50: the 100 Mbit NIC takes two lanes of every three.
  EXPECT_EQ(lane_nics(node_with({100, 50}), 6), (std::vector<int>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(lane_nics(node_with({50, 100}), 3), (std::vector<int>{1, 0, 1}));
  EXPECT_DOUBLE_EQ(node_with({100, 50}).lane_bandwidth_bps(0, 3), 50e6);
  EXPECT_DOUBLE_EQ(node_with({100, 50}).lane_bandwidth_bps(1, 3), 50e6);
  EXPECT_DOUBLE_EQ(node_with({100, 50}).lane_bandwidth_bps(0, 2), 100e6);
}

TEST(LaneNics, TheAutomaticLaneCountHasTheBestRateAndTheFewestLanes) {
  auto grid_of = [](std::vector<std::vector<double>> nodes) {
    Grid g;
    g.sites.push_back(Site{"s", {}, {}});
    for (auto& n : nodes) {
      g.sites[0].ranks.push_back(g.size());
      g.nodes.push_back(node_with(n));
    }
    return g;
  };
  EXPECT_EQ(grid_of({{100}, {100}}).automatic_lane_count(), 2);            // today's
  EXPECT_EQ(grid_of({{100, 100}, {100, 100}}).automatic_lane_count(), 2);  // today's
  EXPECT_EQ(grid_of({{25, 25, 25, 25}, {25, 25, 25, 25}}).automatic_lane_count(), 4);
  EXPECT_EQ(grid_of({{100, 50}, {100, 50}}).automatic_lane_count(), 3);  // 3 x 50, not 2 x 50
  EXPECT_EQ(grid_of({{100, 50}, {50, 100}}).automatic_lane_count(), 3);
  // A one-NIC node sets every k's rate alike: the fewest lanes.
  EXPECT_EQ(grid_of({{50}, {100, 100, 100, 100}}).automatic_lane_count(), 2);
  EXPECT_EQ(grid_of(std::vector<std::vector<double>>(3, std::vector<double>(12, 10)))
                .automatic_lane_count(),
            kMaxLanes);
}

TEST(Multilane, WanTransfersCarryTheLinkStreamCount) {
  const Grid g = make_grid({4, 4, 4}, 5);
  const Plan plan = build_multilane(g, 0, 4096);
  int wan = 0;
  for (const auto& t : plan.transfers) {
    if (g.site_of(t.from) != g.site_of(t.to)) {
      ++wan;
      EXPECT_EQ(t.streams, 5);
    } else {
      EXPECT_EQ(t.streams, 1);
    }
  }
  EXPECT_EQ(wan, 4);  // two halves into each of two downstream sites
  EXPECT_EQ(plan.wan_streams, 5);
}

TEST(Multilane, DepthGrowsLogarithmically) {
  for (int n : {16, 64, 256}) {
    const Grid g = make_grid({n});
    const PlanCheck check = verify_plan(g, build_multilane(g, 0, 1 << 20));
    ASSERT_TRUE(check.ok());
    int deepest = 0;
    for (int d : check.stats.depth) deepest = std::max(deepest, d);
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    EXPECT_LE(deepest, log2n + 2) << "n=" << n;
  }
}

// Ring allgather chunk transfers, after the p-1 scatter transfers.
size_t ring_transfers(int p, Algorithm a) {
  const Grid g = make_grid({p});
  const Plan plan = build_plan(g, a, 0, 1 << 20);
  return plan.transfers.size() - static_cast<size_t>(p - 1);
}

TEST(TunedRing, SavesWhatThePaperCounts) {
  EXPECT_EQ(ring_transfers(8, Algorithm::kScatterRing), 56u);
  EXPECT_EQ(ring_transfers(8, Algorithm::kScatterRingTuned), 56u - 12u);
  EXPECT_EQ(ring_transfers(10, Algorithm::kScatterRing), 90u);
  EXPECT_EQ(ring_transfers(10, Algorithm::kScatterRingTuned), 90u - 15u);
}

TEST(TunedRing, MovesFewerBytesThanTheNativeRingAndNativeWastes) {
  for (int p : {3, 5, 6, 7, 9, 12, 100}) {
    const Grid g = make_grid({p});
    const auto native = verify_plan(g, build_plan(g, Algorithm::kScatterRing, 0, 1 << 20));
    const auto tuned = verify_plan(g, build_plan(g, Algorithm::kScatterRingTuned, 0, 1 << 20));
    ASSERT_TRUE(native.ok());
    ASSERT_TRUE(tuned.ok());
    EXPECT_GT(native.stats.duplicate_bytes, 0u) << p;
    EXPECT_EQ(tuned.stats.duplicate_bytes, 0u) << p;
  }
}

TEST(Binomial, RootSendsLogPWholeMessages) {
  const Grid g = make_grid({16});
  const Plan plan = build_binomial(g, 5, 100);
  int from_root = 0;
  for (const auto& t : plan.transfers) {
    EXPECT_EQ(t.length, 100u);
    if (t.from == 5) ++from_root;
  }
  EXPECT_EQ(from_root, 4);
  EXPECT_EQ(plan.transfers.size(), 15u);
}

TEST(BuildPlan, RejectsARootOutsideTheGrid) {
  const Grid g = make_grid({4});
  EXPECT_THROW(build_plan(g, Algorithm::kMultilane, 4, 10), std::invalid_argument);
  EXPECT_THROW(build_plan(g, Algorithm::kMultilane, -1, 10), std::invalid_argument);
}

// Multicast (issue 15): a ring per site behind one multicast from the site's
// entry, sites chained from each ring's tail to the next site's entry.
TEST(MulticastPlan, RingPerSiteOneMulticastPerSiteAndWanFromTheTail) {
  const Grid g = make_grid({4, 1, 3});
  const Plan plan = build_multicast(g, 1, 1000);
  ASSERT_TRUE(verify_plan(g, plan).ok()) << verify_plan(g, plan).errors.front();
  const std::vector<Transfer> want = {
      {1, 2, 0, 1000, 1, 1, 1}, {2, 3, 0, 1000, 1, 1, 1}, {3, 0, 0, 1000, 1, 1, 1},
      {0, 4, 0, 1000, 0, 0, 3},  // the tail of site 0's ring to site 1's only node
      {4, 5, 0, 1000, 0, 0, 3},  // on to site 2's entry (all nodes have equal NICs)
      {5, 6, 0, 1000, 1, 1, 1}, {6, 7, 0, 1000, 1, 1, 1}};
  EXPECT_EQ(plan.transfers, want);
  ASSERT_EQ(plan.multicasts.size(), 2u);  // none for the one-node site
  EXPECT_EQ(plan.multicasts[0], (Multicast{1, 0, 0, 1000, {0, 2, 3}}));
  EXPECT_EQ(plan.multicasts[1], (Multicast{5, 0, 0, 1000, {6, 7}}));
}

TEST(MulticastPlan, OneLaneRanksRingOnLaneZeroAndEmptyMessagesSendNothing) {
  Grid g = make_grid({3}, 1, 1);
  g.lanes = 1;
  const Plan plan = build_multicast(g, 0, 10);
  ASSERT_TRUE(verify_plan(g, plan).ok());
  for (const auto& t : plan.transfers) EXPECT_EQ(t.lane_from, 0);
  EXPECT_TRUE(build_multicast(g, 0, 0).transfers.empty());
  EXPECT_TRUE(build_multicast(g, 0, 0).multicasts.empty());
}

TEST(MulticastPlan, ASiteWithoutMulticastIsRefusedOneNodeSitesNeedNone) {
  Grid g = make_grid({3, 1, 2});
  g.sites[1].multicast.enabled = false;  // one node: nothing to multicast to
  EXPECT_TRUE(algorithm_unavailable(g, Algorithm::kMulticast).empty());
  EXPECT_NO_THROW(build_plan(g, Algorithm::kMulticast, 0, 100));
  g.sites[2].multicast.enabled = false;
  g.sites[2].where = Location{"grid.yaml", 12, 5};
  try {
    build_plan(g, Algorithm::kMulticast, 0, 100);
    FAIL() << "planned multicast over a site without it";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("site 's2' (grid.yaml:12:5)"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(algorithm_unavailable(g, Algorithm::kMultilane).empty());
}

TEST(MulticastPlan, TheCheckerCatchesBadMulticasts) {
  const Grid g = make_grid({3, 3});
  auto errors_of = [&](const Plan& p) { return verify_plan(g, p).errors; };
  const Plan good = build_multicast(g, 0, 100);
  Plan p = good;
  p.multicasts[0].to.push_back(3);  // a rank of the other site
  EXPECT_FALSE(errors_of(p).empty());
  p = good;
  p.multicasts[1].from = 4;  // another sender that holds the message (by the ring)
  p.multicasts[1].to = {3, 5};
  EXPECT_TRUE(errors_of(p).empty());
  p.multicasts[1].offset = 50;  // 50 + 100 runs past the message
  EXPECT_FALSE(errors_of(p).empty());
  p = good;
  p.multicasts.push_back(p.multicasts[0]);  // joins twice
  EXPECT_FALSE(errors_of(p).empty());
  p = build_chain(g, 0, 100);
  p.multicasts = good.multicasts;  // only the multicast algorithm may
  EXPECT_FALSE(errors_of(p).empty());
  Grid off = g;
  off.sites[0].multicast.enabled = false;
  EXPECT_FALSE(verify_plan(off, good).ok());
}

TEST(Registry, NamesRoundTrip) {
  for (const auto& info : algorithms()) EXPECT_EQ(parse_algorithm(info.name), info.id);
  EXPECT_FALSE(parse_algorithm("ring_of_fire").has_value());
  EXPECT_EQ(algorithms().size(), 9u);
}

TEST(Selection, SmallMessagesGoBinomialLargeGoMultilane) {
  const Grid g = make_grid({4, 4});
  SelectionThresholds t;
  t.small_bytes = 1000;
  EXPECT_EQ(threshold_algorithm(g, 999, t), Algorithm::kBinomial);
  EXPECT_EQ(threshold_algorithm(g, 1000, t), Algorithm::kMultilane);
}

TEST(Selection, MulticastOnlyWhenAskedBelowItsSizeOnLargeEnoughSitesThatCarryIt) {
  Grid g = make_grid({16, 4});
  SelectionThresholds t;
  t.small_bytes = 1000;
  EXPECT_EQ(threshold_algorithm(g, 10, t), Algorithm::kBinomial);  // off by default
  t.multicast_bytes = 100000;
  EXPECT_EQ(threshold_algorithm(g, 10, t), Algorithm::kMulticast);
  EXPECT_EQ(threshold_algorithm(g, 99999, t), Algorithm::kMulticast);
  EXPECT_EQ(threshold_algorithm(g, 100000, t), Algorithm::kMultilane);
  t.multicast_min_site_nodes = 17;  // no site that large
  EXPECT_EQ(threshold_algorithm(g, 10, t), Algorithm::kBinomial);
  t.multicast_min_site_nodes = 16;
  g.sites[1].multicast.enabled = false;  // never where it cannot run
  EXPECT_EQ(threshold_algorithm(g, 10, t), Algorithm::kBinomial);
}

}  // namespace
}  // namespace gridbcast::topology
