// The testbed's build step as data (testbed/script.cpp), without root: the
// script of shipped site-configs against golden files, and its structure.
//
// The goldens in tests/testbed/data/script/ were first captured from the build
// step before it became a script (it ran these very commands), so a match
// means the refactor kept every command and its order. After an intended
// change, regenerate them and review the diff:
//   GRIDBCAST_UPDATE_GOLDEN=1 build/tests/testbed_tests --gtest_filter='*TestbedScript*'
#include "testbed/script.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "testbed_support.hpp"
#include "topology/loader.hpp"

namespace gridbcast::testbed {
namespace {

const std::string kSrc = GRIDBCAST_SOURCE_DIR;
constexpr const char* kGoldenId = "golden";

struct GoldenCase {
  std::string config;  // site-configs/<config>.yaml
  Latency latency;
};

std::string golden_name(const GoldenCase& c) {
  return c.config + "." + std::string(latency_name(c.latency)) + ".txt";
}

// The script as `testbed up --id golden` builds it, with fixed paths.
std::vector<Step> script_of(const topology::Grid& grid, Latency latency) {
  const std::string prefix = testbed_prefix(grid.name, kGoldenId);
  const Layout l = plan_layout(grid, kGoldenId, preferred_management_block(prefix));
  ScriptOptions o;
  o.latency = latency;
  o.exe = "gridbcast";
  o.state_dir = "/run/gridbcast/" + prefix;
  return build_script(grid, l, o);
}

std::vector<Step> script_of(const std::string& config, Latency latency) {
  return script_of(topology::load_grid_file(kSrc + "/site-configs/" + config + ".yaml"), latency);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << golden_name(c);
}

class TestbedScriptGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(TestbedScriptGolden, MatchesTheGoldenFile) {
  const std::string text = format_script(script_of(GetParam().config, GetParam().latency));
  const std::string path = kSrc + "/tests/testbed/data/script/" + golden_name(GetParam());
  if (const char* u = std::getenv("GRIDBCAST_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << text;
    std::cerr << "wrote " << path << "\n";
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no golden file " << path << " (GRIDBCAST_UPDATE_GOLDEN=1 writes it)";
  std::stringstream golden;
  golden << in.rdbuf();
  const auto want = lines_of(golden.str()), got = lines_of(text);
  // Name the first difference rather than dumping thousands of lines.
  for (size_t i = 0; i < std::min(want.size(), got.size()); ++i)
    ASSERT_EQ(got[i], want[i]) << path << ":" << i + 1 << " differs";
  EXPECT_EQ(got.size(), want.size())
      << path << ": the script has " << got.size() << " lines, the golden file " << want.size();
}

INSTANTIATE_TEST_SUITE_P(ShippedConfigs, TestbedScriptGolden,
                         ::testing::Values(GoldenCase{"testbed-2x2", Latency::kDelayLine},
                                           GoldenCase{"testbed-2x2", Latency::kNetem},
                                           GoldenCase{"testbed-hetero-3x", Latency::kDelayLine}),
                         [](const ::testing::TestParamInfo<GoldenCase>& p) {
                           std::string n = golden_name(p.param);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// `gridbcast testbed up --dry-run` prints this very script and changes nothing.
TEST(TestbedScript, DryRunPrintsTheScript) {
  const std::string config = kSrc + "/site-configs/testbed-2x2.yaml";
  testing::TbChild c(
      {testing::kBin, "testbed", "up", "--dry-run", config, "--id", kGoldenId, "--delay", "netem"});
  ASSERT_EQ(c.wait(std::chrono::seconds(30)), 0) << c.err();
  std::string out = c.out();
  // The delay lines would run this binary; the golden says "gridbcast".
  for (size_t at; (at = out.find(testing::kBin)) != std::string::npos;)
    out.replace(at, testing::kBin.size(), "gridbcast");
  const std::string script = format_script(script_of("testbed-2x2", Latency::kNetem));
  ASSERT_GE(out.size(), script.size());
  EXPECT_EQ(out.substr(out.size() - script.size()), script);
  EXPECT_EQ(out.rfind("# gridbcast testbed up --dry-run: testbed gb", 0), 0u) << out.substr(0, 200);
  // Nothing was built.
  const auto prefix = testbed_prefix("testbed-2x2", kGoldenId);
  EXPECT_FALSE(state_exists(state_dir(prefix)));
  EXPECT_TRUE(netns_with_prefix(prefix).empty());
}

size_t index_of_choice(const std::vector<Step>& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (std::holds_alternative<ChooseLatency>(s[i].action)) return i;
  return s.size();
}

// The runner builds the script again once it has decided how latency is
// emulated and goes on after ChooseLatency: sound only if every step up to
// it is the same whatever the decision.
TEST(TestbedScript, StepsUpToTheLatencyChoiceDoNotDependOnIt) {
  for (const std::string config : {"testbed-2x2", "testbed-hetero-3x", "testbed-lossy"}) {
    const auto netem = script_of(config, Latency::kNetem);
    const auto dly = script_of(config, Latency::kDelayLine);
    const size_t at = index_of_choice(netem);
    ASSERT_LT(at, netem.size()) << config;
    ASSERT_EQ(at, index_of_choice(dly)) << config;
    const std::vector<Step> a(netem.begin(), netem.begin() + static_cast<long>(at));
    const std::vector<Step> b(dly.begin(), dly.begin() + static_cast<long>(at));
    EXPECT_EQ(format_script(a), format_script(b)) << config;
    EXPECT_NE(format_script(netem), format_script(dly)) << config;
  }
}

TEST(TestbedScript, DelayLinesOnlyWithTheDelayLineOnePerRouterWithWanLinks) {
  auto count = [](const std::vector<Step>& s) {
    std::vector<int> sites;
    for (const auto& step : s)
      if (const auto* d = std::get_if<StartDelayLine>(&step.action)) {
        sites.push_back(d->site);
        EXPECT_EQ(d->argv.at(0), "gridbcast");
        EXPECT_NE(d->log.find("/run/gridbcast/"), std::string::npos);
      }
    return sites;
  };
  EXPECT_EQ(count(script_of("testbed-hetero-3x", Latency::kDelayLine)),
            (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(count(script_of("testbed-hetero-3x", Latency::kNetem)).empty());
  // They come last: everything they route through exists when they start.
  const auto s = script_of("testbed-2x2", Latency::kDelayLine);
  EXPECT_TRUE(std::holds_alternative<StartDelayLine>(s.back().action));
}

TEST(TestbedScript, WithoutWanLinksNothingIsProbedOrDelayed) {
  const auto grid = topology::load_grid_string(R"(
name: one-site
defaults:
  nic_bandwidth: 100 Mbit
sites:
  - name: a
    nodes:
      - name: a[1-3]
        nics:
          - address: 10.250.1.[1-3]
)",
                                               "one-site.yaml");
  const auto s = script_of(grid, Latency::kDelayLine);
  const auto& c = std::get<ChooseLatency>(s.at(index_of_choice(s)).action);
  EXPECT_EQ(c.probe_ns, "");
  EXPECT_EQ(c.assumed, Latency::kNone);
  for (const auto& step : s) {
    EXPECT_FALSE(std::holds_alternative<StartDelayLine>(step.action)) << step.what;
    if (const auto* b = std::get_if<Batch>(&step.action)) {
      for (const auto& line : b->lines) EXPECT_EQ(line.find("tuntap"), std::string::npos) << line;
    }
  }
}

// A site that declares jumbo frames (`multicast: {mtu: M}`) gets them on every
// link of its lanes: both ends of each NIC's veth and the lane's bridge; the
// other site's links keep the default.
TEST(TestbedScript, ASiteMtuSetsItsBridgesAndVeths) {
  const auto grid = topology::load_grid_string(R"(
name: jumbo
defaults:
  nic_bandwidth: 100 Mbit
  wan: {latency: 1 ms, bandwidth: 100 Mbit}
sites:
  - name: a
    multicast: {mtu: 9000}
    nodes:
      - name: a[1-2]
        nics:
          - address: 10.250.1.[1-2]
          - address: 10.250.2.[1-2]
  - name: b
    nodes:
      - name: b1
        nics:
          - address: 10.251.1.1
wan:
  - sites: [a, b]
)",
                                               "jumbo.yaml");
  int bridges = 0, veths = 0;
  for (const auto& step : script_of(grid, Latency::kDelayLine)) {
    const auto* b = std::get_if<Batch>(&step.action);
    if (b == nullptr) continue;
    for (const auto& line : b->lines) {
      const bool jumbo = line.find(" mtu 9000") != std::string::npos;
      if (line.find(" type bridge mcast_snooping") != std::string::npos) {
        const bool site_a = step.what.find("\"a\"") != std::string::npos;
        EXPECT_EQ(jumbo, site_a) << step.what << ": " << line;
        bridges += jumbo;
      } else if (line.find(" type veth peer name ") != std::string::npos &&
                 step.what.find("setting up node") != std::string::npos) {
        const bool node_a = step.what.find("\"a") != std::string::npos;
        // Both ends: "link add DEV mtu 9000 type veth peer name PORT mtu 9000 netns NS".
        const size_t first = line.find(" mtu 9000");
        EXPECT_EQ(jumbo, node_a) << line;
        if (node_a) {
          EXPECT_LT(first, line.find(" type veth")) << line;
          EXPECT_NE(line.find(" mtu 9000", first + 1), std::string::npos) << line;
        }
        veths += jumbo;
      } else {
        EXPECT_FALSE(jumbo) << line;
      }
    }
  }
  EXPECT_EQ(bridges, 2);  // site a's two lanes
  EXPECT_EQ(veths, 4);    // a1 and a2, two NICs each
}

// Nothing in a batch line that iproute2's batch parser treats specially
// (run_batch refuses such lines; the script never makes them).
TEST(TestbedScript, BatchLinesArePlainWords) {
  for (const auto& step : script_of("testbed-hetero-3x", Latency::kDelayLine)) {
    if (const auto* b = std::get_if<Batch>(&step.action)) {
      EXPECT_TRUE(b->tool == "ip" || b->tool == "tc") << b->tool;
      for (const auto& line : b->lines) {
        EXPECT_FALSE(line.empty()) << step.what;
        for (const char ch : line)
          EXPECT_TRUE(ch >= 0x20 && ch < 0x7f && ch != '#' && ch != '"' && ch != '\'' && ch != '\\')
              << line;
      }
    }
  }
}

}  // namespace
}  // namespace gridbcast::testbed
