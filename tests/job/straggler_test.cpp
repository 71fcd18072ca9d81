// StragglerWatch: which rank holds the broadcast back, from what the ranks'
// kernels say of their outgoing links (job/straggler.hpp). The reports here
// are what the launcher would get each second from ranks whose links run at
// the given rates with or without data waiting.
#include "job/straggler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "support/grids.hpp"

namespace gridbcast::job {
namespace {

using Clock = StragglerWatch::Clock;
using std::chrono::milliseconds;
constexpr double kLane = 10e9 / 8;  // make_grid's NICs, one lane each: bytes/s
constexpr std::uint64_t kBacklog = 4u << 20;

// A link as the test drives it: from, to, lanes, its rate (bytes/s),
// whether data waits on it, and whether its receiver reads it (a peer that
// does not holds the link back by its receive window).
struct Flow {
  int from, to, lane_from, lane_to;
  double rate;
  bool backlog;
  bool read = true;
};

struct Feed {
  explicit Feed(const topology::Grid& g, StragglerRule rule = {}) : grid(g), watch(grid, rule) {}
  topology::Grid grid;
  StragglerWatch watch;
  Clock::time_point t = Clock::now();
  std::map<std::tuple<int, int, int, int>, std::pair<double, std::uint64_t>>
      acked;  // bytes, rwnd us
  std::vector<Straggler> found;
  std::vector<bool> done;
  // One report a second from every sender for `seconds`.
  void run(int seconds, const std::vector<Flow>& flows) {
    for (int s = 0; s < seconds; ++s) {
      t += milliseconds(1000);
      std::map<int, std::vector<control::LinkReport>> by_sender;
      for (const auto& f : flows) {
        auto& [a, held] = acked[{f.from, f.to, f.lane_from, f.lane_to}];
        a += f.rate;
        if (!f.read) held += 900'000;
        by_sender[f.from].push_back(
            {f.to, static_cast<std::uint8_t>(f.lane_from), static_cast<std::uint8_t>(f.lane_to), 1,
             static_cast<std::uint64_t>(a), f.backlog ? kBacklog : 0, held});
      }
      for (const auto& [sender, links] : by_sender) {
        ASSERT_EQ(watch.check(sender, links), "");
        watch.report(sender, t, links);
      }
      done.resize(static_cast<size_t>(grid.size()), false);
      for (const auto& f : watch.observe(t, done)) found.push_back(f);
    }
  }
};

// Two trees over 8 nodes of one site, as multilane builds them: tree 0 on
// lane 0 (0→1, 0→2, 1→3, 1→4, 2→5, 2→6, 3→7), tree 1 on lane 1 through the
// other nodes, every node fed by one parent per tree.
std::vector<Flow> two_trees(double rate, bool backlog) {
  std::vector<Flow> f;
  for (auto [a, b] : {std::pair{0, 1}, {0, 2}, {1, 3}, {1, 4}, {2, 5}, {2, 6}, {3, 7}})
    f.push_back({a, b, 0, 0, rate, backlog});
  for (auto [a, b] : {std::pair{0, 7}, {0, 6}, {7, 5}, {7, 4}, {6, 3}, {6, 2}, {5, 1}})
    f.push_back({a, b, 1, 1, rate, backlog});
  return f;
}

TEST(Stragglers, AHealthyPipelineNamesNobody) {
  // Every link busy at 45 % of its lane (the root's two links on each lane
  // share it), data waiting on all of them, for a minute.
  Feed f(testing::make_grid({8}));
  f.run(60, two_trees(0.45 * kLane, true));
  EXPECT_TRUE(f.found.empty());
}

TEST(Stragglers, LinksSlowWithNothingWaitingNameNobody) {
  // Everybody at 5 % of the declared rates (busy cores, a slow disk at the
  // root): the senders have nothing waiting, so no link holds anyone back.
  Feed f(testing::make_grid({8}));
  f.run(30, two_trees(0.05 * kLane, false));
  EXPECT_TRUE(f.found.empty());
}

TEST(Stragglers, ASlowNodeIsNamedAfterItsSustainedTimeAndNotTheNodesBelowIt) {
  // Node 3 crawls both ways (its NICs shaped to 1 %): its two parents' links
  // into it (1→3 lane 0, 6→3 lane 1) have data waiting and run at 1 %. Its
  // child 7 gets tree 0's half from it (backlogged, slow) but tree 1's from
  // the root, whose link waits for nothing. The other links are idle: the
  // windows wait for node 3.
  Feed f(testing::make_grid({8}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows)
    if (l.to == 3 || l.from == 3) l = {l.from, l.to, l.lane_from, l.lane_to, 0.01 * kLane, true};
  f.run(3, flows);  // behind from the second report on (the first gives no rate): 1 s so far
  EXPECT_TRUE(f.found.empty());
  f.run(2, flows);
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 3);
  EXPECT_NEAR(f.found[0].rate_bytes_per_s, 0.02 * kLane, 1e3);
  // Each parent's only busy link on its lane, each into a lane of its own.
  EXPECT_NEAR(f.found[0].expected_bytes_per_s, 2 * kLane, 1e3);
  EXPECT_GE(f.found[0].seconds, 3.0);
  // Named once per broadcast, however long it stays slow.
  f.run(10, flows);
  EXPECT_EQ(f.found.size(), 1u);
}

TEST(Stragglers, ANodeWaitingOnASlowParentWhileItsOtherParentWaitsOnItIsNotNamed) {
  // Node 3 slow as above; its child 7 is a window behind: tree 1's parent
  // (the root) has the next window's data for it, and node 7 does not read
  // it yet, so that link is backlogged and stands still, held by node 7's
  // receive window. Node 7's network is not what is slow.
  Feed f(testing::make_grid({8}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows) {
    if (l.to == 3 || l.from == 3) l = {l.from, l.to, l.lane_from, l.lane_to, 0.01 * kLane, true};
    if (l.from == 0 && l.to == 7) l = {0, 7, 1, 1, 0, true, false};
  }
  f.run(8, flows);
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 3);
}

TEST(Stragglers, ANodeThatSendsSlowlyIsNamedNotTheChildrenItFeedsAlone) {
  // Node 3 reads only as fast as it can forward, and forwards at 1 %: its
  // parents' links into it are held by its window, its links out are slow.
  // Nodes 8 and 9 (a third site-local tree, fed only by node 3) each have
  // that one slow link in; node 7 gets its other half from the root, whose
  // link node 7 holds while it waits for node 3.
  Feed f(testing::make_grid({10}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows) {
    if (l.to == 3) l = {l.from, 3, l.lane_from, l.lane_to, 0, true, false};
    if (l.from == 3) l = {3, l.to, l.lane_from, l.lane_to, 0.01 * kLane, true};
    if (l.from == 0 && l.to == 7) l = {0, 7, 1, 1, 0, true, false};
  }
  flows.push_back({3, 8, 1, 1, 0.01 * kLane, true});
  flows.push_back({3, 9, 1, 0, 0.01 * kLane, true});
  f.run(8, flows);
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 3);
  EXPECT_FALSE(f.found[0].receiving);
  EXPECT_NEAR(f.found[0].rate_bytes_per_s, 0.03 * kLane, 1e3);
}

TEST(Stragglers, AParentWhoseOneBusyLinkGoesToASlowNodeIsNotNamed) {
  // Seen on the emulated grid with a file: node 6 shaped to 1 % both ways,
  // a window behind. Its parent 2 has data for it on tree 0 (backlogged,
  // slow) and nothing waiting for its other child; node 6 reads only that
  // link (tree 1's parent, the root, is held by its window) and has nothing
  // to forward yet. Node 2's one slow link out is node 6's one slow link in:
  // a tie, which goes to the receiver, not shown slow yet (one of its links
  // in is held), so node 2 is only on notice.
  Feed f(testing::make_grid({8}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows) {
    if (l.from == 2 && l.to == 6) l = {2, 6, 0, 0, 0.01 * kLane, true};
    if (l.from == 0 && l.to == 6) l = {0, 6, 1, 1, 0, true, false};
  }
  f.run(4, flows);
  EXPECT_TRUE(f.found.empty()) << "named rank " << f.found.front().rank;
  // Node 6 then reads both its links in, and both crawl: it is named, and
  // node 2, its victim, never is.
  for (auto& l : flows)
    if (l.to == 6) l = {l.from, 6, l.lane_from, l.lane_to, 0.01 * kLane, true};
  f.run(12, flows);
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 6);
}

TEST(Stragglers, ASlowNodeWhoseOneChildHoldsItsOtherParentIsNamedAfterTwiceTheTime) {
  // The same picture the other way round: node 3 forwards at 1 % to its one
  // child 7, reading its own links in only as fast (held by its window);
  // node 7 holds the root's link while it waits for node 3. Nothing tells
  // the two ends apart, and nobody else will show slow: node 3 is named,
  // after twice the rule's time.
  Feed f(testing::make_grid({8}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows) {
    if (l.to == 3) l = {l.from, 3, l.lane_from, l.lane_to, 0, true, false};
    if (l.from == 3 && l.to == 7) l = {3, 7, 0, 0, 0.01 * kLane, true};
    if (l.from == 0 && l.to == 7) l = {0, 7, 1, 1, 0, true, false};
  }
  f.run(5, flows);  // behind from the second report on: 4 s so far
  EXPECT_TRUE(f.found.empty()) << "named rank " << f.found.front().rank;
  f.run(3, flows);
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 3);
  EXPECT_FALSE(f.found[0].receiving);
  EXPECT_GE(f.found[0].seconds, 6.0);
}

TEST(Stragglers, TheOnlyChildOfASlowNodeIsNotNamed) {
  // A chain 0→1→2→3: node 1 slow both ways. Node 2's one link comes from
  // node 1, backlogged and slow: node 1 explains it.
  Feed f(testing::make_grid({4}));
  f.run(6, {{0, 1, 0, 0, 0.01 * kLane, true},
            {1, 2, 0, 0, 0.01 * kLane, true},
            {2, 3, 0, 0, 0.01 * kLane, false}});
  ASSERT_EQ(f.found.size(), 1u);
  EXPECT_EQ(f.found[0].rank, 1);
}

TEST(Stragglers, ANodeThatRecoversWithinTheSustainedTimeIsNotNamed) {
  Feed f(testing::make_grid({4}));
  const std::vector<Flow> slow{{0, 1, 0, 0, 0.01 * kLane, true}, {0, 2, 1, 1, 0.01 * kLane, true}};
  const std::vector<Flow> fast{{0, 1, 0, 0, 0.9 * kLane, true}, {0, 2, 1, 1, 0.9 * kLane, true}};
  for (int round = 0; round < 5; ++round) {
    f.run(2, slow);  // two reports, each a slow second: 2 s behind
    f.run(1, fast);
  }
  EXPECT_TRUE(f.found.empty());
}

// A sender silent for 10 s (its heartbeats stalled) whose next report
// averages a slow rate over the whole gap is behind for at most `fresh` of
// it, not named at once on that one report.
TEST(Stragglers, OneReportAfterALongSilenceDoesNotNameARankAtOnce) {
  Feed f(testing::make_grid({4}));
  const std::vector<Flow> slow{{0, 1, 0, 0, 0.01 * kLane, true}, {0, 2, 1, 1, 0.01 * kLane, true}};
  f.run(1, slow);
  f.t += milliseconds(9000);
  f.run(1, slow);
  EXPECT_TRUE(f.found.empty());
  f.run(1, slow);  // then 3.5 s behind: named
  EXPECT_EQ(f.found.size(), 1u);
}

// A WAN link cut mid-broadcast: data waits on the gateway's links across
// it and nothing moves. That is a stall for the progress deadlines to name,
// not a straggler to set aside.
TEST(Stragglers, LinksThatMoveNothingAreStalledNotSlow) {
  Feed f(testing::make_grid({4}));
  f.run(10, {{0, 1, 0, 0, 0, true}, {0, 2, 1, 1, 0, true}});
  EXPECT_TRUE(f.found.empty());
}

TEST(Stragglers, ALinkThatMovesNothingWithDataWaitingIsStalledForAsLongAsItStays) {
  // Node 3's NICs die: its parents' links into it (1→3, 6→3) keep data
  // waiting and have nothing acknowledged. A link whose receiver does not
  // read (held by its window) is not stalled; one that moves is moving.
  Feed f(testing::make_grid({8}));
  std::vector<Flow> flows = two_trees(0, false);
  for (auto& l : flows) {
    if (l.to == 3) l = {l.from, l.to, l.lane_from, l.lane_to, 0, true};
    if (l.from == 0 && l.to == 1) l = {0, 1, 0, 0, 0.4 * kLane, true};
    if (l.from == 0 && l.to == 7) l = {0, 7, 1, 1, 0, true, /*read=*/false};
  }
  f.run(2, flows);  // the first report gives no interval: stalled for 1 s so far
  const auto early = f.watch.links(f.t, milliseconds(1500));
  EXPECT_TRUE(
      std::none_of(early.begin(), early.end(), [](const LinkState& l) { return l.stalled; }));
  f.run(3, flows);
  std::map<std::pair<int, int>, LinkState> by_pair;
  for (const auto& l : f.watch.links(f.t, milliseconds(1500))) by_pair[{l.from, l.to}] = l;
  ASSERT_EQ(by_pair.size(), 3u);  // 1→3 and 6→3 stalled, 0→1 moving; 0→7 held, the rest idle
  for (auto pair : {std::pair{1, 3}, {6, 3}}) {
    ASSERT_EQ(by_pair.count(pair), 1u);
    EXPECT_TRUE(by_pair[pair].stalled);
    EXPECT_NEAR(by_pair[pair].seconds, 4.0, 1e-6);
    EXPECT_EQ(by_pair[pair].waiting, kBacklog);
  }
  EXPECT_FALSE((by_pair[std::pair{0, 1}].stalled));
  // It moves again: no longer stalled, and a new stall counts from anew.
  for (auto& l : flows)
    if (l.to == 3) l.rate = 0.2 * kLane;
  f.run(1, flows);
  for (const auto& l : f.watch.links(f.t, milliseconds(0))) EXPECT_FALSE(l.stalled);
  for (auto& l : flows)
    if (l.to == 3) l.rate = 0;
  f.run(2, flows);
  int again = 0;
  for (const auto& l : f.watch.links(f.t, milliseconds(1500))) {
    if (l.to == 3 && l.stalled) {
      ++again;
      EXPECT_NEAR(l.seconds, 2.0, 1e-6);
    }
  }
  EXPECT_EQ(again, 2);  // 1→3 and 6→3
}

TEST(Stragglers, ALinkWhoseBytesInFlightGoUnacknowledgedIsStalled) {
  // A cut near the end of a broadcast: everything was sent, nothing waits
  // unsent, but what is in flight is never acknowledged.
  Feed f(testing::make_grid({4}));
  for (int s = 0; s < 4; ++s) {
    f.t += milliseconds(1000);
    const std::vector<control::LinkReport> links = {{1, 0, 0, 1, 7777, 0, 0, 300000, false}};
    f.watch.report(0, f.t, links);
  }
  const auto links = f.watch.links(f.t, milliseconds(1500));
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(links[0].stalled);
  EXPECT_NEAR(links[0].seconds, 3.0, 1e-6);
  EXPECT_EQ(links[0].waiting, 300000u);
}

TEST(Stragglers, ALinkWhoseConnectionsGoUnansweredIsStalledAndSaysSo) {
  // Rank 0 connects to rank 2 and nothing answers (a cut before the
  // connections were up): reported as connecting, with no figures.
  Feed f(testing::make_grid({4}));
  auto connecting = [&](int seconds) {
    for (int s = 0; s < seconds; ++s) {
      f.t += milliseconds(1000);
      const std::vector<control::LinkReport> links = {
          {1, 0, 0, 1, 5000u * static_cast<unsigned>(1 + s), 0, 0, 0, false},
          {2, 1, 1, 2, 0, 0, 0, 0, true}};
      ASSERT_EQ(f.watch.check(0, links), "");
      f.watch.report(0, f.t, links);
    }
  };
  connecting(3);
  std::map<int, LinkState> to;
  for (const auto& l : f.watch.links(f.t, milliseconds(1500))) to[l.to] = l;
  ASSERT_EQ(to.size(), 2u);
  EXPECT_TRUE(to[2].stalled);
  EXPECT_TRUE(to[2].connecting);
  EXPECT_NEAR(to[2].seconds, 2.0, 1e-6);
  EXPECT_FALSE(to[1].stalled);  // moving
  EXPECT_FALSE(to[1].connecting);
  EXPECT_TRUE(f.watch.observe(f.t, std::vector<bool>(4, false)).empty());  // not a straggler
}

TEST(Stragglers, ADoneRankIsNeverBehind) {
  Feed f(testing::make_grid({4}));
  f.done = {false, true, false, false};
  f.run(8, {{0, 1, 0, 0, 0.01 * kLane, true}});
  EXPECT_TRUE(f.found.empty());
}

TEST(Stragglers, WanLinksAreMeasuredAgainstTheWan) {
  // Two sites of 10 Gbit/s NICs joined by a 1 Gbit/s WAN: the gateway's
  // three streams (one sample per lane pair) together carry what the WAN
  // does, far below its NICs, and that is not straggling.
  const topology::Grid g = testing::make_grid({4, 4});
  const double wan = 1e9 / 8;
  {
    Feed f(g);
    f.run(10, {{0, 4, 0, 0, 0.5 * wan, true}, {0, 4, 1, 1, 0.45 * wan, true}});
    EXPECT_TRUE(f.found.empty());
  }
  {
    Feed f(g);  // the same links at a tenth of the WAN: the gateway crawls
    f.run(10, {{0, 4, 0, 0, 0.05 * wan, true}, {0, 4, 1, 1, 0.05 * wan, true}});
    ASSERT_EQ(f.found.size(), 1u);
    EXPECT_EQ(f.found[0].rank, 4);
    EXPECT_NEAR(f.found[0].expected_bytes_per_s, wan, 1e3);
  }
}

TEST(Stragglers, SendersHeldToTheirMaxRateAreMeasuredAgainstIt) {
  // Nodes of 10 Gbit/s NICs that may send 1 Gbit/s in all (defaults.max_rate):
  // the root's two paced links carry half of that each, data waiting on both.
  topology::Grid g = testing::make_grid({3});
  const double limit = 1e9 / 8;
  const std::vector<Flow> paced{{0, 1, 0, 0, 0.45 * limit, true}, {0, 2, 1, 1, 0.45 * limit, true}};
  {
    Feed unlimited(g);  // against the NICs alone, those links crawl
    unlimited.run(8, paced);
    EXPECT_FALSE(unlimited.found.empty());
  }
  g.max_rate_bps = 1e9;
  Feed f(g);
  f.run(30, paced);
  EXPECT_TRUE(f.found.empty()) << "named rank " << f.found[0].rank;
}

TEST(Stragglers, TheLinksOfARankAreDescribedInABoundedLine) {
  const topology::Grid g = testing::make_grid({300});
  StragglerWatch w(g);
  std::vector<control::LinkReport> many;
  for (int peer = 1; peer < 300; ++peer) many.push_back({peer, 0, 0, 1, 1, 0, 0});
  const auto t = Clock::now();
  w.report(0, t, many);
  const std::string text = w.describe_links(0, t);
  EXPECT_NE(text.find("to rank 8 lane 0→0"), std::string::npos) << text;
  EXPECT_EQ(text.find("to rank 9 lane"), std::string::npos) << text;
  EXPECT_NE(text.find("and 291 more"), std::string::npos) << text;
  EXPECT_LT(text.size(), 1000u);
  EXPECT_EQ(w.describe_links(5, t + milliseconds(10'000)), "no link of it reported");
}

TEST(Stragglers, ReportsThatNameNoLinkOfTheGridAreRefused) {
  const topology::Grid g = testing::make_grid({4});
  StragglerWatch w(g);
  EXPECT_EQ(w.check(0, {{1, 0, 1, 1, 10, 0, 0}, {2, 1, 0, 1, 10, 0, 0}}), "");
  EXPECT_NE(w.check(0, {{4, 0, 0, 1, 1, 0, 0}}).find("outside the grid of 4 ranks"),
            std::string::npos);
  EXPECT_NE(w.check(2, {{2, 0, 0, 1, 1, 0, 0}}).find("itself"), std::string::npos);
  EXPECT_NE(w.check(0, {{1, 2, 0, 1, 1, 0, 0}}).find("ranks open 2 lanes"), std::string::npos);
  EXPECT_NE(w.check(0, {{1, 0, 0, 1, 1, 0, 0}, {1, 0, 0, 1, 5, 0, 0}}).find("twice"),
            std::string::npos);
}

TEST(Stragglers, AStalledLinkLeftOutOfTheNextReportIsKeptOnceAsItWas) {
  // A rank whose links failed closes them and its last report may come
  // without them: the stall is still seen (fresh), then forgotten.
  Feed f(testing::make_grid({4}));
  for (int s = 0; s < 3; ++s) {
    f.t += milliseconds(1000);
    f.watch.report(0, f.t, {{1, 0, 0, 1, 100, 1u << 20, 0, 0, false}});
  }
  f.t += milliseconds(500);
  f.watch.report(0, f.t, {});
  const auto links = f.watch.links(f.t, milliseconds(1500));
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(links[0].stalled);
  EXPECT_NEAR(links[0].seconds, 2.0, 1e-6);  // as of its last report
  EXPECT_EQ(f.watch.remembered(), 1u);
  // Kept once: the report after, it is gone.
  f.t += milliseconds(500);
  f.watch.report(0, f.t, {});
  EXPECT_EQ(f.watch.remembered(), 0u);
  EXPECT_TRUE(f.watch.links(f.t, milliseconds(0)).empty());
}

TEST(Stragglers, ASenderIsRememberedForItsLatestReportOnly) {
  // A rank that names many links once and few afterwards leaves no trace of
  // the many: what the launcher holds is bounded by one message a rank.
  const topology::Grid g = testing::make_grid({64});
  StragglerWatch w(g);
  std::vector<control::LinkReport> many;
  for (int peer = 1; peer < 64; ++peer)
    for (std::uint8_t a = 0; a < 2; ++a)
      for (std::uint8_t b = 0; b < 2; ++b) many.push_back({peer, a, b, 1, 1, 0, 0});
  ASSERT_EQ(w.check(0, many), "");
  const auto t = Clock::now();
  w.report(0, t, many);
  EXPECT_EQ(w.remembered(), many.size());
  w.report(0, t + milliseconds(1000), {{5, 0, 0, 1, 2, 0, 0}});
  EXPECT_EQ(w.remembered(), 1u);
  w.report(0, t + milliseconds(2000), {});
  EXPECT_EQ(w.remembered(), 0u);
}

}  // namespace
}  // namespace gridbcast::job
