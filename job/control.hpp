// The control channel between the launcher and its ranks: an authenticated TCP
// connection (the lanes handshake, lane kControlLane) carrying small messages,
// each a type and string fields:
//   u32 total length | u32 field count | (u32 length, bytes) per field
// Field 0 is the type. Internal to runtime.
#pragma once

#include <string>
#include <vector>

#include "lanes/net.hpp"

namespace gridbcast::job {

struct Message {
  std::vector<std::string> fields;  // fields[0] is the type
  const std::string& type() const { return fields.at(0); }
  const std::string& at(size_t i) const;  // throws a clear error when absent
};

// Builds a message without an initializer_list (GCC 12 miscompiles those as
// temporaries inside coroutines: "array used as initializer").
template <typename... Fields>
Message make_message(std::string type, Fields&&... fields) {
  Message m;
  m.fields.reserve(1 + sizeof...(fields));
  m.fields.push_back(std::move(type));
  (m.fields.push_back(std::string(std::forward<Fields>(fields))), ...);
  return m;
}

inline constexpr std::uint32_t kMaxControlMessage = 64u << 20;

std::string encode_message(const Message& m);
// Throws std::runtime_error on a malformed body.
Message decode_message_body(const std::string& body);

asio::awaitable<void> send_message(lanes::tcp::socket& s, const Message& m);
// Throws lanes::NetworkError on EOF, errors, or an oversized message.
asio::awaitable<Message> receive_message(lanes::tcp::socket& s, const std::string& peer);

}  // namespace gridbcast::job
