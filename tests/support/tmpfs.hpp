// A small tmpfs mounted for one test (root only) and unmounted when the test
// ends, even on failure: a full or read-only destination that is real.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

namespace gridbcast::testing {

class Tmpfs {
 public:
  // Mounts at `dir` (which exists); nullopt with `why` set when this process
  // may not mount (not root, or no CAP_SYS_ADMIN).
  static std::optional<Tmpfs> mount(const std::string& dir, const std::string& size, bool read_only,
                                    std::string& why) {
    if (::geteuid() != 0) {
      why = "needs root to mount a tmpfs";
      return std::nullopt;
    }
    const std::string opts = "size=" + size + ",mode=0755";
    if (::mount("gridbcast-test", dir.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, opts.c_str()) !=
        0) {
      why = "cannot mount a tmpfs at " + dir + ": " + std::strerror(errno);
      return std::nullopt;
    }
    return Tmpfs(dir);
  }
  Tmpfs(Tmpfs&& o) noexcept : dir_(std::move(o.dir_)) { o.dir_.clear(); }
  Tmpfs& operator=(Tmpfs&&) = delete;
  ~Tmpfs() {
    if (!dir_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  const std::string& dir() const { return dir_; }

 private:
  explicit Tmpfs(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace gridbcast::testing
