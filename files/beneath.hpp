// Paths below a directory held open, reached one component at a time, never
// through a symbolic link (O_NOFOLLOW at every component, so a link anywhere
// below is refused or, where the caller says so, replaced, but never
// followed; not even one this job placed itself in an earlier run):
//
//   OUTPUT/            opened once, by the rules for the path above it
//     sub/             openat(OUTPUT fd, "sub", O_DIRECTORY | O_NOFOLLOW)
//       deeper/        openat(sub fd, "deeper", O_DIRECTORY | O_NOFOLLOW)
//         f.bin        openat(deeper fd, "f.bin", ... | O_NOFOLLOW)
//
// The root reads a tree's files this way from the source directory, and every
// other rank writes its copy this way below its output root. Modes and times
// are then set through the descriptors (fchmod, futimens), never by path.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

namespace gridbcast::files {

// A file descriptor closed when it goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  explicit operator bool() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// Throws naming `rel` unless it is '/'-separated names: not empty, no empty,
// "." or ".." component, not absolute.
void check_beneath(const std::string& rel);

// Opens `rel` below the directory `dir` (whose path, for messages, is
// `dir_path`) with `flags` (O_NOFOLLOW and O_CLOEXEC are added), every
// directory on the way opened with O_NOFOLLOW: a symbolic link at any
// component fails, naming the path. `rel` empty: `dir` itself again.
UniqueFd open_beneath(int dir, const std::string& dir_path, const std::string& rel, int flags);

// The directory `rel` below `dir` for writing a copy into: missing components
// are made with `mode`; a symbolic link where a directory belongs is removed
// and a directory made in its place (the link alone, never what it points
// to: the copy mirrors a source that now has a directory there); anything
// else that is not a directory, or a directory owned by another user (not us
// or root), is refused naming the path.
UniqueFd make_beneath(int dir, const std::string& dir_path, const std::string& rel, mode_t mode);

}  // namespace gridbcast::files
