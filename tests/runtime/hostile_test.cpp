// Hostile connections while broadcasts run: rejected, counted, harmless.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "lanes/net.hpp"
#include "lanes/wire.hpp"
#include "runtime/buffer.hpp"
#include "runtime/run_until.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::runtime {
namespace {

using namespace std::chrono_literals;

void attack(const std::string& address, std::uint16_t port, const JobCredentials& real) {
  asio::io_context io;
  const auto target = lanes::make_endpoint(address, port);
  // A connection that says nothing and goes away.
  {
    lanes::tcp::socket s(io);
    s.connect(target);
  }
  // Garbage instead of a hello.
  {
    lanes::tcp::socket s(io);
    s.connect(target);
    std::string junk(200, '\x7f');
    asio::error_code ec;
    asio::write(s, asio::buffer(junk), ec);
  }
  // A well-formed handshake with the wrong secret.
  lanes::Credentials wrong{real.job_id, std::vector<std::uint8_t>(32, 0x42)};
  lanes::Hello hello;
  hello.rank = 0;
  EXPECT_THROW(run_until(io,
                         [&]() -> asio::awaitable<int> {
                           co_await lanes::connect_authenticated(
                               "", target, hello, wrong, lanes::Clock::now() + 5s, "rank 1");
                           co_return 0;
                         }()),
               lanes::NetworkError);
  // The right secret but another job id: a handshake replayed from elsewhere.
  lanes::Credentials other_job{real.job_id + 1, real.secret};
  EXPECT_THROW(run_until(io,
                         [&]() -> asio::awaitable<int> {
                           co_await lanes::connect_authenticated(
                               "", target, hello, other_job, lanes::Clock::now() + 5s, "rank 1");
                           co_return 0;
                         }()),
               lanes::NetworkError);
}

TEST(Hostile, BadConnectionsAreRejectedAndTheBroadcastsComplete) {
  const auto grid = testing::make_grid({4});
  testing::Ranks ranks(grid);
  std::thread attacker(
      [&] { attack(grid.nodes[1].lane_nic(0).address, ranks.port(1, 0), ranks.credentials()); });
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(4 << 20), want(buf.size());
    for (int i = 0; i < 30; ++i) {
      if (c.rank() == 0) fill_pattern(buf.data(), buf.size(), static_cast<std::uint64_t>(i));
      c.bcast(buf.data(), buf.size(), 0, topology::Algorithm::kMultilane);
      fill_pattern(want.data(), want.size(), static_cast<std::uint64_t>(i));
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), buf.size()), 0);
    }
  });
  attacker.join();
  // Rank 1 handles connections while it runs its event loop: a few more
  // broadcasts let it finish with what the attacker left behind.
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(1024);
    for (int i = 0; i < 5; ++i) c.bcast(buf.data(), buf.size(), 0);
  });
  EXPECT_GE(ranks.at(1).rejected_connections(), 4u);
}

// A peer that holds the job secret (a broken or compromised member of the job)
// takes the link rank 0 -> rank 1 before rank 0 does and sends a frame header
// the plan does not allow. Rank 1 must refuse it before reading any payload
// (nothing is allocated or written for the claimed length), fail that broadcast
// naming the peer and the range, and rank 0 must fail within its deadline.
struct BadFrameOutcome {
  std::string rank0, rank1;
};

BadFrameOutcome send_bad_frame(const lanes::FrameHeader& frame) {
  const auto grid = testing::make_grid({2});
  constexpr std::uint64_t kBytes = 1 << 20;
  const auto plan = topology::build_plan(grid, topology::Algorithm::kChain, 0, kBytes);
  const auto& t = plan.transfers.at(0);
  CommOptions options;
  options.timeout = 3s;
  testing::Ranks ranks(grid, options);
  const auto target =
      lanes::make_endpoint(grid.nodes[1].lane_nic(t.lane_to).address, ranks.port(1, t.lane_to));
  std::thread impostor([&] {
    asio::io_context io;
    lanes::Hello hello;
    hello.rank = 0;
    hello.to_rank = 1;
    hello.lane_from = static_cast<std::uint8_t>(t.lane_from);
    hello.lane_to = static_cast<std::uint8_t>(t.lane_to);
    hello.stream = 0;
    const lanes::Credentials creds{ranks.credentials().job_id, ranks.credentials().secret};
    run_until(io, [&]() -> asio::awaitable<int> {
      auto s =
          co_await lanes::connect_authenticated(grid.nodes[0].lane_nic(t.lane_from).address, target,
                                                hello, creds, lanes::Clock::now() + 10s, "rank 1");
      const auto header = lanes::encode(frame);
      auto [ec, n] = co_await s.write(asio::buffer(header));
      if (ec) co_return 1;
      const std::string payload(64, 'x');
      co_await s.write(asio::buffer(payload));
      // Hold the connection until rank 1 has judged the header.
      asio::steady_timer hold(io, 2s);
      co_await hold.async_wait(lanes::kAsTuple);
      co_return 0;
    }());
  });
  BadFrameOutcome out;
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(kBytes);
    // Rank 0 comes late, so the impostor holds the link first.
    if (c.rank() == 0) std::this_thread::sleep_for(1s);
    try {
      c.bcast(buf.data(), buf.size(), 0, topology::Algorithm::kChain);
    } catch (const std::exception& e) {
      (c.rank() == 0 ? out.rank0 : out.rank1) = e.what();
    }
  });
  impostor.join();
  return out;
}

TEST(Hostile, FramesOutsideTheMessageFromAnAuthenticatedPeerFailTheBroadcastNamingIt) {
  lanes::FrameHeader past_the_end;
  past_the_end.offset = (1 << 20) + 100;
  past_the_end.length = 10;
  lanes::FrameHeader too_long;
  too_long.offset = 0;
  too_long.length = std::uint64_t{1} << 30;  // within the decoder's limit, beyond the message
  for (const auto& frame : {past_the_end, too_long}) {
    const auto r = send_bad_frame(frame);
    EXPECT_NE(r.rank1.find("protocol error from rank 0"), std::string::npos) << r.rank1;
    EXPECT_NE(r.rank1.find("are not routed over this link"), std::string::npos) << r.rank1;
    EXPECT_FALSE(r.rank0.empty()) << "rank 0 lost its link and must fail, not hang";
  }
}

TEST(Hostile, ALengthOfTwoToTheSixtyThirdIsRefusedBeforeAnyRead) {
  lanes::FrameHeader huge;
  huge.offset = 0;
  huge.length = std::uint64_t{1} << 63;
  const auto r = send_bad_frame(huge);
  EXPECT_NE(r.rank1.find("protocol error from rank 0"), std::string::npos) << r.rank1;
  EXPECT_NE(r.rank1.find("9223372036854775808 bytes exceeds the limit"), std::string::npos)
      << r.rank1;
  EXPECT_FALSE(r.rank0.empty());
}

}  // namespace
}  // namespace gridbcast::runtime
