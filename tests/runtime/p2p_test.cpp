// Point-to-point messages and subgroup broadcasts over real loopback sockets,
// ranks as threads: what libgridbcast_mpi builds MPI communicators on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>
#include <tuple>

#include "lanes/wire.hpp"
#include "runtime/buffer.hpp"
#include "runtime/subgrid.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/verify.hpp"

namespace gridbcast::runtime {
namespace {

using testing::make_grid;
using testing::pattern;
using testing::Ranks;

TEST(Messages, TagsContextsWildcardsAndOrderPerSender) {
  const auto grid = make_grid({3, 2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    const int me = c.rank(), p = c.size();
    // Everyone sends three messages to rank 0 in context 7 (tags 1, 2, 1) and
    // one in context 8; rank 0 picks them out of order by tag and context.
    if (me != 0) {
      for (int k = 0; k < 3; ++k) {
        const std::int64_t v = me * 100 + k;
        c.send(0, 7, k == 1 ? 2 : 1, &v, sizeof v);
      }
      const std::int64_t v = -me;
      c.send(0, 8, 1, &v, sizeof v);
    } else {
      for (int src = 1; src < p; ++src) {
        std::int64_t v = 0;
        Received r = c.receive(src, 8, 1, &v, sizeof v);  // the last one sent first
        EXPECT_EQ(v, -src);
        EXPECT_EQ(r.source, src);
        r = c.receive(src, 7, 2, &v, sizeof v);
        EXPECT_EQ(v, src * 100 + 1);
        r = c.receive(src, 7, 1, &v, sizeof v);  // tag 1 in the order sent
        EXPECT_EQ(v, src * 100 + 0);
        r = c.receive(src, 7, std::nullopt, &v, sizeof v);
        EXPECT_EQ(v, src * 100 + 2);
        EXPECT_EQ(r.tag, 1);
        EXPECT_EQ(r.bytes, sizeof v);
      }
    }
    // Any source: rank 0 collects one message from each other rank.
    if (me != 0) {
      const int v = me;
      c.send(0, 9, 5, &v, sizeof v);
    } else {
      std::vector<int> seen;
      for (int k = 1; k < p; ++k) {
        int v = 0;
        const Received r = c.receive(std::nullopt, 9, std::nullopt, &v, sizeof v);
        EXPECT_EQ(r.source, v);
        EXPECT_EQ(r.tag, 5);
        seen.push_back(v);
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int> want(static_cast<size_t>(p - 1));
      std::iota(want.begin(), want.end(), 1);
      EXPECT_EQ(seen, want);
    }
  });
}

TEST(Messages, NonBlockingSendsKeepTheirOrderAndReceivesMatchInPostingOrder) {
  // Rank 0 starts six sends to rank 1 with one tag, large and small mixed,
  // before driving any; rank 1 posts two receives late, probes the third
  // (which may still be arriving), then receives the rest blocking and
  // non-blocking. Then both exchange 8 MiB with isend first.
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    const std::uint64_t sizes[6] = {8, 3u << 20, 8, 8, 1u << 20, 8};
    if (c.rank() == 0) {
      std::vector<std::vector<std::byte>> out;
      std::vector<P2pRequest> reqs;
      for (int i = 0; i < 6; ++i) out.push_back(pattern(sizes[i], static_cast<std::uint64_t>(i)));
      for (int i = 0; i < 6; ++i) reqs.push_back(c.isend(1, 3, 4, out[i].data(), sizes[i]));
      c.wait(reqs, reqs.size());
      for (const auto& r : reqs) EXPECT_TRUE(c.state(r).complete && c.state(r).error.empty());
    } else {
      std::vector<std::vector<std::byte>> in(6, std::vector<std::byte>(4u << 20));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto r0 = c.irecv(0, 3, 4, in[0].data(), in[0].size());
      auto r1 = c.irecv(std::nullopt, 3, std::nullopt, in[1].data(), in[1].size());
      c.wait({r0, r1}, 2);
      EXPECT_EQ(c.state(r1).received.bytes, sizes[1]);
      const auto probed = c.probe(0, 3, 4, true);
      ASSERT_TRUE(probed);
      EXPECT_EQ(probed->bytes, sizes[2]);
      c.receive(0, 3, 4, in[2].data(), in[2].size());
      auto r3 = c.irecv(0, 3, 4, in[3].data(), in[3].size());
      c.receive(0, 3, 4, in[4].data(), in[4].size());  // after r3: the fifth message
      auto r5 = c.irecv(0, 3, 4, in[5].data(), in[5].size());
      while (!c.state(r5).complete) c.poll();
      c.wait({r3}, 1);
      for (int i = 0; i < 6; ++i)
        EXPECT_EQ(std::memcmp(in[static_cast<size_t>(i)].data(),
                              pattern(sizes[i], static_cast<std::uint64_t>(i)).data(), sizes[i]),
                  0)
            << "message " << i;
      EXPECT_FALSE(c.probe(std::nullopt, 3, std::nullopt, false));
    }
    const int peer = 1 - c.rank();
    const auto out = pattern(8u << 20, 50 + static_cast<std::uint64_t>(c.rank()));
    std::vector<std::byte> in(8u << 20);
    auto s = c.isend(peer, 5, 0, out.data(), out.size());
    auto r = c.irecv(peer, 5, 0, in.data(), in.size());
    c.wait({s, r}, 2);
    EXPECT_EQ(in, pattern(8u << 20, 50 + static_cast<std::uint64_t>(peer)));
  });
}

TEST(Messages, TruncationReportsTheFullLengthAndSelfSendsQueue) {
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    const auto data = pattern(1000, 3);
    if (c.rank() == 0) {
      c.send(1, 1, 0, data.data(), data.size());
      c.send(1, 1, 0, data.data(), 0);  // empty messages are messages too
    } else {
      std::vector<std::byte> small(10);
      const Received r = c.receive(0, 1, 0, small.data(), small.size());
      EXPECT_EQ(r.bytes, 1000u);
      EXPECT_EQ(std::memcmp(small.data(), data.data(), small.size()), 0);
      EXPECT_EQ(c.receive(0, 1, 0, small.data(), small.size()).bytes, 0u);
    }
    const int me = c.rank();
    c.send(me, 2, 4, &me, sizeof me);
    int back = -1;
    EXPECT_EQ(c.receive(me, 2, 4, &back, sizeof back).source, me);
    EXPECT_EQ(back, me);
  });
}

TEST(Messages, SimultaneousLargeExchangeDoesNotDeadlock) {
  // Both ranks start a 48 MiB send before receiving (an Isend, as MPI requires
  // for an exchange: a blocking send of a large message waits for its receive,
  // as in MPICH and Open MPI). Each envelope waits for the other's receive.
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    const std::uint64_t size = 48u << 20;
    const int peer = 1 - c.rank();
    const auto mine = pattern(size, static_cast<std::uint64_t>(c.rank()) + 10);
    const P2pRequest send = c.isend(peer, 3, 0, mine.data(), size);
    std::vector<std::byte> got(size);
    EXPECT_EQ(c.receive(peer, 3, 0, got.data(), size).bytes, size);
    c.wait({send}, 1);
    EXPECT_TRUE(got == pattern(size, static_cast<std::uint64_t>(peer) + 10));
  });
}

// The program of issue 26: rank 0 starts a 100 MiB send to rank 1 and enters a
// barrier; rank 1 enters the barrier, then receives. Eagerly, the barrier's
// message from rank 0 sat behind the 100 MiB rank 1 would not receive until
// the barrier was done: a hang. With the rendezvous only an envelope is ahead
// of it. Also: 4,097 small sends outstanding before the barrier (more than the
// old 4,096-message budget), sends both ways at once, any-source receives.
TEST(Messages, ALargeSendBeforeABarrierCompletes) {
  for (const int n : {2, 4, 8}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    const auto grid = make_grid({n});
    Ranks ranks(grid);
    // Sanitizers run ~10x slower: a rank busy checking 100 MiB there does not
    // serve the handshakes of the others within their deadline.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const std::uint64_t size = 8u << 20;
#else
    const std::uint64_t size = 100u << 20;
#endif
    ranks.run([&](Communicator& c) {
      // A barrier as the MPI library makes one from messages (its own context).
      const auto barrier = [&c] {
        std::byte b{};
        if (c.rank() == 0) {
          for (int r = 1; r < c.size(); ++r) c.receive(std::nullopt, 99, 0, &b, 0);
          for (int r = 1; r < c.size(); ++r) c.send(r, 99, 1, &b, 0);
        } else {
          c.send(0, 99, 0, &b, 0);
          c.receive(0, 99, 1, &b, 0);
        }
      };
      std::vector<std::byte> buf(size);
      std::vector<P2pRequest> sends;
      if (c.rank() == 0) {
        const auto data = pattern(size, 5);
        sends.push_back(c.isend(1, 7, 1, data.data(), size));
        static std::vector<int> values(4097);  // a send's buffer stays until it completes
        for (int i = 0; i < 4097; ++i) {
          values[static_cast<size_t>(i)] = i;
          sends.push_back(c.isend(1, 7, 2, &values[static_cast<size_t>(i)], sizeof(int)));
        }
        barrier();
        c.wait(sends, sends.size());
      } else if (c.rank() == 1) {
        const auto back = pattern(size, 6);
        sends.push_back(c.isend(0, 7, 3, back.data(), size));  // the other way at once
        barrier();
        EXPECT_EQ(c.receive(std::nullopt, 7, 1, buf.data(), size).bytes, size);
        EXPECT_TRUE(std::vector<std::byte>(buf.begin(), buf.end()) == pattern(size, 5));
        for (int i = 0; i < 4097; ++i) {
          int got = -1;
          c.receive(0, 7, 2, &got, sizeof got);
          EXPECT_EQ(got, i);
        }
        c.wait(sends, sends.size());
      } else {
        barrier();
      }
      if (c.rank() == 0) {
        EXPECT_EQ(c.receive(1, 7, 3, buf.data(), size).bytes, size);
        EXPECT_TRUE(std::vector<std::byte>(buf.begin(), buf.end()) == pattern(size, 6));
      }
    });
  }
}

TEST(Messages, OneGibibytePlusInOneFrame) {
  const std::uint64_t size = lanes::kMaxFrameBytes + 4099;
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    auto buf = MappedBuffer::anonymous(size);
    if (c.rank() == 0) {
      fill_pattern(buf.data(), size, 5);
      c.send(1, 1, 1, buf.data(), size);
    } else {
      EXPECT_EQ(c.receive(0, 1, 1, buf.data(), size).bytes, size);
      auto want = MappedBuffer::anonymous(size);
      fill_pattern(want.data(), size, 5);
      EXPECT_EQ(std::memcmp(buf.data(), want.data(), size), 0);
    }
  });
}

TEST(Messages, TheIdleHookRunsWhileAReceiveWaits) {
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  std::atomic<int> calls{0};
  ranks.at(1).set_idle_hook([&] { ++calls; }, std::chrono::milliseconds(1));
  ranks.run([&](Communicator& c) {
    int v = 0;
    if (c.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      v = 42;
      c.send(1, 1, 0, &v, sizeof v);
    } else {
      c.receive(0, 1, 0, &v, sizeof v);
      EXPECT_EQ(v, 42);
    }
  });
  EXPECT_GT(calls.load(), 10);
  ranks.at(1).set_idle_hook(nullptr);
}

TEST(Groups, EveryAlgorithmAndRootOnPermutedSubgroups) {
  const auto grid = make_grid({4, 3, 2}, 2);
  CommOptions options;
  options.timeout = std::chrono::seconds(5);
  Ranks ranks(grid, options);
  // Group rank order is not world order; members spread over sites 0 and 2,
  // so the restricted topology has to re-route around site 1.
  const std::vector<int> odd{7, 1, 3, 8}, all{8, 7, 6, 5, 4, 3, 2, 1, 0};
  ranks.run([&](Communicator& c) {
    const int me = c.rank();
    const bool in_odd = std::find(odd.begin(), odd.end(), me) != odd.end();
    if (in_odd) c.define_group(100, odd);
    c.define_group(200, all);
    std::vector<std::byte> buf(300001);
    std::uint64_t seed = 1;
    for (const auto& info : topology::algorithms()) {
      for (int root = 0; root < static_cast<int>(odd.size()); ++root, ++seed) {
        if (!in_odd) continue;
        if (odd[static_cast<size_t>(root)] == me)
          fill_pattern(buf.data(), buf.size(), seed);
        else
          std::memset(buf.data(), 0x5a, buf.size());
        c.bcast_group(100, buf.data(), buf.size(), root, info.id);
        EXPECT_TRUE(buf == pattern(buf.size(), seed))
            << info.name << " root " << root << " rank " << me;
      }
      // Interleaved with the world and the reversed group.
      const int root = static_cast<int>(seed % 9);
      if (all[static_cast<size_t>(root)] == me) fill_pattern(buf.data(), buf.size(), seed);
      c.bcast_group(200, buf.data(), buf.size(), root, info.id);
      EXPECT_TRUE(buf == pattern(buf.size(), seed)) << info.name << " reversed group";
      ++seed;
      if (me == 4) fill_pattern(buf.data(), 777, seed);
      c.bcast(buf.data(), 777, 4, info.id);
      EXPECT_EQ(std::memcmp(buf.data(), pattern(777, seed).data(), 777), 0);
      ++seed;
    }
    if (in_odd) c.forget_group(100);
    EXPECT_THROW(c.bcast_group(100, buf.data(), 1, 0), std::invalid_argument);
    EXPECT_THROW(c.define_group(200, all), std::invalid_argument);
  });
}

TEST(Groups, ARankMustBeAMemberAndListedOnce) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  EXPECT_THROW(ranks.at(0).define_group(1, {1, 2}), std::invalid_argument);
  EXPECT_THROW(ranks.at(0).define_group(1, {0, 0, 1}), std::invalid_argument);
  EXPECT_THROW(ranks.at(0).define_group(1, {0, 5}), std::invalid_argument);
}

TEST(Subgrid, DropsEmptySitesAndSummarisesPathsThroughThem) {
  auto grid = make_grid({2, 2, 2}, 4);  // s0 -- s1 -- s2
  grid.wan[0].latency_s = 0.010;
  grid.wan[1].latency_s = 0.020;
  grid.wan[1].streams = 2;
  grid.wan[1].congestion = "bbr";
  grid.congestion = "cubic";
  grid.pace_lanes = true;
  const auto sub = restrict_grid(grid, {0, 1, 5});
  EXPECT_TRUE(sub.pace_lanes);
  ASSERT_EQ(sub.size(), 3);
  ASSERT_EQ(sub.sites.size(), 2u);
  EXPECT_EQ(sub.sites[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(sub.sites[1].ranks, (std::vector<int>{2}));
  EXPECT_EQ(sub.nodes[2].name, grid.nodes[5].name);
  ASSERT_EQ(sub.wan.size(), 1u);
  EXPECT_DOUBLE_EQ(sub.wan[0].latency_s, 0.030);
  EXPECT_EQ(sub.streams_between(0, 2), 2);
  EXPECT_EQ(sub.congestion_between(0, 2), "bbr");
  EXPECT_EQ(sub.congestion_between(0, 1), "cubic");
  for (const auto& info : topology::algorithms())
    for (int root = 0; root < 3; ++root) {
      const auto plan = topology::build_plan(sub, info.id, root, 100003);
      EXPECT_TRUE(topology::verify_plan(sub, plan).ok()) << info.name;
    }
  EXPECT_THROW(restrict_grid(grid, {2, 1}), std::invalid_argument);
  EXPECT_THROW(restrict_grid(grid, {0, 6}), std::invalid_argument);
}

// A WAN link's max_rate holds for everything that crosses it, also where the
// subgrid's links stand for paths through it: a hub site with nobody left
// between three others gives three links through the hub's links, each a
// part of the limits, so no plan's paces over one real link add up past it.
TEST(Subgrid, LinksThroughOneLimitedLinkShareItsLimit) {
  auto grid = make_grid({1, 1, 1, 1}, 1);
  ASSERT_EQ(grid.wan.size(), 3u);
  for (int i = 0; i < 3; ++i) {  // a star: s0 the hub, s1, s2, s3 around it
    grid.wan[static_cast<size_t>(i)].site_a = 0;
    grid.wan[static_cast<size_t>(i)].site_b = i + 1;
  }
  ASSERT_EQ(grid.wan[0].site_b, 1);
  grid.wan[0].max_rate_bps = 90e6;  // s0 - s1
  // Without the hub, s1's paths to s2 and to s3 both cross s1 - s0.
  const auto sub = restrict_grid(grid, {1, 2, 3});
  ASSERT_EQ(sub.sites.size(), 3u);
  double parts = 0;
  for (const auto& l : sub.wan)
    if (l.max_rate_bps > 0) parts += l.max_rate_bps;
  EXPECT_GT(parts, 0);
  EXPECT_LE(parts, 90e6 * (1 + 1e-12));
  for (const auto& info : topology::algorithms()) {
    if (info.id == topology::Algorithm::kMulticast) continue;  // refused under a limit
    const auto plan = topology::build_plan(sub, info.id, 0, 1 << 20);
    std::map<std::tuple<int, int, int, int>, int> streams;
    for (const auto& t : plan.transfers) {
      int& n = streams[{t.from, t.to, t.lane_from, t.lane_to}];
      n = std::max(n, t.streams);
    }
    double leaving = 0;  // everything paced out of s0, all of it over s0 - s1
    for (const auto& p : topology::link_paces(sub, plan))
      if (sub.site_of(p.from) == 0 && sub.site_of(p.to) != 0)
        leaving += p.bytes_per_second * streams.at({p.from, p.to, p.lane_from, p.lane_to});
    EXPECT_GT(leaving, 0) << info.name;
    EXPECT_LE(leaving, 90e6 * topology::kPacedPayloadShare / 8 * (1 + 1e-12)) << info.name;
  }
}

}  // namespace
}  // namespace gridbcast::runtime
