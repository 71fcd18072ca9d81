// predict_heal: the arithmetic of a heal (cli/heal_scenario.hpp), checked
// against hand-worked cases.
#include "cli/heal_scenario.hpp"

#include <gtest/gtest.h>

namespace gridbcast::cli {
namespace {

constexpr std::uint64_t MiB = 1 << 20;

TEST(HealScenario, ALossIsNoticedAtOnceAndTheOthersResumeFromWholeWindows) {
  HealScenario s{512 * MiB, 30, 28, 0.3, false, 0};
  HealCosts c;
  c.digest_bytes_per_s = 1e9;
  const HealPrediction p = predict_heal(s, c);
  EXPECT_DOUBLE_EQ(p.happens_s, 9);
  EXPECT_DOUBLE_EQ(p.noticed_s, 9.3);
  // 153.6 MiB moved by then: every survivor holds the two whole windows.
  EXPECT_EQ(p.held_bytes, 128 * MiB);
  // The root digests what the survivors may hold; their records vouch for it.
  EXPECT_DOUBLE_EQ(p.check_s, static_cast<double>(128 * MiB) / 1e9);
  // A file at or below the on-demand threshold is digested whole.
  HealScenario small = s;
  small.bytes = 64 * MiB;
  EXPECT_DOUBLE_EQ(predict_heal(small, c).check_s, static_cast<double>(64 * MiB) / 1e9);
  EXPECT_DOUBLE_EQ(p.others_s, 9.3 + 0.5 + p.check_s + 28 * 0.75);
  EXPECT_EQ(p.straggler_s, 0);
}

TEST(HealScenario, AStragglerHoldsEverybodyBackUntilItIsSetAsideThenGoesAtItsRate) {
  HealScenario s{512 * MiB, 32, 30, 0.25, true, 1.25e6};
  const HealPrediction p = predict_heal(s);
  EXPECT_DOUBLE_EQ(p.noticed_s, 8 + 3.5);
  // 128 MiB by the slowdown, 3.5 s at 1.25 MB/s more: still two windows.
  EXPECT_EQ(p.held_bytes, 128 * MiB);
  EXPECT_DOUBLE_EQ(p.others_s, 11.5 + 0.5 + p.check_s + 30 * 0.75);
  EXPECT_DOUBLE_EQ(p.straggler_s,
                   p.others_s + 0.5 + p.check_s + static_cast<double>(384 * MiB) / 1.25e6);
}

TEST(HealScenario, EdgesStayFinite) {
  EXPECT_DOUBLE_EQ(predict_heal({0, 0, 0, 0.5, false, 0}).others_s, 0.3 + 0.5);
  const HealPrediction late = predict_heal({100 * MiB, 10, 10, 1.0, false, 0});
  EXPECT_EQ(late.held_bytes, 64 * MiB);  // one whole window of 100 MiB
  HealCosts no_windows;
  no_windows.window_bytes = 0;
  EXPECT_LE(predict_heal({MiB, 1, 1, 0.5, true, 0}, no_windows).held_bytes, MiB);
}

}  // namespace
}  // namespace gridbcast::cli
