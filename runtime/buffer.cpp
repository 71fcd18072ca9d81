#include "runtime/buffer.hpp"

#include <openssl/evp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace gridbcast::runtime {
namespace {

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

std::byte* map(std::uint64_t bytes, int prot, int flags, int fd, const std::string& what) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, prot, flags, fd, 0);
  if (p == MAP_FAILED) throw sys_error("cannot map " + what);
  return static_cast<std::byte*>(p);
}

}  // namespace

MappedBuffer MappedBuffer::anonymous(std::uint64_t bytes) {
  MappedBuffer b;
  b.data_ = map(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                std::to_string(bytes) + " bytes of memory");
  b.size_ = bytes;
  if (b.data_) {
    // Huge pages where the kernel allows them, and every page touched now:
    // faulting in gigabytes inside the kernel's receive path, under the socket
    // lock, made a first broadcast of 1 GiB 5x slower than the next.
    ::madvise(b.data_, bytes, MADV_HUGEPAGE);
    std::memset(b.data_, 0, bytes);
  }
  return b;
}

MappedBuffer::MappedBuffer(MappedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedBuffer::~MappedBuffer() {
  release();
}

void MappedBuffer::release() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void fill_pattern(std::byte* data, std::uint64_t bytes, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  std::uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data + i, &x, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
}

bool matches_pattern(const std::byte* data, std::uint64_t bytes, std::uint64_t filled,
                     std::uint64_t seed) {
  // The same generator as fill_pattern: whole words while they fit in `filled`,
  // then the last word's bytes again for the tail.
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  std::uint64_t i = 0;
  for (; i + 8 <= filled && i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::byte word[8];
    std::memcpy(word, &x, 8);
    if (std::memcmp(data + i, word, std::min<std::uint64_t>(8, bytes - i)) != 0) return false;
  }
  for (; i < bytes; ++i)
    if (data[i] != static_cast<std::byte>(x >> (8 * (i % 8)))) return false;
  return true;
}

std::string sha256_hex(const std::byte* data, std::uint64_t bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  // Feed at most 1 GiB per call.
  for (std::uint64_t off = 0; ok && off < bytes; off += (1u << 30))
    ok = EVP_DigestUpdate(ctx, data + off, std::min<std::uint64_t>(1u << 30, bytes - off)) == 1;
  ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("SHA-256 failed in OpenSSL");
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < len; ++i) {
    s += kDigits[md[i] >> 4];
    s += kDigits[md[i] & 15];
  }
  return s;
}

}  // namespace gridbcast::runtime
