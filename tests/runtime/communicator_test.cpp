// Broadcasts over real loopback sockets, ranks as threads: every algorithm,
// several shapes, roots and sizes, byte-exact at every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/buffer.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"

namespace gridbcast::runtime {
namespace {

using testing::bcast_and_check;
using testing::make_grid;
using testing::Ranks;
using topology::Algorithm;

std::vector<int> split(int nodes, int sites) {
  std::vector<int> counts;
  for (int s = 0; s < sites; ++s) counts.push_back(nodes / sites + (s < nodes % sites ? 1 : 0));
  return counts;
}

class Shapes : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Shapes, EveryAlgorithmRootAndSizeIsByteExact) {
  const auto [nodes, sites] = GetParam();
  const auto grid = make_grid(split(nodes, sites), 3);
  Ranks ranks(grid);
  const std::uint64_t sizes[] = {0, 1, 4097, (8u << 20) + 5};
  std::set<int> roots{0, nodes / 2, nodes - 1};
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf((8u << 20) + 5);
    std::uint64_t seed = 1;
    for (const auto& info : topology::algorithms())
      for (int root : roots)
        for (std::uint64_t size : sizes) bcast_and_check(c, buf, size, root, info.id, seed++);
  });
}

// Node counts {1, 2, 3, 7, 8, 15, 17} over 1 to 3 sites; a site holds at least
// one node, so 1 node over 2 sites and the like do not exist.
std::vector<std::tuple<int, int>> shapes() {
  std::vector<std::tuple<int, int>> out;
  for (int nodes : {1, 2, 3, 7, 8, 15, 17})
    for (int sites = 1; sites <= std::min(nodes, 3); ++sites) out.emplace_back(nodes, sites);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Loopback, Shapes, ::testing::ValuesIn(shapes()), [](const auto& p) {
  return std::to_string(std::get<0>(p.param)) + "nodes_" + std::to_string(std::get<1>(p.param)) +
         "sites";
});

TEST(Communicator, TwoHundredBackToBackBroadcastsWithRandomSizesRootsAndAlgorithms) {
  const auto grid = make_grid({4, 3}, 3);
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::mt19937_64 rng(42);  // same sequence on every rank
    std::vector<std::byte> buf(1 << 20);
    const auto& algos = topology::algorithms();
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t size = rng() % (buf.size() + 1);
      const int root = static_cast<int>(rng() % static_cast<std::uint64_t>(grid.size()));
      const auto algo = algos[rng() % algos.size()].id;
      bcast_and_check(c, buf, size, root, algo, static_cast<std::uint64_t>(i) + 100);
    }
  });
}

// Every rank prices the candidates itself and all run the model's choice
// (a rank that chose otherwise would wait for bytes nobody sends).
TEST(Communicator, AutomaticSelectionRunsTheModelsChoice) {
  const auto grid = make_grid({3, 3});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(1 << 20);
    EXPECT_EQ(c.bcast(buf.data(), 100, 0).algorithm, topology::select_algorithm(grid, 0, 100));
    EXPECT_EQ(c.bcast(buf.data(), buf.size(), 4).algorithm, Algorithm::kMultilane);
  });
}

// A broadcast that is one part of a back-to-back stream (a file's windows)
// takes the segment the model chooses for the whole stream, whose pipeline
// fills once; alone it takes its own. Byte-exact either way; circulant keeps
// its plan's blocks, which its transfers are cut by.
TEST(Communicator, APartOfAStreamTakesTheStreamsSegment) {
  const auto grid = make_grid({3, 3});
  const std::uint64_t part = 1 << 20, stream = 64ull << 20;
  auto plan_of = [&](Algorithm a, std::uint64_t bytes) {
    return topology::build_plan(grid, a, 0, bytes);
  };
  const std::uint64_t own =
      topology::resolve_segment_bytes(grid, plan_of(Algorithm::kMultilane, part), 0);
  // A stream's windows take the store-and-forward model's segment for the
  // whole stream (runtime/communicator.cpp says why).
  const std::uint64_t streamed = topology::resolve_segment_bytes(
      grid, plan_of(Algorithm::kMultilane, stream), 0, topology::store_and_forward_model());
  ASSERT_NE(own, streamed) << "the model must choose apart for these sizes, or this shows nothing";
  const std::uint64_t block = plan_of(Algorithm::kCirculant, part).block_bytes;
  ASSERT_NE(block, 0u);
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(part), want(part);
    std::uint64_t seed = 40;
    for (const auto& [algo, with, expect] :
         {std::tuple{Algorithm::kMultilane, std::uint64_t{0}, own},
          std::tuple{Algorithm::kMultilane, stream, streamed},
          std::tuple{Algorithm::kCirculant, stream, block}}) {
      ++seed;
      if (c.rank() == 0)
        runtime::fill_pattern(buf.data(), part, seed);
      else
        std::memset(buf.data(), 0xA5, part);
      EXPECT_EQ(c.bcast(buf.data(), part, 0, algo, with).segment_bytes, expect)
          << topology::algorithm_name(algo) << " in a stream of " << with;
      runtime::fill_pattern(want.data(), part, seed);
      EXPECT_EQ(std::memcmp(buf.data(), want.data(), part), 0) << "rank " << c.rank();
    }
  });
}

// prepare() makes a broadcast's connections ahead; the broadcast then uses
// them. Started at once after it, the broadcast waits for the connections
// being made instead of making its own, which the peers would refuse as
// duplicates (and count); started after a round trip, it finds them made.
TEST(Communicator, LinksMadeAheadAreTheBroadcastsOwn) {
  const auto grid = make_grid({3, 3});
  const std::uint64_t part = 1 << 20;
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(part);
    c.prepare(part, 0, Algorithm::kMultilane);
    bcast_and_check(c, buf, part, 0, Algorithm::kMultilane, 51);
    c.prepare(part, 4, Algorithm::kMultilane);
    std::byte token{};
    c.bcast(&token, 1, 4, Algorithm::kBinomial);
    bcast_and_check(c, buf, part, 4, Algorithm::kMultilane, 52);
    EXPECT_EQ(c.rejected_connections(), 0u) << "rank " << c.rank();
  });
}

TEST(Communicator, OneNicNodesUseTwoSocketsOnOneNic) {
  const auto grid = make_grid({5, 4}, 2, 1);
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(3 << 20);
    bcast_and_check(c, buf, buf.size(), 2, Algorithm::kMultilane, 9);
  });
}

// defaults.pace_lanes: a multilane broadcast's links are held to their part
// of the declared NICs (topology/plan/pacing.hpp), so on loopback, which is far
// faster, it takes at least the time its busiest link needs at its pace. Only
// a lower bound is checked: pacing guarantees it, a busy machine only adds.
TEST(Communicator, PacedLanesTakeAtLeastTheirLinksTimeAtTheirPace) {
  auto grid = make_grid({2, 1}, 2, 1);
  for (auto& n : grid.nodes) n.nics[0].bandwidth_bps = 24e6;  // two lanes: 12 Mbit/s each
  grid.pace_lanes = true;
  ASSERT_EQ(grid.lane_count(), 2);
  const std::uint64_t size = 3 << 20;
  const topology::Plan plan = topology::build_plan(grid, Algorithm::kMultilane, 0, size);
  const auto paces = topology::link_paces(grid, plan);
  ASSERT_FALSE(paces.empty());
  // Linux paces a connection only after its first 10 segments, which on
  // loopback are up to 64 KiB each: those go unpaced.
  const double unpaced = 10.0 * 65536;
  std::map<std::tuple<int, int, int, int>, double> bytes;  // per stream of each link
  for (const auto& t : plan.transfers)
    bytes[{t.from, t.to, t.lane_from, t.lane_to}] += static_cast<double>(t.length) / t.streams;
  double floor = 0;
  for (const auto& [l, b] : bytes)
    floor = std::max(floor, (b - unpaced) / topology::pace_of(paces, std::get<0>(l), std::get<1>(l),
                                                              std::get<2>(l), std::get<3>(l)));
  ASSERT_GT(floor, 0.5);  // 1.5 MiB on each of the root's lanes at 12 Mbit/s

  Ranks ranks(grid);
  std::vector<double> took(3);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(size);
    const auto start = std::chrono::steady_clock::now();
    bcast_and_check(c, buf, size, 0, Algorithm::kMultilane, 21);
    took[static_cast<size_t>(c.rank())] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  EXPECT_GE(*std::max_element(took.begin(), took.end()), floor);
}

// Cut-through (runtime/executor.cpp): a rank forwards a segment's bytes as
// they land, not once the whole segment is in. A chain of three with one
// segment for the whole message and every node's sending paced (about two
// seconds a hop): rank 2 holds bytes while rank 1 still waits for the rest
// of that segment, which store-and-forward never allows (rank 1 would send
// nothing before it held all of it). An order of events, not a time.
TEST(Communicator, ASegmentIsForwardedWhileItIsStillArriving) {
  auto grid = make_grid({3}, 1, 1);
  grid.max_rate_bps = 16e6;  // each node sends at most 2 MB/s
  const std::uint64_t size = 4 << 20;
  const topology::Plan plan = topology::build_plan(grid, Algorithm::kChain, 0, size);
  ASSERT_EQ(plan.transfers.size(), 2u);
  ASSERT_EQ(plan.transfers[1].from, 1);
  ASSERT_EQ(plan.transfers[1].to, 2);
  CommOptions options;
  options.segment_bytes = size;  // one frame on each link
  Ranks ranks(grid, options);
  std::atomic<bool> done{false};
  std::atomic<bool> overlapped{false};
  std::thread watch([&] {
    while (!done.load()) {
      // Rank 2 first: if it holds bytes and rank 1, read after, still
      // misses some, both held at the first reading (counts only grow).
      const std::uint64_t two = ranks.at(2).progress().bytes_in;
      const std::uint64_t one = ranks.at(1).progress().bytes_in;
      if (two > 0 && one < size) overlapped = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  try {
    ranks.run([&](Communicator& c) {
      std::vector<std::byte> buf(size);
      bcast_and_check(c, buf, size, 0, Algorithm::kChain, 33);
    });
  } catch (...) {
    done = true;
    watch.join();
    throw;
  }
  done = true;
  watch.join();
  EXPECT_TRUE(overlapped.load());
}

// What the kernel says of each outgoing broadcast link (the launcher finds
// stragglers from it, job/straggler.hpp): one sample per link of the plan
// from this rank, its streams counted, at least the plan's bytes
// acknowledged on it, nothing for a peer it never sent to. Read from another
// thread all through the broadcast, as the rank's heartbeat thread does.
TEST(Communicator, LinkSamplesCountWhatEachPeerAcknowledgedOnEachLinkOfThePlan) {
  const auto grid = make_grid({4, 3}, 3);
  const std::uint64_t size = 8 << 20;
  const topology::Plan plan = topology::build_plan(grid, Algorithm::kMultilane, 0, size);
  struct Link {
    std::uint64_t bytes = 0;
    int streams = 0;
  };
  std::map<std::tuple<int, int, int, int>, Link> planned;  // from, to, lane_from, lane_to
  for (const auto& t : plan.transfers) {
    auto& l = planned[{t.from, t.to, t.lane_from, t.lane_to}];
    l.bytes += t.length;
    l.streams = std::max(l.streams, t.streams);
  }
  // Segments that give every stream of a WAN link some (the model's own
  // may be a half, one frame on one stream).
  CommOptions options;
  options.segment_bytes = 256 << 10;
  Ranks ranks(grid, options);
  std::vector<std::vector<runtime::LinkSample>> after(static_cast<size_t>(grid.size()));
  std::atomic<bool> stop{false};
  std::atomic<int> sampled{0};
  ranks.run([&](Communicator& c) {
    if (c.rank() == 0) {
      std::thread sampler([&] {
        while (!stop) {
          for (int r = 0; r < grid.size(); ++r) (void)ranks.comm(r).link_samples();
          ++sampled;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      });
      std::vector<std::byte> buf(size);
      bcast_and_check(c, buf, size, 0, Algorithm::kMultilane, 5);
      stop = true;
      sampler.join();
    } else {
      std::vector<std::byte> buf(size);
      bcast_and_check(c, buf, size, 0, Algorithm::kMultilane, 5);
    }
  });
  EXPECT_GT(sampled.load(), 0);
  // A send ends when the kernel has the bytes; their acknowledgements follow.
  for (int r = 0; r < grid.size(); ++r) {
    for (int i = 0; i < 500; ++i) {
      after[static_cast<size_t>(r)] = ranks.comm(r).link_samples();
      bool all = true;
      for (const auto& s : after[static_cast<size_t>(r)]) {
        const auto it = planned.find({r, s.peer, s.lane_from, s.lane_to});
        all = all && (it == planned.end() || s.bytes_acked >= it->second.bytes);
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (int r = 0; r < grid.size(); ++r) {
    std::map<std::tuple<int, int, int, int>, runtime::LinkSample> got;
    for (const auto& s : after[static_cast<size_t>(r)]) {
      EXPECT_TRUE(got.emplace(std::tuple{r, s.peer, s.lane_from, s.lane_to}, s).second)
          << "rank " << r << " sampled a link twice";
    }
    for (const auto& [key, s] : got) {
      const auto it = planned.find(key);
      ASSERT_NE(it, planned.end())
          << "rank " << r << " has a link to " << s.peer << " the plan does not";
      EXPECT_EQ(s.streams, it->second.streams);
      EXPECT_GE(s.bytes_acked, it->second.bytes) << "rank " << r << " to " << s.peer;
    }
    for (const auto& [key, l] : planned) {
      if (std::get<0>(key) != r) continue;
      EXPECT_TRUE(got.count(key)) << "rank " << r << " has no sample of its link to "
                                  << std::get<1>(key);
    }
  }
}

// k lanes (issue 14): four-NIC nodes open four lanes by themselves; odd and
// single lane counts put two halves on one lane; every rank gets every byte.
TEST(Communicator, KLanesFromOneToEightAreByteExact) {
  for (int k : {4, 1, 3, 8}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    auto grid = make_grid({4, 3}, 2, 4);
    if (k != 4) grid.lanes = k;
    ASSERT_EQ(grid.lane_count(), k);
    Ranks ranks(grid);
    for (int r = 0; r < grid.size(); ++r)
      for (int lane = 0; lane < runtime::kMaxLanes; ++lane)
        EXPECT_EQ(ranks.port(r, lane) != 0, lane < k) << "rank " << r << " lane " << lane;
    ranks.run([&](Communicator& c) {
      std::vector<std::byte> buf((2u << 20) + 7);
      std::uint64_t seed = 50;
      for (int root : {0, 5})
        for (std::uint64_t size :
             {std::uint64_t{1}, std::uint64_t{4097}, std::uint64_t{buf.size()}})
          bcast_and_check(c, buf, size, root, Algorithm::kMultilane, seed++);
    });
  }
}

TEST(Communicator, AnEndpointTableForAnotherLaneCountIsRefused) {
  const auto grid = make_grid({2}, 1, 4);
  Communicator c(grid, 0, new_credentials(), {});
  c.listen();
  EndpointTable two_lanes(2, LanePorts{1000, 1001});
  try {
    c.set_endpoints(two_lanes, new_run_nonce());
    FAIL() << "a table of two-lane ranks was taken for a four-lane grid";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 lane 2 has no port"), std::string::npos)
        << e.what();
  }
}

TEST(Communicator, ThreeGibibytesBetweenTwoRanksCrossOffsetsPast2To31) {
  const std::uint64_t size = 3ull << 30;
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    auto buf = MappedBuffer::anonymous(size);
    if (c.rank() == 0) fill_pattern(buf.data(), size, 77);
    c.bcast(buf.data(), size, 0, Algorithm::kMultilane);
    if (c.rank() == 1) {
      // Compare in 64 MiB pieces so the check needs no second 3 GiB buffer.
      const std::uint64_t piece = 64ull << 20;
      auto want = MappedBuffer::anonymous(size);
      fill_pattern(want.data(), size, 77);
      for (std::uint64_t off = 0; off < size; off += piece)
        ASSERT_EQ(std::memcmp(buf.data() + off, want.data() + off, std::min(piece, size - off)), 0)
            << "offset " << off;
    }
  });
}

}  // namespace
}  // namespace gridbcast::runtime
