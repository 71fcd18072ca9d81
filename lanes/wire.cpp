#include "lanes/wire.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace gridbcast::lanes {
namespace {

class Writer {
 public:
  explicit Writer(std::uint8_t* out) : p_(out) {}
  void u8(std::uint8_t v) { *p_++ = v; }
  void u16(std::uint16_t v) { be(v, 2); }
  void u32(std::uint32_t v) { be(v, 4); }
  void u64(std::uint64_t v) { be(v, 8); }
  template <size_t N>
  void bytes(const std::array<std::uint8_t, N>& a) {
    for (auto b : a) *p_++ = b;
  }

 private:
  void be(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) *p_++ = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::uint8_t* p_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  std::uint8_t u8() { return in_[pos_++]; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(be(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(be(4)); }
  std::uint64_t u64() { return be(8); }
  template <size_t N>
  void bytes(std::array<std::uint8_t, N>& a) {
    for (auto& b : a) b = in_[pos_++];
  }

 private:
  std::uint64_t be(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | in_[pos_++];
    return v;
  }
  std::span<const std::uint8_t> in_;
  size_t pos_ = 0;
};

bool check_size(std::span<const std::uint8_t> bytes, size_t want, const char* what,
                std::string& why) {
  if (bytes.size() == want) return true;
  why = std::string(what) + " has " + std::to_string(bytes.size()) + " bytes, expected " +
        std::to_string(want);
  return false;
}

bool check_preamble(Reader& r, std::string& why) {
  const std::uint32_t magic = r.u32();
  if (magic != kMagic) {
    why = "wrong magic (not a gridbcast peer)";
    return false;
  }
  const std::uint16_t version = r.u16();
  const std::uint16_t reserved = r.u16();
  if (version != kProtocolVersion) {
    why = "protocol version " + std::to_string(version) + ", this build speaks " +
          std::to_string(kProtocolVersion);
    return false;
  }
  if (reserved != 0) {
    why = "reserved field is " + std::to_string(reserved) + ", not 0";
    return false;
  }
  return true;
}

Mac hmac(std::span<const std::uint8_t> secret, const std::vector<std::uint8_t>& msg) {
  Mac out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
           out.data(), &len) == nullptr ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  return out;
}

void append(std::vector<std::uint8_t>& v, std::string_view s) {
  v.insert(v.end(), s.begin(), s.end());
}
template <size_t N>
void append(std::vector<std::uint8_t>& v, const std::array<std::uint8_t, N>& a) {
  v.insert(v.end(), a.begin(), a.end());
}

}  // namespace

std::array<std::uint8_t, kChallengeBytes> encode(const Challenge& c) {
  std::array<std::uint8_t, kChallengeBytes> out{};
  Writer w(out.data());
  w.u32(kMagic);
  w.u16(kProtocolVersion);
  w.u16(0);
  w.bytes(c.server_nonce);
  w.bytes(c.mac);
  return out;
}

std::array<std::uint8_t, kHelloBytes> encode(const Hello& h) {
  std::array<std::uint8_t, kHelloBytes> out{};
  Writer w(out.data());
  w.u32(kMagic);
  w.u16(kProtocolVersion);
  w.u16(0);
  w.u64(h.job_id);
  w.u32(h.rank);
  w.u32(h.to_rank);
  w.u8(h.lane_from);
  w.u8(h.lane_to);
  w.u16(h.stream);
  w.bytes(h.client_nonce);
  w.bytes(h.mac);
  return out;
}

std::array<std::uint8_t, kAcceptBytes> encode(const Accept& a) {
  std::array<std::uint8_t, kAcceptBytes> out{};
  Writer w(out.data());
  w.u32(kMagic);
  w.bytes(a.mac);
  return out;
}

std::array<std::uint8_t, kTlsGateBytes> encode(const TlsGate& g) {
  std::array<std::uint8_t, kTlsGateBytes> out{};
  Writer w(out.data());
  w.u32(kTlsGateMagic);
  w.u16(kTlsGateVersion);
  w.u16(0);
  w.u64(g.job_id);
  w.bytes(g.gate_nonce);
  w.bytes(g.mac);
  return out;
}

std::array<std::uint8_t, kFrameHeaderBytes> encode(const FrameHeader& f) {
  std::array<std::uint8_t, kFrameHeaderBytes> out{};
  Writer w(out.data());
  w.u32(static_cast<std::uint32_t>(f.kind));
  w.u32(0);
  w.u64(f.seq);
  w.u64(f.offset);
  w.u64(f.length);
  return out;
}

std::optional<Challenge> decode_challenge(std::span<const std::uint8_t> bytes, std::string& why) {
  if (!check_size(bytes, kChallengeBytes, "challenge", why)) return std::nullopt;
  Reader r(bytes);
  if (!check_preamble(r, why)) return std::nullopt;
  Challenge c;
  r.bytes(c.server_nonce);
  r.bytes(c.mac);
  return c;
}

std::optional<Hello> decode_hello(std::span<const std::uint8_t> bytes, std::string& why) {
  if (!check_size(bytes, kHelloBytes, "hello", why)) return std::nullopt;
  Reader r(bytes);
  if (!check_preamble(r, why)) return std::nullopt;
  Hello h;
  h.job_id = r.u64();
  h.rank = r.u32();
  h.to_rank = r.u32();
  h.lane_from = r.u8();
  h.lane_to = r.u8();
  h.stream = r.u16();
  r.bytes(h.client_nonce);
  r.bytes(h.mac);
  for (const auto& [name, rank] :
       {std::pair{"rank", h.rank}, std::pair{"destination rank", h.to_rank}})
    if (rank > kMaxRank) {
      why = std::string(name) + " " + std::to_string(rank) + " is out of range (at most " +
            std::to_string(kMaxRank) + ")";
      return std::nullopt;
    }
  return h;
}

std::optional<Accept> decode_accept(std::span<const std::uint8_t> bytes, std::string& why) {
  if (!check_size(bytes, kAcceptBytes, "accept", why)) return std::nullopt;
  Reader r(bytes);
  if (r.u32() != kMagic) {
    why = "wrong magic in accept";
    return std::nullopt;
  }
  Accept a;
  r.bytes(a.mac);
  return a;
}

std::optional<TlsGate> decode_tls_gate(std::span<const std::uint8_t> bytes, std::string& why) {
  if (!check_size(bytes, kTlsGateBytes, "TLS gate", why)) return std::nullopt;
  Reader r(bytes);
  if (r.u32() != kTlsGateMagic) {
    why = "wrong magic in the TLS gate";
    return std::nullopt;
  }
  const std::uint16_t version = r.u16();
  const std::uint16_t reserved = r.u16();
  if (version != kTlsGateVersion || reserved != 0) {
    why = "TLS gate version " + std::to_string(version) + " (reserved " + std::to_string(reserved) +
          "), this build speaks " + std::to_string(kTlsGateVersion);
    return std::nullopt;
  }
  TlsGate g;
  g.job_id = r.u64();
  r.bytes(g.gate_nonce);
  r.bytes(g.mac);
  return g;
}

std::optional<FrameHeader> decode_frame_header(std::span<const std::uint8_t> bytes,
                                               std::string& why) {
  if (!check_size(bytes, kFrameHeaderBytes, "frame header", why)) return std::nullopt;
  Reader r(bytes);
  const std::uint32_t kind = r.u32();
  if (kind < static_cast<std::uint32_t>(FrameKind::kData) ||
      kind > static_cast<std::uint32_t>(FrameKind::kPing)) {
    why = "unknown frame kind " + std::to_string(kind);
    return std::nullopt;
  }
  if (const std::uint32_t reserved = r.u32(); reserved != 0) {
    why = "frame header's reserved field is " + std::to_string(reserved) + ", not 0";
    return std::nullopt;
  }
  FrameHeader f;
  f.kind = static_cast<FrameKind>(kind);
  f.seq = r.u64();
  f.offset = r.u64();
  f.length = r.u64();
  // What follows a header is bounded by its kind: a segment or a piece by one
  // frame, an eager message or an envelope's message by kMaxMessageBytes, and
  // the rendezvous signals carry nothing.
  // A probe's piece by kMaxProbeFrameBytes (its receiver reads it into a
  // scratch buffer of that size).
  const bool signal =
      f.kind == FrameKind::kCts || f.kind == FrameKind::kCredit || f.kind == FrameKind::kPing;
  std::uint64_t limit = kMaxMessageBytes;
  if (signal)
    limit = 0;
  else if (f.kind == FrameKind::kData || f.kind == FrameKind::kRndvData)
    limit = kMaxFrameBytes;
  else if (f.kind == FrameKind::kProbe)
    limit = kMaxProbeFrameBytes;
  if (f.length > limit) {
    why = "frame of " + std::to_string(f.length) + " bytes exceeds the limit of " +
          std::to_string(limit);
    return std::nullopt;
  }
  return f;
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw std::runtime_error("OpenSSL RAND_bytes failed");
  return n;
}

Mac hello_mac(std::span<const std::uint8_t> secret, const Nonce& server_nonce, const Hello& h) {
  Hello unsigned_hello = h;
  unsigned_hello.mac = Mac{};
  std::vector<std::uint8_t> msg;
  append(msg, "gridbcast-hello");
  append(msg, server_nonce);
  append(msg, encode(unsigned_hello));
  return hmac(secret, msg);
}

Mac accept_mac(std::span<const std::uint8_t> secret, const Nonce& client_nonce,
               const Nonce& server_nonce, const Hello& h) {
  Hello unsigned_hello = h;
  unsigned_hello.mac = Mac{};
  std::vector<std::uint8_t> msg;
  append(msg, "gridbcast-accept");
  append(msg, client_nonce);
  append(msg, server_nonce);
  append(msg, encode(unsigned_hello));
  return hmac(secret, msg);
}

Mac tls_gate_mac(std::span<const std::uint8_t> secret, const Nonce& server_nonce,
                 const TlsGate& g) {
  TlsGate unsigned_gate = g;
  unsigned_gate.mac = Mac{};
  std::vector<std::uint8_t> msg;
  append(msg, "gridbcast-tls-gate");
  append(msg, server_nonce);
  append(msg, encode(unsigned_gate));
  return hmac(secret, msg);
}

bool mac_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace gridbcast::lanes
