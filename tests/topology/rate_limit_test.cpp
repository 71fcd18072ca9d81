// Rate limits (defaults.max_rate / --max-rate for what each node sends, a WAN
// link's max_rate for what crosses it): read from the topology with
// file:line:col errors, counted by the bound, the model and the plans, and
// paced in every plan so that no node's connections together, and no WAN
// link's, are paced above the limit.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "topology/bound.hpp"
#include "topology/emit.hpp"
#include "topology/hosts.hpp"
#include "topology/loader.hpp"
#include "topology/plan/format.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::topology {
namespace {

constexpr double kMbit = 1e6;

// Two sites of four nodes with two 100 Mbit/s NICs each, a 1 Gbit/s WAN link.
std::string two_sites(const std::string& defaults, const std::string& link = "") {
  return "defaults:\n"
         "  nic_bandwidth: 100 Mbit\n" +
         defaults +
         "  wan: {latency: 5 ms, bandwidth: 1 Gbit, streams: 2}\n"
         "sites:\n"
         "  - name: a\n"
         "    nodes:\n"
         "      - {name: 'a[1-4]', nics: [{address: '10.0.0.[1-4]'}, {address: '10.0.1.[1-4]'}]}\n"
         "  - name: b\n"
         "    nodes:\n"
         "      - {name: 'b[1-4]', nics: [{address: '10.1.0.[1-4]'}, {address: '10.1.1.[1-4]'}]}\n"
         "wan:\n"
         "  - {sites: [a, b]" +
         link + "}\n";
}

// What each rank's paced links send in all (payload bytes/s, every stream),
// and what the links over the WAN send each way (by the sending site).
struct Sums {
  std::map<int, double> by_sender;
  std::map<int, double> over_wan;
};
Sums sums(const Grid& g, const Plan& plan) {
  std::map<std::tuple<int, int, int, int>, int> streams;
  for (const Transfer& t : plan.transfers)
    if (t.length > 0) {
      int& s = streams[{t.from, t.to, t.lane_from, t.lane_to}];
      s = std::max(s, t.streams);
    }
  Sums out;
  for (const LinkPace& p : link_paces(g, plan)) {
    const double all = p.bytes_per_second * streams.at({p.from, p.to, p.lane_from, p.lane_to});
    out.by_sender[p.from] += all;
    if (g.site_of(p.from) != g.site_of(p.to)) out.over_wan[g.site_of(p.from)] += all;
  }
  return out;
}

double payload(double bps) {
  return bps * kPacedPayloadShare / 8;
}

TEST(RateLimits, AreReadFromDefaultsAndWanLinksAndWrittenBack) {
  const Grid g =
      load_grid_string(two_sites("  max_rate: 150 Mbit\n", ", max_rate: 80 Mbit"), "inline.yaml");
  EXPECT_DOUBLE_EQ(g.max_rate_bps, 150 * kMbit);
  ASSERT_EQ(g.wan.size(), 1u);
  EXPECT_DOUBLE_EQ(g.wan[0].max_rate_bps, 80 * kMbit);
  EXPECT_DOUBLE_EQ(g.wan[0].rate_bps(), 80 * kMbit);
  EXPECT_DOUBLE_EQ(g.send_rate_bps(0), 150 * kMbit);  // below its NICs' 200
  EXPECT_TRUE(g.rate_limited());
  // defaults.wan gives it to every link that does not say
  const Grid d = load_grid_string(
      "defaults:\n  wan: {latency: 1 ms, bandwidth: 1 Gbit, max_rate: 300 Mbit}\n"
      "sites:\n  - {name: a, nodes: [{name: a1, nics: [{address: 10.0.0.1, bandwidth: 1 Gbit}]}]}\n"
      "  - {name: b, nodes: [{name: b1, nics: [{address: 10.0.1.1, bandwidth: 1 Gbit}]}]}\n"
      "wan:\n  - {sites: [a, b]}\n",
      "inline.yaml");
  EXPECT_DOUBLE_EQ(d.wan[0].max_rate_bps, 300 * kMbit);
  EXPECT_DOUBLE_EQ(d.max_rate_bps, 0);
  // A limit above the link's bandwidth leaves the bandwidth in charge.
  const Grid above = load_grid_string(two_sites("", ", max_rate: 5 Gbit"), "inline.yaml");
  EXPECT_DOUBLE_EQ(above.wan[0].rate_bps(), 1000 * kMbit);
  // grid_to_yaml keeps them (what `probe -o` writes).
  const Grid again = load_grid_string(grid_to_yaml(g), "again.yaml");
  EXPECT_DOUBLE_EQ(again.max_rate_bps, g.max_rate_bps);
  EXPECT_DOUBLE_EQ(again.wan[0].max_rate_bps, g.wan[0].max_rate_bps);
  // --max-rate is an override of defaults.max_rate.
  Overrides o;
  o.max_rate_bps = 50 * kMbit;
  const Grid over = load_grid_string(apply_overrides(two_sites("  max_rate: 150 Mbit\n"), o), "o");
  EXPECT_DOUBLE_EQ(over.max_rate_bps, 50 * kMbit);
}

TEST(RateLimits, ABadLimitIsRefusedAtItsPlaceInTheFile) {
  const auto error = [](const std::string& yaml) {
    try {
      (void)load_grid_string(yaml, "grid.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(two_sites("  max_rate: 0 bit\n")).find("grid.yaml:3:"), std::string::npos)
      << error(two_sites("  max_rate: 0 bit\n"));
  EXPECT_NE(error(two_sites("  max_rate: fast\n")).find("max_rate"), std::string::npos);
  const std::string wan = error(two_sites("", ", max_rate: -5 Mbit"));
  EXPECT_NE(wan.find("grid.yaml:12:"), std::string::npos) << wan;
  EXPECT_NE(wan.find("max_rate"), std::string::npos) << wan;
}

TEST(RateLimits, TheBoundCountsANodesLimitAndAWanLinks) {
  const Grid free = load_grid_string(two_sites(""), "inline.yaml");
  EXPECT_DOUBLE_EQ(max_flow_bound(free, 0).rate_bps, 200 * kMbit);
  const Grid node = load_grid_string(two_sites("  max_rate: 120 Mbit\n"), "inline.yaml");
  EXPECT_DOUBLE_EQ(max_flow_bound(node, 0).rate_bps, 120 * kMbit);
  const Grid wan = load_grid_string(two_sites("", ", max_rate: 70 Mbit"), "inline.yaml");
  EXPECT_DOUBLE_EQ(max_flow_bound(wan, 0).rate_bps, 70 * kMbit);
  EXPECT_GT(lower_bound_seconds(wan, 0, 1 << 20), lower_bound_seconds(free, 0, 1 << 20));
}

TEST(RateLimits, EveryPlanIsPacedWithinTheLimitsAndMultilaneAtThem) {
  const Grid g =
      load_grid_string(two_sites("  max_rate: 120 Mbit\n", ", max_rate: 60 Mbit"), "inline.yaml");
  for (Algorithm a : available_algorithms(g)) {
    SCOPED_TRACE(std::string(algorithm_name(a)));
    EXPECT_NE(a, Algorithm::kMulticast);
    const Plan plan = build_plan(g, a, 1, 8 << 20);
    const Sums s = sums(g, plan);
    ASSERT_FALSE(s.by_sender.empty());
    for (const auto& [rank, bytes] : s.by_sender)
      EXPECT_LE(bytes, payload(120 * kMbit) * (1 + 1e-12)) << "rank " << rank;
    for (const auto& [site, bytes] : s.over_wan)
      EXPECT_LE(bytes, payload(60 * kMbit) * (1 + 1e-12)) << "from site " << site;
    if (a == Algorithm::kMultilane) {
      // All of a node's links run at once here: the split is exact.
      EXPECT_DOUBLE_EQ(s.by_sender.at(1), payload(120 * kMbit));
      EXPECT_DOUBLE_EQ(s.over_wan.at(0), payload(60 * kMbit));
    }
  }
  // The multicast algorithm cannot keep to a limit and says so.
  Grid mc = g;
  for (Site& site : mc.sites) site.multicast.enabled = true;
  EXPECT_NE(algorithm_unavailable(mc, Algorithm::kMulticast).find("rate limit"), std::string::npos);
}

TEST(RateLimits, WithPacedLanesANodesLimitIsSharedByItsLanes) {
  const Grid g =
      load_grid_string(two_sites("  pace_lanes: true\n  max_rate: 100 Mbit\n"), "inline.yaml");
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, 8 << 20);
  const auto shares = lane_shares(g, plan);
  std::map<int, std::vector<double>> sending;
  for (const auto& [key, bps] : shares)
    if (std::get<2>(key))
      sending[std::get<0>(key)].push_back(bps);
    else
      EXPECT_DOUBLE_EQ(bps, 100 * kMbit);  // receiving is not limited
  // A node sending on both lanes (both NICs, 200 Mbit/s) gets 50 on each; one
  // sending on one lane keeps its NIC's 100.
  for (const auto& [rank, parts] : sending)
    for (const double bps : parts)
      EXPECT_DOUBLE_EQ(bps, parts.size() == 2 ? 50 * kMbit : 100 * kMbit);
  EXPECT_EQ(sending.at(0).size(), 2u);
  for (const auto& [rank, bytes] : sums(g, plan).by_sender)
    EXPECT_LE(bytes, payload(100 * kMbit) * (1 + 1e-12)) << "rank " << rank;
}

TEST(RateLimits, TheModelRunsAtTheLimitedBoundAndPlanSaysWhy) {
  const Grid g =
      load_grid_string(two_sites("  max_rate: 120 Mbit\n", ", max_rate: 60 Mbit"), "inline.yaml");
  const Plan plan = build_plan(g, Algorithm::kMultilane, 0, 64 << 20);
  const double bound = max_flow_bound(g, 0).seconds(plan.size);
  const double t = simulate(g, plan).makespan_s;
  EXPECT_GE(t, bound);
  EXPECT_LT(t, 1.15 * bound);
  // Two links cross the WAN, each paced at half its limit: the analytic model
  // too holds them to that, so it does not beat the bound either.
  const double a = analytic_seconds(g, plan, model_segment(g, plan));
  EXPECT_GE(a, bound);
  EXPECT_LT(a, 1.15 * bound);
  const std::string text = plan_to_text(g, plan);
  EXPECT_NE(text.find("each node sends at most 120 Mbit/s"), std::string::npos) << text;
  EXPECT_NE(text.find("WAN a - b at most 60 Mbit/s each way"), std::string::npos) << text;
  EXPECT_NE(text.find("paced at"), std::string::npos) << text;
  // A binomial root sends the whole message to each of its three children,
  // all three links paced at a third of its 120 Mbit/s: at least three times
  // the message at 120 Mbit/s, which both the simulator and the analytic
  // model see (they hold every link to its pace), and they agree.
  const Plan tree = build_plan(g, Algorithm::kBinomial, 0, 64 << 20);
  const double fan_out = 3.0 * (64 << 20) * 8 / (120 * kMbit);
  const double simulated = simulate(g, tree).makespan_s;
  const double analytic = analytic_seconds(g, tree, 1 << 20);
  EXPECT_GE(simulated, 0.95 * fan_out);
  EXPECT_GE(analytic, 0.95 * fan_out);
  EXPECT_NEAR(analytic, simulated, 0.25 * simulated);
}

}  // namespace
}  // namespace gridbcast::topology
