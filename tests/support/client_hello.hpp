// A real TLS 1.3 ClientHello, as any TLS client sends it first: what a
// stranger floods a tls: true listener with.
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace gridbcast::testing {

inline std::vector<std::uint8_t> client_hello() {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);  // owned by ssl from here
  SSL_set_connect_state(ssl.get());
  SSL_do_handshake(ssl.get());  // writes the ClientHello, then wants the server's answer
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  if (n <= 0 || data == nullptr) throw std::runtime_error("OpenSSL made no ClientHello");
  return std::vector<std::uint8_t>(data, data + n);
}

}  // namespace gridbcast::testing
