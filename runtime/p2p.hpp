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
//
// Two protocols keep every connection moving, so that no message nobody waits
// for can hold up one that somebody does (the MPI progress rule):
//
//   eager (bytes <= eager_bytes(), within the sender's credit)
//     A ── kMessage{context, tag, n} + n bytes ──► B   read at once: into a posted
//                                                       receive, or queued
//   rendezvous (larger, or no credit left)
//     A ── kRts{context, tag, n} ──► B   an envelope, queued or matched
//     A ◄── kCts{id} ── B                once a receive is posted for it
//     A ── kRndvData{id, offset, piece} ... ──► B   straight into that receive
//
// The n-th kRts on a connection is rendezvous id n. A sender holds its
// destination's writer turn only while it writes (an envelope, an eager
// message, one piece of at most kProgressPiece), never while it waits for a
// kCts, and a reader never stops reading: eager messages are bounded by
// credit, not by waiting. Each sender starts with eager_credit() bytes per
// destination (an eager message costs its length plus kEnvelopeCharge); the
// receiver returns the credit of messages that were received (kCredit), in
// batches of a quarter, and fails a peer that exceeds it. A receiver thus
// holds at most eager_credit() bytes of unexpected eager messages per peer,
// plus at most kMaxEnvelopes envelopes in all.
#pragma once

#include <atomic>
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

// Unexpected eager messages a rank may hold, from all its peers together: each
// peer gets an equal part as credit, at least kMinEagerCredit.
inline constexpr std::uint64_t kUnexpectedBytesLimit = std::uint64_t{64} << 20;
inline constexpr std::uint64_t kMinEagerCredit = std::uint64_t{256} << 10;
// Messages up to this size go eagerly (GRIDBCAST_EAGER_BYTES overrides it, at
// most half the credit); larger ones by rendezvous. Measured in docs/MPI.md.
inline constexpr std::uint64_t kDefaultEagerBytes = std::uint64_t{64} << 10;
// What an eager message costs in credit besides its bytes (its queue entry), so
// that empty messages are bounded too.
inline constexpr std::uint64_t kEnvelopeCharge = 64;
// Envelopes of rendezvous messages nobody has received yet, from all peers:
// beyond this the peer that sent one more is failed, naming it.
inline constexpr size_t kMaxEnvelopes = size_t{1} << 18;
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
  // send(), whenever that coroutine first runs. The ticket orders the eager
  // message or the envelope; a rendezvous's pieces take tickets of their own.
  std::uint64_t reserve_send(int dest) { return send_next_[dest]++; }
  // Completes once the bytes are handed to the kernel (or queued, to this rank;
  // the ticket is then unused): for a rendezvous, once the receiver matched it
  // and every piece is out. Throws lanes::NetworkError naming the peer.
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
  // The protocol's sizes on this rank (see the top of this file).
  std::uint64_t eager_bytes() const { return eager_bytes_; }
  std::uint64_t eager_credit() const { return eager_credit_; }
  // Envelopes of rendezvous messages queued, not yet received.
  size_t envelopes() const { return envelopes_; }
  // Bytes held for unexpected messages, queued or still arriving.
  std::uint64_t unexpected_bytes() const { return unexpected_bytes_; }
  // Payload bytes read and written so far, all peers: progress for the
  // Communicator's deadlines (large messages move in pieces of kProgressPiece).
  std::uint64_t bytes_moved() const { return bytes_moved_.load(std::memory_order_relaxed); }

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
    std::vector<std::byte> data;  // an eager message's bytes
    std::uint64_t charge = 0;     // its credit, returned when it is received
    bool rendezvous = false;      // an envelope: the bytes wait at the sender
    std::uint64_t length = 0;     // the envelope's message length
    std::uint64_t id = 0;         // and its rendezvous id
    std::uint64_t bytes() const { return rendezvous ? length : data.size(); }
  };
  // A rendezvous matched to a receive, until its last piece is in.
  struct Matched {
    Posted* posted;  // nullptr: withdrawn, the pieces are read and dropped
    std::uint64_t length;
    std::uint64_t received = 0;
  };

  void accept(int peer, std::unique_ptr<lanes::Stream> socket);
  asio::awaitable<std::error_code> discard(lanes::Stream& socket, std::uint64_t bytes,
                                           std::vector<std::byte>& scratch);
  asio::awaitable<void> read_loop(int peer, lanes::Stream& socket);
  Posted* take_posted(int source, std::uint64_t context, std::int64_t tag);
  void peer_closed(int peer, const std::string& why);
  asio::awaitable<std::error_code> on_eager(int peer, lanes::Stream& socket,
                                            const lanes::FrameHeader& h,
                                            std::vector<std::byte>& scratch);
  void on_envelope(int peer, const lanes::FrameHeader& h);
  asio::awaitable<std::error_code> on_piece(int peer, lanes::Stream& socket,
                                            const lanes::FrameHeader& h,
                                            std::vector<std::byte>& scratch);
  // `r` takes rendezvous `id` of `source`: it completes with the last piece.
  void match(Posted& r, int source, std::uint64_t id, std::uint64_t length, std::int64_t tag);
  // An eager message of `peer` was received: its credit goes back, in batches.
  void consumed(int peer, std::uint64_t charge);
  // A kCts or kCredit to `peer`, written in its turn by a coroutine of its own.
  void signal(int peer, lanes::FrameKind kind, std::uint64_t value);
  asio::awaitable<void> write_signal(int peer, lanes::FrameKind kind, std::uint64_t value,
                                     std::uint64_t ticket);
  std::uint64_t& credit(int dest);
  // Until ticket's turn for dest (or the messenger closes), woken alone.
  asio::awaitable<void> await_turn(int dest, std::uint64_t ticket);

  Transport& transport_;
  std::map<int, std::unique_ptr<lanes::Stream>> incoming_;
  std::map<int, std::string> closed_;  // peer -> why its connection ended
  std::list<Posted*> posted_;          // in posting order
  std::deque<Unexpected> unexpected_;  // in arrival order
  std::uint64_t unexpected_bytes_ = 0;
  std::atomic<std::uint64_t> bytes_moved_{0};  // read by the session's heartbeat too
  std::map<int, std::uint64_t> send_next_;     // destination -> next ticket
  std::map<int, std::uint64_t> send_turn_;     // destination -> ticket whose turn it is
  std::map<int, Arriving> arriving_;           // peer -> its unexpected message in progress
  std::uint64_t eager_bytes_;
  std::uint64_t eager_credit_;
  std::map<int, std::uint64_t> credit_;   // destination -> eager credit left
  std::map<int, std::uint64_t> held_;     // peer -> eager credit used, not yet returned
  std::map<int, std::uint64_t> owed_;     // peer -> credit of received messages to return
  std::map<int, std::uint64_t> rts_out_;  // destination -> its next rendezvous id
  std::map<int, std::uint64_t> rts_in_;   // peer -> the id of its next envelope
  std::set<std::pair<int, std::uint64_t>> cleared_;           // (destination, id) with a kCts
  std::map<std::pair<int, std::uint64_t>, Matched> matched_;  // (peer, id) -> its receive
  size_t envelopes_ = 0;
  // One event per waiting sender: a turn, or a kCts, wakes only its own.
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Event>> turn_waiters_;  // (dest, ticket)
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Event>> cts_waiters_;   // (dest, id)
  std::string closed_all_;
  Event changed_;  // a message arrived, a receive completed, a send ended, a peer left
  // False once destroyed: a send's frame destroyed with the io_context after
  // the messenger (a send never driven to its end) must not touch it.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace gridbcast::runtime
