#include "runtime/p2p.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace gridbcast::runtime {
namespace {

bool matches(const std::optional<int>& want_source, std::uint64_t want_context,
             const std::optional<std::int64_t>& want_tag, int source, std::uint64_t context,
             std::int64_t tag) {
  return context == want_context && (!want_source || *want_source == source) &&
         (!want_tag || *want_tag == tag);
}

// A kCts or kCredit whose connection is not made yet waits at most this long for it.
constexpr auto kSignalConnectTimeout = std::chrono::seconds(60);

using Waiters = std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Event>>;

// Passes a destination to the next ticket, also when a send throws, and wakes
// that ticket's sender alone (thousands of Isends to one rank each waiting on
// one event made every turn wake them all).
struct SendTurn {
  std::shared_ptr<bool> alive;
  std::map<int, std::uint64_t>& turn;
  Waiters& waiters;
  Event& changed;
  int dest;
  ~SendTurn() {
    if (!*alive) return;
    const std::uint64_t next = ++turn[dest];
    if (auto it = waiters.find({dest, next}); it != waiters.end()) it->second->notify_all();
    changed.notify_all();
  }
};

}  // namespace

namespace {

std::uint64_t eager_credit_for(int ranks) {
  return std::max(kMinEagerCredit,
                  kUnexpectedBytesLimit / static_cast<std::uint64_t>(std::max(1, ranks - 1)));
}

// GRIDBCAST_EAGER_BYTES, within [0, credit / 2]; the default otherwise.
std::uint64_t eager_bytes_for(std::uint64_t credit) {
  std::uint64_t bytes = kDefaultEagerBytes;
  if (const char* e = std::getenv("GRIDBCAST_EAGER_BYTES"); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    if (end != nullptr && *end == '\0') bytes = v;
  }
  return std::min(bytes, credit / 2);
}

}  // namespace

Messenger::Messenger(Transport& transport)
    : transport_(transport),
      eager_bytes_(eager_bytes_for(eager_credit_for(transport.grid().size()))),
      eager_credit_(eager_credit_for(transport.grid().size())),
      changed_(transport.io().get_executor()) {
  transport_.on_message_connection(
      [this](int peer, std::unique_ptr<lanes::Stream> s) { accept(peer, std::move(s)); });
}

void Messenger::accept(int peer, std::unique_ptr<lanes::Stream> socket) {
  if (!closed_all_.empty()) return;  // the socket closes as it goes out of scope
  if (incoming_.contains(peer) && !closed_.contains(peer)) return;  // a duplicate: dropped
  closed_.erase(peer);
  auto& s = *socket;
  incoming_[peer] = std::move(socket);
  // An exception (e.g. bad_alloc) must not end the reader silently: receives
  // from this peer would wait forever. It fails them, naming the cause.
  asio::co_spawn(transport_.io(), read_loop(peer, s), [this, peer, &s](std::exception_ptr e) {
    if (!e) return;
    const std::string what = lanes::what_of(e);
    s.close();
    if (closed_all_.empty())
      peer_closed(peer,
                  "receiving messages from " + transport_.describe(peer, 0) + " failed: " + what);
  });
}

Messenger::Posted* Messenger::take_posted(int source, std::uint64_t context, std::int64_t tag) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    Posted* p = *it;
    if (matches(p->source, p->context, p->tag, source, context, tag)) {
      posted_.erase(it);
      return p;
    }
  }
  return nullptr;
}

void Messenger::peer_closed(int peer, const std::string& why) {
  closed_[peer] = why;
  for (auto& [key, ev] : cts_waiters_)
    if (key.first == peer) ev->notify_all();
  for (auto it = matched_.begin(); it != matched_.end();) {
    if (it->first.first == peer) {
      if (it->second.posted != nullptr) it->second.posted->error = why;
      it = matched_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = posted_.begin(); it != posted_.end();) {
    if ((*it)->source == peer) {
      (*it)->error = why;
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  changed_.notify_all();
}

void Messenger::close_all(const std::string& why) {
  if (!closed_all_.empty()) return;
  closed_all_ = why;
  for (auto& [key, ev] : cts_waiters_) ev->notify_all();
  for (auto& [key, ev] : turn_waiters_) ev->notify_all();
  for (auto& [peer, s] : incoming_) s->close();
  for (Posted* p : posted_) p->error = why;
  posted_.clear();
  for (auto& [key, m] : matched_)
    if (m.posted != nullptr) m.posted->error = why;
  matched_.clear();
  changed_.notify_all();
}

// Reads and drops `bytes` (a message's excess over the receive's capacity).
asio::awaitable<std::error_code> Messenger::discard(lanes::Stream& socket, std::uint64_t bytes,
                                                    std::vector<std::byte>& scratch) {
  scratch.resize(64 * 1024);
  for (std::uint64_t left = bytes; left > 0;) {
    const auto piece = static_cast<size_t>(std::min<std::uint64_t>(left, scratch.size()));
    auto [ec, n] = co_await socket.read(asio::buffer(scratch.data(), piece));
    if (ec) co_return ec;
    left -= piece;
    bytes_moved_ += piece;
  }
  co_return std::error_code{};
}

asio::awaitable<void> Messenger::read_loop(int peer, lanes::Stream& socket) {
  const std::string who = transport_.describe(peer, 0);
  std::array<std::uint8_t, lanes::kFrameHeaderBytes> header_bytes{};
  std::vector<std::byte> scratch;
  for (;;) {
    auto [ec, n] = co_await socket.read(asio::buffer(header_bytes));
    if (ec) {
      if (closed_all_.empty())
        peer_closed(peer, ec == asio::error::eof
                              ? who + " closed its message connection (did it exit?)"
                              : "receiving messages from " + who + " failed: " + ec.message());
      co_return;
    }
    std::string why;
    const auto header = lanes::decode_frame_header(header_bytes, why);
    if (header && header->kind == lanes::FrameKind::kData)
      why = "a data frame on the message connection";
    if (header &&
        (header->kind == lanes::FrameKind::kProbe || header->kind == lanes::FrameKind::kPing))
      why = "a probe frame on the message connection";
    if (!header || !why.empty()) {
      socket.close();
      peer_closed(peer, "protocol error from " + who + ": " + why);
      co_return;
    }
    std::error_code failure;
    try {
      switch (header->kind) {
        case lanes::FrameKind::kMessage:
          failure = co_await on_eager(peer, socket, *header, scratch);
          break;
        case lanes::FrameKind::kRts:
          on_envelope(peer, *header);
          break;
        case lanes::FrameKind::kRndvData:
          failure = co_await on_piece(peer, socket, *header, scratch);
          break;
        case lanes::FrameKind::kCts:
          cleared_.insert({peer, header->seq});
          if (auto it = cts_waiters_.find({peer, header->seq}); it != cts_waiters_.end())
            it->second->notify_all();
          break;
        case lanes::FrameKind::kCredit:
          credit(peer) =
              std::min(eager_credit_, credit(peer) + std::min(header->seq, eager_credit_));
          changed_.notify_all();
          break;
        case lanes::FrameKind::kData:
        case lanes::FrameKind::kProbe:
        case lanes::FrameKind::kPing:
          break;  // refused above
      }
    } catch (const lanes::NetworkError& e) {
      socket.close();
      peer_closed(peer, "protocol error from " + who + ": " + e.what());
      co_return;
    }
    if (failure || !closed_all_.empty()) {
      if (failure && closed_all_.empty())
        peer_closed(peer, who + " closed its message connection mid-message (did it fail?): " +
                              failure.message());
      co_return;
    }
  }
}

std::uint64_t& Messenger::credit(int dest) {
  return credit_.try_emplace(dest, eager_credit_).first->second;
}

asio::awaitable<std::error_code> Messenger::on_eager(int peer, lanes::Stream& socket,
                                                     const lanes::FrameHeader& h,
                                                     std::vector<std::byte>& scratch) {
  const std::uint64_t context = h.seq;
  const auto tag = static_cast<std::int64_t>(h.offset);
  const std::uint64_t length = h.length;
  // Checked before a byte is read: a peer that ignores its credit is failed.
  const std::uint64_t charge = length + kEnvelopeCharge;
  std::uint64_t& held = held_[peer];
  if (length > eager_credit_ || held + charge > eager_credit_)
    throw lanes::NetworkError("an eager message of " + std::to_string(length) +
                              " bytes beyond the credit it was given (" +
                              std::to_string(eager_credit_ - std::min(held, eager_credit_)) +
                              " bytes left of " + std::to_string(eager_credit_) + ")");
  held += charge;
  std::error_code failure;
  if (Posted* posted = take_posted(peer, context, tag)) {
    const std::uint64_t take = std::min(length, posted->capacity);
    for (std::uint64_t got = 0; !failure && got < take;) {
      const auto piece = static_cast<size_t>(std::min(take - got, kProgressPiece));
      auto [rec, rn] = co_await socket.read(asio::buffer(posted->data + got, piece));
      failure = rec;
      got += piece;
      bytes_moved_ += piece;
    }
    // Whatever does not fit is read and dropped: the receiver learns the length.
    if (!failure) failure = co_await discard(socket, length - take, scratch);
    if (failure) {
      posted->error = "receiving a message from " + transport_.describe(peer, 0) +
                      " failed: " + failure.message();
    } else {
      posted->info = MessageInfo{peer, tag, length};
      posted->done = true;
      consumed(peer, charge);
    }
    changed_.notify_all();
    co_return failure;
  }
  // Nobody waits for it yet: read whole (the credit bounds it), then queued,
  // or taken by a receive posted meanwhile.
  arriving_[peer] = Arriving{context, tag, length};  // for probes
  changed_.notify_all();
  Unexpected u{peer, context, tag, std::vector<std::byte>(static_cast<size_t>(length)), charge};
  unexpected_bytes_ += length;
  for (std::uint64_t got = 0; !failure && got < length;) {
    const auto piece = static_cast<size_t>(std::min(length - got, kUnexpectedPiece));
    auto [rec, rn] = co_await socket.read(asio::buffer(u.data.data() + got, piece));
    failure = rec;
    got += piece;
    bytes_moved_ += piece;
  }
  // (Not RAII: the frame may outlive the messenger at shutdown.)
  arriving_.erase(peer);
  if (failure || !closed_all_.empty()) {
    unexpected_bytes_ -= length;
    co_return failure;
  }
  if (Posted* late = take_posted(peer, context, tag)) {
    unexpected_bytes_ -= length;
    if (const auto n = std::min(length, late->capacity); n > 0)
      std::memcpy(late->data, u.data.data(), static_cast<size_t>(n));
    late->info = MessageInfo{peer, tag, length};
    late->done = true;
    consumed(peer, charge);
  } else {
    unexpected_.push_back(std::move(u));
  }
  changed_.notify_all();
  co_return failure;
}

void Messenger::on_envelope(int peer, const lanes::FrameHeader& h) {
  const std::uint64_t id = rts_in_[peer]++;
  const auto tag = static_cast<std::int64_t>(h.offset);
  if (Posted* posted = take_posted(peer, h.seq, tag)) {
    match(*posted, peer, id, h.length, tag);
    return;
  }
  if (envelopes_ >= kMaxEnvelopes)
    throw lanes::NetworkError("one envelope more than the " + std::to_string(kMaxEnvelopes) +
                              " messages nobody has received yet that a rank keeps (is a "
                              "receive missing?)");
  ++envelopes_;
  Unexpected u{peer, h.seq, tag, {}, 0, true, h.length, id};
  unexpected_.push_back(std::move(u));
  changed_.notify_all();
}

void Messenger::match(Posted& r, int source, std::uint64_t id, std::uint64_t length,
                      std::int64_t tag) {
  r.info = MessageInfo{source, tag, length};
  if (length == 0) {
    r.done = true;
  } else {
    matched_[{source, id}] = Matched{&r, length};
  }
  signal(source, lanes::FrameKind::kCts, id);
  changed_.notify_all();
}

asio::awaitable<std::error_code> Messenger::on_piece(int peer, lanes::Stream& socket,
                                                     const lanes::FrameHeader& h,
                                                     std::vector<std::byte>& scratch) {
  const auto it = matched_.find({peer, h.seq});
  if (it == matched_.end())
    throw lanes::NetworkError("a piece of rendezvous " + std::to_string(h.seq) +
                              ", which no receive has cleared");
  Matched& m = it->second;
  if (h.offset > m.length || h.length > m.length - h.offset || h.length > m.length - m.received)
    throw lanes::NetworkError("a piece of rendezvous " + std::to_string(h.seq) + " at " +
                              std::to_string(h.offset) + " (+" + std::to_string(h.length) +
                              ") outside its " + std::to_string(m.length) + " bytes");
  std::error_code failure;
  std::uint64_t take = 0;
  if (m.posted != nullptr && h.offset < m.posted->capacity)
    take = std::min(h.length, m.posted->capacity - h.offset);
  if (take > 0) {
    auto [rec, rn] =
        co_await socket.read(asio::buffer(m.posted->data + h.offset, static_cast<size_t>(take)));
    failure = rec;
    bytes_moved_ += take;
  }
  if (!failure) failure = co_await discard(socket, h.length - take, scratch);
  // The receive may have been failed or withdrawn while the piece was read.
  const auto now = matched_.find({peer, h.seq});
  if (failure || now == matched_.end()) co_return failure;
  now->second.received += h.length;
  if (now->second.received == now->second.length) {
    if (now->second.posted != nullptr) now->second.posted->done = true;
    matched_.erase(now);
  }
  changed_.notify_all();
  co_return failure;
}

void Messenger::consumed(int peer, std::uint64_t charge) {
  std::uint64_t& owed = owed_[peer];
  owed += charge;
  if (owed < eager_credit_ / 4) return;
  std::uint64_t& held = held_[peer];
  held -= std::min(held, owed);
  signal(peer, lanes::FrameKind::kCredit, owed);
  owed = 0;
}

void Messenger::signal(int peer, lanes::FrameKind kind, std::uint64_t value) {
  if (peer == transport_.rank() || !closed_all_.empty()) return;
  const std::uint64_t ticket = reserve_send(peer);
  asio::co_spawn(transport_.io(), write_signal(peer, kind, value, ticket),
                 [this, alive = alive_, peer](std::exception_ptr e) {
                   if (!e || !*alive || !closed_all_.empty()) return;
                   peer_closed(peer, "signalling " + transport_.describe(peer, 0) +
                                         " failed: " + lanes::what_of(e));
                 });
}

asio::awaitable<void> Messenger::write_signal(int peer, lanes::FrameKind kind, std::uint64_t value,
                                              std::uint64_t ticket) {
  co_await await_turn(peer, ticket);
  SendTurn turn{alive_, send_turn_, turn_waiters_, changed_, peer};
  if (!closed_all_.empty()) co_return;
  lanes::Stream* socket = co_await transport_.outgoing(LinkKey{peer, 0, 0, kMessageStream},
                                                       lanes::Clock::now() + kSignalConnectTimeout);
  const auto header = lanes::encode(lanes::FrameHeader{kind, value, 0, 0});
  auto [ec, n] = co_await socket->write(std::array<asio::const_buffer, 1>{asio::buffer(header)});
  if (ec) throw lanes::NetworkError("writing to it: " + ec.message());
}

asio::awaitable<void> Messenger::await_turn(int dest, std::uint64_t ticket) {
  if (send_turn_[dest] == ticket) co_return;
  auto mine = std::make_shared<Event>(transport_.io().get_executor());
  turn_waiters_[{dest, ticket}] = mine;
  while (send_turn_[dest] != ticket && closed_all_.empty()) co_await mine->wait();
  turn_waiters_.erase({dest, ticket});
}

asio::awaitable<void> Messenger::send(int dest, std::uint64_t context, std::int64_t tag,
                                      const std::byte* data, std::uint64_t bytes,
                                      lanes::Clock::time_point connect_deadline,
                                      std::uint64_t ticket) {
  if (dest == transport_.rank()) {
    if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
    deliver_local(context, tag, data, bytes);
    co_return;
  }
  // One writer per connection, in ticket order: frames must not interleave,
  // and messages to one destination are not overtaken.
  co_await await_turn(dest, ticket);
  std::optional<SendTurn> turn(std::in_place, alive_, send_turn_, turn_waiters_, changed_, dest);
  if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
  const LinkKey key{dest, 0, 0, kMessageStream};
  lanes::Stream* socket = co_await transport_.outgoing(key, connect_deadline);
  const std::string fails = "sending a message to " + transport_.describe(dest, 0) + " failed: ";
  const std::uint64_t charge = bytes + kEnvelopeCharge;
  if (bytes <= eager_bytes_ && credit(dest) >= charge) {
    credit(dest) -= charge;
    const auto header = lanes::encode(lanes::FrameHeader{lanes::FrameKind::kMessage, context,
                                                         static_cast<std::uint64_t>(tag), bytes});
    // The header with the first piece, then the rest in pieces, so a deadline
    // sees a large message leaving.
    std::uint64_t sent = std::min(bytes, kProgressPiece);
    const std::array<asio::const_buffer, 2> bufs{asio::buffer(header),
                                                 asio::buffer(data, static_cast<size_t>(sent))};
    auto [ec, n] = co_await socket->write(bufs);
    bytes_moved_ += sent;
    while (!ec && sent < bytes) {
      const auto piece = static_cast<size_t>(std::min(bytes - sent, kProgressPiece));
      const std::array<asio::const_buffer, 1> more{asio::buffer(data + sent, piece)};
      auto [wec, wn] = co_await socket->write(more);
      ec = wec;
      sent += piece;
      bytes_moved_ += piece;
    }
    if (ec) throw lanes::NetworkError(fails + ec.message());
    co_return;
  }
  // Rendezvous: the envelope now, in this send's turn; the turn goes before
  // the wait for the receiver, so later sends to it are not held up.
  const std::uint64_t id = rts_out_[dest]++;
  const auto envelope = lanes::encode(
      lanes::FrameHeader{lanes::FrameKind::kRts, context, static_cast<std::uint64_t>(tag), bytes});
  {
    auto [ec, n] =
        co_await socket->write(std::array<asio::const_buffer, 1>{asio::buffer(envelope)});
    if (ec) throw lanes::NetworkError(fails + ec.message());
  }
  turn.reset();
  {
    // Woken by its own kCts, or when the peer or the messenger closes.
    auto cleared = std::make_shared<Event>(transport_.io().get_executor());
    cts_waiters_[{dest, id}] = cleared;
    while (!cleared_.erase({dest, id})) {
      if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
      if (auto it = closed_.find(dest); it != closed_.end())
        throw lanes::NetworkError(fails + it->second);
      co_await cleared->wait();
    }
    cts_waiters_.erase({dest, id});
  }
  // Each piece in a turn of its own: other messages to this destination pass
  // between them.
  for (std::uint64_t sent = 0; sent < bytes;) {
    const std::uint64_t piece_ticket = reserve_send(dest);
    co_await await_turn(dest, piece_ticket);
    SendTurn piece_turn{alive_, send_turn_, turn_waiters_, changed_, dest};
    if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
    const std::uint64_t piece = std::min(bytes - sent, kProgressPiece);
    const auto header =
        lanes::encode(lanes::FrameHeader{lanes::FrameKind::kRndvData, id, sent, piece});
    const std::array<asio::const_buffer, 2> bufs{
        asio::buffer(header), asio::buffer(data + sent, static_cast<size_t>(piece))};
    auto [ec, n] = co_await socket->write(bufs);
    if (ec) throw lanes::NetworkError(fails + ec.message());
    sent += piece;
    bytes_moved_ += piece;
  }
}

void Messenger::deliver_local(std::uint64_t context, std::int64_t tag, const std::byte* data,
                              std::uint64_t bytes) {
  const int self = transport_.rank();
  if (Posted* p = take_posted(self, context, tag)) {
    if (const auto n = std::min(bytes, p->capacity); n > 0)
      std::memcpy(p->data, data, static_cast<size_t>(n));
    p->info = MessageInfo{self, tag, bytes};
    p->done = true;
  } else {
    unexpected_.push_back(
        Unexpected{self, context, tag, std::vector<std::byte>(data, data + bytes)});
    unexpected_bytes_ += bytes;
  }
  changed_.notify_all();
}

void Messenger::post(PostedReceive& r) {
  r.done = false;
  r.error.clear();
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!matches(r.source, r.context, r.tag, it->source, it->context, it->tag)) continue;
    if (it->rendezvous) {
      const Unexpected u = std::move(*it);
      unexpected_.erase(it);
      --envelopes_;
      match(r, u.source, u.id, u.length, u.tag);
      return;
    }
    r.info = MessageInfo{it->source, it->tag, it->data.size()};
    if (const auto n = std::min<std::uint64_t>(r.info.bytes, r.capacity); n > 0)
      std::memcpy(r.data, it->data.data(), static_cast<size_t>(n));
    unexpected_bytes_ -= it->data.size();
    const int source = it->source;
    const std::uint64_t charge = it->charge;
    unexpected_.erase(it);
    r.done = true;
    if (source != transport_.rank()) consumed(source, charge);
    changed_.notify_all();
    return;
  }
  if (!closed_all_.empty()) {
    r.error = closed_all_;
    return;
  }
  if (r.source) {
    if (auto it = closed_.find(*r.source); it != closed_.end()) {
      r.error = it->second;
      return;
    }
  }
  posted_.push_back(&r);
  changed_.notify_all();  // a reader may wait for the budget with this one's message
}

void Messenger::unpost(PostedReceive& r) {
  posted_.remove(&r);
  // A rendezvous it matched: its pieces are read and dropped.
  for (auto& [key, m] : matched_)
    if (m.posted == &r) m.posted = nullptr;
}

std::optional<MessageInfo> Messenger::probe(std::optional<int> source, std::uint64_t context,
                                            std::optional<std::int64_t> tag) const {
  for (const auto& u : unexpected_)
    if (matches(source, context, tag, u.source, u.context, u.tag))
      return MessageInfo{u.source, u.tag, u.bytes()};
  // A message still arriving comes after every queued one from its sender.
  for (const auto& [peer, a] : arriving_)
    if (matches(source, context, tag, peer, a.context, a.tag))
      return MessageInfo{peer, a.tag, a.length};
  if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
  if (source) {
    if (auto it = closed_.find(*source); it != closed_.end()) throw lanes::NetworkError(it->second);
  }
  return std::nullopt;
}

asio::awaitable<MessageInfo> Messenger::receive(std::optional<int> source, std::uint64_t context,
                                                std::optional<std::int64_t> tag, std::byte* data,
                                                std::uint64_t capacity) {
  PostedReceive posted;
  posted.source = source;
  posted.context = context;
  posted.tag = tag;
  posted.data = data;
  posted.capacity = capacity;
  post(posted);  // done or failed, it is off the posted list
  while (!posted.done && posted.error.empty()) co_await changed_.wait();
  if (!posted.error.empty()) throw lanes::NetworkError(posted.error);
  co_return posted.info;
}

}  // namespace gridbcast::runtime
