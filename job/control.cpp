#include "job/control.hpp"

namespace gridbcast::job {
namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint32_t get_u32(const std::string& in, size_t& pos) {
  if (pos + 4 > in.size()) throw std::runtime_error("control message truncated");
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(in[pos++]);
  return v;
}

}  // namespace

const std::string& Message::at(size_t i) const {
  if (i >= fields.size())
    throw std::runtime_error("control message \"" + (fields.empty() ? "" : fields[0]) +
                             "\" lacks field " + std::to_string(i));
  return fields[i];
}

std::string encode_message(const Message& m) {
  std::string body;
  put_u32(body, static_cast<std::uint32_t>(m.fields.size()));
  for (const auto& f : m.fields) {
    put_u32(body, static_cast<std::uint32_t>(f.size()));
    body += f;
  }
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  return out + body;
}

Message decode_message_body(const std::string& body) {
  size_t pos = 0;
  const std::uint32_t count = get_u32(body, pos);
  if (count == 0 || count > 1u << 20) throw std::runtime_error("control message field count");
  Message m;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t len = get_u32(body, pos);
    if (len > body.size() - pos) throw std::runtime_error("control message field truncated");
    m.fields.push_back(body.substr(pos, len));
    pos += len;
  }
  if (pos != body.size()) throw std::runtime_error("control message has trailing bytes");
  return m;
}

asio::awaitable<void> send_message(lanes::tcp::socket& s, const Message& m) {
  const std::string bytes = encode_message(m);
  co_await asio::async_write(s, asio::buffer(bytes), asio::use_awaitable);
}

asio::awaitable<Message> receive_message(lanes::tcp::socket& s, const std::string& peer) {
  std::array<std::uint8_t, 4> len_bytes{};
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(len_bytes), lanes::kAsTuple);
  if (ec == asio::error::eof) throw lanes::NetworkError(peer + " closed the control connection");
  if (ec) throw lanes::NetworkError("control connection to " + peer + ": " + ec.message());
  const std::uint32_t len = (std::uint32_t{len_bytes[0]} << 24) | (std::uint32_t{len_bytes[1]} << 16) |
                            (std::uint32_t{len_bytes[2]} << 8) | len_bytes[3];
  if (len > kMaxControlMessage)
    throw lanes::NetworkError(peer + " sent a control message of " + std::to_string(len) + " bytes");
  std::string body(len, '\0');
  auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(body), lanes::kAsTuple);
  if (ec2) throw lanes::NetworkError("control connection to " + peer + ": " + ec2.message());
  try {
    co_return decode_message_body(body);
  } catch (const std::exception& e) {
    throw lanes::NetworkError(peer + ": " + e.what());
  }
}

}  // namespace gridbcast::job
