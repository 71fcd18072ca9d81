// The multicast algorithm over loopback (which carries IPv4 multicast inside
// the host, no privileges needed): ranks as threads with real UDP and TCP
// sockets. Datagrams lost on purpose (the sender skips them), all of them
// lost, a rank that enters late, groups and the world taking turns, strangers
// flooding the group with forged datagrams: every copy stays byte-exact.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "lanes/datagram.hpp"
#include "lanes/multicast.hpp"
#include "runtime/buffer.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::runtime {
namespace {

using testing::bcast_and_check;
using testing::make_grid;
using testing::Ranks;
using topology::Algorithm;

constexpr std::uint64_t kMiB = 1 << 20;

CommOptions sending_only(std::function<bool(std::uint32_t)> include) {
  CommOptions o;
  o.multicast_include = std::move(include);
  return o;
}

TEST(Multicast, EveryShapeRootAndSizeIsByteExact) {
  for (const auto& shape : std::vector<std::vector<int>>{{2}, {5}, {1, 3}, {4, 3}, {3, 1, 2}}) {
    const auto grid = make_grid(shape);
    Ranks ranks(grid);
    ranks.run([&](Communicator& c) {
      std::vector<std::byte> buf(3 * kMiB + 11);
      std::uint64_t seed = 7;
      for (int root : {0, grid.size() - 1})
        for (std::uint64_t size :
             {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{65537}, std::uint64_t{buf.size()}})
          bcast_and_check(c, buf, size, root, Algorithm::kMulticast, seed++);
    });
  }
}

TEST(Multicast, DatagramsBringBytesBeforeTheRingDoes) {
  // Ranks 2 and 3 are two and three TCP hops from the root, one datagram away.
  const auto grid = make_grid({4});
  Ranks ranks(grid);
  std::atomic<std::uint64_t> first_by_datagram{0};
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(8 * kMiB);
    for (int i = 0; i < 3; ++i) {
      if (c.rank() == 0) fill_pattern(buf.data(), buf.size(), 40 + i);
      const BcastInfo info = c.bcast(buf.data(), buf.size(), 0, Algorithm::kMulticast);
      if (c.rank() == 0) {
        EXPECT_EQ(info.multicast_bytes_out, buf.size());
      }
      EXPECT_LE(info.multicast_bytes_in, buf.size());
      first_by_datagram += info.multicast_bytes_in;
      std::vector<std::byte> want(buf.size());
      fill_pattern(want.data(), want.size(), 40 + i);
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
    }
  });
  EXPECT_GT(first_by_datagram.load(), 0u);
}

TEST(Multicast, EveryOtherDatagramLostStillByteExact) {
  const auto grid = make_grid({4, 3});
  Ranks ranks(grid, sending_only([](std::uint32_t i) { return i % 2 == 1; }));
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(2 * kMiB + 3);
    std::uint64_t seed = 100;
    for (int root : {0, 5})
      bcast_and_check(c, buf, buf.size(), root, Algorithm::kMulticast, seed++);
  });
}

TEST(Multicast, EveryDatagramLostTheRingAloneDelivers) {
  const auto grid = make_grid({5, 2});
  Ranks ranks(grid, sending_only([](std::uint32_t) { return false; }));
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(kMiB + 1);
    for (int root : {0, 3, 6}) {
      if (c.rank() == root) fill_pattern(buf.data(), buf.size(), 200 + root);
      const BcastInfo info = c.bcast(buf.data(), buf.size(), root, Algorithm::kMulticast);
      EXPECT_EQ(info.multicast_bytes_in, 0u) << "rank " << c.rank();
      std::vector<std::byte> want(buf.size());
      fill_pattern(want.data(), want.size(), 200 + root);
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
    }
  });
}

// The site's `mtu` sets the fragment size: 1 MiB at 1500 bytes is 1 MiB /
// fragment_bytes_for_mtu(1500) datagrams; without it, on loopback, a few
// 64 KiB ones. The sender asks `include` once per fragment.
TEST(Multicast, TheSiteMtuSetsTheFragmentSize) {
  for (const int mtu : {0, 1500, 9000}) {
    auto grid = make_grid({3});
    grid.sites[0].multicast.mtu = mtu;
    std::atomic<std::uint32_t> fragments{0};
    Ranks ranks(grid, sending_only([&](std::uint32_t i) {
                  std::uint32_t seen = fragments.load();
                  while (i + 1 > seen && !fragments.compare_exchange_weak(seen, i + 1)) {
                  }
                  return true;
                }));
    ranks.run([&](Communicator& c) {
      std::vector<std::byte> buf(kMiB);
      bcast_and_check(c, buf, buf.size(), 0, Algorithm::kMulticast, 500 + mtu);
    });
    const std::uint32_t per =
        mtu > 0
            ? lanes::fragment_bytes_for_mtu(static_cast<size_t>(mtu))
            : lanes::fragment_bytes_for_mtu(lanes::interface_mtu(grid.nodes[0].nics[0].address));
    EXPECT_EQ(fragments.load(), (kMiB + per - 1) / per) << "mtu " << mtu;
  }
}

TEST(Multicast, ARankThatEntersLateStillCatchesUp) {
  const auto grid = make_grid({4});
  Ranks ranks(grid);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(kMiB + 77);
    std::uint64_t seed = 300;
    for (int i = 0; i < 3; ++i) {
      // The last rank of the ring comes 200 ms after the root has sent.
      if (c.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      bcast_and_check(c, buf, buf.size(), 0, Algorithm::kMulticast, seed++);
    }
  });
}

TEST(Multicast, GroupsAndTheWorldTakeTurnsWithoutMixingBroadcasts) {
  const auto grid = make_grid({4, 3});
  Ranks ranks(grid);
  const std::vector<int> members{5, 0, 2, 3};  // group rank 0 is world rank 5
  ranks.run([&](Communicator& c) {
    const bool member = std::find(members.begin(), members.end(), c.rank()) != members.end();
    if (member) c.define_group(42, members);
    std::vector<std::byte> buf(kMiB + 5), want(kMiB + 5);
    for (int i = 0; i < 4; ++i) {
      bcast_and_check(c, buf, 4097 + static_cast<std::uint64_t>(i), i, Algorithm::kMulticast,
                      500 + static_cast<std::uint64_t>(i));
      if (!member) continue;
      const int root = i % 4;
      if (members[static_cast<size_t>(root)] == c.rank())
        fill_pattern(buf.data(), buf.size(), 600 + static_cast<std::uint64_t>(i));
      c.bcast_group(42, buf.data(), buf.size(), root, Algorithm::kMulticast);
      fill_pattern(want.data(), want.size(), 600 + static_cast<std::uint64_t>(i));
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
    }
  });
}

// The root's multicast is paced at the site's slowest NIC (20 Mbit/s here),
// long after the ring (loopback, unshaped) is done: every datagram out is
// progress, so a 300 ms progress deadline does not fail the 0.8 s send.
TEST(Multicast, APacedSendOutlastingTheRingIsProgressNotATimeout) {
  auto grid = make_grid({3}, 3, 1);
  for (auto& node : grid.nodes) node.nics[0].bandwidth_bps = 20e6;
  CommOptions o;
  o.timeout = std::chrono::milliseconds(300);
  Ranks ranks(grid, o);
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(2 * kMiB), want(2 * kMiB);
    if (c.rank() == 0) fill_pattern(buf.data(), buf.size(), 900);
    const BcastInfo info = c.bcast(buf.data(), buf.size(), 0, Algorithm::kMulticast);
    if (c.rank() == 0) {
      EXPECT_GE(info.seconds, 0.5) << "the pace held the root";
    }
    fill_pattern(want.data(), want.size(), 900);
    ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
  });
}

TEST(Multicast, ASiteWithoutMulticastIsRefusedNamingIt) {
  auto grid = make_grid({3, 2});
  grid.sites[1].multicast.enabled = false;
  Communicator c(grid, 0, new_credentials(), {});
  std::vector<std::byte> buf(16);
  try {
    c.bcast(buf.data(), buf.size(), 0, Algorithm::kMulticast);
    FAIL() << "multicast ran on a site that does not carry it";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("site 's1'"), std::string::npos) << e.what();
  }
}

// A stranger who found the group (it is derived from the job secret, so this
// one cheats and derives it) floods it with datagrams of its own key, of
// another job, and with garbage while the job broadcasts: none is used.
TEST(Multicast, ForgedDatagramsFloodingTheGroupAreNeverUsed) {
  const auto grid = make_grid({4});
  Ranks ranks(grid);
  const auto& creds = ranks.credentials();
  const lanes::DatagramKey real = lanes::datagram_key(creds.secret, creds.job_id, 0);
  const auto& site = grid.sites[0].multicast;
  const lanes::MulticastGroup group = lanes::derive_group(real, site.network, site.prefix, 0, 0);
  std::vector<std::uint8_t> other_secret(32, 0x5a);
  const lanes::DatagramKey wrong = lanes::datagram_key(other_secret, creds.job_id, 0);

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::thread stranger([&] {
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    in_addr lo{};
    ::inet_pton(AF_INET, "127.0.0.1", &lo);
    ASSERT_EQ(::setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo), 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(group.port);
    to.sin_addr.s_addr = htonl(group.address);
    std::vector<std::uint8_t> payload(1000, 0xEE), out(lanes::kMaxDatagramBytes);
    for (std::uint64_t i = 0; !stop && i < 200000; ++i) {
      // Broadcast ids 0..7 and fragments 0..7 of a 1000-fragment message:
      // every field right but the key, or the job, or nothing but noise.
      const auto layout = lanes::fragment_layout(1000 * 1000, 1000);
      lanes::FragmentHeader h = lanes::fragment_header(creds.job_id, i % 8, layout, i % 8);
      size_t n = 0;
      if (i % 3 == 0) {
        n = lanes::encode_fragment(h, payload, wrong, out);
      } else if (i % 3 == 1) {
        h.job_id ^= 1;
        n = lanes::encode_fragment(h, payload, real, out);
      } else {
        n = 600;
        std::memset(out.data(), static_cast<int>(i), n);
      }
      ::sendto(s, out.data(), n, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
      ++sent;
      if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::close(s);
  });
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(1000 * 1000);
    for (std::uint64_t seed = 700; seed < 706; ++seed)
      bcast_and_check(c, buf, buf.size(), 0, Algorithm::kMulticast, seed);
  });
  stop = true;
  stranger.join();
  EXPECT_GT(sent.load(), 0);
}

}  // namespace
}  // namespace gridbcast::runtime
