#include "job/control.hpp"

namespace gridbcast::job::control {

asio::awaitable<void> send_body(Channel& c, const std::string& body) {
  const std::string frame = c.sealer.seal(c.out, body);
  co_await asio::async_write(c.socket, asio::buffer(frame), asio::use_awaitable);
}

asio::awaitable<std::string> receive_body(Channel& c) {
  std::array<std::uint8_t, 4> len_bytes{};
  auto [ec, n] = co_await asio::async_read(c.socket, asio::buffer(len_bytes), lanes::kAsTuple);
  if (ec == asio::error::eof) throw lanes::NetworkError(c.peer + " closed the control connection");
  if (ec) throw lanes::NetworkError("control connection to " + c.peer + ": " + ec.message());
  const std::uint32_t len = (std::uint32_t{len_bytes[0]} << 24) |
                            (std::uint32_t{len_bytes[1]} << 16) |
                            (std::uint32_t{len_bytes[2]} << 8) | len_bytes[3];
  if (len == 0 || len > kMaxFrameBytes)
    throw ProtocolError(c.peer + " sent a control message of " + std::to_string(len) +
                        " bytes (limit " + std::to_string(kMaxFrameBytes) + ")");
  // Read in pieces as they arrive, so a peer that claims 64 MiB and sends
  // nothing holds no more than what it sent.
  std::string body;
  while (body.size() < len) {
    const size_t piece = std::min<size_t>(len - body.size(), 1u << 20);
    const size_t at = body.size();
    body.resize(at + piece);
    auto [ec2, n2] =
        co_await asio::async_read(c.socket, asio::buffer(body.data() + at, piece), lanes::kAsTuple);
    if (ec2) throw lanes::NetworkError("control connection to " + c.peer + ": " + ec2.message());
  }
  std::array<std::uint8_t, kTagBytes> tag{};
  auto [ec3, n3] = co_await asio::async_read(c.socket, asio::buffer(tag), lanes::kAsTuple);
  if (ec3) throw lanes::NetworkError("control connection to " + c.peer + ": " + ec3.message());
  try {
    c.sealer.open(c.in(), body, tag);
  } catch (const ProtocolError& e) {
    throw ProtocolError(c.peer + ": " + e.what());
  }
  co_return body;
}

}  // namespace gridbcast::job::control
