#include "lanes/wire.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace gridbcast::lanes {
namespace {

std::vector<std::uint8_t> secret(const char* s) {
  return {s, s + std::strlen(s)};
}

TEST(Wire, HelloRoundTripsInNetworkByteOrder) {
  Hello h;
  h.job_id = 0x0102030405060708ull;
  h.rank = 0x11223344;
  h.lane_from = 1;
  h.lane_to = 0;
  h.stream = 7;
  h.client_nonce = random_nonce();
  const auto bytes = encode(h);
  EXPECT_EQ(bytes[0], 0x47);  // "GBC1", big-endian
  EXPECT_EQ(bytes[8], 0x01);  // job id, most significant byte first
  EXPECT_EQ(bytes[15], 0x08);
  std::string why;
  auto back = decode_hello(bytes, why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->job_id, h.job_id);
  EXPECT_EQ(back->rank, h.rank);
  EXPECT_EQ(back->lane_from, 1);
  EXPECT_EQ(back->stream, 7);
  EXPECT_EQ(back->client_nonce, h.client_nonce);
}

TEST(Wire, DecodersRejectWrongMagicVersionAndSize) {
  auto bytes = encode(Challenge{random_nonce()});
  std::string why;
  EXPECT_TRUE(decode_challenge(bytes, why).has_value());
  auto bad = bytes;
  bad[0] ^= 0xff;
  EXPECT_FALSE(decode_challenge(bad, why).has_value());
  EXPECT_NE(why.find("magic"), std::string::npos);
  bad = bytes;
  bad[5] = 99;  // version
  EXPECT_FALSE(decode_challenge(bad, why).has_value());
  EXPECT_NE(why.find("version"), std::string::npos);
  EXPECT_FALSE(decode_challenge(std::span(bytes).first(10), why).has_value());
}

// Version 3's Challenge carries the acceptor's proof whole.
TEST(Wire, TheChallengeCarriesItsNonceAndTheAcceptorsProof) {
  Challenge c{random_nonce(), {}};
  c.mac.fill(0xa7);
  c.mac.back() = 0x01;
  std::string why;
  const auto back = decode_challenge(encode(c), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->server_nonce, c.server_nonce);
  EXPECT_EQ(back->mac, c.mac);
  EXPECT_EQ(kChallengeBytes, 4u + 2 + 2 + kNonceBytes + kMacBytes);
}

TEST(Wire, FrameHeaderCarries64BitOffsetsAndRejectsHugeLengths) {
  FrameHeader f{FrameKind::kData, 3, (1ull << 40) + 5, 4096};
  const auto bytes = encode(f);
  std::string why;
  auto back = decode_frame_header(bytes, why);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->offset, (1ull << 40) + 5);
  EXPECT_EQ(back->seq, 3u);
  f.length = 1ull << 63;
  EXPECT_FALSE(decode_frame_header(encode(f), why).has_value());
  EXPECT_NE(why.find("exceeds"), std::string::npos);
  auto bad = encode(FrameHeader{});
  bad[3] = 9;
  EXPECT_FALSE(decode_frame_header(bad, why).has_value());
}

TEST(Wire, MacsDependOnSecretNoncesAndFields) {
  Hello h;
  h.rank = 3;
  h.client_nonce = random_nonce();
  const Nonce server = random_nonce();
  const Mac m = hello_mac(secret("s3cret"), server, h);
  EXPECT_TRUE(mac_equal(m, hello_mac(secret("s3cret"), server, h)));
  EXPECT_FALSE(mac_equal(m, hello_mac(secret("other"), server, h)));
  EXPECT_FALSE(mac_equal(m, hello_mac(secret("s3cret"), random_nonce(), h)));
  Hello h2 = h;
  h2.rank = 4;
  EXPECT_FALSE(mac_equal(m, hello_mac(secret("s3cret"), server, h2)));
  h2 = h;
  h2.mac = m;  // the mac field itself is not covered
  EXPECT_TRUE(mac_equal(m, hello_mac(secret("s3cret"), server, h2)));
}

TEST(Wire, MessageFramesCarryContextTagAndLengthsBeyondOneFrame) {
  // Point-to-point messages (runtime/p2p): seq = context, offset = tag, and the
  // whole message in one frame, whatever its size up to kMaxMessageBytes.
  const FrameHeader m{FrameKind::kMessage, 0xfeedull << 40, static_cast<std::uint64_t>(-3),
                      (5ull << 30) + 1};
  std::string why;
  const auto back = decode_frame_header(encode(m), why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->kind, FrameKind::kMessage);
  EXPECT_EQ(back->seq, 0xfeedull << 40);
  EXPECT_EQ(static_cast<std::int64_t>(back->offset), -3);
  EXPECT_EQ(back->length, (5ull << 30) + 1);
  FrameHeader huge = m;
  huge.length = kMaxMessageBytes + 1;
  EXPECT_FALSE(decode_frame_header(encode(huge), why).has_value());
  FrameHeader data = m;
  data.kind = FrameKind::kData;  // data frames stay within kMaxFrameBytes
  EXPECT_FALSE(decode_frame_header(encode(data), why).has_value());
}

// Probe frames (runtime/probe): a piece is at most kMaxProbeFrameBytes, which
// is what its receiver's scratch buffer holds, and a ping carries nothing.
TEST(Wire, ProbePiecesAreBoundedAndPingsCarryNothing) {
  std::string why;
  FrameHeader piece{FrameKind::kProbe, 3, 7, kMaxProbeFrameBytes};
  auto back = decode_frame_header(encode(piece), why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->kind, FrameKind::kProbe);
  EXPECT_EQ(back->offset, 7u);
  piece.length = kMaxProbeFrameBytes + 1;
  EXPECT_FALSE(decode_frame_header(encode(piece), why).has_value());
  EXPECT_NE(why.find("exceeds the limit"), std::string::npos) << why;
  FrameHeader ping{FrameKind::kPing, 3, 41, 0};
  ASSERT_TRUE(decode_frame_header(encode(ping), why).has_value()) << why;
  ping.length = 1;
  EXPECT_FALSE(decode_frame_header(encode(ping), why).has_value());
  auto bytes = encode(ping);
  bytes[3] = 9;  // past the last kind
  EXPECT_FALSE(decode_frame_header(bytes, why).has_value());
  EXPECT_NE(why.find("unknown frame kind 9"), std::string::npos) << why;
}

// Ranks are ints above the wire: a decoder refuses what a signed cast would
// turn negative, and reserved fields that are not zero.
TEST(Wire, HelloDecoderRefusesRanksOfTwoToTheThirtyFirstAndNonZeroReservedFields) {
  Hello h;
  h.rank = 5;
  h.to_rank = 6;
  std::string why;
  auto back = decode_hello(encode(h), why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->to_rank, 6u);
  for (const std::uint32_t bad : {0x80000000u, 0xffffffffu}) {
    Hello from = h;
    from.rank = bad;
    EXPECT_FALSE(decode_hello(encode(from), why).has_value()) << bad;
    EXPECT_NE(why.find("out of range"), std::string::npos) << why;
    Hello to = h;
    to.to_rank = bad;
    EXPECT_FALSE(decode_hello(encode(to), why).has_value()) << bad;
    EXPECT_NE(why.find("destination rank"), std::string::npos) << why;
  }
  auto bytes = encode(h);
  bytes[7] = 1;  // the reserved field after the version
  EXPECT_FALSE(decode_hello(bytes, why).has_value());
  auto frame = encode(FrameHeader{FrameKind::kData, 1, 0, 10});
  frame[7] = 1;
  EXPECT_FALSE(decode_frame_header(frame, why).has_value());
  EXPECT_NE(why.find("reserved"), std::string::npos) << why;
}

// Both MACs bind both ends: an Accept for one link is no Accept for another.
TEST(Wire, AcceptMacBindsTheHellosJobRanksLanesAndStream) {
  const auto s = secret("s3cret");
  const Nonce server = random_nonce();
  Hello h;
  h.job_id = 9;
  h.rank = 1;
  h.to_rank = 2;
  h.lane_from = 1;
  h.lane_to = 0;
  h.stream = 3;
  h.client_nonce = random_nonce();
  const Mac m = accept_mac(s, h.client_nonce, server, h);
  EXPECT_TRUE(mac_equal(m, accept_mac(s, h.client_nonce, server, h)));
  Hello other = h;
  other.mac = random_nonce();  // the Hello's own MAC is not part of it
  EXPECT_TRUE(mac_equal(m, accept_mac(s, h.client_nonce, server, other)));
  for (int field = 0; field < 6; ++field) {
    other = h;
    switch (field) {
      case 0:
        other.job_id = 10;
        break;
      case 1:
        other.rank = 3;
        break;
      case 2:
        other.to_rank = 3;
        break;
      case 3:
        other.lane_from = 0;
        break;
      case 4:
        other.lane_to = 1;
        break;
      default:
        other.stream = 4;
        break;
    }
    EXPECT_FALSE(mac_equal(m, accept_mac(s, h.client_nonce, server, other))) << field;
    EXPECT_FALSE(mac_equal(hello_mac(s, server, h), hello_mac(s, server, other))) << field;
  }
}

// The gate a TLS client sends before its handshake: round-trips, refuses what
// is not one, and its MAC binds the secret, the server's nonce and the job.
TEST(Wire, TlsGateRoundTripsAndItsMacBindsSecretServerNonceAndJob) {
  TlsGate g;
  g.job_id = 0x0102030405060708;
  g.gate_nonce = random_nonce();
  const std::vector<std::uint8_t> secret(32, 0x5a);
  const Nonce server = random_nonce();
  g.mac = tls_gate_mac(secret, server, g);
  const auto bytes = encode(g);
  EXPECT_EQ(bytes[0], 'G');
  EXPECT_EQ(bytes[3], '1');
  EXPECT_NE(bytes[0], 0x16) << "never mistaken for a TLS record";
  std::string why;
  const auto back = decode_tls_gate(bytes, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->job_id, g.job_id);
  EXPECT_TRUE(mac_equal(back->mac, tls_gate_mac(secret, server, *back)));
  EXPECT_FALSE(mac_equal(g.mac, tls_gate_mac(secret, random_nonce(), g)));
  EXPECT_FALSE(mac_equal(g.mac, tls_gate_mac(std::vector<std::uint8_t>(32, 1), server, g)));
  TlsGate other = g;
  other.job_id += 1;
  EXPECT_FALSE(mac_equal(g.mac, tls_gate_mac(secret, server, other)));
  auto bad = bytes;
  bad[5] = 9;  // version
  EXPECT_FALSE(decode_tls_gate(bad, why));
  bad = bytes;
  bad[7] = 1;  // reserved
  EXPECT_FALSE(decode_tls_gate(bad, why));
  EXPECT_FALSE(decode_tls_gate(std::span(bytes).first(kTlsGateBytes - 1), why));
  EXPECT_FALSE(decode_tls_gate(encode(Hello{}), why));
}

}  // namespace
}  // namespace gridbcast::lanes
