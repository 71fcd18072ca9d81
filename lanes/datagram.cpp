#include "lanes/datagram.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace gridbcast::lanes {
namespace {

// v2: the run nonce joined the derivation (v1 keys repeated across runs).
constexpr std::string_view kKeyLabel = "gridbcast multicast datagram key v2";

void put(std::uint8_t*& p, std::uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) *p++ = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint64_t get(const std::uint8_t*& p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | *p++;
  return v;
}

using Full = std::array<std::uint8_t, 32>;

Full hmac(const DatagramKey& key, std::span<const std::uint8_t> bytes) {
  Full out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), bytes.data(), bytes.size(),
           out.data(), &len) == nullptr ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  return out;
}

DecodedFragment reject(Rejection r, std::string why) {
  DecodedFragment d;
  d.rejection = r;
  d.why = std::move(why);
  return d;
}

std::string str(std::uint64_t v) {
  return std::to_string(v);
}

}  // namespace

std::uint32_t FragmentLayout::payload(std::uint32_t index) const {
  if (index + 1 < count) return fragment_bytes;
  return static_cast<std::uint32_t>(total_bytes - offset(index));
}

std::uint32_t fragment_bytes_for_mtu(size_t path_mtu) {
  const size_t overhead = kIpv4UdpHeaderBytes + kDatagramOverhead;
  if (path_mtu <= overhead)
    throw std::invalid_argument("a path MTU of " + str(path_mtu) +
                                " bytes cannot carry a fragment (headers and MAC take " +
                                str(overhead) + ")");
  return static_cast<std::uint32_t>(
      std::min(path_mtu - overhead, kMaxDatagramBytes - kDatagramOverhead));
}

FragmentLayout fragment_layout(std::uint64_t total_bytes, std::uint32_t fragment_bytes) {
  if (fragment_bytes == 0 || fragment_bytes > kMaxDatagramBytes - kDatagramOverhead)
    throw std::invalid_argument("fragment size " + str(fragment_bytes) + " is not in 1.." +
                                str(kMaxDatagramBytes - kDatagramOverhead));
  const std::uint64_t count = std::max<std::uint64_t>(
      1, total_bytes / fragment_bytes + (total_bytes % fragment_bytes != 0));
  if (count > 0xffffffffu)
    throw std::invalid_argument("a message of " + str(total_bytes) + " bytes needs " + str(count) +
                                " fragments of " + str(fragment_bytes) + ", more than 2^32 - 1");
  return FragmentLayout{total_bytes, fragment_bytes, static_cast<std::uint32_t>(count)};
}

FragmentHeader fragment_header(std::uint64_t job_id, std::uint64_t broadcast_id,
                               const FragmentLayout& layout, std::uint32_t index) {
  if (index >= layout.count)
    throw std::invalid_argument("fragment " + str(index) + " of " + str(layout.count));
  return FragmentHeader{job_id,
                        broadcast_id,
                        index,
                        layout.count,
                        layout.total_bytes,
                        layout.fragment_bytes,
                        layout.payload(index)};
}

DatagramKey datagram_key(std::span<const std::uint8_t> secret, std::uint64_t job_id,
                         const RunNonce& run_nonce, std::uint64_t communicator) {
  if (secret.empty()) throw std::runtime_error("the datagram key needs a job secret");
  if (std::all_of(run_nonce.begin(), run_nonce.end(), [](std::uint8_t b) { return b == 0; }))
    throw std::runtime_error(
        "the datagram key needs a run nonce, and this one is all zero (none was drawn)");
  // Fixed-size fields only, so no two inputs share an encoding.
  std::vector<std::uint8_t> info(kKeyLabel.begin(), kKeyLabel.end());
  auto put64 = [&](std::uint64_t v) {
    for (int i = 7; i >= 0; --i) info.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put64(job_id);
  info.insert(info.end(), run_nonce.begin(), run_nonce.end());
  put64(communicator);
  const std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), EVP_PKEY_CTX_free);
  DatagramKey key{};
  size_t len = key.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), secret.data(), static_cast<int>(secret.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.data(), static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), key.data(), &len) <= 0 || len != key.size())
    throw std::runtime_error("HKDF-SHA256 failed in OpenSSL");
  return key;
}

size_t encode_fragment(const FragmentHeader& h, std::span<const std::uint8_t> payload,
                       const DatagramKey& key, std::span<std::uint8_t> out) {
  if (payload.size() != h.payload_bytes)
    throw std::invalid_argument("payload of " + str(payload.size()) + " bytes, header says " +
                                str(h.payload_bytes));
  const size_t size = kDatagramOverhead + payload.size();
  if (out.size() < size)
    throw std::invalid_argument("a datagram of " + str(size) + " bytes does not fit " +
                                str(out.size()));
  std::uint8_t* p = out.data();
  put(p, kDatagramMagic, 4);
  put(p, kDatagramVersion, 2);
  put(p, 0, 2);
  put(p, h.job_id, 8);
  put(p, h.broadcast_id, 8);
  put(p, h.index, 4);
  put(p, h.count, 4);
  put(p, h.total_bytes, 8);
  put(p, h.fragment_bytes, 4);
  put(p, h.payload_bytes, 4);
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  const Full mac = hmac(key, out.first(kFragmentHeaderBytes + payload.size()));
  std::memcpy(out.data() + kFragmentHeaderBytes + payload.size(), mac.data(), kDatagramMacBytes);
  return size;
}

const char* rejection_name(Rejection r) {
  switch (r) {
    case Rejection::kNone:
      return "accepted";
    case Rejection::kMalformed:
      return "malformed";
    case Rejection::kOtherJob:
      return "other job";
    case Rejection::kBadMac:
      return "bad MAC";
    case Rejection::kOutOfRange:
      return "out of range";
    case Rejection::kTooLarge:
      return "too large";
    case Rejection::kOtherBroadcast:
      return "other broadcast";
    case Rejection::kMismatch:
      return "mismatch";
    case Rejection::kDuplicate:
      return "duplicate";
    case Rejection::kTooFarAhead:
      return "too far ahead";
  }
  return "unknown";
}

DecodedFragment decode_fragment(std::span<const std::uint8_t> datagram, const DatagramKey& key,
                                std::uint64_t job_id, std::uint64_t max_total_bytes) {
  // The structure first: nothing below reads past what arrived.
  if (datagram.size() < kDatagramOverhead || datagram.size() > kMaxDatagramBytes)
    return reject(Rejection::kMalformed, "datagram of " + str(datagram.size()) +
                                             " bytes (a fragment has " + str(kDatagramOverhead) +
                                             ".." + str(kMaxDatagramBytes) + ")");
  const std::uint8_t* p = datagram.data();
  if (get(p, 4) != kDatagramMagic)
    return reject(Rejection::kMalformed, "wrong magic (not a gridbcast datagram)");
  if (const auto version = get(p, 2); version != kDatagramVersion)
    return reject(Rejection::kMalformed, "datagram version " + str(version) +
                                             ", this build speaks " + str(kDatagramVersion));
  if (const auto reserved = get(p, 2); reserved != 0)
    return reject(Rejection::kMalformed, "reserved field is " + str(reserved) + ", not 0");
  FragmentHeader h;
  h.job_id = get(p, 8);
  h.broadcast_id = get(p, 8);
  h.index = static_cast<std::uint32_t>(get(p, 4));
  h.count = static_cast<std::uint32_t>(get(p, 4));
  h.total_bytes = get(p, 8);
  h.fragment_bytes = static_cast<std::uint32_t>(get(p, 4));
  h.payload_bytes = static_cast<std::uint32_t>(get(p, 4));
  if (h.payload_bytes != datagram.size() - kDatagramOverhead)
    return reject(Rejection::kMalformed, "payload length " + str(h.payload_bytes) + " in a " +
                                             str(datagram.size()) + "-byte datagram");
  // Another job's key differs (it is derived with the job id): say which it
  // was, not just that the MAC failed.
  if (h.job_id != job_id)
    return reject(Rejection::kOtherJob, "job id " + str(h.job_id) + ", this job is " + str(job_id));
  const size_t signed_bytes = kFragmentHeaderBytes + h.payload_bytes;
  const Full mac = hmac(key, datagram.first(signed_bytes));
  if (CRYPTO_memcmp(mac.data(), datagram.data() + signed_bytes, kDatagramMacBytes) != 0)
    return reject(Rejection::kBadMac, "MAC does not verify (not made with this job's secret)");

  // Authentic; still every value is checked before anyone computes with it.
  if (h.total_bytes > max_total_bytes)
    return reject(Rejection::kTooLarge, "message of " + str(h.total_bytes) +
                                            " bytes, the limit is " + str(max_total_bytes));
  if (h.fragment_bytes == 0 || h.fragment_bytes > kMaxDatagramBytes - kDatagramOverhead)
    return reject(Rejection::kOutOfRange, "fragment size " + str(h.fragment_bytes));
  const std::uint64_t count = std::max<std::uint64_t>(
      1, h.total_bytes / h.fragment_bytes + (h.total_bytes % h.fragment_bytes != 0));
  if (h.count != count)
    return reject(Rejection::kOutOfRange, "fragment count " + str(h.count) + ", but " +
                                              str(h.total_bytes) + " bytes in fragments of " +
                                              str(h.fragment_bytes) + " make " + str(count));
  if (h.index >= h.count)
    return reject(Rejection::kOutOfRange,
                  "fragment index " + str(h.index) + " of " + str(h.count) + " fragments");
  const FragmentLayout layout{h.total_bytes, h.fragment_bytes, h.count};
  if (h.payload_bytes != layout.payload(h.index))
    return reject(Rejection::kOutOfRange, "fragment " + str(h.index) + " carries " +
                                              str(h.payload_bytes) + " bytes, expected " +
                                              str(layout.payload(h.index)));
  DecodedFragment d;
  d.header = h;
  d.payload = datagram.subspan(kFragmentHeaderBytes, h.payload_bytes);
  return d;
}

FragmentBitmap::FragmentBitmap(std::uint32_t count)
    : words_((static_cast<size_t>(count) + 63) / 64, 0), size_(count) {}

bool FragmentBitmap::test(std::uint32_t index) const {
  return index < size_ && ((words_[index / 64] >> (index % 64)) & 1u) != 0;
}

bool FragmentBitmap::set(std::uint32_t index) {
  if (index >= size_)
    throw std::out_of_range("fragment " + str(index) + " of a bitmap of " + str(size_));
  std::uint64_t& word = words_[index / 64];
  const std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if ((word & bit) != 0) return false;
  word |= bit;
  ++held_;
  return true;
}

std::optional<std::uint32_t> FragmentBitmap::first_missing() const {
  for (size_t w = 0; w < words_.size(); ++w) {
    if (words_[w] == ~std::uint64_t{0}) continue;
    const auto index = static_cast<std::uint32_t>(w * 64 + std::countr_one(words_[w]));
    if (index < size_) return index;
  }
  return std::nullopt;
}

std::vector<std::uint32_t> FragmentBitmap::missing() const {
  std::vector<std::uint32_t> out;
  out.reserve(size_ - held_);
  for (std::uint32_t i = 0; i < size_; ++i)
    if (!test(i)) out.push_back(i);
  return out;
}

FragmentAssembler::FragmentAssembler(const DatagramKey& key, std::uint64_t job_id,
                                     std::uint64_t broadcast_id, std::span<std::uint8_t> buffer)
    : key_(key), job_id_(job_id), broadcast_id_(broadcast_id), buffer_(buffer) {}

FragmentAssembler::Outcome FragmentAssembler::accept(std::span<const std::uint8_t> datagram) {
  const DecodedFragment d = decode_fragment(datagram, key_, job_id_, buffer_.size());
  if (!d.ok()) return Outcome{d.rejection, d.why};
  return accept(d);
}

FragmentAssembler::Outcome FragmentAssembler::accept(const DecodedFragment& d) {
  if (!d.ok()) return Outcome{d.rejection, d.why};
  const FragmentHeader& h = d.header;
  if (h.broadcast_id != broadcast_id_)
    return Outcome{Rejection::kOtherBroadcast, "broadcast id " + str(h.broadcast_id) +
                                                   ", this rank waits for " + str(broadcast_id_)};
  // decode_fragment() checked the fragment against its own header; here the
  // header must match this rank's buffer and the broadcast's first fragment.
  if (h.total_bytes != buffer_.size())
    return Outcome{Rejection::kMismatch, "message of " + str(h.total_bytes) +
                                             " bytes, this rank's buffer has " +
                                             str(buffer_.size())};
  if (layout_ && layout_->fragment_bytes != h.fragment_bytes)
    return Outcome{Rejection::kMismatch, "fragment size " + str(h.fragment_bytes) +
                                             ", earlier fragments had " +
                                             str(layout_->fragment_bytes)};
  if (!layout_) {
    layout_ = FragmentLayout{h.total_bytes, h.fragment_bytes, h.count};
    bitmap_ = FragmentBitmap(h.count);
  }
  if (bitmap_.test(h.index))
    return Outcome{Rejection::kDuplicate, "fragment " + str(h.index) + " again"};
  const std::uint64_t offset = h.offset();
  if (offset > buffer_.size() || d.payload.size() > buffer_.size() - offset)
    return Outcome{Rejection::kOutOfRange,
                   "fragment " + str(h.index) + " would end past the buffer"};
  if (!d.payload.empty()) std::memcpy(buffer_.data() + offset, d.payload.data(), d.payload.size());
  bitmap_.set(h.index);
  return Outcome{};
}

}  // namespace gridbcast::lanes
