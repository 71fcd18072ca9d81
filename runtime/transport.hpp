// A rank's lanes: one listener per logical lane on that lane's NIC address, and
// the table of authenticated connections to and from peers, keyed by
// (peer, lane_from, lane_to, stream). Connections are made lazily, only for
// the links a Plan uses, and kept for later broadcasts. Internal to runtime.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "lanes/net.hpp"
#include "lanes/rejections.hpp"
#include "runtime/endpoints.hpp"
#include "runtime/event.hpp"
#include "topology/grid.hpp"

namespace gridbcast::runtime {

struct LinkKey {
  int peer;
  int lane_from;
  int lane_to;
  int stream;
  auto operator<=>(const LinkKey&) const = default;
};

// The stream id of the connection that carries point-to-point messages
// (runtime/p2p.hpp) from one rank to another, on lane 0; broadcast links use
// streams 0..63.
inline constexpr int kMessageStream = 0xffff;
// Streams per broadcast link: the topology allows at most 64 per WAN link.
inline constexpr int kMaxLinkStreams = 64;

class Transport {
 public:
  // Authenticated connections on kMessageStream go to this callback, not to the table.
  using MessageConnection = std::function<void(int peer, std::unique_ptr<lanes::Stream>)>;

  // `tls` is this node's certificate context; it must be there when the grid
  // has a tls: true WAN link towards this rank (Grid::needs_tls), and is unused otherwise.
  Transport(asio::io_context& io, const topology::Grid& grid, int rank, lanes::Credentials creds,
            std::shared_ptr<lanes::TlsContext> tls = nullptr);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Opens the listeners; returns their ports (index = lane).
  LanePorts listen();
  void set_table(EndpointTable table) { table_ = std::move(table); }
  const EndpointTable& table() const { return table_; }

  // The connection this rank sends on, made on first use.
  // Over TLS when Grid::tls_between says so, never falling back to plain TCP.
  // While one call makes the connection for a key, another for the same key
  // waits for it (the peer refuses a second connection as a duplicate); if
  // the first failed, the second tries again and reports its own failure.
  asio::awaitable<lanes::Stream*> outgoing(LinkKey key, lanes::Clock::time_point deadline);
  // The connection a peer made to us, or nullptr if it has not arrived yet.
  lanes::Stream* incoming(LinkKey key);
  Event& accepted() { return accepted_; }
  void on_message_connection(MessageConnection callback) { on_message_ = std::move(callback); }

  // "rank 3 (a4, 127.0.1.4 lane 1)": how errors name a peer.
  std::string describe(int rank, int lane) const;
  std::string describe(int rank) const;
  int rank() const { return rank_; }
  const topology::Grid& grid() const { return grid_; }
  asio::io_context& io() { return io_; }
  std::uint64_t rejected_connections() const;
  // The count, the first few reasons and the rate-limited log of refused connections.
  const lanes::RejectionLog& rejections() const { return rejections_; }
  // Not empty once a listener stopped accepting: the rank cannot serve its links.
  const std::string& failure() const { return failure_; }
  // Whether a Hello can be a link to this rank's listener on `lane`, and how.
  lanes::PeerPolicy policy(const lanes::Hello& h, int lane) const;
  // The kernel's figures for every outgoing broadcast connection (not the
  // message connections), one sample per (peer, lane_from, lane_to). Safe to
  // call from any thread while the rank runs.
  std::vector<LinkSample> link_samples() const;
  // Closes one connection (after a failure), in step with link_samples().
  void close(lanes::Stream& stream);
  // Closes every connection (after a failure: peers see the end of file), for
  // good: no connection is made or accepted afterwards.
  void close_all();
  bool closed() const { return closed_; }

 private:
  asio::io_context& io_;
  const topology::Grid& grid_;
  int rank_;
  lanes::Credentials creds_;
  std::shared_ptr<lanes::TlsContext> tls_;
  EndpointTable table_;
  std::vector<std::shared_ptr<lanes::Listener>> listeners_;
  std::map<LinkKey, std::unique_ptr<lanes::Stream>> out_;
  // Keys outgoing() is connecting now, and what their end notifies.
  std::map<LinkKey, std::shared_ptr<Event>> making_;
  // Held where out_ gains a connection or its sockets close, and while
  // link_samples() reads them from another thread.
  mutable std::mutex out_mu_;
  // The outgoing connections being made, for link_samples; shared with the
  // connecting coroutines, whose frames may outlive the Transport.
  struct Connecting {
    std::mutex mu;
    std::multiset<LinkKey> keys;
  };
  std::shared_ptr<Connecting> connecting_ = std::make_shared<Connecting>();
  std::map<LinkKey, std::unique_ptr<lanes::Stream>> in_;
  lanes::RejectionLog rejections_;
  std::string failure_;
  bool closed_ = false;
  Event accepted_;
  Event closing_;  // close_all(): connections being made give up
  MessageConnection on_message_;
};

}  // namespace gridbcast::runtime
