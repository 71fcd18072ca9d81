// Sockets for lanes: listening on a NIC address, connecting from one, and the
// authenticated handshake (lanes/wire.hpp). Asio appears here and in runtime's
// sources only; public runtime headers stay Asio-free.
#pragma once

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// A network failure that names the peer it concerns.
class NetworkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string endpoint_string(const tcp::endpoint& e);
tcp::endpoint make_endpoint(const std::string& address, std::uint16_t port);

// How long a new connection may take to complete its handshake; a peer that
// sends nothing is dropped after this, without disturbing anything else.
inline constexpr std::chrono::seconds kHandshakeTimeout{10};

// A listening socket on one address (one per lane). Authenticated connections
// are handed to the callback with the peer's Hello; anything else is closed,
// logged and counted.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  using OnConnection = std::function<void(tcp::socket, const Hello&)>;
  using OnReject = std::function<void(const std::string& why)>;

  static std::shared_ptr<Listener> open(asio::any_io_executor ex, const std::string& address,
                                        std::uint16_t port, Credentials creds);
  std::uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  void start(OnConnection on_connection, OnReject on_reject);
  void close();
  std::uint64_t rejected() const { return rejected_; }

 private:
  Listener(asio::any_io_executor ex, std::string address, Credentials creds);
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> handshake(tcp::socket socket);

  tcp::acceptor acceptor_;
  std::string address_;
  std::uint16_t port_ = 0;
  Credentials creds_;
  OnConnection on_connection_;
  OnReject on_reject_;
  std::uint64_t rejected_ = 0;
};

// Connects from `local_address` (the lane's NIC; port chosen by the kernel) to
// the peer, retrying refused connections until `deadline`, then proves the job
// secret and checks the peer's proof. Throws NetworkError naming `peer_name`.
asio::awaitable<tcp::socket> connect_authenticated(const std::string& local_address,
                                                   const tcp::endpoint& remote, Hello hello,
                                                   const Credentials& creds,
                                                   Clock::time_point deadline,
                                                   const std::string& peer_name);

// Runs `op` but gives up at `deadline`, cancelling it; throws NetworkError(what).
// Pass ops that report errors as values (kAsTuple): an op that throws makes
// this wait for the deadline, since `||` completes on the first success.
template <typename T>
asio::awaitable<T> before(Clock::time_point deadline, asio::awaitable<T> op,
                          const std::string& what);

void set_stream_options(tcp::socket& s);

}  // namespace gridbcast::lanes

#include "lanes/net_inl.hpp"
