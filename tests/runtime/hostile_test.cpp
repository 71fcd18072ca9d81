// Hostile connections while broadcasts run: rejected, counted, harmless.
#include <gtest/gtest.h>

#include <cstring>

#include "lanes/net.hpp"
#include "runtime/buffer.hpp"
#include "runtime/run_until.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"

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
  EXPECT_THROW(run_until(io, [&]() -> asio::awaitable<int> {
                 co_await lanes::connect_authenticated("", target, hello, wrong,
                                                       lanes::Clock::now() + 5s, "rank 1");
                 co_return 0;
               }()),
               lanes::NetworkError);
  // The right secret but another job id: a handshake replayed from elsewhere.
  lanes::Credentials other_job{real.job_id + 1, real.secret};
  EXPECT_THROW(run_until(io, [&]() -> asio::awaitable<int> {
                 co_await lanes::connect_authenticated("", target, hello, other_job,
                                                       lanes::Clock::now() + 5s, "rank 1");
                 co_return 0;
               }()),
               lanes::NetworkError);
}

TEST(Hostile, BadConnectionsAreRejectedAndTheBroadcastsComplete) {
  const auto grid = testing::make_grid({4});
  testing::Ranks ranks(grid);
  std::thread attacker([&] { attack(grid.nodes[1].lane_nic(0).address, ranks.port(1, 0), ranks.credentials()); });
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

}  // namespace
}  // namespace gridbcast::runtime
