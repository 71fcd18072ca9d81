// The wire format, as pure functions over bytes (no sockets): the connection
// handshake and the data frame header, all integers in network byte order.
// Fuzzed by tests/fuzz; every decoder rejects what it cannot trust.
//
// The connector speaks first, so that its data can follow its proof at once:
// one round trip after TCP's, where the acceptor's challenge first took one
// and its Accept another (70 ms before the first byte of data across a WAN
// of 10 ms each way, now 50 ms).
//
//   acceptor                                connector
//      ◄── Hello{magic, version, job, rank, to_rank, lanes, stream, client_nonce, mac = 0} ──
//      ── Challenge{magic, version, server_nonce, mac} ──►
//            mac = HMAC-SHA256(secret, "gridbcast-accept" | client_nonce | server_nonce | Hello)
//      ◄── Proof{mac'} ── then frames at once
//            mac' = HMAC-SHA256(secret, "gridbcast-hello" | server_nonce | Hello)
//   (Hello: the Hello as sent, its mac zero)
//   frames: FrameHeader{kind, seq, offset, length} followed by `length` bytes.
//
// The acceptor proves the secret first, so the connector sends nothing past
// its Hello to a peer that cannot; the acceptor takes nothing past the Proof
// until it has checked it. Fresh nonces on both sides make a recorded
// handshake useless on a new connection; the job id keeps two jobs sharing a
// secret apart. Both MACs cover both ends' identities (job, source rank,
// destination rank, lanes, stream), so neither message can be taken for
// another link's, and their labels differ, so the acceptor's proof, which it
// gives anyone who sends a Hello, is never a connector's.
//
// Version 2 added to_rank to the Hello and the Hello's fields to the Accept
// MAC; version 3 made the connector speak first (the acceptor's proof moved
// into the Challenge, the connector's out of the Hello into the Proof).
//
// On a TLS link the connector proves the job secret before the TLS handshake,
// in plaintext, so that a stranger costs the acceptor an HMAC or two and a
// few bytes, never a TLS first flight (ECDHE and a signature) on the rank's
// I/O thread:
//      ◄── TlsGate{magic "GBT1", version, job, gate_nonce, mac = 0} ──
//      ── Challenge{server_nonce, mac = 0} ──►   (the certificate proves the acceptor)
//      ◄── Proof{mac} ──
//            mac = HMAC-SHA256(secret, "gridbcast-tls-gate" | server_nonce | gate_nonce | job)
//      ◄── TLS 1.3 handshake ──►   then, inside TLS, the Hello with its MAC
//            (mac' above) and the acceptor's Accept{mac} (the Challenge's mac above)
// The server's fresh nonce makes a gate recorded on one connection useless on
// the next. A connection whose first bytes are a TLS record, not a gate, is
// refused before any TLS work.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace gridbcast::lanes {

inline constexpr std::uint32_t kMagic = 0x47424331;  // "GBC1"
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
// A single write never exceeds this (Linux caps one write near 2^31 anyway).
inline constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 30;
// A point-to-point message is one frame whatever its size (written and read in
// pieces); this only bounds what a decoder believes.
inline constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 48;
// Lane number the control channel (rank <-> launcher) uses in its Hello.
inline constexpr std::uint8_t kControlLane = 255;
// Ranks are ints everywhere above the wire: a decoder refuses anything a
// signed cast would turn negative.
inline constexpr std::uint32_t kMaxRank = 0x7fffffff;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

struct Challenge {
  Nonce server_nonce{};
  Mac mac{};  // the acceptor's proof: accept_mac over the Hello (zero after a TlsGate)
};

struct Hello {
  std::uint64_t job_id = 0;
  std::uint32_t rank = 0;     // the connecting rank (source)
  std::uint32_t to_rank = 0;  // the rank it means to reach (destination)
  std::uint8_t lane_from = 0;
  std::uint8_t lane_to = 0;
  std::uint16_t stream = 0;
  Nonce client_nonce{};
  Mac mac{};
};

// A MAC after the magic: the connector's Proof (after a Challenge), and
// inside TLS the acceptor's Accept.
struct Accept {
  Mac mac{};
};
using Proof = Accept;

inline constexpr std::uint32_t kTlsGateMagic = 0x47425431;  // "GBT1"
inline constexpr std::uint16_t kTlsGateVersion = 2;

struct TlsGate {
  std::uint64_t job_id = 0;
  Nonce gate_nonce{};
  Mac mac{};
};

enum class FrameKind : std::uint32_t {
  kData = 1,     // a broadcast segment: seq = broadcast number, offset into the message
  kMessage = 2,  // a point-to-point message sent eagerly (runtime/p2p): seq = context id,
                 // offset = tag (two's complement), length = the whole message, which follows
  // The rendezvous of a large message (runtime/p2p.hpp), on the same connections:
  kRts = 3,       // its envelope: seq = context id, offset = tag, length = the message's
                  // (no bytes follow); the n-th kRts on a connection is rendezvous n
  kCts = 4,       // receiver to sender: rendezvous seq is matched, send it (length 0)
  kRndvData = 5,  // a piece of rendezvous seq at `offset`, `length` bytes follow
                  // (at most kMaxFrameBytes)
  kCredit = 6,    // receiver to sender: seq more bytes of eager credit (length 0)
  // `gridbcast probe` (runtime/probe.hpp), on the probe job's own connections:
  kProbe = 7,  // bytes to count: seq = probe phase, offset = flow; length 0 ends the flow
  kPing = 8,   // a round trip: seq = phase, offset = ping number (length 0), echoed back
};
// The largest probe piece (kProbe) a decoder accepts.
inline constexpr std::uint64_t kMaxProbeFrameBytes = std::uint64_t{1} << 20;

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  std::uint64_t seq = 0;     // broadcast sequence number on this communicator
  std::uint64_t offset = 0;  // into the message
  std::uint64_t length = 0;  // payload bytes that follow
};

inline constexpr size_t kChallengeBytes = 4 + 2 + 2 + kNonceBytes + kMacBytes;
inline constexpr size_t kHelloBytes = 4 + 2 + 2 + 8 + 4 + 4 + 1 + 1 + 2 + kNonceBytes + kMacBytes;
inline constexpr size_t kAcceptBytes = 4 + kMacBytes;  // also a Proof's
inline constexpr size_t kTlsGateBytes = 4 + 2 + 2 + 8 + kNonceBytes + kMacBytes;
inline constexpr size_t kFrameHeaderBytes = 4 + 4 + 8 + 8 + 8;

std::array<std::uint8_t, kChallengeBytes> encode(const Challenge& c);
std::array<std::uint8_t, kHelloBytes> encode(const Hello& h);
std::array<std::uint8_t, kAcceptBytes> encode(const Accept& a);
std::array<std::uint8_t, kTlsGateBytes> encode(const TlsGate& g);
std::array<std::uint8_t, kFrameHeaderBytes> encode(const FrameHeader& f);

// Decoders return nullopt and set `why` for wrong magic, version or kind, a
// rank above kMaxRank, a reserved field that is not zero, or a length over
// its limit.
std::optional<Challenge> decode_challenge(std::span<const std::uint8_t> bytes, std::string& why);
std::optional<Hello> decode_hello(std::span<const std::uint8_t> bytes, std::string& why);
std::optional<Accept> decode_accept(std::span<const std::uint8_t> bytes, std::string& why);
std::optional<TlsGate> decode_tls_gate(std::span<const std::uint8_t> bytes, std::string& why);
std::optional<FrameHeader> decode_frame_header(std::span<const std::uint8_t> bytes,
                                               std::string& why);

// Authentication (OpenSSL): random nonces and the two MACs above.
Nonce random_nonce();
Mac hello_mac(std::span<const std::uint8_t> secret, const Nonce& server_nonce, const Hello& h);
// Covers the Hello the server accepts (its fields, not its MAC), so an Accept
// proves the server agreed to exactly that link.
Mac accept_mac(std::span<const std::uint8_t> secret, const Nonce& client_nonce,
               const Nonce& server_nonce, const Hello& h);
Mac tls_gate_mac(std::span<const std::uint8_t> secret, const Nonce& server_nonce, const TlsGate& g);
// Constant-time comparison.
bool mac_equal(const Mac& a, const Mac& b);

}  // namespace gridbcast::lanes
