#include "lanes/stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio/ssl/error.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lanes/log.hpp"
#include "lanes/net.hpp"
#include "lanes/tls_impl.hpp"

namespace gridbcast::lanes {
namespace {

// A certificate's names for an error message. They come from a peer nobody
// has authenticated yet: each is escaped (log::printable), and the list stops
// near log::kPrintableMax however many names the certificate carries.
std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "no name";
  std::string s;
  size_t shown = 0;
  for (; shown < names.size() && s.size() < log::kPrintableMax; ++shown)
    s += (s.empty() ? "" : ", ") + log::printable(names[shown]);
  if (shown < names.size()) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

// OpenSSL's verification error in the words an operator acts on.
std::string verify_reason(int err) {
  switch (err) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "certificate has expired";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "certificate is not yet valid";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return std::string("unknown CA (") + X509_verify_cert_error_string(err) +
             "): not signed by this grid's CA";
    default:
      return X509_verify_cert_error_string(err);
  }
}

// Escaped as join_names does: the issuer name is the peer's to choose too.
std::string issuer_cn(X509* cert) {
  char buf[256] = {0};
  const int n =
      X509_NAME_get_text_by_NID(X509_get_issuer_name(cert), NID_commonName, buf, sizeof buf);
  if (n < 0) return "?";
  return log::printable(std::string_view(buf, static_cast<size_t>(n)));
}

}  // namespace

std::vector<std::string> certificate_names(X509* cert) {
  std::vector<std::string> names;
  if (cert == nullptr) return names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, i);
      if (gn->type != GEN_DNS) continue;
      const auto* data = ASN1_STRING_get0_data(gn->d.dNSName);
      names.emplace_back(reinterpret_cast<const char*>(data),
                         static_cast<size_t>(ASN1_STRING_length(gn->d.dNSName)));
    }
    GENERAL_NAMES_free(sans);
  }
  char cn[256] = {0};
  const int n =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  // With its length: a CN may hold a NUL, and must match only as a whole.
  const std::string common_name(cn, n > 0 ? static_cast<size_t>(n) : 0);
  if (n > 0 && std::find(names.begin(), names.end(), common_name) == names.end())
    names.push_back(common_name);
  return names;
}

namespace {

// Where the verify callback finds the session of an SSL object.
int session_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Records why OpenSSL refused a certificate; never turns a failure into success.
int remember_verify_failure(int preverified, X509_STORE_CTX* store) {
  if (preverified) return 1;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* session = ssl ? static_cast<TlsSession*>(SSL_get_ex_data(ssl, session_index())) : nullptr;
  if (session != nullptr && session->verify_failure.empty()) {
    X509* cert = X509_STORE_CTX_get_current_cert(store);
    session->verify_failure = verify_reason(X509_STORE_CTX_get_error(store)) +
                              " (certificate for " + join_names(certificate_names(cert)) +
                              ", issued by " + (cert ? issuer_cn(cert) : "?") + ")";
  }
  return 0;
}

// The error OpenSSL queued, as an error code in Asio's SSL category (its
// message is OpenSSL's reason, e.g. "tlsv1 alert unknown ca").
asio::error_code ssl_error(int ssl_status) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e != 0) return {static_cast<int>(e), asio::error::get_ssl_category()};
  if (ssl_status == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  return asio::error::connection_aborted;
}

constexpr std::size_t kTlsBatch = 256 * 1024;
// Until the peer is authenticated (and for small reads such as the Hello), the
// input buffer holds one full TLS record (16 KiB of plaintext and its
// overhead): a stranger's ClientHello must not cost a rank 256 KiB.
constexpr std::size_t kTlsRecordBuffer = 16 * 1024 + 2048;

// The BIO between OpenSSL and the session's buffers: reads take from `in`
// (asking for a retry when it is empty), writes append to `out`.
int bio_write(BIO* b, const char* data, size_t len, size_t* written) {
  auto* t = static_cast<TlsSession*>(BIO_get_data(b));
  t->out.insert(t->out.end(), data, data + len);
  *written = len;
  return 1;
}

int bio_read(BIO* b, char* data, size_t len, size_t* read) {
  auto* t = static_cast<TlsSession*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  if (t->in_pos == t->in_len) {
    BIO_set_retry_read(b);
    *read = 0;
    return 0;
  }
  const size_t n = std::min(len, t->in_len - t->in_pos);
  std::memcpy(data, t->in.data() + t->in_pos, n);
  t->in_pos += n;
  *read = n;
  return 1;
}

long bio_ctrl(BIO* b, int cmd, long, void*) {
  auto* t = static_cast<TlsSession*>(BIO_get_data(b));
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // the session sends `out` itself
    case BIO_CTRL_PENDING:
      return static_cast<long>(t->in_len - t->in_pos);
    case BIO_CTRL_WPENDING:
      return static_cast<long>(t->out.size());
    default:
      return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

const BIO_METHOD* session_bio_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "gridbcast session");
    if (m == nullptr || BIO_meth_set_write_ex(m, bio_write) != 1 ||
        BIO_meth_set_read_ex(m, bio_read) != 1 || BIO_meth_set_ctrl(m, bio_ctrl) != 1 ||
        BIO_meth_set_create(m, bio_create) != 1)
      throw NetworkError("cannot set up OpenSSL's I/O for TLS");
    return m;
  }();
  return method;
}

}  // namespace

TlsSession::TlsSession(asio::ip::tcp::socket s, SSL_CTX* ctx, bool server)
    : socket(std::move(s)), ssl(SSL_new(ctx)) {
  if (ssl == nullptr) throw NetworkError("cannot create a TLS session");
  BIO* bio = BIO_new(session_bio_method());
  if (bio == nullptr) {
    SSL_free(ssl);
    throw NetworkError("cannot create a TLS session's I/O");
  }
  BIO_set_data(bio, this);
  SSL_set_bio(ssl, bio, bio);  // one BIO both ways; ssl owns it
  SSL_set_ex_data(ssl, session_index(), this);
  SSL_set_verify(ssl, SSL_CTX_get_verify_mode(ctx), remember_verify_failure);
  if (server)
    SSL_set_accept_state(ssl);
  else
    SSL_set_connect_state(ssl);
  in.resize(kTlsRecordBuffer);
}

TlsSession::~TlsSession() {
  SSL_free(ssl);
}

namespace {

// Sends the records (and alerts) OpenSSL has written.
asio::awaitable<asio::error_code> flush(TlsSession& t) {
  if (t.out.empty()) co_return asio::error_code{};
  auto [ec, written] = co_await asio::async_write(t.socket, asio::buffer(t.out), kAsTuple);
  t.out.clear();
  co_return ec;
}

// Reads what the peer sent for OpenSSL; the end of the TCP stream is eof.
asio::awaitable<asio::error_code> fill(TlsSession& t) {
  if (t.in_pos > 0) {  // keep what TLS has not taken yet at the front
    std::memmove(t.in.data(), t.in.data() + t.in_pos, t.in_len - t.in_pos);
    t.in_len -= t.in_pos;
    t.in_pos = 0;
  }
  auto [ec, n] = co_await t.socket.async_read_some(
      asio::buffer(t.in.data() + t.in_len, t.in.size() - t.in_len), kAsTuple);
  if (ec) co_return ec;
  t.in_len += n;
  co_return asio::error_code{};
}

}  // namespace

Stream::Stream(asio::ip::tcp::socket socket)
    : plain_(std::make_unique<asio::ip::tcp::socket>(std::move(socket))) {}
Stream::~Stream() = default;
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;

asio::awaitable<asio::error_code> Stream::start_tls(TlsContext& ctx, bool server) {
  if (tls_) co_return asio::error::already_connected;
  tls_ = std::make_unique<TlsSession>(std::move(*plain_), ctx.impl().ctx, server);
  plain_.reset();
  TlsSession& t = *tls_;
  for (;;) {
    ERR_clear_error();
    const int r = SSL_do_handshake(t.ssl);
    const int status = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t.ssl, r);
    const asio::error_code failure = status == SSL_ERROR_NONE || status == SSL_ERROR_WANT_READ
                                         ? asio::error_code{}
                                         : ssl_error(status);
    // Flush first, also on failure: it carries the alert that tells the peer why.
    const asio::error_code sent = co_await flush(t);
    if (failure) co_return failure;
    if (sent) co_return sent;
    if (status == SSL_ERROR_NONE) co_return asio::error_code{};
    if (const auto ec = co_await fill(t)) co_return ec;
  }
}

std::string Stream::tls_failure(const asio::error_code& ec) const {
  if (tls_ && !tls_->verify_failure.empty()) return tls_->verify_failure;
  if (ec == asio::error::eof || ec == asio::error::connection_reset)
    return "the peer closed the connection during the TLS handshake";
  if (ec.category() == asio::error::get_ssl_category()) {
    const std::string m = ec.message();
    if (m.find("unknown ca") != std::string::npos)
      return "the peer rejected this node's certificate: unknown CA (" + m + ")";
    if (m.find("certificate expired") != std::string::npos)
      return "the peer rejected this node's certificate: certificate has expired (" + m + ")";
    if (m.find("protocol") != std::string::npos || m.find("version") != std::string::npos)
      return "TLS 1.3 is required (" + m + ")";
    if (m.find("alert") != std::string::npos) return "the peer sent a TLS alert: " + m;
    return m;
  }
  return ec.message();
}

std::string Stream::check_peer_name(const std::string& node) const {
  if (!tls_) return "the connection does not use TLS";
  X509* cert = SSL_get0_peer_certificate(tls_->ssl);
  if (cert == nullptr) return "the peer presented no certificate";
  const auto names = certificate_names(cert);
  for (const auto& n : names)
    if (n == node) return {};
  return "certificate is for node " +
         (names.empty() ? std::string("(none)") : log::printable(names.front())) + ", expected " +
         node;
}

asio::awaitable<Stream::IoResult> Stream::read(asio::mutable_buffer buffer) {
  if (!tls_) co_return co_await asio::async_read(*plain_, buffer, kAsTuple);
  auto* p = static_cast<std::uint8_t*>(buffer.data());
  std::size_t got = 0;
  while (got < buffer.size()) {
    const auto [ec, n] = co_await read_some(asio::buffer(p + got, buffer.size() - got));
    got += n;
    if (ec) co_return IoResult{ec, got};
  }
  co_return IoResult{asio::error_code{}, got};
}

asio::awaitable<Stream::IoResult> Stream::read_some(asio::mutable_buffer buffer) {
  if (buffer.size() == 0) co_return IoResult{asio::error_code{}, 0};
  if (!tls_) co_return co_await plain_->async_read_some(buffer, kAsTuple);
  TlsSession& t = *tls_;
  // Large reads (segments, after the Hello was checked) get the batch buffer.
  if (buffer.size() > t.in.size() && t.in.size() < kTlsBatch) t.in.resize(kTlsBatch);
  for (;;) {
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_read_ex(t.ssl, buffer.data(), buffer.size(), &n);
    if (r == 1) co_return IoResult{asio::error_code{}, n};
    const int status = SSL_get_error(t.ssl, r);
    if (status != SSL_ERROR_WANT_READ) co_return IoResult{ssl_error(status), 0};
    // A peer that closes without close_notify (every rank on failure) reads
    // as the end of file, as on plain TCP.
    if (const auto ec = co_await fill(t)) co_return IoResult{ec, 0};
  }
}

asio::awaitable<Stream::IoResult> Stream::write(std::span<const asio::const_buffer> buffers) {
  if (!tls_) co_return co_await asio::async_write(*plain_, buffers, kAsTuple);
  TlsSession& t = *tls_;
  // Encrypt up to kTlsBatch bytes (small pieces such as a frame header join
  // the next payload), then send the records with one write.
  std::size_t done = 0;
  std::size_t batched = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto* p = static_cast<const std::uint8_t*>(buffers[i].data());
    std::size_t left = buffers[i].size();
    while (left > 0) {
      const std::size_t take = std::min(left, kTlsBatch - batched);
      std::size_t n = 0;
      ERR_clear_error();
      const int r = SSL_write_ex(t.ssl, p, take, &n);
      if (r != 1) co_return IoResult{ssl_error(SSL_get_error(t.ssl, r)), done};
      p += n;
      left -= n;
      batched += n;
      if (batched == kTlsBatch) {
        if (const auto ec = co_await flush(t)) co_return IoResult{ec, done};
        done += batched;
        batched = 0;
      }
    }
  }
  if (const auto ec = co_await flush(t)) co_return IoResult{ec, done};
  co_return IoResult{asio::error_code{}, done + batched};
}

asio::awaitable<Stream::IoResult> Stream::write(asio::const_buffer buffer) {
  co_return co_await write(std::span<const asio::const_buffer>(&buffer, 1));
}

asio::ip::tcp::socket& Stream::socket() {
  return tls_ ? tls_->socket : *plain_;
}

void Stream::set_pace(double bytes_per_second) {
  if (!(bytes_per_second >= 0))
    throw std::invalid_argument("Stream::set_pace: not a rate: " +
                                std::to_string(bytes_per_second));
  if (bytes_per_second == pace_) return;
  // The kernel takes 64 bits since Linux 4.20 (32 before); ~0 means no cap.
  std::uint64_t rate = ~std::uint64_t{0};
  if (bytes_per_second > 0)
    rate = static_cast<std::uint64_t>(std::clamp(bytes_per_second, 1.0, 0x1p62));
  if (::setsockopt(socket().native_handle(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) !=
      0)
    throw NetworkError(std::string("setsockopt SO_MAX_PACING_RATE: ") + std::strerror(errno));
  pace_ = bytes_per_second;
}

asio::ip::tcp::socket Stream::release_plain() && {
  if (tls_) throw std::logic_error("Stream::release_plain() on a TLS connection");
  return std::move(*plain_);
}

bool Stream::is_open() {
  return socket().is_open();
}

void Stream::close() {
  asio::error_code ignored;
  socket().close(ignored);
}

}  // namespace gridbcast::lanes
