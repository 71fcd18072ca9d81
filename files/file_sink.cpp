#include "files/file_sink.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>

#include "files/file_io.hpp"

namespace gridbcast::files {
namespace {

// Temporary files a signal handler removes: fixed slots, written before they
// are published, so the handler reads them without locks or allocation.
struct CleanupSlot {
  std::atomic<bool> claimed{false};
  std::atomic<bool> ready{false};  // path holds a name the handler may remove
  char path[PATH_MAX];
};
constexpr int kCleanupSlots = 64;
CleanupSlot g_cleanup[kCleanupSlots];

int register_cleanup(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kCleanupSlots; ++i) {
    bool expected = false;
    if (!g_cleanup[i].claimed.compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_cleanup[i].path, path.c_str(), path.size() + 1);
    g_cleanup[i].ready.store(true, std::memory_order_release);
    return i;
  }
  return -1;
}

void release_cleanup(int slot) {
  if (slot < 0) return;
  g_cleanup[slot].ready.store(false, std::memory_order_release);
  g_cleanup[slot].claimed.store(false, std::memory_order_release);
}

// The chunk record (see the header): a fixed header, the seal, then one
// digest per chunk. Numbers in network byte order.
constexpr char kRecordMagic[8] = {'G', 'B', 'C', 'H', 'N', 'K', '0', '1'};
constexpr std::uint64_t kRecordSealAt = 64;
constexpr std::uint64_t kRecordSealBytes = 6 * 8 + 16;  // + the boot id
constexpr std::uint64_t kRecordHeaderBytes = 128;

void put_be64(unsigned char* at, std::uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) at[i] = static_cast<unsigned char>(v & 0xff);
}
std::uint64_t get_be64(const unsigned char* at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | at[i];
  return v;
}

// This boot of the kernel (/proc/sys/kernel/random/boot_id, 16 bytes), read
// once before any seal is made; all zeros where it cannot be read.
unsigned char g_boot_id[16];
bool g_boot_known = false;
std::once_flag g_boot_once;

void read_boot_id() {
  std::call_once(g_boot_once, [] {
    const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char text[64] = {};
    const ssize_t n = ::read(fd, text, sizeof text - 1);
    ::close(fd);
    int got = 0;
    for (ssize_t i = 0; i < n && got < 32; ++i) {
      const char c = text[i];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) continue;  // the dashes, the newline
      g_boot_id[got / 2] =
          static_cast<unsigned char>(g_boot_id[got / 2] | (v << (got % 2 ? 0 : 4)));
      ++got;
    }
    g_boot_known = got == 32;
    if (!g_boot_known) std::memset(g_boot_id, 0, sizeof g_boot_id);
  });
}

// The seal of a partial whose fstat is `st`: its device, inode, size and
// ctime after a 1 (sealed), then the boot id.
void seal_of(const struct stat& st, unsigned char* out) {
  put_be64(out, 1);
  put_be64(out + 8, static_cast<std::uint64_t>(st.st_dev));
  put_be64(out + 16, static_cast<std::uint64_t>(st.st_ino));
  put_be64(out + 24, static_cast<std::uint64_t>(st.st_size));
  put_be64(out + 32, static_cast<std::uint64_t>(st.st_ctim.tv_sec));
  put_be64(out + 40, static_cast<std::uint64_t>(st.st_ctim.tv_nsec));
  std::memcpy(out + 48, g_boot_id, sizeof g_boot_id);
}

// Seals the record. Within one boot the page cache is what every reader
// sees, so nothing is synced: the boot id in the seal makes a crash or a
// reboot since (when unwritten pages may have been lost) untrusted. Where
// the boot id is not known, the partial's bytes and the digests go to disk
// first. Async-signal-safe (fstat, pwrite, fdatasync) and quick, so a
// SIGTERM's seal is done long before the launcher's SIGKILL; any failure
// leaves the record unsealed, which only costs the next run its check.
void seal_record(int data_fd, int record_fd) {
  struct stat st {};
  if (!g_boot_known && (::fdatasync(data_fd) != 0 || ::fdatasync(record_fd) != 0)) return;
  if (::fstat(data_fd, &st) != 0) return;
  unsigned char seal[kRecordSealBytes];
  seal_of(st, seal);
  if (::pwrite(record_fd, seal, sizeof seal, kRecordSealAt) != static_cast<ssize_t>(sizeof seal))
    return;
  if (!g_boot_known) ::fdatasync(record_fd);
}

// Records a signal handler seals: fixed slots like the cleanup's. A sink
// leaving takes its slot back and waits for a handler that is reading it.
struct SealSlot {
  std::atomic<bool> claimed{false};
  std::atomic<bool> ready{false};
  std::atomic<int> in_use{0};
  int data_fd = -1;
  int record_fd = -1;
};
SealSlot g_seal[kCleanupSlots];

int register_seal(int data_fd, int record_fd) {
  read_boot_id();
  for (int i = 0; i < kCleanupSlots; ++i) {
    bool expected = false;
    if (!g_seal[i].claimed.compare_exchange_strong(expected, true)) continue;
    g_seal[i].data_fd = data_fd;
    g_seal[i].record_fd = record_fd;
    g_seal[i].ready.store(true, std::memory_order_release);
    return i;
  }
  return -1;  // not sealed by a signal: the next run checks what it holds
}

void release_seal(int slot) {
  if (slot < 0) return;
  g_seal[slot].ready.store(false, std::memory_order_seq_cst);
  while (g_seal[slot].in_use.load(std::memory_order_seq_cst) > 0) ::sched_yield();
  g_seal[slot].claimed.store(false, std::memory_order_release);
}

extern "C" void cleanup_on_signal(int sig) {
  for (auto& slot : g_seal) {
    slot.in_use.fetch_add(1, std::memory_order_seq_cst);
    if (slot.ready.load(std::memory_order_seq_cst)) seal_record(slot.data_fd, slot.record_fd);
    slot.in_use.fetch_sub(1, std::memory_order_seq_cst);
  }
  for (auto& slot : g_cleanup)
    if (slot.ready.load(std::memory_order_acquire)) ::unlink(slot.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string random_suffix() {
  unsigned char rnd[6];
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
    throw file_error("getrandom", "cannot draw a temporary name");
  std::string s;
  for (unsigned char c : rnd) {
    s += "0123456789abcdef"[c >> 4];
    s += "0123456789abcdef"[c & 15];
  }
  return s;
}

// A directory we may write into: owned by root or by us, and not open to every
// user unless sticky (others can then neither rename nor delete our entries).
void check_trusted_dir(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw file_error(path, "cannot stat");
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": not a directory");
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    throw std::runtime_error(path + ": refused: owned by uid " + std::to_string(st.st_uid) +
                             ", not by this user (uid " + std::to_string(::geteuid()) +
                             ") or root; another user could replace what is written there");
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    throw std::runtime_error(path + ": refused: writable by every user without the sticky bit");
}

// Opens (making what is missing, with `mode`) the directory `dir`, component by
// component from "/"; see the header for what is refused.
int open_dir_checked(const std::filesystem::path& dir, std::uint32_t mode) {
  int fd = ::open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw file_error("/", "cannot open");
  std::string at = "";
  try {
    check_trusted_dir(fd, "/");
    for (const auto& part : dir.relative_path()) {
      const std::string comp = part.string();
      if (comp.empty() || comp == ".") continue;
      if (comp == "..")
        throw std::runtime_error(dir.string() + ": refused: \"..\" in the output directory");
      const std::string here = at + "/" + comp;
      int next = ::openat(fd, comp.c_str(), O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
      if (next < 0 && errno == ENOENT) {
        if (::mkdirat(fd, comp.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST)
          throw file_error(here, "cannot create the directory");
        next = ::openat(fd, comp.c_str(), O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
      }
      if (next < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        // A symlink among the directories: followed only when root or we made
        // it (as /var/run -> /run); one another user planted is refused.
        struct stat lst {};
        if (::fstatat(fd, comp.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0)
          throw file_error(here, "cannot stat");
        if (!S_ISLNK(lst.st_mode)) throw std::runtime_error(here + ": not a directory");
        if (lst.st_uid != 0 && lst.st_uid != ::geteuid())
          throw std::runtime_error(here + ": refused: a symbolic link owned by uid " +
                                   std::to_string(lst.st_uid) + ", not by this user or root");
        next = ::openat(fd, comp.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
      }
      if (next < 0) throw file_error(here, "cannot open the directory");
      ::close(fd);
      fd = next;
      at = here;
      check_trusted_dir(fd, at);
    }
    return fd;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::string describe_type(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a pipe";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

}  // namespace

void check_node_name_for_path(const std::string& node) {
  bool ok = !node.empty() && node != "." && node != "..";
  for (char c : node)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  if (!ok)
    throw std::runtime_error("node name \"" + node +
                             "\" cannot be part of an output path: only letters, digits, '-', "
                             "'_' and '.', and not \".\" or \"..\"");
}

void refuse_copy_over_source(const std::string& copy, const std::string& source,
                             const FileMeta& source_meta) {
  std::error_code ec;
  const auto a = std::filesystem::weakly_canonical(copy, ec);
  const auto b = std::filesystem::weakly_canonical(source, ec);
  struct stat st {};
  const bool same_inode = ::stat(copy.c_str(), &st) == 0 &&
                          static_cast<std::uint64_t>(st.st_dev) == source_meta.dev &&
                          static_cast<std::uint64_t>(st.st_ino) == source_meta.ino;
  if ((!a.empty() && a == b) || same_inode)
    throw std::runtime_error(copy + " is the source file " + source +
                             (same_inode ? " (same device and inode)" : "") +
                             "; writing it would destroy the data");
  // A copy inside a source directory would become part of the source: the
  // next run copies the copies, and this run's root may read a file while a
  // rank renames over it.
  if (!a.empty() && !b.empty() && std::filesystem::is_directory(b, ec)) {
    auto ai = a.begin();
    bool inside = true;
    for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai)
      if (bi->empty())
        continue;
      else if (ai == a.end() || *ai != *bi) {
        inside = false;
        break;
      }
    if (inside)
      throw std::runtime_error(copy + " is inside the source directory " + source +
                               "; the copy would become part of what it copies");
  }
}

UniqueFd open_output_dir(const std::string& dir, std::uint32_t mode) {
  const auto full = std::filesystem::absolute(dir).lexically_normal();
  for (const auto& part : std::filesystem::path(dir))
    if (part == "..") throw std::runtime_error(dir + ": refused: \"..\" in the output path");
  return UniqueFd(open_dir_checked(full, mode));
}

void place_symlink_at(int dir_fd, const std::string& dir_path, const std::string& name,
                      const std::string& target) {
  const std::string full = dir_path + "/" + name;
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    throw std::runtime_error(full + ": refused: a directory is where a symbolic link goes");
  const std::string tmp = "." + name + ".gridbcast-" + random_suffix();
  if (::symlinkat(target.c_str(), dir_fd, tmp.c_str()) != 0)
    throw file_error(dir_path + "/" + tmp, "cannot make the symbolic link");
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    throw file_error(full, "cannot rename the symbolic link into place", err);
  }
}

std::string partial_name(const std::string& name) {
  return "." + name + ".gridbcast-partial";
}

std::string chunk_record_name(const std::string& name) {
  return "." + name + ".gridbcast-chunks";
}

int discard_partial(const std::string& final_path) {
  for (const auto& part : std::filesystem::path(final_path))
    if (part == "..") throw std::runtime_error(final_path + ": refused: \"..\" in the output path");
  const std::filesystem::path full = std::filesystem::absolute(final_path).lexically_normal();
  const std::string dir = full.parent_path().string(), name = full.filename().string();
  const UniqueFd d = open_output_dir(dir, 0700);
  // A regular file of ours with one link at `leftover`, opened; else -1
  // (none, a symlink, another's): left as it is.
  auto ours = [&](const std::string& leftover) {
    UniqueFd f(::openat(d.get(), leftover.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (f.get() < 0) {
      if (errno == ENOENT || errno == ELOOP) return UniqueFd();
      throw file_error(dir + "/" + leftover, "cannot open the copy in progress to remove it");
    }
    struct stat st {};
    if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != ::geteuid())
      return UniqueFd();
    return f;
  };
  // The partial's lock is the job's (FileSink::lock_partial; the record has
  // none of its own): both go only while this holds it, so nothing a job is
  // writing is removed. A record without its partial is left; a sink that
  // finds it replaces it.
  const UniqueFd partial = ours(partial_name(name));
  if (partial.get() < 0 || ::flock(partial.get(), LOCK_EX | LOCK_NB) != 0) return 0;
  int removed = 0;
  if (const UniqueFd record = ours(chunk_record_name(name)); record.get() >= 0) {
    if (::unlinkat(d.get(), chunk_record_name(name).c_str(), 0) != 0)
      throw file_error(dir + "/" + chunk_record_name(name), "cannot remove the chunk record");
    ++removed;
  }
  if (::unlinkat(d.get(), partial_name(name).c_str(), 0) != 0)
    throw file_error(dir + "/" + partial_name(name), "cannot remove the copy in progress");
  return removed + 1;
}

FileSink FileSink::open(const std::string& final_path, const FileMeta& meta,
                        const SinkOptions& options) {
  const std::filesystem::path full = std::filesystem::absolute(final_path).lexically_normal();
  const std::string name = full.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw std::runtime_error(final_path + ": not a file name (a directory?)");
  for (const auto& part : std::filesystem::path(final_path))
    if (part == "..") throw std::runtime_error(final_path + ": refused: \"..\" in the output path");
  UniqueFd dir(open_dir_checked(full.parent_path(), options.dir_mode));
  return open_in(std::move(dir), full.parent_path().string(), name, meta, options);
}

FileSink FileSink::open_in(UniqueFd dir, const std::string& dir_path, const std::string& name,
                           const FileMeta& meta, const SinkOptions& options) {
  FileSink s;
  s.dir_fd_ = dir.release();
  s.dir_path_ = dir_path;
  s.name_ = name;
  s.final_path_ = dir_path == "/" ? "/" + name : dir_path + "/" + name;
  s.meta_ = meta;
  s.chunk_bytes_ = options.chunk_bytes;
  s.chunks_ = options.chunk_bytes ? ChunkLayout{meta.size, options.chunk_bytes}.count() : 0;
  s.record_name_ = chunk_record_name(name);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw std::runtime_error(s.final_path_ + ": not a file name");

  // What is at the final name now: nothing, or a regular file that is not the
  // source. Checked before anything is created; rename() never follows a
  // symlink that appears later.
  struct stat st {};
  const bool exists = ::fstatat(s.dir_fd_, s.name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!exists && errno != ENOENT) throw file_error(s.final_path_, "cannot stat");
  if (exists && !(S_ISLNK(st.st_mode) && options.replace_symlink)) {
    if (!S_ISREG(st.st_mode))
      throw std::runtime_error(s.final_path_ + ": refused: the destination is " +
                               describe_type(st.st_mode) + ", not a regular file");
    if ((options.source_dev != 0 || options.source_ino != 0) &&
        static_cast<std::uint64_t>(st.st_dev) == options.source_dev &&
        static_cast<std::uint64_t>(st.st_ino) == options.source_ino)
      throw std::runtime_error(s.final_path_ +
                               ": refused: the destination is the source file itself (same "
                               "device and inode); writing it would destroy the data");
    if (options.resume) {
      // O_NONBLOCK: a pipe swapped in since the fstatat is not waited on, and
      // fstat of what was opened must be the regular file we looked at.
      s.existing_fd_ =
          ::openat(s.dir_fd_, s.name_.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (s.existing_fd_ < 0) throw file_error(s.final_path_, "cannot open for resume");
      struct stat ost {};
      if (::fstat(s.existing_fd_, &ost) != 0) throw file_error(s.final_path_, "cannot stat");
      if (!S_ISREG(ost.st_mode) || ost.st_dev != st.st_dev || ost.st_ino != st.st_ino)
        throw std::runtime_error(s.final_path_ +
                                 ": refused: the destination changed while it was opened (now " +
                                 describe_type(ost.st_mode) + ")");
    }
  }

  // The copy in progress always has the fixed name DIR/.NAME.gridbcast-partial
  // and outlives a failure once it holds something, so a rerun with resume
  // keeps what it holds; without resume a rerun starts it over.
  s.temp_name_ = partial_name(s.name_);
  s.fd_ = ::openat(s.dir_fd_, s.temp_name_.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (s.fd_ >= 0) {
    // A partial of an earlier run: ours, a regular file with no other name.
    struct stat pst {};
    if (::fstat(s.fd_, &pst) != 0) throw file_error(s.temp_path(), "cannot stat");
    if (!S_ISREG(pst.st_mode) || pst.st_uid != ::geteuid() || pst.st_nlink != 1)
      throw std::runtime_error(s.temp_path() +
                               ": refused: not a regular file of this user with one link; "
                               "remove it to start over");
    s.lock_partial();
    if (options.resume) {
      s.reused_partial_ = true;
    } else if (::ftruncate(s.fd_, 0) != 0) {
      throw file_error(s.temp_path(), "cannot start the partial copy of an earlier run over");
    }
    s.held_ = true;  // it was kept before; it stays kept whatever happens now
    // Its record, read before anything here changes the partial's ctime.
    // Without a record of its own (a small file of a batch, written whole)
    // an earlier run's speaks of bytes this run starts over: it goes, while
    // the partial's lock is held.
    if (s.chunk_bytes_) {
      s.open_record(options.resume);
    } else if (::unlinkat(s.dir_fd_, s.record_name_.c_str(), 0) != 0 && errno != ENOENT) {
      throw file_error(s.record_path(), "cannot remove the chunk record of an earlier run");
    }
  } else if (errno != ENOENT) {
    throw file_error(s.temp_path(), "cannot open the partial copy");
  } else {
    s.fd_ = ::openat(s.dir_fd_, s.temp_name_.c_str(),
                     O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s.fd_ < 0) throw file_error(s.temp_path(), "cannot create the temporary file");
    s.lock_partial();
    // Until its first byte lands it holds nothing worth keeping: a failure or
    // a signal before then removes it.
    s.cleanup_slot_ = register_cleanup(s.temp_path());
  }

  // The whole size reserved now: a full disk fails before any data moves.
  if (meta.size > 0) {
    if (::fallocate(s.fd_, 0, 0, static_cast<off_t>(meta.size)) != 0 && errno != EOPNOTSUPP)
      throw file_error(s.temp_path(), "cannot reserve " + std::to_string(meta.size) + " bytes");
  }
  if (::ftruncate(s.fd_, static_cast<off_t>(meta.size)) != 0)
    throw file_error(s.temp_path(), "cannot size to " + std::to_string(meta.size) + " bytes");

  // The same file opened again for direct writes, checked to be the same
  // inode. File systems without O_DIRECT (tmpfs before Linux 6.6) refuse the
  // open with EINVAL: their writes take the page cache path.
  if (options.direct_io) {
    s.direct_fd_ =
        ::openat(s.dir_fd_, s.temp_name_.c_str(), O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    struct stat a {
    }, b{};
    if (s.direct_fd_ >= 0 && (::fstat(s.fd_, &a) != 0 || ::fstat(s.direct_fd_, &b) != 0 ||
                              a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
      ::close(s.direct_fd_);
      s.direct_fd_ = -1;
    }
  }
  return s;
}

FileSink::FileSink(FileSink&& o) noexcept
    : final_path_(std::move(o.final_path_)),
      dir_path_(std::move(o.dir_path_)),
      name_(std::move(o.name_)),
      temp_name_(std::move(o.temp_name_)),
      record_name_(std::move(o.record_name_)),
      meta_(o.meta_),
      chunk_bytes_(o.chunk_bytes_),
      chunks_(o.chunks_),
      record_trusted_(o.record_trusted_),
      record_fd_(std::exchange(o.record_fd_, -1)),
      seal_slot_(std::exchange(o.seal_slot_, -1)),
      reused_partial_(o.reused_partial_),
      committed_(o.committed_),
      held_(o.held_),
      dir_fd_(std::exchange(o.dir_fd_, -1)),
      fd_(std::exchange(o.fd_, -1)),
      existing_fd_(std::exchange(o.existing_fd_, -1)),
      direct_fd_(std::exchange(o.direct_fd_, -1)),
      cleanup_slot_(std::exchange(o.cleanup_slot_, -1)) {}

FileSink& FileSink::operator=(FileSink&& o) noexcept {
  if (this != &o) {
    release();
    final_path_ = std::move(o.final_path_);
    dir_path_ = std::move(o.dir_path_);
    name_ = std::move(o.name_);
    temp_name_ = std::move(o.temp_name_);
    meta_ = o.meta_;
    record_name_ = std::move(o.record_name_);
    chunk_bytes_ = o.chunk_bytes_;
    chunks_ = o.chunks_;
    record_trusted_ = o.record_trusted_;
    record_fd_ = std::exchange(o.record_fd_, -1);
    seal_slot_ = std::exchange(o.seal_slot_, -1);
    reused_partial_ = o.reused_partial_;
    committed_ = o.committed_;
    held_ = o.held_;
    dir_fd_ = std::exchange(o.dir_fd_, -1);
    fd_ = std::exchange(o.fd_, -1);
    existing_fd_ = std::exchange(o.existing_fd_, -1);
    direct_fd_ = std::exchange(o.direct_fd_, -1);
    cleanup_slot_ = std::exchange(o.cleanup_slot_, -1);
  }
  return *this;
}

FileSink::~FileSink() {
  release();
}

void FileSink::lock_partial() {
  // Two jobs writing one copy would mix their bytes after each verified its
  // own: the second is refused. The lock goes with the process (a killed
  // rank's partial is free for the next run).
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    if (e == EWOULDBLOCK)
      throw std::runtime_error(temp_path() +
                               ": refused: another gridbcast job is writing this copy now "
                               "(its partial copy is locked)");
    errno = e;
    throw file_error(temp_path(), "cannot lock the partial copy");
  }
}

void FileSink::open_record(bool keep) {
  if (keep && load_record()) {
    record_trusted_ = true;
  } else {
    // Replaced: a name is removed, never followed.
    if (::unlinkat(dir_fd_, record_name_.c_str(), 0) != 0 && errno != ENOENT)
      throw file_error(record_path(), "cannot remove the chunk record of an earlier run");
    record_fd_ = ::openat(dir_fd_, record_name_.c_str(),
                          O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (record_fd_ < 0) throw file_error(record_path(), "cannot create the chunk record");
    unsigned char head[kRecordHeaderBytes] = {};
    std::memcpy(head, kRecordMagic, sizeof kRecordMagic);
    put_be64(head + 8, meta_.size);
    put_be64(head + 16, chunk_bytes_);
    put_be64(head + 24, chunks_);
    pwrite_full(record_fd_, record_path(), reinterpret_cast<const std::byte*>(head), sizeof head,
                0);
    if (::ftruncate(record_fd_,
                    static_cast<off_t>(kRecordHeaderBytes + chunks_ * sizeof(Digest))) != 0)
      throw file_error(record_path(), "cannot size the chunk record");
  }
  seal_slot_ = register_seal(fd_, record_fd_);
}

bool FileSink::load_record() {
  UniqueFd rec(
      ::openat(dir_fd_, record_name_.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (rec.get() < 0) return false;
  struct stat st {
  }, pst{};
  if (::fstat(rec.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      st.st_nlink != 1 ||
      static_cast<std::uint64_t>(st.st_size) != kRecordHeaderBytes + chunks_ * sizeof(Digest))
    return false;
  unsigned char head[kRecordHeaderBytes];
  if (pread_full(rec.get(), record_path(), reinterpret_cast<std::byte*>(head), sizeof head, 0) !=
      sizeof head)
    return false;
  unsigned char want[kRecordSealBytes];
  read_boot_id();
  if (::fstat(fd_, &pst) != 0) return false;
  seal_of(pst, want);
  if (std::memcmp(head, kRecordMagic, sizeof kRecordMagic) != 0 ||
      get_be64(head + 8) != meta_.size || get_be64(head + 16) != chunk_bytes_ ||
      get_be64(head + 24) != chunks_ || std::memcmp(head + kRecordSealAt, want, sizeof want) != 0)
    return false;
  record_fd_ = rec.release();
  return true;
}

void FileSink::record(std::uint64_t chunk, const Digest& d) {
  if (chunk_bytes_ == 0 || chunk >= chunks_)
    throw std::runtime_error(record_path() + ": no chunk " + std::to_string(chunk) + " of " +
                             std::to_string(chunks_) + " to record");
  if (record_fd_ < 0) open_record(false);
  pwrite_full(record_fd_, record_path(), d.data(), sizeof d,
              kRecordHeaderBytes + chunk * sizeof(Digest));
}

std::vector<bool> FileSink::recorded(const std::vector<Digest>& want) const {
  std::vector<bool> out(want.size(), false);
  if (!record_trusted_ || want.size() != chunks_) return out;
  constexpr std::uint64_t kBatch = 4096;  // digests per read
  std::vector<Digest> got(std::min<std::uint64_t>(kBatch, chunks_));
  for (std::uint64_t first = 0; first < chunks_; first += kBatch) {
    const std::uint64_t n = std::min(kBatch, chunks_ - first);
    const std::uint64_t bytes = n * sizeof(Digest);
    if (pread_full(record_fd_, record_path(), got.front().data(), bytes,
                   kRecordHeaderBytes + first * sizeof(Digest)) != bytes)
      return std::vector<bool>(want.size(), false);
    // A chunk never recorded is zeros there, and never matches (not even a
    // `want` of zeros: a digest not known).
    for (std::uint64_t i = 0; i < n; ++i)
      out[first + i] = got[i] != Digest{} && got[i] == want[first + i];
  }
  return out;
}

void FileSink::release() {
  if (record_fd_ >= 0) {
    // Sealed while the slot is still there: a SIGTERM meanwhile seals too.
    if (!committed_ && held_ && fd_ >= 0) seal_record(fd_, record_fd_);
    release_seal(seal_slot_);
    ::close(record_fd_);
  }
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) {
    // Removed before the lock goes with the descriptor: nobody else's by then.
    if (!committed_ && !held_) ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
    ::close(fd_);
  }
  release_cleanup(cleanup_slot_);
  if (existing_fd_ >= 0) ::close(existing_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  fd_ = dir_fd_ = existing_fd_ = direct_fd_ = cleanup_slot_ = record_fd_ = seal_slot_ = -1;
}

void FileSink::write(std::uint64_t offset, const std::byte* data, std::uint64_t bytes) {
  if (!held_) {
    // From its first byte on, the partial copy is kept on failure and signals.
    held_ = true;
    release_cleanup(cleanup_slot_);
    cleanup_slot_ = -1;
    if (chunk_bytes_ && record_fd_ < 0) open_record(false);
  }
  if (record_fd_ >= 0 && bytes > 0) {
    // The record stops vouching for the chunks these bytes touch before they
    // change: a loaded record may hold an earlier run's digest for them, and
    // a failure before record() would seal it over different bytes.
    static const Digest kNone{};
    const std::uint64_t last = std::min(chunks_ - 1, (offset + bytes - 1) / chunk_bytes_);
    for (std::uint64_t c = offset / chunk_bytes_; c <= last && c < chunks_; ++c)
      pwrite_full(record_fd_, record_path(), kNone.data(), sizeof kNone,
                  kRecordHeaderBytes + c * sizeof(Digest));
  }
  const bool aligned = offset % kDirectAlign == 0 && bytes % kDirectAlign == 0 &&
                       reinterpret_cast<std::uintptr_t>(data) % kDirectAlign == 0;
  pwrite_full(direct_fd_ >= 0 && aligned ? direct_fd_ : fd_, temp_path(), data, bytes, offset);
}

std::uint64_t FileSink::read_partial(std::uint64_t offset, std::byte* data,
                                     std::uint64_t bytes) const {
  return pread_full(fd_, temp_path(), data, bytes, offset);
}

std::uint64_t FileSink::partial_next_data(std::uint64_t from) const {
  if (from >= meta_.size) return meta_.size;
  const off_t at = ::lseek(fd_, static_cast<off_t>(from), SEEK_DATA);
  if (at < 0) return errno == ENXIO ? meta_.size : from;  // ENXIO: no data from `from` on
  return std::min<std::uint64_t>(static_cast<std::uint64_t>(at), meta_.size);
}

std::uint64_t FileSink::partial_next_hole(std::uint64_t from) const {
  if (from >= meta_.size) return meta_.size;
  const off_t at = ::lseek(fd_, static_cast<off_t>(from), SEEK_HOLE);
  if (at < 0) return meta_.size;
  return std::clamp<std::uint64_t>(static_cast<std::uint64_t>(at), from + 1, meta_.size);
}

std::uint64_t FileSink::read_existing(std::uint64_t offset, std::byte* data,
                                      std::uint64_t bytes) const {
  return existing_fd_ < 0 ? 0 : pread_full(existing_fd_, final_path_, data, bytes, offset);
}

void FileSink::commit(bool sync_dir) {
  const std::string tmp = temp_path();
  // Set-user and set-group bits are not copied: a copy made by root must not
  // become a set-uid program because the source was one.
  if (::fchmod(fd_, static_cast<mode_t>(meta_.mode & 01777)) != 0)
    throw file_error(tmp, "cannot set the mode");
  struct timespec times[2] = {{0, UTIME_OMIT}, meta_.mtime.timespec()};
  if (::futimens(fd_, times) != 0) throw file_error(tmp, "cannot set the modification time");
  if (::fsync(fd_) != 0) throw file_error(tmp, "cannot fsync");
  if (record_fd_ >= 0) {
    // Gone before the rename, while the partial's lock keeps every other job
    // from making a record of its own under the name.
    release_seal(seal_slot_);
    seal_slot_ = -1;
    ::close(record_fd_);
    record_fd_ = -1;
    ::unlinkat(dir_fd_, record_name_.c_str(), 0);
  }
  if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) != 0)
    throw file_error(final_path_, "cannot rename " + tmp + " into place");
  committed_ = true;
  if (sync_dir && ::fsync(dir_fd_) != 0) throw file_error(dir_path_, "cannot fsync the directory");
}

void install_signal_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = cleanup_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace gridbcast::files
