// `gridbcast probe` and `launch --probe` as a user runs them: real processes,
// loopback sockets (the emulated grid's figures are in tests/testbed).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <fstream>

#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

TEST(Probe, TheDefaultIsMeasuredEveryNicAndLinkHasARowAndTheOutputLoadsIntoPlan) {
  TempDir dir;
  const std::string out = (dir / "measured.yaml").string();
  Child c({kBin, "probe", "--lan-seconds", "0.1", "--wan-seconds", "0.1", "-o", out});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const std::string text = c.out();
  // The embedded default: 8 nodes of two NICs, two sites, one WAN link.
  for (const char* row : {"a1 nic 0 (127.0.1.1) send", "a1 nic 1 (127.0.2.1) receive",
                          "b4 nic 1 (127.0.2.14) receive", "site tokyo one hop",
                          "wan tokyo-osaka latency", "wan tokyo-osaka bandwidth tokyo->osaka",
                          "wan tokyo-osaka bandwidth osaka->tokyo", "the probe took"})
    EXPECT_NE(text.find(row), std::string::npos) << row << " in\n" << text;
  EXPECT_NE(c.err().find("probe: phase 1/"), std::string::npos) << "progress: " << c.err();
  const std::string yaml = slurp(out);
  EXPECT_NE(yaml.find("# Measured by gridbcast probe at "), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# measured "), std::string::npos) << yaml;
  Child plan({kBin, "plan", out, "--check", "--size", "1MiB"});
  EXPECT_EQ(plan.wait(60s), 0) << plan.err() << plan.out();
}

TEST(Probe, JsonHasEveryRowWithItsFiguresAndFlags) {
  // The default phases: the test checks every row is measured, also on a
  // machine busy with other tests.
  Child c({kBin, "probe", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const auto j = last_json(c.out());
  EXPECT_EQ(j["type"], "probe") << c.out();
  EXPECT_EQ(j["topology"], "default");
  ASSERT_TRUE(j["rows"].is_array());
  // 8 nodes x 2 NICs x 2 ways, 2 sites, 1 latency and 2 bandwidths of the link.
  EXPECT_EQ(j["rows"].size(), 32u + 2 + 3) << c.out();
  int flagged = 0;
  for (const auto& row : j["rows"]) {
    EXPECT_TRUE(row["measured"].is_number()) << row.dump();
    flagged += row["flagged"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(j["flagged"], flagged);
  EXPECT_TRUE(j["seconds"].is_number());
}

TEST(Probe, SettingsOutsideTheirRangeAreUsageErrors) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--pings", "1"},
                                               {"--lan-seconds", "0.01"},
                                               {"--wan-pairs", "0"}}) {
    std::vector<std::string> argv{kBin, "probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c(argv);
    EXPECT_EQ(c.wait(30s), 2) << args[0] << ": " << c.err();
  }
}

// launch --probe plans from the measured figures, says so beside the bound
// of the declared ones, and keeps the result beside the topology; a later
// launch reuses it while it is younger than --probe-max-age, and probes again
// when it is older or describes other nodes.
TEST(LaunchProbe, PlansFromTheMeasuredNetworkAndReusesAFreshResult) {
  TempDir dir;
  const std::string topo = (dir / "grid.yaml").string();
  std::filesystem::copy_file(kSrc + "/site-configs/default.yaml", topo);
  const std::string cache = (dir / "grid.probe.yaml").string();
  Child first({kBin, "launch", topo, "--probe", "--size", "2MiB", "--json"});
  ASSERT_EQ(first.wait(120s), 0) << first.err();
  auto j = last_json(first.out());
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["measured"], "measured by --probe just before") << first.out();
  EXPECT_TRUE(j["declared_max_flow_bound_seconds"].is_number());
  EXPECT_NE(first.err().find("probing the network first"), std::string::npos) << first.err();
  ASSERT_TRUE(std::filesystem::exists(cache));

  Child again({kBin, "launch", topo, "--probe", "--probe-max-age", "3600", "--size", "2MiB"});
  ASSERT_EQ(again.wait(120s), 0) << again.err();
  EXPECT_NE(again.err().find("planning from the probe of"), std::string::npos) << again.err();
  EXPECT_EQ(again.err().find("probing the network first"), std::string::npos) << again.err();
  EXPECT_NE(again.out().find("lower bound from the measured network"), std::string::npos)
      << again.out();
  EXPECT_NE(again.out().find("on the topology's declared figures the bound is"), std::string::npos)
      << again.out();

  // Older than allowed: probed again.
  const struct utimbuf old { 1000000000, 1000000000 };
  ASSERT_EQ(::utime(cache.c_str(), &old), 0);
  Child stale({kBin, "launch", topo, "--probe", "--probe-max-age", "3600", "--size", "1KiB"});
  ASSERT_EQ(stale.wait(120s), 0) << stale.err();
  EXPECT_NE(stale.err().find("old, over --probe-max-age: probing again"), std::string::npos)
      << stale.err();

  // A cache of another grid (a node renamed) is not used.
  std::string text = slurp(cache);
  const auto at = text.find("name: a1");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 8, "name: zz");
  std::ofstream(cache) << text;
  Child other({kBin, "launch", topo, "--probe", "--probe-max-age", "3600", "--size", "1KiB"});
  ASSERT_EQ(other.wait(120s), 0) << other.err();
  EXPECT_NE(other.err().find("describes other nodes, addresses or links"), std::string::npos)
      << other.err();
}

TEST(LaunchProbe, IsRefusedForProgramsAndNoProbeWinsOverTheTopology) {
  Child program({kBin, "launch", "--probe", "--", "/bin/true"});
  EXPECT_EQ(program.wait(30s), 2) << program.err();
  EXPECT_NE(program.err().find("applies to broadcasts"), std::string::npos) << program.err();
  TempDir dir;
  const std::string topo = (dir / "grid.yaml").string();
  std::string yaml = slurp(kSrc + "/site-configs/default.yaml");
  const auto d = yaml.find("\ndefaults:");
  ASSERT_NE(d, std::string::npos);
  yaml.insert(d + std::string("\ndefaults:").size(), "\n  probe: true");
  std::ofstream(topo) << yaml;
  Child asked({kBin, "launch", topo, "--size", "1KiB"});
  ASSERT_EQ(asked.wait(120s), 0) << asked.err();
  EXPECT_NE(asked.err().find("probing the network first"), std::string::npos) << asked.err();
  Child not_asked({kBin, "launch", topo, "--no-probe", "--size", "1KiB"});
  ASSERT_EQ(not_asked.wait(120s), 0) << not_asked.err();
  EXPECT_EQ(not_asked.err().find("probing"), std::string::npos) << not_asked.err();
}

}  // namespace
}  // namespace gridbcast::testing
