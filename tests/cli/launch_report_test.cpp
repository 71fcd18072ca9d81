// cli/launch_report.cpp: the launch summary names both bounds, and the ratio
// is to the max-flow one; the JSON keeps its old keys and adds the new ones.
#include "cli/launch_report.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace gridbcast::cli {
namespace {

job::BroadcastSummary summary() {
  job::BroadcastSummary s;
  s.algorithm = "multilane";
  s.ranks = 4;
  s.sites = 2;
  s.bytes = 1 << 20;
  s.iterations.push_back({0, s.bytes, "multilane", 0.8, 0});
  s.lower_bound_seconds = 0.4;     // simple: ratio 2
  s.max_flow_bound_seconds = 0.2;  // max-flow: ratio 4
  return s;
}

TEST(LaunchReport, TextGivesTheRatioToTheMaxFlowBoundAndNamesTheSimpleOne) {
  std::ostringstream out;
  print_broadcast_text(out, summary());
  EXPECT_NE(out.str().find("lower bound from the topology: max-flow 0.2000 s, ratio 4.00 (simple "
                           "bound 0.4000 s, ratio 2.00)"),
            std::string::npos)
      << out.str();
}

// The embedded default runs every rank on this host over loopback: the ratio
// then says that the bound assumes the topology's NICs, not shared cores.
TEST(LaunchReport, RanksOnLoopbackAreToldTheRatioMeasuresTheHost) {
  std::ostringstream plain;
  print_broadcast_text(plain, summary());
  EXPECT_EQ(plain.str().find("share this host"), std::string::npos) << plain.str();
  job::BroadcastSummary s = summary();
  s.loopback_nic_bps = 10e9;
  std::ostringstream out;
  print_broadcast_text(out, s);
  EXPECT_NE(out.str().find("note: all " + std::to_string(s.ranks) +
                           " ranks share this host over loopback; the bound assumes the "
                           "topology's NICs (10 Gbit/s each)"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("the ratio measures the host, not a network"), std::string::npos);
}

// A job healed around a WAN link that moved nothing (job/cut.hpp): the
// summary says which and why, in text and JSON; every node has its copy.
TEST(LaunchReport, AWanLinkRoutedAroundIsNamedWithItsCause) {
  job::BroadcastSummary s = summary();
  s.routed_around.push_back({"a", "c", "WAN link a–c moved nothing for 4.0 s with data waiting"});
  std::ostringstream text;
  print_broadcast_text(text, s);
  EXPECT_NE(text.str().find("  routed around: WAN link a–c moved nothing for 4.0 s with data "
                            "waiting\n"),
            std::string::npos)
      << text.str();
  std::ostringstream json;
  print_broadcast_json(json, s);
  const auto j = nlohmann::json::parse(json.str());
  ASSERT_EQ(j["routed_around"].size(), 1u);
  EXPECT_EQ(j["routed_around"][0]["sites"], (nlohmann::json{"a", "c"}));
  EXPECT_EQ(j["routed_around"][0]["cause"],
            "WAN link a–c moved nothing for 4.0 s with data waiting");
  EXPECT_EQ(j["complete"], true);
}

// A lost root healed from a survivor's copy: who sent after whom, and why.
TEST(LaunchReport, ASourceThatTookOverIsNamedWithWhyTheOneBeforeItWasLost) {
  job::BroadcastSummary s = summary();
  s.took_over.push_back({1, "a2", 0, "a1", "was killed by signal 9 (Killed)"});
  std::ostringstream text;
  print_broadcast_text(text, s);
  EXPECT_NE(text.str().find("  source: rank 1 (a2) sent its verified copy after rank 0 (a1) was "
                            "killed by signal 9 (Killed)\n"),
            std::string::npos)
      << text.str();
  std::ostringstream json;
  print_broadcast_json(json, s);
  const auto j = nlohmann::json::parse(json.str());
  ASSERT_EQ(j["took_over"].size(), 1u);
  EXPECT_EQ(j["took_over"][0]["rank"], 1);
  EXPECT_EQ(j["took_over"][0]["node"], "a2");
  EXPECT_EQ(j["took_over"][0]["lost_rank"], 0);
  EXPECT_EQ(j["took_over"][0]["lost_node"], "a1");
  EXPECT_EQ(j["took_over"][0]["after"], "was killed by signal 9 (Killed)");
}

TEST(LaunchReport, JsonKeepsTheSimpleBoundKeysAndAddsTheMaxFlowOnes) {
  std::ostringstream out;
  print_broadcast_json(out, summary());
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["lower_bound_seconds"], 0.4);
  EXPECT_EQ(j["ratio_to_lower_bound"], 2.0);
  EXPECT_EQ(j["max_flow_bound_seconds"], 0.2);
  EXPECT_EQ(j["ratio_to_max_flow_bound"], 4.0);
  // The documented order (docs/JSON.md): the simple bound, then the max-flow one.
  const std::string text = out.str();
  EXPECT_LT(text.find("\"lower_bound_seconds\""), text.find("\"max_flow_bound_seconds\""));
}

}  // namespace
}  // namespace gridbcast::cli
