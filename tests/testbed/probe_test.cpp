// gridbcast probe on the emulated grid, shaped to exactly what the topology
// declares (root and network namespaces; skipped otherwise): the probe finds
// the shaping, and a node cut off mid-probe fails it naming the node, in
// bounded time. The accuracy figures with several runs and the probe's time
// on testbed-8x8 are scripts/bench_probe.py's (docs/PERFORMANCE.md).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "support/json.hpp"
#include "testbed_support.hpp"

namespace gridbcast::testing {
namespace {

TEST(TestbedProbe, TheHeteroNicsGridIsMeasuredNearItsShapingAndACutNodeIsNamed) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  TestbedGuard g(kSrc + "/site-configs/testbed-hetero-nics.yaml");
  ASSERT_TRUE(g.ok()) << g.log();
  TbChild c({kBin, "testbed", "run", g.file(), "--id", g.id(), "--", "gridbcast", "probe", g.file(),
             "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.out() << c.err();
  const auto j = last_json(c.out());
  ASSERT_TRUE(j["rows"].is_array()) << c.out();
  int nic_rows = 0;
  // One figure per NIC in the measured topology: the higher of its send and
  // receive (docs/TOPOLOGY.md). A test's tolerance is wider than the
  // benchmark's figures: this machine runs other tests meanwhile.
  std::map<std::string, double> nic;
  for (const auto& row : j["rows"]) {
    const std::string what = row["what"];
    ASSERT_TRUE(row["measured"].is_number()) << what;
    if (!row["declared"].is_number()) continue;  // a site's hop: the topology says nothing
    const double m = row["measured"], d = row["declared"];
    if (what.find(" nic ") != std::string::npos) {
      const std::string key = what.substr(0, what.find(" ("));
      nic[key] = std::max(nic[key], m / d);
      ++nic_rows;
    } else if (what.find("latency") != std::string::npos) {
      EXPECT_NEAR(m, d, 1.5e-3) << what;
    } else if (what.find("bandwidth") != std::string::npos && !row["lower_bound"].get<bool>()) {
      EXPECT_NEAR(m / d, 1.0, 0.3) << what;
    }
  }
  EXPECT_EQ(nic_rows, 2 * 18);  // a: 4 x 2 NICs; b: 2 x 3 + 2 x 2
  for (const auto& [name, ratio] : nic) EXPECT_NEAR(ratio, 1.0, 0.25) << name;

  // b2 cut off from its switches: its flows cannot connect or go silent; the
  // probe fails within its phase and --timeout, naming b2.
  TbChild down({kBin, "testbed", "shape", g.file(), "b2", "--id", g.id(), "--down"});
  ASSERT_EQ(down.wait(60s), 0) << down.err();
  const auto start = std::chrono::steady_clock::now();
  TbChild cut({kBin, "testbed", "run", g.file(), "--id", g.id(), "--", "gridbcast", "probe",
               g.file(), "--timeout", "3"});
  EXPECT_EQ(cut.wait(120s), 1) << cut.out() << cut.err();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  EXPECT_NE(cut.err().find("b2"), std::string::npos) << cut.err();
  TbChild up({kBin, "testbed", "shape", g.file(), "b2", "--id", g.id(), "--reset"});
  EXPECT_EQ(up.wait(60s), 0) << up.err();
}

}  // namespace
}  // namespace gridbcast::testing
