#include "lanes/tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fstream>

#include "lanes/certs.hpp"
#include "lanes/net.hpp"
#include "lanes/tls_impl.hpp"

namespace gridbcast::lanes {
namespace {

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

void require_file(const std::filesystem::path& file, const std::string& node,
                  const std::string& how) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(file, ec)) {
    std::ifstream in(file);
    if (in) return;
    throw NetworkError("TLS for node " + node + ": cannot read " + file.string() +
                       " (permissions?)");
  }
  throw NetworkError("TLS for node " + node + " needs " + file.string() +
                     ", which does not exist; create it with " + how);
}

}  // namespace

std::filesystem::path node_cert_path(const std::filesystem::path& dir, const std::string& node) {
  return dir / (node + ".crt");
}

std::filesystem::path node_key_path(const std::filesystem::path& dir, const std::string& node) {
  return dir / (node + ".key");
}

TlsContext::Impl::Impl() : ctx(SSL_CTX_new(TLS_method())) {
  if (ctx == nullptr) throw NetworkError("cannot create an SSL context: " + openssl_error());
}
TlsContext::Impl::~Impl() {
  SSL_CTX_free(ctx);
}

TlsContext::~TlsContext() = default;

std::shared_ptr<TlsContext> TlsContext::load(const std::filesystem::path& dir,
                                             const std::string& node) {
  const std::string d = dir.string();
  const auto ca = dir / kCaCertFile;
  const auto crt = node_cert_path(dir, node);
  const auto key = node_key_path(dir, node);
  require_file(ca, node, "'gridbcast certs init " + d + "'");
  const std::string issue = "'gridbcast certs issue TOPOLOGY --dir " + d + "'";
  require_file(crt, node, issue);
  require_file(key, node, issue);
  try {
    check_key_file(key);
  } catch (const std::exception& e) {
    throw NetworkError("TLS for node " + node + ": " + e.what());
  }

  std::shared_ptr<TlsContext> t(new TlsContext());
  t->dir_ = dir;
  t->node_ = node;
  t->impl_ = std::make_unique<Impl>();
  SSL_CTX* ctx = t->impl_->ctx;
  // TLS 1.3 only: no downgrade, no renegotiation, forward secrecy always.
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1)
    throw NetworkError("TLS for node " + node + ": cannot require TLS 1.3: " + openssl_error());
  // Connections are long-lived and never resumed: no session tickets, which a
  // client that only writes would otherwise leave unread.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  // AES-GCM first: with AES-NI it is the fastest AEAD here (ChaCha20 stays for
  // peers without it).
  SSL_CTX_set_ciphersuites(ctx,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  // Only the grid CA is trusted, not the system's store.
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1)
    throw NetworkError("TLS for node " + node + ": " + ca.string() +
                       " is not a CA certificate: " + openssl_error());
  if (SSL_CTX_use_certificate_chain_file(ctx, crt.c_str()) != 1)
    throw NetworkError("TLS for node " + node + ": " + crt.string() +
                       " is not a certificate: " + openssl_error());
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
    throw NetworkError("TLS for node " + node + ": " + key.string() +
                       " is not a private key: " + openssl_error());
  if (SSL_CTX_check_private_key(ctx) != 1)
    throw NetworkError("TLS for node " + node + ": " + key.string() + " does not belong to " +
                       crt.string() + ": " + openssl_error());
  // Both sides must present a certificate the CA signed.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return t;
}

}  // namespace gridbcast::lanes
