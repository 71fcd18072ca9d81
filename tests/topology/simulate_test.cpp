#include "topology/simulate.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "support/grids.hpp"
#include "topology/bound.hpp"
#include "topology/loader.hpp"
#include "topology/plan/segments.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;

// A model without per-segment costs, for figures checked to the nanosecond.
CostModel bytes_only() {
  CostModel m;
  m.segment_overhead_s = 0;
  m.frame_header_bytes = 0;
  return m;
}

TEST(Simulate, OneTransferTakesSizeOverBandwidthPlusOneHop) {
  const Grid g = make_grid({2}, 1, 1);  // 10 Gbit NICs
  CostModel m = bytes_only();
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

TEST(Simulate, BbrIsNotHeldToTheLossLimit) {
  // One segment size for both: the model's choice of it reads the grid's
  // congestion control, which differs between the grids compared here.
  CostModel loss = bytes_only();
  loss.segment_bytes = 1 << 20;
  CostModel bbr = loss;
  bbr.congestion = Congestion::kBbr;
  EXPECT_NEAR(tcp_stream_limit(0.02, 0.001, bbr), bbr.tcp_window_bytes / 0.02 * 0.999, 1.0);
  EXPECT_EQ(tcp_stream_limit(0.02, 0, bbr), tcp_stream_limit(0.02, 0, CostModel{}));
  Grid g = make_grid({1, 1}, 1);
  g.wan[0].latency_s = 0.010;
  g.wan[0].loss = 0.001;
  const auto plan = build_plan(g, Algorithm::kChain, 0, 64 << 20);
  EXPECT_GT(simulate(g, plan, loss).makespan_s / simulate(g, plan, bbr).makespan_s, 10.0);
  EXPECT_EQ(parse_congestion("cubic"), Congestion::kLossBased);
  EXPECT_EQ(parse_congestion("reno"), Congestion::kLossBased);
  EXPECT_EQ(parse_congestion("bbr"), Congestion::kBbr);
  EXPECT_EQ(parse_congestion("vegas"), std::nullopt);
  // A link that names its congestion control is priced with it whatever the
  // hosts' default; one that names none follows the default.
  Grid named = g;
  named.wan[0].congestion = "bbr";
  EXPECT_EQ(simulate(named, plan, loss).makespan_s, simulate(g, plan, bbr).makespan_s);
  named.congestion = "bbr";
  named.wan[0].congestion = "";
  EXPECT_EQ(simulate(named, plan, loss).makespan_s, simulate(g, plan, bbr).makespan_s);
  named.wan[0].congestion = "reno";
  EXPECT_EQ(simulate(named, plan, bbr).makespan_s, simulate(g, plan, loss).makespan_s);
}

// Each segment costs its ends segment_overhead_s and its header: a chain of
// one link pays it once per segment, and smaller segments pay it more often.
TEST(Simulate, EverySegmentCostsItsEndsTheOverheadAndItsHeader) {
  const Grid g = make_grid({2}, 1, 1);  // 10 Gbit NICs
  const std::uint64_t size = 16 << 20;
  const auto plan = build_plan(g, Algorithm::kChain, 0, size);
  CostModel with = bytes_only(), without = bytes_only();
  with.segment_overhead_s = 50e-6;
  with.frame_header_bytes = 32;
  for (const std::uint64_t seg : {std::uint64_t{64} << 10, std::uint64_t{1} << 20}) {
    with.segment_bytes = without.segment_bytes = seg;
    const double frames = static_cast<double>(size / seg);
    const double extra = simulate(g, plan, with).makespan_s - simulate(g, plan, without).makespan_s;
    EXPECT_NEAR(extra, frames * (50e-6 + 32 / (1.25e9 * with.payload_efficiency)), 1e-7) << seg;
  }
}

// Hand-made plans with one segment per transfer (segment = H), so each
// transfer holds its NICs for D = H / rate.
struct OneSegmentPlans : ::testing::Test {
  static constexpr std::uint64_t kHalf = 8 << 20;
  Grid grid = make_grid({3}, 1, 2);  // 10 Gbit NICs, two per node
  CostModel model = bytes_only();
  double d = 0;
  void SetUp() override {
    model.segment_bytes = kHalf;
    d = static_cast<double>(kHalf) / (1.25e9 * model.payload_efficiency);
  }
  Plan plan(std::vector<Transfer> transfers) const {
    Plan p;
    p.algorithm = Algorithm::kChain;
    p.ranks = grid.size();
    p.size = 2 * kHalf;
    p.transfers = std::move(transfers);
    return p;
  }
};

// Rank 1's lane-0 NIC takes X then Y; the root's lane 1 is idle while Y waits,
// so W, placed after Y, fills that gap instead of queueing behind Y, and V
// follows X on lane 0: every rank is done after 2D.
TEST_F(OneSegmentPlans, ALaterTransferFillsTheGapAnEarlierOneLeft) {
  const auto r = simulate(grid,
                          plan({{0, 1, 0, kHalf, 0, 0, 1},        // X
                                {0, 1, kHalf, kHalf, 1, 0, 1},    // Y: waits for X at rank 1
                                {0, 2, 0, kHalf, 1, 1, 1},        // W: root lane 1 is free
                                {0, 2, kHalf, kHalf, 0, 1, 1}}),  // V: after X on lane 0
                          model);
  EXPECT_NEAR(r.finish_s[1], 2 * d + model.lan_latency_s, 1e-9);
  EXPECT_NEAR(r.finish_s[2], 2 * d + model.lan_latency_s, 1e-9);
}

// One TCP stream sends in plan order: rank 1 gets its second half first, but
// must forward the first half first, so the second waits behind it. Store
// and forward (forward_bytes 0): the first half leaves rank 1 once all of
// it is in (2D), the second after it. Cut-through: the first half leaves
// with its first piece (from D, as it arrives), so rank 2 is done a D
// sooner, a piece's time behind the root.
TEST_F(OneSegmentPlans, AStreamSendsItsSegmentsInPlanOrder) {
  const double lat = model.lan_latency_s;
  const Plan p = plan({{0, 1, kHalf, kHalf, 0, 0, 1},    // arrives at D
                       {0, 1, 0, kHalf, 0, 0, 1},        // arrives from D to 2D
                       {1, 2, 0, kHalf, 0, 0, 1},        // from 2D (cut-through: from D)
                       {1, 2, kHalf, kHalf, 0, 0, 1}});  // after it, not at D
  CostModel whole = model;
  whole.forward_bytes = 0;
  const auto r = simulate(grid, p, whole);
  EXPECT_NEAR(r.finish_s[1], 2 * d + lat, 1e-9);
  EXPECT_NEAR(r.finish_s[2], 4 * d + 2 * lat, 1e-9);
  ASSERT_EQ(model.forward_bytes, kForwardBytes);
  const double piece = d * static_cast<double>(kForwardBytes) / static_cast<double>(kHalf);
  const auto cut = simulate(grid, p, model);
  EXPECT_NEAR(cut.finish_s[1], 2 * d + lat, 1e-9);
  EXPECT_NEAR(cut.finish_s[2], 3 * d + piece + 2 * lat, 1e-9);
}

// Two lanes on one NIC (k > NICs): TCP shares the NIC between their
// connections, so two transfers on the root's lanes 0 and 1 each run at half
// its rate and both end at 2D; on one lane the same two go one after the
// other at the full rate (D, then 2D). Where a node's lanes have NICs of their
// own (OneSegmentPlans' two-NIC nodes) each gets its whole NIC.
TEST_F(OneSegmentPlans, LanesSharingANicEachGetAnEqualPartOfIt) {
  grid = make_grid({3}, 1, 1);
  grid.lanes = 2;
  const double lat = model.lan_latency_s;
  const auto shared = simulate(grid,
                               plan({{0, 1, 0, kHalf, 0, 0, 1},        // lane 0
                                     {0, 2, kHalf, kHalf, 1, 1, 1}}),  // lane 1, same NIC
                               model);
  EXPECT_NEAR(shared.finish_s[1], 2 * d + lat, 1e-9);
  EXPECT_NEAR(shared.finish_s[2], 2 * d + lat, 1e-9);
  // One lane, store and forward: whole frames, one after the other. Cut-
  // through: the executor writes both links' frames at once (a connection
  // each), which the simulator sees in 64 KiB chunks taking turns, so both
  // end at about 2D, the first a chunk sooner.
  const Plan one = plan({{0, 1, 0, kHalf, 0, 0, 1},        // lane 0
                         {0, 2, kHalf, kHalf, 0, 0, 1}});  // lane 0 too
  CostModel whole = model;
  whole.forward_bytes = 0;
  const auto one_lane = simulate(grid, one, whole);
  EXPECT_NEAR(one_lane.finish_s[1], d + lat, 1e-9);
  EXPECT_NEAR(one_lane.finish_s[2], 2 * d + lat, 1e-9);
  const auto turns = simulate(grid, one, model);
  EXPECT_NEAR(turns.finish_s[1], 2 * d + lat, d / 100);
  EXPECT_NEAR(turns.finish_s[2], 2 * d + lat, 1e-9);
  grid = make_grid({3}, 1, 2);
  const auto own_nics = simulate(grid,
                                 plan({{0, 1, 0, kHalf, 0, 0, 1},        // NIC 0
                                       {0, 2, kHalf, kHalf, 1, 1, 1}}),  // NIC 1
                                 model);
  EXPECT_NEAR(own_nics.finish_s[1], d + lat, 1e-9);
  EXPECT_NEAR(own_nics.finish_s[2], d + lat, 1e-9);
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

TEST(Simulate, SyntheticGridsWithMixedNicsScale) {
  const Grid g = synthetic_grid(3, 40, true);
  EXPECT_EQ(g.size(), 120);
  EXPECT_EQ(g.nodes[1].nics.size(), 2u);
  EXPECT_EQ(g.nodes[2].nics.size(), 4u);
  EXPECT_EQ(g.nodes[3].nics.size(), 1u);
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, 64 << 20);
  EXPECT_EQ(plan.lanes, g.automatic_lane_count());
  const auto r = simulate(g, plan);
  const double bound = max_flow_bound_seconds(g, 0, 64 << 20);
  EXPECT_GT(r.makespan_s, bound);
  EXPECT_LT(r.makespan_s, 3 * bound);
}

// The scale the issue asks about (docs/PERFORMANCE.md, "Scale"): ten chained
// sites of a thousand nodes, 1 MiB. Each site feeds the next from the top of
// its trees (topology/plan/multilane.cpp), so the chain adds a couple of hops
// a site, not a tree's depth: the model's time is within 5 % of the max-flow
// bound (it was 1.07 x when the next site waited for a leaf).
TEST(Simulate, TenSitesOfAThousandStayWithinFivePercentOfTheBoundAtOneMebibyte) {
  const Grid g = synthetic_grid(10, 1000);
  const std::uint64_t size = 1 << 20;
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, size);
  CostModel m;
  m.segment_bytes = resolve_segment_bytes(g, plan, 0);
  const double ratio = simulate(g, plan, m).makespan_s / max_flow_bound_seconds(g, 0, size);
  EXPECT_LE(ratio, 1.05);
  EXPECT_GE(ratio, 1.0);
}

// The simulator's memory is bounded: a plan past kMaxSimulatedSegments is
// refused before anything is cut, naming the count.
TEST(Simulate, RefusesAPlanPastItsBudgetOfSegments) {
  const Grid g = testing::make_grid({2});
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, std::uint64_t{32} << 20);
  CostModel m;
  m.segment_bytes = 1;  // 32 Mi segments
  EXPECT_EQ(simulated_segments(g, plan, m), std::uint64_t{32} << 20);
  try {
    (void)simulate(g, plan, m);
    ADD_FAILURE() << "simulated " << simulated_segments(g, plan, m) << " segments";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("33554432 segments"), std::string::npos) << e.what();
  }
  m.segment_bytes = 0;
  EXPECT_LE(simulated_segments(g, plan, m), kMaxSimulatedSegments);
  EXPECT_GT(simulate(g, plan, m).makespan_s, 0);
}

// A lossy WAN link whose declared streams, held to the loss limit each,
// cannot carry what the broadcast needs of it is named with the streams that
// would (issue 28: three-sites-hetero's beta-gamma link, 0.01 % loss at
// 20 ms one way with 8 streams, made multilane 1.75 x its bound in the
// model; 16 streams, 1.06 x). Links without loss, with enough streams or
// under BBR are not.
TEST(StreamShortfall, ALossyLinkWithTooFewStreamsIsNamedWithTheStreamsItNeeds) {
  Grid g = load_grid_file(GRIDBCAST_SOURCE_DIR "/site-configs/three-sites-hetero.yaml");
  const auto all = stream_shortfalls(g, Congestion::kLossBased, 0);
  ASSERT_EQ(all.size(), 1u);
  const StreamShortfall& s = all.front();
  EXPECT_EQ(g.sites.at(static_cast<size_t>(s.link->site_a)).name, "beta");
  EXPECT_EQ(g.sites.at(static_cast<size_t>(s.link->site_b)).name, "gamma");
  EXPECT_EQ(s.streams, 8);
  // MSS x 1.22 / (RTT x sqrt(loss)) on the wire: 1448 x 1.22 / (0.04 x 0.01)
  // bytes/s of payload, 1514 bytes a frame.
  const double stream = 1448 * 1.22 / (0.04 * 0.01) * 8 * 1514 / 1448;
  EXPECT_NEAR(s.stream_bps, stream, stream * 1e-9);
  EXPECT_NEAR(s.carried_bps, 8 * stream, stream * 1e-8);
  EXPECT_EQ(s.wanted_bps, 2e9);
  EXPECT_EQ(s.needed, static_cast<int>(std::ceil(2e9 / stream)));
  const std::string text = describe(g, s);
  EXPECT_NE(text.find("WAN link beta-gamma: its 8 streams carry at most "), std::string::npos)
      << text;
  EXPECT_NE(text.find(std::to_string(s.needed) + " would carry the 2 Gbit/s"), std::string::npos)
      << text;

  // What the broadcast needs: the max-flow bound's rate, under the link's.
  const double bound = max_flow_bound(g, 0).rate_bps;
  ASSERT_LT(bound, 2e9);
  const auto needs = stream_shortfalls(g, Congestion::kLossBased, bound);
  ASSERT_EQ(needs.size(), 1u);
  EXPECT_EQ(needs.front().wanted_bps, bound);
  EXPECT_EQ(needs.front().needed, static_cast<int>(std::ceil(bound / stream)));

  EXPECT_TRUE(stream_shortfalls(g, Congestion::kBbr, 0).empty()) << "the hosts' BBR";
  for (WanLink& l : g.wan)
    if (l.loss > 0) l.congestion = "bbr";
  EXPECT_TRUE(stream_shortfalls(g, Congestion::kLossBased, 0).empty()) << "the link's BBR";
  for (WanLink& l : g.wan) {
    l.congestion.clear();
    if (l.loss > 0) l.streams = s.needed;
  }
  EXPECT_TRUE(stream_shortfalls(g, Congestion::kLossBased, 0).empty()) << "enough streams";

  // A link that no stream count it may have would carry (5 % loss; and a
  // loss and latency from a topology far past any real one): "more than 64",
  // never a count past what an int holds.
  for (const auto& [loss, latency] : {std::pair{0.05, 0.02}, std::pair{0.9, 1e6}}) {
    for (WanLink& l : g.wan)
      if (l.loss > 0) {
        l.loss = loss;
        l.latency_s = latency;
        l.streams = 8;
      }
    const auto none = stream_shortfalls(g, Congestion::kLossBased, 0);
    ASSERT_EQ(none.size(), 1u);
    EXPECT_EQ(none.front().needed, kMaxWanStreams + 1);
    const std::string says = describe(g, none.front());
    EXPECT_NE(says.find("even 64, the most a link takes, would not carry the 2 Gbit/s"),
              std::string::npos)
        << says;
  }
}

}  // namespace
}  // namespace gridbcast::topology
