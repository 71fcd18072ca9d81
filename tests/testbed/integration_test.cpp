// gridbcast on the emulated grid (root and network namespaces; skipped
// otherwise): every algorithm broadcasts byte-exact to every rank of the
// 2-site x 4-node testbed (10 ms WAN, 2 x 100 Mbit/s NICs per node) through
// `gridbcast testbed run ... -- gridbcast launch ...`, and the heterogeneous
// three-site grid runs once.
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/json.hpp"
#include "testbed_support.hpp"

namespace gridbcast::testing {
namespace {

using TestbedTwoByFour = OneTestbed<TwoByFour>;

TEST_F(TestbedTwoByFour, EveryAlgorithmBroadcastsByteExactToEveryRank) {
  const auto& g = *guard_;
  const std::string topo = g.file();
  int root = 0;
  for (const char* a : {"multilane", "binomial", "scatter_rd", "scatter_ring", "scatter_ring_tuned",
                        "chain", "binary"}) {
    // "gridbcast" after -- means the testbed's own binary.
    TbChild c({kBin, "testbed", "run", topo, "--id", g.id(), "--", "gridbcast", "launch", topo,
               "--algorithm", a, "--size", "4MiB", "--root", std::to_string(root)});
    ASSERT_EQ(c.wait(180s), 0) << a << ":\n" << c.out() << c.err();
    EXPECT_NE(c.out().find("verified: all 8 ranks"), std::string::npos) << a << ":\n" << c.out();
    EXPECT_NE(c.err().find("using the running testbed"), std::string::npos) << c.err();
    root = (root + 3) % 8;  // roots in both sites
  }
  // The ranks ran inside the namespaces and are gone: only what `up` started remains.
  for (const auto& n : g.state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << n.ns;
}

// Liveness is by progress, not by wall-clock time: a broadcast that keeps
// moving outlasts many --timeout periods (the old launcher allowed 2 x timeout
// + 5 s in all, 7 s here).
TEST_F(TestbedTwoByFour, ABroadcastLastingOverThreeTimeoutsCompletes) {
  const auto& g = *guard_;
  const std::string topo = g.file();
  TbChild c({kBin, "testbed", "run", topo, "--id", g.id(), "--", "gridbcast", "launch", topo,
             "--algorithm", "multilane", "--size", "256MiB", "--timeout", "1", "--json",
             "--progress", "-"});
  ASSERT_EQ(c.wait(180s), 0) << c.out() << c.err();
  // About one progress record a second on stderr, the last ones near the end.
  const std::string err = c.err();
  size_t records = 0;
  for (auto at = err.find("{\"type\":\"progress\""); at != std::string::npos;
       at = err.find("{\"type\":\"progress\"", at + 1))
    ++records;
  EXPECT_GE(records, 4u) << err;
  EXPECT_NE(err.find("\"eta_seconds\":"), std::string::npos) << err;
  const auto j = last_json(c.out());
  EXPECT_EQ(j["verified"], true) << c.out();
  ASSERT_TRUE(j["seconds"]["median"].is_number()) << c.out();
  EXPECT_GT(j["seconds"]["median"].get<double>(), 7.0) << "too short to show it: " << c.out();
}

TEST_F(TestbedTwoByFour, LaunchWithTheNetnsBackendExplicitly) {
  const auto& g = *guard_;  // GRIDBCAST_TESTBED names it (OneTestbed)
  TbChild c({kBin, "launch", g.file(), "--backend", "netns", "--size", "1MiB", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.out() << c.err();
  EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
}

// MPI programs run inside the nodes' namespaces too (launch -- PROGRAM with
// the netns backend): the progress programs of issue 26 (a large Isend before
// a Barrier and its variants; MPI_Ibcast and MPI_Ibarrier beside sends,
// several in flight, on a freed subcommunicator) over the 10 ms WAN.
TEST_F(TestbedTwoByFour, MpiProgramsRunInsideTheNodesAndNeverDeadlock) {
  const auto& g = *guard_;
  const std::string topo = g.file();
  const std::string bin = GRIDBCAST_MPI_TEST_BIN;
  for (const auto& [program, name] : {std::pair{bin + "/progress_gridbcast", "progress"},
                                      std::pair{bin + "/ibcast_gridbcast", "ibcast"}}) {
    TbChild c({kBin, "testbed", "run", topo, "--id", g.id(), "--", "gridbcast", "launch", topo,
               "--", program, "8"});
    ASSERT_EQ(c.wait(300s), 0) << name << ":\n" << c.out() << c.err();
    EXPECT_NE(c.out().find(std::string(name) + ": 8 ranks, "), std::string::npos) << c.out();
    EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos) << c.out();
  }
  for (const auto& n : g.state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << n.ns;
}

TEST(TestbedRun, NetnsBackendWithoutATestbedSaysHowToStartOne) {
  ::setenv("GRIDBCAST_TESTBED", "/nonexistent/gridbcast-testbed", 1);
  TbChild c({kBin, "launch", kSrc + "/site-configs/testbed-2x4.yaml", "--backend", "netns",
             "--size", "1KiB"});
  ::unsetenv("GRIDBCAST_TESTBED");
  EXPECT_EQ(c.wait(30s), 1);
  EXPECT_NE(c.err().find("gridbcast testbed up"), std::string::npos) << c.err();
}

TEST(TestbedRun, ThreeHeterogeneousSitesUpRunDown) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  const std::string topo = kSrc + "/site-configs/testbed-3-sites-hetero.yaml";
  const std::string id = unique_test_id();
  const std::string prefix = testbed::testbed_prefix("testbed-3-sites-hetero", id);
  struct Cleanup {  // `run` takes the testbed down itself; this covers failures
    std::string prefix;
    ~Cleanup() {
      std::ostringstream log;
      try {
        testbed::down(prefix, log);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
  } cleanup{prefix};
  TbChild c({kBin, "testbed", "run", topo, "--id", id, "--", "gridbcast", "launch", topo, "--size",
             "4MiB", "--root", "9", "--algorithm", "multilane"});
  ASSERT_EQ(c.wait(240s), 0) << c.out() << c.err();
  EXPECT_NE(c.out().find("verified: all 15 ranks"), std::string::npos) << c.out();
  EXPECT_NE(c.err().find("is up"), std::string::npos) << c.err();
  EXPECT_NE(c.err().find("removed"), std::string::npos) << c.err();
  EXPECT_TRUE(testbed::netns_with_prefix(prefix).empty());
  EXPECT_TRUE(testbed::root_links_with_prefix(prefix).empty());
}

}  // namespace
}  // namespace gridbcast::testing
