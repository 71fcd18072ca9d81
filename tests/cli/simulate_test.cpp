// `gridbcast simulate` as a user runs it: predictions for a site-config, the
// congestion-control model, and a clear error for what it does not know.
#include <gtest/gtest.h>

#include "support/json.hpp"
#include "support/process.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

double predicted(const std::string& json) {
  const auto j = last_json(json);
  return j.contains("predicted_seconds") ? j["predicted_seconds"].get<double>() : -1;
}

double simulate_lossy(const std::string& congestion) {
  Child c({kBin, "simulate", kSrc + "/site-configs/testbed-lossy.yaml", "--size", "32MiB", "--json",
           "--congestion", congestion});
  EXPECT_EQ(c.wait(60s), 0) << c.err();
  return predicted(c.out());
}

// On the 0.1 % loss, 20 ms WAN a loss-based stream is held to the Mathis
// limit (23 Mbit/s per stream, 4 streams per half); BBR is not.
TEST(SimulateCommand, BbrIsPredictedFasterThanLossBasedTcpOnALossyWan) {
  const double cubic = simulate_lossy("cubic");
  const double reno = simulate_lossy("reno");
  const double bbr = simulate_lossy("bbr");
  EXPECT_GT(cubic, 0);
  EXPECT_EQ(cubic, reno);
  EXPECT_GT(bbr, 0);
  EXPECT_GT(cubic / bbr, 3.0) << "cubic " << cubic << " s, bbr " << bbr << " s";
}

TEST(SimulateCommand, TheTableNamesTheCongestionControlAndUnknownOnesAreRefused) {
  Child table({kBin, "simulate", "--algorithm", "binomial", "--size", "1MiB"});
  ASSERT_EQ(table.wait(60s), 0) << table.err();
  EXPECT_NE(table.out().find("TCP congestion control cubic"), std::string::npos) << table.out();
  EXPECT_NE(table.out().find("binomial"), std::string::npos) << table.out();
  Child bad({kBin, "simulate", "--congestion", "vegas"});
  EXPECT_NE(bad.wait(60s), 0);
  EXPECT_NE(bad.err().find("--congestion"), std::string::npos) << bad.err();
  EXPECT_NE(bad.err().find("vegas"), std::string::npos) << bad.err();
}

}  // namespace
}  // namespace gridbcast::testing

namespace gridbcast::testing {
namespace {

double json_number(const std::string& json, const std::string& key) {
  const auto j = last_json(json);
  return j.contains(key) ? j[key].get<double>() : -1;
}

// testbed-2x2: 200 Mbit/s NICs and WAN, 10 ms away: 1 MiB takes 8 Mbit / 200
// Mbit/s + 10 ms = 51.943 ms by both bounds; the ratio is to the max-flow one.
// `plan` names a lossy WAN link whose streams hold a broadcast below what it
// needs of the link, with the streams that would carry it; a topology whose
// links are not lossy gets no such line.
TEST(PlanCommand, NamesALossyWanLinkWhoseStreamsAreTooFew) {
  Child c({kBin, "plan", kSrc + "/site-configs/three-sites-hetero.yaml", "--size", "64MiB"});
  EXPECT_EQ(c.wait(60s), 0) << c.err();
  EXPECT_NE(c.err().find("gridbcast plan: WAN link beta-gamma: its 8 streams carry at most "),
            std::string::npos)
      << c.err();
  EXPECT_NE(c.err().find(" a broadcast needs across it (`streams:` in the topology, or "
                         "--streams; or bbr)"),
            std::string::npos)
      << c.err();
  Child enough({kBin, "plan", kSrc + "/site-configs/three-sites-hetero.yaml", "--size", "64MiB",
                "--streams", "64"});
  EXPECT_EQ(enough.wait(60s), 0) << enough.err();
  EXPECT_EQ(enough.err().find("WAN link"), std::string::npos) << enough.err();
  Child clean({kBin, "plan", kSrc + "/site-configs/testbed-2x4.yaml"});
  EXPECT_EQ(clean.wait(60s), 0) << clean.err();
  EXPECT_EQ(clean.err().find("WAN link"), std::string::npos) << clean.err();
}

TEST(SimulateCommand, ReportsBothBoundsAndTheRatioToTheMaxFlowBound) {
  Child c({kBin, "simulate", kSrc + "/site-configs/testbed-2x2.yaml", "--size", "1MiB",
           "--algorithm", "binomial", "--json"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  const double mf = json_number(c.out(), "max_flow_bound_seconds");
  EXPECT_NEAR(mf, 1048576.0 * 8 / 2e8 + 0.010, 1e-6) << c.out();
  EXPECT_NEAR(json_number(c.out(), "lower_bound_seconds"), mf, 1e-6) << c.out();
  EXPECT_NEAR(json_number(c.out(), "ratio_to_max_flow_bound"), predicted(c.out()) / mf, 1e-4)
      << c.out();
  Child table({kBin, "simulate", kSrc + "/site-configs/testbed-2x2.yaml", "--size", "1MiB",
               "--algorithm", "binomial"});
  ASSERT_EQ(table.wait(60s), 0) << table.err();
  EXPECT_NE(table.out().find("max-flow s      simple s   ratio"), std::string::npos) << table.out();
}

// 1 GiB on ten sites of a thousand nodes in 64 KiB segments is 330 million
// segments: the simulator would need about 95 GiB (it was killed for
// memory). Past its budget the command prices the plan analytically and
// says so. (The model's own segment there is larger: 2.6 million.)
TEST(SimulateCommand, APlanPastTheSimulatorsBudgetIsPricedAnalyticallyAndSaysSo) {
  Child big({kBin, "simulate", "--scale", "10x1000", "--size", "1GiB", "--algorithm", "multilane",
             "--segment", "64KiB", "--json"});
  ASSERT_EQ(big.wait(120s), 0) << big.err();
  const auto j = last_json(big.out());
  EXPECT_EQ(j["method"], "analytic") << big.out();
  EXPECT_EQ(j["slowest_rank"], -1);
  EXPECT_GT(j["segments"].get<double>(), 24e6);
  EXPECT_GE(j["ratio_to_max_flow_bound"].get<double>(), 1.0);
  EXPECT_LT(j["ratio_to_max_flow_bound"].get<double>(), 1.2);
  EXPECT_NE(big.err().find("priced analytically"), std::string::npos) << big.err();
  Child small(
      {kBin, "simulate", kSrc + "/site-configs/testbed-2x2.yaml", "--size", "1MiB", "--json"});
  ASSERT_EQ(small.wait(60s), 0) << small.err();
  EXPECT_EQ(last_json(small.out())["method"], "simulated");
}

// --lose and --slow price a heal as launch does it: the others are done
// after the undisturbed time (they wait for the notice, the restart and the
// resume check), a straggler after them; the event's time follows --at.
TEST(SimulateCommand, ALostOrSlowNodeIsPricedAgainstTheUndisturbedPrediction) {
  Child lost({kBin, "simulate", "--scale", "4x50", "--size", "256MiB", "--lose", "s1n7", "--at",
              "0.3", "--json"});
  ASSERT_EQ(lost.wait(120s), 0) << lost.err();
  const auto l = last_json(lost.out());
  EXPECT_EQ(l["event"], "lost");
  EXPECT_EQ(l["rank"], 57);
  const double u = l["undisturbed_seconds"].get<double>();
  EXPECT_NEAR(l["at_seconds"].get<double>(), 0.3 * u, 1e-6);
  EXPECT_GT(l["others_ratio"].get<double>(), 1.0);
  const auto held = l["held_bytes"].get<std::uint64_t>();
  EXPECT_EQ(held % (64u << 20), 0u);
  // The resume check at the default 8 Gbit/s of SHA-256: the root digests
  // what the survivors may hold (each one's chunk record vouches for it).
  EXPECT_NEAR(l["check_seconds"].get<double>(), static_cast<double>(held) / 1e9, 1e-6);
  Child slow(
      {kBin, "simulate", "--scale", "4x50", "--size", "256MiB", "--slow", "57:1Gbit", "--json"});
  ASSERT_EQ(slow.wait(120s), 0) << slow.err();
  const auto s = last_json(slow.out());
  EXPECT_EQ(s["event"], "slow");
  EXPECT_EQ(s["node"], "s1n7");
  EXPECT_GT(s["others_seconds"].get<double>(), l["others_seconds"].get<double>())
      << "a straggler is noticed later than a loss";
  EXPECT_GT(s["straggler_seconds"].get<double>(), s["others_seconds"].get<double>());
  Child text({kBin, "simulate", "--scale", "4x50", "--size", "256MiB", "--slow", "s1n7:1Gbit"});
  ASSERT_EQ(text.wait(120s), 0) << text.err();
  EXPECT_NE(text.out().find("the others done"), std::string::npos) << text.out();
  EXPECT_NE(text.out().find("s1n7 done"), std::string::npos) << text.out();
  for (const auto& [args, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--lose", "s0n0"}, "the root cannot be healed around"},
           {{"--lose", "nosuch"}, "no node nosuch"},
           {{"--slow", "s1n7"}, "expected NODE:RATE"},
           {{"--slow", "s1n7:fast"}, "--slow"},
           {{"--lose", "s1n7", "--slow", "s1n8:1Gbit"}, "not both"},
           {{"--lose", "s1n7", "--at", "1.5"}, "--at"}}) {
    std::vector<std::string> argv = {kBin, "simulate", "--scale", "4x50"};
    argv.insert(argv.end(), args.begin(), args.end());
    Child bad(argv);
    EXPECT_NE(bad.wait(60s), 0) << why;
    EXPECT_NE(bad.err().find(why), std::string::npos) << bad.err();
  }
}

TEST(PlanCommand, TextAndJsonGiveTheMaxFlowAndTheSimpleBound) {
  Child json({kBin, "plan", kSrc + "/site-configs/testbed-2x2.yaml", "--size", "1MiB", "--format",
              "json"});
  ASSERT_EQ(json.wait(60s), 0) << json.err();
  EXPECT_NEAR(json_number(json.out(), "max_flow_bound_seconds"), 0.051943040, 1e-9) << json.out();
  EXPECT_NEAR(json_number(json.out(), "max_flow_rate_bps"), 2e8, 1) << json.out();
  EXPECT_NEAR(json_number(json.out(), "lower_bound_seconds"), 0.051943040, 1e-9) << json.out();
  Child text({kBin, "plan", kSrc + "/site-configs/testbed-2x2.yaml", "--size", "1MiB"});
  ASSERT_EQ(text.wait(60s), 0) << text.err();
  EXPECT_NE(text.out().find("\nbound: max-flow 0.051943 s, simple 0.051943 s; 200 Mbit/s to "),
            std::string::npos)
      << text.out();
}

}  // namespace
}  // namespace gridbcast::testing
