// TLS on lanes over real loopback sockets: mutual authentication against the
// grid CA, the certificate bound to the rank a hello claims, TLS 1.3 only, and
// a clear reason on every rejection, with the listener serving on.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <asio/ssl.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "lanes/certs.hpp"
#include "lanes/log.hpp"
#include "lanes/net.hpp"
#include "lanes/tls.hpp"
#include "support/client_hello.hpp"
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

// What a raw client sent of its TLS gate: the gate, and its proof once the
// server's Challenge came (answered).
struct GateSent {
  std::array<std::uint8_t, kTlsGateBytes> gate{};
  std::array<std::uint8_t, kAcceptBytes> proof{};
  bool answered = false;
};

// A raw client's TLS gate on `raw`, as a rank sends it before its TLS
// handshake: the gate (job `c.job_id`), the server's Challenge, then the
// proof with `c`'s secret; or the bytes of `replay` instead of both.
asio::awaitable<GateSent> send_gate(tcp::socket& raw, const Credentials& c,
                                    const GateSent* replay = nullptr) {
  GateSent out;
  TlsGate g;
  g.job_id = c.job_id;
  g.gate_nonce = random_nonce();
  out.gate = replay ? replay->gate : encode(g);
  co_await asio::async_write(raw, asio::buffer(out.gate), asio::use_awaitable);
  std::array<std::uint8_t, kChallengeBytes> bytes{};
  auto [ec, n] = co_await asio::async_read(raw, asio::buffer(bytes), kAsTuple);
  if (ec) co_return out;  // refused at the gate
  out.answered = true;
  std::string why;
  const auto challenge = decode_challenge(bytes, why);
  EXPECT_TRUE(challenge) << why;
  out.proof =
      replay
          ? replay->proof
          : encode(Proof{tls_gate_mac(c.secret, challenge ? challenge->server_nonce : Nonce{}, g)});
  co_await asio::async_write(raw, asio::buffer(out.proof), asio::use_awaitable);
  co_return out;
}

using testing::client_hello;

// Certificates whose names a hostile peer chose to drive a terminal: a CN and
// a first DNS name that end a log line and forge the next, a second DNS name
// of 3000 bytes of escape sequences, and (self-signed) an issuer that sets the
// terminal's title.
//   signed/  the grid CA's ca.crt; alpha and beta hold one such certificate,
//            signed by the grid CA (so only the names are wrong)
//   self/    the grid CA's ca.crt; alpha holds one, self-signed under the forged issuer
const char* const kForgedName = "\n[forged] rank 0: ok\x1b[2J";
const char* const kForgedIssuer = "\r\x1b]0;owned\x07 grid CA";

struct ForgedPki {
  TempDir tmp;
  std::filesystem::path signed_by_ca = tmp / "signed", self_signed = tmp / "self";

  template <typename T>
  using Owned = std::unique_ptr<T, void (*)(T*)>;

  static Owned<X509_NAME> name(const char* cn) {
    Owned<X509_NAME> n(X509_NAME_new(), X509_NAME_free);
    EXPECT_EQ(X509_NAME_add_entry_by_txt(n.get(), "CN", MBSTRING_UTF8,
                                         reinterpret_cast<const unsigned char*>(cn), -1, -1, 0),
              1);
    return n;
  }

  static void add_dns(GENERAL_NAMES* names, const std::string& dns) {
    GENERAL_NAME* gn = GENERAL_NAME_new();
    ASN1_IA5STRING* s = ASN1_IA5STRING_new();
    ASSERT_EQ(ASN1_STRING_set(s, dns.data(), static_cast<int>(dns.size())), 1);
    GENERAL_NAME_set0_value(gn, GEN_DNS, s);
    ASSERT_GT(sk_GENERAL_NAME_push(names, gn), 0);
  }

  // A certificate for `key` with the forged names, issued by `issuer` and signed by `signer`.
  static Owned<X509> forged_cert(EVP_PKEY* key, const X509_NAME* issuer, EVP_PKEY* signer) {
    Owned<X509> x(X509_new(), X509_free);
    X509_set_version(x.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x.get()), 4242);
    X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x.get()), 3600);
    EXPECT_EQ(X509_set_subject_name(x.get(), name(kForgedName).get()), 1);
    EXPECT_EQ(X509_set_issuer_name(x.get(), issuer), 1);
    Owned<GENERAL_NAMES> sans(sk_GENERAL_NAME_new_null(), GENERAL_NAMES_free);
    std::string junk;
    for (int i = 0; i < 600; ++i) junk += "\x1b[2J\n";
    add_dns(sans.get(), kForgedName);
    add_dns(sans.get(), junk);
    EXPECT_EQ(X509_add1_ext_i2d(x.get(), NID_subject_alt_name, sans.get(), 0, X509V3_ADD_DEFAULT),
              1);
    EXPECT_EQ(X509_set_pubkey(x.get(), key), 1);
    EXPECT_GT(X509_sign(x.get(), signer, EVP_sha256()), 0);
    return x;
  }

  static void write(const std::filesystem::path& dir, const std::string& node, EVP_PKEY* key,
                    X509* cert) {
    FILE* k = std::fopen(node_key_path(dir, node).c_str(), "w");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr), 1);
    std::fclose(k);
    std::filesystem::permissions(node_key_path(dir, node), std::filesystem::perms::owner_read |
                                                               std::filesystem::perms::owner_write);
    FILE* c = std::fopen(node_cert_path(dir, node).c_str(), "w");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(PEM_write_X509(c, cert), 1);
    std::fclose(c);
  }

  ForgedPki() {
    const auto& good = pki().good;
    FILE* f = std::fopen((good / kCaKeyFile).c_str(), "r");
    Owned<EVP_PKEY> ca_key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr), EVP_PKEY_free);
    std::fclose(f);
    f = std::fopen((good / kCaCertFile).c_str(), "r");
    Owned<X509> ca(PEM_read_X509(f, nullptr, nullptr, nullptr), X509_free);
    std::fclose(f);
    Owned<EVP_PKEY> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
    if (!ca_key || !ca || !key) throw std::runtime_error("cannot set up the forged certificates");
    for (const auto& dir : {signed_by_ca, self_signed}) {
      std::filesystem::create_directories(dir);
      std::filesystem::copy_file(good / kCaCertFile, dir / kCaCertFile);
    }
    auto by_ca = forged_cert(key.get(), X509_get_subject_name(ca.get()), ca_key.get());
    for (const char* n : {"alpha", "beta"}) write(signed_by_ca, n, key.get(), by_ca.get());
    auto self = forged_cert(key.get(), name(kForgedIssuer).get(), key.get());
    write(self_signed, "alpha", key.get(), self.get());
  }
};

ForgedPki& forged() {
  static ForgedPki f;
  return f;
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
    co_await send_gate(tls.next_layer(), creds());
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
    co_await send_gate(raw, creds());
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

// A stranger's connection that starts TLS got a full TLS 1.3 first flight
// (ECDHE and a signature) on the rank's one I/O thread before anything was
// authenticated. Now the job secret comes first (the TLS gate): a real
// ClientHello from a stranger is refused at its first four bytes, before any
// TLS work, and the listener holds nothing for it.
TEST(Tls, AStrangersClientHelloIsRefusedBeforeAnyTlsWork) {
  Server s(pki().good);
  const std::vector<std::uint8_t> hello = client_hello();
  ASSERT_EQ(hello[0], kTlsHandshakeRecord);
  constexpr int kStrangers = 40;
  std::vector<tcp::socket> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    strangers.emplace_back(s.io);
    strangers.back().connect(s.endpoint());
    asio::write(strangers.back(), asio::buffer(hello));
  }
  s.settle(kStrangers);
  ASSERT_EQ(s.rejected.size(), static_cast<size_t>(kStrangers));
  for (const auto& why : s.rejected)
    EXPECT_TRUE(contains(why, "started TLS without first proving the job secret")) << why;
  EXPECT_EQ(s.listener->unauthenticated(), 0u);
  EXPECT_EQ(try_connect(s, 1, &pki().good, "alpha"), "");
}

// A gate made without the secret, for another job, or recorded on one
// connection and replayed on the next is refused before TLS starts.
TEST(Tls, AGateWithoutTheSecretOrReplayedIsRefusedBeforeTls) {
  Server s(pki().good);
  std::list<tcp::socket> open;  // kept open: a closed one is refused for closing
  // The gate's, then its proof's: refused at the first for another job.
  const auto gate = [&](const Credentials& c, const GateSent* replay = nullptr) {
    tcp::socket& raw = open.emplace_back(s.io);
    return run(s.io, [&]() -> asio::awaitable<GateSent> {
      co_await raw.async_connect(s.endpoint(), asio::use_awaitable);
      co_return co_await send_gate(raw, c, replay);
    }());
  };
  EXPECT_TRUE(gate({7, std::vector<std::uint8_t>(32, 0x11)}).answered);
  EXPECT_FALSE(gate({8, creds().secret}).answered);
  const GateSent recorded = gate(creds());
  EXPECT_TRUE(recorded.answered);
  s.settle(2);
  EXPECT_TRUE(gate(creds(), &recorded).answered);
  s.settle(3);
  // The recorded gate was good on its own connection: that one waits in TLS
  // (no ClientHello comes) and is not counted as a stranger.
  ASSERT_GE(s.rejected.size(), 3u);
  EXPECT_TRUE(contains(s.rejected[0], "wrong job secret in its TLS gate")) << s.rejected[0];
  EXPECT_TRUE(contains(s.rejected[1], "TLS gate belongs to another job")) << s.rejected[1];
  EXPECT_TRUE(contains(s.rejected[2], "wrong job secret in its TLS gate")) << s.rejected[2];
  EXPECT_EQ(try_connect(s, 1, &pki().good, "alpha"), "");
}

// A peer's certificate names used to reach the rejection log and the error
// messages as they were: a newline forged a log line, an escape sequence
// cleared the operator's screen. Now every name is escaped (log::printable)
// and bounded, on both sides and before and after the Hello.
TEST(Tls, CertificateNamesInRejectionsAreEscapedAndBounded) {
  const auto check = [](const std::string& m) {
    for (const char c : m) {
      const auto u = static_cast<unsigned char>(c);
      EXPECT_TRUE(u >= 0x20 && u <= 0x7e)
          << "byte " << static_cast<unsigned>(u) << " in " << log::printable(m, 4096);
    }
    EXPECT_TRUE(contains(m, "\\x0a[forged] rank 0: ok\\x1b[2J")) << m;
    EXPECT_LT(m.size(), 1500u) << m;  // the 3000-byte name is cut
  };
  {  // A grid CA certificate for other names, claiming rank 1 (alpha): refused after the Hello.
    Server s(pki().good);
    EXPECT_FALSE(try_connect(s, 1, &forged().signed_by_ca, "alpha").empty());
    s.settle(1);
    ASSERT_EQ(s.rejected.size(), 1u);
    check(s.rejected[0]);
    EXPECT_TRUE(contains(s.rejected[0], ", expected alpha")) << s.rejected[0];
  }
  {  // The same certificate on the server: refused by the client.
    Server s(forged().signed_by_ca, "beta");
    const std::string client = try_connect(s, 1, &pki().good, "alpha");
    check(client);
    EXPECT_TRUE(contains(client, ", expected beta")) << client;
  }
  {  // Self-signed: refused in the handshake, where the names and issuer are all there is.
    Server s(pki().good);
    EXPECT_FALSE(try_connect(s, 1, &forged().self_signed, "alpha").empty());
    s.settle(1);
    ASSERT_EQ(s.rejected.size(), 1u);
    check(s.rejected[0]);
    EXPECT_TRUE(contains(s.rejected[0], "unknown CA")) << s.rejected[0];
    EXPECT_TRUE(contains(s.rejected[0], "issued by \\x0d\\x1b]0;owned\\x07 grid CA"))
        << s.rejected[0];
  }
}

}  // namespace
}  // namespace gridbcast::lanes
