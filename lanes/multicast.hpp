// IPv4 multicast inside a site (issue 15): the sockets that carry
// lanes/datagram.hpp's fragments, and the choice of a communicator's group.
//
//   root: MulticastSender ── fragment 0..n-1, paced ──► group:port (TTL, out of one NIC)
//                                                       │
//   every other rank of the site:  MulticastReceiver ◄──┘ (joined on its NIC, a
//        receive always posted) ── verify ── FragmentAssembler ── user buffer
//                                      └─ rejected: counted per reason, logged (bounded)
//
// Threading: each object lives on one io_context and is used from its thread;
// callbacks run there. Asio stays out of this header (only io_context is named).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "lanes/datagram.hpp"
#include "lanes/rejections.hpp"

namespace asio {
class io_context;
}

namespace gridbcast::lanes {

// A communicator's group: an IPv4 multicast address and a UDP port.
struct MulticastGroup {
  std::uint32_t address = 0;  // host byte order
  std::uint16_t port = 0;
  std::string address_string() const;  // "239.12.34.56"
  std::string str() const;             // "239.12.34.56:50123"
};

// Ports drawn when a site's config names none: the dynamic range, 49152..65535.
inline constexpr std::uint16_t kFirstDynamicPort = 49152;

// One group per communicator, drawn uniformly from network/prefix by OpenSSL's
// RAND_bytes (a cryptographically secure generator: a stranger cannot predict
// the group to pre-join or flood it), and `port`, or when it is 0 a port drawn
// from 49152..65535 likewise. The range must be inside 224.0.0.0/4 and must
// not overlap 224.0.0.0/24 (topology's loader checks the same); otherwise
// std::invalid_argument. Note: Ethernet maps 32 groups onto one MAC address
// (only 23 bits reach it), so a NIC may pass up another group's frames; the
// socket bound to the group address and the MAC per datagram keep them out.
MulticastGroup choose_group(std::uint32_t network, int prefix, std::uint16_t port = 0);

// The group a communicator uses inside a site, the same on every rank without
// a message: address and (when `port` is 0) port taken from HMAC-SHA256(key,
// "gridbcast multicast group v1" | site), a pseudorandom function under the
// job's secret, so a stranger can no more predict it than choose_group's, and
// uniform in the range likewise. Each site (its index in the topology) gets
// its own group, so sites that share a network (or a host's loopback) do not
// receive each other's datagrams. Same checks and errors as choose_group.
MulticastGroup derive_group(const DatagramKey& key, std::uint32_t network, int prefix,
                            std::uint16_t port = 0, std::uint32_t site = 0);

// The MTU of the network interface that has this IPv4 address (65536 for
// loopback, 1500 for most Ethernet, 9000 with jumbo frames), 0 when no
// interface has it or the kernel will not say.
size_t interface_mtu(const std::string& address);

// Receive buffer requested with SO_RCVBUF: a whole fragment burst at 10 Gbit/s
// for 3 ms, so a rank busy elsewhere loses nothing the kernel could hold.
// Linux caps it at net.core.rmem_max for unprivileged sockets (root gets it
// with SO_RCVBUFFORCE); receive_buffer_bytes() says what was granted.
inline constexpr int kDefaultReceiveBufferBytes = 4 << 20;

// Broadcasts past the one a receiver expects whose datagrams it keeps; those
// of later ones are dropped and counted (Rejection::kTooFarAhead). It bounds
// which broadcasts a datagram can speak for; a root further ahead of a rank
// than this costs that rank its datagrams only (the ring brings the bytes).
// Broadcasts that bring a rank no datagram move its window on too (pass()).
inline constexpr std::uint64_t kBroadcastWindow = 4;

struct ReceiverOptions {
  // The group to join, "239.1.2.3"; empty: no group, a plain unicast UDP
  // socket on `interface_address` (for tests over loopback).
  std::string group;
  std::string interface_address;  // the NIC (IPv4) to join the group on
  std::uint16_t port = 0;         // 0: the kernel picks one (unicast only)
  int receive_buffer_bytes = kDefaultReceiveBufferBytes;
  std::uint64_t job_id = 0;
  DatagramKey key{};
  // Largest message a datagram may announce (the decoder's limit).
  std::uint64_t max_message_bytes = std::uint64_t{1} << 40;
  // Datagrams of broadcasts not expected yet are kept (verified) up to this
  // many bytes, so a rank that calls expect() late still has them.
  size_t early_bytes = static_cast<size_t>(kDefaultReceiveBufferBytes);
  // The communicator's next broadcast id when the socket opens: earlier ids
  // are over from the start (a group's ids start at a hash of its context).
  std::uint64_t first_broadcast_id = 0;
  // How many broadcasts past the expected one a datagram may be and still be
  // kept (a root may run a few broadcasts ahead of this rank).
  std::uint64_t window = kBroadcastWindow;
  RejectionLog::Print print{};  // rejection lines; default: the log's own
};

// Binds the group's port (on the group address, so no other traffic arrives),
// joins the group on one NIC (IP_ADD_MEMBERSHIP with that interface address)
// and keeps a receive posted from open() to close(). Every datagram is
// verified (decode_fragment) and then:
//   - for the expected broadcast: copied to its offset in the caller's buffer
//     and marked in the bitmap; on_complete runs once when all are held;
//   - for a later broadcast id at most `window` past the expected one
//     (between broadcasts: the next one): kept, up to early_bytes, until
//     expect() asks for it (a late rank catches what arrived before it asked);
//   - otherwise dropped and counted by reason: ids already over (stale) as
//     other broadcast, ids beyond the window as too far ahead. Hostile
//     reasons (malformed, other job, bad MAC, out of range, too large,
//     mismatch) also go to a rate-limited RejectionLog; duplicates, stale and
//     early broadcasts are normal under multicast and only counted.
// Broadcast ids are ordered modulo 2^64 (a group's may wrap): an id less than
// 2^63 past the expected one is ahead of it, any other is over.
//
//       over (stale)   │ expected │ kept                │ too far ahead
//   ... E - 2, E - 1   │    E     │ E + 1 .. E + window │ E + window + 1 ...
class MulticastReceiver {
 public:
  static std::unique_ptr<MulticastReceiver> open(asio::io_context& io, ReceiverOptions options);
  ~MulticastReceiver();  // closes
  MulticastReceiver(const MulticastReceiver&) = delete;
  MulticastReceiver& operator=(const MulticastReceiver&) = delete;

  std::uint16_t port() const;
  // SO_RCVBUF as the kernel reports it (Linux doubles the request for its own
  // bookkeeping, and caps it at net.core.rmem_max without privileges).
  int receive_buffer_bytes() const;

  // From now on, broadcast `broadcast_id` goes into `buffer` (its size is the
  // message's). Datagrams of earlier ids are stale from here on; kept ones of
  // this id are applied at once (on_complete may run before this returns).
  // A previous expectation is replaced.
  // `on_fragment` (optional) runs for each fragment written, with its offset
  // and length in the buffer.
  using OnFragment = std::function<void(std::uint64_t offset, std::uint64_t length)>;
  void expect(std::uint64_t broadcast_id, std::span<std::uint8_t> buffer,
              std::function<void()> on_complete, OnFragment on_fragment = {});
  // Stop writing into the buffer (the broadcast is over, e.g. the chain
  // delivered the rest); later datagrams of its id count as other broadcast.
  void finish();
  // Broadcasts up to `broadcast_id` are over for this socket (this rank sends
  // that one, and its own datagrams come back to the host's members; or it
  // brings this rank no datagram, which moves the window on): they are
  // neither kept nor used, and kept ones are dropped. Not while expecting.
  void pass(std::uint64_t broadcast_id);
  // Null before expect() or after finish().
  const FragmentAssembler* current() const;

  std::uint64_t received() const;   // datagrams read
  std::uint64_t delivered() const;  // fragments written into a buffer
  std::uint64_t rejected(Rejection reason) const;
  std::uint64_t rejected_total() const;
  size_t early_held() const;  // datagrams kept for later broadcasts
  const RejectionLog& log() const;
  void close();

  struct Impl;

 private:
  explicit MulticastReceiver(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

struct SenderOptions {
  std::string destination;  // the group ("239.1.2.3"), or a unicast address for tests
  std::uint16_t port = 0;
  std::string interface_address;  // the NIC (IPv4) to send from (IP_MULTICAST_IF, bind)
  int ttl = 1;                    // IP_MULTICAST_TTL
  bool loopback = false;          // IP_MULTICAST_LOOP: this host's own members get a copy
  // Pace in bits per second of IP packets (payload, MAC, headers, IPv4 and
  // UDP), e.g. the site's slowest receiving NIC; 0: as fast as the socket takes.
  double rate_bps = 0;
  // The token bucket's depth: how much may leave back to back after an idle
  // spell. 0: two full datagrams.
  size_t burst_bytes = 0;
  // Fragments are cut to fit it; 0: the MTU of the interface that has
  // interface_address (interface_mtu), kDefaultPathMtu when unknown.
  size_t path_mtu = kDefaultPathMtu;
  std::uint64_t job_id = 0;
  DatagramKey key{};
};

// Sends a message as fragments to the group with a timer-driven token bucket
// (a datagram leaves when the bucket holds its size; otherwise a steady_timer
// waits for the refill: no polling). One send() at a time.
class MulticastSender {
 public:
  static std::unique_ptr<MulticastSender> open(asio::io_context& io, SenderOptions options);
  ~MulticastSender();
  MulticastSender(const MulticastSender&) = delete;
  MulticastSender& operator=(const MulticastSender&) = delete;

  std::uint32_t fragment_bytes() const;
  // `message` must stay valid until on_done, which gets an empty string on
  // success or what failed, or until cancel(). `include` (tests): send fragment
  // i only if it says so, to make loss on purpose. `ready` (optional): fragment
  // bytes [offset, offset + length) of the message may leave only once it says
  // so (a sender that is still receiving the message); when it says no, the
  // send waits for resume(). Throws std::logic_error if a send is running.
  using Ready = std::function<bool(std::uint64_t offset, std::uint64_t length)>;
  void send(std::uint64_t broadcast_id, std::span<const std::uint8_t> message,
            std::function<void(const std::string& error)> on_done,
            std::function<bool(std::uint32_t index)> include = {}, Ready ready = {});
  // Looks again at a send waiting for `ready`; nothing otherwise.
  void resume();
  // Called after each datagram the socket took (progress for a watchdog);
  // empty: none. Kept across sends until replaced.
  void on_sent(std::function<void()> callback);
  // Ends the running send, if any, without calling its on_done; the message
  // is not read after this returns.
  void cancel();
  std::uint64_t datagrams_sent() const;
  std::uint64_t wire_bytes_sent() const;  // IP packet bytes, as the pace counts them
  // Refused by the host with ENOBUFS (a full device queue): lost like a
  // datagram dropped on the wire, and the send goes on.
  std::uint64_t datagrams_dropped() const;
  void close();

  struct Impl;

 private:
  explicit MulticastSender(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace gridbcast::lanes
