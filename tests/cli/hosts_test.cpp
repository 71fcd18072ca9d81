// Topologies without YAML (`--hosts`, `--hostfile`) and the command-line
// overrides of a topology's NIC and WAN figures, as a user runs them: the plan
// reflects them, a launch over a host file runs and verifies on loopback, and
// mistakes are usage errors naming the file, line and column.
#include <gtest/gtest.h>

#include <fstream>

#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(HostsOption, AHostListNeedsNoYaml) {
  Child c({kBin, "plan", "--hosts", "tokyo:localhost"});
  ASSERT_EQ(c.wait(30s), 0) << c.err();
  EXPECT_TRUE(has(c.out(), "1 ranks in 1 site(s), root localhost(0)")) << c.out();
  Child gone({kBin, "plan", "--hosts", "a:localhost,gridbcast-no-such-host.invalid"});
  EXPECT_EQ(gone.wait(30s), 2);
  EXPECT_TRUE(has(gone.err(),
                  "--hosts:1:13: host \"gridbcast-no-such-host.invalid\" has no "
                  "address"))
      << gone.err();
  Child both({kBin, "plan", kSrc + "/site-configs/testbed-2x2.yaml", "--hosts", "localhost"});
  EXPECT_EQ(both.wait(30s), 2);
  EXPECT_TRUE(has(both.err(), "give one of TOPOLOGY, --hosts and --hostfile")) << both.err();
}

TEST(HostsOption, AHostFileLaunchesAndVerifiesOnLoopback) {
  TempDir dir;
  std::ofstream(dir / "grid.hosts")
      << "# two sites on loopback\n"
         "e[1-2] site=east address=127.0.1.[1-2],127.0.1.[3-4] nics=2\n"
         "w[1-2] site=west address=127.0.2.[1-2] bandwidth=1Gbit\n";
  Child c({kBin, "launch", "-f", (dir / "grid.hosts").string(), "--size", "3MiB", "--json"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  const auto j = last_json(c.out());
  EXPECT_EQ(j["ranks"], 4) << c.out();
  EXPECT_EQ(j["sites"], 2) << c.out();
  EXPECT_EQ(j["verified"], true) << c.out();
  std::ofstream(dir / "bad.hosts") << "e1\ne2 slots=4\n";
  Child bad({kBin, "launch", "--hostfile", (dir / "bad.hosts").string()});
  EXPECT_EQ(bad.wait(30s), 2);
  EXPECT_TRUE(has(bad.err(), "bad.hosts:2:4: slots: gridbcast runs one rank per node"))
      << bad.err();
}

TEST(HostsOption, OverridesReplaceEveryNicAndWanFigure) {
  const std::string topo = kSrc + "/site-configs/testbed-2x4.yaml";
  Child plain({kBin, "plan", topo, "--format", "text"});
  ASSERT_EQ(plain.wait(30s), 0) << plain.err();
  EXPECT_TRUE(has(plain.out(), "over 4 streams")) << plain.out();
  Child c({kBin, "plan", topo, "--format", "text", "--streams", "2", "--nic-bandwidth", "50Mbit",
           "--wan-latency", "25ms"});
  ASSERT_EQ(c.wait(30s), 0) << c.err();
  EXPECT_TRUE(has(c.out(), "over 2 streams")) << c.out();
  EXPECT_FALSE(has(c.out(), "over 4 streams")) << c.out();
  EXPECT_TRUE(has(c.out(), "100 Mbit/s to")) << "two lanes of 50 Mbit/s: " << c.out();
  Child bad({kBin, "plan", topo, "--nic-bandwidth", "fast"});
  EXPECT_EQ(bad.wait(30s), 2);
  EXPECT_TRUE(has(bad.err(), "--nic-bandwidth")) << bad.err();
  Child range({kBin, "plan", topo, "--streams", "0"});
  EXPECT_EQ(range.wait(30s), 2);
}

}  // namespace
}  // namespace gridbcast::testing
