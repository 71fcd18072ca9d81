// The handshake over real loopback sockets.
#include "lanes/net.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sstream>

#include <atomic>
#include <cstring>
#include <list>
#include <optional>
#include <thread>

namespace gridbcast::lanes {
namespace {

Credentials creds(std::uint64_t job, const char* s) {
  return {job, std::vector<std::uint8_t>(s, s + std::strlen(s))};
}

template <typename T>
T run(asio::io_context& io, asio::awaitable<T> op) {
  std::optional<T> out;
  std::exception_ptr err;
  asio::co_spawn(io, std::move(op), [&](std::exception_ptr e, T v) {
    err = e;
    if (!e) out.emplace(std::move(v));
  });
  io.restart();
  while (!out && !err) io.run_one();
  if (err) std::rethrow_exception(err);
  return std::move(*out);
}

struct Server {
  asio::io_context io;
  std::shared_ptr<Listener> listener;
  std::vector<Hello> accepted;
  std::vector<Stream> streams;  // the accepted connections, kept open
  std::vector<std::string> rejected;
  // For tests that run `io` on a thread of its own: read while it runs.
  std::atomic<size_t> accepted_count{0}, rejected_count{0};
  explicit Server(Credentials c, size_t cap = kMaxUnauthenticated) {
    listener = Listener::open(io.get_executor(), "127.0.0.1", 0, std::move(c));
    listener->limit_unauthenticated(cap);
    listener->start(
        [this](Stream st, const Hello& h) {
          accepted.push_back(h);
          streams.push_back(std::move(st));
          ++accepted_count;
        },
        [this](const std::string& why) {
          rejected.push_back(why);
          ++rejected_count;
        });
  }
};

// Runs a Server's io on a thread until it goes (also when an assertion
// returns early); its vectors may be read once it has gone.
class ServerThread {
 public:
  explicit ServerThread(Server& s)
      : s_(s), guard_(asio::make_work_guard(s.io)), thread_([this] { s_.io.run(); }) {}
  ~ServerThread() {
    guard_.reset();
    s_.io.stop();
    thread_.join();
  }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

 private:
  Server& s_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Waits (at most 5 s) until `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 500 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

asio::awaitable<int> connect(Server& s, Credentials c, std::uint32_t rank) {
  Hello h;
  h.rank = rank;
  h.lane_from = 1;
  h.lane_to = 0;
  auto sock =
      co_await connect_authenticated("127.0.0.1", make_endpoint("127.0.0.1", s.listener->port()), h,
                                     c, Clock::now() + std::chrono::seconds(5), "test peer");
  co_return sock.is_open() ? 1 : 0;
}

TEST(Handshake, RightSecretIsAccepted) {
  Server s(creds(7, "secret"));
  EXPECT_EQ(run(s.io, connect(s, creds(7, "secret"), 3)), 1);
  while (s.accepted.empty()) s.io.run_one();
  EXPECT_EQ(s.accepted[0].rank, 3u);
  EXPECT_EQ(s.accepted[0].lane_from, 1);
  EXPECT_TRUE(s.rejected.empty());
}

TEST(Handshake, WrongSecretIsRejectedOnBothSides) {
  Server s(creds(7, "secret"));
  // The server proves the secret first: a client with another refuses it and
  // goes, without proving anything itself.
  try {
    run(s.io, connect(s, creds(7, "guess"), 3));
    FAIL() << "connected with the wrong secret";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("failed to prove the job secret"), std::string::npos)
        << e.what();
  }
  while (s.rejected.empty()) s.io.run_one();
  EXPECT_NE(s.rejected[0].find("before proving the job secret"), std::string::npos)
      << s.rejected[0];
  EXPECT_TRUE(s.accepted.empty());
  EXPECT_EQ(s.listener->rejected(), 1u);
}

TEST(Handshake, AnotherJobIsRejected) {
  Server s(creds(7, "secret"));
  EXPECT_THROW(run(s.io, connect(s, creds(8, "secret"), 3)), NetworkError);
  while (s.rejected.empty()) s.io.run_one();
  EXPECT_NE(s.rejected[0].find("another job"), std::string::npos) << s.rejected[0];
}

TEST(Handshake, GarbageIsRejectedAndTheListenerKeepsServing) {
  Server s(creds(7, "secret"));
  {
    tcp::socket raw(s.io);
    raw.connect(make_endpoint("127.0.0.1", s.listener->port()));
    std::string junk(kHelloBytes, 'x');
    asio::write(raw, asio::buffer(junk));
    while (s.rejected.empty()) s.io.run_one();
  }
  EXPECT_NE(s.rejected[0].find("magic"), std::string::npos) << s.rejected[0];
  EXPECT_EQ(run(s.io, connect(s, creds(7, "secret"), 1)), 1);
}

// A raw client on its own socket, for the attacks below: sends `hello` (its
// MAC zero, as a connector's first message), reads the Challenge, and sends
// what `proof_for` makes of it (nothing when it returns nullopt). Returns the
// Challenge, or nullopt when the server closed instead.
struct RawClient {
  asio::io_context io;
  tcp::socket raw{io};
  std::optional<Challenge> open(std::uint16_t port, const Hello& hello) {
    raw.connect(make_endpoint("127.0.0.1", port));
    Hello h = hello;
    h.mac = Mac{};
    asio::write(raw, asio::buffer(encode(h)));
    std::array<std::uint8_t, kChallengeBytes> bytes{};
    asio::error_code ec;
    asio::read(raw, asio::buffer(bytes), ec);
    if (ec) return std::nullopt;
    std::string why;
    auto c = decode_challenge(bytes, why);
    if (!c) ADD_FAILURE() << "challenge: " << why;
    return c;
  }
  void prove(const Mac& mac) { asio::write(raw, asio::buffer(encode(Proof{mac}))); }
  // Whether the server closed the connection (as it does when it refuses).
  bool closed_by_server() {
    std::array<std::uint8_t, 1> b{};
    asio::error_code ec;
    asio::read(raw, asio::buffer(b), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }
};

Hello raw_hello(std::uint32_t rank) {
  Hello h;
  h.job_id = 7;
  h.rank = rank;
  h.client_nonce.fill(0x5a);
  return h;
}

// A recorded handshake replayed on a new connection is refused: the client's
// proof covers the server's nonce, which is fresh for every connection. The
// recording is made by a raw client that holds the secret, over a real socket,
// and is accepted there first, so the bytes replayed are known to be valid.
TEST(Handshake, ARecordedProofReplayedOnANewConnectionIsRejected) {
  Server s(creds(7, "secret"));
  const auto secret = creds(7, "secret").secret;
  bool replay_closed = false;
  {
    ServerThread running(s);
    RawClient original;  // held open: the server keeps an accepted connection
    const auto challenge = original.open(s.listener->port(), raw_hello(2));
    ASSERT_TRUE(challenge);
    const Mac recorded = hello_mac(secret, challenge->server_nonce, raw_hello(2));
    original.prove(recorded);
    ASSERT_TRUE(eventually([&] { return s.accepted_count == 1; }))
        << "the recorded handshake was not valid to begin with";
    RawClient c;
    ASSERT_TRUE(c.open(s.listener->port(), raw_hello(2)));
    c.prove(recorded);
    replay_closed = c.closed_by_server();
    ASSERT_TRUE(eventually([&] { return s.rejected_count == 1; }));
  }
  EXPECT_TRUE(replay_closed) << "a replayed proof was accepted";
  ASSERT_EQ(s.accepted.size(), 1u);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_NE(s.rejected[0].find("wrong job secret"), std::string::npos) << s.rejected[0];
  EXPECT_EQ(s.listener->rejected(), 1u);
}

// The server proves the secret to anyone who sends a Hello (it speaks
// second, but first to prove). That proof is no client's (the two MACs have
// different labels): a stranger who sends it back, or reflects it (the proof
// a second connection got for a Hello whose nonce is the first connection's
// challenge), is refused, and nothing it sent after is taken.
TEST(Handshake, TheServersOwnProofIsNoClientsProof) {
  Server s(creds(7, "secret"));
  bool echoed_closed = false, crossed_closed = false;
  {
    ServerThread running(s);
    {
      RawClient c;
      const auto challenge = c.open(s.listener->port(), raw_hello(3));
      ASSERT_TRUE(challenge);
      c.prove(challenge->mac);
      const std::string data(4096, 'd');  // what it would have the server take
      asio::error_code ec;
      asio::write(c.raw, asio::buffer(data), ec);
      echoed_closed = c.closed_by_server();
    }
    RawClient first, second;
    const auto c1 = first.open(s.listener->port(), raw_hello(3));
    ASSERT_TRUE(c1);
    Hello h = raw_hello(3);
    h.client_nonce = c1->server_nonce;
    const auto c2 = second.open(s.listener->port(), h);
    ASSERT_TRUE(c2);
    first.prove(c2->mac);
    crossed_closed = first.closed_by_server();
    ASSERT_TRUE(eventually([&] { return s.rejected_count >= 2; }));
  }
  EXPECT_TRUE(echoed_closed) << "the server's own proof was taken as a client's";
  EXPECT_TRUE(crossed_closed) << "a proof from another connection was taken";
  EXPECT_TRUE(s.accepted.empty());
  ASSERT_GE(s.rejected.size(), 2u);
  EXPECT_NE(s.rejected[0].find("wrong job secret"), std::string::npos) << s.rejected[0];
  EXPECT_NE(s.rejected[1].find("wrong job secret"), std::string::npos) << s.rejected[1];
}

// A connector whose Challenge came may send its data right behind its
// proof, so the cap on unauthenticated connections drops silent strangers
// before it: answered, then 40 silent connections against a cap of 4, its
// proof is still taken. (Dropping the oldest first, as before, dropped it.)
TEST(Handshake, AnAnsweredConnectionOutlastsAFloodOfSilentStrangers) {
  constexpr int kStrangers = 40;
  Server s(creds(7, "secret"), 4);
  const auto secret = creds(7, "secret").secret;
  bool closed = true;
  // Closed only after the server stopped, so none of them ends on its own.
  asio::io_context io;
  std::list<tcp::socket> strangers;
  {
    ServerThread running(s);
    RawClient c;
    const auto challenge = c.open(s.listener->port(), raw_hello(5));
    ASSERT_TRUE(challenge);
    for (int i = 0; i < kStrangers; ++i)
      strangers.emplace_back(io).connect(make_endpoint("127.0.0.1", s.listener->port()));
    // Every stranger past the cap dropped one: all but the last few.
    ASSERT_TRUE(eventually([&] { return s.rejected_count >= kStrangers - 3; }))
        << s.rejected_count << " dropped";
    c.prove(hello_mac(secret, challenge->server_nonce, raw_hello(5)));
    EXPECT_TRUE(eventually([&] { return s.accepted_count == 1; }));
    c.raw.non_blocking(true);
    std::array<std::uint8_t, 1> b{};
    asio::error_code ec;
    c.raw.read_some(asio::buffer(b), ec);
    closed = ec != asio::error::would_block;
  }
  EXPECT_FALSE(closed) << "the answered connection was dropped";
  ASSERT_EQ(s.accepted.size(), 1u);
  EXPECT_EQ(s.accepted[0].rank, 5u);
  for (const auto& why : s.rejected) EXPECT_NE(why.find("dropped"), std::string::npos) << why;
}

// A fake server on a raw socket: reads the connector's Hello, answers with a
// Challenge from `make`, then reads whatever else comes until the connector
// closes. Returns what came after the Hello.
struct FakeServer {
  asio::io_context io;
  tcp::acceptor acceptor{io, make_endpoint("127.0.0.1", 0)};
  std::thread thread;
  std::string after_hello;
  std::optional<Hello> hello;
  void start(std::function<Challenge(const Hello&)> make, bool read_on = true) {
    thread = std::thread([this, make, read_on] {
      asio::error_code ec;
      tcp::socket s(io);
      acceptor.accept(s, ec);
      std::array<std::uint8_t, kHelloBytes> bytes{};
      if (!ec) asio::read(s, asio::buffer(bytes), ec);
      if (ec) return;
      std::string why;
      hello = decode_hello(bytes, why);
      if (!hello) return;
      asio::write(s, asio::buffer(encode(make(*hello))), ec);
      if (ec) return;
      if (!read_on) {
        // Says nothing more, and reads only the proof.
        std::array<std::uint8_t, kAcceptBytes> proof{};
        const size_t n = asio::read(s, asio::buffer(proof), ec);
        after_hello.assign(proof.begin(), proof.begin() + static_cast<std::ptrdiff_t>(n));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return;
      }
      std::array<char, 4096> buf{};
      for (;;) {
        const size_t n = s.read_some(asio::buffer(buf), ec);
        if (ec) break;
        after_hello.append(buf.data(), n);
      }
    });
  }
  std::uint16_t port() const { return acceptor.local_endpoint().port(); }
  ~FakeServer() {
    if (thread.joinable()) thread.join();
  }
};

// A server that cannot prove the secret gets the connector's Hello and
// nothing else: no proof, no data.
TEST(Handshake, AServerThatCannotProveTheSecretGetsNothingPastTheHello) {
  FakeServer fake;
  // Its proof is right in every way but the secret.
  fake.start([](const Hello& h) {
    const Nonce nonce = random_nonce();
    return Challenge{nonce, accept_mac(creds(7, "guess").secret, h.client_nonce, nonce, h)};
  });
  asio::io_context io;
  try {
    run(io, [&]() -> asio::awaitable<bool> {
      auto stream = co_await connect_authenticated(
          "127.0.0.1", make_endpoint("127.0.0.1", fake.port()), raw_hello(1), creds(7, "secret"),
          Clock::now() + std::chrono::seconds(5), "rank 4 (n4)");
      co_return stream.is_open();
    }());
    FAIL() << "connected to a server without the secret";
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 4 (n4)"), std::string::npos) << what;
    EXPECT_NE(what.find("failed to prove the job secret"), std::string::npos) << what;
  }
  fake.thread.join();
  ASSERT_TRUE(fake.hello);
  EXPECT_EQ(fake.hello->mac, Mac{}) << "the Hello carried a proof before the server's";
  EXPECT_EQ(fake.after_hello.size(), 0u) << "the connector sent past its Hello";
}

// The connector's data follows its proof at once: a server that proves the
// secret and then says nothing more still gets a connection, one round trip
// after TCP's, and the proof it reads is valid for its nonce.
TEST(Handshake, TheConnectorIsDoneOneRoundTripAfterTcps) {
  const auto secret = creds(7, "secret").secret;
  const Nonce nonce = random_nonce();
  FakeServer fake;
  fake.start(
      [&](const Hello& h) {
        return Challenge{nonce, accept_mac(secret, h.client_nonce, nonce, h)};
      },
      false);
  asio::io_context io;
  const bool open = run(io, [&]() -> asio::awaitable<bool> {
    auto stream = co_await connect_authenticated(
        "127.0.0.1", make_endpoint("127.0.0.1", fake.port()), raw_hello(1), creds(7, "secret"),
        Clock::now() + std::chrono::seconds(5), "n4");
    co_return stream.is_open();
  }());
  EXPECT_TRUE(open);
  fake.thread.join();
  ASSERT_TRUE(fake.hello);
  ASSERT_EQ(fake.after_hello.size(), kAcceptBytes);
  std::string why;
  const auto proof = decode_accept(
      std::span(reinterpret_cast<const std::uint8_t*>(fake.after_hello.data()), kAcceptBytes), why);
  ASSERT_TRUE(proof) << why;
  EXPECT_TRUE(mac_equal(proof->mac, hello_mac(secret, nonce, *fake.hello)));
}

TEST(Connect, RefusedUntilTheDeadlineNamesThePeer) {
  asio::io_context io;
  // Find a free port, then close it so nothing listens there.
  std::uint16_t port;
  {
    tcp::acceptor a(io, make_endpoint("127.0.0.1", 0));
    port = a.local_endpoint().port();
  }
  auto op = [&]() -> asio::awaitable<int> {
    co_await connect_authenticated("127.0.0.1", make_endpoint("127.0.0.1", port), Hello{},
                                   creds(1, "s"), Clock::now() + std::chrono::milliseconds(300),
                                   "rank 9 (n9)");
    co_return 0;
  };
  try {
    run(io, op());
    FAIL() << "connected to nothing";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 9 (n9)"), std::string::npos) << e.what();
  }
}

std::string congestion_of(tcp::socket& s) {
  char name[32] = {};
  socklen_t len = sizeof name - 1;
  if (::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, ::strnlen(name, len));
}

// The connecting side (the sender) picks its TCP congestion control; reno is
// built into every Linux kernel and allowed to every user.
TEST(Connect, TheCongestionControlAskedForIsSetOnTheSocket) {
  Server s(creds(7, "secret"));
  auto op = [&](std::string congestion) -> asio::awaitable<std::string> {
    auto stream = co_await connect_authenticated(
        "127.0.0.1", make_endpoint("127.0.0.1", s.listener->port()), Hello{}, creds(7, "secret"),
        Clock::now() + std::chrono::seconds(5), "rank 2 (n2)", nullptr, congestion);
    co_return congestion_of(stream.socket());
  };
  EXPECT_EQ(run(s.io, op("reno")), "reno");
  try {
    run(s.io, op("nosuchcc"));
    FAIL() << "connected with a congestion control the kernel does not have";
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"nosuchcc\""), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2 (n2)"), std::string::npos) << what;
    EXPECT_NE(what.find("available: "), std::string::npos) << what;
  }
}

int int_option(tcp::socket& s, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  ::getsockopt(s.native_handle(), level, name, &v, &len);
  return v;
}

// Both ends of an authenticated connection notice a dead host or a cut link
// in bounded time, even while nothing is written.
TEST(Connect, BothEndsCarryKeepAliveAndAUserTimeout) {
  Server s(creds(7, "secret"));
  auto op = [&]() -> asio::awaitable<std::vector<int>> {
    auto stream = co_await connect_authenticated(
        "127.0.0.1", make_endpoint("127.0.0.1", s.listener->port()), Hello{}, creds(7, "secret"),
        Clock::now() + std::chrono::seconds(5), "rank 2 (n2)");
    auto& sock = stream.socket();
    co_return std::vector<int>{int_option(sock, SOL_SOCKET, SO_KEEPALIVE),
                               int_option(sock, IPPROTO_TCP, TCP_KEEPIDLE),
                               int_option(sock, IPPROTO_TCP, TCP_KEEPCNT),
                               int_option(sock, IPPROTO_TCP, TCP_USER_TIMEOUT)};
  };
  EXPECT_EQ(run(s.io, op()), (std::vector<int>{1, 10, 3, 30'000}));
  // The connector is done once its proof is sent; the server, once it read it.
  for (int i = 0; i < 100 && s.streams.empty(); ++i)
    s.io.run_one_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(s.streams.empty());
  auto& server_side = s.streams.front().socket();
  EXPECT_EQ(int_option(server_side, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(int_option(server_side, IPPROTO_TCP, TCP_USER_TIMEOUT), 30'000);
}

// Out of descriptors, the accept loop waits (10 ms doubling to 1 s) instead of
// spinning on the connection the kernel keeps queued, says so, and serves again
// once descriptors free up. Run in a child process whose descriptor limit the
// test lowers, so the test process keeps its own.
TEST(Listener, OutOfDescriptorsItBacksOffSaysSoAndRecovers) {
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(to_parent[0]);
    asio::io_context io;
    Server s(creds(7, "secret"));
    int troubles = 0;
    std::string first;
    s.listener->start(
        [&](Stream st, const Hello& h) {
          s.accepted.push_back(h);
          s.streams.push_back(std::move(st));
        },
        [](const std::string&) {},
        [&](const std::string& what, bool) {
          if (troubles++ == 0) first = what;
        });
    // Room for two more descriptors only.
    int open_fds = 0;
    for (int fd = 0; fd < 1024; ++fd) open_fds += ::fcntl(fd, F_GETFD) != -1 ? 1 : 0;
    const rlimit lim{static_cast<rlim_t>(open_fds + 2), static_cast<rlim_t>(open_fds + 2)};
    ::setrlimit(RLIMIT_NOFILE, &lim);
    const std::string port = std::to_string(s.listener->port()) + "\n";
    [[maybe_unused]] auto w = ::write(to_parent[1], port.data(), port.size());
    s.io.run_for(std::chrono::seconds(4));
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    const std::string report = std::to_string(troubles) + " " + std::to_string(s.accepted.size()) +
                               " " + std::to_string(cpu) + " " + first + "\n";
    w = ::write(to_parent[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(to_parent[1]);
  std::string got;
  const auto read_line = [&] {
    std::string line;
    char c;
    while (::read(to_parent[0], &c, 1) == 1 && c != '\n') line += c;
    return line;
  };
  const auto port = static_cast<std::uint16_t>(std::stoi(read_line()));
  // Silent connections: the first take the child's last descriptors, the rest
  // wait in the kernel's queue while accept fails with EMFILE.
  asio::io_context io;
  std::vector<tcp::socket> silent;
  for (int i = 0; i < 6; ++i) {
    silent.emplace_back(io);
    silent.back().connect(make_endpoint("127.0.0.1", port));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  silent.clear();  // their handshakes end, the descriptors come back
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A real peer gets through once the listener accepts again.
  EXPECT_EQ(run(io,
                [&]() -> asio::awaitable<int> {
                  auto st = co_await connect_authenticated(
                      "127.0.0.1", make_endpoint("127.0.0.1", port), Hello{}, creds(7, "secret"),
                      Clock::now() + std::chrono::seconds(3), "the child's listener");
                  co_return st.socket().is_open() ? 1 : 0;
                }()),
            1);
  std::istringstream report(read_line());
  int troubles = 0, accepted = 0;
  double cpu = 0;
  report >> troubles >> accepted >> cpu;
  std::string first;
  std::getline(report, first);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(to_parent[0]);
  EXPECT_GE(troubles, 1);
  EXPECT_NE(first.find("out of file descriptors"), std::string::npos) << first;
  EXPECT_EQ(accepted, 1);
  // A spinning accept loop burns a core for the 1.5 s of exhaustion.
  EXPECT_LT(cpu, 0.5) << "the child used " << cpu << " CPU s in 4 s";
}

}  // namespace
}  // namespace gridbcast::lanes
