#include "files/chunk_digest.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <stdexcept>

namespace gridbcast::files {

Digest sha256(const std::byte* data, std::uint64_t bytes) {
  Digest out{};
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  for (std::uint64_t off = 0; ok && off < bytes; off += (1u << 30))
    ok = EVP_DigestUpdate(ctx, data + off, std::min<std::uint64_t>(1u << 30, bytes - off)) == 1;
  ok = ok && EVP_DigestFinal_ex(ctx, reinterpret_cast<unsigned char*>(out.data()), &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok || len != out.size()) throw std::runtime_error("SHA-256 failed in OpenSSL");
  return out;
}

std::string to_hex(const Digest& d) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (std::byte b : d) {
    s += kDigits[std::to_integer<unsigned>(b) >> 4];
    s += kDigits[std::to_integer<unsigned>(b) & 15];
  }
  return s;
}

Digest root_digest(const std::vector<Digest>& chunks) {
  return sha256(reinterpret_cast<const std::byte*>(chunks.data()), chunks.size() * sizeof(Digest));
}

}  // namespace gridbcast::files
