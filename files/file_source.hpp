// The root's side of a file broadcast: the source opened once, read with
// pread (never mapped: a file truncated under us is a short read and an error,
// not zeros or SIGBUS), with the kernel told the access is sequential.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "files/file_io.hpp"

namespace gridbcast::files {

// What identifies the source and what every copy takes from it.
struct FileMeta {
  std::uint64_t size = 0;
  std::uint32_t mode = 0644;  // permission bits (st_mode & 07777)
  FileTime mtime;
  std::uint64_t dev = 0;  // st_dev and st_ino on the root's host
  std::uint64_t ino = 0;
};

// stat() of a path as FileMeta (follows symlinks, as opening it does); throws
// naming the path and the errno text.
FileMeta stat_file(const std::string& path);

class FileSource {
 public:
  // Opens a regular file read-only (following a symbolic link the user named;
  // O_NONBLOCK, so a pipe swapped in is refused by fstat rather than waited
  // on); throws naming the path and the errno text.
  static FileSource open(const std::string& path);
  // The same for a descriptor opened already (a tree's file, reached below
  // its directory without following links: job/beneath.hpp); takes it over.
  static FileSource adopt(int fd, const std::string& path);
  FileSource() = default;
  FileSource(FileSource&& other) noexcept;
  FileSource& operator=(FileSource&& other) noexcept;
  ~FileSource();

  const FileMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  // Exactly `bytes` at `offset`, or throws ("changed size": the file shrank).
  void read(std::uint64_t offset, std::byte* data, std::uint64_t bytes) const;

 private:
  std::string path_;
  FileMeta meta_;
  int fd_ = -1;
};

// `--file -`: standard input copied to a new file in `dir` (mode 0600, a name
// of its own, opened O_EXCL), so the broadcast knows the size before it starts.
// Returns the path; the caller removes it when the job ends.
std::string spool_to_file(int input_fd, const std::string& dir);

}  // namespace gridbcast::files
