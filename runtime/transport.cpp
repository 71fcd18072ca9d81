#include "runtime/transport.hpp"

#include <iostream>

#include "lanes/log.hpp"
#include "lanes/tcp_info.hpp"

namespace gridbcast::runtime {

Transport::Transport(asio::io_context& io, const topology::Grid& grid, int rank,
                     lanes::Credentials creds, std::shared_ptr<lanes::TlsContext> tls)
    : io_(io),
      grid_(grid),
      rank_(rank),
      creds_(std::move(creds)),
      tls_(std::move(tls)),
      rejections_("gridbcast rank " + std::to_string(rank)),
      accepted_(io.get_executor()),
      closing_(io.get_executor()) {}

Transport::~Transport() {
  for (auto& l : listeners_) l->close();
}

lanes::PeerPolicy Transport::policy(const lanes::Hello& h, int lane) const {
  lanes::PeerPolicy p;
  // Compare unsigned: a claim of 2^31 or more must not turn into a negative int.
  if (h.rank >= static_cast<std::uint32_t>(grid_.size())) {
    p.refuse = "rank " + std::to_string(h.rank) + " is not in this grid of " +
               std::to_string(grid_.size()) + " ranks";
    return p;
  }
  const int from = static_cast<int>(h.rank);
  p.node = grid_.nodes[static_cast<size_t>(from)].name;
  if (from == rank_)
    p.refuse = "it claims to be this rank";
  else if (h.to_rank != static_cast<std::uint32_t>(rank_))
    p.refuse = "it means to reach rank " + std::to_string(h.to_rank) + ", this is rank " +
               std::to_string(rank_);
  else if (h.lane_to != lane)
    p.refuse = "it names lane " + std::to_string(h.lane_to) + ", this listener is lane " +
               std::to_string(lane);
  else if (h.lane_from >= static_cast<std::uint32_t>(grid_.lane_count()))
    p.refuse = "it sends from lane " + std::to_string(h.lane_from) + ", ranks have " +
               std::to_string(grid_.lane_count());
  else if (h.stream == kMessageStream ? lane != 0 : h.stream >= kMaxLinkStreams)
    p.refuse =
        "stream " + std::to_string(h.stream) + " is not a stream of lane " + std::to_string(lane);
  if (!p.refuse.empty()) return p;
  p.tls = grid_.tls_between(from, rank_);
  if (tls_ && !p.tls)
    // This rank serves TLS links too: a plain connection must at least come
    // from the claimed node, so the secret alone, from elsewhere on the WAN,
    // does not pass for an in-site rank.
    for (const auto& nic : grid_.nodes[static_cast<size_t>(from)].nics)
      p.plain_from.push_back(nic.address);
  return p;
}

LanePorts Transport::listen() {
  static_assert(kMaxLanes == topology::kMaxLanes);
  LanePorts ports{};
  const auto& node = grid_.nodes.at(static_cast<size_t>(rank_));
  for (int lane = 0; lane < grid_.lane_count(); ++lane) {
    auto l = lanes::Listener::open(io_.get_executor(), node.lane_nic(lane).address, 0, creds_);
    // The certificate must name the node of the rank the hello claims (and
    // proved with the secret), so a node's key cannot speak for another rank.
    auto policy = [this, lane](const lanes::Hello& h) { return this->policy(h, lane); };
    if (tls_)
      l->use_tls(tls_, policy);
    else
      l->check_peers(policy);
    l->start(
        [this](lanes::Stream s, const lanes::Hello& h) {
          // The policy checked rank, lanes and stream before the handshake
          // went on (lanes/net.hpp, PeerPolicy).
          const LinkKey key{static_cast<int>(h.rank), h.lane_from, h.lane_to, h.stream};
          if (h.stream == kMessageStream && on_message_) {
            on_message_(key.peer, std::make_unique<lanes::Stream>(std::move(s)));
            return;
          }
          if (closed_) return;  // after close_all: the socket closes as it goes out of scope
          if (in_.contains(key)) {
            rejections_.reject("authenticated connection from " +
                               describe(key.peer, key.lane_from) + " stream " +
                               std::to_string(h.stream) + " duplicates a live connection");
            return;  // the socket closes as it goes out of scope
          }
          lanes::log::debug("gridbcast rank " + std::to_string(rank_) + ": accepted " +
                            describe(key.peer, key.lane_from) + " stream " +
                            std::to_string(h.stream) + " on lane " + std::to_string(key.lane_to));
          in_[key] = std::make_unique<lanes::Stream>(std::move(s));
          accepted_.notify_all();
        },
        [this, lane](const std::string& why) {
          rejections_.reject("lane " + std::to_string(lane) + ": " + why);
        },
        [this](const std::string& what, bool fatal) {
          if (!fatal) return rejections_.note(what);
          // Always said, and the next collective on this rank fails with it.
          lanes::log::error("gridbcast rank " + std::to_string(rank_) + ": " + what);
          if (failure_.empty()) failure_ = what;
          accepted_.notify_all();
        });
    ports[static_cast<size_t>(lane)] = l->port();
    listeners_.push_back(std::move(l));
  }
  return ports;
}

asio::awaitable<lanes::Stream*> Transport::outgoing(LinkKey key,
                                                    lanes::Clock::time_point deadline) {
  for (;;) {
    if (auto it = out_.find(key); it != out_.end()) co_return it->second.get();
    const auto m = making_.find(key);
    if (m == making_.end()) break;
    const std::shared_ptr<Event> made = m->second;
    co_await made->wait();  // made (found above) or failed (made here)
  }
  if (closed_)
    throw lanes::NetworkError("rank " + std::to_string(rank_) +
                              "'s links are closed: no new connection to " +
                              describe(key.peer, key.lane_to));
  const auto& peer = grid_.nodes.at(static_cast<size_t>(key.peer));
  const auto& me = grid_.nodes.at(static_cast<size_t>(rank_));
  const auto remote = lanes::make_endpoint(
      peer.lane_nic(key.lane_to).address,
      table_.at(static_cast<size_t>(key.peer))[static_cast<size_t>(key.lane_to)]);
  lanes::Hello hello;
  hello.rank = static_cast<std::uint32_t>(rank_);
  hello.to_rank = static_cast<std::uint32_t>(key.peer);
  hello.lane_from = static_cast<std::uint8_t>(key.lane_from);
  hello.lane_to = static_cast<std::uint8_t>(key.lane_to);
  hello.stream = static_cast<std::uint16_t>(key.stream);
  std::optional<lanes::TlsPeer> tls;
  if (grid_.tls_between(rank_, key.peer)) {
    if (!tls_)
      throw lanes::NetworkError("the link to " + describe(key.peer, key.lane_to) +
                                " is tls: true, but this rank has no certificates loaded");
    tls = lanes::TlsPeer{tls_.get(), peer.name};
  }
  // Raced with close_all(): a peer that accepted the connection but never
  // answers the handshake (its loop not running) must not hold this rank
  // after its links are closed. `||` ends at the first branch that succeeds,
  // so the connection attempt reports its failure as a value.
  struct Attempt {
    std::unique_ptr<lanes::Stream> stream;
    std::exception_ptr error;
  };
  auto attempt = [](asio::awaitable<lanes::Stream> op) -> asio::awaitable<Attempt> {
    Attempt a;
    try {
      a.stream = std::make_unique<lanes::Stream>(co_await std::move(op));
    } catch (...) {
      a.error = std::current_exception();
    }
    co_return a;
  };
  using namespace asio::experimental::awaitable_operators;
  struct Listed {  // while the connection is being made, however that ends
    std::shared_ptr<Connecting> set;
    std::multiset<LinkKey>::iterator at;
    Listed(std::shared_ptr<Connecting> s, LinkKey k) : set(std::move(s)) {
      std::lock_guard lock(set->mu);
      at = set->keys.insert(k);
    }
    Listed(const Listed&) = delete;
    Listed& operator=(const Listed&) = delete;
    ~Listed() {
      std::lock_guard lock(set->mu);
      set->keys.erase(at);
    }
  } listed(connecting_, key);
  struct Making {  // callers for the same key wait for this one
    std::map<LinkKey, std::shared_ptr<Event>>& set;
    LinkKey key;
    std::shared_ptr<Event> done;
    Making(std::map<LinkKey, std::shared_ptr<Event>>& s, LinkKey k, asio::any_io_executor ex)
        : set(s), key(k), done(std::make_shared<Event>(ex)) {
      set.emplace(key, done);
    }
    Making(const Making&) = delete;
    Making& operator=(const Making&) = delete;
    ~Making() {
      set.erase(key);
      done->notify_all();
    }
  } making(making_, key, io_.get_executor());
  auto raced = co_await (attempt(lanes::connect_authenticated(
                             me.lane_nic(key.lane_from).address, remote, hello, creds_, deadline,
                             describe(key.peer, key.lane_to), tls ? &*tls : nullptr,
                             grid_.congestion_between(rank_, key.peer))) ||
                         closing_.wait());
  if (raced.index() == 0 && std::get<0>(raced).error)
    std::rethrow_exception(std::get<0>(raced).error);
  if (closed_ || raced.index() != 0) {
    if (raced.index() == 0) std::get<0>(raced).stream->close();
    throw lanes::NetworkError("rank " + std::to_string(rank_) +
                              "'s links were closed while it connected to " +
                              describe(key.peer, key.lane_to));
  }
  // Another writer may have raced us to the same key only if the plan lists a
  // link twice; keep the first.
  lanes::log::debug("gridbcast rank " + std::to_string(rank_) + ": connected lane " +
                    std::to_string(key.lane_from) + " to " + describe(key.peer, key.lane_to) +
                    " stream " + std::to_string(key.stream) + (tls ? " (TLS)" : ""));
  std::lock_guard lock(out_mu_);
  auto [it, inserted] = out_.emplace(key, std::move(std::get<0>(raced).stream));
  co_return it->second.get();
}

lanes::Stream* Transport::incoming(LinkKey key) {
  auto it = in_.find(key);
  return it == in_.end() ? nullptr : it->second.get();
}

std::string Transport::describe(int rank, int lane) const {
  if (rank < 0 || rank >= grid_.size()) return "rank " + std::to_string(rank);
  const auto& n = grid_.nodes[static_cast<size_t>(rank)];
  return "rank " + std::to_string(rank) + " (" + n.name + ", " + n.lane_nic(lane).address +
         " lane " + std::to_string(lane) + ")";
}

std::string Transport::describe(int rank) const {
  if (rank < 0 || rank >= grid_.size()) return "rank " + std::to_string(rank);
  const auto& n = grid_.nodes[static_cast<size_t>(rank)];
  return "rank " + std::to_string(rank) + " (" + n.name + ", " + n.nics.front().address + ")";
}

std::uint64_t Transport::rejected_connections() const {
  return rejections_.count();
}

std::vector<LinkSample> Transport::link_samples() const {
  std::vector<LinkSample> samples;
  std::lock_guard lock(out_mu_);
  for (const auto& [k, s] : out_) {
    if (k.stream == kMessageStream) continue;
    auto& socket = s->socket();
    if (!socket.is_open()) continue;
    const auto state = lanes::tcp_send_state(socket.native_handle());
    if (!state) continue;
    if (samples.empty() || samples.back().peer != k.peer ||
        samples.back().lane_from != k.lane_from || samples.back().lane_to != k.lane_to)
      samples.push_back({k.peer, k.lane_from, k.lane_to, 0, 0, 0, 0, 0});
    auto& sample = samples.back();
    ++sample.streams;
    sample.bytes_acked += state->bytes_acked;
    sample.notsent_bytes += state->notsent_bytes;
    sample.rwnd_limited_us += state->rwnd_limited_us;
    sample.unacked_bytes += state->unacked_bytes;
  }
  // Links none of whose streams is up yet, but being connected.
  std::lock_guard listed(connecting_->mu);
  for (const LinkKey& k : connecting_->keys) {
    if (k.stream == kMessageStream) continue;
    const auto same = [&](const LinkSample& s) {
      return s.peer == k.peer && s.lane_from == k.lane_from && s.lane_to == k.lane_to;
    };
    auto it = std::find_if(samples.begin(), samples.end(), same);
    if (it == samples.end()) {
      samples.push_back({k.peer, k.lane_from, k.lane_to, 0, 0, 0, 0, 0, true});
      it = samples.end() - 1;
    }
    if (it->connecting) ++it->streams;
  }
  return samples;
}

void Transport::close(lanes::Stream& stream) {
  std::lock_guard lock(out_mu_);
  stream.close();
}

void Transport::close_all() {
  closed_ = true;
  std::unique_lock lock(out_mu_);
  for (auto& [k, s] : out_) s->close();
  lock.unlock();
  for (auto& [k, s] : in_) s->close();
  accepted_.notify_all();  // a broadcast waiting for a peer's connection sees closed()
  closing_.notify_all();   // connections being made give up
  // The socket objects stay until the Transport goes: coroutines may still
  // hold pointers to them while they unwind.
}

}  // namespace gridbcast::runtime
