// topology/probe: the schedule is bounded per node and phase count, never
// reuses a connection, covers every NIC that has a peer and every WAN link
// both ways; the estimate recovers a network from samples priced by a model
// of it, says what it could not tell, and refuses samples that do not fit.
#include "topology/probe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "support/grids.hpp"
#include "topology/bound.hpp"
#include "topology/loader.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::topology {
namespace {

std::vector<std::string> shipped_configs() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(GRIDBCAST_SOURCE_DIR "/site-configs"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

int phase_index(const std::vector<ProbePhase>& phases, const std::string& prefix) {
  for (size_t i = 0; i < phases.size(); ++i)
    if (phases[i].name.rfind(prefix, 0) == 0) return static_cast<int>(i);
  return -1;
}

TEST(ProbeGrid, LaneJBindsNicJOnEveryNodeAndNothingIsPaced) {
  for (const auto& file : shipped_configs()) {
    Grid declared = load_grid_file(file);
    declared.pace_lanes = true;
    const Grid g = probe_grid(declared);
    EXPECT_FALSE(g.pace_lanes) << file;
    for (const Node& n : g.nodes)
      for (int j = 0; j < static_cast<int>(std::min<size_t>(n.nics.size(), kMaxLanes)); ++j) {
        ASSERT_LT(j, g.lane_count()) << file;
        EXPECT_EQ(n.lane_nic_index(j), j) << file << " " << n.name;
      }
  }
}

TEST(ProbeSchedule, NoConnectionTwiceAndEveryFlowOnNicsItsNodesHave) {
  for (const auto& file : shipped_configs()) {
    const Grid g = probe_grid(load_grid_file(file));
    const auto phases = probe_schedule(g);
    std::set<std::tuple<int, int, int, int, int>> used;
    for (const auto& ph : phases)
      for (const auto& f : ph.flows) {
        ASSERT_NE(f.from, f.to) << file;
        ASSERT_LT(f.nic_from, static_cast<int>(g.nodes[static_cast<size_t>(f.from)].nics.size()));
        ASSERT_LT(f.nic_to, static_cast<int>(g.nodes[static_cast<size_t>(f.to)].nics.size()));
        ASSERT_GE(f.stream, 0);
        ASSERT_LE(f.stream + f.streams, 64) << file << " " << ph.name;
        for (int s = f.stream; s < f.stream + f.streams; ++s)
          EXPECT_TRUE(used.insert({f.from, f.to, f.nic_from, f.nic_to, s}).second)
              << file << ": " << ph.name << " reuses a connection";
        if (f.wan >= 0) {
          const WanLink& l = g.wan[static_cast<size_t>(f.wan)];
          EXPECT_NE(g.site_of(f.from), g.site_of(f.to));
          EXPECT_TRUE((g.site_of(f.from) == l.site_a && g.site_of(f.to) == l.site_b) ||
                      (g.site_of(f.from) == l.site_b && g.site_of(f.to) == l.site_a));
          if (f.kind == ProbeKind::kRate) {
            EXPECT_EQ(f.streams, l.streams) << file;
          }
        } else {
          EXPECT_EQ(g.site_of(f.from), g.site_of(f.to)) << file;
          EXPECT_EQ(f.streams, 1);
        }
      }
  }
}

// The time a probe takes does not grow with the grid: the same phases for 8
// nodes a site as for 300, and each node in a constant number of flows.
TEST(ProbeSchedule, PhasesAndFlowsPerNodeDoNotGrowWithTheGrid) {
  const auto small = probe_schedule(probe_grid(testing::make_grid({8, 8})));
  const auto large = probe_schedule(probe_grid(testing::make_grid({300, 300, 300})));
  ASSERT_EQ(small.size(), large.size());
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(small[i].name, large[i].name);
    EXPECT_EQ(small[i].seconds, large[i].seconds);
  }
  for (const auto& ph : large) {
    std::map<int, int> out, in;
    for (const auto& f : ph.flows) {
      out[f.from] += f.streams;
      in[f.to] += f.streams;
    }
    for (const auto& [r, n] : out) EXPECT_LE(n, 2 * 3) << ph.name << " rank " << r;
    for (const auto& [r, n] : in) EXPECT_LE(n, 2 * 3) << ph.name << " rank " << r;
  }
}

TEST(ProbeSchedule, EveryNicWithAPeerSendsAndReceivesAndEveryWanLinkBothWays) {
  for (const auto& file : shipped_configs()) {
    const Grid g = probe_grid(load_grid_file(file));
    const auto phases = probe_schedule(g);
    std::set<std::pair<int, int>> sends, receives;
    std::set<std::pair<int, int>> wan_ways;  // (link, from site)
    std::set<int> wan_latency;
    for (const auto& ph : phases) {
      const bool together = ph.name.rfind("all nics", 0) == 0;
      for (const auto& f : ph.flows) {
        if (together) {
          sends.insert({f.from, f.nic_from});
          receives.insert({f.to, f.nic_to});
        }
        if (f.wan >= 0 && f.kind == ProbeKind::kRate) wan_ways.insert({f.wan, g.site_of(f.from)});
        if (f.wan >= 0 && f.kind == ProbeKind::kLatency) wan_latency.insert(f.wan);
      }
    }
    for (const Site& s : g.sites)
      for (const int r : s.ranks)
        for (int j = 0; j < static_cast<int>(g.nodes[static_cast<size_t>(r)].nics.size()); ++j) {
          int peers = 0;
          for (const int o : s.ranks)
            peers += o != r && static_cast<int>(g.nodes[static_cast<size_t>(o)].nics.size()) > j;
          if (peers == 0) continue;
          EXPECT_TRUE(sends.count({r, j})) << file << " rank " << r << " nic " << j;
          EXPECT_TRUE(receives.count({r, j})) << file << " rank " << r << " nic " << j;
        }
    for (size_t i = 0; i < g.wan.size(); ++i) {
      EXPECT_TRUE(wan_ways.count({static_cast<int>(i), g.wan[i].site_a})) << file;
      EXPECT_TRUE(wan_ways.count({static_cast<int>(i), g.wan[i].site_b})) << file;
      EXPECT_TRUE(wan_latency.count(static_cast<int>(i))) << file;
    }
  }
}

TEST(ProbeSchedule, SettingsOutOfRangeAreRefusedAndSlowLinksGetLongerWanPhases) {
  const Grid g = probe_grid(testing::make_grid({2, 2}));
  for (const auto& bad : {ProbeSettings{0.01, 1, 0.2, 12, 8}, ProbeSettings{0.3, 1, 0.2, 1, 8},
                          ProbeSettings{0.3, 1, 0.2, 12, 0}, ProbeSettings{0.3, 1000, 0.2, 12, 8}})
    EXPECT_THROW(probe_schedule(g, bad), std::invalid_argument);
  Grid slow = g;
  slow.wan[0].latency_s = 0.1;  // 100 ms one way: 60 of them is 6 s
  const auto phases = probe_schedule(probe_grid(slow));
  const int w = phase_index(phases, "wan");
  ASSERT_GE(w, 0);
  EXPECT_DOUBLE_EQ(phases[static_cast<size_t>(w)].seconds, 6.0);
}

// Samples priced by a model of the network: a flow runs at the lower of its
// ends' NICs, each shared evenly among the flows on it in the phase (a fan's
// target has several); the WAN flows of one direction share the link.
std::vector<std::vector<ProbeSample>> model_samples(const Grid& truth,
                                                    const std::vector<ProbePhase>& phases,
                                                    double window_s = 0.1) {
  std::vector<std::vector<ProbeSample>> out(phases.size());
  for (size_t p = 0; p < phases.size(); ++p) {
    const auto& ph = phases[p];
    std::map<std::pair<int, int>, int> outs, ins;
    for (const auto& f : ph.flows)
      if (f.wan < 0 && f.kind == ProbeKind::kRate) {
        ++outs[{f.from, f.nic_from}];
        ++ins[{f.to, f.nic_to}];
      }
    std::map<int, double> wan_demand;
    for (const auto& f : ph.flows)
      if (f.wan >= 0 && f.kind == ProbeKind::kRate)
        wan_demand[f.wan] += std::min(truth.nodes[static_cast<size_t>(f.from)]
                                          .nics[static_cast<size_t>(f.nic_from)]
                                          .bandwidth_bps,
                                      truth.nodes[static_cast<size_t>(f.to)]
                                          .nics[static_cast<size_t>(f.nic_to)]
                                          .bandwidth_bps);
    for (size_t i = 0; i < ph.flows.size(); ++i) {
      const auto& f = ph.flows[i];
      ProbeSample s;
      s.flow = static_cast<int>(i);
      if (f.kind == ProbeKind::kLatency) {
        const double one_way = f.wan >= 0 ? truth.wan[static_cast<size_t>(f.wan)].latency_s : 40e-6;
        s.rtt_min_s = 2 * one_way;
        s.rtt_median_s = 2.1 * one_way;
        s.pings = 5;
      } else {
        const double share_out = f.wan < 0 ? outs[{f.from, f.nic_from}] : 1;
        const double share_in = f.wan < 0 ? ins[{f.to, f.nic_to}] : 1;
        const auto nic = [&](int r, int j) {
          return truth.nodes[static_cast<size_t>(r)].nics[static_cast<size_t>(j)].bandwidth_bps;
        };
        double bps = std::min(nic(f.from, f.nic_from) / share_out, nic(f.to, f.nic_to) / share_in);
        if (f.wan >= 0) {
          const double link = truth.wan[static_cast<size_t>(f.wan)].bandwidth_bps;
          bps *= std::min(1.0, link / wan_demand[f.wan]);
        }
        s.seconds = window_s;
        s.bytes = static_cast<std::uint64_t>(bps * kPayloadEfficiency / 8 * window_s);
      }
      out[p].push_back(s);
    }
  }
  return out;
}

// The case of issue 29: the hetero-nics grid declared without its NICs'
// bandwidths (every NIC at 50 Mbit/s). Its sites have fast NICs next to slow
// ones in rank order (b3 and b4 have a 100 Mbit/s NIC, b1 and b2 three of 50):
// each NIC must come out at its own rate, not at its slower neighbour's.
TEST(ProbeEstimate, RecoversEveryNicAndTheWanFromAModelOfTheHeteroNicsGrid) {
  const Grid truth = load_grid_file(GRIDBCAST_SOURCE_DIR "/site-configs/testbed-hetero-nics.yaml");
  Grid declared = truth;
  for (Node& n : declared.nodes)
    for (Nic& nic : n.nics) nic.bandwidth_bps = 50e6;
  declared.pace_lanes = false;
  const auto phases = probe_schedule(probe_grid(declared));
  const ProbeEstimate e = estimate(declared, phases, model_samples(truth, phases));
  for (size_t r = 0; r < truth.nodes.size(); ++r)
    for (size_t j = 0; j < truth.nodes[r].nics.size(); ++j)
      EXPECT_NEAR(e.measured.nodes[r].nics[j].bandwidth_bps, truth.nodes[r].nics[j].bandwidth_bps,
                  0.01 * truth.nodes[r].nics[j].bandwidth_bps)
          << truth.nodes[r].name << " nic " << j;
  EXPECT_NEAR(e.measured.wan[0].bandwidth_bps, 300e6, 3e6);
  EXPECT_NEAR(e.measured.wan[0].latency_s, 0.010, 1e-6);
  EXPECT_NEAR(e.measured.sites[0].latency_s, 40e-6, 1e-9);
  // The 100 Mbit/s NICs are off by more than 25 %: flagged, a row each way.
  int flagged_nics = 0;
  for (const auto& row : e.rows)
    if (row.flagged() && row.what.find(" nic ") != std::string::npos) ++flagged_nics;
  EXPECT_EQ(flagged_nics, 2 * 6);
  // Lanes share the 100 Mbit/s NICs in the measured grid (three lanes on two
  // NICs): paced, now that the rates are measured.
  EXPECT_EQ(e.measured.lane_count(), 3);
  EXPECT_TRUE(e.measured.pace_lanes);
  // And the bound from the measured figures is the true one.
  EXPECT_NEAR(max_flow_bound_seconds(e.measured, 0, 64 << 20),
              max_flow_bound_seconds(truth, 0, 64 << 20), 0.02);
}

TEST(ProbeEstimate, AWanFasterThanItsNodesIsAFloorAndNicsThatShareARateAreNamed) {
  Grid truth = testing::make_grid({2, 2}, 4, 2);
  for (Node& n : truth.nodes)
    for (Nic& nic : n.nics) nic.bandwidth_bps = 100e6;
  truth.wan[0].bandwidth_bps = 10e9;  // far above the four 100 Mbit/s NICs of a site
  const auto phases = probe_schedule(probe_grid(truth));
  auto samples = model_samples(truth, phases);
  // Node s0n0's two NICs share one 100 Mbit/s link: alone each runs at 100,
  // together at 50 each.
  for (size_t p = 0; p < phases.size(); ++p)
    if (phases[p].name.rfind("all nics", 0) == 0)
      for (auto& s : samples[p]) {
        const auto& f = phases[p].flows[static_cast<size_t>(s.flow)];
        if (f.from == 0 || f.to == 0) s.bytes /= 2;
      }
  const ProbeEstimate e = estimate(truth, phases, samples);
  bool floor_row = false;
  for (const auto& row : e.rows)
    if (row.what.find("bandwidth") != std::string::npos) {
      EXPECT_TRUE(row.lower_bound) << row.what;
      EXPECT_FALSE(row.flagged()) << row.what << ": a floor below the declared figure agrees";
      floor_row = true;
    }
  EXPECT_TRUE(floor_row);
  EXPECT_DOUBLE_EQ(e.measured.wan[0].bandwidth_bps, 10e9) << "a floor keeps the declared figure";
  bool named = false;
  for (const auto& n : e.notes) named = named || n.rfind("s0n0: its NICs do not keep", 0) == 0;
  EXPECT_TRUE(named) << ::testing::PrintToString(e.notes);
  EXPECT_NEAR(e.measured.nodes[0].nics[0].bandwidth_bps, 50e6, 1e6) << "all together, as used";
}

TEST(ProbeEstimate, ANicWithoutAPeerInItsSiteKeepsItsDeclaredFigureAndSaysSo) {
  Grid g = testing::make_grid({1, 3});
  const auto phases = probe_schedule(probe_grid(g));
  const ProbeEstimate e = estimate(g, phases, model_samples(g, phases));
  EXPECT_DOUBLE_EQ(e.measured.nodes[0].nics[0].bandwidth_bps, g.nodes[0].nics[0].bandwidth_bps);
  bool said = false;
  for (const auto& n : e.notes) said = said || n.find("s0n0 nic 0") != std::string::npos;
  EXPECT_TRUE(said) << ::testing::PrintToString(e.notes);
}

// Under a rate limit a rate phase would break it (or, paced, measure the
// limit): only latencies are probed, the estimate says why once, and the
// declared rates stand.
TEST(ProbeSchedule, UnderARateLimitOnlyLatenciesAreProbed) {
  for (const bool wan_limit : {false, true}) {
    Grid g = testing::make_grid({3, 3}, 2);
    if (wan_limit)
      g.wan[0].max_rate_bps = 100e6;
    else
      g.max_rate_bps = 1e9;
    const auto phases = probe_schedule(probe_grid(g));
    ASSERT_FALSE(phases.empty());
    for (const ProbePhase& ph : phases)
      for (const ProbeFlow& f : ph.flows) EXPECT_EQ(f.kind, ProbeKind::kLatency) << ph.name;
    const ProbeEstimate e = estimate(g, phases, model_samples(g, phases));
    for (size_t r = 0; r < g.nodes.size(); ++r)
      EXPECT_DOUBLE_EQ(e.measured.nodes[r].nics[0].bandwidth_bps, g.nodes[r].nics[0].bandwidth_bps);
    EXPECT_DOUBLE_EQ(e.measured.wan[0].bandwidth_bps, g.wan[0].bandwidth_bps);
    int said = 0;
    for (const auto& n : e.notes) said += n.find("rates were not probed") != std::string::npos;
    EXPECT_EQ(said, 1) << ::testing::PrintToString(e.notes);
  }
}

// testbed-hetero-3x's gamma5 has one 100 Mbit/s NIC among nodes of 50 Mbit/s
// ones: on the rings it meets only slower partners and measures 50. It is
// below its declared 100, so a confirmation gives it a fan of partners, and
// then it measures 100. Nothing else needs confirming.
TEST(ProbeConfirm, ALoneFastNicAmongSlowOnesGetsAFanAndItsTrueRate) {
  const Grid truth = load_grid_file(GRIDBCAST_SOURCE_DIR "/site-configs/testbed-hetero-3x.yaml");
  auto phases = probe_schedule(probe_grid(truth));
  auto samples = model_samples(truth, phases);
  const int gamma5 = truth.size() - 1;
  ASSERT_EQ(truth.nodes[static_cast<size_t>(gamma5)].name, "gamma5");
  const auto on_rings = estimate(truth, phases, samples);
  EXPECT_NEAR(on_rings.measured.nodes[static_cast<size_t>(gamma5)].nics[0].bandwidth_bps, 50e6,
              1e6);
  const auto extra = confirm_phases(truth, phases, samples);
  ASSERT_EQ(extra.size(), 1u);
  int fan_in = 0, fan_out = 0;
  for (const auto& f : extra[0].flows) {
    fan_in += f.to == gamma5;
    fan_out += f.from == gamma5;
    EXPECT_TRUE(f.to == gamma5 || f.from == gamma5) << "only gamma5 is confirmed";
    EXPECT_EQ(truth.site_of(f.from), truth.site_of(f.to));
  }
  EXPECT_EQ(fan_in, fan_out);
  EXPECT_GE(fan_in, 2);
  EXPECT_LE(fan_in, 4);
  // A connection of its own: no flow of the schedule used one of these.
  std::set<std::tuple<int, int, int, int, int>> used;
  for (const auto& ph : phases)
    for (const auto& f : ph.flows)
      for (int st = f.stream; st < f.stream + f.streams; ++st)
        used.insert({f.from, f.to, f.nic_from, f.nic_to, st});
  for (const auto& f : extra[0].flows)
    EXPECT_FALSE(used.count({f.from, f.to, f.nic_from, f.nic_to, f.stream}));
  phases.push_back(extra[0]);
  samples.push_back(model_samples(truth, {extra[0]}).front());
  const ProbeEstimate e = estimate(truth, phases, samples);
  for (size_t r = 0; r < truth.nodes.size(); ++r)
    for (size_t j = 0; j < truth.nodes[r].nics.size(); ++j)
      EXPECT_NEAR(e.measured.nodes[r].nics[j].bandwidth_bps, truth.nodes[r].nics[j].bandwidth_bps,
                  0.02 * truth.nodes[r].nics[j].bandwidth_bps)
          << truth.nodes[r].name << " nic " << j;
  // Once confirmed, nothing is left to confirm; and a grid measured at its
  // declared figures needs none.
  EXPECT_TRUE(confirm_phases(truth, phases, samples).empty());
  const Grid g8 = load_grid_file(GRIDBCAST_SOURCE_DIR "/site-configs/testbed-8x8.yaml");
  const auto plain = probe_schedule(probe_grid(g8));
  EXPECT_TRUE(confirm_phases(g8, plain, model_samples(g8, plain)).empty());
}

TEST(ProbeEstimate, SamplesThatDoNotFitTheScheduleAreRefused) {
  const Grid g = testing::make_grid({3});
  const auto phases = probe_schedule(probe_grid(g));
  auto samples = model_samples(g, phases);
  auto beyond = samples;
  beyond[0].push_back(ProbeSample{static_cast<int>(phases[0].flows.size()), 0, 0, 0, 0, 0});
  EXPECT_THROW(estimate(g, phases, beyond), std::invalid_argument);
  auto twice = samples;
  twice[1].push_back(twice[1].front());
  EXPECT_THROW(estimate(g, phases, twice), std::invalid_argument);
  samples.pop_back();
  EXPECT_THROW(estimate(g, phases, samples), std::invalid_argument);
}

}  // namespace
}  // namespace gridbcast::topology
