// Internal to lanes: the OpenSSL objects behind TlsContext and a Stream's TLS.
// Kept out of lanes/net.hpp so that runtime's sources do not compile them.
#pragma once

#include <openssl/ssl.h>

#include <asio.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lanes/tls.hpp"

namespace gridbcast::lanes {

struct TlsContext::Impl {
  SSL_CTX* ctx = nullptr;
  Impl();
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

// TLS over a TCP socket through a BIO of our own: OpenSSL encrypts into `out`
// and decrypts from `in`, and the socket moves ciphertext in large batches (up
// to 256 KiB per system call, rather than one 16 KiB record at a time), with
// no copy in between.
struct TlsSession {
  asio::ip::tcp::socket socket;
  SSL* ssl = nullptr;
  // Ciphertext from the socket; [in_pos, in_len) is not yet taken by OpenSSL.
  std::vector<std::uint8_t> in;
  std::size_t in_pos = 0;
  std::size_t in_len = 0;
  std::vector<std::uint8_t> out;  // records OpenSSL wrote, not yet sent
  // Why OpenSSL refused the peer's certificate, from the verify callback: the
  // handshake error itself only says "certificate verify failed".
  std::string verify_failure;

  TlsSession(asio::ip::tcp::socket s, SSL_CTX* ctx, bool server);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;
};

// Names a certificate carries: its DNS subject alternative names, then its
// subject CN.
std::vector<std::string> certificate_names(X509* cert);

}  // namespace gridbcast::lanes
