#include "topology/simulate.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "support/grids.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;

TEST(Simulate, OneTransferTakesSizeOverBandwidthPlusOneHop) {
  const Grid g = make_grid({2}, 1, 1);  // 10 Gbit NICs
  CostModel m;
  const std::uint64_t size = 64 << 20;
  const auto r = simulate(g, build_plan(g, Algorithm::kChain, 0, size), m);
  EXPECT_NEAR(r.makespan_s,
              static_cast<double>(size) / (1.25e9 * m.payload_efficiency) + m.lan_latency_s, 1e-9);
  EXPECT_EQ(r.slowest_rank, 1);
  EXPECT_EQ(r.finish_s[0], 0.0);
}

TEST(Simulate, BinomialRootPaysLogPWholeMessagesOnOneNic) {
  const Grid g = make_grid({16}, 1, 1);
  const std::uint64_t size = 16 << 20;
  const auto r = simulate(g, build_plan(g, Algorithm::kBinomial, 0, size));
  const double one = static_cast<double>(size) / (1.25e9 * CostModel{}.payload_efficiency);
  EXPECT_GE(r.makespan_s, 4 * one * 0.99);
  EXPECT_LE(r.makespan_s, 4 * one * 1.2);
}

TEST(Simulate, MultilaneHalvesThePipelinedBinaryTree) {
  const Grid g = make_grid({15});
  const std::uint64_t size = 256 << 20;
  const double ml = simulate(g, build_plan(g, Algorithm::kMultilane, 0, size)).makespan_s;
  const double bin = simulate(g, build_plan(g, Algorithm::kBinary, 0, size)).makespan_s;
  EXPECT_GT(bin / ml, 1.7);
  EXPECT_LT(bin / ml, 2.1);
  // And multilane stays near the lower bound.
  EXPECT_LT(ml / lower_bound_seconds(g, 0, size), 1.15 / CostModel{}.payload_efficiency);
}

TEST(Simulate, ParallelStreamsBeatTheLossLimitOfOneStream) {
  Grid one = make_grid({1, 1}, 1);
  one.wan[0].latency_s = 0.010;  // 20 ms RTT
  one.wan[0].loss = 0.001;
  Grid eight = one;
  eight.wan[0].streams = 8;
  const std::uint64_t size = 64 << 20;
  const double t1 = simulate(one, build_plan(one, Algorithm::kChain, 0, size)).makespan_s;
  const double t8 = simulate(eight, build_plan(eight, Algorithm::kChain, 0, size)).makespan_s;
  EXPECT_GT(t1 / t8, 6.0);
  CostModel m;
  EXPECT_NEAR(tcp_stream_limit(0.02, 0.001, m), 1448 * 1.22 / (0.02 * std::sqrt(0.001)), 1.0);
}

TEST(Simulate, EveryAlgorithmCompletesAndZeroBytesTakeNoTime) {
  const Grid g = make_grid({5, 4, 3}, 3);
  for (const auto& a : algorithms()) {
    const auto r = simulate(g, build_plan(g, a.id, 4, 1 << 20));
    for (int rank = 0; rank < g.size(); ++rank) {
      if (rank == 4) continue;
      EXPECT_GT(r.finish_s[static_cast<size_t>(rank)], 0.0) << a.name << " rank " << rank;
    }
    EXPECT_EQ(simulate(g, build_plan(g, a.id, 4, 0)).makespan_s, 0.0) << a.name;
  }
}

TEST(Simulate, SyntheticGridsScale) {
  const Grid g = synthetic_grid(10, 100);
  EXPECT_EQ(g.size(), 1000);
  const auto r = simulate(g, build_plan(g, Algorithm::kMultilane, 0, 64 << 20));
  EXPECT_GT(r.makespan_s, lower_bound_seconds(g, 0, 64 << 20));
  EXPECT_LT(r.makespan_s, 3 * lower_bound_seconds(g, 0, 64 << 20));
}

}  // namespace
}  // namespace gridbcast::topology
