// lanes/multicast over real UDP sockets. Without root: unicast to the
// receiver's port on 127.0.0.1 (the receiver binds for unicast for exactly
// this). As root with `ip netns`: a real group joined on a veth NIC in a
// private network namespace.
#include "lanes/multicast.hpp"
#include "lanes/net.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace gridbcast::lanes {
namespace {

using namespace std::chrono_literals;
using udp = asio::ip::udp;

constexpr std::uint64_t kJob = 0xabcdef0123456789;
const std::vector<std::uint8_t> kSecret(32, 0x42);
constexpr RunNonce kRun{0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,
                        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
const DatagramKey kKey = datagram_key(kSecret, kJob, kRun);
constexpr auto kLimit = 10s;  // every wait below ends by then, pass or fail

std::vector<std::uint8_t> message(size_t n, unsigned seed) {
  std::vector<std::uint8_t> m(n);
  std::mt19937 rng(seed);
  for (auto& b : m) b = static_cast<std::uint8_t>(rng());
  return m;
}

// Runs the io_context until `done` or the limit.
template <typename Pred>
bool run_until(asio::io_context& io, Pred done, std::chrono::milliseconds limit = kLimit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(5ms);
  }
  return done();
}

ReceiverOptions unicast_receiver(std::uint64_t max = 1 << 20) {
  ReceiverOptions o;
  o.interface_address = "127.0.0.1";
  o.job_id = kJob;
  o.key = kKey;
  o.max_message_bytes = max;
  return o;
}

// A plain UDP socket that sends whatever bytes a test makes.
struct Raw {
  explicit Raw(asio::io_context& io, std::uint16_t port)
      : socket(io, udp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0)),
        to(asio::ip::make_address_v4("127.0.0.1"), port) {}
  void send(std::span<const std::uint8_t> d) {
    socket.send_to(asio::buffer(d.data(), d.size()), to);
  }
  udp::socket socket;
  udp::endpoint to;
};

std::vector<std::uint8_t> fragment(const std::vector<std::uint8_t>& msg, std::uint32_t frag,
                                   std::uint32_t index, std::uint64_t bcast,
                                   std::uint64_t job = kJob) {
  const FragmentLayout l = fragment_layout(msg.size(), frag);
  std::vector<std::uint8_t> out(kDatagramOverhead + l.payload(index));
  encode_fragment(fragment_header(job, bcast, l, index),
                  std::span(msg).subspan(l.offset(index), l.payload(index)),
                  job == kJob ? kKey : datagram_key(kSecret, job, kRun), out);
  return out;
}

std::vector<std::uint8_t> forge(FragmentHeader h) {
  std::vector<std::uint8_t> payload(h.payload_bytes, 0xee),
      out(kDatagramOverhead + h.payload_bytes);
  encode_fragment(h, payload, kKey, out);
  return out;
}

TEST(MulticastGroup, ChosenInsideTheRangeByASecureGenerator) {
  std::set<std::uint32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const MulticastGroup g = choose_group(0xEFC00000, 14);  // 239.192.0.0/14
    EXPECT_EQ(g.address & 0xFFFC0000u, 0xEFC00000u) << g.str();
    EXPECT_GE(g.port, kFirstDynamicPort);
    seen.insert(g.address);
  }
  EXPECT_GT(seen.size(), 190u);  // 2^18 addresses: repeats are rare
  const MulticastGroup one = choose_group(0xE0000105, 32, 5000);
  EXPECT_EQ(one.str(), "224.0.1.5:5000");
  EXPECT_EQ(choose_group(0xEF000000, 8).address >> 24, 239u);
  EXPECT_THROW(choose_group(0x0A000000, 8), std::invalid_argument);   // 10.0.0.0/8
  EXPECT_THROW(choose_group(0xE0000000, 4), std::invalid_argument);   // holds 224.0.0.0/24
  EXPECT_THROW(choose_group(0xE00000FB, 32), std::invalid_argument);  // 224.0.0.251
  EXPECT_THROW(choose_group(0xEF010000, 8), std::invalid_argument);   // host bits
  EXPECT_THROW(choose_group(0xEF000000, 33), std::invalid_argument);
}

TEST(MulticastReceiver, SetsItsReceiveBuffer) {
  asio::io_context io;
  auto r = MulticastReceiver::open(io, unicast_receiver());
  EXPECT_NE(r->port(), 0);
  // Linux reports twice what it granted; it grants up to net.core.rmem_max.
  EXPECT_GE(r->receive_buffer_bytes(), 2 * 4096);
}

// Every kind of hostile datagram before, among and after the valid ones: each
// is counted by its reason, none is written into the buffer, and the message
// arrives byte-exact despite reordering and duplicates.
TEST(MulticastReceiver, DropsAndCountsHostileDatagramsAndDeliversTheMessage) {
  std::vector<std::string> lines;  // outlives the receiver, whose log flushes into it
  asio::io_context io;
  ReceiverOptions o = unicast_receiver(1 << 16);
  o.print = [&](const std::string& line) { lines.push_back(line); };
  auto r = MulticastReceiver::open(io, o);
  Raw raw(io, r->port());

  const auto msg = message(50'000, 7);
  const std::uint32_t frag = 1000;
  std::vector<std::uint8_t> buffer(msg.size(), 0);
  bool complete = false;
  r->expect(7, buffer, [&] { complete = true; });

  const FragmentLayout layout = fragment_layout(msg.size(), frag);
  std::vector<std::pair<std::vector<std::uint8_t>, Rejection>> hostile;
  hostile.emplace_back(message(300, 1), Rejection::kMalformed);              // garbage
  hostile.emplace_back(std::vector<std::uint8_t>(), Rejection::kMalformed);  // empty
  auto truncated = fragment(msg, frag, 3, 7);
  truncated.resize(truncated.size() - 1);
  hostile.emplace_back(truncated, Rejection::kMalformed);
  hostile.emplace_back(std::vector<std::uint8_t>(kMaxDatagramBytes, 0x47), Rejection::kMalformed);
  auto forged = fragment(msg, frag, 4, 7);
  forged[kFragmentHeaderBytes + 10] ^= 0xff;  // payload changed, MAC kept
  hostile.emplace_back(forged, Rejection::kBadMac);
  hostile.emplace_back(fragment(msg, frag, 5, 7, kJob ^ 1), Rejection::kOtherJob);
  hostile.emplace_back(fragment(msg, frag, 6, 6), Rejection::kOtherBroadcast);  // stale id
  FragmentHeader h = fragment_header(kJob, 7, layout, 0);
  h.index = layout.count;  // index == count
  hostile.emplace_back(forge(h), Rejection::kOutOfRange);
  h.index = 0xffffffff;
  hostile.emplace_back(forge(h), Rejection::kOutOfRange);
  h = fragment_header(kJob, 7, fragment_layout(1 << 20, frag), 0);  // 1 MiB > the 64 KiB limit
  hostile.emplace_back(forge(h), Rejection::kTooLarge);
  h = fragment_header(kJob, 7, fragment_layout(msg.size() - 1, frag), 0);  // not this buffer
  hostile.emplace_back(forge(h), Rejection::kMismatch);

  std::uint64_t sent = 0;
  auto send_hostile = [&] {
    for (const auto& [d, reason] : hostile) {
      raw.send(d);
      ++sent;
    }
  };
  send_hostile();
  std::vector<std::uint32_t> order(layout.count);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  size_t duplicates = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    raw.send(fragment(msg, frag, order[k], 7));
    ++sent;
    if (k % 4 == 0) {
      raw.send(fragment(msg, frag, order[k], 7));
      ++sent;
      ++duplicates;
    }
    if (k % 10 == 0)
      run_until(
          io, [&] { return r->received() == sent; }, 2s);
  }
  ASSERT_TRUE(run_until(io, [&] { return complete; })) << r->received() << " of " << sent;
  send_hostile();  // the buffer is complete now: a write would show
  ASSERT_TRUE(run_until(io, [&] { return r->received() == sent; }));

  EXPECT_EQ(buffer, msg);
  EXPECT_EQ(r->delivered(), layout.count);
  std::array<std::uint64_t, kRejectionKinds> want{};
  for (const auto& [d, reason] : hostile) want[static_cast<size_t>(reason)] += 2;
  want[static_cast<size_t>(Rejection::kDuplicate)] = duplicates;
  for (size_t i = 1; i < kRejectionKinds; ++i)
    EXPECT_EQ(r->rejected(static_cast<Rejection>(i)), want[i])
        << rejection_name(static_cast<Rejection>(i));
  EXPECT_EQ(r->rejected_total() + r->delivered(), sent);
  // Hostile reasons were logged, one line each (below the log's first 10...).
  EXPECT_GE(lines.size(), 10u);
  EXPECT_NE(lines.front().find("malformed datagram from 127.0.0.1:"), std::string::npos)
      << lines.front();
}

TEST(MulticastReceiver, AFloodOfForgedDatagramsKeepsTheLogBounded) {
  std::vector<std::string> lines;  // outlives the receiver, whose log flushes into it
  asio::io_context io;
  ReceiverOptions o = unicast_receiver();
  o.print = [&](const std::string& line) { lines.push_back(line); };
  auto r = MulticastReceiver::open(io, o);
  Raw raw(io, r->port());
  const auto msg = message(4000, 2);
  std::vector<std::uint8_t> buffer(msg.size());
  r->expect(1, buffer, [] {});
  auto forged = fragment(msg, 1000, 0, 1);
  forged.back() ^= 1;
  constexpr int kFlood = 20'000;
  for (int i = 0; i < kFlood; ++i) {
    raw.send(forged);
    if (i % 200 == 199)
      run_until(
          io, [&] { return r->received() == std::uint64_t(i + 1); }, 1s);
  }
  run_until(
      io, [&] { return r->received() == kFlood; }, 3s);
  // Loopback may drop some under a flood; every one that arrived was refused.
  EXPECT_GT(r->received(), std::uint64_t{kFlood / 2});
  EXPECT_EQ(r->rejected(Rejection::kBadMac), r->received());
  EXPECT_EQ(r->log().count(), r->received());
  EXPECT_LE(lines.size(), RejectionLog::kLogFirst + 2) << "the flood took seconds, not minutes";
  EXPECT_EQ(r->log().sample().size(), RejectionLog::kSample);
  EXPECT_EQ(r->delivered(), 0u);
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](auto b) { return b == 0; }));
}

TEST(MulticastSender, LossShowsInTheReceiversBitmap) {
  asio::io_context io;
  auto r = MulticastReceiver::open(io, unicast_receiver());
  SenderOptions so;
  so.destination = "127.0.0.1";
  so.port = r->port();
  so.interface_address = "127.0.0.1";
  so.job_id = kJob;
  so.key = kKey;
  auto s = MulticastSender::open(io, so);
  EXPECT_EQ(s->fragment_bytes(), 1408u);

  const auto msg = message(100'000, 3);  // 72 fragments
  std::vector<std::uint8_t> buffer(msg.size(), 0);
  bool complete = false;
  r->expect(3, buffer, [&] { complete = true; });
  const std::set<std::uint32_t> lost = {0, 17, 18, 71};
  std::string result = "(running)";
  s->send(
      3, msg, [&](const std::string& e) { result = e; },
      [&](std::uint32_t i) { return lost.count(i) == 0; });
  ASSERT_TRUE(run_until(io, [&] { return result != "(running)" && r->delivered() == 68; }))
      << result << ", delivered " << r->delivered();
  EXPECT_EQ(result, "");
  EXPECT_EQ(s->datagrams_sent(), 68u);
  EXPECT_FALSE(complete);
  ASSERT_NE(r->current(), nullptr);
  EXPECT_EQ(r->current()->bitmap().missing(), (std::vector<std::uint32_t>{0, 17, 18, 71}));
  EXPECT_EQ(r->current()->bitmap().first_missing(), 0u);
  // What came is in place.
  EXPECT_TRUE(std::equal(buffer.begin() + 1408, buffer.begin() + 17 * 1408, msg.begin() + 1408));

  // The missing ones arrive later (as the chain would bring them): complete.
  result = "(running)";
  s->send(
      3, msg, [&](const std::string& e) { result = e; },
      [&](std::uint32_t i) { return lost.count(i) != 0; });
  ASSERT_TRUE(run_until(io, [&] { return complete; }));
  EXPECT_EQ(buffer, msg);
  EXPECT_EQ(r->rejected_total(), 0u);
}

TEST(MulticastReceiver, ALateReceiverStillCatchesWhatArrivedBeforeItAsked) {
  asio::io_context io;
  auto r = MulticastReceiver::open(io, unicast_receiver());
  SenderOptions so;
  so.destination = "127.0.0.1";
  so.port = r->port();
  so.interface_address = "127.0.0.1";
  so.job_id = kJob;
  so.key = kKey;
  so.path_mtu = 9000;
  auto s = MulticastSender::open(io, so);
  const auto first = message(30'000, 4), second = message(20'000, 5);
  int sends = 0;
  // Broadcasts 1 and 2 arrive before the rank asks for either.
  s->send(1, first, [&](const std::string& e) {
    EXPECT_EQ(e, "");
    s->send(2, second, [&](const std::string& e2) {
      EXPECT_EQ(e2, "");
      ++sends;
    });
  });
  ASSERT_TRUE(run_until(io, [&] { return sends == 1 && r->early_held() == 7; })) << r->early_held();
  std::vector<std::uint8_t> b2(second.size());
  bool done2 = false;
  r->expect(2, b2, [&] { done2 = true; });  // broadcast 1 goes stale
  EXPECT_TRUE(done2);
  EXPECT_EQ(b2, second);
  EXPECT_EQ(r->rejected(Rejection::kOtherBroadcast), 4u);
  EXPECT_EQ(r->early_held(), 0u);
  // Overtaken broadcasts never mix: 1 is over for good.
  r->finish();
  EXPECT_EQ(r->current(), nullptr);
  s->send(1, first, [](const std::string&) {});
  ASSERT_TRUE(run_until(io, [&] { return r->rejected(Rejection::kOtherBroadcast) == 8; }));
  EXPECT_EQ(r->early_held(), 0u);
  EXPECT_EQ(b2, second);
}

// One small message per broadcast id, one datagram each.
std::vector<std::uint8_t> one_datagram(std::uint64_t bcast) {
  return fragment(message(100, static_cast<unsigned>(bcast)), 1000, 0, bcast);
}

// The receiver keeps datagrams from the broadcast it expects up to
// kBroadcastWindow past it; further ahead, or already over, they are dropped
// and counted (and not logged: an honest root may run ahead, and late copies
// are normal). Before the first expect() the window starts at the
// communicator's first broadcast id.
TEST(MulticastReceiver, BroadcastIdsBeyondTheWindowOrAlreadyOverAreDroppedAndCounted) {
  asio::io_context io;
  ReceiverOptions o = unicast_receiver();
  o.first_broadcast_id = 10;
  ASSERT_EQ(o.window, kBroadcastWindow);
  ASSERT_EQ(kBroadcastWindow, 4u);
  auto r = MulticastReceiver::open(io, o);
  Raw raw(io, r->port());
  const std::uint64_t half = std::uint64_t{1} << 63;
  std::uint64_t sent = 0;
  for (const std::uint64_t id :
       {std::uint64_t{9}, std::uint64_t{10}, std::uint64_t{11}, std::uint64_t{14},
        std::uint64_t{15}, std::uint64_t{100}, 10 + (half >> 1), 10 + half}) {
    raw.send(one_datagram(id));
    ++sent;
  }
  ASSERT_TRUE(run_until(io, [&] { return r->received() == sent; }));
  EXPECT_EQ(r->early_held(), 3u);                          // 10, 11, 14
  EXPECT_EQ(r->rejected(Rejection::kTooFarAhead), 3u);     // 15, 100, 10 + 2^62
  EXPECT_EQ(r->rejected(Rejection::kOtherBroadcast), 2u);  // 9, and 10 + 2^63 (behind)
  EXPECT_EQ(r->rejected_total(), 5u);
  EXPECT_EQ(r->log().count(), 0u);

  // Kept ones are used in turn; the window moves with the expected id.
  std::vector<std::uint8_t> b(100);
  for (const std::uint64_t id : {10, 11}) {
    bool done = false;
    r->expect(id, b, [&] { done = true; });
    EXPECT_TRUE(done) << id;
    EXPECT_EQ(b, message(100, static_cast<unsigned>(id)));
    r->finish();
  }
  // Expecting 12 next: 16 is within the window, 17 beyond it, 11 over.
  for (const std::uint64_t id : {16, 17, 11}) {
    raw.send(one_datagram(id));
    ++sent;
  }
  ASSERT_TRUE(run_until(io, [&] { return r->received() == sent; }));
  EXPECT_EQ(r->early_held(), 2u);  // 14, 16
  EXPECT_EQ(r->rejected(Rejection::kTooFarAhead), 4u);
  EXPECT_EQ(r->rejected(Rejection::kOtherBroadcast), 3u);
  EXPECT_EQ(r->delivered(), 2u);
}

// A group's broadcast ids start at a hash and may wrap past 2^64: order is
// modular, so the ids after 2^64 - 1 are ahead, not over.
TEST(MulticastReceiver, TheWindowWrapsPast2To64) {
  asio::io_context io;
  ReceiverOptions o = unicast_receiver();
  const std::uint64_t top = ~std::uint64_t{0};
  o.first_broadcast_id = top - 1;
  auto r = MulticastReceiver::open(io, o);
  Raw raw(io, r->port());
  const std::vector<std::uint64_t> ids{top - 2, top - 1, top, 0, 1, 3};
  for (const std::uint64_t id : ids) raw.send(one_datagram(id));
  ASSERT_TRUE(run_until(io, [&] { return r->received() == ids.size(); }));
  EXPECT_EQ(r->early_held(), 4u);                          // 2^64 - 2, 2^64 - 1, 0, 1
  EXPECT_EQ(r->rejected(Rejection::kOtherBroadcast), 1u);  // 2^64 - 3
  EXPECT_EQ(r->rejected(Rejection::kTooFarAhead), 1u);     // 3 is 5 past 2^64 - 2
  std::vector<std::uint8_t> b(100);
  bool done = false;
  r->expect(1, b, [&] { done = true; });  // the three before it go stale
  EXPECT_TRUE(done);
  EXPECT_EQ(b, message(100, 1));
  EXPECT_EQ(r->rejected(Rejection::kOtherBroadcast), 4u);
  EXPECT_EQ(r->early_held(), 0u);
}

// A sender of one run (its nonce) and a receiver of the next run of the same
// job (same secret and job id, a new nonce): what the earlier run sends, as
// a recording replayed would, is refused as a bad MAC, counted and logged,
// and never written; the receiver's own run's datagrams then deliver.
TEST(MulticastReceiver, DatagramsOfAnEarlierRunAreDroppedAsBadMacs) {
  std::vector<std::string> lines;  // outlives the receiver, whose log flushes into it
  asio::io_context io;
  constexpr RunNonce kNextRun{0x11, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,
                              0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
  ReceiverOptions o = unicast_receiver();
  o.key = datagram_key(kSecret, kJob, kNextRun);
  o.print = [&](const std::string& line) { lines.push_back(line); };
  auto r = MulticastReceiver::open(io, o);
  SenderOptions so;
  so.destination = "127.0.0.1";
  so.port = r->port();
  so.interface_address = "127.0.0.1";
  so.job_id = kJob;
  so.key = kKey;  // the earlier run's
  so.path_mtu = 9000;
  auto earlier = MulticastSender::open(io, so);
  so.key = o.key;
  auto now = MulticastSender::open(io, so);

  const auto old_msg = message(40'000, 12), msg = message(40'000, 13);
  std::vector<std::uint8_t> buffer(msg.size(), 0);
  bool complete = false;
  r->expect(0, buffer, [&] { complete = true; });  // broadcast ids restart at 0 in every run
  std::string result = "(running)";
  earlier->send(0, old_msg, [&](const std::string& e) { result = e; });
  ASSERT_TRUE(run_until(
      io, [&] { return result != "(running)" && r->received() == earlier->datagrams_sent(); }))
      << result << ", received " << r->received();
  EXPECT_EQ(result, "");
  EXPECT_GT(earlier->datagrams_sent(), 1u);
  EXPECT_EQ(r->rejected(Rejection::kBadMac), earlier->datagrams_sent());
  EXPECT_EQ(r->rejected_total(), r->rejected(Rejection::kBadMac));
  EXPECT_EQ(r->delivered(), 0u);
  EXPECT_FALSE(r->current()->started());
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](auto b) { return b == 0; }));
  EXPECT_EQ(r->log().count(), earlier->datagrams_sent());

  result = "(running)";
  now->send(0, msg, [&](const std::string& e) { result = e; });
  ASSERT_TRUE(run_until(io, [&] { return complete && result != "(running)"; }));
  EXPECT_EQ(result, "");
  EXPECT_EQ(buffer, msg);
  EXPECT_EQ(r->rejected(Rejection::kBadMac), earlier->datagrams_sent());
}

TEST(MulticastSender, RefusesMisuse) {
  asio::io_context io;
  SenderOptions so;
  so.destination = "239.1.2.3";
  so.port = 50000;
  so.interface_address = "127.0.0.1";
  so.ttl = 0;
  EXPECT_THROW(MulticastSender::open(io, so), std::invalid_argument);
  so.ttl = 256;
  EXPECT_THROW(MulticastSender::open(io, so), std::invalid_argument);
  so.ttl = 1;
  so.interface_address = "eth0";
  EXPECT_THROW(MulticastSender::open(io, so), NetworkError);
  so.interface_address = "127.0.0.1";
  so.destination = "127.0.0.1";
  so.rate_bps = 1e6;
  auto s = MulticastSender::open(io, so);
  const auto msg = message(20'000, 1);
  std::string result = "(running)";
  s->send(1, msg, [&](const std::string& e) { result = e; });
  // One send at a time: a second one is refused and the first goes on.
  EXPECT_THROW(s->send(2, msg, [](const std::string&) {}), std::logic_error);
  ASSERT_TRUE(run_until(io, [&] { return result != "(running)"; }));
  EXPECT_EQ(result, "");
  EXPECT_EQ(s->datagrams_sent(), 15u);
}

TEST(MulticastReceiver, RefusesWhatIsNotAGroupOrAnAddress) {
  asio::io_context io;
  ReceiverOptions o = unicast_receiver();
  o.group = "10.1.2.3";
  EXPECT_THROW(MulticastReceiver::open(io, o), NetworkError);
  o.group = "239.1.2.3";
  o.interface_address = "not-an-address";
  EXPECT_THROW(MulticastReceiver::open(io, o), NetworkError);
}

TEST(MulticastSender, PacesToTheGivenRate) {
  asio::io_context io;
  auto r = MulticastReceiver::open(io, unicast_receiver());
  SenderOptions so;
  so.destination = "127.0.0.1";
  so.port = r->port();
  so.interface_address = "127.0.0.1";
  so.job_id = kJob;
  so.key = kKey;
  so.rate_bps = 1e6;  // 1 Mbit/s: 125 KB take about a second
  auto s = MulticastSender::open(io, so);
  const auto msg = message(125'000, 6);
  std::vector<std::uint8_t> buffer(msg.size());
  bool complete = false;
  r->expect(9, buffer, [&] { complete = true; });
  std::string result = "(running)";
  const auto start = std::chrono::steady_clock::now();
  std::chrono::duration<double> took{};
  s->send(9, msg, [&](const std::string& e) {
    result = e;
    took = std::chrono::steady_clock::now() - start;
  });
  ASSERT_TRUE(run_until(io, [&] { return complete && result != "(running)"; }));
  EXPECT_EQ(result, "");
  EXPECT_EQ(buffer, msg);
  // Loose bounds (a sanity check; benchmarks measure): at least 0.8 s, and the
  // wire rate not far above the pace.
  EXPECT_GE(took.count(), 0.8);
  const double rate = static_cast<double>(s->wire_bytes_sent()) * 8 / took.count();
  EXPECT_LE(rate, 1.15e6) << took.count() << " s";
  EXPECT_LT(took.count(), 5.0);
}

// ---------------------------------------------------------------------------
// Real multicast (root and `ip netns`): two namespaces joined by a veth pair
// with MULTICAST; a receiver joins the group on its end, the sender sends out
// of the other with loopback off.

int sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());
}

struct Namespaces {
  std::string a, b;
  bool ok = false;
  Namespaces() {
    std::random_device rd;
    const std::string id = std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
    a = "gbc-mc-a-" + id;
    b = "gbc-mc-b-" + id;
    ok = sh("ip netns add " + a) == 0 && sh("ip netns add " + b) == 0 &&
         sh("ip -n " + a + " link add va type veth peer name vb netns " + b) == 0 &&
         sh("ip -n " + a + " addr add 10.250.0.1/24 dev va") == 0 &&
         sh("ip -n " + b + " addr add 10.250.0.2/24 dev vb") == 0 &&
         sh("ip -n " + a + " link set va up multicast on") == 0 &&
         sh("ip -n " + b + " link set vb up multicast on") == 0 &&
         sh("ip -n " + a + " link set lo up") == 0 && sh("ip -n " + b + " link set lo up") == 0;
  }
  ~Namespaces() {
    sh("ip netns del " + a);  // removes the veth pair with it
    sh("ip netns del " + b);
  }
};

// In a child: enter `ns`, run `body`, exit with its status (0 = success).
template <typename Body>
pid_t in_namespace(const std::string& ns, Body body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(126);
  int status = 1;
  try {
    status = body();
  } catch (...) {
    status = 125;
  }
  ::_exit(status);
}

int wait_child(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -2;
}

TEST(MulticastNetns, ARealGroupJoinedOnAVethReceivesTheMessage) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  if (sh("ip netns list") != 0) GTEST_SKIP() << "needs `ip netns`";
  Namespaces ns;
  ASSERT_TRUE(ns.ok) << "could not set up " << ns.a << " and " << ns.b;
  const MulticastGroup group = choose_group(0xEFC00000, 14);
  const auto msg = message(200'000, 8);

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t receiver = in_namespace(ns.b, [&] {
    ::close(ready[0]);
    asio::io_context io;
    ReceiverOptions o;
    o.group = group.address_string();
    o.port = group.port;
    o.interface_address = "10.250.0.2";
    o.job_id = kJob;
    o.key = kKey;
    auto r = MulticastReceiver::open(io, o);
    std::vector<std::uint8_t> buffer(msg.size());
    bool complete = false;
    r->expect(1, buffer, [&] { complete = true; });
    const char c = 'r';
    if (::write(ready[1], &c, 1) != 1) return 3;
    run_until(
        io, [&] { return complete; }, 8000ms);
    return complete && buffer == msg && r->rejected_total() == 0 ? 0 : 4;
  });
  ::close(ready[1]);
  char c = 0;
  const bool joined = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  ASSERT_TRUE(joined) << "the receiver did not come up";

  const pid_t sender = in_namespace(ns.a, [&] {
    asio::io_context io;
    SenderOptions so;
    so.destination = group.address_string();
    so.port = group.port;
    so.interface_address = "10.250.0.1";
    so.job_id = kJob;
    so.key = kKey;
    so.rate_bps = 100e6;  // the veth would take more; a receiver's buffer may not
    auto s = MulticastSender::open(io, so);
    std::string result = "(running)";
    s->send(1, msg, [&](const std::string& e) { result = e; });
    run_until(
        io, [&] { return result != "(running)"; }, 8000ms);
    return result.empty() ? 0 : 5;
  });
  EXPECT_EQ(wait_child(sender, 10s), 0) << "sender";
  EXPECT_EQ(wait_child(receiver, 10s), 0) << "receiver (group " << group.str() << ")";
}

}  // namespace
}  // namespace gridbcast::lanes
