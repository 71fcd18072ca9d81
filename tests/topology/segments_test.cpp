// The per-link segment schedule (topology/plan/segments.cpp): for every
// algorithm on the site-configs and odd synthetic grids, at sizes around the
// segment size, the sender's list on each link is the receiver's list on that
// link, the segments tile each transfer exactly, and the per-link limit holds.
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "support/grids.hpp"
#include "topology/loader.hpp"

namespace gridbcast::topology {
namespace {

using testing::make_grid;
using LinkId = std::tuple<int, int, int, int>;

LinkId id_of(const LinkSegments& l) {
  return {l.from, l.to, l.lane_from, l.lane_to};
}

std::string where(const Grid& g, const Plan& plan, const SegmentOptions& o) {
  return std::string(algorithm_name(plan.algorithm)) + " on " + g.name + " (" +
         std::to_string(g.size()) + " ranks) root " + std::to_string(plan.root) + " size " +
         std::to_string(plan.size) + " segment " + std::to_string(o.segment_bytes) +
         (o.lanes ? "" : " without lanes") + " max/link " + std::to_string(o.max_per_link);
}

// Checks one plan under one set of options against every property.
void expect_schedule_properties(const Grid& g, const Plan& plan, const SegmentOptions& o) {
  SCOPED_TRACE(where(g, plan, o));
  const SegmentSchedule all = segment_schedule(plan, o);
  ASSERT_GE(all.segment_bytes, 1u);
  ASSERT_LE(all.segment_bytes, kMaxSegmentBytes);
  if (o.max_per_link == 0) {
    EXPECT_EQ(all.segment_bytes, std::clamp<std::uint64_t>(o.segment_bytes, 1, kMaxSegmentBytes));
  }

  // Tiling: each transfer's segments, in link order, cover it exactly.
  std::vector<std::uint64_t> next(plan.transfers.size());
  for (size_t i = 0; i < plan.transfers.size(); ++i) next[i] = plan.transfers[i].offset;
  std::map<LinkId, const LinkSegments*> by_id;
  for (const LinkSegments& link : all.links) {
    ASSERT_TRUE(by_id.emplace(id_of(link), &link).second) << "a link listed twice";
    if (o.max_per_link != 0) {
      EXPECT_LE(link.segments.size(), o.max_per_link);
    }
    EXPECT_GE(link.streams, 1);
    int last_transfer = -1;
    for (size_t k = 0; k < link.segments.size(); ++k) {
      const Segment& s = link.segments[k];
      EXPECT_EQ(s.index, k);
      EXPECT_EQ(s.stream, static_cast<int>(k % static_cast<size_t>(link.streams)));
      ASSERT_GE(s.transfer, 0);
      ASSERT_LT(static_cast<size_t>(s.transfer), plan.transfers.size());
      EXPECT_GE(s.transfer, last_transfer) << "segments out of plan order";
      last_transfer = s.transfer;
      const Transfer& t = plan.transfers[static_cast<size_t>(s.transfer)];
      EXPECT_EQ(t.from, link.from);
      EXPECT_EQ(t.to, link.to);
      if (o.lanes) {
        EXPECT_EQ(t.lane_from, link.lane_from);
        EXPECT_EQ(t.lane_to, link.lane_to);
      }
      EXPECT_EQ(s.offset, next[static_cast<size_t>(s.transfer)]) << "a gap or an overlap";
      EXPECT_GE(s.length, 1u);
      EXPECT_LE(s.length, all.segment_bytes);
      next[static_cast<size_t>(s.transfer)] = s.offset + s.length;
      // Only a transfer's last segment may be short.
      if (s.offset + s.length < t.offset + t.length) {
        EXPECT_EQ(s.length, all.segment_bytes);
      }
    }
  }
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& t = plan.transfers[i];
    EXPECT_EQ(next[i], t.offset + t.length) << "transfer " << i << " not covered";
  }

  // Sender and receiver: each rank's send list on a link is the receiver's
  // receive list on it, and both are the whole plan's list for that link.
  std::map<LinkId, LinkSegments> sent, received;
  for (int r = 0; r < plan.ranks; ++r) {
    const RankSegments mine = rank_segments(plan, r, o);
    EXPECT_EQ(mine.segment_bytes, all.segment_bytes) << "rank " << r;
    for (const LinkSegments& l : mine.send) {
      EXPECT_EQ(l.from, r);
      sent.emplace(id_of(l), l);
    }
    for (const LinkSegments& l : mine.receive) {
      EXPECT_EQ(l.to, r);
      received.emplace(id_of(l), l);
    }
  }
  ASSERT_EQ(sent.size(), by_id.size());
  ASSERT_EQ(received.size(), by_id.size());
  for (const auto& [id, link] : by_id) {
    ASSERT_TRUE(sent.count(id) && received.count(id));
    EXPECT_EQ(sent.at(id), received.at(id)) << "sender and receiver disagree";
    EXPECT_EQ(sent.at(id), *link);
  }
}

void expect_on_grid(const Grid& g) {
  const std::uint64_t seg = g.segment_bytes != 0 ? g.segment_bytes : 64 << 10;
  const std::uint64_t sizes[] = {0, 1, seg - 1, seg, seg + 1, 3 * seg + 7, 100 * seg + 1};
  constexpr std::uint64_t kSmall = 7;  // a tiny segment, on small messages
  const std::uint64_t small_sizes[] = {kSmall - 1, kSmall, kSmall + 1, 3 * kSmall + 2, 1000};
  const std::set<int> roots{0, g.size() / 2, g.size() - 1};
  for (const auto& info : algorithms())
    for (int root : roots) {
      if (!algorithm_unavailable(g, info.id).empty()) {
        EXPECT_THROW(build_plan(g, info.id, root, 1), std::invalid_argument);
        continue;
      }
      for (std::uint64_t size : sizes) {
        const Plan plan = build_plan(g, info.id, root, size);
        expect_schedule_properties(g, plan, SegmentOptions{seg, 0, true});
        // MPI: links are rank pairs, and few tags force the segment to grow.
        expect_schedule_properties(g, plan, SegmentOptions{seg, 0, false});
        // (at least one tag per transfer: the native ring sends p-1 over one link)
        std::map<std::pair<int, int>, std::uint64_t> transfers_per_pair;
        std::uint64_t tags = 16;
        for (const Transfer& t : plan.transfers)
          tags = std::max(tags, ++transfers_per_pair[{t.from, t.to}]);
        expect_schedule_properties(g, plan, SegmentOptions{1, tags, false});
      }
      for (std::uint64_t size : small_sizes) {
        const Plan plan = build_plan(g, info.id, root, size);
        expect_schedule_properties(g, plan, SegmentOptions{kSmall, 0, true});
        expect_schedule_properties(g, plan, SegmentOptions{kSmall, 0, false});
      }
    }
}

TEST(SegmentSchedule, EveryAlgorithmOnEverySiteConfig) {
  const std::filesystem::path dir = std::filesystem::path(GRIDBCAST_SOURCE_DIR) / "site-configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    expect_on_grid(load_grid_file(entry.path().string()));
    ++loaded;
  }
  EXPECT_GE(loaded, 10);
}

TEST(SegmentSchedule, EveryAlgorithmOnOddGrids) {
  for (const auto& shape : std::vector<std::vector<int>>{{1}, {2}, {3}, {7}, {5, 3}, {1, 4, 9}})
    expect_on_grid(make_grid(shape));
  expect_on_grid(make_grid({6, 5}, 2, 1));  // one NIC per node
}

TEST(SegmentSchedule, HugeMessagesAreCutIntoFramesOfAtMostOneGiB) {
  const Grid g = make_grid({2, 3});
  const std::uint64_t huge = (std::uint64_t{5} << 30) + 3;
  for (const auto& info : algorithms()) {
    const Plan plan = build_plan(g, info.id, 1, huge);
    expect_schedule_properties(g, plan, SegmentOptions{std::uint64_t{4} << 30, 0, true});
    expect_schedule_properties(g, plan, SegmentOptions{64 << 10, 32768, false});
  }
}

TEST(SegmentSchedule, CutsEachTransferAndDealsTheLinkRoundRobin) {
  Plan plan;
  plan.ranks = 2;
  plan.size = 25;
  plan.transfers = {Transfer{0, 1, 0, 10, 0, 0, 2}, Transfer{0, 1, 10, 15, 0, 0, 2},
                    Transfer{0, 1, 0, 25, 1, 1, 1}};
  const SegmentSchedule s = segment_schedule(plan, SegmentOptions{4, 0, true});
  ASSERT_EQ(s.links.size(), 2u);
  EXPECT_EQ(s.links[0].segments, (std::vector<Segment>{{0, 4, 0, 0, 0},
                                                       {4, 4, 0, 1, 1},
                                                       {8, 2, 0, 2, 0},
                                                       {10, 4, 1, 3, 1},
                                                       {14, 4, 1, 4, 0},
                                                       {18, 4, 1, 5, 1},
                                                       {22, 3, 1, 6, 0}}));
  EXPECT_EQ(s.links[1].segments.size(), 7u);
  EXPECT_EQ(s.links[1].segments.back(), (Segment{24, 1, 2, 6, 0}));
  // Without lanes the three transfers share one link (and its tags).
  const SegmentSchedule mpi = segment_schedule(plan, SegmentOptions{4, 0, false});
  ASSERT_EQ(mpi.links.size(), 1u);
  EXPECT_EQ(mpi.links[0].segments.size(), 14u);
  EXPECT_EQ(mpi.links[0].segments.back().index, 13u);
}

TEST(SegmentSchedule, TheSegmentDoublesUntilEveryLinkFitsItsTags) {
  Plan plan;
  plan.ranks = 3;
  plan.size = 1000;
  // Rank 2's only link is short; rank 0's link to 1 is long. All ranks must
  // agree on one size, so rank 2 grows its segment too.
  plan.transfers = {Transfer{0, 1, 0, 1000, 0, 0, 1}, Transfer{0, 2, 0, 10, 0, 0, 1}};
  const RankSegments two = rank_segments(plan, 2, SegmentOptions{10, 16, false});
  EXPECT_EQ(two.segment_bytes, 80u);  // 10 -> 20 -> 40 -> 80: 13 segments of 1000 bytes
  EXPECT_EQ(rank_segments(plan, 0, SegmentOptions{10, 16, false}).segment_bytes, 80u);
  Plan huge = plan;
  huge.size = std::uint64_t{1} << 40;
  huge.transfers[0].length = huge.size;
  EXPECT_THROW(segment_schedule(huge, SegmentOptions{1, 16, false}), std::runtime_error);
}

TEST(SegmentSchedule, ZeroLengthTransfersMakeEmptyLinks) {
  Plan plan;
  plan.ranks = 2;
  plan.transfers = {Transfer{0, 1, 0, 0, 0, 0, 3}};
  const RankSegments r = rank_segments(plan, 1, SegmentOptions{0, 0, true});
  EXPECT_EQ(r.segment_bytes, 1u);
  ASSERT_EQ(r.receive.size(), 1u);
  EXPECT_TRUE(r.receive[0].segments.empty());
  EXPECT_TRUE(r.send.empty());
}

TEST(ResolveSegment, RequestedThenTheTopologysThenThePlansOwn) {
  Grid g = make_grid({4});
  const Plan multilane = build_plan(g, Algorithm::kMultilane, 0, 64 << 20);
  const Plan circulant = build_circulant(g, 0, 64 << 20, 300 << 10);
  EXPECT_EQ(resolve_segment_bytes(g, multilane, 0), model_segment(g, multilane));
  EXPECT_EQ(resolve_segment_bytes(g, circulant, 0), 300u << 10) << "its blocks are its segments";
  EXPECT_EQ(resolve_segment_bytes(g, multilane, 4096), 4096u);
  EXPECT_EQ(resolve_segment_bytes(g, circulant, 4096), 4096u) << "--segment cuts its blocks";
  g.segment_bytes = 200 << 10;
  EXPECT_EQ(resolve_segment_bytes(g, multilane, 0), 200u << 10);
  EXPECT_EQ(resolve_segment_bytes(g, multilane, 5), 5u);
  EXPECT_EQ(build_plan(g, Algorithm::kCirculant, 0, 64 << 20).block_bytes, 200u << 10)
      << "the topology's segment is circulant's block";
}

}  // namespace
}  // namespace gridbcast::topology
