// The emulation measured (root and network namespaces; skipped otherwise):
// the testbed comes up and goes away without a trace, the RTT between sites is
// twice the configured one-way delay, a TCP stream gets its NIC's rate, flows
// through one NIC share it evenly, and on a lossy 20 ms link parallel streams
// scale as they do on a real WAN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "testbed/traffic.hpp"
#include "testbed_support.hpp"

namespace gridbcast::testing {
namespace {

constexpr const char* kVethPrefixA = "gbfq-a-";
constexpr const char* kVethPrefixB = "gbfq-b-";

// Removes the VethPair namespaces of earlier runs whose process is gone.
void remove_stale_veth_pairs() {
  const auto list = testbed::run_command({testbed::ip_path(), "netns", "list"});
  std::istringstream in(list.out);
  for (std::string name; in >> name;) {
    std::string rest;
    for (const char* prefix : {kVethPrefixA, kVethPrefixB})
      if (name.rfind(std::string(prefix) + kTestIdPrefix, 0) == 0)
        rest = name.substr(std::string(prefix).size() + std::string(kTestIdPrefix).size());
    if (rest.empty()) continue;
    const pid_t owner = static_cast<pid_t>(std::atoi(rest.c_str()));
    if (owner <= 0 || owner == ::getpid() || ::kill(owner, 0) == 0) continue;
    testbed::run_command({testbed::ip_path(), "netns", "del", name});
  }
}

// Removes testbeds (and veth pairs) of crashed earlier runs before anything starts.
class StaleTestbeds : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!why_no_namespaces().empty()) return;
    remove_stale_test_testbeds();
    remove_stale_veth_pairs();
  }
};
const auto* const kStale = ::testing::AddGlobalTestEnvironment(new StaleTestbeds);

constexpr const char* kTwoSites =
    R"(# two sites of two nodes, 100 Mbit NICs, 10 ms between the sites
name: tb-emulation
defaults:
  nic_bandwidth: 100 Mbit
  wan: {latency: 10 ms, bandwidth: 1 Gbit, streams: 4}
sites:
  - name: a
    nodes: [{name: "a[1-2]", nics: [{address: "10.211.1.[1-2]"}, {address: "10.211.2.[1-2]"}]}]
  - name: b
    nodes: [{name: "b[1-2]", nics: [{address: "10.212.1.[1-2]"}, {address: "10.212.2.[1-2]"}]}]
wan:
  - sites: [a, b]
)";

constexpr const char* kLossyWan =
    R"(# one node per site, 1 Gbit everywhere, 20 ms RTT and 0.1 % loss on the WAN
name: tb-lossy
defaults:
  nic_bandwidth: 1 Gbit
sites:
  - name: a
    nodes: [{name: a1, nics: [{address: 10.221.1.1}]}]
  - name: b
    nodes: [{name: b1, nics: [{address: 10.222.1.1}]}]
wan:
  - sites: [a, b]
    latency: 10 ms
    bandwidth: 1 Gbit
    loss: 0.1 %
)";

// Streams from `client` (bound to `from`) to a server on `to` in `server` for
// `seconds`; what the server measured after `warmup` seconds.
testbed::TrafficResult measure(const TestbedGuard& g, const std::string& client,
                               const std::string& from, const std::string& server,
                               const std::string& to, int streams, double seconds,
                               double warmup = 0.5) {
  TbChild srv(g.in(
      server, {kBin, "testbed", "traffic", "server", "--listen", to, "--streams",
               std::to_string(streams), "--timeout", "60", "--warmup", std::to_string(warmup)}));
  TbChild cli(g.in(client, {kBin, "testbed", "traffic", "client", "--connect", to, "--bind", from,
                            "--streams", std::to_string(streams), "--seconds",
                            std::to_string(seconds), "--congestion", "cubic"}));
  const int cs = cli.wait(90s);
  const int ss = srv.wait(90s);
  EXPECT_EQ(cs, 0) << cli.err();
  EXPECT_EQ(ss, 0) << srv.err();
  if (cs != 0 || ss != 0) return {};
  return testbed::TrafficResult::parse_json(srv.out());
}

std::vector<double> ping(const TestbedGuard& g, const std::string& node, const std::string& from,
                         const std::string& to, int count) {
  TbChild c(g.in(node, {testbed::ping_path(), "-n", "-c", std::to_string(count), "-i", "0.05", "-I",
                        from, to}));
  EXPECT_EQ(c.wait(60s), 0) << c.out() << c.err();
  return ping_times(c.out());
}

TEST(TestbedLifecycle, UpStatusUpAgainAndDownLeaveNothingBehind) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  TestbedGuard g(write_topology(kTwoSites));
  ASSERT_TRUE(g.ok()) << g.log();
  const auto& s = g.state();
  EXPECT_EQ(s.status, "up");
  EXPECT_EQ(s.namespaces().size(), 6u);
  for (const auto& ns : s.namespaces()) EXPECT_TRUE(testbed::netns_exists(ns)) << ns;
  EXPECT_TRUE(testbed::root_link_exists(s.mgmt_bridge));
  if (s.delay_mode == "delayline") {
    EXPECT_NE(g.log().find("userspace delay line"), std::string::npos) << g.log();
    ASSERT_EQ(s.delay_lines.size(), 2u);
    for (const auto& d : s.delay_lines) EXPECT_TRUE(testbed::process_alive(d.pid, d.start_time));
  } else {
    EXPECT_EQ(s.delay_mode, "netem");
    EXPECT_NE(g.log().find("tc netem"), std::string::npos) << g.log();
  }
  {
    TbChild st({kBin, "testbed", "status", g.file(), "--id", g.id()});
    EXPECT_EQ(st.wait(30s), 0) << st.out() << st.err();
    EXPECT_NE(st.out().find(s.nodes[3].ns), std::string::npos) << st.out();
  }
  // Whatever `auto` picked, the RTT across the WAN is 2 x 10 ms: never
  // less (within a timer's slack), and a busy host only adds to it (the
  // suite once saw a median of 21.05 ms with 8 sanitizer builds' worth of
  // load behind it), so the bound above is looser than the one below.
  if (!testbed::ping_path().empty()) {
    const auto t = ping(g, "a1", "10.211.1.1", "10.212.2.2", 10);
    ASSERT_EQ(t.size(), 10u);
    EXPECT_GE(median(t), 19.0);
    EXPECT_LE(median(t), 25.0);
  }

  // `up` again, as after a crash: the old testbed goes first, a new one replaces it.
  const auto old_lines = s.delay_lines;
  TbChild again({kBin, "testbed", "up", g.file(), "--id", g.id()});
  ASSERT_EQ(again.wait(120s), 0) << again.err();
  EXPECT_NE(again.err().find("removing what an earlier run left"), std::string::npos)
      << again.err();
  for (const auto& d : old_lines) EXPECT_FALSE(testbed::process_alive(d.pid, d.start_time));
  const auto s2 = testbed::load_state(s.dir);
  EXPECT_EQ(testbed::netns_with_prefix(g.prefix()).size(), 6u);
  EXPECT_EQ(s2.delay_lines.size(), old_lines.size());

  const std::string down_log = g.down();
  EXPECT_NE(down_log.find("removed"), std::string::npos) << down_log;
  EXPECT_TRUE(testbed::netns_with_prefix(g.prefix()).empty());
  EXPECT_TRUE(testbed::root_links_with_prefix(g.prefix()).empty());
  EXPECT_FALSE(testbed::state_exists(s.dir));
  for (const auto& d : s2.delay_lines) EXPECT_FALSE(testbed::process_alive(d.pid, d.start_time));
  TbChild st({kBin, "testbed", "status", g.file(), "--id", g.id()});
  EXPECT_EQ(st.wait(30s), 1) << st.out();
}

TEST(TestbedLifecycle, RefusesLoopbackTopologiesBeforeTouchingAnything) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  const std::string id = unique_test_id();
  TbChild c({kBin, "testbed", "up", kSrc + "/site-configs/default.yaml", "--id", id});
  EXPECT_EQ(c.wait(30s), 1);
  EXPECT_NE(c.err().find("loopback"), std::string::npos) << c.err();
  EXPECT_TRUE(testbed::netns_with_prefix(testbed::testbed_prefix("default", id)).empty());
}

TEST(TestbedLifecycle, DownLeavesProcessesItDidNotStartAlone) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  TestbedGuard g(write_topology(kTwoSites));
  ASSERT_TRUE(g.ok()) << g.log();
  TbChild sleeper(g.in("b2", {"/bin/sleep", "30"}));
  for (int i = 0; i < 100 && testbed::processes_in_netns(g.ns("b2")).empty(); ++i)
    std::this_thread::sleep_for(20ms);
  const std::string log = g.down();
  EXPECT_NE(log.find("warning: process " + std::to_string(sleeper.pid())), std::string::npos)
      << log;
  EXPECT_TRUE(alive(sleeper.pid())) << "down killed a process it did not start";
  EXPECT_TRUE(testbed::netns_with_prefix(g.prefix()).empty());
  EXPECT_TRUE(testbed::root_links_with_prefix(g.prefix()).empty());
}  // the test ends the sleeper it started (Child's destructor)

TEST(TestbedLifecycle, NetemIsUsedWhereTheKernelHasItAndRefusedWhereNot) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  const std::string file = write_topology(kTwoSites);
  const std::string id = unique_test_id();
  const std::string prefix = testbed::testbed_prefix("tb-emulation", id);
  struct Cleanup {
    std::string prefix;
    ~Cleanup() {
      std::ostringstream log;
      testbed::down(prefix, log);
    }
  } cleanup{prefix};
  TbChild c({kBin, "testbed", "up", file, "--id", id, "--delay", "netem"});
  const int status = c.wait(120s);
  if (status == 0) {
    EXPECT_NE(c.err().find("by tc netem"), std::string::npos) << c.err();
    EXPECT_EQ(testbed::load_state(testbed::state_dir(prefix)).delay_mode, "netem");
  } else {
    EXPECT_NE(c.err().find("tc netem does not work on this kernel"), std::string::npos) << c.err();
    EXPECT_TRUE(testbed::netns_with_prefix(prefix).empty()) << "a failed up left namespaces";
    EXPECT_FALSE(testbed::state_exists(testbed::state_dir(prefix)));
  }
}

// The two-site testbed with the userspace delay line, shared by the measurements.
class TestbedEmulation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!why_no_delay_line().empty()) return;
    guard_ = new TestbedGuard(write_topology(kTwoSites), {"--delay", "delayline"});
  }
  static void TearDownTestSuite() {
    delete guard_;
    guard_ = nullptr;
  }
  void SetUp() override {
    GRIDBCAST_REQUIRE_DELAY_LINE();
    ASSERT_NE(guard_, nullptr);
    ASSERT_TRUE(guard_->ok()) << guard_->log();
  }
  static TestbedGuard* guard_;
};
TestbedGuard* TestbedEmulation::guard_ = nullptr;

TEST_F(TestbedEmulation, RttBetweenSitesIsTwiceTheConfiguredDelay) {
  if (testbed::ping_path().empty())
    GTEST_SKIP() << "needs ping (Debian package iputils-ping; scripts/setup.sh installs it)";
  const auto& g = *guard_;
  // Lane 0 to lane 0, and lane 1 to lane 1 across the sites.
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"10.211.1.1", "10.212.1.1"},
                                 std::pair<std::string, std::string>{"10.211.2.1", "10.212.2.2"}}) {
    const auto t = ping(g, "a1", from, to, 20);
    ASSERT_EQ(t.size(), 20u) << from << " -> " << to;
    const double med = median(t);
    const double min = *std::min_element(t.begin(), t.end());
    RecordProperty("rtt_median_ms_" + to, std::to_string(med));
    EXPECT_NEAR(med, 20.0, 1.0) << from << " -> " << to;
    EXPECT_GE(min, 19.9) << "a packet left the delay line early";
  }
  // Inside a site there is no delay line.
  const auto local = ping(g, "a1", "10.211.1.1", "10.211.1.2", 5);
  ASSERT_EQ(local.size(), 5u);
  EXPECT_LT(median(local), 1.0);
}

// HTB shapes whole frames, so one stream's payload tops out at the NIC rate
// times 1448/1514 (TCP payload with timestamps over a 1500-byte MTU frame with
// its Ethernet header): 95.6 Mbit/s on a 100 Mbit NIC. A cap is an upper bound,
// and a busy 2-core machine can only push a measurement below it, never above:
// so every run must stay under the rate, and the best of up to three must come
// within 10 % of the payload ceiling.
constexpr double kNicRate = 100e6;
constexpr double kPayloadShare = 1448.0 / 1514.0;

void expect_capped_at_nic_rate(const TestbedGuard& g, const std::string& client,
                               const std::string& from, const std::string& server,
                               const std::string& to, const std::string& what) {
  double best = 0;
  std::string runs;
  for (int attempt = 0; attempt < 3 && best < 0.9 * kPayloadShare * kNicRate; ++attempt) {
    const auto r = measure(g, client, from, server, to, 1, 3);
    EXPECT_LE(r.bits_per_second(), 1.02 * kNicRate)
        << what << " exceeds the NIC rate: " << r.json();
    best = std::max(best, r.bits_per_second());
    runs += r.json() + "\n";
  }
  ::testing::Test::RecordProperty(what + "_mbps", std::to_string(best / 1e6));
  EXPECT_GE(best, 0.9 * kPayloadShare * kNicRate) << what << ", best of the runs:\n" << runs;
}

TEST_F(TestbedEmulation, OneTcpStreamIsCappedAtTheNicRate) {
  const auto& g = *guard_;
  // Inside a site (same lane) and across the WAN (whose 1 Gbit/s is not the limit).
  expect_capped_at_nic_rate(g, "a1", "10.211.1.1", "a2", "10.211.1.2", "local");
  expect_capped_at_nic_rate(g, "a2", "10.211.2.2", "b1", "10.212.2.1", "remote");
}

// A real NIC never sends above its line rate, so neither may an idle emulated
// one: a fresh stream's first 20 ms, timed from the server's accept, carry at
// most about one millisecond of the rate above it (the shaper's burst, 12.5 KB
// at 100 Mbit/s; a fresh stream's congestion window keeps its first packets
// small, where a warm one may still send one GSO packet at once, which HTB
// charges afterwards). With the old 70 KB burst this measured 108-111 Mbit/s,
// now 97-100. A busy machine can delay the accept and inflate a run, never
// deflate the shaper, so the lowest of up to five runs must be within 3 % of
// the NIC rate (the old burst exceeded it in every run).
TEST_F(TestbedEmulation, AnIdleNicLetsOutAboutAMillisecondOfItsRateAtOnce) {
  const auto& g = *guard_;
  double lowest = 1e18;
  std::string runs;
  for (int attempt = 0; attempt < 5 && lowest > 1.03 * kNicRate; ++attempt) {
    const auto r = measure(g, "a1", "10.211.1.1", "a2", "10.211.1.2", 1, 0.02, 0.0);
    ASSERT_GT(r.bytes, 0u);
    lowest = std::min(lowest, r.bits_per_second());
    runs += r.json() + "\n";
  }
  RecordProperty("idle_start_mbps", std::to_string(lowest / 1e6));
  EXPECT_LE(lowest, 1.03 * kNicRate) << "an idle NIC bursts above its rate:\n" << runs;
}

// Two flows through one NIC at once, one inside the site (RTT 0.1 ms) and one
// across the WAN (20 ms): each gets about half of it. Through one FIFO the
// short-RTT flow takes most (here 86-93 %). Best of up to three runs.
struct Flow {
  std::string client, from, server, to;
};

void expect_even_split(const TestbedGuard& g, const Flow& a, const Flow& b,
                       const std::string& what) {
  double best_share = 0, total = 0;
  std::string runs;
  for (int attempt = 0; attempt < 3 && best_share < 0.4; ++attempt) {
    std::vector<std::unique_ptr<TbChild>> servers, clients;
    const std::string ports[] = {"5201", "5202"};  // the servers may share an address
    for (int i = 0; i < 2; ++i) {
      const Flow& f = i == 0 ? a : b;
      servers.push_back(std::make_unique<TbChild>(
          g.in(f.server, {kBin, "testbed", "traffic", "server", "--listen", f.to, "--port",
                          ports[i], "--streams", "1", "--timeout", "60", "--warmup", "1"})));
    }
    for (int i = 0; i < 2; ++i) {
      const Flow& f = i == 0 ? a : b;
      clients.push_back(std::make_unique<TbChild>(
          g.in(f.client,
               {kBin, "testbed", "traffic", "client", "--connect", f.to, "--port", ports[i],
                "--bind", f.from, "--streams", "1", "--seconds", "4", "--congestion", "cubic"})));
    }
    for (const auto& c : clients) ASSERT_EQ(c->wait(90s), 0) << c->out() << c->err();
    std::vector<double> bps;
    for (const auto& srv : servers) {
      ASSERT_EQ(srv->wait(90s), 0) << srv->out() << srv->err();
      const auto r = testbed::TrafficResult::parse_json(srv->out());
      bps.push_back(r.bits_per_second());
      runs += r.json() + "\n";
    }
    const double sum = bps[0] + bps[1];
    ASSERT_GT(sum, 0);
    if (std::min(bps[0], bps[1]) / sum > best_share) {
      best_share = std::min(bps[0], bps[1]) / sum;
      total = sum;
    }
  }
  ::testing::Test::RecordProperty(what + "_smaller_share", std::to_string(best_share));
  EXPECT_GE(best_share, 0.4) << what << ":\n" << runs;
  EXPECT_LE(total, 1.02 * kNicRate) << what << ":\n" << runs;
  EXPECT_GE(total, 0.8 * kPayloadShare * kNicRate) << what << ":\n" << runs;
}

// The sender's side: a host's fair-queueing qdisc.
// `testbed shape` changes a node's links while the testbed runs (issue 27's
// fault injection): 10 Mbit/s both ways, then cut off (packets vanish, as
// with a cut cable), back, and the declared rate again. Always reset at the end.
TEST_F(TestbedEmulation, ShapeSlowsANodeCutsItOffAndResetsIt) {
  if (testbed::ping_path().empty())
    GTEST_SKIP() << "needs ping (Debian package iputils-ping; scripts/setup.sh installs it)";
  const auto& g = *guard_;
  auto shape = [&](std::vector<std::string> how) {
    std::vector<std::string> argv = {kBin, "testbed", "shape", g.file(), "a2", "--id", g.id()};
    argv.insert(argv.end(), how.begin(), how.end());
    TbChild c(argv);
    EXPECT_EQ(c.wait(60s), 0) << c.err();
    return c.out();
  };
  struct Reset {
    std::function<void()> fn;
    ~Reset() { fn(); }
  } reset{[&] { shape({"--reset"}); }};

  EXPECT_NE(shape({"--bandwidth", "10Mbit"}).find("node a2 shaped: 10.211.1.2 10 Mbit/s"),
            std::string::npos);
  for (const auto& [client, from, server, to] : {Flow{"a1", "10.211.1.1", "a2", "10.211.1.2"},
                                                 Flow{"a2", "10.211.2.2", "a1", "10.211.2.1"}}) {
    const auto r = measure(g, client, from, server, to, 1, 3);
    EXPECT_LE(r.bits_per_second(), 10.5e6) << r.json();
    EXPECT_GE(r.bits_per_second(), 0.8 * kPayloadShare * 10e6) << r.json();
  }
  EXPECT_NE(shape({"--down"}).find("cut off"), std::string::npos);
  TbChild lost(g.in("a1", {testbed::ping_path(), "-n", "-c", "3", "-i", "0.2", "-W", "1", "-I",
                           "10.211.1.1", "10.211.1.2"}));
  EXPECT_NE(lost.wait(30s), 0) << lost.out();
  EXPECT_NE(lost.out().find(" 0 received"), std::string::npos) << lost.out();
  shape({"--up"});
  EXPECT_EQ(ping(g, "a1", "10.211.1.1", "10.211.1.2", 3).size(), 3u);
  EXPECT_NE(shape({"--reset"}).find("at its declared rates: 10.211.1.2 100 Mbit/s"),
            std::string::npos);
  const auto back = measure(g, "a1", "10.211.1.1", "a2", "10.211.1.2", 1, 3);
  EXPECT_GE(back.bits_per_second(), 40e6) << back.json();
}

TEST_F(TestbedEmulation, TwoFlowsFromOneNicShareItEvenly) {
  expect_even_split(*guard_, {"a1", "10.211.1.1", "a2", "10.211.1.2"},
                    {"a1", "10.211.1.1", "b1", "10.212.1.1"}, "out");
}

// The receiver's side: the switch port towards a node.
TEST_F(TestbedEmulation, TwoFlowsIntoOneNicShareItEvenly) {
  expect_even_split(*guard_, {"a2", "10.211.1.2", "a1", "10.211.1.1"},
                    {"b1", "10.212.1.1", "a1", "10.211.1.1"}, "in");
}

// Two namespaces joined by a veth pair (va 10.9.0.1 -- vb 10.9.0.2), removed
// by the destructor also when the test fails, and by StaleTestbeds in a later
// run when this one crashed.
class VethPair {
 public:
  VethPair() {
    const std::string tag = unique_test_id();  // gtest-<pid>-...
    a_ = std::string(kVethPrefixA) + tag;
    b_ = std::string(kVethPrefixB) + tag;
    ok_ = sh({ip_, "netns", "add", a_}) && sh({ip_, "netns", "add", b_}) &&
          sh({ip_, "-n", a_, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns",
              b_}) &&
          sh({ip_, "-n", a_, "addr", "add", "10.9.0.1/30", "dev", "va"}) &&
          sh({ip_, "-n", b_, "addr", "add", "10.9.0.2/30", "dev", "vb"}) &&
          sh({ip_, "-n", a_, "link", "set", "va", "up"}) &&
          sh({ip_, "-n", b_, "link", "set", "vb", "up"});
  }
  ~VethPair() {
    testbed::run_command({ip_, "netns", "del", a_});
    testbed::run_command({ip_, "netns", "del", b_});
  }
  bool ok() const { return ok_; }
  const std::string& log() const { return log_; }
  std::vector<std::string> in_a(std::vector<std::string> argv) const {
    return in(a_, std::move(argv));
  }
  std::vector<std::string> in_b(std::vector<std::string> argv) const {
    return in(b_, std::move(argv));
  }
  testbed::CommandResult tc_a(const std::vector<std::string>& args,
                              const std::string& input = {}) const {
    std::vector<std::string> argv = {ip_, "netns", "exec", a_, testbed::tc_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testbed::run_command(argv, input);
  }

 private:
  std::vector<std::string> in(const std::string& ns, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip_, "netns", "exec", ns});
    return argv;
  }
  bool sh(const std::vector<std::string>& argv) {
    const auto r = testbed::run_command(argv);
    if (!r.ok()) log_ += r.err;
    return r.ok();
  }
  std::string ip_ = testbed::ip_path();
  std::string a_, b_, log_;
  bool ok_ = false;
};

// Beyond kFairPeers the classes are hashed buckets: tc accepts the u32 hash
// table, and TCP lands in the buckets, not in the default class; eight streams
// (random source ports) spread over more than one bucket.
TEST(TestbedShaping, PastThePeerLimitTcpIsHashedIntoBuckets) {
  GRIDBCAST_REQUIRE_NAMESPACES();
  VethPair v;
  ASSERT_TRUE(v.ok()) << v.log();
  std::vector<testbed::Ipv4> many;
  for (std::uint32_t i = 0; i <= testbed::kFairPeers; ++i) many.push_back({0x0a0a0001u + i});
  std::string batch;
  for (const auto& line : testbed::fair_htb("va", 100e6, "dst", many)) batch += line + "\n";
  const auto applied = v.tc_a({"-batch", "-"}, batch);
  ASSERT_TRUE(applied.ok()) << applied.err;
  TbChild srv(v.in_b({kBin, "testbed", "traffic", "server", "--listen", "10.9.0.2", "--streams",
                      "8", "--timeout", "30"}));
  TbChild cli(v.in_a({kBin, "testbed", "traffic", "client", "--connect", "10.9.0.2", "--streams",
                      "8", "--seconds", "1"}));
  ASSERT_EQ(cli.wait(60s), 0) << cli.err();
  ASSERT_EQ(srv.wait(60s), 0) << srv.err();
  const auto stats = v.tc_a({"-s", "class", "show", "dev", "va"});
  ASSERT_TRUE(stats.ok()) << stats.err;
  // "class htb 1:11f parent 1:1 leaf ...\n Sent 123 bytes ..."
  std::uint64_t in_buckets = 0, in_default = 0;
  int classes = 0, busy_buckets = 0;
  std::istringstream in(stats.out);
  for (std::string line, id; std::getline(in, line);) {
    if (line.rfind("class htb ", 0) == 0) {
      id = line.substr(10, line.find(' ', 10) - 10);
      if (line.find("parent 1:1 ") != std::string::npos) ++classes;
    } else if (const auto at = line.find("Sent "); at != std::string::npos && !id.empty()) {
      const std::uint64_t bytes = std::stoull(line.substr(at + 5));
      if (id == "1:2")
        in_default += bytes;
      else if (id != "1:1") {
        in_buckets += bytes;
        if (bytes > (64u << 10)) ++busy_buckets;
      }
    }
  }
  EXPECT_EQ(classes, testbed::kFairBuckets + 1) << stats.out;
  EXPECT_GT(in_buckets, 1u << 20) << stats.out;
  EXPECT_LT(in_default, 64u << 10) << stats.out;
  EXPECT_GE(busy_buckets, 2) << stats.out;
}

TEST(TestbedLossyWan, EightStreamsCarryAtLeastFourTimesOneStream) {
  GRIDBCAST_REQUIRE_DELAY_LINE();
  TestbedGuard g(write_topology(kLossyWan), {"--delay", "delayline"});
  ASSERT_TRUE(g.ok()) << g.log();
  // Steady state: slow start (which a lone stream gets through unhindered while
  // eight collide at the bottleneck) stays out of the window. The best of up
  // to three pairs: eight streams through the userspace delay line are held
  // by the host's CPU as well as by the loss, and a busy host only lowers
  // them (once 94 Mbit/s against one stream's lucky 23.6, a ratio of 3.98;
  // 148-182 Mbit/s when the host keeps up, docs/TESTBED.md).
  double ratio = 0;
  std::string seen;
  for (int attempt = 0; attempt < 3 && ratio < 4.0; ++attempt) {
    const auto one = measure(g, "a1", "10.221.1.1", "b1", "10.222.1.1", 1, 5, 1.5);
    const auto eight = measure(g, "a1", "10.221.1.1", "b1", "10.222.1.1", 8, 5, 1.5);
    ASSERT_GT(one.bits_per_second(), 0);
    // Loss really happens: the single stream is far below the 1 Gbit/s link.
    EXPECT_LT(one.bits_per_second(), 500e6) << one.json();
    seen += "\none: " + one.json() + "\neight: " + eight.json();
    if (eight.bits_per_second() / one.bits_per_second() > ratio) {
      ratio = eight.bits_per_second() / one.bits_per_second();
      RecordProperty("one_stream_mbps", std::to_string(one.bits_per_second() / 1e6));
      RecordProperty("eight_streams_mbps", std::to_string(eight.bits_per_second() / 1e6));
    }
  }
  EXPECT_GE(ratio, 4.0) << seen;
}

}  // namespace
}  // namespace gridbcast::testing
