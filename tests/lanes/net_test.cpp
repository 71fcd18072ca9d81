// The handshake over real loopback sockets.
#include "lanes/net.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sstream>

#include <cstring>
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
  explicit Server(Credentials c) {
    listener = Listener::open(io.get_executor(), "127.0.0.1", 0, std::move(c));
    listener->start(
        [this](Stream st, const Hello& h) {
          accepted.push_back(h);
          streams.push_back(std::move(st));
        },
        [this](const std::string& why) { rejected.push_back(why); });
  }
};

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
  EXPECT_THROW(run(s.io, connect(s, creds(7, "guess"), 3)), NetworkError);
  while (s.rejected.empty()) s.io.run_one();
  EXPECT_NE(s.rejected[0].find("wrong job secret"), std::string::npos) << s.rejected[0];
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

// A recorded handshake replayed on a new connection is refused: the client's
// MAC covers the server's nonce, which is fresh for every connection. The
// recording is made by a raw client that holds the secret, over a real socket,
// and is accepted there first, so the bytes replayed are known to be valid.
TEST(Handshake, ARecordedHelloReplayedOnANewConnectionIsRejected) {
  Server s(creds(7, "secret"));
  const auto secret = creds(7, "secret").secret;
  std::array<std::uint8_t, kHelloBytes> recorded{};
  // One raw connection: reads the Challenge, sends `recorded` (made now for
  // this connection's nonce when `record`), and says whether an Accept came back.
  auto raw_client = [&](bool record) {
    asio::io_context io;
    tcp::socket raw(io);
    raw.connect(make_endpoint("127.0.0.1", s.listener->port()));
    std::array<std::uint8_t, kChallengeBytes> challenge_bytes{};
    asio::read(raw, asio::buffer(challenge_bytes));
    std::string why;
    const auto challenge = decode_challenge(challenge_bytes, why);
    if (!challenge) ADD_FAILURE() << "challenge: " << why;
    if (record && challenge) {
      Hello h;
      h.job_id = 7;
      h.rank = 2;
      h.client_nonce.fill(0x5a);
      h.mac = hello_mac(secret, challenge->server_nonce, h);
      recorded = encode(h);
    }
    asio::write(raw, asio::buffer(recorded));
    std::array<std::uint8_t, kAcceptBytes> accept{};
    asio::error_code ec;
    asio::read(raw, asio::buffer(accept), ec);
    return !ec && decode_accept(accept, why).has_value();
  };
  auto guard = asio::make_work_guard(s.io);
  std::thread server([&] { s.io.run(); });
  const bool original = raw_client(true);
  const bool replay = raw_client(false);
  // The server has judged both once the replay's connection is closed; let it
  // finish its callbacks, then stop.
  guard.reset();
  s.io.stop();
  server.join();
  EXPECT_TRUE(original) << "the recorded handshake was not valid to begin with";
  EXPECT_FALSE(replay) << "a replayed Hello was accepted";
  ASSERT_EQ(s.accepted.size(), 1u);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_NE(s.rejected[0].find("wrong job secret"), std::string::npos) << s.rejected[0];
  EXPECT_EQ(s.listener->rejected(), 1u);
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
