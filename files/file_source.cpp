#include "files/file_source.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "files/file_io.hpp"

namespace gridbcast::files {
namespace {

constexpr std::uint64_t kMaxIo = 1ull << 30;

FileMeta meta_of(const struct stat& st) {
  FileMeta m;
  m.size = static_cast<std::uint64_t>(st.st_size);
  m.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  m.mtime = FileTime::of(st.st_mtim);
  m.dev = static_cast<std::uint64_t>(st.st_dev);
  m.ino = static_cast<std::uint64_t>(st.st_ino);
  return m;
}

}  // namespace

std::uint64_t pread_full(int fd, const std::string& path, std::byte* data, std::uint64_t bytes,
                         std::uint64_t offset) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        ::pread(fd, data + done, std::min(kMaxIo, bytes - done), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw file_error(path, "cannot read " + std::to_string(bytes) + " bytes at offset " +
                                 std::to_string(offset));
    if (n == 0) break;
    done += static_cast<std::uint64_t>(n);
  }
  return done;
}

void pwrite_full(int fd, const std::string& path, const std::byte* data, std::uint64_t bytes,
                 std::uint64_t offset) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd, data + done, std::min(kMaxIo, bytes - done),
                               static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw file_error(path, "cannot write " + std::to_string(bytes) + " bytes at offset " +
                                 std::to_string(offset));
    if (n == 0) throw file_error(path, "write made no progress", ENOSPC);
    done += static_cast<std::uint64_t>(n);
  }
}

FileMeta stat_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw file_error(path, "cannot stat");
  return meta_of(st);
}

FileSource FileSource::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw file_error(path, "cannot open");
  return adopt(fd, path);
}

FileSource FileSource::adopt(int fd, const std::string& path) {
  FileSource s;
  s.path_ = path;
  s.fd_ = fd;
  struct stat st {};
  if (::fstat(s.fd_, &st) != 0) throw file_error(path, "cannot stat");
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(path + ": not a regular file (a directory, device or pipe)");
  s.meta_ = meta_of(st);
  // Read-ahead doubled for the whole file; the pages stay cached (the root
  // may well send the file again).
  (void)::posix_fadvise(s.fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  return s;
}

FileSource::FileSource(FileSource&& o) noexcept
    : path_(std::move(o.path_)), meta_(o.meta_), fd_(std::exchange(o.fd_, -1)) {}

FileSource& FileSource::operator=(FileSource&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    meta_ = o.meta_;
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read(std::uint64_t offset, std::byte* data, std::uint64_t bytes) const {
  const std::uint64_t got = pread_full(fd_, path_, data, bytes, offset);
  if (got != bytes)
    throw std::runtime_error(path_ + ": changed size during the broadcast (" +
                             std::to_string(offset + got) + " bytes where " +
                             std::to_string(meta_.size) + " were announced)");
}

std::string spool_to_file(int input_fd, const std::string& dir) {
  unsigned char rnd[6];
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
    throw file_error(dir, "getrandom");
  std::string name = "gridbcast-stdin-";
  for (unsigned char c : rnd)
    name += "0123456789abcdef"[c >> 4], name += "0123456789abcdef"[c & 15];
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw file_error(path, "cannot create the spool file");
  std::vector<std::byte> buf(1 << 20);
  std::uint64_t offset = 0;
  try {
    for (;;) {
      const ssize_t n = ::read(input_fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw file_error("standard input", "cannot read");
      if (n == 0) break;
      pwrite_full(fd, path, buf.data(), static_cast<std::uint64_t>(n), offset);
      offset += static_cast<std::uint64_t>(n);
    }
    if (::fsync(fd) != 0) throw file_error(path, "cannot fsync the spool file");
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  ::close(fd);
  return path;
}

}  // namespace gridbcast::files
