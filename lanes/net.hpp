// Sockets for lanes: listening on a NIC address, connecting from one, and the
// authenticated handshake (lanes/wire.hpp). Asio appears here and in runtime's
// sources only; public runtime headers stay Asio-free.
#pragma once

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lanes/stream.hpp"
#include "lanes/tls.hpp"
#include "lanes/wire.hpp"

namespace gridbcast::lanes {

using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Completion token for coroutines that want errors as values at the I/O edge.
inline constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

struct Credentials {
  std::uint64_t job_id = 0;
  std::vector<std::uint8_t> secret;
};

// What an exception_ptr holds, as text (for completion handlers of spawned
// coroutines, which must report what escaped them, never drop it).
std::string what_of(std::exception_ptr e);

// Writes `line` and a newline to standard error in one write() (repeated only
// if the kernel takes part of it), so lines from several threads or from the
// ranks sharing the launcher's standard error do not tear into each other.
void write_line(const std::string& line);

// A network failure that names the peer it concerns.
class NetworkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string endpoint_string(const tcp::endpoint& e);

// TCP keep-alive (probes after 10 s idle, every 5 s, 3 lost: a silent peer is
// noticed in about 25 s) and TCP_USER_TIMEOUT (data unacknowledged for 30 s
// fails the socket), so a cut link or a dead host ends a connection in bounded
// time even when nothing is written. Lane sockets get it with their other
// options; the control channel too. Throws NetworkError.
void set_liveness_options(tcp::socket& s);
tcp::endpoint make_endpoint(const std::string& address, std::uint16_t port);

// How long a new connection may take to complete its handshake; a peer that
// sends nothing is dropped after this, without disturbing anything else.
inline constexpr std::chrono::seconds kHandshakeTimeout{10};

// Connections that have not finished the handshake, per listener (as OpenSSH's
// MaxStartups): beyond this one is dropped, so strangers cannot hold a rank's
// descriptors: the oldest that has not sent a Hello, else the oldest of those
// this end has answered. A genuine peer sends its Hello with TCP's last ACK
// and its proof one round trip later; once answered it may send its data
// right behind its proof, so it goes only if this many connections that each
// sent a Hello of this job arrive within that round trip.
inline constexpr size_t kMaxUnauthenticated = 64;

// What a server expects of a client, decided from the listener's own view of
// its links (the Hello's ranks range-checked against the grid, its lanes and
// stream against this listener): whether the connection can be a link here
// at all, TLS or plain TCP, and with TLS the node name its certificate must
// carry, so a certificate is bound to the rank it speaks for. On a plain link
// it judges the Hello before either end proves the secret: it only refuses on
// the claims, which the connector's proof then covers, so a link this end
// does not have is refused before this end proves anything. On a TLS link it
// judges the Hello inside TLS, after the gate's proof and the certificates.
struct PeerPolicy {
  bool tls = false;
  std::string node{};  // the claimed rank's node, for messages and the certificate check
  // Not empty: a plain connection must come from one of these addresses (the
  // claimed rank's NICs). Set where this listener also serves TLS links, so a
  // holder of the secret elsewhere cannot pose as a plain, in-site rank.
  std::vector<std::string> plain_from{};
  std::string refuse{};  // not empty: why no link of this listener matches the Hello
};

// The first byte of a TLS record carrying a handshake (a ClientHello); a plain
// Hello starts with kMagic's 'G'.
inline constexpr std::uint8_t kTlsHandshakeRecord = 0x16;

// A listening socket on one address (one per lane). Authenticated connections
// are handed to the callback with the peer's Hello; anything else is closed,
// logged and counted.
//
// The connector speaks first (lanes/wire.hpp): a plain Hello, which the
// listener judges by the policy, answers with its Challenge (its nonce and its
// proof of the secret) and takes the connector's Proof; or on a tls: true link
// a TLS gate (the listener tells by the first four bytes), whose proof comes
// before TLS, then the Hello inside TLS; the listener checks the secret, then
// the policy for the claimed rank, then the certificate's name:
//
//   acceptor ◄── TlsGate ── connector
//            ── Challenge ──►
//            ◄── Proof (of the secret, over the challenge's nonce) ──
//            ◄═ TLS 1.3 handshake, both certificates verified against the grid CA ═►
//            ◄═ Hello (MAC over the challenge's nonce) ═    name == policy(rank).node?
//            ═ Accept ═►
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  using OnConnection = std::function<void(Stream, const Hello&)>;
  using OnReject = std::function<void(const std::string& why)>;
  using Policy = std::function<PeerPolicy(const Hello&)>;
  // Trouble of the listener itself (descriptors exhausted, the accept loop
  // failing), as distinct from a refused connection.
  using OnTrouble = std::function<void(const std::string& what, bool fatal)>;

  static std::shared_ptr<Listener> open(asio::any_io_executor ex, const std::string& address,
                                        std::uint16_t port, Credentials creds);
  std::uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  // Before start(): accept TLS with `ctx` and ask `policy` which ranks must use it.
  // Without it every connection must be plain.
  void use_tls(std::shared_ptr<TlsContext> ctx, Policy policy);
  // Before start(), for a listener without TLS: which Hellos can be a link here.
  void check_peers(Policy policy) { policy_ = std::move(policy); }
  // Before start(): at most this many handshakes in progress (default kMaxUnauthenticated).
  void limit_unauthenticated(size_t n) { max_pending_ = n; }
  void start(OnConnection on_connection, OnReject on_reject, OnTrouble on_trouble = {});
  void close();
  std::uint64_t rejected() const { return rejected_; }
  // Handshakes in progress now (never above the limit once the accept loop ran).
  size_t unauthenticated() const { return live_pending_; }

 private:
  // A connection in its handshake; `evicted` once the cap dropped it;
  // `answered` once this end sent its Challenge (a plain connector may send
  // its data right behind its proof, so these go last).
  struct Pending {
    Stream* stream = nullptr;
    bool evicted = false;
    bool answered = false;
    bool authenticated = false;
  };

  Listener(asio::any_io_executor ex, std::string address, Credentials creds);
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> handshake(tcp::socket socket);
  asio::awaitable<void> authenticate(Stream& stream, const std::string& who, Pending& me);
  void evict_oldest();

  tcp::acceptor acceptor_;
  std::string address_;
  std::uint16_t port_ = 0;
  Credentials creds_;
  OnConnection on_connection_;
  OnReject on_reject_;
  std::shared_ptr<TlsContext> tls_;
  Policy policy_;
  OnTrouble on_trouble_;
  std::uint64_t rejected_ = 0;
  size_t max_pending_ = kMaxUnauthenticated;
  std::list<Pending> pending_;  // oldest first
  size_t live_pending_ = 0;     // entries of pending_ not evicted
};

// With TLS: this node's context and the node name the server's certificate must carry.
struct TlsPeer {
  TlsContext* ctx = nullptr;
  std::string node;
};

// Connects from `local_address` (the lane's NIC; port chosen by the kernel) to
// the peer, with `congestion` as its TCP congestion control (empty: the host's
// default), retrying refused connections until `deadline`, then (with `tls`)
// sends its Hello (or with `tls` its TLS gate), checks the acceptor's proof of
// the job secret in its Challenge (with `tls`: proves the secret, runs the TLS
// handshake, checks the server's certificate name, then sends the Hello and
// checks the acceptor's Accept), and returns once its own proof is sent: the
// caller's data may follow at once. Throws NetworkError naming
// `peer_name` and the reason. Never falls back to plain TCP.
asio::awaitable<Stream> connect_authenticated(const std::string& local_address,
                                              const tcp::endpoint& remote, Hello hello,
                                              const Credentials& creds, Clock::time_point deadline,
                                              const std::string& peer_name,
                                              const TlsPeer* tls = nullptr,
                                              const std::string& congestion = {});

// Runs `op` but gives up at `deadline`, cancelling it; throws NetworkError(what).
// Pass ops that report errors as values (kAsTuple): an op that throws makes
// this wait for the deadline, since `||` completes on the first success.
template <typename T>
asio::awaitable<T> before(Clock::time_point deadline, asio::awaitable<T> op,
                          const std::string& what);

void set_stream_options(tcp::socket& s);

}  // namespace gridbcast::lanes

#include "lanes/net_inl.hpp"
