// Point-to-point messages between the ranks of a job, over the Transport's
// authenticated connections: one connection per ordered pair of ranks (lane 0,
// stream kMessageStream), made by the sender on first use and kept. A message
// is one kMessage frame (lanes/wire.hpp: seq = context id, offset = tag, length =
// the whole message) followed by its bytes; the source is the authenticated peer.
//
// One reader per incoming connection runs whenever the io_context runs (inside
// any blocking call of the Communicator). It matches each arrival against the
// posted receives, oldest first, and reads the payload straight into the
// receiver's buffer; a message nobody waits for yet is queued as unexpected.
// Messages from one sender in one context are matched in the order they were
// sent. Internal to runtime (Asio in the interface).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/event.hpp"
#include "runtime/transport.hpp"

namespace gridbcast::runtime {

struct MessageInfo {
  int source = -1;  // world rank
  std::int64_t tag = 0;
  std::uint64_t bytes = 0;  // the message's length (more than the capacity: truncated)
};

// What messages nobody waits for yet may hold on a rank, in bytes and in
// messages: a reader that would exceed either waits (its sender is held back by
// TCP) until a receive takes a queued message or is posted for the one it reads.
inline constexpr std::uint64_t kUnexpectedBytesLimit = std::uint64_t{64} << 20;
inline constexpr size_t kUnexpectedMessagesLimit = 4096;
// Unexpected payloads are read in pieces of this size as they arrive.
inline constexpr std::uint64_t kUnexpectedPiece = std::uint64_t{1} << 20;

// Large messages are read and written in pieces of this size.
inline constexpr std::uint64_t kProgressPiece = 4u << 20;

// A receive posted with Messenger::post(): it completes (done, or error set)
// while the io_context runs, and stays valid until then or until unpost().
struct PostedReceive {
  std::optional<int> source;
  std::uint64_t context = 0;
  std::optional<std::int64_t> tag;
  std::byte* data = nullptr;
  std::uint64_t capacity = 0;
  bool done = false;
  std::string error;
  MessageInfo info;
};

class Messenger {
 public:
  explicit Messenger(Transport& transport);
  ~Messenger() { *alive_ = false; }
  Messenger(const Messenger&) = delete;
  Messenger& operator=(const Messenger&) = delete;

  // Sends to one destination leave in the order of their tickets: a caller
  // takes a ticket when the send is started (reserve_send) and passes it to
  // send(), whenever that coroutine first runs.
  std::uint64_t reserve_send(int dest) { return send_next_[dest]++; }
  // Completes once the bytes are handed to the kernel (or queued, to this rank;
  // the ticket is then unused). Throws lanes::NetworkError naming the peer.
  asio::awaitable<void> send(int dest, std::uint64_t context, std::int64_t tag,
                             const std::byte* data, std::uint64_t bytes,
                             lanes::Clock::time_point connect_deadline, std::uint64_t ticket);
  // A message to this rank: into the oldest matching posted receive, else
  // queued as unexpected (copied). Immediate.
  void deliver_local(std::uint64_t context, std::int64_t tag, const std::byte* data,
                     std::uint64_t bytes);
  // Posts a receive now: the oldest matching unexpected message completes it at
  // once, else arrivals complete it, receives matched in posting order. A
  // receive from a peer that has gone, or after close_all, fails at once.
  void post(PostedReceive& r);
  // Withdraws a receive that has not completed (no-op otherwise).
  void unpost(PostedReceive& r);
  // The message a receive posted now would match first, if one has arrived or
  // is arriving (its header read); nullopt if none. Throws lanes::NetworkError
  // like a receive when none can come any more (closed).
  std::optional<MessageInfo> probe(std::optional<int> source, std::uint64_t context,
                                   std::optional<std::int64_t> tag) const;
  // Wakes on any change (arrival, completion, a send's end, a peer leaving).
  asio::awaitable<void> changed() { return changed_.wait(); }
  void notify() { changed_.notify_all(); }
  // The first message that matches (nullopt: any source / any tag); copies at
  // most `capacity` bytes. Throws lanes::NetworkError when the awaited source
  // closed its connection or the messenger was closed.
  asio::awaitable<MessageInfo> receive(std::optional<int> source, std::uint64_t context,
                                       std::optional<std::int64_t> tag, std::byte* data,
                                       std::uint64_t capacity);
  // Closes every incoming message connection and fails the posted receives.
  void close_all(const std::string& why);
  size_t unexpected_count() const { return unexpected_.size(); }
  // Bytes held for unexpected messages, queued or still arriving.
  std::uint64_t unexpected_bytes() const { return unexpected_bytes_; }
  // Payload bytes read and written so far, all peers: progress for the
  // Communicator's deadlines (large messages move in pieces of kProgressPiece).
  std::uint64_t bytes_moved() const { return bytes_moved_; }

 private:
  using Posted = PostedReceive;
  struct Arriving {  // an unexpected message whose payload is being read
    std::uint64_t context;
    std::int64_t tag;
    std::uint64_t length;
  };
  struct Unexpected {
    int source;
    std::uint64_t context;
    std::int64_t tag;
    std::vector<std::byte> data;
  };

  void accept(int peer, std::unique_ptr<lanes::Stream> socket);
  asio::awaitable<std::error_code> discard(lanes::Stream& socket, std::uint64_t bytes,
                                           std::vector<std::byte>& scratch);
  asio::awaitable<void> read_loop(int peer, lanes::Stream& socket);
  Posted* take_posted(int source, std::uint64_t context, std::int64_t tag);
  void peer_closed(int peer, const std::string& why);

  Transport& transport_;
  std::map<int, std::unique_ptr<lanes::Stream>> incoming_;
  std::map<int, std::string> closed_;  // peer -> why its connection ended
  std::list<Posted*> posted_;          // in posting order
  std::deque<Unexpected> unexpected_;  // in arrival order
  std::uint64_t unexpected_bytes_ = 0;
  std::uint64_t bytes_moved_ = 0;
  std::map<int, std::uint64_t> send_next_;  // destination -> next ticket
  std::map<int, std::uint64_t> send_turn_;  // destination -> ticket whose turn it is
  std::map<int, Arriving> arriving_;        // peer -> its unexpected message in progress
  std::string closed_all_;
  Event changed_;  // a message arrived, a receive completed, a send ended, a peer left
  // False once destroyed: a send's frame destroyed with the io_context after
  // the messenger (a send never driven to its end) must not touch it.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace gridbcast::runtime
