// The rejection log: a counter, a bounded sample, a rate-limited log.
#include "lanes/rejections.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gridbcast::lanes {
namespace {

using namespace std::chrono_literals;

TEST(RejectionLog, CountsEverythingKeepsASampleAndPrintsTheFirstFewThenASummaryPerInterval) {
  std::vector<std::string> printed;
  RejectionLog::Clock::time_point now{};
  {
    RejectionLog log("rank 1", [&](const std::string& l) { printed.push_back(l); });
    // 100,000 rejections within one interval.
    for (int i = 0; i < 100000; ++i) log.reject("connection " + std::to_string(i), now);
    EXPECT_EQ(log.count(), 100000u);
    EXPECT_EQ(log.sample().size(), RejectionLog::kSample);
    EXPECT_EQ(log.sample().front(), "connection 0");
    // The first kLogFirst and the line that says summaries follow.
    EXPECT_EQ(printed.size(), RejectionLog::kLogFirst + 1);
    // One more after the interval: a summary of all since, naming the latest.
    now += RejectionLog::kInterval;
    log.reject("connection 100000", now);
    ASSERT_EQ(printed.size(), RejectionLog::kLogFirst + 2);
    EXPECT_NE(printed.back().find(std::to_string(100001 - RejectionLog::kLogFirst) + " more"),
              std::string::npos)
        << printed.back();
    EXPECT_NE(printed.back().find("connection 100000"), std::string::npos) << printed.back();
    log.reject("connection 100001", now + 1s);
    log.note("out of file descriptors", now + 2s);  // logged, not counted
    EXPECT_EQ(log.count(), 100002u);
    EXPECT_EQ(printed.size(), RejectionLog::kLogFirst + 2);
  }
  // What was left is summarised when the log goes.
  ASSERT_EQ(printed.size(), RejectionLog::kLogFirst + 3);
  EXPECT_NE(printed.back().find("2 more"), std::string::npos) << printed.back();
}

}  // namespace
}  // namespace gridbcast::lanes
