// Small helpers of the file modules: whole reads and writes at an offset
// (pread/pwrite loop on short transfers and EINTR, at most 1 GiB per call) and
// errors that name the path and the errno text.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gridbcast::job {

// "PATH: WHAT: ERRNO TEXT", e.g. "/data/x.bin: cannot write 4194304 bytes at
// offset 0: No space left on device".
inline std::runtime_error file_error(const std::string& path, const std::string& what,
                                     int err = errno) {
  return std::runtime_error(path + ": " + what + ": " + std::strerror(err));
}

// Reads exactly `bytes` at `offset`; returns the bytes read, less only at the
// end of the file.
std::uint64_t pread_full(int fd, const std::string& path, std::byte* data, std::uint64_t bytes,
                         std::uint64_t offset);
void pwrite_full(int fd, const std::string& path, const std::byte* data, std::uint64_t bytes,
                 std::uint64_t offset);

}  // namespace gridbcast::job
