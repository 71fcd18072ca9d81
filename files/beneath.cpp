#include "files/beneath.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "files/file_io.hpp"

namespace gridbcast::files {
namespace {

// Calls fn(component) for each component of a checked `rel`.
template <typename Fn>
void each_component(const std::string& rel, Fn&& fn) {
  size_t start = 0;
  while (start < rel.size()) {
    size_t slash = rel.find('/', start);
    if (slash == std::string::npos) slash = rel.size();
    fn(rel.substr(start, slash - start), slash == rel.size());
    start = slash + 1;
  }
}

[[noreturn]] void refuse_link(const std::string& path) {
  throw std::runtime_error(path +
                           ": refused: a symbolic link below the output or source directory; "
                           "links there are never followed");
}

}  // namespace

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void check_beneath(const std::string& rel) {
  bool ok = !rel.empty() && rel.front() != '/';
  each_component(rel, [&](const std::string& c, bool) {
    ok = ok && !c.empty() && c != "." && c != ".." && c.find('\0') == std::string::npos;
  });
  // "a//b" and "a/" have an empty component each_component cannot see.
  ok = ok && rel.find("//") == std::string::npos && rel.back() != '/';
  if (!ok) throw std::runtime_error("\"" + rel + "\" is not a path below a directory");
}

UniqueFd open_beneath(int dir, const std::string& dir_path, const std::string& rel, int flags) {
  if (rel.empty()) {
    UniqueFd again(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
    if (!again) throw file_error(dir_path, "cannot duplicate the descriptor");
    return again;
  }
  check_beneath(rel);
  UniqueFd held;  // the directory we are in, once below `dir`
  int at = dir;
  std::string path = dir_path;
  UniqueFd result;
  each_component(rel, [&](const std::string& comp, bool last) {
    path += "/" + comp;
    const int f =
        last ? (flags | O_NOFOLLOW | O_CLOEXEC) : (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    UniqueFd next(::openat(at, comp.c_str(), f));
    if (!next) {
      struct stat st {};
      if ((errno == ELOOP || errno == ENOTDIR) &&
          ::fstatat(at, comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        refuse_link(path);
      throw file_error(path, last ? "cannot open" : "cannot open the directory");
    }
    if (last) {
      result = std::move(next);
    } else {
      held = std::move(next);
      at = held.get();
    }
  });
  return result;
}

UniqueFd make_beneath(int dir, const std::string& dir_path, const std::string& rel, mode_t mode) {
  UniqueFd held(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
  if (!held) throw file_error(dir_path, "cannot duplicate the descriptor");
  if (rel.empty()) return held;
  check_beneath(rel);
  std::string path = dir_path;
  each_component(rel, [&](const std::string& comp, bool) {
    path += "/" + comp;
    constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd next(::openat(held.get(), comp.c_str(), kFlags));
    if (!next && errno == ENOENT) {
      if (::mkdirat(held.get(), comp.c_str(), mode) != 0 && errno != EEXIST)
        throw file_error(path, "cannot create the directory");
      next = UniqueFd(::openat(held.get(), comp.c_str(), kFlags));
    }
    if (!next && (errno == ELOOP || errno == ENOTDIR)) {
      struct stat st {};
      if (::fstatat(held.get(), comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        throw file_error(path, "cannot stat");
      if (!S_ISLNK(st.st_mode))
        throw std::runtime_error(path + ": refused: not a directory, where the source has one");
      // Our copy of a link the source no longer has: the link goes, its
      // target stays as it is.
      if (::unlinkat(held.get(), comp.c_str(), 0) != 0)
        throw file_error(path, "cannot remove the symbolic link a directory replaces");
      if (::mkdirat(held.get(), comp.c_str(), mode) != 0)
        throw file_error(path, "cannot create the directory");
      next = UniqueFd(::openat(held.get(), comp.c_str(), kFlags));
    }
    if (!next) throw file_error(path, "cannot open the directory");
    struct stat st {};
    if (::fstat(next.get(), &st) != 0) throw file_error(path, "cannot stat");
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      throw std::runtime_error(path + ": refused: owned by uid " + std::to_string(st.st_uid) +
                               ", not by this user (uid " + std::to_string(::geteuid()) +
                               ") or root");
    held = std::move(next);
  });
  return held;
}

}  // namespace gridbcast::files
