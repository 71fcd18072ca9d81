// The multicast datagram format (issue 15), as pure functions over bytes (no
// sockets): one fragment of a broadcast per UDP datagram, authenticated with a
// truncated HMAC, all integers in network byte order.
//
//   0        4      6      8           16             24      28      32
//   | magic  | ver  | rsvd | job id    | broadcast id | index | count |
//   32            40           44              48
//   | total bytes | fragment   | payload bytes |  payload ...  | MAC (16) |
//                 |  bytes     |
//
//   offset of fragment i   = i * fragment bytes        (every fragment but the last
//   payload of fragment i  = fragment bytes            carries exactly that many)
//   payload of the last    = total - (count - 1) * fragment bytes
//   count                  = max(1, ceil(total / fragment bytes))  (0 bytes: one empty datagram)
//   MAC = HMAC-SHA256(datagram key, header | payload), first 16 bytes
//   datagram key = HKDF-SHA256(job secret,
//                  info "gridbcast multicast datagram key v2" | job id
//                       | run nonce (16) | communicator)
//
// The TCP handshake keys HMAC with the job secret itself (lanes/wire.hpp); the
// datagram key is derived under its own label, so no datagram MAC is ever a
// valid handshake MAC or the other way round. The job id in the derivation
// gives two jobs sharing a secret different keys, and the communicator (its
// context id) keeps one communicator's datagrams, replayed into another's
// group, from passing there: broadcast ids count from 0 on each.
//
// The run nonce binds the key to one launch. Secret and job id can repeat
// (GRIDBCAST_SECRET and GRIDBCAST_JOB_ID reused, a context id given through
// the API), and broadcast ids restart with every run, so without it datagrams
// recorded in one run verify in the next. The launcher draws 16 bytes with
// RAND_bytes for every launch and sends them with the endpoint table over the
// authenticated control channel (never from the environment); an all-zero
// nonce is one nobody drew and is refused. Within one key broadcast ids never
// repeat (runtime/communicator.cpp), and a receiver takes ids only from the
// one it expects to a few past it (lanes/multicast.hpp), so neither a replay
// from another run nor one from this run's earlier broadcasts is used.
//
// A receiver trusts nothing before decode_fragment() accepted it: sizes first,
// then the job id and the MAC, then every range (index < count, count and
// payload agree with total and fragment bytes, total within the caller's
// limit). FragmentAssembler adds what only a receiver knows: the broadcast id
// it waits for, the size of its buffer, and which fragments it already has.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gridbcast::lanes {

inline constexpr std::uint32_t kDatagramMagic = 0x47424d31;  // "GBM1"
inline constexpr std::uint16_t kDatagramVersion = 1;
inline constexpr size_t kFragmentHeaderBytes = 48;
inline constexpr size_t kDatagramMacBytes = 16;  // truncated HMAC-SHA256 (128 bits)
inline constexpr size_t kDatagramOverhead = kFragmentHeaderBytes + kDatagramMacBytes;
// IPv4 (20, no options) and UDP (8) headers: what a path MTU must also hold.
inline constexpr size_t kIpv4UdpHeaderBytes = 28;
// The largest UDP payload over IPv4 (65535 - 20 - 8).
inline constexpr size_t kMaxDatagramBytes = 65507;
// Ethernet's MTU: fragments default to fit it, so no datagram is IP-fragmented.
inline constexpr size_t kDefaultPathMtu = 1500;

using DatagramKey = std::array<std::uint8_t, 32>;
// Drawn once per launch (see above); the same on every rank of the run.
inline constexpr size_t kRunNonceBytes = 16;
using RunNonce = std::array<std::uint8_t, kRunNonceBytes>;

struct FragmentHeader {
  std::uint64_t job_id = 0;
  std::uint64_t broadcast_id = 0;  // per-communicator counter
  std::uint32_t index = 0;         // < count
  std::uint32_t count = 0;
  std::uint64_t total_bytes = 0;     // of the whole message
  std::uint32_t fragment_bytes = 0;  // payload of every fragment but the last
  std::uint32_t payload_bytes = 0;   // of this datagram

  std::uint64_t offset() const { return std::uint64_t{index} * fragment_bytes; }
};

// How a message of `total_bytes` is cut into fragments of `fragment_bytes`.
struct FragmentLayout {
  std::uint64_t total_bytes = 0;
  std::uint32_t fragment_bytes = 0;
  std::uint32_t count = 0;

  std::uint64_t offset(std::uint32_t index) const { return std::uint64_t{index} * fragment_bytes; }
  std::uint32_t payload(std::uint32_t index) const;
};

// The largest payload per fragment that keeps a datagram within `path_mtu`
// (header, MAC, IPv4 and UDP headers included), at most what one UDP datagram
// can carry. Throws std::invalid_argument when the MTU cannot hold one byte.
std::uint32_t fragment_bytes_for_mtu(size_t path_mtu = kDefaultPathMtu);

// Throws std::invalid_argument if fragment_bytes is 0, above what a datagram
// carries, or the message needs more than 2^32 - 1 fragments.
FragmentLayout fragment_layout(std::uint64_t total_bytes, std::uint32_t fragment_bytes);

// The header of fragment `index` (< layout.count) of a broadcast.
FragmentHeader fragment_header(std::uint64_t job_id, std::uint64_t broadcast_id,
                               const FragmentLayout& layout, std::uint32_t index);

// HKDF-SHA256 of the job secret (see above). Throws std::runtime_error if
// OpenSSL fails, the secret is empty or the run nonce is all zero (none was
// drawn: a key without one would repeat in every run).
DatagramKey datagram_key(std::span<const std::uint8_t> secret, std::uint64_t job_id,
                         const RunNonce& run_nonce, std::uint64_t communicator = 0);

// Writes header | payload | MAC into `out` and returns the datagram's size
// (kDatagramOverhead + payload.size()). Encodes the header as given, so tests
// can forge any field; only payload.size() == h.payload_bytes and the room in
// `out` are checked (std::invalid_argument).
size_t encode_fragment(const FragmentHeader& h, std::span<const std::uint8_t> payload,
                       const DatagramKey& key, std::span<std::uint8_t> out);

// Why a datagram was not used. Every rejection is counted by its reason.
enum class Rejection : std::uint8_t {
  kNone = 0,
  kMalformed,       // size, magic, version, reserved field, payload length vs datagram size
  kOtherJob,        // another job id
  kBadMac,          // not made with this job's key
  kOutOfRange,      // index >= count, count or payload disagree with total and fragment size
  kTooLarge,        // total above the receiver's limit
  kOtherBroadcast,  // not the broadcast id the receiver waits for
  kMismatch,        // disagrees with the receiver's buffer or the broadcast's earlier fragments
  kDuplicate,       // a fragment already held
  kTooFarAhead,     // a broadcast id further past the expected one than the receiver's window
};
inline constexpr size_t kRejectionKinds = 10;
const char* rejection_name(Rejection r);  // "malformed", "bad MAC", ...

struct DecodedFragment {
  Rejection rejection = Rejection::kNone;
  std::string why;  // set when rejected
  FragmentHeader header{};
  std::span<const std::uint8_t> payload{};  // inside the datagram

  bool ok() const { return rejection == Rejection::kNone; }
};

// Verifies a datagram for `job_id`: every field range-checked, the MAC in
// constant time, total_bytes at most `max_total_bytes`.
DecodedFragment decode_fragment(std::span<const std::uint8_t> datagram, const DatagramKey& key,
                                std::uint64_t job_id, std::uint64_t max_total_bytes);

// Which fragments of a message are held.
class FragmentBitmap {
 public:
  FragmentBitmap() = default;
  explicit FragmentBitmap(std::uint32_t count);

  std::uint32_t size() const { return size_; }
  std::uint32_t held() const { return held_; }
  bool complete() const { return held_ == size_; }
  bool test(std::uint32_t index) const;
  // True if the fragment was not held before. index < size().
  bool set(std::uint32_t index);
  // The lowest index not held, nullopt when complete.
  std::optional<std::uint32_t> first_missing() const;
  // Every index not held, ascending (for the chain's repair and for tests).
  std::vector<std::uint32_t> missing() const;

 private:
  std::vector<std::uint64_t> words_;
  std::uint32_t size_ = 0;
  std::uint32_t held_ = 0;
};

using RejectionCounts = std::array<std::uint64_t, kRejectionKinds>;

// One broadcast's reception into the caller's buffer: checks what only the
// receiver knows, then copies each new fragment to its offset. Nothing is
// written into the buffer unless the datagram passed every check.
class FragmentAssembler {
 public:
  FragmentAssembler(const DatagramKey& key, std::uint64_t job_id, std::uint64_t broadcast_id,
                    std::span<std::uint8_t> buffer);

  // The outcome for one datagram, with the reason text when rejected.
  struct Outcome {
    Rejection rejection = Rejection::kNone;
    std::string why;
    bool ok() const { return rejection == Rejection::kNone; }
  };
  Outcome accept(std::span<const std::uint8_t> datagram);
  // For a datagram decode_fragment() already accepted (the receiver decodes
  // once to route by broadcast id).
  Outcome accept(const DecodedFragment& fragment);

  std::uint64_t broadcast_id() const { return broadcast_id_; }
  // Empty until the first fragment fixed the layout.
  const FragmentBitmap& bitmap() const { return bitmap_; }
  bool started() const { return layout_.has_value(); }
  bool complete() const { return layout_ && bitmap_.complete(); }
  const std::optional<FragmentLayout>& layout() const { return layout_; }

 private:
  DatagramKey key_;
  std::uint64_t job_id_;
  std::uint64_t broadcast_id_;
  std::span<std::uint8_t> buffer_;
  std::optional<FragmentLayout> layout_;
  FragmentBitmap bitmap_;
};

}  // namespace gridbcast::lanes
