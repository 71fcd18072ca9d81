// The multicast algorithm over loopback (which carries IPv4 multicast inside
// the host, no privileges needed): ranks as threads with real UDP and TCP
// sockets. Datagrams lost on purpose (the sender skips them), all of them
// lost, a rank that enters late, groups and the world taking turns, strangers
// flooding the group with forged datagrams, datagrams recorded in one run and
// replayed into the next: every copy stays byte-exact.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <mutex>
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

// A receiver keeps datagrams only up to kBroadcastWindow broadcasts ahead,
// so broadcasts of other algorithms (which send no datagram) must move its
// window too: after eight of them, the rank that enters the multicast late
// still holds the datagrams that came before it asked, and takes bytes from
// them before the ring's copy. (The barrier keeps the root from starting the
// multicast while rank 3 is still more than the window behind: then its
// datagrams would be dropped as too far ahead, and the ring alone deliver.)
TEST(Multicast, OtherAlgorithmsMoveTheWindowSoALateRankKeepsEarlyDatagrams) {
  const auto grid = make_grid({4});
  Ranks ranks(grid);
  std::barrier all_done(grid.size());
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(kMiB);
    std::uint64_t seed = 1000;
    try {
      for (int i = 0; i < 8; ++i) bcast_and_check(c, buf, 5000, 0, Algorithm::kBinomial, seed++);
    } catch (...) {
      all_done.arrive_and_drop();  // the others go on (and fail) rather than wait forever
      throw;
    }
    all_done.arrive_and_wait();
    if (c.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (c.rank() == 0) fill_pattern(buf.data(), buf.size(), seed);
    const BcastInfo info = c.bcast(buf.data(), buf.size(), 0, Algorithm::kMulticast);
    std::vector<std::byte> want(buf.size());
    fill_pattern(want.data(), want.size(), seed);
    ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
    if (c.rank() == 3) {
      EXPECT_GT(info.multicast_bytes_in, 0u) << "the early datagrams were not kept";
      EXPECT_EQ(c.rejected_datagrams()[static_cast<size_t>(lanes::Rejection::kTooFarAhead)], 0u);
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
  const lanes::DatagramKey real =
      lanes::datagram_key(creds.secret, creds.job_id, ranks.run_nonce(), 0);
  const auto& site = grid.sites[0].multicast;
  const lanes::MulticastGroup group = lanes::derive_group(real, site.network, site.prefix, 0, 0);
  std::vector<std::uint8_t> other_secret(32, 0x5a);
  const lanes::DatagramKey wrong =
      lanes::datagram_key(other_secret, creds.job_id, ranks.run_nonce(), 0);

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

// The world's group of a run, as its ranks derive it (a test may cheat so).
lanes::MulticastGroup world_group(const Ranks& ranks, const topology::Grid& grid) {
  const auto& creds = ranks.credentials();
  const auto& site = grid.sites[0].multicast;
  return lanes::derive_group(lanes::datagram_key(creds.secret, creds.job_id, ranks.run_nonce(), 0),
                             site.network, site.prefix, site.port, 0);
}

sockaddr_in socket_address(const lanes::MulticastGroup& g) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(g.port);
  a.sin_addr.s_addr = htonl(g.address);
  return a;
}

// Keeps a copy of every datagram sent to a group on this host's loopback, as
// a stranger on the site's network could, until it is destroyed.
class Recorder {
 public:
  explicit Recorder(const lanes::MulticastGroup& group)
      : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    const int one = 1, size = 8 << 20;
    const timeval tick{0, 20'000};
    const sockaddr_in at = socket_address(group);
    ip_mreq join{};
    join.imr_multiaddr.s_addr = htonl(group.address);
    ::inet_pton(AF_INET, "127.0.0.1", &join.imr_interface);
    ok_ = fd_ >= 0 && ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
          ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) == 0 &&
          ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick) == 0 &&
          ::bind(fd_, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0 &&
          ::setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &join, sizeof join) == 0;
    if (ok_) thread_ = std::thread([this] { record(); });
  }
  ~Recorder() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  bool ok() const { return ok_; }
  std::vector<std::vector<std::uint8_t>> datagrams() {
    std::lock_guard lock(mutex_);
    return datagrams_;
  }

 private:
  void record() {
    std::vector<std::uint8_t> buffer(lanes::kMaxDatagramBytes + 1);
    while (!stop_) {
      const ssize_t n = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (n <= 0) continue;  // the 20 ms tick: look at stop_ again
      std::lock_guard lock(mutex_);
      datagrams_.emplace_back(buffer.begin(), buffer.begin() + n);
    }
  }

  int fd_;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::vector<std::uint8_t>> datagrams_;
  std::thread thread_;
};

// The replay: datagrams recorded from one run of a job, replayed into
// a second run with the same secret and job id (its broadcast ids restart at
// 0, the sizes are the same). The second run's own root multicasts nothing,
// so any byte a rank took by datagram could only have come from the replay:
// none does, every replayed datagram that arrives is a bad MAC and counted,
// and every copy is byte-exact.
TEST(Multicast, DatagramsRecordedInOneRunAreDroppedWhenReplayedIntoTheNext) {
  const auto grid = make_grid({4});
  const JobCredentials creds = new_credentials();
  constexpr std::uint64_t kSize = 300'000;
  constexpr int kBroadcasts = 3;

  std::vector<std::vector<std::uint8_t>> recorded;
  lanes::DatagramKey first_key{};
  {
    Ranks first(grid, creds);
    first_key = lanes::datagram_key(creds.secret, creds.job_id, first.run_nonce(), 0);
    Recorder recorder(world_group(first, grid));
    ASSERT_TRUE(recorder.ok()) << "could not join the first run's group";
    first.run([&](Communicator& c) {
      std::vector<std::byte> buf(kSize);
      for (int i = 0; i < kBroadcasts; ++i)
        bcast_and_check(c, buf, kSize, 0, Algorithm::kMulticast, 800 + static_cast<unsigned>(i));
    });
    // The last datagrams may still be on their way to the recorder.
    for (int wait = 0; wait < 50 && recorder.datagrams().empty(); ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    recorded = recorder.datagrams();
  }
  // A genuine recording: under the first run's key these verify, and they
  // carry the broadcast ids the next run uses too.
  ASSERT_FALSE(recorded.empty());
  for (const auto& d : recorded) {
    const auto f = lanes::decode_fragment(d, first_key, creds.job_id, kSize);
    ASSERT_TRUE(f.ok()) << f.why;
    EXPECT_LT(f.header.broadcast_id, std::uint64_t{kBroadcasts});
  }

  Ranks second(grid, creds, [](int) { return sending_only([](std::uint32_t) { return false; }); });
  EXPECT_EQ(second.credentials().secret, creds.secret);
  EXPECT_NE(second.run_nonce(), RunNonce{});
  const sockaddr_in to = socket_address(world_group(second, grid));
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  in_addr lo{};
  ::inet_pton(AF_INET, "127.0.0.1", &lo);
  ASSERT_EQ(::setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo), 0);
  auto replay = [&](size_t k) {
    const auto& d = recorded[k % recorded.size()];
    ::sendto(s, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  };
  // Once before the run (it waits in every rank's socket), then throughout.
  for (size_t k = 0; k < recorded.size(); ++k) replay(k);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> replayed{recorded.size()};
  std::thread attacker([&] {
    for (size_t k = 0; !stop; ++k, ++replayed) {
      replay(k);
      if (k % 8 == 7) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::uint64_t> by_datagram(static_cast<size_t>(grid.size()), 0);
  second.run([&](Communicator& c) {
    std::vector<std::byte> buf(kSize), want(kSize);
    for (int i = 0; i < kBroadcasts; ++i) {
      const std::uint64_t seed = 900 + static_cast<unsigned>(i);
      if (c.rank() == 0) fill_pattern(buf.data(), kSize, seed);
      const BcastInfo info = c.bcast(buf.data(), kSize, 0, Algorithm::kMulticast);
      by_datagram[static_cast<size_t>(c.rank())] += info.multicast_bytes_in;
      fill_pattern(want.data(), kSize, seed);
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), kSize), 0) << "rank " << c.rank();
    }
  });
  stop = true;
  attacker.join();
  ::close(s);

  std::uint64_t bad_mac = 0;
  for (int r = 0; r < second.size(); ++r) {
    EXPECT_EQ(by_datagram[static_cast<size_t>(r)], 0u) << "rank " << r << " used a replay";
    const lanes::RejectionCounts counts = second.at(r).rejected_datagrams();
    bad_mac += counts[static_cast<size_t>(lanes::Rejection::kBadMac)];
    EXPECT_EQ(counts[static_cast<size_t>(lanes::Rejection::kOtherJob)], 0u);
  }
  EXPECT_GT(bad_mac, 0u) << replayed.load() << " replayed";
}

// No run nonce, no multicast: a communicator whose endpoints (and nonce) never
// came refuses to key datagrams rather than use a key every run would share;
// a nonce of zeros (none drawn) is refused, and so is a second one.
TEST(Multicast, ACommunicatorWithoutARunNonceOpensNoMulticastSocket) {
  const auto grid = make_grid({2});
  Communicator c(grid, 0, new_credentials(), {});
  c.listen();
  std::vector<std::byte> buf(1000);
  try {
    c.bcast(buf.data(), buf.size(), 0, Algorithm::kMulticast);
    FAIL() << "multicast ran without a run nonce";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no run nonce"), std::string::npos) << e.what();
  }

  Communicator d(grid, 0, new_credentials(), {});
  const LanePorts ports = d.listen();
  const EndpointTable table{ports, ports};
  EXPECT_THROW(d.set_endpoints(table, RunNonce{}), std::invalid_argument);
  d.set_endpoints(table, new_run_nonce());
  EXPECT_THROW(d.set_endpoints(table, new_run_nonce()), std::logic_error);
  const lanes::RejectionCounts none{};
  EXPECT_EQ(d.rejected_datagrams(), none);
}

// Within a run, broadcast ids never repeat under one key: a group that
// multicast keeps its context (its key) to itself for the rest of the run;
// one that never keyed a datagram may be defined again, and context 0 is
// the world's.
TEST(Multicast, AContextThatMulticastIsNotDefinedAgainInTheRun) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  const std::vector<int> all{0, 1, 2};
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(70'000), want(buf.size());
    EXPECT_THROW(c.define_group(0, all), std::invalid_argument);
    c.define_group(7, all);
    if (c.rank() == 1) fill_pattern(buf.data(), buf.size(), 31);
    c.bcast_group(7, buf.data(), buf.size(), 1, Algorithm::kMulticast);
    fill_pattern(want.data(), want.size(), 31);
    EXPECT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
    c.forget_group(7);
    try {
      c.define_group(7, all);
      ADD_FAILURE() << "context 7 defined again after it multicast";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("context 7"), std::string::npos) << e.what();
    }
    c.define_group(8, all);  // never multicasts: free to come back
    c.forget_group(8);
    c.define_group(8, all);
    if (c.rank() == 2) fill_pattern(buf.data(), buf.size(), 32);
    c.bcast_group(8, buf.data(), buf.size(), 2, Algorithm::kMulticast);
    fill_pattern(want.data(), want.size(), 32);
    EXPECT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0) << "rank " << c.rank();
  });
}

}  // namespace
}  // namespace gridbcast::runtime
