// Fuzz target: the handshake (Challenge, Hello, Accept, TLS gate) and frame decoders
// take any bytes; they accept or reject, and what they accept re-encodes
// identically and is within range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "lanes/wire.hpp"

using namespace gridbcast;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  std::string why;
  // Reserved fields must be zero, so whatever a decoder accepts re-encodes
  // byte for byte; ranks it accepts fit an int.
  if (auto h = lanes::decode_hello(in, why)) {
    const auto again = lanes::encode(*h);
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
    if (h->rank > lanes::kMaxRank || h->to_rank > lanes::kMaxRank) std::abort();
  }
  if (auto f = lanes::decode_frame_header(in, why)) {
    if (f->kind == lanes::FrameKind::kData && f->length > lanes::kMaxFrameBytes) std::abort();
    if (f->length > lanes::kMaxMessageBytes) std::abort();
    const auto again = lanes::encode(*f);
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
  }
  if (auto c = lanes::decode_challenge(in, why)) {
    const auto again = lanes::encode(*c);
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
  }
  if (auto g = lanes::decode_tls_gate(in, why)) {
    const auto again = lanes::encode(*g);
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
  }
  if (auto a = lanes::decode_accept(in, why)) {
    const auto again = lanes::encode(*a);
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
  }
  return 0;
}
