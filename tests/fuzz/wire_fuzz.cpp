// Fuzz target: the handshake and frame decoders take any
// bytes; they accept or reject, and what they accept re-encodes identically.
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
  if (auto h = lanes::decode_hello(in, why)) {
    const auto again = lanes::encode(*h);
    // The reserved field is not kept; everything else must survive.
    if (std::memcmp(again.data() + 8, data + 8, again.size() - 8) != 0) std::abort();
  }
  if (auto f = lanes::decode_frame_header(in, why)) {
    if (f->kind == lanes::FrameKind::kData && f->length > lanes::kMaxFrameBytes) std::abort();
    const auto again = lanes::encode(*f);
    if (std::memcmp(again.data(), data, 4) != 0 || std::memcmp(again.data() + 8, data + 8, 24) != 0)
      std::abort();
  }
  (void)lanes::decode_challenge(in, why);
  (void)lanes::decode_accept(in, why);
  return 0;
}
