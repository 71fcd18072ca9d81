// Message memory for the launcher's ranks: an anonymous mapping for generated
// data, or a mapped file (the root's input, or another rank's output), so a
// file of several GiB is received straight into the page cache, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gridbcast::runtime {

class MappedBuffer {
 public:
  static MappedBuffer anonymous(std::uint64_t bytes);  // zeroed, every page resident
  static MappedBuffer read_file(const std::string& path);           // private, copy-on-write
  static MappedBuffer create_file(const std::string& path, std::uint64_t bytes);  // shared
  MappedBuffer() = default;
  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  ~MappedBuffer();

  std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  // Writes a file mapping back (msync); a no-op for anonymous memory.
  void flush();

 private:
  void release();
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  int fd_ = -1;
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
