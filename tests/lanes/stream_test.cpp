// Stream::set_pace (lanes/stream.cpp) on a real loopback connection: the cap
// the kernel holds is the one asked for, 0 takes it away, nonsense is refused.
#include "lanes/stream.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace gridbcast::lanes {
namespace {

std::uint64_t kernel_pace(Stream& s) {
  std::uint64_t rate = 0;
  socklen_t len = sizeof rate;
  EXPECT_EQ(::getsockopt(s.socket().native_handle(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len),
            0);
  return len == sizeof(std::uint32_t) ? static_cast<std::uint32_t>(rate) : rate;
}

TEST(Stream, SetPaceCapsTheKernelsPacingRateAndZeroTakesItAway) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  asio::ip::tcp::socket server = acceptor.accept();
  Stream s(std::move(client));

  const std::uint64_t none = kernel_pace(s);  // what the kernel reports without a cap
  EXPECT_EQ(s.pace(), 0);
  s.set_pace(2'988'771.4);
  EXPECT_EQ(kernel_pace(s), 2'988'771u);
  EXPECT_EQ(s.pace(), 2'988'771.4);
  s.set_pace(0);
  EXPECT_EQ(kernel_pace(s), none);
  EXPECT_EQ(s.pace(), 0);
  EXPECT_THROW(s.set_pace(-1), std::invalid_argument);
  EXPECT_THROW(s.set_pace(std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  EXPECT_EQ(s.pace(), 0);
}

}  // namespace
}  // namespace gridbcast::lanes
