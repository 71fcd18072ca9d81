// Fault injection on the emulated grid (root and namespaces; skipped
// otherwise): a rank killed with SIGKILL, the root killed, a rank stopped with
// SIGSTOP, the WAN link taken down mid-broadcast, a node's NICs cut. Every time
// the launcher exits non-zero naming the failed peer within the deadline (or,
// where the job may heal, 3 with the others' copies verified), no rank process
// is left in any namespace, and a new launch on the same testbed works.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "support/json.hpp"
#include "support/temp_dir.hpp"
#include "testbed_support.hpp"

namespace gridbcast::testing {
namespace {

constexpr int kTimeoutSeconds = 4;  // --timeout: progress deadline of every broadcast

class TestbedFaults : public OneTestbed<TwoByFour> {
 protected:
  // A long job: 16 MiB at 100 Mbit/s takes about a second per iteration. A
  // loss fails it (--require all) unless `heal`.
  std::unique_ptr<TbChild> start_job(bool heal = false) {
    std::vector<std::string> argv = {kBin,
                                     "launch",
                                     guard_->file(),
                                     "--backend",
                                     "netns",
                                     "--size",
                                     "16MiB",
                                     "--iterations",
                                     heal ? "4" : "30",
                                     "--timeout",
                                     std::to_string(kTimeoutSeconds)};
    if (heal) {
      // The summary on standard output; -v: a line as each iteration ends
      // (mid_broadcast waits for the first).
      argv.insert(argv.end(), {"--json", "-v"});
    } else {
      argv.insert(argv.end(), {"--no-verify", "--require", "all"});
    }
    return std::make_unique<TbChild>(argv);
  }

  // The rank processes of a launcher (`ip netns exec` becomes the rank), by rank.
  std::map<int, pid_t> ranks_of(const TbChild& launcher) {
    std::map<int, pid_t> out;
    for (int i = 0; i < 200 && out.size() < 8; ++i) {
      std::this_thread::sleep_for(50ms);
      out.clear();
      for (auto [pid, rank] : children_of(launcher.pid(), "GRIDBCAST_RANK"))
        if (!rank.empty()) out[std::stoi(rank)] = pid;
    }
    return out;
  }

  // Waits (bounded) until a healing job is in its second iteration, so its
  // connections are up and data moves: a fault then hits links that carry.
  void mid_broadcast(const TbChild& job) {
    for (int i = 0; i < 1200; ++i) {
      if (job.err().find("iteration 1/4:") != std::string::npos) {
        std::this_thread::sleep_for(200ms);
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "the first iteration did not end in 60 s: " << job.err();
  }

  void expect_failure_naming(TbChild& launcher, const std::string& who) {
    const auto start = std::chrono::steady_clock::now();
    const int status = launcher.wait(std::chrono::seconds(3 * kTimeoutSeconds + 15));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(status, -1) << "the launcher did not exit in time";
    EXPECT_NE(status, 0);
    EXPECT_NE(launcher.err().find(who), std::string::npos) << launcher.err();
    EXPECT_LT(took, 3 * kTimeoutSeconds + 15);
    for (const auto& n : guard_->state().nodes)
      EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
  }

  // `gridbcast testbed shape` of node b3 (`how`: --bandwidth RATE, --reset, ...).
  int shape_b3(std::vector<std::string> how) {
    std::vector<std::string> argv = {kBin, "testbed", "shape",     guard_->file(),
                                     "b3", "--id",    guard_->id()};
    argv.insert(argv.end(), how.begin(), how.end());
    TbChild c(argv);
    return c.wait(60s);
  }
  // b3's links as the topology declares them again, however the test ends.
  struct B3Reset {
    TestbedFaults* t;
    ~B3Reset() { t->shape_b3({"--reset"}); }
  };

  void expect_a_new_launch_works() {
    TbChild again({kBin, "launch", guard_->file(), "--backend", "netns", "--size", "2MiB"});
    ASSERT_EQ(again.wait(120s), 0) << again.err();
    EXPECT_NE(again.out().find("verified: all 8 ranks"), std::string::npos) << again.out();
  }
};

TEST_F(TestbedFaults, KilledRankFailsTheJobAndNamesIt) {
  auto job = start_job();
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(ranks.at(5), SIGKILL), 0);
  expect_failure_naming(*job, "rank 5 (b2)");
  expect_a_new_launch_works();
}

// Without --require all, the 7 others heal around a killed rank: they run
// the job again among themselves (the second site's plan re-routed without
// b2), verify, and the summary names b2 as missing (exit status 3).
TEST_F(TestbedFaults, KilledRankIsHealedAroundOnTheEmulatedGrid) {
  auto job = start_job(true);
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(ranks.at(5), SIGKILL), 0);
  ASSERT_EQ(job->wait(120s), 3) << job->out() << job->err();
  const auto j = last_json(job->out());
  EXPECT_EQ(j["verified"], true) << job->out();
  EXPECT_EQ(j["ranks"], 7) << job->out();
  ASSERT_EQ(j["missing"].size(), 1u) << job->out();
  EXPECT_EQ(j["missing"][0]["node"], "b2");
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// A node whose links turn slow mid-broadcast (shaped to 5 Mbit/s both
// ways) is named a straggler from its links' kernel figures, set aside, and
// the 7 others finish without it; it then gets its copy from the root alone
// (its rate restored here, so the test does not wait on it). Nothing else is
// named, every copy verifies, and the job ends complete (0).
TEST_F(TestbedFaults, ASlowNodeIsSetAsideAndTheOthersFinishWithoutIt) {
  auto shape = [&](std::vector<std::string> how) { return shape_b3(std::move(how)); };
  const B3Reset reset{this};
  TbChild job(
      {kBin, "launch", guard_->file(), "--backend", "netns", "--size", "128MiB", "--json", "-v"});
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(shape({"--bandwidth", "5Mbit"}), 0);
  bool named = false;
  for (int i = 0; i < 1200 && !named; ++i) {
    std::this_thread::sleep_for(50ms);
    named = job.err().find("set aside rank 6 (b3)") != std::string::npos;
  }
  ASSERT_TRUE(named) << job.err();
  ASSERT_EQ(shape({"--reset"}), 0);
  ASSERT_EQ(job.wait(300s), 0) << job.out() << job.err();
  const auto j = last_json(job.out());
  EXPECT_EQ(j["verified"], true) << job.out();
  EXPECT_EQ(j["complete"], true) << job.out();
  EXPECT_EQ(j["ranks"], 8) << job.out();
  ASSERT_EQ(j["stragglers"].size(), 1u) << job.out();
  EXPECT_EQ(j["stragglers"][0]["node"], "b3");
  // The rule's own bound: under a third of what its two 100 Mbit/s lanes can
  // carry, averaged over the reports that found it behind (the first may
  // straddle the moment it slowed: 33.8 Mbit/s was seen against one lane's
  // third, 33.3).
  EXPECT_LT(j["stragglers"][0]["rate_bytes_per_second"].get<double>(), 2 * 100e6 / 8 / 3);
  EXPECT_EQ(j["missing"].size(), 0u);
  const std::string err = job.err();
  EXPECT_EQ(err.find("is a straggler"), err.rfind("is a straggler"))
      << "named more than once: " << err;
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// The root killed while a straggler takes its copy from it alone (issue 27):
// every other node holds a verified copy by then, so one of them sends the
// rest of the straggler's copy from its own, and the job ends complete (0),
// the summary saying who took over and why.
TEST_F(TestbedFaults, TheRootLostWhileAStragglerTakesItsCopyIsHealedFromACopy) {
  auto shape = [&](std::vector<std::string> how) { return shape_b3(std::move(how)); };
  const B3Reset reset{this};
  TempDir dir;
  std::string data(48 << 20, '\0');
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& c : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  std::ofstream(dir / "data.bin", std::ios::binary) << data;
  TbChild job({kBin, "launch", guard_->file(), "--backend", "netns", "--file",
               (dir / "data.bin").string(), "--output", (dir / "{node}" / "copy").string(),
               "--json", "-v"});
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(shape({"--bandwidth", "5Mbit"}), 0);
  // The stragglers' own run: the root (rank 0 there) and each straggler,
  // b3 among them (a parent of b3 may be set aside with it: FILES.md, "Slow
  // nodes", what the rule cannot see).
  pid_t root = -1;
  for (int i = 0; i < 2400 && root < 0; ++i) {
    std::this_thread::sleep_for(50ms);
    const std::string err = job.err();
    const auto at = err.find("the others are done; now the straggler");
    if (at == std::string::npos) continue;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    ASSERT_NE(line.find("(b3)"), std::string::npos) << line;
    size_t named = 0;
    for (auto p = line.find("rank "); p != std::string::npos; p = line.find("rank ", p + 1))
      ++named;
    const auto ranks = children_of(job.pid(), "GRIDBCAST_RANK");
    if (ranks.size() != named + 1) continue;
    for (auto [pid, rank] : ranks)
      if (rank == "0") root = pid;
  }
  ASSERT_GT(root, 0) << job.err();
  ASSERT_EQ(::kill(root, SIGKILL), 0);
  ASSERT_EQ(shape({"--reset"}), 0);
  ASSERT_EQ(job.wait(300s), 0) << job.out() << job.err();
  EXPECT_NE(job.err().find("holds a verified copy: it is the source now, after rank 0 (a1) was "
                           "killed by signal 9"),
            std::string::npos)
      << job.err();
  const auto j = last_json(job.out());
  EXPECT_EQ(j["verified"], true) << job.out();
  EXPECT_EQ(j["complete"], true) << job.out();
  bool b3 = false;
  for (const auto& st : j["stragglers"]) b3 = b3 || st["node"] == "b3";
  EXPECT_TRUE(b3) << job.out();
  ASSERT_EQ(j["took_over"].size(), 1u) << job.out();
  EXPECT_EQ(j["took_over"][0]["lost_rank"], 0);
  EXPECT_EQ(j["copies"].size(), 7u) << job.out();
  // The new source sent only what the straggler lacked.
  const auto at = job.err().rfind("resume: sent ");
  ASSERT_NE(at, std::string::npos) << job.err();
  std::cout << "from the copy: " << job.err().substr(at, job.err().find('(', at) - at) << "\n";
  for (const auto& n : {"a2", "a3", "a4", "b1", "b2", "b3", "b4"})
    EXPECT_TRUE(slurp((dir / n / "copy").string()) == data) << n;
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

TEST_F(TestbedFaults, KilledRootFailsTheJobAndNamesIt) {
  auto job = start_job();
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(ranks.at(0), SIGKILL), 0);
  expect_failure_naming(*job, "rank 0 (a1)");
  expect_a_new_launch_works();
}

TEST_F(TestbedFaults, StoppedRankFailsTheJobWithinTheDeadline) {
  auto job = start_job();
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(ranks.at(2), SIGSTOP), 0);
  expect_failure_naming(*job, "rank 2 (a3");
  ::kill(ranks.at(2), SIGCONT);  // reaped by then; harmless if the PID is gone
  expect_a_new_launch_works();
}

// `gridbcast testbed shape TOPOLOGY WHAT ARGS` (WHAT: a node, or --wan A-B),
// undone (--reset) however the test ends.
struct Shaped {
  std::string file, id;
  std::vector<std::string> what;
  int shape(std::vector<std::string> how) const {
    std::vector<std::string> argv = {kBin, "testbed", "shape", file, "--id", id};
    argv.insert(argv.end(), what.begin(), what.end());
    argv.insert(argv.end(), how.begin(), how.end());
    TbChild c(argv);
    return c.wait(60s);
  }
  ~Shaped() { shape({"--reset"}); }
};

TEST_F(TestbedFaults, WanLinkDownFailsTheJobNamingTheSiteItCutOff) {
  auto job = start_job();
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  std::this_thread::sleep_for(1500ms);
  Shaped wan{guard_->file(), guard_->id(), {"--wan", "a-b"}};
  ASSERT_EQ(wan.shape({"--down"}), 0);
  // Ranks of site b stall waiting for data from site a; the gateways' links
  // across the WAN had data waiting and nothing acknowledged: site b is cut
  // off, and with --require all that fails the job.
  const int status = job->wait(std::chrono::seconds(3 * kTimeoutSeconds + 15));
  EXPECT_GT(status, 0) << "the launcher did not fail in time";
  EXPECT_NE(job->err().find("is cut off with site b: WAN link a–b moved nothing"),
            std::string::npos)
      << job->err();
  EXPECT_NE(job->err().find("no progress"), std::string::npos) << job->err();
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// Healing, when a loss may be: the WAN link down cuts site b off while its
// ranks still answer the launcher (on the management network); the four
// ranks of site a finish (3: completed on the survivors), and the summary
// names each node of site b and why.
TEST_F(TestbedFaults, ACutWanLinkLosesTheFarSiteAndTheRootsSiteFinishes) {
  auto job = start_job(true);
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  ASSERT_NO_FATAL_FAILURE(mid_broadcast(*job));
  Shaped wan{guard_->file(), guard_->id(), {"--wan", "a-b"}};
  ASSERT_EQ(wan.shape({"--down"}), 0);
  ASSERT_EQ(job->wait(120s), 3) << job->out() << job->err();
  const auto j = last_json(job->out());
  EXPECT_EQ(j["verified"], true) << job->out();
  EXPECT_EQ(j["ranks"], 4) << job->out();
  ASSERT_EQ(j["missing"].size(), 4u) << job->out();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["missing"][i]["node"], "b" + std::to_string(i + 1)) << job->out();
    EXPECT_NE(j["missing"][i]["cause"].get<std::string>().find("cut off with site b"),
              std::string::npos)
        << job->out();
  }
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// The WAN link cut before the broadcast's connections are up (a site whose
// data network is down from the start, its ranks on the management network
// as ever): the gateways' connections across it go unanswered, which names
// site b cut off as a stall does; site a finishes (3).
TEST_F(TestbedFaults, AWanLinkCutBeforeTheConnectionsLosesTheFarSite) {
  Shaped wan{guard_->file(), guard_->id(), {"--wan", "a-b"}};
  ASSERT_EQ(wan.shape({"--down"}), 0);
  auto job = start_job(true);
  ASSERT_EQ(job->wait(120s), 3) << job->out() << job->err();
  const auto j = last_json(job->out());
  EXPECT_EQ(j["verified"], true) << job->out();
  EXPECT_EQ(j["ranks"], 4) << job->out();
  ASSERT_EQ(j["missing"].size(), 4u) << job->out();
  EXPECT_NE(j["missing"][0]["cause"].get<std::string>().find("with its connections unanswered"),
            std::string::npos)
      << job->out();
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// A node cut off from its peers (its NICs' switch ports down) but not from
// the launcher: named from its peers' stalled links, not the nodes below it
// that report it; the 7 others finish.
TEST_F(TestbedFaults, ANodeCutOffFromItsPeersIsHealedAround) {
  Shaped b3{guard_->file(), guard_->id(), {"b3"}};
  auto job = start_job(true);
  auto ranks = ranks_of(*job);
  ASSERT_EQ(ranks.size(), 8u) << job->err();
  ASSERT_NO_FATAL_FAILURE(mid_broadcast(*job));
  ASSERT_EQ(b3.shape({"--down"}), 0);
  ASSERT_EQ(job->wait(120s), 3) << job->out() << job->err();
  const auto j = last_json(job->out());
  EXPECT_EQ(j["verified"], true) << job->out();
  EXPECT_EQ(j["ranks"], 7) << job->out();
  ASSERT_EQ(j["missing"].size(), 1u) << job->out();
  EXPECT_EQ(j["missing"][0]["node"], "b3");
  EXPECT_NE(j["missing"][0]["cause"].get<std::string>().find("cut off from its peers"),
            std::string::npos)
      << job->out();
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

// `testbed shape --wan` names a link by its two sites, either order, and
// refuses any other name listing the links there are, before it touches a
// testbed (none is up for this test).
TEST(TestbedShapeWan, ALinkThatIsNotInTheTopologyIsRefusedNamingTheOnesThatAre) {
  TbChild c({kBin, "testbed", "shape", kSrc + "/site-configs/testbed-triangle.yaml", "--wan", "a-d",
             "--down", "--id", "none-up"});
  EXPECT_NE(c.wait(30s), 0);
  EXPECT_NE(c.err().find("\"a-d\" is not a WAN link of the topology (a-b, b-c, a-c)"),
            std::string::npos)
      << c.err();
  TbChild both({kBin, "testbed", "shape", kSrc + "/site-configs/testbed-triangle.yaml", "--wan",
                "c-a", "--bandwidth", "1Mbit", "--id", "none-up"});
  EXPECT_NE(both.wait(30s), 0);
  EXPECT_NE(both.err().find("a WAN link takes --down, --up or --reset"), std::string::npos)
      << both.err();
}

// Three sites, each pair joined by a WAN link (site-configs/testbed-triangle.yaml):
// the broadcast chains a -> b -> c; with a -- b cut mid-broadcast, the job
// goes on over a -- c and c -- b, and every node ends with its copy (0).
using TestbedReroute = OneTestbed<Triangle>;

TEST_F(TestbedReroute, ACutWanLinkWithAnotherPathIsRoutedAroundAndNobodyIsLost) {
  Shaped wan{guard_->file(), guard_->id(), {"--wan", "a-b"}};
  TbChild job({kBin, "launch", guard_->file(), "--backend", "netns", "--size", "16MiB",
               "--iterations", "4", "--timeout", std::to_string(kTimeoutSeconds), "--json", "-v"});
  for (int i = 0; i < 1200 && job.err().find("iteration 1/4:") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);
  ASSERT_NE(job.err().find("iteration 1/4:"), std::string::npos) << job.err();
  ASSERT_EQ(wan.shape({"--down"}), 0);
  ASSERT_EQ(job.wait(120s), 0) << job.out() << job.err();
  const auto j = last_json(job.out());
  EXPECT_EQ(j["verified"], true) << job.out();
  EXPECT_EQ(j["complete"], true) << job.out();
  EXPECT_EQ(j["ranks"], 6) << job.out();
  ASSERT_EQ(j["routed_around"].size(), 1u) << job.out();
  EXPECT_EQ(j["routed_around"][0]["sites"], (nlohmann::json{"a", "b"})) << job.out();
  EXPECT_NE(j["routed_around"][0]["cause"].get<std::string>().find("WAN link a–b moved nothing"),
            std::string::npos)
      << job.out();
  EXPECT_NE(job.err().find("healing: the others go on around it"), std::string::npos) << job.err();
  for (const auto& n : guard_->state().nodes)
    EXPECT_TRUE(testbed::processes_in_netns(n.ns).empty()) << "left behind in " << n.ns;
}

}  // namespace
}  // namespace gridbcast::testing
