// The circulant broadcast (topology/plan/circulant.cpp): the schedule tables
// against their definition and a published table, a simulation of every round
// for every p up to 200, the plan against a hand-checked round table, and the
// plan's properties (verify_plan) over site sizes, roots, sizes, lanes and
// chained sites.
#include "topology/plan/circulant.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "support/grids.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/segments.hpp"
#include "topology/plan/verify.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;

int ceil_log2(int p) {
  return static_cast<int>(std::bit_width(static_cast<unsigned>(p - 1)));
}

// One site of p nodes with k lanes and a fixed segment (0: automatic).
Grid one_site(int p, int lanes, std::uint64_t segment) {
  Grid g = make_grid({p}, 1, lanes);
  g.lanes = lanes;
  g.segment_bytes = segment;
  return g;
}

// ---------------------------------------------------------------------------
// The schedule of one instance
// ---------------------------------------------------------------------------

// The baseblock by its definition: decompose r greedily into skips, largest
// first; the index of the last one used (q for the root).
int reference_baseblock(const std::vector<int>& skips, int q, int r) {
  if (r == 0) return q;
  int last = -1;
  for (int k = q - 1; k >= 0 && r > 0; --k) {
    if (r >= skips[static_cast<size_t>(k)]) {
      r -= skips[static_cast<size_t>(k)];
      last = k;
    }
  }
  return r == 0 ? last : -1;
}

// The receive table by its definition (docs/ALGORITHMS.md), O(p) per rank:
// in round k take the largest unused baseblock among the ranks (r - d) mod p,
// skips[k] <= d < skips[k+1]; if there is none, the baseblock of
// (r - skips[k+1]) mod p. A pick of q is this phase's block b, any other e
// the previous phase's e - q.
std::vector<int> reference_recv(const CirculantSchedule& s, int r) {
  const int p = s.ranks(), q = s.q();
  const auto& skips = s.skips();
  const int b = s.baseblock(r);
  std::set<int> used{b};
  std::vector<int> out;
  for (int k = 0; k < q; ++k) {
    int pick = -1;
    for (int d = skips[static_cast<size_t>(k)]; d < skips[static_cast<size_t>(k) + 1]; ++d) {
      const int c = s.baseblock(((r - d) % p + p) % p);
      if (!used.count(c)) pick = std::max(pick, c);
    }
    if (pick < 0) pick = s.baseblock(((r - skips[static_cast<size_t>(k) + 1]) % p + p) % p);
    EXPECT_FALSE(used.count(pick)) << "p=" << p << " r=" << r << " k=" << k;
    used.insert(pick);
    out.push_back(pick == q ? b : pick - q);
  }
  return out;
}

TEST(CirculantSchedule, SkipsHalveFromPAndPowersOfTwoDouble) {
  EXPECT_EQ(CirculantSchedule(17).skips(), (std::vector<int>{1, 2, 3, 5, 9, 17}));
  EXPECT_EQ(CirculantSchedule(33).skips(), (std::vector<int>{1, 2, 3, 5, 9, 17, 33}));
  EXPECT_EQ(CirculantSchedule(64).skips(), (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(CirculantSchedule(6).skips(), (std::vector<int>{1, 2, 3, 6}));
  EXPECT_EQ(CirculantSchedule(2).skips(), (std::vector<int>{1, 2}));
  EXPECT_EQ(CirculantSchedule(1).skips(), (std::vector<int>{1}));
  EXPECT_EQ(CirculantSchedule(1).q(), 0);
  EXPECT_THROW(CirculantSchedule(0), std::invalid_argument);
  for (int p = 2; p <= 1000; ++p) {
    const CirculantSchedule s(p);
    ASSERT_EQ(s.q(), ceil_log2(p));
    EXPECT_EQ(s.skips().front(), 1) << p;
    for (int k = 0; k < s.q(); ++k) {
      const int a = s.skips()[static_cast<size_t>(k)], b = s.skips()[static_cast<size_t>(k) + 1];
      EXPECT_TRUE(b == 2 * a || b == 2 * a - 1) << "p=" << p << " k=" << k;
    }
  }
}

// The phase tables for p = 17, as the prototype in the design notes prints
// them (computed there by the definition and by the search, independently of
// this code).
TEST(CirculantSchedule, SeventeenRanksMatchThePrototypeTables) {
  const CirculantSchedule s(17);
  const std::vector<int> base = {5, 0, 1, 2, 0, 3, 0, 1, 2, 4, 0, 1, 2, 0, 3, 0, 1};
  const std::vector<std::vector<int>> recv = {
      {-4, 0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5},
      {-5, -4, 1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2},
      {-2, -2, -2, 2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3},
      {-1, -3, -3, -2, -2, 3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1},
      {-3, -1, -1, -1, -1, -1, -1, -1, -1, 4, 0, 1, 2, 0, 3, 0, 1}};
  const std::vector<std::vector<int>> send = {
      {0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5, -4},
      {1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2, -5, -4},
      {2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3, -2, -2, -2},
      {3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1, -1, -3, -3, -2, -2},
      {4, 0, 1, 2, 0, 3, 0, 1, -3, -1, -1, -1, -1, -1, -1, -1, -1}};
  for (int r = 0; r < 17; ++r) {
    EXPECT_EQ(s.baseblock(r), base[static_cast<size_t>(r)]) << r;
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(s.recv_block(r, k), recv[static_cast<size_t>(k)][static_cast<size_t>(r)])
          << "r=" << r << " k=" << k;
      EXPECT_EQ(s.send_block(r, k), send[static_cast<size_t>(k)][static_cast<size_t>(r)])
          << "r=" << r << " k=" << k;
    }
  }
}

// The O(log p) search against the O(p) definition, the phase invariants, and
// that every send is something held: the block b - q of the last phase, or
// one received earlier in this phase.
TEST(CirculantSchedule, TheReceiveSearchEqualsTheDefinitionForEveryPUpTo200) {
  for (int p = 1; p <= 200; ++p) {
    const CirculantSchedule s(p);
    const int q = s.q();
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(s.baseblock(r), reference_baseblock(s.skips(), q, r)) << "p=" << p << " r=" << r;
      const std::vector<int> want = reference_recv(s, r);
      for (int k = 0; k < q; ++k)
        ASSERT_EQ(s.recv_block(r, k), want[static_cast<size_t>(k)])
            << "p=" << p << " r=" << r << " k=" << k;
      if (r == 0) continue;
      const int b = s.baseblock(r);
      // One phase brings b and every block of the last phase but b - q.
      std::vector<int> phase, expect{b};
      for (int k = 0; k < q; ++k) phase.push_back(s.recv_block(r, k));
      for (int e = 0; e < q; ++e)
        if (e != b) expect.push_back(e - q);
      std::sort(phase.begin(), phase.end());
      std::sort(expect.begin(), expect.end());
      EXPECT_EQ(phase, expect) << "p=" << p << " r=" << r;
      // b arrives in round K with skips[K] <= r < skips[K+1].
      int big_k = 0;
      while (s.skips()[static_cast<size_t>(big_k) + 1] <= r) ++big_k;
      EXPECT_EQ(s.recv_block(r, big_k), b) << "p=" << p << " r=" << r;
      for (int k = 0; k < q; ++k) {
        if ((r + s.skips()[static_cast<size_t>(k)]) % p == 0) continue;  // never executed
        const int sent = s.send_block(r, k);
        bool held = sent == b - q;
        for (int j = 0; j < k; ++j) held = held || s.recv_block(r, j) == sent;
        EXPECT_TRUE(held) << "p=" << p << " r=" << r << " k=" << k << " sends " << sent;
      }
    }
  }
}

// Every round of a whole broadcast, for every p up to 200 and many block
// counts: n - 1 + q rounds, the first and the last carry data, every rank
// sends and receives at most one block per round, sends only blocks it got in
// an earlier round, every non-root rank gets every block exactly once, and
// idles in exactly q - 1 receive slots.
TEST(CirculantSchedule, EveryRoundIsOnePortedCausalAndDeliversEveryBlockOnce) {
  const std::int64_t counts[] = {1, 2, 3, 4, 5, 7, 8, 13, 40, 64};
  for (int p = 1; p <= 200; ++p) {
    const CirculantSchedule s(p);
    for (std::int64_t n : counts) {
      const std::int64_t rounds = s.rounds(n);
      ASSERT_EQ(rounds, p == 1 ? 0 : n - 1 + s.q()) << "p=" << p << " n=" << n;
      // held_since[r][j]: the round after the one that brought block j to r.
      std::vector<std::vector<std::int64_t>> held_since(
          static_cast<size_t>(p), std::vector<std::int64_t>(static_cast<size_t>(n), -1));
      std::fill(held_since[0].begin(), held_since[0].end(), 0);
      std::vector<std::vector<int>> got(static_cast<size_t>(p),
                                        std::vector<int>(static_cast<size_t>(n), 0));
      std::int64_t receives = 0;
      for (std::int64_t i = 0; i < rounds; ++i) {
        const auto steps = s.round(i, n);
        if (i == 0 || i == rounds - 1) {
          EXPECT_FALSE(steps.empty()) << "p=" << p << " n=" << n;
        }
        std::set<int> senders, receivers;
        for (const auto& step : steps) {
          ASSERT_TRUE(senders.insert(step.from).second) << "p=" << p << " n=" << n << " i=" << i;
          ASSERT_TRUE(receivers.insert(step.to).second) << "p=" << p << " n=" << n << " i=" << i;
          ASSERT_NE(step.to, 0);
          ASSERT_GE(step.block, 0);
          ASSERT_LT(step.block, n);
          const std::int64_t since =
              held_since[static_cast<size_t>(step.from)][static_cast<size_t>(step.block)];
          ASSERT_TRUE(since >= 0 && since <= i)
              << "p=" << p << " n=" << n << " round " << i << ": rank " << step.from
              << " sends block " << step.block << " it does not hold";
          // The receiver's table says the same block (the target of round k
          // receives from r - skips[k]).
          const int skip = (step.to - step.from + p) % p;
          EXPECT_NE(std::find(s.skips().begin(), s.skips().end() - 1, skip), s.skips().end() - 1);
        }
        for (const auto& step : steps) {
          auto& since = held_since[static_cast<size_t>(step.to)][static_cast<size_t>(step.block)];
          if (since < 0) since = i + 1;
          ++got[static_cast<size_t>(step.to)][static_cast<size_t>(step.block)];
          ++receives;
        }
      }
      for (int r = 1; r < p; ++r)
        for (std::int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(j)], 1)
              << "p=" << p << " n=" << n << " rank " << r << " block " << j;
      if (p > 1) {
        EXPECT_EQ(rounds * (p - 1) - receives, (p - 1) * (s.q() - 1));
      }
    }
  }
  EXPECT_THROW(CirculantSchedule(8).round(6, 4), std::out_of_range);
  EXPECT_THROW(CirculantSchedule(1).round(0, 4), std::out_of_range);
}

// The case MPICH's refactored tables get wrong (docs/ALGORITHMS.md): p = 33,
// relative rank 1, round 2, whose sender is rank 31. The definition says
// block -4 on both ends.
TEST(CirculantSchedule, ThirtyThreeRanksSenderAndReceiverAgree) {
  const CirculantSchedule s(33);
  EXPECT_EQ(s.skips()[2], 3);
  EXPECT_EQ(s.recv_block(1, 2), -4);
  EXPECT_EQ(s.send_block(31, 2), -4);
  for (int r = 0; r < 33; ++r)
    for (int k = 0; k < s.q(); ++k)
      EXPECT_EQ(s.send_block(r, k), r == 0 ? k : s.recv_block((r + s.skips()[k]) % 33, k));
}

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

TEST(Circulant, OneBlockIsOneSegmentAndHugePartsGrowBlocksInWholeSegments) {
  EXPECT_EQ(circulant_blocks(0, 100).count, 0u);
  EXPECT_EQ(circulant_blocks(1, 100).count, 1u);
  EXPECT_EQ(circulant_blocks(1, 100).block_bytes, 1u);  // never longer than the part
  EXPECT_EQ(circulant_blocks(99, 100).count, 1u);
  EXPECT_EQ(circulant_blocks(100, 100).count, 1u);
  EXPECT_EQ(circulant_blocks(101, 100).count, 2u);
  EXPECT_EQ(circulant_blocks(101, 100).block_bytes, 100u);
  EXPECT_EQ(circulant_blocks(5, 0).count, 5u);  // a segment of 0 counts as 1
  // Past the cap: the smallest multiple of the segment that fits.
  const CirculantBlocks capped = circulant_blocks(1000, 7, 10);
  EXPECT_EQ(capped.block_bytes, 105u);  // 100 would do, 105 = 15 x 7 is the next multiple
  EXPECT_EQ(capped.count, 10u);
  EXPECT_EQ(circulant_blocks(std::uint64_t{1} << 40, 1 << 20).count, kCirculantMaxBlocks);
  EXPECT_EQ(circulant_blocks(std::uint64_t{1} << 40, 1 << 20).block_bytes, std::uint64_t{16} << 20);
  const std::uint64_t huge = ~std::uint64_t{0};
  EXPECT_EQ(circulant_blocks(huge, 1, 1).count, 1u);
  EXPECT_LE(circulant_blocks(huge, 3, 1000).count, 1000u);
  EXPECT_EQ(circulant_max_blocks(1, 1), kCirculantMaxBlocks);
  EXPECT_EQ(circulant_max_blocks(1000, 8), kCirculantMaxTransfers / 8000);
  EXPECT_EQ(circulant_max_blocks(1 << 30, 8), 1u);
}

TEST(Circulant, PartsAreMultilanesPiecesAndSizeZeroIsEmpty) {
  const Grid g = one_site(5, 3, 4);
  const auto parts = circulant_parts(g, 10, g.segment_bytes);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].offset, 0u);
  EXPECT_EQ(parts[0].length, 4u);  // [0, ceil(10/3))
  EXPECT_EQ(parts[1].offset, 4u);
  EXPECT_EQ(parts[1].length, 3u);  // [4, ceil(20/3))
  EXPECT_EQ(parts[2].offset, 7u);
  EXPECT_EQ(parts[2].length, 3u);
  EXPECT_EQ(parts[0].blocks.count, 1u);
  EXPECT_EQ(parts[1].blocks.count, 1u);
  // M < k: empty parts send nothing.
  const auto tiny = circulant_parts(g, 2, g.segment_bytes);
  EXPECT_EQ(tiny[0].length + tiny[1].length + tiny[2].length, 2u);
  EXPECT_EQ(std::count_if(tiny.begin(), tiny.end(), [](const auto& p) { return p.length == 0; }),
            1);
  const Plan plan = build_circulant(g, 1, 2);
  EXPECT_TRUE(verify_plan(g, plan).ok()) << verify_plan(g, plan).errors.front();
  for (const Transfer& t : plan.transfers) EXPECT_EQ(t.length, 1u);
  std::set<int> used_lanes;
  for (const Transfer& t : plan.transfers) used_lanes.insert(t.lane_from);
  EXPECT_EQ(used_lanes.size(), 2u);
  EXPECT_TRUE(build_circulant(g, 1, 0).transfers.empty());
}

// ---------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------

// The round table of the design notes' prototype for p = 8, n = 4, root 0
// (cell = to:block), read off by hand:
//
//   round k   r0  r1  r2  r3  r4  r5  r6  r7
//     0   0  1:0   .   .   .   .   .   .   .
//     1   1  2:1 3:0   .   .   .   .   .   .
//     2   2  4:2 5:0 6:1 7:0   .   .   .   .
//     3   0  1:3 2:0 3:1 4:0 5:2 6:0 7:1   .
//     4   1  2:3 3:3 4:1 5:1 6:2 7:2   . 1:1
//     5   2  4:3 5:3 6:3 7:3   . 1:2 2:2 3:2
TEST(Circulant, EightRanksFourBlocksIsTheHandCheckedTable) {
  struct Cell {
    int from, to, block;
  };
  const std::vector<std::vector<Cell>> table = {
      {{0, 1, 0}},
      {{0, 2, 1}, {1, 3, 0}},
      {{0, 4, 2}, {1, 5, 0}, {2, 6, 1}, {3, 7, 0}},
      {{0, 1, 3}, {1, 2, 0}, {2, 3, 1}, {3, 4, 0}, {4, 5, 2}, {5, 6, 0}, {6, 7, 1}},
      {{0, 2, 3}, {1, 3, 3}, {2, 4, 1}, {3, 5, 1}, {4, 6, 2}, {5, 7, 2}, {7, 1, 1}},
      {{0, 4, 3}, {1, 5, 3}, {2, 6, 3}, {3, 7, 3}, {5, 1, 2}, {6, 2, 2}, {7, 3, 2}}};
  const Grid g = one_site(8, 1, 100);
  for (int root : {0, 3}) {
    // Relative rank r is node (root + r) mod 8: the site's order rotated.
    std::vector<Transfer> want;
    for (const auto& round : table)
      for (const Cell& c : round)
        want.push_back(Transfer{(root + c.from) % 8, (root + c.to) % 8,
                                static_cast<std::uint64_t>(c.block) * 100, 100, 0, 0, 1});
    const Plan plan = build_circulant(g, root, 400);
    EXPECT_EQ(plan.transfers, want) << "root " << root;
    const PlanCheck check = verify_plan(g, plan);
    ASSERT_TRUE(check.ok()) << check.errors.front();
    EXPECT_EQ(check.stats.circulant_rounds[0][0], 6);  // n - 1 + q = 4 - 1 + 3
  }
  // The last block short: 350 bytes are blocks of 100, 100, 100 and 50.
  const Plan short_last = build_circulant(g, 0, 350);
  ASSERT_EQ(short_last.transfers.size(), 28u);
  for (const Transfer& t : short_last.transfers) EXPECT_EQ(t.length, t.offset == 300 ? 50u : 100u);
}

// Checks one plan and the per-site, per-lane round and receive counts.
void expect_circulant_plan(const Grid& g, int root, std::uint64_t size) {
  SCOPED_TRACE("p=" + std::to_string(g.size()) + " lanes=" + std::to_string(g.lane_count()) +
               " root=" + std::to_string(root) + " size=" + std::to_string(size));
  const Plan plan = build_plan(g, Algorithm::kCirculant, root, size);
  ASSERT_EQ(plan.algorithm, Algorithm::kCirculant);
  const PlanCheck check = verify_plan(g, plan);
  ASSERT_TRUE(check.ok()) << check.errors.front();
  if (size == 0) {
    EXPECT_TRUE(plan.transfers.empty());
    return;
  }
  const auto parts = circulant_parts(g, size, plan.block_bytes);
  const std::uint64_t segment = resolve_segment_bytes(g, plan, 0);
  EXPECT_EQ(segment, plan.block_bytes) << "one block, one frame";
  std::uint64_t blocks = 0;
  for (const auto& part : parts) {
    EXPECT_LE(part.blocks.block_bytes, segment);
    blocks += part.blocks.count;
  }
  // Every rank but the root receives every block once (in its site or over
  // the WAN), so the plan is (P - 1) x the blocks, one transfer each.
  EXPECT_EQ(plan.transfers.size(), static_cast<size_t>(g.size() - 1) * blocks);
  for (size_t s = 0; s < g.sites.size(); ++s) {
    const int p = static_cast<int>(g.sites[s].ranks.size());
    for (const auto& part : parts) {
      const std::int64_t want =
          part.blocks.count == 0 || p == 1
              ? 0
              : static_cast<std::int64_t>(part.blocks.count) - 1 + ceil_log2(p);
      EXPECT_EQ(check.stats.circulant_rounds[s][static_cast<size_t>(part.lane)], want)
          << "site " << s << " lane " << part.lane;
    }
  }
  EXPECT_EQ(check.stats.wan_bytes, (g.sites.size() - 1) * size);
}

TEST(Circulant, EverySiteSizeUpTo33EveryRootAndSegmentEdge) {
  constexpr std::uint64_t s = 1000;
  for (int lanes : {1, 2, 3}) {
    for (int p = 1; p <= 33; ++p) {
      const Grid g = one_site(p, lanes, s);
      const std::uint64_t k = static_cast<std::uint64_t>(lanes);
      const std::uint64_t sizes[] = {0,     1,         2,     s - 1,     s,
                                     s + 1, k * s - 1, k * s, k * s + 1, 37 * s + 5};
      for (int root : std::set<int>{0, 1 % p, p / 2, p - 1})
        for (std::uint64_t size : sizes) expect_circulant_plan(g, root, size);
    }
  }
}

TEST(Circulant, TheBlockCutsEachPartIntoWholeBlocksAndAShortOne) {
  const Grid g = make_grid({9});
  const std::uint64_t size = (std::uint64_t{1} << 20) + 3;
  const std::uint64_t block = 64 << 10;
  const Plan plan = build_circulant(g, 4, size, block);
  EXPECT_EQ(plan.block_bytes, block);
  EXPECT_EQ(resolve_segment_bytes(g, plan, 0), block);
  const PlanCheck check = verify_plan(g, plan);
  ASSERT_TRUE(check.ok()) << check.errors.front();
  std::map<std::uint64_t, int> lengths;
  for (const Transfer& t : plan.transfers) ++lengths[t.length];
  // Two parts of 512 KiB + 2 and + 1: eight whole blocks and a short one each.
  EXPECT_EQ(lengths.size(), 3u);
  EXPECT_EQ(lengths[block], 8 * 2 * 8);  // 8 receivers x 2 lanes x 8 blocks
  EXPECT_EQ(lengths[2], 8);
  EXPECT_EQ(lengths[1], 8);
}

TEST(Circulant, FiveGiBUsesSixtyFourBitOffsetsAndStaysASmallPlan) {
  const std::uint64_t size = (std::uint64_t{5} << 30) + 3;
  const Grid g = make_grid({33});
  const std::uint64_t segment = 1 << 20;
  const Plan plan = build_circulant(g, 32, size, segment);
  const PlanCheck check = verify_plan(g, plan);
  ASSERT_TRUE(check.ok()) << check.errors.front();
  // Two parts of 2.5 GiB + 2 and + 1 bytes: 2561 blocks each, the last of 2 and 1 bytes.
  const auto parts = circulant_parts(g, size, segment);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].blocks.count, 2561u);
  EXPECT_EQ(parts[1].blocks.count, 2561u);
  EXPECT_EQ(plan.transfers.size(), 32u * 2 * 2561);
  std::uint64_t end = 0;
  bool past_4gib = false;
  for (const Transfer& t : plan.transfers) {
    end = std::max(end, t.offset + t.length);
    past_4gib = past_4gib || t.offset > (std::uint64_t{1} << 32);
  }
  EXPECT_EQ(end, size);
  EXPECT_TRUE(past_4gib);
  EXPECT_EQ(check.stats.circulant_rounds[0][0], 2561 - 1 + 6);
  for (int r = 0; r < 32; ++r) EXPECT_EQ(check.stats.received[static_cast<size_t>(r)], size);

  // 300 nodes: the plan-wide cap grows blocks (in whole segments) instead of
  // listing 300 x 2 x 2561 transfers.
  const Grid big = make_grid({300});
  const Plan capped = build_circulant(big, 0, size, segment);
  EXPECT_LE(capped.transfers.size(), kCirculantMaxTransfers);
  const auto big_parts = circulant_parts(big, size, segment);
  EXPECT_LE(big_parts[0].blocks.count, circulant_max_blocks(300, 2));
  EXPECT_EQ(big_parts[0].blocks.block_bytes % segment, 0u);
  EXPECT_EQ(big_parts[0].blocks.block_bytes, 2 * segment);  // 2.5 GiB / 1747 blocks, rounded up
  const PlanCheck big_check = verify_plan(big, capped);
  ASSERT_TRUE(big_check.ok()) << big_check.errors.front();
}

TEST(Circulant, OneNodeGridsAndTwoAndThreeNodeSites) {
  expect_circulant_plan(make_grid({1}), 0, 12345);
  EXPECT_TRUE(build_circulant(make_grid({1}), 0, 12345).transfers.empty());
  // p = 2: q = 1, a pipeline of n rounds from the root to the other node.
  const Grid two = one_site(2, 1, 10);
  const Plan plan2 = build_circulant(two, 1, 45);
  ASSERT_EQ(plan2.transfers.size(), 5u);
  for (size_t j = 0; j < 5; ++j) {
    EXPECT_EQ(plan2.transfers[j].from, 1);
    EXPECT_EQ(plan2.transfers[j].to, 0);
    EXPECT_EQ(plan2.transfers[j].offset, 10 * j);
  }
  // p = 3: q = 2, n + 1 rounds.
  const Grid three = one_site(3, 1, 10);
  const PlanCheck check3 = verify_plan(three, build_circulant(three, 2, 50));
  ASSERT_TRUE(check3.ok()) << check3.errors.front();
  EXPECT_EQ(check3.stats.circulant_rounds[0][0], 6);
}

// The feeds of the hand-checked table's site to a next site: the idle send
// slots of rounds 3, 4 and 5 (ranks 7, 6, 4: their targets are the root),
// each right after its round, then block 3 from rank 7, which has sent the
// fewest blocks by then (2 in the site, 1 feed).
TEST(Circulant, EightRanksFeedTheNextSiteFromTheirIdleSlots) {
  Grid g = make_grid({8, 3}, 4, 1);
  g.lanes = 1;
  g.segment_bytes = 100;
  const Plan plan = build_circulant(g, 0, 400);
  ASSERT_TRUE(verify_plan(g, plan).ok()) << verify_plan(g, plan).errors.front();
  // Positions in the list: 1 + 2 + 4 transfers in rounds 0-2, 7 per round after.
  const std::vector<std::pair<size_t, Transfer>> feeds = {{14, {7, 8, 0, 100, 0, 0, 4}},
                                                          {22, {6, 8, 100, 100, 0, 0, 4}},
                                                          {30, {4, 8, 200, 100, 0, 0, 4}},
                                                          {31, {7, 8, 300, 100, 0, 0, 4}}};
  std::vector<size_t> wan;
  for (size_t i = 0; i < plan.transfers.size(); ++i)
    if (g.site_of(plan.transfers[i].from) != g.site_of(plan.transfers[i].to)) wan.push_back(i);
  ASSERT_EQ(wan.size(), feeds.size());
  for (size_t f = 0; f < feeds.size(); ++f) {
    EXPECT_EQ(wan[f], feeds[f].first);
    EXPECT_EQ(plan.transfers[wan[f]], feeds[f].second) << "feed " << f;
  }
  // Site 1 follows: its instance is rooted at its first node (8), p = 3.
  EXPECT_EQ(plan.transfers[32].from, 8);
  EXPECT_EQ(plan.transfers.size(), 32u + 2 * 4);
}

TEST(Circulant, SitesAreChainedThroughIdleSendSlots) {
  constexpr std::uint64_t s = 1000;
  for (const auto& shape : std::vector<std::vector<int>>{
           {8, 5}, {5, 8}, {2, 2}, {1, 4}, {4, 1}, {3, 1, 4}, {33, 2, 7}, {1, 1, 1}, {17, 17}}) {
    for (int lanes : {1, 2, 3}) {
      Grid g = make_grid(shape, 4, lanes);
      g.lanes = lanes;
      g.segment_bytes = s;
      for (int root : std::set<int>{0, g.size() / 2, g.size() - 1}) {
        for (std::uint64_t size : {std::uint64_t{1}, std::uint64_t{2}, s + 1, 24 * s + 7})
          expect_circulant_plan(g, root, size);
        const std::uint64_t size = 24 * s + 7;
        SCOPED_TRACE("root " + std::to_string(root));
        const Plan plan = build_circulant(g, root, size);
        const auto parts = circulant_parts(g, size, plan.block_bytes);
        const std::vector<int> chain = g.site_chain(g.site_of(root));
        for (int l = 0; l < lanes; ++l) {
          const auto& part = parts[static_cast<size_t>(l)];
          const auto n = static_cast<int>(part.blocks.count);
          for (size_t c = 0; c + 1 < chain.size(); ++c) {
            const auto& from_site = g.sites[static_cast<size_t>(chain[c])].ranks;
            const auto& to_site = g.sites[static_cast<size_t>(chain[c + 1])].ranks;
            const int q = ceil_log2(static_cast<int>(from_site.size()));
            // Sends per node on this lane (in the site and over the WAN).
            std::map<int, int> sends;
            for (int r : from_site) sends[r] = 0;
            std::vector<size_t> wan;
            size_t last_in_site = 0;
            for (size_t i = 0; i < plan.transfers.size(); ++i) {
              const Transfer& t = plan.transfers[i];
              if (t.lane_from != l || g.site_of(t.from) != chain[c]) continue;
              ++sends[t.from];
              if (g.site_of(t.to) == chain[c]) {
                last_in_site = i;
              } else {
                wan.push_back(i);
              }
            }
            // Every block once, into the next site's node l mod |site|, on
            // lane l, over the link's streams.
            ASSERT_EQ(wan.size(), part.blocks.count) << "lane " << l << " hop " << c;
            std::set<std::uint64_t> offsets;
            for (size_t i : wan) {
              const Transfer& t = plan.transfers[i];
              EXPECT_EQ(t.to, to_site[static_cast<size_t>(l) % to_site.size()]);
              EXPECT_EQ(t.lane_to, l);
              EXPECT_EQ(t.streams, 4);
              offsets.insert(t.offset);
            }
            EXPECT_EQ(offsets.size(), part.blocks.count);
            // No node's lane sends more than the instance's root must.
            int most = 0;
            for (const auto& [r, count] : sends) most = std::max(most, count);
            EXPECT_EQ(most, n - 1 + std::max(q, 1)) << "lane " << l << " hop " << c;
            // Block by block: feeds start before the site's rounds end.
            if (from_site.size() > 2) {
              EXPECT_LT(wan.front(), last_in_site);
            }
          }
        }
      }
    }
  }
}

// The block is part of the plan: a plan whose transfers are not blocks of
// the size it states, or that states none, fails the check.
TEST(Circulant, TheCheckerRejectsAPlanWhoseTransfersAreNotItsStatedBlocks) {
  const Grid g = make_grid({5, 4});
  Plan plan = build_circulant(g, 2, 1 << 20, 64 << 10);
  ASSERT_TRUE(verify_plan(g, plan).ok());
  plan.block_bytes = 32 << 10;
  const PlanCheck halved = verify_plan(g, plan);
  ASSERT_FALSE(halved.ok());
  EXPECT_NE(halved.errors.front().find("in blocks of 32768 bytes"), std::string::npos)
      << halved.errors.front();
  plan.block_bytes = 0;
  const PlanCheck none = verify_plan(g, plan);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.errors.front().find("no block size"), std::string::npos) << none.errors.front();
}

// The checker's circulant properties fail on wrong schedules.
TEST(Circulant, TheCheckerRejectsSlowAndInconsistentSchedules) {
  const Grid g = one_site(8, 1, 100);
  // A pipelined chain of the same blocks: causal, exact, complete, every rank
  // but the root receives n blocks, and it takes n + p - 2 = 10 rounds.
  Plan chain = build_circulant(g, 0, 400);
  chain.transfers.clear();
  for (std::uint64_t j = 0; j < 4; ++j)
    for (int r = 0; r + 1 < 8; ++r)
      chain.transfers.push_back(Transfer{r, r + 1, 100 * j, 100, 0, 0, 1});
  const PlanCheck slow = verify_plan(g, chain);
  ASSERT_EQ(slow.errors.size(), 1u) << slow.errors.front();
  EXPECT_NE(slow.errors.front().find("take 10 one-ported rounds"), std::string::npos)
      << slow.errors.front();
  EXPECT_NE(slow.errors.front().find("n - 1 + q = 6"), std::string::npos);

  // Two blocks in one transfer are not one block.
  Plan merged = build_circulant(g, 0, 400);
  merged.transfers[0].length = 200;
  EXPECT_FALSE(verify_plan(g, merged).ok());
  bool named = false;
  for (const auto& e : verify_plan(g, merged).errors)
    named = named || e.find("not one block of lane 0") != std::string::npos;
  EXPECT_TRUE(named);

  // p = 33 with the send entry MPICH's refactored rules give rank 31 in round
  // 2 (-3 where the receiver expects -4): rank 1 gets one block twice and
  // another never.
  const Grid g33 = one_site(33, 1, 100);
  Plan wrong = build_circulant(g33, 0, 800);
  ASSERT_TRUE(verify_plan(g33, wrong).ok());
  int changed = 0;
  for (Transfer& t : wrong.transfers) {
    if (t.from == 31 && t.to == 1 && t.offset + 100 < 800) {
      t.offset += 100;
      ++changed;
    }
  }
  ASSERT_GT(changed, 0);
  const PlanCheck bad = verify_plan(g33, wrong);
  ASSERT_FALSE(bad.ok());
  bool coverage_or_exactness = false;
  for (const auto& e : bad.errors)
    coverage_or_exactness = coverage_or_exactness || e.find("coverage") != std::string::npos ||
                            e.find("exactness") != std::string::npos;
  EXPECT_TRUE(coverage_or_exactness) << bad.errors.front();
}

}  // namespace
}  // namespace gridbcast::topology
