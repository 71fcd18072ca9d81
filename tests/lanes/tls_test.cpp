// TLS on lanes over real loopback sockets: mutual authentication against the
// grid CA, the certificate bound to the rank a hello claims, TLS 1.3 only, and
// a clear reason on every rejection, with the listener serving on.
#include <gtest/gtest.h>

#include <asio/ssl.hpp>
#include <cstring>
#include <optional>

#include "lanes/certs.hpp"
#include "lanes/net.hpp"
#include "lanes/tls.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::lanes {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

template <typename T>
T run(asio::io_context& io, asio::awaitable<T> op) {
  std::optional<T> out;
  std::exception_ptr err;
  bool done = false;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(op)); },
      [&](std::exception_ptr e) {
        err = e;
        done = true;
      });
  io.restart();
  const auto give_up = Clock::now() + 20s;
  while (!done && Clock::now() < give_up) io.run_one_for(100ms);
  if (err) std::rethrow_exception(err);
  if (!out) throw std::runtime_error("test operation did not finish in 20 s");
  return std::move(*out);
}

void copy_ca(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::create_directories(to);
  std::filesystem::copy_file(from / kCaCertFile, to / kCaCertFile);
  std::filesystem::copy_file(from / kCaKeyFile, to / kCaKeyFile);
}

// Certificate directories:
//   good/     the grid CA; nodes alpha (the clients' rank 1), beta (the server), gamma
//   rogue/    another CA and its own alpha and beta
//   mixed/    trusts the grid CA but holds rogue's alpha: a wrong-CA client
//   expired/  the grid CA's alpha and beta, both expired yesterday
struct Pki {
  TempDir tmp;
  std::filesystem::path good = tmp / "good", rogue = tmp / "rogue", mixed = tmp / "mixed",
                        expired = tmp / "expired";
  Pki() {
    create_grid_ca(good, "grid CA");
    for (const char* n : {"alpha", "beta", "gamma"}) issue_node_cert(good, n);
    create_grid_ca(rogue, "rogue CA");
    for (const char* n : {"alpha", "beta"}) issue_node_cert(rogue, n);
    std::filesystem::create_directories(mixed);
    std::filesystem::copy_file(good / kCaCertFile, mixed / kCaCertFile);
    std::filesystem::copy_file(rogue / "alpha.crt", mixed / "alpha.crt");
    std::filesystem::copy_file(rogue / "alpha.key", mixed / "alpha.key");
    copy_ca(good, expired);
    CertOptions past;
    past.not_before = -std::chrono::hours(48);
    past.not_after = -std::chrono::hours(24);
    for (const char* n : {"alpha", "beta"}) issue_node_cert(expired, n, past);
  }
};

Pki& pki() {
  static Pki p;  // made once: key generation is the slow part
  return p;
}

Credentials creds() {
  return {7, std::vector<std::uint8_t>(32, 0x5a)};
}

// A TLS server named `node`: rank 1 must come over TLS as alpha, rank 2 as
// gamma, rank 3 over plain TCP.
struct Server {
  asio::io_context io;
  std::shared_ptr<Listener> listener;
  std::vector<Stream> accepted;
  std::vector<std::string> rejected;
  explicit Server(const std::filesystem::path& dir, const std::string& node = "beta",
                  bool tls = true) {
    listener = Listener::open(io.get_executor(), "127.0.0.1", 0, creds());
    if (tls)
      listener->use_tls(TlsContext::load(dir, node), [](const Hello& h) {
        if (h.rank == 1) return PeerPolicy{.tls = true, .node = "alpha"};
        if (h.rank == 2) return PeerPolicy{.tls = true, .node = "gamma"};
        return PeerPolicy{.tls = false, .node = "delta"};
      });
    listener->start([this](Stream s, const Hello&) { accepted.push_back(std::move(s)); },
                    [this](const std::string& why) { rejected.push_back(why); });
  }
  tcp::endpoint endpoint() const { return make_endpoint("127.0.0.1", listener->port()); }
  // Runs the loop until the listener has judged `n` connections in all.
  void settle(size_t n) {
    const auto give_up = Clock::now() + 20s;
    while (accepted.size() + rejected.size() < n && Clock::now() < give_up) io.run_one_for(50ms);
  }
};

// Connects as `rank` with `node`'s certificate from `dir`, expecting the server
// to be `server_node`; returns the error message, or "" on success.
std::string try_connect(Server& s, std::uint32_t rank, const std::filesystem::path* dir,
                        const std::string& node, const std::string& server_node = "beta",
                        std::optional<Stream>* out = nullptr) {
  std::shared_ptr<TlsContext> ctx = dir ? TlsContext::load(*dir, node) : nullptr;
  TlsPeer peer{ctx.get(), server_node};
  Hello h;
  h.rank = rank;
  try {
    auto stream =
        run(s.io, connect_authenticated("127.0.0.1", s.endpoint(), h, creds(), Clock::now() + 10s,
                                        "rank 9 (beta)", ctx ? &peer : nullptr));
    if (out) out->emplace(std::move(stream));
    return "";
  } catch (const NetworkError& e) {
    return e.what();
  }
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Tls, MutualTlsCarriesBytesExactly) {
  Server s(pki().good);
  std::optional<Stream> client;
  ASSERT_EQ(try_connect(s, 1, &pki().good, "alpha", "beta", &client), "");
  s.settle(1);
  ASSERT_EQ(s.accepted.size(), 1u) << (s.rejected.empty() ? "" : s.rejected[0]);
  EXPECT_TRUE(client->tls());
  EXPECT_TRUE(s.accepted[0].tls());
  std::vector<std::uint8_t> sent(3 * 1024 * 1024 + 17), got(sent.size());
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<std::uint8_t>(i * 131 + (i >> 9));
  const std::array<asio::const_buffer, 2> bufs{asio::buffer(sent.data(), 5),
                                               asio::buffer(sent.data() + 5, sent.size() - 5)};
  asio::co_spawn(
      s.io, [&]() -> asio::awaitable<void> { co_await client->write(bufs); }, asio::detached);
  auto [ec, n] = run(s.io, s.accepted[0].read(asio::buffer(got)));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(n, got.size());
  EXPECT_EQ(sent, got);
  // A peer that goes away reads as the end of file, as on plain TCP.
  client->close();
  std::array<std::uint8_t, 1> more{};
  auto [eec, en] = run(s.io, s.accepted[0].read(asio::buffer(more)));
  EXPECT_EQ(eec, asio::error::eof) << eec.message();
}

TEST(Tls, ClientCertificateFromAnotherCaIsRejected) {
  Server s(pki().good);
  const std::string client = try_connect(s, 1, &pki().mixed, "alpha");
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "unknown CA")) << s.rejected[0];
  EXPECT_TRUE(contains(s.rejected[0], "certificate for alpha")) << s.rejected[0];
  EXPECT_TRUE(contains(s.rejected[0], "127.0.0.1")) << s.rejected[0];
  EXPECT_TRUE(contains(client, "rank 9 (beta)")) << client;
  EXPECT_TRUE(contains(client, "unknown CA")) << client;
  // The listener goes on serving honest peers.
  EXPECT_EQ(try_connect(s, 1, &pki().good, "alpha"), "");
  s.settle(2);
  EXPECT_EQ(s.accepted.size(), 1u);
}

TEST(Tls, ServerCertificateFromAnotherCaIsRejectedByTheClient) {
  Server s(pki().rogue);
  const std::string client = try_connect(s, 1, &pki().good, "alpha");
  EXPECT_TRUE(contains(client, "rank 9 (beta)")) << client;
  EXPECT_TRUE(contains(client, "unknown CA")) << client;
  s.settle(1);
  EXPECT_TRUE(s.accepted.empty());
}

TEST(Tls, ExpiredCertificatesAreRejectedOnBothSides) {
  {
    Server s(pki().good);
    const std::string client = try_connect(s, 1, &pki().expired, "alpha");
    s.settle(1);
    ASSERT_EQ(s.rejected.size(), 1u);
    EXPECT_TRUE(contains(s.rejected[0], "certificate has expired")) << s.rejected[0];
    EXPECT_TRUE(contains(client, "expired")) << client;
  }
  {
    Server s(pki().expired);
    const std::string client = try_connect(s, 1, &pki().good, "alpha");
    EXPECT_TRUE(contains(client, "rank 9 (beta)")) << client;
    EXPECT_TRUE(contains(client, "certificate has expired")) << client;
    s.settle(1);
    EXPECT_TRUE(s.accepted.empty());
  }
}

TEST(Tls, CertificateMustNameTheNodeOfTheClaimedRank) {
  Server s(pki().good);
  // gamma's valid certificate, claiming rank 1 (alpha).
  const std::string client = try_connect(s, 1, &pki().good, "gamma");
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "certificate is for node gamma, expected alpha"))
      << s.rejected[0];
  EXPECT_TRUE(contains(s.rejected[0], "claims rank 1, node alpha")) << s.rejected[0];
  EXPECT_FALSE(client.empty());
  // The same certificate is right for rank 2.
  EXPECT_EQ(try_connect(s, 2, &pki().good, "gamma"), "");
  s.settle(2);
  EXPECT_EQ(s.accepted.size(), 1u);
}

TEST(Tls, ServerCertificateMustNameTheExpectedNode) {
  Server s(pki().good, "gamma");  // a valid certificate, but not beta's
  const std::string client = try_connect(s, 1, &pki().good, "alpha", "beta");
  EXPECT_TRUE(contains(client, "certificate is for node gamma, expected beta")) << client;
  EXPECT_TRUE(contains(client, "rank 9 (beta)")) << client;
}

TEST(Tls, PlainClientOnATlsLinkIsRejected) {
  Server s(pki().good);
  const std::string client = try_connect(s, 1, nullptr, "");
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "did not start TLS")) << s.rejected[0];
  EXPECT_FALSE(client.empty());
  // Rank 3's link is plain: plain TCP is right for it on the same listener.
  EXPECT_EQ(try_connect(s, 3, nullptr, ""), "");
  s.settle(2);
  ASSERT_EQ(s.accepted.size(), 1u);
  EXPECT_FALSE(s.accepted[0].tls());
}

TEST(Tls, TlsWhereNoTlsLinkEndsIsRejected) {
  Server s(pki().good, "beta", /*tls=*/false);
  const std::string client = try_connect(s, 1, &pki().good, "alpha");
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "started TLS, but no tls: true")) << s.rejected[0];
  EXPECT_FALSE(client.empty());
}

TEST(Tls, Tls12OnlyClientIsRejected) {
  Server s(pki().good);
  // A client with a valid certificate that speaks at most TLS 1.2.
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  SSL_CTX_set_max_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.load_verify_file((pki().good / kCaCertFile).string());
  ctx.use_certificate_chain_file((pki().good / "alpha.crt").string());
  ctx.use_private_key_file((pki().good / "alpha.key").string(), asio::ssl::context::pem);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  asio::ssl::stream<tcp::socket> tls(s.io, ctx);
  const auto ec = run(s.io, [&]() -> asio::awaitable<asio::error_code> {
    co_await tls.next_layer().async_connect(s.endpoint(), asio::use_awaitable);
    std::array<std::uint8_t, kChallengeBytes> challenge{};
    co_await asio::async_read(tls.next_layer(), asio::buffer(challenge), asio::use_awaitable);
    auto [hec] = co_await tls.async_handshake(asio::ssl::stream_base::client, kAsTuple);
    co_return hec;
  }());
  EXPECT_TRUE(ec) << "a TLS 1.2 handshake succeeded";
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "TLS 1.3 is required")) << s.rejected[0];
  EXPECT_TRUE(s.accepted.empty());
}

TEST(Tls, AClientThatStallsInTheTlsHandshakeIsDroppedAtTheDeadline) {
  Server s(pki().good);
  tcp::socket raw(s.io);
  const auto start = Clock::now();
  run(s.io, [&]() -> asio::awaitable<int> {
    co_await raw.async_connect(s.endpoint(), asio::use_awaitable);
    std::array<std::uint8_t, kChallengeBytes> challenge{};
    co_await asio::async_read(raw, asio::buffer(challenge), asio::use_awaitable);
    // The start of a TLS record header, then silence.
    const std::array<std::uint8_t, 3> partial{kTlsHandshakeRecord, 0x03, 0x01};
    co_await asio::async_write(raw, asio::buffer(partial), asio::use_awaitable);
    co_return 0;
  }());
  s.settle(1);
  const auto waited = Clock::now() - start;
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "TLS handshake not done within")) << s.rejected[0];
  EXPECT_GE(waited, kHandshakeTimeout - 1s);
  EXPECT_LT(waited, kHandshakeTimeout + 5s);
  // Meanwhile and after, honest peers are served.
  EXPECT_EQ(try_connect(s, 1, &pki().good, "alpha"), "");
}

TEST(Tls, WrongSecretInsideTlsIsStillRejected) {
  Server s(pki().good);
  auto ctx = TlsContext::load(pki().good, "alpha");
  TlsPeer peer{ctx.get(), "beta"};
  Hello h;
  h.rank = 1;
  Credentials wrong{7, std::vector<std::uint8_t>(32, 0x11)};
  EXPECT_THROW(run(s.io, connect_authenticated("127.0.0.1", s.endpoint(), h, wrong,
                                               Clock::now() + 10s, "rank 9 (beta)", &peer)),
               NetworkError);
  s.settle(1);
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_TRUE(contains(s.rejected[0], "wrong job secret")) << s.rejected[0];
}

}  // namespace
}  // namespace gridbcast::lanes
