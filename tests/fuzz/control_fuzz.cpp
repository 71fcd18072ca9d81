// Fuzz target: the control protocol's decoders (job/protocol.hpp) take any
// bytes; they accept or refuse, and what they accept re-encodes identically.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "job/protocol.hpp"

using namespace gridbcast::job::control;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const ToRank m = decode_to_rank(body, 0);
    if (encode_body(m) != body) std::abort();
  } catch (const ProtocolError&) {
  }
  try {
    const ToLauncher m = decode_to_launcher(body);
    if (encode_body(m) != body) std::abort();
  } catch (const ProtocolError&) {
  }
  // A frame whose tag is whatever the input ends with: refused, never a crash.
  if (size >= kTagBytes) {
    Sealer s(std::vector<std::uint8_t>(32, 1), 1, 0);
    std::array<std::uint8_t, kTagBytes> tag{};
    std::copy(data + size - kTagBytes, data + size, tag.begin());
    try {
      s.open(Direction::kToLauncher, body.substr(0, size - kTagBytes), tag);
      std::abort();  // a forged tag that passed
    } catch (const ProtocolError&) {
    }
  }
  return 0;
}
