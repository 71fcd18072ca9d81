// -v/-q: what the launcher and the ranks say on standard error, end to end
// (real rank processes on loopback).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/process.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LogLevel, VerboseSaysWhatTheLauncherDoesAndVeryVerboseWhatEachRankConnects) {
  Child v({kBin, "launch", "--size", "1MiB", "--iterations", "2", "-v"});
  ASSERT_EQ(v.wait(120s), 0) << v.err();
  EXPECT_EQ(count_of(v.err(), "gridbcast launch: starting rank "), 8u) << v.err();
  EXPECT_EQ(count_of(v.err(), " connected; sending the job"), 8u) << v.err();
  EXPECT_TRUE(std::regex_search(
      v.err(),
      std::regex(R"(iteration 2/2: 1048576 bytes from rank 0 by multilane in [0-9.e-]+ s)")))
      << v.err();
  EXPECT_EQ(v.err().find("connected lane"), std::string::npos) << "-vv detail under -v";

  // -vv reaches the ranks (GRIDBCAST_LOG_LEVEL): every rank of the embedded
  // default both connects and accepts lane connections.
  Child vv({kBin, "launch", "--size", "1MiB", "-vv"});
  ASSERT_EQ(vv.wait(120s), 0) << vv.err();
  for (int r = 0; r < 8; ++r) {
    const std::string rank = "gridbcast rank " + std::to_string(r) + ": ";
    EXPECT_TRUE(vv.err().find(rank + "connected lane") != std::string::npos ||
                vv.err().find(rank + "accepted") != std::string::npos)
        << "rank " << r << ":\n"
        << vv.err();
  }
  EXPECT_NE(vv.out().find("verified: all 8 ranks"), std::string::npos) << vv.out();
}

TEST(LogLevel, QuietLeavesStandardErrorEmptyOnSuccessButStillSaysWhatFailed) {
  Child q({kBin, "launch", "--size", "1MiB", "-q"});
  ASSERT_EQ(q.wait(120s), 0) << q.err();
  EXPECT_EQ(q.err(), "");
  EXPECT_NE(q.out().find("verified: all 8 ranks"), std::string::npos) << q.out();

  // A failure is an error: said under -q too.
  Child bad({kBin, "launch", "-q", "--size", "1MiB", "--", "/bin/false"});
  EXPECT_NE(bad.wait(120s), 0);
  EXPECT_NE(bad.err().find("rank"), std::string::npos) << bad.err();

  Child plan({kBin, "plan", "--check", "-q"});
  ASSERT_EQ(plan.wait(60s), 0) << plan.err();
  EXPECT_EQ(plan.err(), "");
  Child plan_n({kBin, "plan", "--check"});
  ASSERT_EQ(plan_n.wait(60s), 0) << plan_n.err();
  EXPECT_NE(plan_n.err().find("all properties hold"), std::string::npos) << plan_n.err();
}

TEST(LogLevel, VerboseAndQuietTogetherAreAUsageError) {
  Child c({kBin, "launch", "-v", "-q"});
  EXPECT_EQ(c.wait(30s), 2);
  EXPECT_NE(c.err().find("excludes"), std::string::npos) << c.err();
}

TEST(LogLevel, TimestampOutputStampsTheLaunchersOwnLines) {
  Child c({kBin, "launch", "--size", "64KiB", "-v", "--timestamp-output"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  EXPECT_TRUE(std::regex_search(
      c.err(),
      std::regex(
          R"((^|\n)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z gridbcast launch: starting rank 0)")))
      << c.err();
}

}  // namespace
}  // namespace gridbcast::testing
