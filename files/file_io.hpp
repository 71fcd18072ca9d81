// Small helpers of the file modules: whole reads and writes at an offset
// (pread/pwrite loop on short transfers and EINTR, at most 1 GiB per call),
// errors that name the path and the errno text, and file times as the kernel
// keeps them.
#pragma once

#include <time.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace gridbcast::files {

// "PATH: WHAT: ERRNO TEXT", e.g. "/data/x.bin: cannot write 4194304 bytes at
// offset 0: No space left on device".
inline std::runtime_error file_error(const std::string& path, const std::string& what,
                                     int err = errno) {
  return std::runtime_error(path + ": " + what + ": " + std::strerror(err));
}

// A modification time as the kernel keeps it: whole seconds since the epoch
// (negative before 1970) and nanoseconds in [0, 1e9). Never one count of
// nanoseconds: that overflows in 2262, and splitting a negative count with /
// and % gives the negative tv_nsec futimens refuses (1969-12-31 23:59:59.5).
struct FileTime {
  std::int64_t sec = 0;
  std::uint32_t nsec = 0;
  bool operator==(const FileTime&) const = default;

  static FileTime of(const struct timespec& t) {
    return {static_cast<std::int64_t>(t.tv_sec), static_cast<std::uint32_t>(t.tv_nsec)};
  }
  struct timespec timespec() const {
    struct timespec t {};
    t.tv_sec = static_cast<time_t>(sec);
    t.tv_nsec = static_cast<long>(nsec);
    return t;
  }
  // Nanoseconds since the epoch, saturated at the ends of int64 (for reports).
  std::int64_t ns_saturated() const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    if (sec > (kMax - nsec) / 1'000'000'000) return kMax;
    if (sec < kMin / 1'000'000'000) return kMin;
    return sec * 1'000'000'000 + nsec;
  }
};

// Reads exactly `bytes` at `offset`; returns the bytes read, less only at the
// end of the file.
std::uint64_t pread_full(int fd, const std::string& path, std::byte* data, std::uint64_t bytes,
                         std::uint64_t offset);
void pwrite_full(int fd, const std::string& path, const std::byte* data, std::uint64_t bytes,
                 std::uint64_t offset);

}  // namespace gridbcast::files
