#include "runtime/transport.hpp"

#include <iostream>

namespace gridbcast::runtime {

Transport::Transport(asio::io_context& io, const topology::Grid& grid, int rank,
                     lanes::Credentials creds, std::shared_ptr<lanes::TlsContext> tls)
    : io_(io),
      grid_(grid),
      rank_(rank),
      creds_(std::move(creds)),
      tls_(std::move(tls)),
      accepted_(io.get_executor()) {}

Transport::~Transport() {
  for (auto& l : listeners_) l->close();
}

std::array<std::uint16_t, kLanes> Transport::listen() {
  std::array<std::uint16_t, kLanes> ports{};
  const auto& node = grid_.nodes.at(static_cast<size_t>(rank_));
  for (int lane = 0; lane < kLanes; ++lane) {
    auto l = lanes::Listener::open(io_.get_executor(), node.lane_nic(lane).address, 0, creds_);
    if (tls_)
      // The certificate must name the node of the rank the hello claims (and
      // proved with the secret), so a node's key cannot speak for another rank.
      l->use_tls(tls_, [this](const lanes::Hello& h) {
        const int r = static_cast<int>(h.rank);
        if (r < 0 || r >= grid_.size()) return lanes::PeerPolicy{};
        return lanes::PeerPolicy{grid_.tls_between(r, rank_),
                                 grid_.nodes[static_cast<size_t>(r)].name};
      });
    l->start(
        [this, lane](lanes::Stream s, const lanes::Hello& h) {
          const LinkKey key{static_cast<int>(h.rank), h.lane_from, h.lane_to, h.stream};
          const bool valid = static_cast<int>(h.rank) < grid_.size() && h.lane_to == lane &&
                             h.lane_from < kLanes && static_cast<int>(h.rank) != rank_;
          if (valid && h.stream == kMessageStream && on_message_) {
            on_message_(key.peer, std::make_unique<lanes::Stream>(std::move(s)));
            return;
          }
          if (!valid || in_.contains(key)) {
            rejections_.push_back("authenticated connection claiming rank " +
                                  std::to_string(h.rank) + " lane " + std::to_string(h.lane_from) +
                                  " stream " + std::to_string(h.stream) +
                                  (valid ? " duplicates a live connection" : " is not valid here"));
            return;  // the socket closes as it goes out of scope
          }
          in_[key] = std::make_unique<lanes::Stream>(std::move(s));
          accepted_.notify_all();
        },
        [this, lane](const std::string& why) {
          rejections_.push_back("lane " + std::to_string(lane) + ": " + why);
          std::cerr << "gridbcast rank " << rank_ << ": " << rejections_.back() << "\n";
        });
    ports[static_cast<size_t>(lane)] = l->port();
    listeners_.push_back(std::move(l));
  }
  return ports;
}

asio::awaitable<lanes::Stream*> Transport::outgoing(LinkKey key,
                                                    lanes::Clock::time_point deadline) {
  if (auto it = out_.find(key); it != out_.end()) co_return it->second.get();
  const auto& peer = grid_.nodes.at(static_cast<size_t>(key.peer));
  const auto& me = grid_.nodes.at(static_cast<size_t>(rank_));
  const auto remote = lanes::make_endpoint(
      peer.lane_nic(key.lane_to).address,
      table_.at(static_cast<size_t>(key.peer))[static_cast<size_t>(key.lane_to)]);
  lanes::Hello hello;
  hello.rank = static_cast<std::uint32_t>(rank_);
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
  auto stream = co_await lanes::connect_authenticated(
      me.lane_nic(key.lane_from).address, remote, hello, creds_, deadline,
      describe(key.peer, key.lane_to), tls ? &*tls : nullptr,
      grid_.congestion_between(rank_, key.peer));
  // Another writer may have raced us to the same key only if the plan lists a
  // link twice; keep the first.
  auto [it, inserted] = out_.emplace(key, std::make_unique<lanes::Stream>(std::move(stream)));
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
  return rejections_.size();
}

void Transport::close_all() {
  for (auto& [k, s] : out_) s->close();
  for (auto& [k, s] : in_) s->close();
  // The socket objects stay until the Transport goes: coroutines may still
  // hold pointers to them while they unwind.
}

}  // namespace gridbcast::runtime
