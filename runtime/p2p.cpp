#include "runtime/p2p.hpp"

#include <algorithm>
#include <cstring>

namespace gridbcast::runtime {
namespace {

bool matches(const std::optional<int>& want_source, std::uint64_t want_context,
             const std::optional<std::int64_t>& want_tag, int source, std::uint64_t context,
             std::int64_t tag) {
  return context == want_context && (!want_source || *want_source == source) &&
         (!want_tag || *want_tag == tag);
}

// Passes a destination to the next ticket, also when a send throws.
struct SendTurn {
  std::shared_ptr<bool> alive;
  std::map<int, std::uint64_t>& turn;
  Event& changed;
  int dest;
  ~SendTurn() {
    if (!*alive) return;
    ++turn[dest];
    changed.notify_all();
  }
};

}  // namespace

Messenger::Messenger(Transport& transport)
    : transport_(transport), changed_(transport.io().get_executor()) {
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
  for (auto& [peer, s] : incoming_) s->close();
  for (Posted* p : posted_) p->error = why;
  posted_.clear();
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
    if (header && header->kind != lanes::FrameKind::kMessage)
      why = "a data frame on the message connection";
    if (!header || !why.empty()) {
      socket.close();
      peer_closed(peer, "protocol error from " + who + ": " + why);
      co_return;
    }
    const std::uint64_t context = header->seq;
    const auto tag = static_cast<std::int64_t>(header->offset);
    const std::uint64_t length = header->length;

    Posted* posted = take_posted(peer, context, tag);
    std::error_code failure;
    if (posted != nullptr) {
      const std::uint64_t take = std::min(length, posted->capacity);
      // In pieces, so a deadline sees a large message arriving.
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
        posted->error = "receiving a message from " + who + " failed: " + failure.message();
      } else {
        posted->info = MessageInfo{peer, tag, length};
        posted->done = true;
      }
      changed_.notify_all();
    } else {
      // Nobody waits for it yet: read it into memory as it arrives (a declared
      // length costs nothing by itself), within the budget for unexpected
      // messages. Beyond the budget the reader waits, and TCP's flow control
      // holds the sender back, until a receive takes a queued message or is
      // posted for this one.
      Unexpected u{peer, context, tag, {}};
      arriving_[peer] = Arriving{context, tag, length};  // for probes
      changed_.notify_all();
      std::uint64_t got = 0;
      Posted* late = nullptr;
      while (!failure && got < length) {
        while (closed_all_.empty() && !(late = take_posted(peer, context, tag)) &&
               (unexpected_bytes_ >= kUnexpectedBytesLimit ||
                unexpected_.size() >= kUnexpectedMessagesLimit))
          co_await changed_.wait();
        if (late != nullptr || !closed_all_.empty()) break;
        const auto piece = static_cast<size_t>(
            std::min({length - got, kUnexpectedPiece, kUnexpectedBytesLimit - unexpected_bytes_}));
        u.data.resize(static_cast<size_t>(got) + piece);
        unexpected_bytes_ += piece;
        auto [rec, rn] = co_await socket.read(asio::buffer(u.data.data() + got, piece));
        failure = rec;
        got += piece;
        bytes_moved_ += piece;
      }
      // Taken by a receive, queued or failed: no longer a message to probe.
      // (Not RAII: the frame may outlive the messenger at shutdown.)
      arriving_.erase(peer);
      if (failure || !closed_all_.empty()) {
        unexpected_bytes_ -= u.data.size();
      } else if (late != nullptr || (late = take_posted(peer, context, tag)) != nullptr) {
        // A receive posted while the payload was arriving: it gets what came
        // so far, the rest goes straight into its buffer, the excess is dropped.
        unexpected_bytes_ -= u.data.size();
        const std::uint64_t fits = std::min(length, late->capacity);
        if (const auto have = std::min(got, fits); have > 0)
          std::memcpy(late->data, u.data.data(), static_cast<size_t>(have));
        u.data = {};
        if (got < fits) {
          auto [rec, rn] =
              co_await socket.read(asio::buffer(late->data + got, static_cast<size_t>(fits - got)));
          failure = rec;
          bytes_moved_ += fits - got;
        }
        if (!failure) failure = co_await discard(socket, length - std::max(got, fits), scratch);
        if (failure) {
          late->error = "receiving a message from " + who + " failed: " + failure.message();
        } else {
          late->info = MessageInfo{peer, tag, length};
          late->done = true;
        }
        changed_.notify_all();
      } else {
        unexpected_.push_back(std::move(u));
        changed_.notify_all();
      }
      if (failure) {
        if (closed_all_.empty())
          peer_closed(peer, who + " closed its message connection after " + std::to_string(got) +
                                " of the " + std::to_string(length) +
                                " bytes its message declared (did it fail?)");
        co_return;
      }
      if (!closed_all_.empty()) co_return;
    }
    if (failure) {
      if (closed_all_.empty())
        peer_closed(peer, who + " closed its message connection mid-message (did it fail?)");
      co_return;
    }
  }
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
  while (send_turn_[dest] != ticket) co_await changed_.wait();
  SendTurn turn{alive_, send_turn_, changed_, dest};
  if (!closed_all_.empty()) throw lanes::NetworkError(closed_all_);
  lanes::Stream* socket =
      co_await transport_.outgoing(LinkKey{dest, 0, 0, kMessageStream}, connect_deadline);
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
  if (ec)
    throw lanes::NetworkError("sending a message to " + transport_.describe(dest, 0) +
                              " failed: " + ec.message());
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
    r.info = MessageInfo{it->source, it->tag, it->data.size()};
    if (const auto n = std::min<std::uint64_t>(r.info.bytes, r.capacity); n > 0)
      std::memcpy(r.data, it->data.data(), static_cast<size_t>(n));
    unexpected_bytes_ -= it->data.size();
    unexpected_.erase(it);
    r.done = true;
    changed_.notify_all();  // a reader may wait for the budget
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
}

std::optional<MessageInfo> Messenger::probe(std::optional<int> source, std::uint64_t context,
                                            std::optional<std::int64_t> tag) const {
  for (const auto& u : unexpected_)
    if (matches(source, context, tag, u.source, u.context, u.tag))
      return MessageInfo{u.source, u.tag, u.data.size()};
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
