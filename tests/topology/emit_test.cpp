// topology/emit: a Grid written as YAML loads back into the same Grid, for
// every shipped site-config, with the comments where they were asked for.
#include "topology/emit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "topology/loader.hpp"

namespace gridbcast::topology {
namespace {

void expect_same(const Grid& a, const Grid& b, const std::string& what) {
  EXPECT_EQ(a.name, b.name) << what;
  EXPECT_EQ(a.segment_bytes, b.segment_bytes) << what;
  EXPECT_EQ(a.lanes, b.lanes) << what;
  EXPECT_EQ(a.congestion, b.congestion) << what;
  EXPECT_EQ(a.pace_lanes, b.pace_lanes) << what;
  EXPECT_EQ(a.probe, b.probe) << what;
  ASSERT_EQ(a.sites.size(), b.sites.size()) << what;
  for (size_t s = 0; s < a.sites.size(); ++s) {
    EXPECT_EQ(a.sites[s].name, b.sites[s].name) << what;
    EXPECT_EQ(a.sites[s].ranks, b.sites[s].ranks) << what;
    EXPECT_NEAR(a.sites[s].latency_s, b.sites[s].latency_s, 1e-9) << what;
    const auto& m = a.sites[s].multicast;
    const auto& n = b.sites[s].multicast;
    EXPECT_EQ(m.enabled, n.enabled) << what;
    EXPECT_EQ(m.range(), n.range()) << what;
    EXPECT_EQ(m.ttl, n.ttl) << what;
    EXPECT_EQ(m.port, n.port) << what;
    EXPECT_EQ(m.mtu, n.mtu) << what;
  }
  ASSERT_EQ(a.nodes.size(), b.nodes.size()) << what;
  for (size_t r = 0; r < a.nodes.size(); ++r) {
    EXPECT_EQ(a.nodes[r].name, b.nodes[r].name) << what;
    EXPECT_EQ(a.nodes[r].host, b.nodes[r].host) << what;
    EXPECT_EQ(a.nodes[r].site, b.nodes[r].site) << what;
    ASSERT_EQ(a.nodes[r].nics.size(), b.nodes[r].nics.size()) << what;
    for (size_t j = 0; j < a.nodes[r].nics.size(); ++j) {
      EXPECT_EQ(a.nodes[r].nics[j].address, b.nodes[r].nics[j].address) << what;
      EXPECT_EQ(a.nodes[r].nics[j].device, b.nodes[r].nics[j].device) << what;
      EXPECT_NEAR(a.nodes[r].nics[j].bandwidth_bps, b.nodes[r].nics[j].bandwidth_bps, 0.5) << what;
    }
  }
  ASSERT_EQ(a.wan.size(), b.wan.size()) << what;
  for (size_t i = 0; i < a.wan.size(); ++i) {
    EXPECT_EQ(a.wan[i].site_a, b.wan[i].site_a) << what;
    EXPECT_EQ(a.wan[i].site_b, b.wan[i].site_b) << what;
    EXPECT_NEAR(a.wan[i].latency_s, b.wan[i].latency_s, 1e-9) << what;
    EXPECT_NEAR(a.wan[i].bandwidth_bps, b.wan[i].bandwidth_bps, 0.5) << what;
    EXPECT_NEAR(a.wan[i].loss, b.wan[i].loss, 1e-15) << what;
    EXPECT_EQ(a.wan[i].streams, b.wan[i].streams) << what;
    EXPECT_EQ(a.wan[i].tls, b.wan[i].tls) << what;
    EXPECT_EQ(a.wan[i].congestion, b.wan[i].congestion) << what;
  }
}

TEST(Emit, EveryShippedSiteConfigLoadsBackTheSame) {
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(GRIDBCAST_SOURCE_DIR "/site-configs")) {
    if (e.path().extension() != ".yaml") continue;
    const Grid g = load_grid_file(e.path().string());
    expect_same(g, load_grid_string(grid_to_yaml(g), g.name + ".yaml"), e.path().string());
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(Emit, FiguresNoFileCanSayExactlyStillRoundTripAndCommentsLandBesideThem) {
  Grid g = load_grid_file(GRIDBCAST_SOURCE_DIR "/site-configs/testbed-2x4.yaml");
  g.nodes[3].nics[1].bandwidth_bps = 98765432.0;
  g.wan[0].latency_s = 0.0103217;
  g.wan[0].loss = 0.000123;
  g.sites[1].latency_s = 24.5e-6;
  g.lanes = 3;
  g.pace_lanes = true;
  g.probe = true;
  g.sites[0].multicast.ttl = 4;
  g.sites[0].multicast.port = 5000;
  GridComments c{{"top", "measured\nat noon"},
                 {"nic:3:1", "measured 98.8 Mbit/s"},
                 {"wan:0:latency", "measured 10.3 ms"},
                 {"site:1", "one hop"}};
  const std::string yaml = grid_to_yaml(g, c);
  expect_same(g, load_grid_string(yaml, "x.yaml"), "edited testbed-2x4");
  EXPECT_EQ(yaml.rfind("# measured at noon", 0), 0u) << yaml;  // one line
  EXPECT_NE(yaml.find("bandwidth: 98765432 bit  # measured 98.8 Mbit/s"), std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("# measured 10.3 ms"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("latency: 24500 ns  # one hop"), std::string::npos) << yaml;
}

}  // namespace
}  // namespace gridbcast::topology
