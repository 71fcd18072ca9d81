// job::Healer: after each run of a broadcast, which run comes next and what
// the job then says, fed the results the launcher would give (no processes).
// The runs themselves are in tests/cli (LaunchFile.*, Launch.*Heal*) and on
// the emulated grid (TestbedFaults.*).
#include "job/heal.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/grids.hpp"
#include "topology/loader.hpp"

namespace gridbcast::job {
namespace {

// Two sites of four: s0n0..s0n3 (ranks 0-3), s1n0..s1n3 (ranks 4-7).
struct Heal {
  explicit Heal(HealSettings s = {}, topology::Grid g = testing::make_grid({4, 4}), int root = 0)
      : healer(std::move(g), root, s, [this](const std::string& l) { said.push_back(l); }) {}
  std::vector<std::string> said;
  Healer healer;
  bool said_with(const std::string& part) const {
    for (const auto& l : said)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

// A run that completed over `ranks` ranks, root `root`, copies at every
// other rank (numbered as in that run), the file's digest `sha`.
LaunchResult completed(int ranks, int root, const std::string& sha = "d1") {
  LaunchResult r;
  BroadcastSummary b;
  b.ranks = ranks;
  b.root = root;
  b.sha256 = sha;
  b.verified = true;
  b.iterations.push_back({root, 100, "multilane", 1.5, 0});
  for (int i = 0; i < ranks; ++i)
    if (i != root) b.copies.push_back({i, "n" + std::to_string(i), "/out/" + std::to_string(i)});
  r.broadcast = b;
  return r;
}

LaunchResult lost(std::vector<LaunchResult::LostRank> ranks) {
  LaunchResult r;
  r.status = 1;
  r.failure = ranks.front().cause;
  r.lost = std::move(ranks);
  r.lost_first = true;
  return r;
}

TEST(Healer, ACompleteRunEndsTheJobAsItCame) {
  Heal h;
  EXPECT_FALSE(h.healer.run_ended(completed(8, 0)));
  EXPECT_EQ(h.healer.exit_status(), 0);
  EXPECT_EQ(h.healer.outcome().broadcast->copies.size(), 7u);
  EXPECT_TRUE(h.said.empty());
}

TEST(Healer, ALostRankIsHealedAroundAndTheOutcomeSpeaksOfFirstRunRanks) {
  HealSettings s;
  s.files = true;
  s.one_file = true;
  Heal h(s);
  auto next = h.healer.run_ended(lost({{5, "rank 5 (s1n1) was killed by signal 9 (Killed)"}}));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(next->grid.size(), 7);
  EXPECT_EQ(next->root, 0);
  EXPECT_TRUE(next->resume);
  EXPECT_FALSE(next->source_is_copy);
  EXPECT_TRUE(next->watch_stragglers);
  EXPECT_FALSE(next->topology_yaml);
  EXPECT_TRUE(
      h.said_with("lost rank 5 (s1n1): was killed by signal 9 (Killed); healing: the 7 "
                  "others go on from what they hold"));
  // A second loss, numbered as that run numbered it: rank 5 there is s1n2 (6).
  next = h.healer.run_ended(lost({{5, "rank 5 (s1n2) sent nothing for 30 s"}}));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 7}));
  EXPECT_FALSE(h.healer.run_ended(completed(6, 0)));
  EXPECT_EQ(h.healer.exit_status(), 3);
  const BroadcastSummary& b = *h.healer.outcome().broadcast;
  ASSERT_EQ(b.missing.size(), 2u);
  EXPECT_EQ(b.missing[0].rank, 5);
  EXPECT_EQ(b.missing[0].cause, "was killed by signal 9 (Killed)");
  EXPECT_EQ(b.missing[1].rank, 6);
  EXPECT_EQ(b.missing[1].node, "s1n2");
  std::vector<int> copies;
  for (const auto& c : b.copies) copies.push_back(c.rank);
  EXPECT_EQ(copies, (std::vector<int>{1, 2, 3, 4, 7}));
}

TEST(Healer, BelowWhatRequireAsksTheJobFailsAndSaysWhy) {
  HealSettings s;
  s.required = 8;
  Heal h(s);
  EXPECT_FALSE(h.healer.run_ended(lost({{3, "rank 3 (s0n3) was killed by signal 9 (Killed)"}})));
  EXPECT_EQ(h.healer.exit_status(), 1);
  EXPECT_TRUE(h.said_with("7 nodes remain, --require asks for 8: not healing"));
  ASSERT_EQ(h.healer.missing().size(), 1u);
  EXPECT_EQ(h.healer.missing()[0].rank, 3);
}

TEST(Healer, AFailureThatIsNotALossIsNotHealed) {
  Heal h;
  LaunchResult r = lost({{3, "rank 3 (s0n3) failed: disk full"}});
  r.lost_first = false;
  EXPECT_FALSE(h.healer.run_ended(r));
  EXPECT_EQ(h.healer.exit_status(), 1);
  HealSettings off;
  off.heal = false;  // a program, or random roots
  Heal p(off);
  EXPECT_FALSE(p.healer.run_ended(lost({{3, "rank 3 (s0n3) was killed by signal 9 (Killed)"}})));
  EXPECT_TRUE(p.said.empty());
}

TEST(Healer, ALostRootWithoutAWholeCopyIsNotHealedAndSaysWhy) {
  for (const auto& [files, one, why] :
       {std::tuple{false, false, "a --size broadcast's bytes were in its memory only"},
        std::tuple{true, false, "a copy of a directory or of several files is not sent from"},
        std::tuple{true, true, "no survivor holds a whole verified copy yet"}}) {
    HealSettings s;
    s.files = files;
    s.one_file = one;
    Heal h(s);
    LaunchResult r = lost({{0, "rank 0 (s0n0) was killed by signal 9 (Killed)"}});
    if (!one) r.held.push_back({2, 0, "d1"});  // not a source for these
    EXPECT_FALSE(h.healer.run_ended(r));
    EXPECT_EQ(h.healer.exit_status(), 1);
    EXPECT_TRUE(
        h.said_with(std::string("the root (rank 0) was lost: nothing to heal from (") + why + ")"))
        << why;
  }
}

TEST(Healer, ARootSetAsideAsAStragglerIsNotReplacedByACopy) {
  HealSettings s;
  s.files = true;
  s.one_file = true;
  Heal h(s);
  LaunchResult r = lost({{0, "rank 0 (s0n0) is a straggler: its links out carried 1 Mbit/s"}});
  r.lost[0].straggler = true;
  r.held = {{2, 0, "d1"}};
  EXPECT_FALSE(h.healer.run_ended(r));
  EXPECT_EQ(h.healer.exit_status(), 1);
  EXPECT_TRUE(
      h.said_with("the root (rank 0) was lost: nothing to heal from (it was set aside as "
                  "a straggler, and it holds the source)"));
}

TEST(Healer, ALostRootIsHealedFromAWholeCopyInItsSiteAndItsDigestIsChecked) {
  HealSettings s;
  s.files = true;
  s.one_file = true;
  for (const bool same_digest : {true, false}) {
    Heal h(s);
    LaunchResult r = lost({{0, "rank 0 (s0n0) was killed by signal 9 (Killed)"}});
    r.lost.push_back({3, "rank 3 (s0n3) was killed by signal 9 (Killed)"});
    r.held = {{3, 0, "d1"}, {5, 0, "d1"}, {2, 0, "d1"}, {6, 0, "d1"}};
    auto next = h.healer.run_ended(r);
    ASSERT_TRUE(next);
    EXPECT_EQ(next->labels, (std::vector<std::int32_t>{1, 2, 4, 5, 6, 7}));
    EXPECT_EQ(next->root, 1) << "rank 2, the root's site's and not lost, as the run numbers it";
    EXPECT_TRUE(next->source_is_copy);
    EXPECT_TRUE(
        h.said_with("rank 2 (s0n2) holds a verified copy: it is the source now, after "
                    "rank 0 (s0n0) was killed by signal 9 (Killed)"));
    EXPECT_FALSE(h.healer.run_ended(completed(6, 1, same_digest ? "d1" : "d2")));
    if (same_digest) {
      EXPECT_EQ(h.healer.exit_status(), 3);
      const BroadcastSummary& b = *h.healer.outcome().broadcast;
      EXPECT_EQ(b.root, 2);
      ASSERT_EQ(b.took_over.size(), 1u);
      EXPECT_EQ(b.took_over[0].rank, 2);
      EXPECT_EQ(b.took_over[0].lost_rank, 0);
      EXPECT_EQ(b.took_over[0].after, "was killed by signal 9 (Killed)");
      ASSERT_EQ(b.missing.size(), 2u);
      EXPECT_EQ(b.missing[0].rank, 0);
      EXPECT_EQ(b.missing[1].rank, 3);
    } else {
      EXPECT_EQ(h.healer.exit_status(), 1);
      EXPECT_NE(h.healer.outcome().failure.find("rank 2 sent a copy whose root digest d2 differs "
                                                "from the d1 it had verified its chunks against"),
                std::string::npos)
          << h.healer.outcome().failure;
      EXPECT_FALSE(h.healer.outcome().broadcast);
    }
  }
}

TEST(Healer, AStragglerGetsItsCopyAfterTheOthersAndALostSourceIsReplacedByACopy) {
  HealSettings s;
  s.files = true;
  s.one_file = true;
  Heal h(s);
  LaunchResult r = lost({{6, "rank 6 (s1n2) is a straggler: its links in carried 9 Mbit/s"}});
  r.lost[0].straggler = true;
  r.lost[0].rate_bytes_per_s = 1.2e6;
  auto next = h.healer.run_ended(r);
  ASSERT_TRUE(next);
  EXPECT_TRUE(h.said_with("set aside rank 6 (s1n2): is a straggler"));
  EXPECT_EQ(next->labels.size(), 7u);
  // The others are done: the straggler alone from the root, nobody watched.
  next = h.healer.run_ended(completed(7, 0));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{0, 6}));
  EXPECT_EQ(next->root, 0);
  EXPECT_FALSE(next->watch_stragglers);
  EXPECT_TRUE(h.said_with("the others are done; now the straggler rank 6 (s1n2) from the root"));
  // Its source lost there: the first copy (rank 1) sends instead.
  next = h.healer.run_ended(lost({{0, "rank 0 (s0n0) was killed by signal 9 (Killed)"}}));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{1, 6}));
  EXPECT_EQ(next->root, 0);
  EXPECT_TRUE(next->source_is_copy);
  EXPECT_FALSE(next->watch_stragglers);
  LaunchResult after = completed(2, 0);
  after.broadcast->iterations[0].seconds = 9.5;
  EXPECT_FALSE(h.healer.run_ended(after));
  EXPECT_EQ(h.healer.exit_status(), 0) << "every node has the file";
  const BroadcastSummary& b = *h.healer.outcome().broadcast;
  EXPECT_EQ(b.ranks, 8);
  ASSERT_EQ(b.stragglers.size(), 1u);
  EXPECT_EQ(b.stragglers[0].rank, 6);
  EXPECT_EQ(b.stragglers[0].seconds, 9.5);
  ASSERT_EQ(b.took_over.size(), 1u);
  EXPECT_EQ(b.took_over[0].rank, 1);
  std::vector<int> copies;
  for (const auto& c : b.copies) copies.push_back(c.rank);
  EXPECT_EQ(copies, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(b.missing.empty());
}

TEST(Healer, AStragglersCopyOfAnotherFileIsMissingNotCounted) {
  Heal h;
  LaunchResult r = lost({{6, "rank 6 (s1n2) is a straggler: slow"}});
  r.lost[0].straggler = true;
  ASSERT_TRUE(h.healer.run_ended(r));
  ASSERT_TRUE(h.healer.run_ended(completed(7, 0, "d1")));
  EXPECT_FALSE(h.healer.run_ended(completed(2, 0, "d9")));
  EXPECT_EQ(h.healer.exit_status(), 3);
  ASSERT_EQ(h.healer.missing().size(), 1u);
  EXPECT_NE(h.healer.missing()[0].cause.find("its copy's root digest d9 is not the others' d1"),
            std::string::npos)
      << h.healer.missing()[0].cause;
}

TEST(Healer, ACutWanLinkWithAnotherPathIsRoutedAroundWithTheSameRanks) {
  topology::Grid g = testing::make_grid({2, 2, 2});
  topology::WanLink spare = g.wan.front();
  spare.site_a = 0;
  spare.site_b = 2;
  g.wan.push_back(spare);  // a triangle
  Heal h({}, g);
  LaunchResult r;
  r.status = 1;
  r.failure = "WAN link s0–s1 moved nothing";
  r.lost_first = true;
  r.routed_around.push_back({"s0", "s1", "WAN link s0–s1 moved nothing for 4.0 s"});
  auto next = h.healer.run_ended(r);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(next->topology_yaml);
  const topology::Grid healed = topology::load_grid_string(*next->topology_yaml, "healed");
  EXPECT_EQ(healed.wan.size(), 2u);
  for (const auto& w : healed.wan) EXPECT_FALSE(w.site_a == 0 && w.site_b == 1);
  EXPECT_TRUE(
      h.said_with("WAN link s0–s1 moved nothing for 4.0 s; healing: the others go on "
                  "around it"));
  EXPECT_FALSE(h.healer.run_ended(completed(6, 0)));
  EXPECT_EQ(h.healer.exit_status(), 0);
  ASSERT_EQ(h.healer.outcome().broadcast->routed_around.size(), 1u);
}

TEST(Healer, ASiteLostIsSaidInOneLineOfAFewRanksThenACount) {
  Heal h(HealSettings{}, testing::make_grid({2, 8}));
  std::vector<LaunchResult::LostRank> gone;
  for (int r = 2; r < 10; ++r)
    gone.push_back({r, "rank " + std::to_string(r) + " (s1n" + std::to_string(r - 2) +
                           ") is cut off with site s1"});
  const auto next = h.healer.run_ended(lost(gone));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->labels, (std::vector<std::int32_t>{0, 1}));
  ASSERT_EQ(h.said.size(), 1u);
  EXPECT_NE(h.said[0].find("rank 5 (s1n3): is cut off with site s1; and 4 more (the summary "
                           "lists each); healing: the 2 others go on"),
            std::string::npos)
      << h.said[0];
  EXPECT_EQ(h.healer.missing().size(), 8u);
  // A lone survivor has nobody to send to: the job fails.
  Heal one(HealSettings{}, testing::make_grid({1, 8}));
  gone.clear();
  for (int r = 1; r < 9; ++r) gone.push_back({r, "is cut off with site s1"});
  EXPECT_FALSE(one.healer.run_ended(lost(gone)));
  EXPECT_EQ(one.healer.exit_status(), 1);
}

}  // namespace
}  // namespace gridbcast::job
