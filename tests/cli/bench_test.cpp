// `gridbcast bench` as a user runs it: real rank processes on loopback.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <thread>

#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(BenchCommand, SweepsSizesAndAlgorithmsOnTheEmbeddedDefault) {
  Child c({kBin, "bench", "--sizes", "1KiB:64KiB", "--algorithms", "multilane,binomial",
           "--min-iterations", "2", "--max-iterations", "3", "--json"});
  ASSERT_EQ(c.wait(300s), 0) << c.err();
  const std::string out = c.out();
  const auto j = last_json(out);
  EXPECT_EQ(j["ranks"], 8) << out;
  EXPECT_EQ(j["method"], "ack") << out;
  // 1, 4, 16, 64 KiB for each of the two algorithms.
  ASSERT_EQ(j["points"].size(), 8u) << out;
  for (const auto& p : j["points"]) {
    EXPECT_EQ(p["verified"], true) << p;
    EXPECT_GT(p["max_us"].get<double>(), 0) << "every point was timed: " << p;
  }
  EXPECT_EQ(j["points"][3]["bytes"], 65536) << out;
}

TEST(BenchCommand, BarrierMethodAsCsvAndRoundsWithAPlot) {
  Child csv({kBin, "bench", "--sizes", "4096,1MiB", "--algorithms", "chain", "--method", "barrier",
             "--min-iterations", "2", "--max-iterations", "3", "--csv", "--root", "5"});
  ASSERT_EQ(csv.wait(300s), 0) << csv.err();
  EXPECT_EQ(csv.out().rfind("algorithm,used,bytes,", 0), 0u) << csv.out();
  EXPECT_EQ(count(csv.out(), "\nchain,chain,"), 2u) << csv.out();

  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child plot({kBin, "bench", kSrc + "/site-configs/three-sites-hetero.yaml", "--sizes",
              "64KiB:1MiB", "--algorithms", "auto,scatter_ring_tuned", "--method", "rounds",
              "--rounds", "3", "--min-iterations", "2", "--max-iterations", "2", "--plot",
              dir + "/bench.svg"});
  ASSERT_EQ(plot.wait(300s), 0) << plot.err();
  EXPECT_NE(plot.out().find("# Size"), std::string::npos) << plot.out();
  EXPECT_NE(plot.out().find("# scatter_ring_tuned"), std::string::npos) << plot.out();
  const std::string svg = slurp(dir + "/bench.svg");
  // Two algorithms and two dashed bounds (max-flow and simple).
  EXPECT_EQ(count(svg, "<polyline class=\"series\""), 4u) << svg;
  std::filesystem::remove_all(dir);
}

TEST(BenchCommand, BadArgumentsAreNamed) {
  for (const auto& [args, what] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--sizes", "64KiB:1KiB"}, "FROM:TO"},
           {{"--sizes", "1KiB:1MiB:x1"}, "step"},
           {{"--algorithms", "multilane,fastest"}, "unknown algorithm \"fastest\""},
           {{"--method", "guess"}, "--method"},
           {{"--target-stdev", "150%"}, "--target-stdev"},
           {{"--root", "8"}, "outside 0..7"},
           {{"--min-iterations", "9", "--max-iterations", "3"}, "above --max-iterations"}}) {
    std::vector<std::string> argv{kBin, "bench"};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c(argv);
    EXPECT_EQ(c.wait(30s), 2) << args[0];  // a usage error
    EXPECT_NE(c.err().find(what), std::string::npos) << args[0] << ": " << c.err();
  }
}

// A root stopped between samples leaves every other rank waiting for its go,
// with no broadcast in flight to time out: the launcher notices the root has
// stopped saying it is alive, within a bound, and names it ("rank 0 (a1)").
// Stopped during a broadcast (1 KiB rounds leave little time between), the
// other ranks' progress deadline fires first and they name it with its lane
// ("rank 0 (a1, 127.0.1.1 lane 0)"). Either way the root is named.
TEST(BenchCommand, AStoppedRootFailsTheJobWithinABoundAndIsNamed) {
  Child c({kBin, "bench", "--sizes", "1KiB", "--algorithms", "binomial", "--method", "rounds",
           "--rounds", "1", "--target-stdev", "0.0001%", "--max-iterations", "1000000",
           "--max-time", "100000", "--timeout", "2"});
  const pid_t root = rank_process(c.pid(), 0);
  ASSERT_GT(root, 0);
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(root, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const int status = c.wait(60s);
  ::kill(root, SIGCONT);
  EXPECT_GT(status, 0) << "the launcher did not fail in time";
  // 3 broadcasts' allowance (1 s each at least) and twice the 2 s timeout plus 5 s.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 30s);
  EXPECT_NE(c.err().find("rank 0 (a1"), std::string::npos) << c.err();
}

}  // namespace
}  // namespace gridbcast::testing
