#include "files/file_wire.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace gridbcast::files {
namespace {

constexpr std::uint64_t kMagic = 0x4742'4649'4c45'3033ull;  // "GBFILE03"

[[noreturn]] void refuse(const std::string& what) {
  throw FileWireError("file broadcast: the root's " + what);
}

// A name from the wire in a message: quoted, every byte outside printable
// ASCII (and the backslash) as \xNN, at most 200 bytes of it, so a hostile
// name can neither forge lines on a terminal nor make a message huge.
std::string quoted(const std::string& name) {
  std::string out = "\"";
  for (size_t i = 0; i < name.size(); ++i) {
    if (out.size() > 200) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += "0123456789abcdef"[c >> 4];
      out += "0123456789abcdef"[c & 15];
    }
  }
  return out + "\"";
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
  // A name of at most `max` bytes, checked before it is copied.
  std::string text(std::uint64_t max, const char* field) {
    const std::uint64_t n = u64();
    if (n > max)
      refuse(std::string(field) + " of " + std::to_string(n) + " bytes (at most " +
             std::to_string(max) + ")");
    need(n);
    std::string t = s_.substr(pos_, n);
    pos_ += n;
    return t;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(std::uint64_t n) const {
    if (n > s_.size() - pos_) refuse("manifest or tree header is truncated");
  }
  const std::string& s_;
  size_t pos_ = 0;
};

// Relative, '/'-separated, no empty, "." or ".." component, no NUL, each
// component a name the kernel takes.
void check_relative(const std::string& p) {
  size_t start = 0;
  while (true) {
    const size_t slash = p.find('/', start);
    const size_t end = slash == std::string::npos ? p.size() : slash;
    const std::string_view comp(p.data() + start, end - start);
    if (comp.empty() || comp == "." || comp == ".." || comp.find('\0') != std::string_view::npos ||
        comp.size() > kMaxNameBytes)
      refuse("manifest names " + quoted(p) + ", which is not a path under the output");
    // files/file_sink.hpp's names beside a copy: the copy of X would remove
    // or overwrite the copy of a file so named.
    for (const std::string_view mine : {".gridbcast-partial", ".gridbcast-chunks"})
      if (comp.size() > mine.size() && comp.front() == '.' &&
          comp.substr(comp.size() - mine.size()) == mine)
        refuse("manifest names " + quoted(p) +
               ", the name of a copy in progress beside its file (rename it in the source)");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
}

std::string parent_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash);
}

}  // namespace

WireWriter& WireWriter::text(const std::string& s) {
  const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.size(), kFileErrorBytes));
  u32(n);
  if (n > 0) std::memcpy(p_, s.data(), n);
  p_ += n;
  return *this;
}

WireWriter& WireWriter::bytes(const void* d, std::uint64_t n) {
  if (n > 0) std::memcpy(p_, d, n);  // an empty vector's data() may be null
  p_ += n;
  return *this;
}

std::string WireReader::text() {
  const std::uint32_t n = u32();
  need(n);
  std::string s(reinterpret_cast<const char*>(p_), std::min<std::uint64_t>(n, kFileErrorBytes));
  p_ += n;
  return s;
}

void WireReader::bytes(void* d, std::uint64_t n) {
  need(n);
  if (n > 0) std::memcpy(d, p_, n);  // d may be an empty vector's null data()
  p_ += n;
}

void encode_file_header(const FileHeader& h, std::byte* out) {
  std::memset(out, 0, kFileHeaderBytes);
  WireWriter(out)
      .u64(kMagic)
      .u32(h.ok ? 0 : 1)
      .u32(h.meta.mode)
      .u64(h.meta.size)
      .u64(static_cast<std::uint64_t>(h.meta.mtime.sec))
      .u32(h.meta.mtime.nsec)
      .u64(h.meta.dev)
      .u64(h.meta.ino)
      .u64(h.chunk_bytes)
      .u64(h.window_bytes)
      .u32(h.resume ? (h.digests_on_demand ? 2 : 1) : 0)
      .u32(h.compressed ? 1 : 0)
      .text(h.error);
}

FileHeader decode_file_header(std::span<const std::byte> in) {
  WireReader r(in.data(), in.size());
  if (r.u64() != kMagic) refuse("header is not one (wrong magic or version)");
  FileHeader h;
  const std::uint32_t ok = r.u32();
  if (ok > 1) refuse("header has a status of " + std::to_string(ok));
  h.ok = ok == 0;
  h.meta.mode = r.u32();
  if (h.meta.mode > 07777) refuse("header has a mode of " + std::to_string(h.meta.mode));
  h.meta.size = r.u64();
  h.meta.mtime.sec = static_cast<std::int64_t>(r.u64());
  h.meta.mtime.nsec = r.u32();
  if (h.meta.mtime.nsec >= 1'000'000'000)
    refuse("header has a modification time of " + std::to_string(h.meta.mtime.nsec) +
           " nanoseconds past the second");
  h.meta.dev = r.u64();
  h.meta.ino = r.u64();
  h.chunk_bytes = r.u64();
  h.window_bytes = r.u64();
  const std::uint32_t resume = r.u32();
  if (resume > 2) refuse("header has a resume flag of " + std::to_string(resume));
  h.resume = resume >= 1;
  h.digests_on_demand = resume == 2;
  const std::uint32_t compressed = r.u32();
  if (compressed > 1) refuse("header has a compression of " + std::to_string(compressed));
  h.compressed = compressed == 1;
  h.error = r.text();
  if (!h.ok) return h;
  if (h.meta.size > kMaxFileBytes)
    refuse("header has a size of " + std::to_string(h.meta.size) + " bytes (at most " +
           std::to_string(kMaxFileBytes) + ")");
  if (h.window_bytes < 2 || h.window_bytes > kMaxWindowBytes)
    refuse("header has a window of " + std::to_string(h.window_bytes) + " bytes (2 to " +
           std::to_string(kMaxWindowBytes) + ")");
  if (h.chunk_bytes == 0 || h.chunk_bytes > h.window_bytes / 2)
    refuse("header has a chunk of " + std::to_string(h.chunk_bytes) + " bytes (1 to half the " +
           std::to_string(h.window_bytes) + "-byte window)");
  if (chunk_count(h.meta.size, h.chunk_bytes) > kMaxChunks)
    refuse("header has a size of " + std::to_string(h.meta.size) + " bytes in chunks of " +
           std::to_string(h.chunk_bytes) + ": more than " + std::to_string(kMaxChunks) + " chunks");
  return h;
}

std::string encode_tree_header(const TreeHeader& h) {
  std::string s;
  put_u64(s, h.failed ? 1 : 0);
  put_u64(s, h.manifest_bytes);
  put_u64(s, h.batch_bytes);
  put_u64(s, h.batch_files);
  put_u64(s, h.batch_packed ? 1 : 0);
  put_text(s, h.error.substr(0, kTreeHeaderBytes - 56));
  s.resize(kTreeHeaderBytes, '\0');
  return s;
}

TreeHeader decode_tree_header(const std::string& bytes) {
  Cursor c(bytes);
  TreeHeader h;
  const std::uint64_t failed = c.u64();
  if (failed > 1) refuse("tree header has a status of " + std::to_string(failed));
  h.failed = failed == 1;
  h.manifest_bytes = c.u64();
  h.batch_bytes = c.u64();
  h.batch_files = c.u64();
  const std::uint64_t packed = c.u64();
  if (packed > 1) refuse("tree header has a packing of " + std::to_string(packed));
  h.batch_packed = packed == 1;
  h.error = c.text(kTreeHeaderBytes, "tree header has an error text");
  if (!h.failed && h.manifest_bytes > kMaxManifestBytes)
    refuse("manifest would be " + std::to_string(h.manifest_bytes) + " bytes (at most " +
           std::to_string(kMaxManifestBytes) + ")");
  if (!h.failed && h.batch_bytes > kMaxWindowBytes / 2)
    refuse("tree header has batches of " + std::to_string(h.batch_bytes) + " bytes (at most " +
           std::to_string(kMaxWindowBytes / 2) + ")");
  if (!h.failed && h.batch_bytes > 0 && (h.batch_files == 0 || h.batch_files > kMaxBatchFiles))
    refuse("tree header has batches of " + std::to_string(h.batch_files) + " files (1 to " +
           std::to_string(kMaxBatchFiles) + ")");
  return h;
}

namespace {
constexpr std::uint64_t kBatchMagic = 0x4742'4241'5443'4831ull;  // "GBBATCH1"
}  // namespace

void encode_batch_head(const BatchHead& h, std::byte* out) {
  std::memset(out, 0, batch_head_bytes(h.meta.size()));
  WireWriter(out).u64(kBatchMagic).u32(h.ok ? 0 : 1).text(h.error);
  WireWriter w(out + kBatchRecordsAt);
  for (size_t i = 0; i < h.meta.size(); ++i) {
    const FileMeta& m = h.meta[i];
    w.u32(m.mode)
        .u32(m.mtime.nsec)
        .u64(static_cast<std::uint64_t>(m.mtime.sec))
        .u64(m.dev)
        .u64(m.ino);
    w.u64(i < h.wire.size() ? h.wire[i] : 0);
    if (i < h.digests.size()) w.bytes(h.digests[i].data(), sizeof(Digest));
  }
}

BatchHead decode_batch_head(std::span<const std::byte> in, std::span<const std::uint64_t> sizes,
                            bool packed) {
  const std::uint64_t files = sizes.size();
  if (files > kMaxBatchFiles || in.size() < batch_head_bytes(files))
    refuse("batch head is shorter than its " + std::to_string(files) + " files' records");
  WireReader r(in.data(), kBatchRecordsAt);
  if (r.u64() != kBatchMagic) refuse("batch head is not one (wrong magic or version)");
  BatchHead h;
  const std::uint32_t failed = r.u32();
  if (failed > 1) refuse("batch head has a status of " + std::to_string(failed));
  h.ok = failed == 0;
  h.error = r.text();
  if (!h.ok) return h;
  WireReader f(in.data() + kBatchRecordsAt, kBatchRecordBytes * files);
  h.meta.resize(files);
  h.wire.resize(files);
  h.digests.resize(files);
  for (std::uint64_t i = 0; i < files; ++i) {
    FileMeta& m = h.meta[i];
    const std::string which = "batch head's file " + std::to_string(i);
    m.mode = f.u32();
    if (m.mode > 07777) refuse(which + " has a mode of " + std::to_string(m.mode));
    m.mtime.nsec = f.u32();
    if (m.mtime.nsec >= 1'000'000'000)
      refuse(which + " has a modification time of " + std::to_string(m.mtime.nsec) +
             " nanoseconds past the second");
    m.mtime.sec = static_cast<std::int64_t>(f.u64());
    m.dev = f.u64();
    m.ino = f.u64();
    m.size = sizes[i];
    const std::uint64_t wire = f.u64();
    const bool fits = packed ? (wire <= sizes[i] && (wire > 0 || sizes[i] == 0)) : wire == sizes[i];
    if (!fits)
      refuse(which + " travels as " + std::to_string(wire) + " bytes; it stores " +
             std::to_string(sizes[i]) + (packed ? "" : " and the batch is not packed"));
    h.wire[i] = wire;
    f.bytes(h.digests[i].data(), sizeof(Digest));
  }
  return h;
}

std::string encode_manifest(const std::vector<TreeEntry>& entries) {
  std::string s;
  put_u64(s, entries.size());
  for (const auto& e : entries) {
    put_text(s, e.path);
    put_u64(s, static_cast<std::uint64_t>(e.kind));
    put_u64(s, e.mode);
    put_u64(s, static_cast<std::uint64_t>(e.mtime.sec));
    put_u64(s, e.mtime.nsec);
    put_u64(s, e.size);
    put_text(s, e.target);
  }
  return s;
}

std::vector<TreeEntry> decode_manifest(const std::string& bytes) {
  if (bytes.size() > kMaxManifestBytes)
    refuse("manifest is " + std::to_string(bytes.size()) + " bytes (at most " +
           std::to_string(kMaxManifestBytes) + ")");
  Cursor c(bytes);
  const std::uint64_t n = c.u64();
  if (n == 0) refuse("manifest is empty");
  if (n > bytes.size() / kMinManifestEntryBytes)
    refuse("manifest declares " + std::to_string(n) + " entries in " +
           std::to_string(bytes.size()) + " bytes");
  std::vector<TreeEntry> out(n);
  // Directories entries may go into: the output itself, unless an entry
  // stands there (then only if that one is a directory).
  std::unordered_set<std::string> dirs, seen;
  for (std::uint64_t i = 0; i < n; ++i) {
    TreeEntry& e = out[i];
    e.path = c.text(kMaxPathBytes, "manifest has a path");
    const std::uint64_t kind = c.u64();
    if (kind > 2) refuse("manifest has an entry of unknown kind " + std::to_string(kind));
    e.kind = static_cast<TreeEntry::Kind>(kind);
    const std::uint64_t mode = c.u64();
    if (mode > 07777)
      refuse("manifest gives " + quoted(e.path) + " the mode " + std::to_string(mode));
    e.mode = static_cast<std::uint32_t>(mode);
    e.mtime.sec = static_cast<std::int64_t>(c.u64());
    const std::uint64_t nsec = c.u64();
    if (nsec >= 1'000'000'000)
      refuse("manifest gives " + quoted(e.path) + " a time of " + std::to_string(nsec) +
             " nanoseconds past the second");
    e.mtime.nsec = static_cast<std::uint32_t>(nsec);
    e.size = c.u64();
    e.target = c.text(kMaxPathBytes, "manifest has a symbolic link's target");
    const bool is_file = e.kind == TreeEntry::Kind::kFile;
    const bool is_link = e.kind == TreeEntry::Kind::kSymlink;
    if (e.size > kMaxFileBytes || (!is_file && e.size != 0))
      refuse("manifest gives " + quoted(e.path) + " a size of " + std::to_string(e.size));
    if (is_link != !e.target.empty() || e.target.find('\0') != std::string::npos)
      refuse("manifest has " +
             std::string(is_link ? "a symbolic link without a target" : "a target on no link") +
             " at " + quoted(e.path));
    if (e.path.empty()) {
      if (i != 0) refuse("manifest lists the output itself after other entries");
      if (is_link) refuse("manifest makes the output itself a symbolic link");
      if (e.kind == TreeEntry::Kind::kDirectory) dirs.insert("");
      seen.insert("");
      continue;
    }
    if (i == 0) dirs.insert("");  // several sources: the output is their directory
    check_relative(e.path);
    if (!seen.insert(e.path).second) refuse("manifest lists " + quoted(e.path) + " twice");
    const std::string parent = parent_of(e.path);
    if (!dirs.count(parent))
      refuse("manifest puts " + quoted(e.path) + " below " +
             (parent.empty() ? std::string("the output itself") : quoted(parent)) +
             ", which it does not list as a directory before it");
    if (e.kind == TreeEntry::Kind::kDirectory) dirs.insert(e.path);
  }
  if (!c.done()) refuse("manifest has trailing bytes");
  return out;
}

}  // namespace gridbcast::files

namespace gridbcast::files {

std::uint64_t window_head_bytes(std::uint64_t chunks) {
  const std::uint64_t bytes = window_digest_offset(chunks, chunks);
  return (bytes + kWindowAlign - 1) / kWindowAlign * kWindowAlign;
}

WindowHead decode_window_head(std::span<const std::byte> window,
                              std::span<const std::uint64_t> stored, std::uint64_t next_least,
                              std::uint64_t next_most) {
  const std::uint64_t n = stored.size();
  const std::uint64_t head = window_head_bytes(n);
  if (window.size() < head)
    refuse("window of " + std::to_string(window.size()) + " bytes is shorter than its head of " +
           std::to_string(head));
  WireReader r(window.data(), head);
  WindowHead w;
  w.next = r.u64();
  if (w.next < next_least || w.next > next_most)
    refuse("window says the next is " + std::to_string(w.next) + " bytes long (" +
           std::to_string(next_least) + " to " + std::to_string(next_most) + ")");
  std::uint64_t left = window.size() - head;
  w.wire.resize(n);
  for (std::uint64_t j = 0; j < n; ++j) {
    w.wire[j] = r.u64();
    if (w.wire[j] == 0 || w.wire[j] > stored[j] || w.wire[j] > left)
      refuse("window's chunk " + std::to_string(j) + " of " + std::to_string(stored[j]) +
             " bytes is said to travel as " + std::to_string(w.wire[j]) + " bytes (1 to " +
             std::to_string(std::min(stored[j], left)) + ")");
    left -= w.wire[j];
  }
  if (left != 0) refuse("window has " + std::to_string(left) + " bytes past its last chunk");
  return w;
}

}  // namespace gridbcast::files
