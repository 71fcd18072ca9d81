// The gridbcast command as a user runs it: real processes, loopback sockets.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

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

// `auto` is the cost model's choice, said on stderr with -v; a threshold in
// the launcher's environment brings back the old rule on every rank (the
// launcher passes it on, as ssh would not) and says so.
TEST(Launch, AutoIsTheModelsChoiceUnlessThresholdsAreGiven) {
  Child model({kBin, "launch", "--size", "1MiB", "--json", "-v"});
  ASSERT_EQ(model.wait(120s), 0) << model.err();
  EXPECT_EQ(last_json(model.out())["algorithm"], "multilane") << model.out();
  EXPECT_NE(model.err().find("auto runs multilane (the model's fastest); the model: multilane"),
            std::string::npos)
      << model.err();
  Child given({"/usr/bin/env", "GRIDBCAST_SMALL_BYTES=8388608", kBin, "launch", "--size", "1MiB",
               "--json", "-v"});
  ASSERT_EQ(given.wait(120s), 0) << given.err();
  const auto j = last_json(given.out());
  EXPECT_EQ(j["algorithm"], "binomial") << given.out();
  EXPECT_EQ(j["verified"], true);
  EXPECT_NE(given.err().find("auto runs binomial (the thresholds given)"), std::string::npos)
      << given.err();
}

TEST(Launch, EmbeddedDefaultBroadcastsAndVerifiesEveryCopy) {
  Child c({kBin, "launch", "--size", "3MiB", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const std::string out = c.out();
  const auto j = last_json(out);
  EXPECT_EQ(j["ranks"], 8) << out;
  EXPECT_EQ(j["sites"], 2) << out;
  EXPECT_EQ(j["verified"], true) << out;
  EXPECT_EQ(j["algorithm"], "multilane") << out;
}

TEST(Launch, TwoHundredBackToBackBroadcastsWithRandomSizesRootsAndAlgorithms) {
  Child c({kBin, "launch", "--size", "512KiB", "--iterations", "200", "--random-roots",
           "--random-sizes", "--algorithm", "random", "--json"});
  ASSERT_EQ(c.wait(300s), 0) << c.err();
  EXPECT_EQ(last_json(c.out())["iterations"], 200) << c.out();
}

// Multicast through the CLI on the embedded default (loopback carries it), and
// refused, naming the site, on a grid whose sites do not say they carry it.
TEST(Launch, MulticastRunsOnTheDefaultAndIsRefusedWhereSitesLackIt) {
  Child c({kBin, "launch", "--size", "3000017", "--algorithm", "multicast", "--iterations", "3",
           "--random-roots", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
  Child refused(
      {kBin, "launch", kSrc + "/site-configs/three-sites-hetero.yaml", "--algorithm", "multicast"});
  EXPECT_EQ(refused.wait(60s), 2) << refused.err();
  EXPECT_NE(refused.err().find("site 'alpha'"), std::string::npos) << refused.err();
  EXPECT_NE(refused.err().find("multicast: true"), std::string::npos) << refused.err();
}

TEST(Launch, EveryAlgorithmOnTheHeterogeneousGrid) {
  for (const char* a : {"multilane", "binomial", "scatter_rd", "scatter_ring", "scatter_ring_tuned",
                        "chain", "binary"}) {
    Child c({kBin, "launch", kSrc + "/site-configs/three-sites-hetero.yaml", "--size", "1000003",
             "--root", "7", "--algorithm", a});
    ASSERT_EQ(c.wait(120s), 0) << a << ": " << c.err();
    EXPECT_NE(c.out().find("verified: all 15 ranks"), std::string::npos) << c.out();
  }
}

// k lanes through the CLI: --lanes reaches every rank (through the topology
// text the launcher sends), on the embedded default and on --hosts.
TEST(Launch, LanesOptionRunsThreeAndFiveLanesEverywhere) {
  for (const char* k : {"3", "5"}) {
    Child c(
        {kBin, "launch", "--size", "1000003", "--lanes", k, "--algorithm", "multilane", "--json"});
    ASSERT_EQ(c.wait(120s), 0) << k << ": " << c.err();
    EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
  }
  Child hosts({kBin, "launch", "--hosts", "a:127.0.9.[1-3],b:127.0.9.[4-5]", "--lanes", "4",
               "--size", "777777", "--algorithm", "multilane", "--json"});
  ASSERT_EQ(hosts.wait(120s), 0) << hosts.err();
  EXPECT_EQ(last_json(hosts.out())["ranks"], 5) << hosts.out();
  Child plan({kBin, "plan", "--hosts", "a:127.0.9.[1-3],b:127.0.9.[4-5]", "--lanes", "4", "--size",
              "1MiB", "--format", "json", "--check"});
  ASSERT_EQ(plan.wait(60s), 0) << plan.err();
  EXPECT_EQ(last_json(plan.out())["lanes"], 4) << plan.out();
  Child bad({kBin, "plan", "--lanes", "9"});
  EXPECT_EQ(bad.wait(10s), 2);
  EXPECT_NE(bad.err().find("--lanes"), std::string::npos) << bad.err();
}

// --pace-lanes reaches the topology text on a file, on --hosts and on the
// embedded default; `plan` shows every multilane link's pace, and none without.
TEST(Launch, PaceLanesOptionPacesMultilaneLinksEverywhere) {
  for (const std::vector<std::string>& where :
       {std::vector<std::string>{}, std::vector<std::string>{"--hosts", "a:127.0.9.[1-3]"},
        std::vector<std::string>{kSrc + "/site-configs/testbed-hetero-nics.yaml"}}) {
    for (bool pace : {true, false}) {
      std::vector<std::string> args = {kBin, "plan", "--algorithm", "multilane", "--size", "1MiB"};
      args.insert(args.end(), where.begin(), where.end());
      if (pace) args.push_back("--pace-lanes");
      Child plan(args);
      ASSERT_EQ(plan.wait(60s), 0) << plan.err();
      const bool file_paces = where.size() == 1;  // testbed-hetero-nics says pace_lanes: true
      EXPECT_EQ(plan.out().find("paced: each connection") != std::string::npos, pace || file_paces)
          << plan.out();
      size_t transfers = 0, paced = 0;
      for (size_t at = 0; (at = plan.out().find(" lane ", at)) != std::string::npos; at += 6)
        ++transfers;
      for (size_t at = 0; (at = plan.out().find(", paced at ", at)) != std::string::npos; at += 11)
        ++paced;
      EXPECT_GT(transfers, 0u);
      EXPECT_EQ(paced, pace || file_paces ? transfers / 2 : 0u)
          << plan.out();  // " lane " twice a line
    }
  }
  Child c(
      {kBin, "launch", "--size", "3000001", "--pace-lanes", "--algorithm", "multilane", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
}

// --max-rate: each node's connections together are paced to the limit, in
// every algorithm, and the bound counts it. Loopback is far faster than
// 40 Mbit/s, so a run that took less than the bytes at the limit would have
// sent faster than allowed (a lower bound on time: a loaded machine only makes
// the run slower, never faster). Kernel pacing lets a connection's first
// window out at once, which on loopback (64 KiB packets, ten of them) is
// about 5 % of this run: hence 0.85, where an unpaced run takes 1-2 %.
TEST(Launch, MaxRateHoldsEveryNodeAtOrBelowItsLimit) {
  const double limit_bps = 40e6, bytes = 3 << 20;
  for (const std::string algorithm : {"multilane", "binomial", "chain"}) {
    Child c({kBin, "launch", "--hosts", "a:127.0.9.[1-3]", "--max-rate", "40 Mbit", "--size",
             std::to_string(static_cast<int>(bytes)), "--algorithm", algorithm, "--json"});
    ASSERT_EQ(c.wait(120s), 0) << c.err();
    const auto j = last_json(c.out());
    EXPECT_EQ(j["verified"], true) << c.out();
    // The root alone sends every byte at least once: no faster than the limit.
    const double at_limit = bytes * 8 / limit_bps;
    EXPECT_NEAR(j["max_flow_bound_seconds"].get<double>(), at_limit, 0.01 * at_limit) << c.out();
    EXPECT_GE(j["seconds"]["min"].get<double>(), 0.85 * at_limit) << algorithm << ": " << c.out();
  }
  Child plan({kBin, "plan", "--hosts", "a:127.0.9.[1-3]", "--max-rate", "40Mbit", "--size", "1MiB",
              "--algorithm", "binomial"});
  ASSERT_EQ(plan.wait(60s), 0) << plan.err();
  EXPECT_NE(plan.out().find("limits: each node sends at most 40 Mbit/s"), std::string::npos)
      << plan.out();
  EXPECT_NE(plan.out().find("paced at"), std::string::npos) << plan.out();
  Child bad({kBin, "plan", "--max-rate", "0 bit"});
  EXPECT_EQ(bad.wait(60s), 2);
  EXPECT_NE(bad.err().find("--max-rate"), std::string::npos) << bad.err();
}

// Two sites on loopback whose lane sockets use the congestion control `cc`.
std::string congestion_topology(const std::string& dir, const std::string& cc) {
  const std::string path = dir + "/congestion.yaml";
  std::ofstream(path)
      << "defaults:\n"
         "  nic_bandwidth: 10 Gbit\n"
         "  congestion: "
      << cc
      << "\n"
         "  wan: {latency: 1 ms, bandwidth: 1 Gbit, streams: 2}\n"
         "sites:\n"
         "  - {name: a, nodes: [{name: \"a[1-2]\", nics: [{address: \"127.0.8.[1-2]\"}]}]}\n"
         "  - {name: b, nodes: [{name: \"b[1-2]\", nics: [{address: \"127.0.8.[3-4]\"}]}]}\n"
         "wan: [{sites: [a, b]}]\n";
  return path;
}

TEST(Launch, TheTopologysCongestionControlIsUsedOrTheJobFailsNamingIt) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child ok({kBin, "launch", congestion_topology(dir, "reno"), "--size", "3MiB", "--json"});
  ASSERT_EQ(ok.wait(120s), 0) << ok.err();
  EXPECT_EQ(last_json(ok.out())["verified"], true) << ok.out();
  // No fallback to the host's default: the job stops and says why.
  Child bad(
      {kBin, "launch", congestion_topology(dir, "nosuchcc"), "--size", "1MiB", "--timeout", "20"});
  EXPECT_NE(bad.wait(120s), 0);
  EXPECT_NE(bad.err().find("TCP congestion control \"nosuchcc\""), std::string::npos) << bad.err();
  EXPECT_NE(bad.err().find("available: "), std::string::npos) << bad.err();
}

TEST(Launch, DistributesAFileToEveryNode) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string input = dir + "/input.bin";
  {
    std::ofstream f(input, std::ios::binary);
    for (int i = 0; i < 3'000'001; ++i) f.put(static_cast<char>((i * 131) ^ (i >> 7)));
  }
  Child c({kBin, "launch", "--file", input, "--output", dir + "/{node}/copy.bin", "--root", "2"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const std::string want = slurp(input);
  for (const char* node : {"a1", "a2", "a4", "b1", "b2", "b3", "b4"}) {
    EXPECT_EQ(slurp(dir + "/" + node + "/copy.bin"), want) << node;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/a3/copy.bin"));  // the root keeps its file
  std::filesystem::remove_all(dir);
}

// With --require all a loss is fatal: the job fails naming the rank (without
// it the others heal around the loss: the next test).
TEST(Launch, AKilledRankFailsTheJobInBoundedTimeAndNamesIt) {
  Child c({kBin, "launch", "--size", "256MiB", "--iterations", "50", "--timeout", "10", "--require",
           "all"});
  // Wait until all 8 ranks run, then kill rank 5 mid-job.
  pid_t victim = -1;
  std::vector<pid_t> ranks;
  // A child between fork and exec still has the launcher's environment: wait
  // until every one shows its rank.
  for (int i = 0; i < 200 && (ranks.size() < 8 || victim < 0); ++i) {
    std::this_thread::sleep_for(50ms);
    ranks.clear();
    victim = -1;
    for (auto [pid, rank] : children_of(c.pid(), "GRIDBCAST_RANK")) {
      ranks.push_back(pid);
      if (rank == "5") victim = pid;
    }
  }
  ASSERT_EQ(ranks.size(), 8u);
  ASSERT_GT(victim, 0);
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int status = c.wait(40s);
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the launcher did not exit in time";
  EXPECT_NE(c.err().find("rank 5 (b2)"), std::string::npos) << c.err();
  for (pid_t p : ranks) {
    // Reaped by the launcher: nothing of ours survives it.
    EXPECT_FALSE(alive(p) && children_of(c.pid(), "GRIDBCAST_RANK").size() > 0) << p;
  }
}

TEST(Launch, AStoppedRankFailsTheJobWithinTheTimeout) {
  Child c({kBin, "launch", "--size", "64MiB", "--iterations", "1000", "--timeout", "2", "--require",
           "all"});
  const pid_t victim = rank_process(c.pid(), 3);
  ASSERT_GT(victim, 0);
  std::this_thread::sleep_for(1000ms);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const int status = c.wait(30s);
  ::kill(victim, SIGCONT);
  EXPECT_GT(status, 0) << "the launcher did not fail in time";
  EXPECT_NE(c.err().find("rank 3 (a4"), std::string::npos) << c.err();
}

// SIGKILLs rank `rank` of the launch `c` about a second into its job.
void kill_rank_after_a_second(Child& c, int rank) {
  const pid_t victim = rank_process(c.pid(), rank);
  ASSERT_GT(victim, 0);
  std::this_thread::sleep_for(1000ms);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
}

// Healing a --size job (issue 27): rank 6 (b3) killed mid-job; the 7 others
// run the job again among themselves, every copy verifies, and the JSON
// summary says the job is not complete and which node is missing, and why.
TEST(Launch, AKilledRankIsHealedAroundAndTheSummaryNamesIt) {
  Child c({kBin, "launch", "--size", "64MiB", "--iterations", "20", "--json"});
  ASSERT_NO_FATAL_FAILURE(kill_rank_after_a_second(c, 6));
  ASSERT_EQ(c.wait(120s), 3) << c.out() << c.err();
  EXPECT_NE(c.err().find("lost rank 6 (b3): was killed by signal 9"), std::string::npos) << c.err();
  const auto j = last_json(c.out());
  EXPECT_EQ(j["verified"], true) << c.out();
  EXPECT_EQ(j["complete"], false) << c.out();
  EXPECT_EQ(j["ranks"], 7) << c.out();
  ASSERT_EQ(j["missing"].size(), 1u) << c.out();
  EXPECT_EQ(j["missing"][0]["rank"], 6);
  EXPECT_EQ(j["missing"][0]["node"], "b3");
  EXPECT_NE(j["missing"][0]["cause"].get<std::string>().find("killed by signal 9"),
            std::string::npos);
}

// The root of a --size job holds the only copy of what is left to send: its
// loss cannot be healed, and the job fails naming it, with the exit status
// of a failure (1), not of a job completed on survivors (3).
TEST(Launch, ALostRootIsNotHealedAndTheJobFailsNamingIt) {
  Child c({kBin, "launch", "--size", "64MiB", "--iterations", "20", "--json"});
  ASSERT_NO_FATAL_FAILURE(kill_rank_after_a_second(c, 0));
  ASSERT_EQ(c.wait(120s), 1) << c.out() << c.err();
  EXPECT_NE(c.err().find("the root (rank 0) was lost: nothing to heal from"), std::string::npos)
      << c.err();
  EXPECT_EQ(c.err().find("healing:"), std::string::npos) << c.err();
  EXPECT_NE(c.out().find("rank 0 (a1)"), std::string::npos) << c.out() << c.err();
}

// Hostile connections to the ranks' lane ports while a job runs: each is
// rejected, the broadcasts stay verified, and the launcher's summary counts
// them all, summed over the ranks that saw them.
TEST(Launch, RejectedConnectionsAreCountedInTheSummary) {
  Child c({kBin, "launch", "--size", "32MiB", "--iterations", "40", "--json"});
  std::vector<std::pair<std::string, int>> ports;
  for (int i = 0; i < 400 && ports.size() < 16; ++i) {
    std::this_thread::sleep_for(25ms);
    ports.clear();
    for (auto [pid, rank] : children_of(c.pid(), "GRIDBCAST_RANK"))
      for (const auto& p : listening_ports(pid)) ports.push_back(p);
  }
  ASSERT_EQ(ports.size(), 16u) << "8 ranks x 2 lanes should be listening";
  // One connection of garbage to each of 5 lane ports, on 5 different ranks'
  // lanes: none can pass for a Hello.
  const int attacks = 5;
  for (int i = 0; i < attacks; ++i) {
    const auto& [address, port] = ports[static_cast<size_t>(i) * 3];
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    ASSERT_EQ(::inet_pton(AF_INET, address.c_str(), &sa.sin_addr), 1) << address;
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0)
        << address << ":" << port;
    const std::string junk(64, 'x');
    ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  ASSERT_EQ(c.wait(180s), 0) << c.err();
  EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
  EXPECT_EQ(last_json(c.out())["rejected_connections"], attacks) << c.out();
}

TEST(Launch, BadTopologyNamesFileLineAndColumn) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  {
    std::ofstream f(dir + "/bad.yaml");
    f << "sites:\n  - name: x\n    nodes:\n      - name: n1\n        nics:\n          - address: "
         "127.0.0.1\n            bandwith: 1 Gbit\n";
  }
  Child c({kBin, "launch", dir + "/bad.yaml"});
  EXPECT_EQ(c.wait(30s), 2);
  EXPECT_NE(c.err().find(dir + "/bad.yaml:7:13"), std::string::npos) << c.err();
  std::filesystem::remove_all(dir);
}

TEST(Plan, EverySiteConfigSatisfiesThePropertiesForEveryAlgorithm) {
  for (const auto& entry : std::filesystem::directory_iterator(kSrc + "/site-configs")) {
    for (const char* a : {"multilane", "binomial", "scatter_rd", "scatter_ring",
                          "scatter_ring_tuned", "chain", "binary"}) {
      Child c({kBin, "plan", entry.path().string(), "--algorithm", a, "--size", "1000001", "--root",
               "1", "--format", "json", "--check"});
      ASSERT_EQ(c.wait(60s), 0) << entry.path() << " " << a << ": " << c.err();
      EXPECT_EQ(last_json(c.out())["algorithm"], a) << c.out();
    }
  }
}

TEST(Cli, HelpHasExamplesAndUnknownOptionsFail) {
  for (const char* cmd : {"launch", "plan"}) {
    Child c({kBin, cmd, "--help"});
    ASSERT_EQ(c.wait(10s), 0);
    EXPECT_NE(c.out().find("Example"), std::string::npos) << c.out();
  }
  Child bad({kBin, "launch", "--no-such-option"});
  EXPECT_NE(bad.wait(10s), 0);
}

}  // namespace
}  // namespace gridbcast::testing

namespace gridbcast::testing {
namespace {

std::uint64_t json_number(const std::string& json, const std::string& key) {
  const auto j = last_json(json);
  return j.contains(key) ? j[key].get<std::uint64_t>() : 0;
}

TEST(Launch, PeakMemoryPerRankIsTheMessagePlusAtMost64MiB) {
  const std::uint64_t size = 1ull << 30;
  Child c({kBin, "launch", "--size", "1GiB", "--algorithm", "multilane", "--json"});
  ASSERT_EQ(c.wait(300s), 0) << c.err();
  const std::uint64_t rss = json_number(c.out(), "peak_rss_bytes");
  EXPECT_GE(rss, size) << c.out();  // the whole message is resident, as it must be
  EXPECT_LE(rss, size + (64ull << 20)) << c.out();
}

}  // namespace
}  // namespace gridbcast::testing

namespace gridbcast::testing {
namespace {

TEST(Launch, SshBackendRunsRanksThroughTheSshCommandWithTheSecretOffArgv) {
  // An ssh stand-in: logs its arguments, drops the host, runs the command here.
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string fake = dir + "/fake-ssh";
  {
    std::ofstream f(fake);
    // Like ssh: options up to "--", the host, then one string for the remote shell.
    f << "#!/bin/sh\necho \"$@\" >> " << dir
      << "/argv.log\nwhile [ $# -gt 0 ] && [ \"$1\" != \"--\" ]; do shift; done\nshift 2\nexec sh "
         "-c \"$*\"\n";
  }
  ::chmod(fake.c_str(), 0755);
  Child c({kBin, "launch", "--backend", "ssh", "--ssh-command", fake, "--size", "2MiB"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const std::string log = slurp(dir + "/argv.log");
  for (const char* host : {"-- a1 exec env", "-- a4 exec env", "-- b1 exec env", "-- b4 exec env"})
    EXPECT_NE(log.find(host), std::string::npos) << log;
  EXPECT_NE(log.find("GRIDBCAST_LAUNCHER="), std::string::npos) << log;
  EXPECT_EQ(log.find("SECRET"), std::string::npos) << "the secret leaked into argv: " << log;
  std::filesystem::remove_all(dir);
}

TEST(Launch, ExternalBackendAcceptsRanksStartedByHandWithMpiStyleRankVariables) {
  ::setenv("GRIDBCAST_SECRET", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
           1);
  Child launcher({kBin, "launch", "--backend", "external", "--size", "1MiB", "--json"});
  std::string hint;
  for (int i = 0; i < 100 && hint.find("GRIDBCAST_JOB_ID=") == std::string::npos; ++i) {
    std::this_thread::sleep_for(50ms);
    hint = launcher.err();
  }
  const auto grab = [&](const std::string& key) {
    const auto at = hint.find(key + "=");
    const auto end = hint.find(' ', at);
    return hint.substr(at + key.size() + 1, end - at - key.size() - 1);
  };
  ASSERT_NE(hint.find("GRIDBCAST_LAUNCHER="), std::string::npos) << hint;
  ::setenv("GRIDBCAST_LAUNCHER", grab("GRIDBCAST_LAUNCHER").c_str(), 1);
  ::setenv("GRIDBCAST_JOB_ID", grab("GRIDBCAST_JOB_ID").c_str(), 1);
  std::vector<std::unique_ptr<Child>> ranks;
  const char* vars[] = {"GRIDBCAST_RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"};
  for (int r = 0; r < 8; ++r) {
    const char* var = vars[r % 4];
    ::setenv(var, std::to_string(r).c_str(), 1);
    ranks.push_back(std::make_unique<Child>(std::vector<std::string>{kBin, "rank"}));
    ::unsetenv(var);
  }
  for (const char* v : {"GRIDBCAST_SECRET", "GRIDBCAST_LAUNCHER", "GRIDBCAST_JOB_ID"})
    ::unsetenv(v);
  ASSERT_EQ(launcher.wait(120s), 0) << launcher.err();
  EXPECT_EQ(last_json(launcher.out())["verified"], true) << launcher.out();
  for (auto& r : ranks) EXPECT_EQ(r->wait(30s), 0) << r->err();
}

// Inside a Slurm allocation without a topology: the nodes of
// SLURM_JOB_NODELIST, ranks started through srun (a stand-in here that drops
// srun's options and runs the rest, as one srun step would; scripts/
// test_slurm.sh runs the real one). An explicit --backend wins.
TEST(Launch, InsideASlurmAllocationTheNodelistAndSrun) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  {
    std::ofstream f(dir + "/srun");
    f << "#!/bin/sh\necho \"$@\" >> " << dir
      << "/srun.log\nwhile [ $# -gt 0 ]; do case \"$1\" in --*) shift ;; *) break ;; esac; "
         "done\nexec \"$@\"\n";
  }
  ::chmod((dir + "/srun").c_str(), 0755);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  ::setenv("PATH", (dir + ":" + path).c_str(), 1);
  ::setenv("SLURM_JOB_ID", "4711", 1);
  ::setenv("SLURM_JOB_NODELIST", "localhost", 1);
  ::setenv("SLURM_TASKS_PER_NODE", "2", 1);
  Child c({kBin, "launch", "--size", "1MiB", "--json"});
  const int rc = c.wait(120s);
  Child local({kBin, "launch", "--size", "1MiB", "--backend", "local", "--json"});
  const int local_rc = local.wait(120s);
  ::setenv("PATH", path.c_str(), 1);
  for (const char* v : {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"})
    ::unsetenv(v);
  ASSERT_EQ(rc, 0) << c.err();
  EXPECT_NE(c.err().find("topology from SLURM_JOB_NODELIST: 1 node, one rank per node"),
            std::string::npos)
      << c.err();
  EXPECT_EQ(last_json(c.out())["ranks"], 1) << c.out();
  EXPECT_EQ(last_json(c.out())["verified"], true) << c.out();
  const std::string log = slurp(dir + "/srun.log");
  EXPECT_NE(log.find("--nodes=1 --ntasks=1 --kill-on-bad-exit=1 --nodelist=localhost"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("GRIDBCAST_RANK=0"), std::string::npos) << log;
  EXPECT_EQ(log.find("SECRET"), std::string::npos) << log;
  ASSERT_EQ(local_rc, 0) << local.err();
  EXPECT_EQ(last_json(local.out())["ranks"], 1) << local.out();
  EXPECT_EQ(slurp(dir + "/srun.log"), log);  // --backend local started no srun
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gridbcast::testing
