// Fuzz target: the multicast datagram decoder and the receiver's assembler take
// any bytes. Random bytes never carry a valid MAC, so the first byte picks a
// mode: 0, the bytes as a datagram; otherwise the bytes are a header and a
// payload that the target signs with the key first, so every range check after
// the MAC is reached. Whatever is accepted must lie inside the buffer, and a
// rejected datagram must leave the buffer untouched.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "lanes/datagram.hpp"

using namespace gridbcast;

namespace {

constexpr std::uint64_t kJob = 7;
constexpr std::uint64_t kBroadcast = 3;
constexpr size_t kBuffer = 4096;

std::uint64_t be(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::uint8_t> secret(32, 1);
  static const lanes::RunNonce nonce{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  static const lanes::DatagramKey key = lanes::datagram_key(secret, kJob, nonce);
  if (size < 1) return 0;
  std::vector<std::uint8_t> datagram;
  if (data[0] == 0) {
    datagram.assign(data + 1, data + size);
  } else {
    // bytes 1..: broadcast id low byte, index (4), count (4), total (8),
    // fragment (4), then the payload.
    constexpr size_t kFields = 1 + 1 + 4 + 4 + 8 + 4;
    if (size < kFields) return 0;
    const std::uint8_t* p = data + 1;
    lanes::FragmentHeader h;
    h.job_id = kJob;
    h.broadcast_id = kBroadcast + (p[0] & 1);
    h.index = static_cast<std::uint32_t>(be(p + 1, 4));
    h.count = static_cast<std::uint32_t>(be(p + 5, 4));
    h.total_bytes = be(p + 9, 8);
    h.fragment_bytes = static_cast<std::uint32_t>(be(p + 17, 4));
    const std::span<const std::uint8_t> payload(data + kFields, size - kFields);
    if (payload.size() > lanes::kMaxDatagramBytes - lanes::kDatagramOverhead) return 0;
    h.payload_bytes = static_cast<std::uint32_t>(payload.size());
    datagram.resize(lanes::kDatagramOverhead + payload.size());
    lanes::encode_fragment(h, payload, key, datagram);
  }
  const auto d = lanes::decode_fragment(datagram, key, kJob, kBuffer);
  if (d.ok()) {
    const auto& h = d.header;
    if (h.index >= h.count || h.total_bytes > kBuffer || h.fragment_bytes == 0) std::abort();
    if (h.offset() + d.payload.size() > h.total_bytes) std::abort();
    if (d.payload.data() < datagram.data() ||
        d.payload.data() + d.payload.size() > datagram.data() + datagram.size())
      std::abort();
  } else if (d.why.empty()) {
    std::abort();
  }
  // The assembler: a buffer of exactly the announced size (when it fits), so
  // accepted datagrams reach the copy.
  const size_t n = d.ok() ? static_cast<size_t>(d.header.total_bytes) : kBuffer;
  std::vector<std::uint8_t> buffer(n, 0xa5);
  lanes::FragmentAssembler a(key, kJob, kBroadcast, buffer);
  const auto first = a.accept(datagram);
  if (!first.ok()) {
    for (const auto b : buffer)
      if (b != 0xa5) std::abort();  // a rejected datagram wrote into the buffer
  } else {
    if (!a.started() || !a.bitmap().test(d.header.index)) std::abort();
    if (a.accept(datagram).rejection != lanes::Rejection::kDuplicate) std::abort();
  }
  return 0;
}
