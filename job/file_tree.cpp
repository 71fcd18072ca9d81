#include "job/file_tree.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "job/file_io.hpp"

namespace gridbcast::job {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kTreeHeaderBytes = 1024;
constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;

std::int64_t mtime_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

TreeEntry entry_of(const std::string& full, const std::string& rel) {
  struct stat st {};
  if (::lstat(full.c_str(), &st) != 0) throw file_error(full, "cannot stat");
  TreeEntry e;
  e.path = rel;
  e.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  e.mtime_ns = mtime_of(st);
  if (S_ISREG(st.st_mode)) {
    e.kind = TreeEntry::Kind::kFile;
    e.size = static_cast<std::uint64_t>(st.st_size);
  } else if (S_ISDIR(st.st_mode)) {
    e.kind = TreeEntry::Kind::kDirectory;
  } else if (S_ISLNK(st.st_mode)) {
    e.kind = TreeEntry::Kind::kSymlink;
    std::error_code ec;
    e.target = fs::read_symlink(full, ec).string();
    if (ec) throw std::runtime_error(full + ": cannot read the symbolic link: " + ec.message());
  } else {
    throw std::runtime_error(full + ": not a regular file, directory or symbolic link");
  }
  return e;
}

void walk(const std::string& base, const std::string& rel, std::vector<TreeEntry>& out) {
  std::vector<std::string> names;
  const std::string dir = rel.empty() ? base : base + "/" + rel;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) throw std::runtime_error(dir + ": cannot list the directory: " + ec.message());
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string r = rel.empty() ? n : rel + "/" + n;
    out.push_back(entry_of(base + "/" + r, r));
    if (out.back().kind == TreeEntry::Kind::kDirectory) walk(base, r, out);
  }
}

void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_text(std::string& s, const std::string& t) {
  put_u64(s, t.size());
  s += t;
}

class Cursor {
 public:
  explicit Cursor(const std::string& s) : s_(s) {}
  std::uint64_t u64() {
    need(8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(s_[pos_++]);
    return v;
  }
  std::string text() {
    const std::uint64_t n = u64();
    need(n);
    std::string t = s_.substr(pos_, n);
    pos_ += n;
    return t;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(std::uint64_t n) const {
    if (n > s_.size() - pos_) throw std::runtime_error("file broadcast: the manifest is truncated");
  }
  const std::string& s_;
  size_t pos_ = 0;
};

std::string encode(const std::vector<TreeEntry>& entries) {
  std::string s;
  put_u64(s, entries.size());
  for (const auto& e : entries) {
    put_text(s, e.path);
    put_u64(s, static_cast<std::uint64_t>(e.kind));
    put_u64(s, e.mode);
    put_u64(s, static_cast<std::uint64_t>(e.mtime_ns));
    put_u64(s, e.size);
    put_text(s, e.target);
  }
  return s;
}

// A path from the manifest must stay under the output: relative, no "." or
// ".." components, no empty ones.
void check_relative(const std::string& p) {
  if (p.empty()) return;
  size_t start = 0;
  while (true) {
    const size_t slash = p.find('/', start);
    const std::string comp =
        p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (comp.empty() || comp == "." || comp == ".." || comp.find('\0') != std::string::npos)
      throw std::runtime_error("file broadcast: the manifest names \"" + p +
                               "\", which is not a path under the output");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
}

std::vector<TreeEntry> decode(const std::string& s) {
  Cursor c(s);
  const std::uint64_t n = c.u64();
  if (n > s.size()) throw std::runtime_error("file broadcast: the manifest is truncated");
  std::vector<TreeEntry> out(n);
  for (auto& e : out) {
    e.path = c.text();
    const std::uint64_t kind = c.u64();
    if (kind > 2) throw std::runtime_error("file broadcast: an unknown entry kind in the manifest");
    e.kind = static_cast<TreeEntry::Kind>(kind);
    e.mode = static_cast<std::uint32_t>(c.u64() & 07777);
    e.mtime_ns = static_cast<std::int64_t>(c.u64());
    e.size = c.u64();
    e.target = c.text();
    check_relative(e.path);
  }
  if (!c.done()) throw std::runtime_error("file broadcast: trailing bytes after the manifest");
  return out;
}

std::string join(const std::string& base, const std::string& rel) {
  return rel.empty() ? base : base + "/" + rel;
}

}  // namespace

std::vector<TreeEntry> scan_tree(const std::string& source) {
  std::vector<TreeEntry> out;
  // The source itself is followed if it is a symlink (as opening a file is).
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) throw file_error(source, "cannot stat");
  TreeEntry top;
  top.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  top.mtime_ns = mtime_of(st);
  if (S_ISREG(st.st_mode)) {
    top.kind = TreeEntry::Kind::kFile;
    top.size = static_cast<std::uint64_t>(st.st_size);
    out.push_back(top);
  } else if (S_ISDIR(st.st_mode)) {
    top.kind = TreeEntry::Kind::kDirectory;
    out.push_back(top);
    walk(source, "", out);
  } else {
    throw std::runtime_error(source + ": not a regular file or a directory");
  }
  return out;
}

std::string source_name(const std::string& source) {
  fs::path p = fs::path(source).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == ".." || name == "/")
    throw std::runtime_error(source +
                             ": has no name to copy it under (give it as a path "
                             "ending in a file or directory name)");
  return name;
}

TreeResult broadcast_tree(runtime::Communicator& comm, const FileSpec& spec, int root) {
  const int rank = comm.rank();
  const bool is_root = rank == root;
  const auto who = [&](int r) {
    return "rank " + std::to_string(r) + " (node " +
           comm.grid().nodes.at(static_cast<size_t>(r)).name + ")";
  };

  // The manifest: its length (or the root's error) in a fixed header, then it.
  std::string manifest, error;
  std::vector<std::string> read_from;  // the root's: where each entry is read
  if (is_root) {
    try {
      std::vector<TreeEntry> all;
      if (spec.sources.empty()) {
        all = scan_tree(spec.source);
        for (const auto& e : all) read_from.push_back(join(spec.source, e.path));
      } else {
        std::vector<std::string> names;
        for (const auto& src : spec.sources) {
          const std::string name = source_name(src);
          if (std::find(names.begin(), names.end(), name) != names.end())
            throw std::runtime_error("two sources would be copied as \"" + name +
                                     "\"; one of them is " + src);
          names.push_back(name);
          for (auto e : scan_tree(src)) {
            read_from.push_back(join(src, e.path));
            e.path = join(name, e.path);
            all.push_back(std::move(e));
          }
        }
      }
      manifest = encode(all);
      if (manifest.size() > kMaxManifestBytes)
        throw std::runtime_error(spec.source + ": too many entries for one job");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::string header(kTreeHeaderBytes, '\0');
  if (is_root) {
    std::string h;
    put_u64(h, error.empty() ? 0 : 1);
    put_u64(h, manifest.size());
    put_text(h, error.substr(0, kTreeHeaderBytes - 32));
    std::memcpy(header.data(), h.data(), h.size());
  }
  comm.bcast(header.data(), header.size(), root, spec.algorithm);
  {
    Cursor c(header);
    const bool failed = c.u64() != 0;
    const std::uint64_t length = c.u64();
    const std::string why = c.text();
    if (failed) {
      if (is_root) throw std::runtime_error(who(rank) + ": " + why);
      throw std::runtime_error(who(rank) + ": stopped: the root, " + who(root) +
                               ", cannot send: " + why);
    }
    if (length > kMaxManifestBytes)
      throw std::runtime_error(who(rank) + ": the root's manifest is too long");
    manifest.resize(length);
  }
  comm.bcast(manifest.data(), manifest.size(), root, spec.algorithm);
  const std::vector<TreeEntry> entries = decode(manifest);
  if (entries.empty()) throw std::runtime_error("file broadcast: an empty manifest");
  const bool single =
      entries.front().path.empty() && entries.front().kind == TreeEntry::Kind::kFile;

  TreeResult result;
  result.path = is_root && spec.sources.empty() ? spec.source : spec.output;
  std::string digest_input;
  try {
    // Files first, in manifest order (their directories are made 0700 on the
    // way); then the empty directories and symlinks; then directory modes and
    // mtimes, deepest first, so that writing a child does not change them.
    for (size_t i = 0; i < entries.size(); ++i) {
      const TreeEntry& e = entries[i];
      if (e.kind != TreeEntry::Kind::kFile) continue;
      FileSpec fs_spec = spec;
      fs_spec.sources.clear();
      fs_spec.source = is_root ? read_from.at(i) : std::string();
      fs_spec.output = join(spec.output, e.path);
      fs_spec.expected_size = single && spec.expected_size ? spec.expected_size : e.size;
      FileResult r = broadcast_file(comm, fs_spec, root);
      r.name = !e.path.empty() ? e.path
                               : fs::path(is_root ? spec.source : spec.output).filename().string();
      ++result.files;
      result.bytes += r.size;
      result.chunks += r.chunks;
      result.chunks_sent += r.chunks_sent;
      result.algorithm = r.algorithm;
      digest_input += e.path + '\0' + r.root_digest + '\0';
      result.per_file.push_back(std::move(r));
    }
    for (const auto& e : entries) {
      if (e.kind == TreeEntry::Kind::kDirectory) {
        ++result.directories;
        if (!is_root) make_directories(join(spec.output, e.path), spec.dir_mode);
      } else if (e.kind == TreeEntry::Kind::kSymlink) {
        ++result.symlinks;
        if (!is_root) place_symlink(join(spec.output, e.path), e.target, spec.dir_mode);
      }
      if (e.kind != TreeEntry::Kind::kFile)
        digest_input +=
            e.path + '\0' + std::to_string(static_cast<int>(e.kind)) + '\0' + e.target + '\0';
    }
    if (!is_root) {
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (it->kind != TreeEntry::Kind::kDirectory) continue;
        const std::string p = join(spec.output, it->path);
        if (::chmod(p.c_str(), static_cast<mode_t>(it->mode & 01777)) != 0)
          throw file_error(p, "cannot set the mode");
        const struct timespec times[2] = {{0, UTIME_OMIT},
                                          {static_cast<time_t>(it->mtime_ns / 1'000'000'000),
                                           static_cast<long>(it->mtime_ns % 1'000'000'000)}};
        if (::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
          throw file_error(p, "cannot set the modification time");
      }
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind("rank ", 0) == 0) throw;
    throw std::runtime_error(who(rank) + ": " + what);
  }
  result.root_digest = single
                           ? result.per_file.front().root_digest
                           : to_hex(sha256(reinterpret_cast<const std::byte*>(digest_input.data()),
                                           digest_input.size()));
  return result;
}

}  // namespace gridbcast::job
