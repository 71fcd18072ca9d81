// Message memory for the launcher's ranks: an anonymous mapping, every page
// touched up front. Files are streamed in windows by job/file_broadcast.hpp,
// never mapped (a mapped file truncated under a rank is SIGBUS or zeros).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gridbcast::runtime {

class MappedBuffer {
 public:
  static MappedBuffer anonymous(std::uint64_t bytes);  // zeroed, every page resident
  MappedBuffer() = default;
  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  ~MappedBuffer();

  std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  void release();
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// Deterministic pseudo-random content for generated broadcasts.
void fill_pattern(std::byte* data, std::uint64_t bytes, std::uint64_t seed);
// True when data[0, bytes) holds what fill_pattern(data, filled, seed) writes
// there (bytes <= filled), checked as the pattern is generated: no second copy.
bool matches_pattern(const std::byte* data, std::uint64_t bytes, std::uint64_t filled,
                     std::uint64_t seed);
// Lower-case hex SHA-256 (OpenSSL).
std::string sha256_hex(const std::byte* data, std::uint64_t bytes);

}  // namespace gridbcast::runtime
