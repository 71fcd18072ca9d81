// testbed/traffic.cpp's result line (no network needed): written by the one
// JSON writer's rules, read back exactly, and anything else refused.
#include "testbed/traffic.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace gridbcast::testbed {
namespace {

TEST(TrafficResult, TheJsonLineReadsBackAsTheSameResult) {
  TrafficResult r;
  r.streams = 2;
  r.bytes = 3'000'000'001;
  r.seconds = 1.25;
  r.stream_bytes = {1'000'000'000, 2'000'000'001};
  const std::string line = r.json();
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["bits_per_second"], 3'000'000'001.0 * 8 / 1.25) << line;
  const TrafficResult back = TrafficResult::parse_json(line);
  EXPECT_EQ(back.streams, 2);
  EXPECT_EQ(back.bytes, r.bytes);
  EXPECT_EQ(back.seconds, 1.25);
  EXPECT_EQ(back.stream_bytes, r.stream_bytes);
}

TEST(TrafficResult, WhatIsNotAResultIsRefusedNamingTheLine) {
  for (const char* bad : {"", "{\"streams\": 1}", "not json",
                          "{\"streams\": \"x\", \"bytes\": 1, "
                          "\"seconds\": 1, \"stream_bytes\": []}"}) {
    try {
      (void)TrafficResult::parse_json(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("not a traffic result"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gridbcast::testbed
