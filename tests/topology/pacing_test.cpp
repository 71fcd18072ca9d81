// Pacing the links of multilane plans (topology/plan/pacing.cpp): each link's
// streams get its part of the NICs at both ends and of the WAN links between,
// only when the grid asks and only for multilane.
#include "topology/plan/pacing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "topology/loader.hpp"
#include "topology/plan/segments.hpp"

namespace gridbcast::topology {
namespace {

// testbed-hetero-nics without its comments: nodes with a 100 and a 50 Mbit/s
// NIC (three lanes, two on the 100 Mbit/s NIC) or three 50 Mbit/s NICs.
std::string hetero_nics(const std::string& pace, const std::string& wan_bandwidth) {
  return "defaults:\n"
         "  nic_bandwidth: 50 Mbit\n" +
         pace + "  wan: {latency: 10 ms, bandwidth: " + wan_bandwidth +
         ", streams: 4}\n"
         "sites:\n"
         "  - name: a\n"
         "    nodes:\n"
         "      - name: a[1-4]\n"
         "        nics:\n"
         "          - {address: '10.248.1.[1-4]', bandwidth: 100 Mbit}\n"
         "          - {address: '10.248.2.[1-4]'}\n"
         "  - name: b\n"
         "    nodes:\n"
         "      - name: b[1-2]\n"
         "        nics:\n"
         "          - {address: '10.249.1.[1-2]'}\n"
         "          - {address: '10.249.2.[1-2]'}\n"
         "          - {address: '10.249.3.[1-2]'}\n"
         "      - name: b[3-4]\n"
         "        nics:\n"
         "          - {address: '10.249.1.[3-4]', bandwidth: 100 Mbit}\n"
         "          - {address: '10.249.2.[3-4]'}\n"
         "wan:\n"
         "  - sites: [a, b]\n";
}

constexpr double kMbit = 1e6;

double bytes_per_second(double bps) {
  return bps * kPacedPayloadShare / 8;
}

TEST(Pacing, EveryMultilaneLinkGetsItsPartOfTheNicsAndTheWan) {
  const Grid g = load_grid_string(hetero_nics("  pace_lanes: true\n", "300 Mbit"), "inline.yaml");
  ASSERT_EQ(g.lane_count(), 3);
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, 64 << 20);
  const std::vector<LinkPace> paces = link_paces(g, plan);

  std::set<std::tuple<int, int, int, int>> links;
  for (const Transfer& t : plan.transfers) links.insert({t.from, t.to, t.lane_from, t.lane_to});
  ASSERT_EQ(paces.size(), links.size());
  for (const LinkPace& p : paces) {
    SCOPED_TRACE(std::to_string(p.from) + "." + std::to_string(p.lane_from) + " -> " +
                 std::to_string(p.to) + "." + std::to_string(p.lane_to));
    EXPECT_EQ(links.count({p.from, p.to, p.lane_from, p.lane_to}), 1u);
    // Every node sends and receives two links per lane, and every lane is
    // worth 50 Mbit/s (the 100 Mbit/s NIC carries two): 25 Mbit/s a link, over
    // the WAN's 4 streams a quarter of that each (the 300 Mbit/s link, 6 links
    // over it, leaves each 50).
    const bool wan = g.site_of(p.from) != g.site_of(p.to);
    EXPECT_DOUBLE_EQ(p.bytes_per_second, bytes_per_second(25 * kMbit / (wan ? 4 : 1)));
    EXPECT_EQ(pace_of(paces, p.from, p.to, p.lane_from, p.lane_to), p.bytes_per_second);
  }
  EXPECT_EQ(pace_of(paces, 0, 0, 0, 0), 0);  // no such link
  EXPECT_TRUE(std::is_sorted(paces.begin(), paces.end(), [](const auto& x, const auto& y) {
    return std::tie(x.from, x.to, x.lane_from, x.lane_to) <
           std::tie(y.from, y.to, y.lane_from, y.lane_to);
  }));
}

TEST(Pacing, ASlowWanLinkSetsThePaceOfTheLinksOverIt) {
  // 60 Mbit/s over six plan links: 10 Mbit/s each, less than any NIC part.
  const Grid g = load_grid_string(hetero_nics("  pace_lanes: true\n", "60 Mbit"), "inline.yaml");
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, 64 << 20);
  int over_wan = 0;
  for (const LinkPace& p : link_paces(g, plan)) {
    if (g.site_of(p.from) == g.site_of(p.to)) {
      EXPECT_DOUBLE_EQ(p.bytes_per_second, bytes_per_second(25 * kMbit));
    } else {
      ++over_wan;
      EXPECT_DOUBLE_EQ(p.bytes_per_second, bytes_per_second(10 * kMbit / 4));
    }
  }
  EXPECT_EQ(over_wan, 6);
}

TEST(Pacing, OnlyWhenTheGridAsksAndOnlyForMultilane) {
  const Grid off = load_grid_string(hetero_nics("", "300 Mbit"), "inline.yaml");
  EXPECT_FALSE(off.pace_lanes);
  EXPECT_TRUE(link_paces(off, build_plan(off, Algorithm::kMultilane, 0, 1 << 20)).empty());
  const Grid on = load_grid_string(hetero_nics("  pace_lanes: true\n", "300 Mbit"), "inline.yaml");
  for (Algorithm a : available_algorithms(on)) {
    SCOPED_TRACE(std::string(algorithm_name(a)));
    const std::vector<LinkPace> paces = link_paces(on, build_plan(on, a, 5, 1 << 20));
    EXPECT_EQ(paces.empty(), a != Algorithm::kMultilane);
  }
  // A plan with nothing to send has no links to pace.
  EXPECT_TRUE(link_paces(on, build_plan(on, Algorithm::kMultilane, 0, 0)).empty());
}

// 64 KiB on testbed-hetero-nics puts one segment on each WAN link of four
// streams: three streams stay idle, and paced at a quarter of the link's part
// the one segment took four times as long (multilane 26 ms, 17-21 ms after).
// The part goes to the streams that carry segments, so what the link sends in
// all never exceeds its part, which a rate limit relies on.
TEST(Pacing, ALinksPartGoesToTheStreamsThatCarrySegments) {
  const std::uint64_t segment = 16 << 10;
  // Paced lanes, and a rate limit on every node and on the WAN link (any plan).
  const Grid lanes =
      load_grid_string(hetero_nics("  pace_lanes: true\n", "300 Mbit"), "inline.yaml");
  const Grid limited = load_grid_string(
      hetero_nics("  max_rate: 40 Mbit\n", "300 Mbit, max_rate: 90 Mbit"), "inline.yaml");
  for (const Grid* g : {&lanes, &limited})
    for (const std::uint64_t size :
         {std::uint64_t{64} << 10, std::uint64_t{256} << 10, std::uint64_t{64} << 20}) {
      SCOPED_TRACE(std::to_string(size) + (g == &lanes ? " paced lanes" : " rate limits"));
      const Plan plan = build_plan(*g, Algorithm::kMultilane, 0, size);
      const std::vector<LinkPace> every = link_paces(*g, plan);
      const std::vector<LinkPace> carrying = link_paces(*g, plan, segment);
      ASSERT_FALSE(every.empty());
      ASSERT_EQ(every.size(), carrying.size());
      // The streams that carry, as the executor's segment lists deal them.
      SegmentOptions so;
      so.segment_bytes = segment;
      std::map<std::tuple<int, int, int, int>, std::set<int>> used;
      for (const LinkSegments& l : segment_schedule(plan, so).links)
        for (const Segment& seg : l.segments)
          used[{l.from, l.to, l.lane_from, l.lane_to}].insert(seg.stream);
      for (size_t i = 0; i < every.size(); ++i) {
        const LinkPace& a = every[i];
        const LinkPace& b = carrying[i];
        const bool wan = g->site_of(a.from) != g->site_of(a.to);
        EXPECT_EQ(a.streams, wan ? 4 : 1);
        EXPECT_EQ(b.streams,
                  static_cast<int>(used.at({a.from, a.to, a.lane_from, a.lane_to}).size()));
        // The link's part is the same; only the streams sharing it differ.
        EXPECT_DOUBLE_EQ(a.bytes_per_second * a.streams, b.bytes_per_second * b.streams);
      }
    }
  // 64 KiB: each WAN link carries one segment of 10,923 bytes, at its whole part.
  const Plan small = build_plan(lanes, Algorithm::kMultilane, 0, 64 << 10);
  int over_wan = 0;
  for (const LinkPace& p : link_paces(lanes, small, segment))
    if (lanes.site_of(p.from) != lanes.site_of(p.to)) {
      ++over_wan;
      EXPECT_EQ(p.streams, 1);
      EXPECT_DOUBLE_EQ(p.bytes_per_second, bytes_per_second(25 * kMbit));
    }
  EXPECT_EQ(over_wan, 6);
}

TEST(Pacing, LanesOnTheirOwnNicsGetTheWholeNicOverTheirLinks) {
  // Two nodes, two 40 Mbit/s NICs, two lanes: the root sends each half to the
  // other node over its own NIC, one link per lane, so each link gets 40.
  const Grid g = load_grid_string(
      "defaults: {nic_bandwidth: 40 Mbit, pace_lanes: true}\n"
      "sites:\n"
      "  - name: a\n"
      "    nodes:\n"
      "      - {name: 'n[1-2]', nics: [{address: '10.0.0.[1-2]'}, {address: '10.0.1.[1-2]'}]}\n",
      "inline.yaml");
  const std::vector<LinkPace> paces =
      link_paces(g, build_plan(g, Algorithm::kMultilane, 0, 1 << 20));
  ASSERT_EQ(paces.size(), 2u);
  for (const LinkPace& p : paces)
    EXPECT_DOUBLE_EQ(p.bytes_per_second, bytes_per_second(40 * kMbit));
}

}  // namespace
}  // namespace gridbcast::topology
