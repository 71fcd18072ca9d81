#include "topology/bound.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <random>

#include "support/grids.hpp"
#include "topology/loader.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;

const std::string kConfigDir = std::string(GRIDBCAST_SOURCE_DIR) + "/site-configs";
constexpr std::uint64_t kMiB = 1 << 20;

// Gives node `rank` `count` NICs of `gbit` Gbit/s each.
void set_nics(Grid& g, int rank, int count, double gbit) {
  auto& nics = g.nodes[static_cast<size_t>(rank)].nics;
  const Nic first = nics.front();
  nics.assign(static_cast<size_t>(count), first);
  for (auto& n : nics) n.bandwidth_bps = gbit * 1e9;
}

double seconds_at(double bytes, double bps) {
  return bytes * 8 / bps;
}

TEST(MaxFlowBound, OneSiteOfTwoEqualNodesIsOneNodesNics) {
  Grid g = make_grid({2}, 1, 1);  // one 10 Gbit NIC each
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.rate_bps, 10e9);
  EXPECT_EQ(b.bottleneck_rank, 1);
  EXPECT_EQ(b.latency_s, 0.0);
  EXPECT_DOUBLE_EQ(b.seconds(64 * kMiB), seconds_at(64 * kMiB, 10e9));
}

TEST(MaxFlowBound, OneSiteOfThreeEqualNodesIsBothNics) {
  const Grid g = make_grid({3});  // two 10 Gbit NICs each
  const MaxFlowBound b = max_flow_bound(g, 1);
  EXPECT_DOUBLE_EQ(b.rate_bps, 20e9);
  ASSERT_EQ(b.classes.size(), 1u);  // ranks 0 and 2 are one class
  EXPECT_EQ(b.classes[0].rank, 0);
  EXPECT_EQ(b.classes[0].members, 2);
}

TEST(MaxFlowBound, OneNicReceiverIsTheBottleneck) {
  Grid g = make_grid({3});
  set_nics(g, 2, 1, 10);  // 10 Gbit; the others have 20
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.rate_bps, 10e9);
  EXPECT_EQ(b.bottleneck_rank, 2);
  ASSERT_EQ(b.classes.size(), 2u);
  EXPECT_DOUBLE_EQ(b.classes[0].rate_bps, 20e9);  // rank 1
  EXPECT_DOUBLE_EQ(b.classes[1].rate_bps, 10e9);  // rank 2
}

TEST(MaxFlowBound, OneNicRootLimitsEveryone) {
  Grid g = make_grid({3});
  set_nics(g, 0, 1, 10);
  set_nics(g, 1, 2, 25);  // unequal receivers: 50 and 20 Gbit
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.rate_bps, 10e9);
  for (const auto& c : b.classes) EXPECT_DOUBLE_EQ(c.rate_bps, 10e9);
}

TEST(MaxFlowBound, TwoSitesWhereTheWanIsTheBottleneck) {
  const Grid g = make_grid({2, 3});  // 20 Gbit nodes, 1 Gbit, 1 ms WAN
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.rate_bps, 1e9);
  EXPECT_EQ(b.bottleneck_rank, 2);
  EXPECT_DOUBLE_EQ(b.latency_s, 0.001);
  ASSERT_EQ(b.classes.size(), 2u);
  EXPECT_DOUBLE_EQ(b.classes[0].rate_bps, 20e9);
  EXPECT_EQ(b.classes[1].members, 3);
  EXPECT_DOUBLE_EQ(b.seconds(8 * kMiB), 0.001 + seconds_at(8 * kMiB, 1e9));
  // Here the two bounds agree.
  EXPECT_DOUBLE_EQ(b.seconds(8 * kMiB), lower_bound_seconds(g, 0, 8 * kMiB));
}

TEST(MaxFlowBound, ParallelWanPathsAddUpWhereTheSimpleBoundTakesOneLink) {
  // A triangle of 1 Gbit links: every site is reached over two disjoint paths,
  // so 2 Gbit, where the simple bound says 1.
  Grid g = make_grid({2, 2, 2});
  g.wan.push_back(WanLink{0, 2, 0.001, 1e9, 0, 3, false, "", {}});
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.rate_bps, 2e9);
  EXPECT_DOUBLE_EQ(b.latency_s, 0.001);
  const std::uint64_t bytes = 64 * kMiB;
  EXPECT_DOUBLE_EQ(b.seconds(bytes), 0.001 + seconds_at(bytes, 2e9));
  EXPECT_DOUBLE_EQ(lower_bound_seconds(g, 0, bytes), 0.001 + seconds_at(bytes, 1e9));
}

TEST(MaxFlowBound, NearestReceiverWithTheSmallestCutIsNotChargedTheFarthestLatency) {
  // A 1 Gbit node next to the root, the other site 50 ms away over 10 Gbit:
  // the simple bound adds the 50 ms to the 1 Gbit node's time.
  Grid g = make_grid({2, 2}, 3, 1);
  set_nics(g, 1, 1, 1);
  g.wan[0].bandwidth_bps = 10e9;
  g.wan[0].latency_s = 0.050;
  const std::uint64_t bytes = 64 * kMiB;
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.seconds(bytes), seconds_at(bytes, 1e9));
  EXPECT_DOUBLE_EQ(lower_bound_seconds(g, 0, bytes), 0.050 + seconds_at(bytes, 1e9));
  // Small messages: the far site's latency decides.
  EXPECT_DOUBLE_EQ(b.seconds(1024), 0.050 + seconds_at(1024, 10e9));
}

TEST(MaxFlowBound, LatencyTakesTheFastestWanRouteNotTheFewestHops) {
  // 0 -- 2 directly in 100 ms, or over site 1 in 2 ms.
  Grid g = make_grid({1, 1, 1});
  g.wan.push_back(WanLink{0, 2, 0.100, 1e9, 0, 3, false, "", {}});
  const MaxFlowBound b = max_flow_bound(g, 0);
  EXPECT_DOUBLE_EQ(b.latency_s, 0.002);
}

TEST(MaxFlowBound, ErrorsNameTheRootAndTheUnreachableRank) {
  Grid g = make_grid({1, 1});
  EXPECT_THROW(max_flow_bound(g, 2), std::out_of_range);
  EXPECT_THROW(max_flow_bound(g, -1), std::out_of_range);
  g.wan.clear();  // site 1 is cut off
  try {
    max_flow_bound(g, 0);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (s1n0)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(max_flow_bound_seconds(make_grid({1}), 0, 1 << 20), 0.0);
}

// The minimum root -> v cut by brute force over every vertex set of the same
// capacity graph, for grids small enough to enumerate.
double brute_force_min_cut(const Grid& g, int root, int v) {
  const int p = g.size();
  const int n = 2 * p + static_cast<int>(g.sites.size());
  struct E {
    int a, b;
    double c;
  };
  std::vector<E> edges;
  const double inf = std::numeric_limits<double>::infinity();
  for (int u = 0; u < p; ++u) {
    const double c = g.nodes[static_cast<size_t>(u)].total_bandwidth_bps();
    const int sw = 2 * p + g.site_of(u);
    edges.push_back({sw, 2 * u, c});
    edges.push_back({2 * u, 2 * u + 1, inf});
    edges.push_back({2 * u + 1, sw, c});
  }
  for (const auto& l : g.wan) {
    edges.push_back({2 * p + l.site_a, 2 * p + l.site_b, l.bandwidth_bps});
    edges.push_back({2 * p + l.site_b, 2 * p + l.site_a, l.bandwidth_bps});
  }
  double best = inf;
  for (std::uint32_t set = 0; set < (1u << n); ++set) {
    const auto in = [&](int x) { return ((set >> x) & 1u) != 0; };
    if (!in(2 * root + 1) || in(2 * v)) continue;
    double cut = 0;
    for (const auto& e : edges)
      if (in(e.a) && !in(e.b)) cut += e.c;
    best = std::min(best, cut);
  }
  return best;
}

TEST(MaxFlowBound, MatchesBruteForceMinCutsOnRandomSmallGrids) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 200; ++trial) {
    const int sites = 1 + static_cast<int>(rng() % 3);
    std::vector<int> counts;
    int total = 0;
    for (int s = 0; s < sites; ++s) {
      // At most 15 vertices: 2^15 cuts to enumerate.
      counts.push_back(1 + static_cast<int>(rng() % (sites == 1 ? 5u : (sites == 2 ? 3u : 2u))));
      total += counts.back();
    }
    if (total < 2) continue;
    Grid g = make_grid(counts, 2, 1);
    for (int r = 0; r < g.size(); ++r)
      set_nics(g, r, 1 + static_cast<int>(rng() % 2), 1 + static_cast<double>(rng() % 10));
    for (auto& l : g.wan) l.bandwidth_bps = (1 + static_cast<double>(rng() % 30)) * 1e9;
    if (sites == 3 && rng() % 2) g.wan.push_back(WanLink{0, 2, 0.001, 3e9, 0, 1, false, "", {}});
    const int root = static_cast<int>(rng() % static_cast<unsigned>(g.size()));
    const MaxFlowBound b = max_flow_bound(g, root);
    double smallest = std::numeric_limits<double>::infinity();
    for (int v = 0; v < g.size(); ++v)
      if (v != root) smallest = std::min(smallest, brute_force_min_cut(g, root, v));
    ASSERT_NEAR(b.rate_bps, smallest, 1e-3) << "trial " << trial << ", root " << root;
    for (const auto& c : b.classes)
      ASSERT_NEAR(c.rate_bps, brute_force_min_cut(g, root, c.rank), 1e-3) << "trial " << trial;
  }
}

// Every shipped site-config: no algorithm's simulated time beats the bound,
// and the bound never claims more than the simple one (in this model the
// max-flow to any receiver is at least the narrowest NIC or link, and its
// latency at most the fewest-hops route's).
TEST(MaxFlowBound, NoSimulatedPlanBeatsItOnAnyShippedSiteConfig) {
  int configs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigDir)) {
    if (entry.path().extension() != ".yaml") continue;
    const Grid g = load_grid_file(entry.path().string());
    ++configs;
    for (const int root : {0, g.size() - 1}) {
      const MaxFlowBound b = max_flow_bound(g, root);
      for (const std::uint64_t bytes : {std::uint64_t{1024}, 16 * kMiB}) {
        const double bound = b.seconds(bytes);
        EXPECT_LE(bound, lower_bound_seconds(g, root, bytes) * (1 + 1e-12)) << entry.path();
        for (const auto& a : algorithms()) {
          if (!algorithm_unavailable(g, a.id).empty()) {
            EXPECT_THROW(build_plan(g, a.id, root, bytes), std::invalid_argument);
            continue;
          }
          const double t = simulate(g, build_plan(g, a.id, root, bytes)).makespan_s;
          EXPECT_GE(t, bound) << entry.path() << " " << a.name << " root " << root << " " << bytes
                              << " bytes";
        }
      }
    }
  }
  EXPECT_GE(configs, 10);
}

TEST(MaxFlowBound, TenSitesOfAThousandNodesIsFast) {
  const Grid g = synthetic_grid(10, 1000);
  const auto start = std::chrono::steady_clock::now();
  const MaxFlowBound b = max_flow_bound(g, 0);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Two 10 Gbit NICs per node, chained 10 Gbit, 10 ms links: the WAN decides.
  EXPECT_DOUBLE_EQ(b.rate_bps, 10e9);
  EXPECT_NEAR(b.latency_s, 0.090, 1e-12);
  EXPECT_EQ(b.classes.size(), 10u);
  std::printf("max_flow_bound on 10x1000: %.1f ms\n", took * 1e3);
}

}  // namespace
}  // namespace gridbcast::topology
