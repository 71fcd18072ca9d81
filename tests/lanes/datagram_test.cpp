#include "lanes/datagram.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace gridbcast::lanes {
namespace {

constexpr std::uint64_t kJob = 0x1122334455667788;
const std::vector<std::uint8_t> kSecret(32, 0x5a);
// Two launches of the same job (secret and job id reused).
constexpr RunNonce kRun{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                        0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
constexpr RunNonce kNextRun{0x02, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                            0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};

std::vector<std::uint8_t> message(size_t n, unsigned seed = 1) {
  std::vector<std::uint8_t> m(n);
  std::mt19937 rng(seed);
  for (auto& b : m) b = static_cast<std::uint8_t>(rng());
  return m;
}

std::vector<std::uint8_t> datagram(const FragmentHeader& h, std::span<const std::uint8_t> payload,
                                   const DatagramKey& key) {
  std::vector<std::uint8_t> out(kDatagramOverhead + payload.size());
  EXPECT_EQ(encode_fragment(h, payload, key, out), out.size());
  return out;
}

// Fragment `index` of `msg` as the sender makes it.
std::vector<std::uint8_t> fragment(const std::vector<std::uint8_t>& msg, std::uint32_t frag,
                                   std::uint32_t index, std::uint64_t bcast = 7,
                                   std::uint64_t job = kJob, const RunNonce& run = kRun) {
  const FragmentLayout layout = fragment_layout(msg.size(), frag);
  const FragmentHeader h = fragment_header(job, bcast, layout, index);
  return datagram(h, std::span(msg).subspan(layout.offset(index), layout.payload(index)),
                  datagram_key(kSecret, job, run));
}

TEST(Datagram, FragmentSizeKeepsDatagramsUnderThePathMtu) {
  EXPECT_EQ(fragment_bytes_for_mtu(1500), 1500u - 28 - 64);
  EXPECT_EQ(fragment_bytes_for_mtu(), 1408u);
  EXPECT_EQ(fragment_bytes_for_mtu(9000), 9000u - 92);
  EXPECT_EQ(fragment_bytes_for_mtu(65535), kMaxDatagramBytes - kDatagramOverhead);
  EXPECT_EQ(fragment_bytes_for_mtu(93), 1u);
  EXPECT_THROW(fragment_bytes_for_mtu(92), std::invalid_argument);
  // A whole datagram plus IP and UDP headers is exactly the MTU.
  EXPECT_EQ(fragment_bytes_for_mtu(1500) + kDatagramOverhead + kIpv4UdpHeaderBytes, 1500u);
}

TEST(Datagram, LayoutCoversTheMessageOnce) {
  for (const std::uint64_t total : {0ull, 1ull, 999ull, 1000ull, 1001ull, 123457ull}) {
    const FragmentLayout l = fragment_layout(total, 1000);
    EXPECT_EQ(l.count, std::max<std::uint64_t>(1, (total + 999) / 1000)) << total;
    std::uint64_t sum = 0;
    for (std::uint32_t i = 0; i < l.count; ++i) {
      EXPECT_EQ(l.offset(i), sum);
      sum += l.payload(i);
      if (i + 1 < l.count) {
        EXPECT_EQ(l.payload(i), 1000u);
      }
    }
    EXPECT_EQ(sum, total);
  }
  EXPECT_THROW(fragment_layout(10, 0), std::invalid_argument);
  EXPECT_THROW(fragment_layout(10, 70000), std::invalid_argument);
  EXPECT_THROW(fragment_layout(std::uint64_t{1} << 33, 1), std::invalid_argument);
  EXPECT_THROW(fragment_header(1, 1, fragment_layout(10, 5), 2), std::invalid_argument);
}

TEST(Datagram, KeyIsDerivedPerJobAndIsNotTheSecret) {
  const DatagramKey a = datagram_key(kSecret, 1, kRun);
  EXPECT_EQ(a, datagram_key(kSecret, 1, kRun));  // deterministic: every rank derives the same
  EXPECT_NE(a, datagram_key(kSecret, 2, kRun));
  EXPECT_EQ(a, datagram_key(kSecret, 1, kRun, 0));
  EXPECT_NE(a, datagram_key(kSecret, 1, kRun, 1));  // another communicator of the job
  EXPECT_NE(a, datagram_key(std::vector<std::uint8_t>(32, 0x5b), 1, kRun));
  EXPECT_FALSE(std::equal(a.begin(), a.end(), kSecret.begin()));
  EXPECT_THROW(datagram_key({}, 1, kRun), std::runtime_error);
}

// Secret, job id and communicator alike, launched twice: each launch's nonce
// gives it its own key; a nonce nobody drew (all zero) gives none.
TEST(Datagram, KeyIsBoundToTheRunNonce) {
  const DatagramKey first = datagram_key(kSecret, kJob, kRun, 5);
  EXPECT_EQ(first, datagram_key(kSecret, kJob, kRun, 5));
  EXPECT_NE(first, datagram_key(kSecret, kJob, kNextRun, 5));
  for (size_t i = 0; i < kRunNonceBytes; ++i) {
    RunNonce n = kRun;
    n[i] ^= 0x80;  // every byte of the nonce counts
    EXPECT_NE(first, datagram_key(kSecret, kJob, n, 5)) << "byte " << i;
  }
  // Job id and communicator are fields of their own: swapped, another key.
  EXPECT_NE(datagram_key(kSecret, 0, kRun, 1), datagram_key(kSecret, 1, kRun, 0));
  EXPECT_THROW(datagram_key(kSecret, kJob, RunNonce{}, 5), std::runtime_error);
}

TEST(Datagram, RoundTripsEveryField) {
  const auto msg = message(3000);
  const auto d = fragment(msg, 1200, 2, 42);
  ASSERT_EQ(d.size(), kDatagramOverhead + 600);
  // Network byte order: the magic reads "GBM1".
  EXPECT_EQ(std::string(d.begin(), d.begin() + 4), "GBM1");
  const DecodedFragment f = decode_fragment(d, datagram_key(kSecret, kJob, kRun), kJob, 1 << 20);
  ASSERT_TRUE(f.ok()) << f.why;
  EXPECT_EQ(f.header.job_id, kJob);
  EXPECT_EQ(f.header.broadcast_id, 42u);
  EXPECT_EQ(f.header.index, 2u);
  EXPECT_EQ(f.header.count, 3u);
  EXPECT_EQ(f.header.total_bytes, 3000u);
  EXPECT_EQ(f.header.fragment_bytes, 1200u);
  EXPECT_EQ(f.header.payload_bytes, 600u);
  EXPECT_EQ(f.header.offset(), 2400u);
  EXPECT_TRUE(std::equal(f.payload.begin(), f.payload.end(), msg.begin() + 2400));
}

TEST(Datagram, EncoderRefusesMisuse) {
  const auto key = datagram_key(kSecret, kJob, kRun);
  FragmentHeader h = fragment_header(kJob, 1, fragment_layout(100, 100), 0);
  std::vector<std::uint8_t> payload(100), out(kDatagramOverhead + 99);
  EXPECT_THROW(encode_fragment(h, payload, key, out), std::invalid_argument);  // no room
  h.payload_bytes = 99;
  out.resize(kDatagramOverhead + 100);
  EXPECT_THROW(encode_fragment(h, payload, key, out), std::invalid_argument);  // size disagrees
}

void expect_rejected(std::span<const std::uint8_t> d, Rejection reason,
                     std::uint64_t limit = 1 << 20) {
  const DecodedFragment f = decode_fragment(d, datagram_key(kSecret, kJob, kRun), kJob, limit);
  EXPECT_EQ(f.rejection, reason) << rejection_name(f.rejection) << ": " << f.why;
  EXPECT_FALSE(f.why.empty());
  EXPECT_TRUE(f.payload.empty());
}

TEST(Datagram, DecoderRejectsWhatItCannotTrust) {
  const auto key = datagram_key(kSecret, kJob, kRun);
  const auto msg = message(3000);
  const auto good = fragment(msg, 1000, 1);

  // Truncated anywhere, oversized, garbage.
  for (size_t n = 0; n < good.size(); n += 7)
    expect_rejected(std::span(good).first(n), Rejection::kMalformed);
  std::vector<std::uint8_t> big(kMaxDatagramBytes + 1, 0);
  expect_rejected(big, Rejection::kMalformed);
  expect_rejected(message(500, 9), Rejection::kMalformed);
  auto bad = good;
  bad[0] ^= 1;
  expect_rejected(bad, Rejection::kMalformed);  // magic
  bad = good;
  bad[5] = 2;
  expect_rejected(bad, Rejection::kMalformed);  // version
  bad = good;
  bad[7] = 1;
  expect_rejected(bad, Rejection::kMalformed);  // reserved
  bad = good;
  bad.push_back(0);
  expect_rejected(bad, Rejection::kMalformed);  // payload length vs datagram size

  // Another job (its own key), and a job id rewritten in ours.
  expect_rejected(fragment(msg, 1000, 1, 7, kJob + 1), Rejection::kOtherJob);
  // Forged: any flipped bit of header, payload or MAC, or another secret.
  for (const size_t at : {size_t{16}, size_t{30}, size_t{43}, size_t{48}, size_t{500},
                          good.size() - 16, good.size() - 1}) {
    bad = good;
    bad[at] ^= 0x80;
    expect_rejected(bad, Rejection::kBadMac);
  }
  {
    const FragmentLayout l = fragment_layout(3000, 1000);
    expect_rejected(datagram(fragment_header(kJob, 7, l, 0), std::span(msg).first(1000),
                             datagram_key(std::vector<std::uint8_t>(32, 1), kJob, kRun)),
                    Rejection::kBadMac);
  }

  // Authentic but inconsistent (a sender bug, or a key that leaked): still refused.
  auto forge = [&](FragmentHeader h) {
    return datagram(h, std::vector<std::uint8_t>(h.payload_bytes, 0xee), key);
  };
  const FragmentHeader h0 = fragment_header(kJob, 7, fragment_layout(3000, 1000), 0);
  FragmentHeader h = h0;
  h.index = 3;  // == count
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h.index = 0xffffffff;
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = h0;
  h.count = 4;  // does not match 3000 / 1000
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = h0;
  h.count = 0;
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = h0;
  h.fragment_bytes = 0;
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = h0;
  h.payload_bytes = 999;  // not the fragment size
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = fragment_header(kJob, 7, fragment_layout(3000, 1000), 2);
  h.payload_bytes = 1000;  // the last one carries only what is left... which is 1000 here
  EXPECT_TRUE(decode_fragment(forge(h), key, kJob, 1 << 20).ok());
  h = fragment_header(kJob, 7, fragment_layout(2500, 1000), 2);
  h.payload_bytes = 1000;  // 500 are left
  expect_rejected(forge(h), Rejection::kOutOfRange);
  h = fragment_header(kJob, 7, fragment_layout(3000, 1000), 0);
  expect_rejected(forge(h), Rejection::kTooLarge, 2999);
  h.total_bytes = ~std::uint64_t{0};
  h.count = 0xffffffff;
  expect_rejected(forge(h), Rejection::kTooLarge);
}

TEST(FragmentBitmap, TracksHeldAndMissing) {
  FragmentBitmap b(130);
  EXPECT_EQ(b.size(), 130u);
  EXPECT_EQ(b.first_missing(), 0u);
  EXPECT_FALSE(b.complete());
  for (std::uint32_t i = 0; i < 130; ++i)
    if (i != 64 && i != 129 && i != 3) {
      EXPECT_TRUE(b.set(i));
    }
  EXPECT_FALSE(b.set(5));  // already held
  EXPECT_EQ(b.held(), 127u);
  EXPECT_EQ(b.first_missing(), 3u);
  EXPECT_EQ(b.missing(), (std::vector<std::uint32_t>{3, 64, 129}));
  b.set(3);
  EXPECT_EQ(b.first_missing(), 64u);
  b.set(64);
  EXPECT_EQ(b.first_missing(), 129u);
  EXPECT_TRUE(b.test(128));
  EXPECT_FALSE(b.test(129));
  EXPECT_FALSE(b.test(1000));
  b.set(129);
  EXPECT_TRUE(b.complete());
  EXPECT_EQ(b.first_missing(), std::nullopt);
  EXPECT_TRUE(b.missing().empty());
  EXPECT_THROW(b.set(130), std::out_of_range);
  FragmentBitmap exact(64);
  for (std::uint32_t i = 0; i < 63; ++i) exact.set(i);
  EXPECT_EQ(exact.first_missing(), 63u);
  exact.set(63);
  EXPECT_EQ(exact.first_missing(), std::nullopt);
}

TEST(FragmentAssembler, ReordersDropsDuplicatesAndNeverWritesARejectedDatagram) {
  const auto msg = message(10'000, 3);
  const std::uint32_t frag = 700;
  const std::uint32_t count = fragment_layout(msg.size(), frag).count;
  std::vector<std::uint8_t> buffer(msg.size(), 0);
  FragmentAssembler a(datagram_key(kSecret, kJob, kRun), kJob, 7, buffer);

  // Hostile datagrams first: none may touch the buffer.
  std::vector<std::pair<std::vector<std::uint8_t>, Rejection>> hostile;
  hostile.emplace_back(fragment(msg, frag, 0, 8), Rejection::kOtherBroadcast);
  hostile.emplace_back(fragment(msg, frag, 0, 7, kJob + 1), Rejection::kOtherJob);
  hostile.emplace_back(fragment(message(9'999), frag, 0), Rejection::kMismatch);
  hostile.emplace_back(fragment(message(20'000), frag, 0), Rejection::kTooLarge);
  auto forged = fragment(msg, frag, 1);
  forged[kFragmentHeaderBytes] ^= 1;
  hostile.emplace_back(forged, Rejection::kBadMac);
  hostile.emplace_back(std::vector<std::uint8_t>(40, 0), Rejection::kMalformed);
  for (const auto& [d, reason] : hostile) {
    const auto out = a.accept(d);
    EXPECT_EQ(out.rejection, reason) << out.why;
  }
  EXPECT_FALSE(a.started());
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](auto b) { return b == 0; }));

  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_TRUE(a.accept(fragment(msg, frag, order[k])).ok());
    if (k % 3 == 0) {
      EXPECT_EQ(a.accept(fragment(msg, frag, order[k])).rejection, Rejection::kDuplicate);
    }
    if (k == 2) {
      // Same broadcast, other fragment size: a second layout is refused.
      EXPECT_EQ(a.accept(fragment(msg, frag + 1, 0)).rejection, Rejection::kMismatch);
    }
  }
  EXPECT_TRUE(a.complete());
  EXPECT_EQ(buffer, msg);
}

// Datagrams recorded in one run (every fragment of broadcast 7, as its
// sender made them), replayed into the next run of the same job: the same
// secret, job id, communicator, broadcast id and buffer size, only the run
// nonce differs. Each is a bad MAC, counted, and nothing is assembled; the
// next run's own datagrams then assemble its message.
TEST(FragmentAssembler, DatagramsRecordedInAnEarlierRunAreBadMacsAndNeverWritten) {
  const auto recorded_msg = message(6'000, 8), msg = message(6'000, 9);
  const std::uint32_t frag = 1000;
  const std::uint32_t count = fragment_layout(msg.size(), frag).count;
  std::vector<std::vector<std::uint8_t>> recorded;
  for (std::uint32_t i = 0; i < count; ++i)
    recorded.push_back(fragment(recorded_msg, frag, i, 7, kJob, kRun));

  std::vector<std::uint8_t> buffer(msg.size(), 0);
  FragmentAssembler a(datagram_key(kSecret, kJob, kNextRun), kJob, 7, buffer);
  RejectionCounts counts{};
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& d : recorded) {
      const auto out = a.accept(d);
      ++counts[static_cast<size_t>(out.rejection)];
      EXPECT_NE(out.why.find("MAC does not verify"), std::string::npos) << out.why;
    }
  EXPECT_EQ(counts[static_cast<size_t>(Rejection::kBadMac)], 2u * count);
  EXPECT_EQ(counts[static_cast<size_t>(Rejection::kNone)], 0u);
  EXPECT_FALSE(a.started());
  EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](auto b) { return b == 0; }));

  for (std::uint32_t i = 0; i < count; ++i)
    ASSERT_TRUE(a.accept(fragment(msg, frag, i, 7, kJob, kNextRun)).ok());
  EXPECT_TRUE(a.complete());
  EXPECT_EQ(buffer, msg);
}

TEST(FragmentAssembler, LossShowsInTheBitmap) {
  const auto msg = message(5000, 4);
  std::vector<std::uint8_t> buffer(msg.size(), 0);
  FragmentAssembler a(datagram_key(kSecret, kJob, kRun), kJob, 7, buffer);
  for (std::uint32_t i = 0; i < 10; ++i)
    if (i != 0 && i != 4 && i != 9) {
      ASSERT_TRUE(a.accept(fragment(msg, 500, i)).ok());
    }
  EXPECT_FALSE(a.complete());
  EXPECT_EQ(a.bitmap().missing(), (std::vector<std::uint32_t>{0, 4, 9}));
  EXPECT_EQ(a.bitmap().first_missing(), 0u);
  // What arrived is in place; what did not is untouched.
  EXPECT_TRUE(std::equal(buffer.begin() + 500, buffer.begin() + 2000, msg.begin() + 500));
  EXPECT_TRUE(
      std::all_of(buffer.begin() + 2000, buffer.begin() + 2500, [](auto b) { return b == 0; }));
}

TEST(FragmentAssembler, EmptyMessageIsOneEmptyDatagram) {
  std::vector<std::uint8_t> none;
  FragmentAssembler a(datagram_key(kSecret, kJob, kRun), kJob, 1, none);
  const auto d = fragment(none, 1000, 0, 1);
  EXPECT_EQ(d.size(), kDatagramOverhead);
  EXPECT_TRUE(a.accept(d).ok());
  EXPECT_TRUE(a.complete());
}

}  // namespace
}  // namespace gridbcast::lanes
