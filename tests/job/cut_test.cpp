// explain_cut: which nodes and WAN links a broadcast lost when links stop
// moving while every rank still answers the launcher (job/cut.hpp). The
// links here are what StragglerWatch::links gives at the first failure.
#include "job/cut.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/grids.hpp"
#include "topology/emit.hpp"
#include "topology/loader.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/verify.hpp"

namespace gridbcast::job {
namespace {

LinkState stalled(int from, int to) {
  return {from, to, true, 4.0, 1u << 20};
}
LinkState moving(int from, int to) {
  return {from, to, false, 0, 0, false, true};
}

// Sites s0..s<n-1> of two nodes each (ranks 2s, 2s+1), joined by `links`
// (pairs of sites) in that order.
topology::Grid sites_joined(int n, const std::vector<std::pair<int, int>>& links) {
  auto g = testing::make_grid(std::vector<int>(static_cast<size_t>(n), 2));
  const topology::WanLink proto = g.wan.front();
  g.wan.clear();
  for (auto [a, b] : links) {
    topology::WanLink l = proto;
    l.site_a = a;
    l.site_b = b;
    g.wan.push_back(l);
  }
  return g;
}

std::vector<int> ranks_of(const CutVerdict& v) {
  std::vector<int> out;
  for (const auto& n : v.cut_off) out.push_back(n.rank);
  return out;
}

// Two sites of four: s0n0..s0n3 are ranks 0-3, s1n0..s1n3 ranks 4-7.
TEST(CutOff, AWanLinkThatMovesNothingLosesTheFarSiteNotTheGatewaysThatFeedIt) {
  const auto g = testing::make_grid({4, 4});
  // Site s0's trees still move; its gateways' links across the WAN stall;
  // site s1's links are idle (nothing reaches it to forward).
  const CutVerdict v =
      explain_cut(g, 0, {moving(0, 1), moving(0, 2), moving(1, 3), stalled(2, 4), stalled(3, 5)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(v.routed_around.empty());
  for (const auto& n : v.cut_off) {
    EXPECT_NE(n.cause.find("cut off with site s1: WAN link s0–s1 moved nothing for 4.0 s"),
              std::string::npos)
        << n.cause;
    EXPECT_NE(n.cause.find("rank 2 (s0n2) to rank 4 (s1n0)"), std::string::npos) << n.cause;
  }
}

TEST(CutOff, OneGatewayFeedingBothTreesAcrossADeadWanIsNotBlamed) {
  // Node 2 has two stalled links, each receiver one: across sites that
  // says the WAN, not node 2.
  const auto g = testing::make_grid({4, 4});
  const CutVerdict v = explain_cut(g, 0, {moving(0, 2), stalled(2, 4), stalled(2, 5)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4, 5, 6, 7}));
}

TEST(CutOff, AWanLinkThatStillCarriesALinkBlamesTheReceiverNotTheWan) {
  const auto g = testing::make_grid({4, 4});
  const CutVerdict v = explain_cut(g, 0, {moving(0, 2), stalled(2, 4), moving(3, 5)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4}));
  ASSERT_EQ(v.cut_off.size(), 1u);
  EXPECT_NE(v.cut_off[0].cause.find("cut off from its peers: its links (rank 2 (s0n2) to rank 4 "
                                    "(s1n0)) moved nothing for 4.0 s"),
            std::string::npos)
      << v.cut_off[0].cause;
  EXPECT_TRUE(v.routed_around.empty());
}

TEST(CutOff, ANodeWhoseNicsDiedIsBlamedNotItsParentsOrChildren) {
  // Multilane over 8 nodes (job/straggler_test.cpp's two trees): node 3 is
  // fed by 1 (lane 0) and 6 (lane 1) and feeds 7; all three links stall.
  const auto g = testing::make_grid({8});
  const CutVerdict v =
      explain_cut(g, 0,
                  {moving(0, 1), moving(0, 2), moving(1, 4), moving(2, 5), stalled(1, 3),
                   stalled(6, 3), stalled(3, 7), moving(0, 7), moving(7, 5)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{3}));
}

TEST(CutOff, ALoneStalledLinkInsideASiteIsBlamedOnItsReceiver) {
  const auto g = testing::make_grid({8});
  EXPECT_EQ(ranks_of(explain_cut(g, 0, {moving(0, 1), stalled(1, 3)})), (std::vector<int>{3}));
}

TEST(CutOff, TheRootCutOffIsNamed) {
  const auto g = testing::make_grid({8});
  const CutVerdict v = explain_cut(g, 0, {stalled(0, 1), stalled(0, 2), moving(1, 3)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{0}));
}

TEST(CutOff, ASiteBeyondADeadLinkGoesWithItButTheSiteBeforeStays) {
  // s0 -- s1 -- s2 (ranks 0-1, 2-3, 4-5): s1's gateway to s2 stalls while
  // s0 still feeds s1.
  const auto g = testing::make_grid({2, 2, 2});
  const CutVerdict v = explain_cut(g, 0, {moving(1, 2), moving(2, 3), stalled(3, 4)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4, 5}));
  EXPECT_NE(v.cut_off[0].cause.find("WAN link s1–s2"), std::string::npos) << v.cut_off[0].cause;
}

TEST(CutOff, OfAMultiHopPathTheLinkNoMovingLinkCrossesIsBlamed) {
  // s0 sends to s2 directly over two hops (s0–s1–s2) while s0→s1 moves:
  // s1–s2 is the dead one.
  const auto g = testing::make_grid({2, 2, 2});
  const CutVerdict v = explain_cut(g, 0, {moving(0, 2), stalled(1, 4)});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4, 5}));
  EXPECT_NE(v.cut_off[0].cause.find("WAN link s1–s2"), std::string::npos) << v.cut_off[0].cause;
}

TEST(CutOff, AWanLinkWithAnotherPathIsRoutedAroundAndNobodyIsLost) {
  // A triangle: s0–s1, s1–s2, and s0–s2. s0–s1 dies; s2 still reaches s1.
  auto g = testing::make_grid({2, 2, 2});
  topology::WanLink back = g.wan.front();
  back.site_a = 0;
  back.site_b = 2;
  g.wan.push_back(back);
  const CutVerdict v = explain_cut(g, 0, {moving(0, 1), stalled(1, 2), moving(0, 4)});
  EXPECT_TRUE(v.cut_off.empty());
  ASSERT_EQ(v.routed_around.size(), 1u);
  EXPECT_EQ(v.routed_around[0].site_a, 0);
  EXPECT_EQ(v.routed_around[0].site_b, 1);
  EXPECT_NE(v.routed_around[0].cause.find("WAN link s0–s1 moved nothing for 4.0 s"),
            std::string::npos);

  // What the launcher runs next: the topology without it, as every rank
  // loads it, chains the sites over the links that remain, and its plan
  // holds the plan properties.
  std::erase_if(g.wan, [](const topology::WanLink& l) { return l.site_a == 0 && l.site_b == 1; });
  const topology::Grid next = topology::load_grid_string(topology::grid_to_yaml(g), "healed");
  EXPECT_EQ(next.wan.size(), 2u);
  EXPECT_EQ(next.site_chain(0), (std::vector<int>{0, 2, 1}));
  const auto plan = topology::build_plan(next, topology::Algorithm::kMultilane, 0, 1u << 20);
  const auto check = topology::verify_plan(next, plan);
  EXPECT_TRUE(check.ok()) << (check.errors.empty() ? "" : check.errors.front());
  for (const auto& t : plan.transfers)
    EXPECT_FALSE((next.site_of(t.from) == 0 && next.site_of(t.to) == 1) ||
                 (next.site_of(t.from) == 1 && next.site_of(t.to) == 0))
        << "a transfer over the dead link: " << t.from << " to " << t.to;
}

TEST(CutOff, ConnectionsUnansweredAcrossTheWanCutTheFarSiteOffAndSaySo) {
  // The WAN was cut before the broadcast's connections were up: the
  // gateways' connections across it go unanswered.
  const auto g = testing::make_grid({4, 4});
  LinkState a{2, 4, true, 3.0, 0, true}, b{3, 5, true, 3.0, 0, true};
  const CutVerdict v = explain_cut(g, 0, {moving(0, 2), a, b});
  EXPECT_EQ(ranks_of(v), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(v.cut_off[0].cause.find("WAN link s0–s1 moved nothing for 3.0 s with its connections "
                                    "unanswered (rank 2 (s0n2) to rank 4 (s1n0) connecting"),
            std::string::npos)
      << v.cut_off[0].cause;
}

TEST(CutOff, ALaneThatStillMovesKeepsItsWanLinkAliveAndBlamesTheNode) {
  // One NIC of b1 dies: the gateway's lane 1 to it stalls, its lane 0 still
  // moves, and no other link crosses the WAN: the WAN carries, so b1 alone.
  const auto g = testing::make_grid({4, 4});
  LinkState half = stalled(2, 4);
  half.moved = true;
  EXPECT_EQ(ranks_of(explain_cut(g, 0, {moving(0, 2), half})), (std::vector<int>{4}));
}

TEST(CutOff, TheVerdictDoesNotDependOnTheOrderOfTheLinks) {
  // s0 -- s1 -- s2 -- s3; node 4 (in s2) dies while fed from s0 (over
  // s0–s1, which nothing else crosses) and from s3 (over a link that
  // carries): node 4, whichever link comes first, not s0–s1 and beyond.
  const auto g = sites_joined(4, {{0, 1}, {1, 2}, {2, 3}});
  std::vector<LinkState> links = {moving(0, 1), moving(3, 5), moving(5, 6), stalled(1, 4),
                                  stalled(6, 4)};
  EXPECT_EQ(ranks_of(explain_cut(g, 0, links)), (std::vector<int>{4}));
  std::swap(links[3], links[4]);
  EXPECT_EQ(ranks_of(explain_cut(g, 0, links)), (std::vector<int>{4}));
}

TEST(CutOff, ALinkIsRoutedAroundOnlyWhereTheNextPlanKeepsToDirectLinks) {
  // A star s0–s1, s0–s2, s0–s3 with s1–s2 beside it. s0–s1 dies: over the
  // rest the chain would run s0, s2, s1, s3, and s1 to s3 has no link of
  // its own (its packets would need the network to route around s0–s1):
  // s1 is cut off instead.
  const auto star = sites_joined(4, {{0, 1}, {0, 2}, {0, 3}, {1, 2}});
  const std::vector<LinkState> links = {moving(0, 4), moving(0, 6), stalled(1, 2)};
  CutVerdict v = explain_cut(star, 0, links);
  EXPECT_EQ(ranks_of(v), (std::vector<int>{2, 3}));
  EXPECT_TRUE(v.routed_around.empty());
  // The triangle is routed around, unless the next plan is not chained by
  // site (binomial, chain, ...), whose transfers could cross the dead link.
  const auto triangle = sites_joined(3, {{0, 1}, {1, 2}, {0, 2}});
  const std::vector<LinkState> cut = {moving(0, 1), stalled(1, 2), moving(0, 4)};
  v = explain_cut(triangle, 0, cut, [](const topology::Grid&) { return true; });
  EXPECT_TRUE(v.cut_off.empty());
  EXPECT_EQ(v.routed_around.size(), 1u);
  v = explain_cut(triangle, 0, cut, [](const topology::Grid&) { return false; });
  EXPECT_EQ(ranks_of(v), (std::vector<int>{2, 3}));
  EXPECT_TRUE(v.routed_around.empty());
}

TEST(CutOff, ASiteCutOffByManyLinksHasAShortCause) {
  // s0 at the centre of 12 sites, every link to them dead: each node's cause
  // names two links, then counts the rest.
  std::vector<std::pair<int, int>> spokes;
  for (int s = 1; s <= 12; ++s) spokes.push_back({0, s});
  const auto g = sites_joined(13, spokes);
  std::vector<LinkState> links = {moving(0, 1)};
  for (int s = 1; s <= 12; ++s) links.push_back(stalled(1, 2 * s));
  const CutVerdict v = explain_cut(g, 0, links);
  ASSERT_EQ(v.cut_off.size(), 24u);
  for (const auto& n : v.cut_off) {
    EXPECT_LT(n.cause.size(), 500u) << n.cause;
    EXPECT_NE(n.cause.find("and 10 more WAN links"), std::string::npos) << n.cause;
  }
}

TEST(CutOff, NothingStalledIsNoVerdict) {
  const auto g = testing::make_grid({4, 4});
  EXPECT_TRUE(explain_cut(g, 0, {moving(0, 1), moving(2, 4)}).empty());
  EXPECT_TRUE(explain_cut(g, 0, {}).empty());
  // Links outside the grid (the watch refuses them first) count for nothing.
  EXPECT_TRUE(explain_cut(g, 0, {stalled(-1, 2), stalled(3, 8), stalled(5, 5)}).empty());
}

TEST(CutOff, ACauseStaysOneShortLineHoweverManyLinksStall) {
  // A node with hundreds of stalled links: the cause lists four, then counts.
  const auto g = testing::make_grid({300});
  std::vector<LinkState> links;
  for (int r = 1; r < 300; ++r) links.push_back(stalled(r, 0));
  const CutVerdict v = explain_cut(g, 5, links);
  ASSERT_EQ(ranks_of(v), (std::vector<int>{0}));
  EXPECT_LT(v.cut_off[0].cause.size(), 400u);
  EXPECT_NE(v.cut_off[0].cause.find("and 295 more"), std::string::npos) << v.cut_off[0].cause;
}

}  // namespace
}  // namespace gridbcast::job
