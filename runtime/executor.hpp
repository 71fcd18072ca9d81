// Runs one Plan on this rank: receives straight into the user buffer, sends
// straight from it, and forwards each segment as its bytes arrive (cut-through:
// once its first topology::kForwardBytes are in).
// Internal to runtime (Asio in the interface).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "lanes/multicast.hpp"
#include "runtime/event.hpp"
#include "runtime/transport.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::runtime {

// A broadcast failed on this rank; what() names the peer involved.
class BroadcastError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Running totals another thread may read while a broadcast runs (the job
// layer reports them to the launcher as progress).
struct LiveCounters {
  std::atomic<std::uint64_t> bytes_in{0};
  std::atomic<std::uint64_t> bytes_out{0};
};

// This rank's multicast sockets on the communicator a plan runs on: what the
// multicast algorithm's datagrams need (the communicator opens them).
struct MulticastPort {
  lanes::MulticastReceiver* receiver = nullptr;  // joined to the site's group
  lanes::MulticastSender* sender = nullptr;      // sends to it, paced
  std::string unavailable;  // why a socket this plan needs is missing: the broadcast fails
  // Tests: which fragments the sender sends (datagram loss on purpose); empty: all.
  std::function<bool(std::uint32_t index)> include;
};

// The order in which broadcasts that run at once take each connection (one
// per communicator). A connection carries one broadcast's frames at a time,
// so a broadcast's coroutine for it waits until every broadcast started
// before it that uses the connection is done with it; the rank at its other
// end, which started the same broadcasts in the same order, reads them in
// that order. A later broadcast's segments may thus leave on a connection an
// earlier one has finished with while the earlier one still receives on
// another (a file's windows: the pipeline does not drain between them).
struct LinkTurns {
  explicit LinkTurns(asio::any_io_executor ex) : changed(ex) {}
  struct Key {
    bool out = false;  // this rank sends on it
    LinkKey link;
    auto operator<=>(const Key&) const = default;
  };
  // Per connection, the broadcasts (their runs) that will use it, in order.
  std::map<Key, std::deque<const void*>> queues;
  Event changed;  // a broadcast left a connection, or failed
  // The last time any broadcast moved a byte: one that waits for its turn
  // behind a broadcast that moves is not stalled.
  lanes::Clock::time_point last_progress = lanes::Clock::now();
};

struct ExecOptions {
  std::uint64_t segment_bytes = 0;            // 0: topology::resolve_segment_bytes
  std::chrono::milliseconds timeout{30'000};  // longest time without progress
  LiveCounters* live = nullptr;               // added to as bytes move; optional
  MulticastPort* multicast = nullptr;  // needed when the plan multicasts to or from this rank
  // When set, the run takes its connections in turn with the other runs
  // sharing it, and calls `links_taken` once it has its place on every one
  // (before its first suspension), so the next broadcast may start.
  LinkTurns* turns = nullptr;
  std::function<void()> links_taken;
};

struct ExecStats {
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
  std::uint64_t multicast_bytes_in = 0;   // new bytes that came first by datagram
  std::uint64_t multicast_bytes_out = 0;  // bytes this rank multicast
};

// Runs `plan` (broadcast number `seq`) over `transport`; `buffer` holds
// plan.size bytes (the root's data, or where the others receive). Throws
// BroadcastError on the first error; the transport is then unusable.
asio::awaitable<ExecStats> execute(Transport& transport, const topology::Plan& plan,
                                   std::uint64_t seq, std::byte* buffer,
                                   const ExecOptions& options);

}  // namespace gridbcast::runtime
