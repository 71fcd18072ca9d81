#include "lanes/net.hpp"

#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "lanes/log.hpp"

namespace gridbcast::lanes {

std::string endpoint_string(const tcp::endpoint& e) {
  const auto a = e.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(e.port());
}

void write_line(const std::string& line) {
  const std::string whole = line + "\n";
  for (size_t done = 0; done < whole.size();) {
    const ssize_t n = ::write(2, whole.data() + done, whole.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to say it
    done += static_cast<size_t>(n);
  }
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

tcp::endpoint make_endpoint(const std::string& address, std::uint16_t port) {
  asio::error_code ec;
  auto a = asio::ip::make_address(address, ec);
  if (ec) throw NetworkError("\"" + address + "\" is not an IP address: " + ec.message());
  return {a, port};
}

void set_liveness_options(tcp::socket& s) {
  const int fd = s.native_handle();
  const auto set = [fd](int level, int name, int value, const char* what) {
    if (::setsockopt(fd, level, name, &value, sizeof value) != 0)
      throw NetworkError(std::string("setsockopt ") + what + ": " + std::strerror(errno));
  };
  set(SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
  set(IPPROTO_TCP, TCP_KEEPIDLE, 10, "TCP_KEEPIDLE");
  set(IPPROTO_TCP, TCP_KEEPINTVL, 5, "TCP_KEEPINTVL");
  set(IPPROTO_TCP, TCP_KEEPCNT, 3, "TCP_KEEPCNT");
  set(IPPROTO_TCP, TCP_USER_TIMEOUT, 30'000, "TCP_USER_TIMEOUT");
}

void set_stream_options(tcp::socket& s) {
  // Frames are written whole; Nagle would only delay the tail of a segment.
  s.set_option(tcp::no_delay(true));
  // A dead host or a cut link ends the connection in bounded time even while
  // nothing is written (MPI programs may wait on a peer for hours).
  set_liveness_options(s);
  // Buffer sizes are left alone: setting SO_SNDBUF/SO_RCVBUF turns off Linux's
  // autotuning, which long fat WAN pipes need.
}

namespace {

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line.empty() ? "unknown" : line;
}

// Sets the socket's TCP congestion control (TCP_CONGESTION). Throws
// NetworkError naming `name`, `where` (the peer) and, when the kernel lacks it
// or does not allow it without CAP_NET_ADMIN, what it has or allows.
void set_congestion(tcp::socket& s, const std::string& name, const std::string& where) {
  if (::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) == 0)
    return;
  const int err = errno;
  std::string why = std::strerror(err);
  if (err == ENOENT)
    why = "this host does not have it (available: " +
          first_line("/proc/sys/net/ipv4/tcp_available_congestion_control") + ")";
  else if (err == EPERM)
    why = "only root may use it here (allowed without CAP_NET_ADMIN: " +
          first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control") + ")";
  throw NetworkError("cannot use TCP congestion control \"" + name + "\" to reach " + where + ": " +
                     why);
}

}  // namespace

Listener::Listener(asio::any_io_executor ex, std::string address, Credentials creds)
    : acceptor_(ex), address_(std::move(address)), creds_(std::move(creds)) {}

std::shared_ptr<Listener> Listener::open(asio::any_io_executor ex, const std::string& address,
                                         std::uint16_t port, Credentials creds) {
  std::shared_ptr<Listener> l(new Listener(ex, address, std::move(creds)));
  const tcp::endpoint ep = make_endpoint(address, port);
  asio::error_code ec;
  l->acceptor_.open(ep.protocol(), ec);
  if (!ec) l->acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) l->acceptor_.bind(ep, ec);
  if (!ec) l->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw NetworkError("cannot listen on " + endpoint_string(ep) + ": " + ec.message());
  l->port_ = l->acceptor_.local_endpoint().port();
  return l;
}

void Listener::use_tls(std::shared_ptr<TlsContext> ctx, Policy policy) {
  tls_ = std::move(ctx);
  policy_ = std::move(policy);
}

void Listener::start(OnConnection on_connection, OnReject on_reject, OnTrouble on_trouble) {
  on_connection_ = std::move(on_connection);
  on_reject_ = std::move(on_reject);
  on_trouble_ = std::move(on_trouble);
  asio::co_spawn(
      acceptor_.get_executor(), [self = shared_from_this()] { return self->accept_loop(); },
      [self = shared_from_this()](std::exception_ptr e) {
        if (!e) return;
        // A listener that stops accepting leaves its peers waiting: say so.
        const std::string what = what_of(e);
        const std::string line = "listener on " + self->address_ + ":" +
                                 std::to_string(self->port_) + " stopped accepting: " + what;
        if (self->on_trouble_)
          self->on_trouble_(line, true);
        else
          log::error("gridbcast: " + line);
      });
}

void Listener::close() {
  asio::error_code ignored;
  acceptor_.close(ignored);
}

void Listener::evict_oldest() {
  // First those this end has not answered; a connection it answered may be a
  // connector whose data follows its proof (lanes/wire.hpp), and it is done
  // within a round trip.
  for (const bool answered : {false, true}) {
    for (auto& p : pending_) {
      if (p.evicted || p.authenticated || p.answered != answered) continue;
      p.evicted = true;
      --live_pending_;
      p.stream->close();  // its pending operation completes with operation_aborted
      return;
    }
  }
}

namespace {

bool out_of_descriptors(const asio::error_code& ec) {
  return ec == asio::error::no_descriptors || (ec.category() == asio::system_category() &&
                                               (ec.value() == ENFILE || ec.value() == EMFILE));
}

}  // namespace

asio::awaitable<void> Listener::accept_loop() {
  auto self = shared_from_this();
  const std::string where = address_ + ":" + std::to_string(port_);
  std::chrono::milliseconds backoff{0};
  while (acceptor_.is_open()) {
    auto [ec, socket] = co_await acceptor_.async_accept(kAsTuple);
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (out_of_descriptors(ec)) {
      // The pending connection stays in the kernel's queue: accepting again at
      // once would spin. Wait (10 ms doubling to 1 s) for descriptors to free.
      backoff =
          std::clamp(backoff * 2, std::chrono::milliseconds{10}, std::chrono::milliseconds{1000});
      if (on_trouble_)
        on_trouble_("listener on " + where + ": out of file descriptors (" + ec.message() + ", " +
                        std::to_string(live_pending_) +
                        " unauthenticated connections in progress here); not accepting for " +
                        std::to_string(backoff.count()) + " ms",
                    false);
      asio::steady_timer t(acceptor_.get_executor(), backoff);
      co_await t.async_wait(kAsTuple);
      continue;
    }
    backoff = std::chrono::milliseconds{0};
    if (ec) continue;  // e.g. a reset before accept (ECONNABORTED): keep serving
    if (live_pending_ >= max_pending_) evict_oldest();
    asio::co_spawn(
        acceptor_.get_executor(),
        [self, s = std::move(socket)]() mutable { return self->handshake(std::move(s)); },
        [self](std::exception_ptr e) {
          if (!e) return;
          ++self->rejected_;
          std::string why = "unknown exception";
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& ex) {
            why = ex.what();
          } catch (...) {
          }
          if (self->on_reject_) self->on_reject_(why);
        });
  }
}

asio::awaitable<void> Listener::handshake(tcp::socket socket) {
  asio::error_code ignored;
  const std::string who = "connection from " + endpoint_string(socket.remote_endpoint(ignored));
  Stream stream(std::move(socket));
  // Counted among the unauthenticated until it is accepted or refused.
  const auto me = pending_.insert(pending_.end(), Pending{&stream});
  ++live_pending_;
  struct Unlist {
    Listener& l;
    std::list<Pending>::iterator it;
    ~Unlist() {
      if (!it->evicted && !it->authenticated) --l.live_pending_;
      l.pending_.erase(it);
    }
  } unlist{*this, me};
  std::exception_ptr failure;
  try {
    co_await authenticate(stream, who, *me);
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure && me->evicted)
    throw NetworkError(who + " dropped: " + std::to_string(max_pending_) +
                       " newer unauthenticated connections arrived before it finished its "
                       "handshake (the oldest goes first)");
  if (failure) std::rethrow_exception(failure);
}

namespace {

// Sends the Challenge and reads the connector's Proof, within `deadline`.
asio::awaitable<Mac> challenge_for_proof(Stream& stream, const Challenge& challenge,
                                         Clock::time_point deadline, const std::string& who) {
  const auto challenge_bytes = encode(challenge);
  auto [wec, wn] = co_await before(deadline, stream.write(asio::buffer(challenge_bytes)),
                                   who + ": timed out sending the challenge");
  if (wec) throw NetworkError(who + " rejected: " + wec.message() + " while sending the challenge");
  std::array<std::uint8_t, kAcceptBytes> proof_bytes{};
  auto [rec, rn] = co_await before(deadline, stream.read(asio::buffer(proof_bytes)),
                                   who + ": no proof of the job secret within " +
                                       std::to_string(kHandshakeTimeout.count()) + " s");
  if (rec == asio::error::eof)
    throw NetworkError(who +
                       " rejected: it closed the connection before proving the job secret (a "
                       "rank with another secret refuses the challenge)");
  if (rec) throw NetworkError(who + " rejected: " + rec.message() + " before a complete proof");
  std::string why;
  const auto proof = decode_accept(proof_bytes, why);
  if (!proof) throw NetworkError(who + " rejected: " + why + " (its proof of the job secret)");
  co_return proof->mac;
}

}  // namespace

asio::awaitable<void> Listener::authenticate(Stream& stream, const std::string& who, Pending& me) {
  const auto deadline = Clock::now() + kHandshakeTimeout;
  const Nonce server_nonce = random_nonce();
  std::array<std::uint8_t, kHelloBytes> hello_bytes{};
  // Errors come back as values: with exceptions the deadline's `||` would wait
  // for the timer (it completes on the first *success*).
  // What the client sends first tells: a Hello (plain), or on a TLS link the
  // gate that proves the job secret before any TLS work (lanes/wire.hpp). A
  // TLS record here is a client that skipped the gate: refused before a byte
  // of TLS is computed, so strangers cost this thread an HMAC or two at most.
  const std::string no_hello =
      who + ": no hello within " + std::to_string(kHandshakeTimeout.count()) + " s";
  auto [mec, mn] = co_await before(
      deadline, stream.read(asio::buffer(hello_bytes.data(), 4)),
      no_hello +
          " (a rank of protocol 2 or older says nothing either: it waits for the acceptor "
          "to speak first, and every rank must run the same version)");
  if (mec) throw NetworkError(who + " rejected: " + mec.message() + " before a complete hello");
  const std::uint32_t magic = static_cast<std::uint32_t>(hello_bytes[0]) << 24 |
                              static_cast<std::uint32_t>(hello_bytes[1]) << 16 |
                              static_cast<std::uint32_t>(hello_bytes[2]) << 8 | hello_bytes[3];
  if (hello_bytes[0] == kTlsHandshakeRecord)
    throw NetworkError(who + " rejected: it started TLS without first proving the job secret " +
                       "(no TLS gate: not a gridbcast rank of this version)");
  // The listener's own view of its links decides whether the Hello can be
  // one of them, whether TLS was due, and whose certificate it had to
  // present. Returns how rejections name what the peer claims.
  const auto judge = [&](const Hello& h) {
    const PeerPolicy policy = policy_ ? policy_(h) : PeerPolicy{};
    const std::string claimed = " (claims rank " + std::to_string(h.rank) +
                                (policy.node.empty() ? "" : ", node " + policy.node) + " lane " +
                                std::to_string(h.lane_from) + ")";
    if (!policy.refuse.empty()) throw NetworkError(who + claimed + " rejected: " + policy.refuse);
    if (policy.tls && !stream.tls())
      throw NetworkError(who + claimed +
                         " rejected: its WAN link is tls: true, but it did not start TLS");
    if (!policy.tls && stream.tls())
      throw NetworkError(who + claimed +
                         " rejected: it started TLS on a link that is not tls: true");
    if (policy.tls) {
      if (const std::string bad = stream.check_peer_name(policy.node); !bad.empty())
        throw NetworkError(who + claimed + " rejected: " + bad);
    }
    if (!policy.tls && !policy.plain_from.empty()) {
      asio::error_code ec;
      const std::string from = stream.socket().remote_endpoint(ec).address().to_string();
      if (std::find(policy.plain_from.begin(), policy.plain_from.end(), from) ==
          policy.plain_from.end())
        throw NetworkError(who + claimed +
                           " rejected: a plain connection to a rank with TLS links " +
                           "must come from an address of node " + policy.node);
    }
    return claimed;
  };
  std::string why, claimed;
  std::optional<Hello> hello;
  if (magic == kTlsGateMagic) {
    if (!tls_)
      throw NetworkError(who + " rejected: it started TLS, but no tls: true WAN link ends at " +
                         address_);
    std::array<std::uint8_t, kTlsGateBytes> gate_bytes{};
    std::copy_n(hello_bytes.begin(), 4, gate_bytes.begin());
    auto [gec, gn] = co_await before(
        deadline, stream.read(asio::buffer(gate_bytes.data() + 4, gate_bytes.size() - 4)),
        no_hello);
    if (gec) throw NetworkError(who + " rejected: " + gec.message() + " in its TLS gate");
    const auto gate = decode_tls_gate(gate_bytes, why);
    if (!gate) throw NetworkError(who + " rejected: " + why);
    if (gate->job_id != creds_.job_id)
      throw NetworkError(who + " rejected: its TLS gate belongs to another job");
    // The certificate proves this end; the gate's proof comes before TLS.
    me.answered = true;
    const Mac proof =
        co_await challenge_for_proof(stream, Challenge{server_nonce, Mac{}}, deadline, who);
    if (!mac_equal(proof, tls_gate_mac(creds_.secret, server_nonce, *gate)))
      throw NetworkError(who + " rejected: wrong job secret in its TLS gate");
    // The secret is proven: no longer a stranger, so neither counted against
    // the cap nor evicted while TLS runs.
    if (me.evicted)
      throw NetworkError(who + " rejected: dropped by the cap on unauthenticated connections");
    me.authenticated = true;
    --live_pending_;
    const auto ec = co_await before(deadline, stream.start_tls(*tls_, true),
                                    who + ": TLS handshake not done within " +
                                        std::to_string(kHandshakeTimeout.count()) + " s");
    if (ec) throw NetworkError(who + " rejected: TLS handshake failed: " + stream.tls_failure(ec));
    // The Hello comes whole, inside TLS, with its MAC.
    auto [rec, rn] = co_await before(deadline, stream.read(asio::buffer(hello_bytes)), no_hello);
    if (rec)
      throw NetworkError(who + " rejected: " +
                         (rec != asio::error::eof ? stream.tls_failure(rec) : rec.message()) +
                         " before a complete hello");
    hello = decode_hello(hello_bytes, why);
    if (!hello) throw NetworkError(who + " rejected: " + why);
    if (hello->job_id != creds_.job_id)
      throw NetworkError(who + " rejected: it belongs to another job");
    if (!mac_equal(hello->mac, hello_mac(creds_.secret, server_nonce, *hello)))
      throw NetworkError(who + " (claims rank " + std::to_string(hello->rank) +
                         ") rejected: wrong job secret");
    claimed = judge(*hello);
  } else {
    auto [rec, rn] = co_await before(
        deadline, stream.read(asio::buffer(hello_bytes.data() + 4, hello_bytes.size() - 4)),
        no_hello);
    if (rec) throw NetworkError(who + " rejected: " + rec.message() + " before a complete hello");
    hello = decode_hello(hello_bytes, why);
    if (!hello) throw NetworkError(who + " rejected: " + why);
    if (hello->job_id != creds_.job_id)
      throw NetworkError(who + " rejected: it belongs to another job");
    // A link this end does not have is refused before it proves anything
    // (the claims are not trusted, only refused on: whoever holds the job id
    // learns which links a rank has, not the secret).
    claimed = judge(*hello);
    // This end proves the secret first, over the Hello as it came; the
    // connector's proof covers the same Hello and this end's fresh nonce.
    me.answered = true;
    const Mac proof = co_await challenge_for_proof(
        stream,
        Challenge{server_nonce,
                  accept_mac(creds_.secret, hello->client_nonce, server_nonce, *hello)},
        deadline, who + claimed);
    if (!mac_equal(proof, hello_mac(creds_.secret, server_nonce, *hello)))
      throw NetworkError(who + claimed + " rejected: wrong job secret");
  }
  if (stream.tls()) {
    const auto accept_bytes =
        encode(Accept{accept_mac(creds_.secret, hello->client_nonce, server_nonce, *hello)});
    auto [aec, an] = co_await before(deadline, stream.write(asio::buffer(accept_bytes)),
                                     who + ": timed out sending accept");
    if (aec) throw NetworkError(who + ": " + aec.message() + " while accepting");
  }
  set_stream_options(stream.socket());
  // Authenticated: no longer counted against the cap, and never evicted.
  if (me.evicted)  // dropped by the cap while this coroutine was between operations
    throw NetworkError(who + claimed +
                       " rejected: dropped by the cap on unauthenticated connections");
  if (!me.authenticated) {
    me.authenticated = true;
    --live_pending_;
  }
  if (on_connection_) on_connection_(std::move(stream), *hello);
}

asio::awaitable<Stream> connect_authenticated(const std::string& local_address,
                                              const tcp::endpoint& remote, Hello hello,
                                              const Credentials& creds, Clock::time_point deadline,
                                              const std::string& peer_name, const TlsPeer* tls,
                                              const std::string& congestion) {
  auto ex = co_await asio::this_coro::executor;
  const std::string where = peer_name + " at " + endpoint_string(remote);
  std::chrono::milliseconds backoff{10};
  for (;;) {
    tcp::socket socket(ex);
    asio::error_code ec;
    socket.open(remote.protocol(), ec);
    if (!ec && !congestion.empty()) set_congestion(socket, congestion, where);
    if (out_of_descriptors(ec))
      throw NetworkError("this rank is out of file descriptors (" + ec.message() +
                         "): cannot open a connection to " + where);
    if (!ec && !local_address.empty()) socket.bind(make_endpoint(local_address, 0), ec);
    if (ec)
      throw NetworkError("cannot bind to local address " + local_address + " to reach " + where +
                         ": " + ec.message());
    auto [cec] = co_await before(deadline, socket.async_connect(remote, kAsTuple),
                                 "timed out connecting to " + where);
    if (cec == asio::error::connection_refused && Clock::now() + backoff < deadline) {
      // The peer may still be opening its listener: bounded retries.
      asio::steady_timer t(ex, backoff);
      co_await t.async_wait(asio::use_awaitable);
      backoff = std::min(backoff * 2, std::chrono::milliseconds{500});
      continue;
    }
    if (out_of_descriptors(cec))
      throw NetworkError("this rank is out of file descriptors (" + cec.message() +
                         "): cannot connect to " + where);
    if (cec) throw NetworkError("cannot connect to " + where + ": " + cec.message());

    // This end speaks first (lanes/wire.hpp): its Hello, or on a TLS link
    // its gate, each without a MAC, for the acceptor's Challenge to answer.
    Stream stream(std::move(socket));
    hello.job_id = creds.job_id;
    hello.client_nonce = random_nonce();
    hello.mac = Mac{};
    TlsGate gate;
    gate.job_id = creds.job_id;
    gate.gate_nonce = random_nonce();
    const auto hello_bytes = encode(hello);
    const auto gate_bytes = encode(gate);
    auto [oec, on] = co_await before(
        deadline, stream.write(tls ? asio::buffer(gate_bytes) : asio::buffer(hello_bytes)),
        "timed out sending " + std::string(tls ? "the TLS gate" : "hello") + " to " + where);
    if (oec) throw NetworkError("handshake with " + where + " failed: " + oec.message());
    std::array<std::uint8_t, kChallengeBytes> challenge_bytes{};
    auto [rec, rn] = co_await before(deadline, stream.read(asio::buffer(challenge_bytes)),
                                     "timed out waiting for the handshake of " + where);
    if (rec == asio::error::eof)
      throw NetworkError(where + " refused the handshake (" + rec.message() +
                         "): another job's or version's rank, or a link it does not have from "
                         "this rank? Its log says which");
    if (rec) throw NetworkError("handshake with " + where + " failed: " + rec.message());
    std::string why;
    auto challenge = decode_challenge(challenge_bytes, why);
    if (!challenge) throw NetworkError(where + " is not a gridbcast lane: " + why);
    if (!tls) {
      // Nothing past the Hello goes to a peer that has not proven the secret.
      if (!mac_equal(challenge->mac,
                     accept_mac(creds.secret, hello.client_nonce, challenge->server_nonce, hello)))
        throw NetworkError(where + " failed to prove the job secret (wrong job secret?)");
      // The Proof, and this end's data may follow at once: the acceptor
      // takes nothing past the Proof until it has checked it.
      const auto proof_bytes =
          encode(Proof{hello_mac(creds.secret, challenge->server_nonce, hello)});
      auto [pec, pn] = co_await before(deadline, stream.write(asio::buffer(proof_bytes)),
                                       "timed out sending the proof to " + where);
      if (pec) throw NetworkError("handshake with " + where + " failed: " + pec.message());
      set_stream_options(stream.socket());
      co_return stream;
    }
    // TLS: the gate's proof in plaintext, so the acceptor spends nothing on
    // TLS for connections that cannot prove the secret; the certificate
    // proves the acceptor, and its Accept inside TLS the secret.
    const auto gate_proof =
        encode(Proof{tls_gate_mac(creds.secret, challenge->server_nonce, gate)});
    auto [gwec, gwn] = co_await before(deadline, stream.write(asio::buffer(gate_proof)),
                                       "timed out sending the TLS gate's proof to " + where);
    if (gwec) throw NetworkError("handshake with " + where + " failed: " + gwec.message());
    const auto tec = co_await before(deadline, stream.start_tls(*tls->ctx, false),
                                     "timed out in the TLS handshake with " + where);
    if (tec) throw NetworkError("TLS with " + where + " failed: " + stream.tls_failure(tec));
    if (const std::string bad = stream.check_peer_name(tls->node); !bad.empty())
      throw NetworkError("TLS with " + where + " failed: " + bad);
    hello.mac = hello_mac(creds.secret, challenge->server_nonce, hello);
    const auto signed_hello = encode(hello);
    std::array<std::uint8_t, kAcceptBytes> accept_bytes{};
    auto [wec, wn] = co_await before(deadline, stream.write(asio::buffer(signed_hello)),
                                     "timed out sending hello to " + where);
    if (!wec) {
      auto [aec, an] = co_await before(deadline, stream.read(asio::buffer(accept_bytes)),
                                       "timed out waiting for " + where + " to accept");
      wec = aec;
    }
    if (wec && wec != asio::error::eof)
      // TLS 1.3 clients finish their handshake before the server has checked
      // their certificate: a rejection arrives as an alert here.
      throw NetworkError("TLS with " + where + " failed: " + stream.tls_failure(wec));
    if (wec)
      throw NetworkError(where + " refused the handshake (" + wec.message() +
                         "): wrong job secret or job id, or this node's certificate does "
                         "not name node " +
                         tls->ctx->node() + "?");
    auto accept = decode_accept(accept_bytes, why);
    if (!accept || !mac_equal(accept->mac, accept_mac(creds.secret, hello.client_nonce,
                                                      challenge->server_nonce, hello)))
      throw NetworkError(where + " failed to prove the job secret");
    set_stream_options(stream.socket());
    co_return stream;
  }
}

}  // namespace gridbcast::lanes
