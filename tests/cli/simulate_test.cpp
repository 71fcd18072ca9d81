// `gridbcast simulate` as a user runs it: predictions for a site-config, the
// congestion-control model, and a clear error for what it does not know.
#include <gtest/gtest.h>

#include <regex>

#include "support/process.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

double predicted(const std::string& json) {
  std::smatch m;
  const std::regex re("\"predicted_seconds\": ([0-9.e+-]+)");
  if (!std::regex_search(json, m, re)) return -1;
  return std::stod(m[1]);
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
