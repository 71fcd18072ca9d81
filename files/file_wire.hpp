// What a file broadcast puts on the wire besides the file's bytes, as pure
// codecs (no sockets, so the fuzz target reaches them): the root's header,
// the manifest of a tree, and the Writer/Reader the other small messages of
// job/file_broadcast.cpp use. Everything in network byte order.
//
// A decoder takes whatever a root (or anyone who got a stream in) sent and
// checks it as a whole before anything is sized from it: limits on every
// count and length, sums and products that cannot wrap, and for a manifest
// the shape of the tree (see decode_manifest). It throws FileWireError naming
// the field; nothing is allocated from a field before it is checked.
//
//   header (kFileHeaderBytes, zero-padded)
//   | magic "GBFILE03" | ok u32 | mode u32 | size u64 | mtime s i64 | mtime ns u32 |
//   | dev u64 | ino u64 | chunk u64 | window u64 | resume u32 | compressed u32 |
//   | error: u32 n, n bytes |
//
//   a compressed window's head (files/compress.hpp), before its chunks' bytes
//   | next window's bytes u64 | per chunk: bytes on the wire u64 |
//   | per chunk: SHA-256 of its bytes as stored | zero padding to kWindowAlign |
//
//   manifest
//   | entries u64 | per entry: path (u64 n, n bytes) | kind u64 | mode u64 |
//   |   mtime s i64 | mtime ns u64 | size u64 | target (u64 n, n bytes) |
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "files/chunk_digest.hpp"
#include "files/file_source.hpp"

namespace gridbcast::files {

struct FileWireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The communicator context of a file broadcast's point-to-point messages,
// and the tag of the root's go (before the header and before the plan, every
// other rank waits for it).
inline constexpr std::uint64_t kFileContext = 0x6762'6669'6c65ull;  // "gbfile"
inline constexpr std::int64_t kGoTag = 2;
// Ranks tell the ones waiting for them that they still work (a resume's
// digests and checks take as long as the disk does, and a broadcast may wait
// with nothing on the wire for --timeout only); a rank's first such note
// and the root's first notes open their connections early (open_lines).
inline constexpr std::int64_t kStillWorkingTag = 3;
// The context of a tree's own notes between the root and every other rank
// (files::open_lines), apart from its files' messages: nothing of a file
// takes them, so each is received once, when the tree ends.
inline constexpr std::uint64_t kTreeContext = 0x6762'7472'6565ull;  // "gbtree"

inline constexpr std::uint64_t kFileHeaderBytes = 1024;
// Error text carried in a header, a status or a plan.
inline constexpr std::uint64_t kFileErrorBytes = 900;
// Memory per rank for data in flight (--window) is at most this: a root cannot
// make a rank map more than two halves of it.
inline constexpr std::uint64_t kMaxWindowBytes = 16ull << 30;
// Chunks per file: the digest list (32 bytes each) and the bitmaps are sized
// from the count, so it is bounded (128 MiB of digests). The root raises its
// chunk size to stay within it.
inline constexpr std::uint64_t kMaxChunks = 1ull << 22;
// Beyond any file system (ext4: 16 TiB, XFS: 8 EiB), and far from wrapping.
inline constexpr std::uint64_t kMaxFileBytes = 1ull << 60;

// ceil(size / chunk), without the overflow of (size + chunk - 1) / chunk.
inline std::uint64_t chunk_count(std::uint64_t size, std::uint64_t chunk) {
  return size / chunk + (size % chunk != 0 ? 1 : 0);
}

struct FileHeader {
  bool ok = true;
  std::string error;  // the root's, when !ok
  FileMeta meta;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t window_bytes = 0;
  bool resume = false;
  // With resume: the root digests only the chunks some rank may hold, after
  // the ranks say which (a large file after a loss: what was sent before it).
  bool digests_on_demand = false;
  bool compressed = false;  // windows carry a head and chunks packed by zstd
};

// `out` holds kFileHeaderBytes.
void encode_file_header(const FileHeader& h, std::byte* out);
// Refuses (FileWireError naming the field) a header that is not one, a mode
// or nanosecond field out of range, and, when ok: a size above kMaxFileBytes,
// a window of fewer than 2 or more than kMaxWindowBytes bytes, a chunk of 0
// or more than half the window, more than kMaxChunks chunks.
FileHeader decode_file_header(std::span<const std::byte> in);

// One entry of a tree's manifest.
struct TreeEntry {
  enum class Kind : std::uint8_t { kFile = 0, kDirectory = 1, kSymlink = 2 };
  std::string path;  // relative to the source, '/'-separated; "" for the source itself
  Kind kind = Kind::kFile;
  std::uint32_t mode = 0;
  FileTime mtime;
  std::uint64_t size = 0;  // regular files
  std::string target;      // symlinks
  bool operator==(const TreeEntry&) const = default;
};

// A manifest is at most this long (and each entry takes at least
// kMinManifestEntryBytes of it, so the entries are bounded by its length).
inline constexpr std::uint64_t kMaxManifestBytes = 256ull << 20;
inline constexpr std::uint64_t kMinManifestEntryBytes = 56;
// Names: a path or a link's target is shorter than PATH_MAX, a component
// than NAME_MAX + 1, as the kernel takes them.
inline constexpr std::uint64_t kMaxPathBytes = 4095;
inline constexpr std::uint64_t kMaxNameBytes = 255;

// What precedes a manifest: its length and how the tree's small files travel
// (files/file_batch.hpp), or the root's error instead.
//   | failed u64 | manifest length u64 | batch bytes u64 | batch files u64 |
//   | batches packed u64 | error (u64 n, n bytes) | zero padding |
inline constexpr std::uint64_t kTreeHeaderBytes = 1024;
struct TreeHeader {
  bool failed = false;
  std::uint64_t manifest_bytes = 0;
  std::uint64_t batch_bytes = 0;  // the file data one batch holds at most; 0: no batches
  std::uint64_t batch_files = 0;  // the files one batch holds at most
  bool batch_packed = false;      // each file of a batch packed by zstd (files/compress.hpp)
  std::string error;              // at most kTreeHeaderBytes - 56 bytes of it travel
};
std::string encode_tree_header(const TreeHeader& h);  // kTreeHeaderBytes long
// Refuses a status other than 0 or 1, a manifest longer than
// kMaxManifestBytes, a batch of more than half of kMaxWindowBytes (every
// rank maps two) or of no file or more than kMaxBatchFiles files while it
// holds bytes, a packing flag other than 0 or 1, an error text past the
// header's end.
TreeHeader decode_tree_header(const std::string& bytes);

// A batch of a tree's small files (files/file_batch.hpp):
//   | magic u64 | failed u32 | error (u32 n, n bytes) | zero padding to kBatchRecordsAt |
//   | per file: mode u32 | mtime ns u32 | mtime s u64 | dev u64 | ino u64 |
//   |           bytes on the wire u64 | SHA-256 (32) |
//   | each file's bytes as they travel, back to back, in manifest order |
// Unpacked, head and bytes are one broadcast, whose length every rank knows
// from the manifest (the files' sizes), so no exchange precedes it. Packed,
// the head is one broadcast (its length known alike) and the bytes, as long
// as the head says, a second. The sizes are the manifest's, the rest is the
// root's fstat of the file it read, as a single file's header carries; the
// digest is over the bytes as stored.
inline constexpr std::uint64_t kBatchRecordsAt = 1024;
inline constexpr std::uint64_t kBatchRecordBytes = 72;
// Files per batch at most, whatever a root says: what the head of one holds
// (288 KiB of records).
inline constexpr std::uint64_t kMaxBatchFiles = 4096;
inline std::uint64_t batch_head_bytes(std::uint64_t files) {
  return kBatchRecordsAt + kBatchRecordBytes * files;
}
struct BatchHead {
  bool ok = true;
  std::string error;  // the root's, when !ok
  // Per file, as the root read it: mode, mtime, dev and ino (size: the
  // manifest's), its bytes on the wire, and its one chunk's SHA-256
  // (files/chunk_digest.hpp).
  std::vector<FileMeta> meta;
  std::vector<std::uint64_t> wire;
  std::vector<Digest> digests;
};
// `out` holds batch_head_bytes(h.meta.size()).
void encode_batch_head(const BatchHead& h, std::byte* out);
// `sizes`: the batch's files' sizes, from the manifest. Refuses a head that
// is not one, a status other than 0 or 1, a mode above 07777, nanoseconds of
// 1e9 or more, and bytes on the wire other than the size (unpacked) or, packed,
// 0 for a file of bytes or more than its size (0 only for an empty file),
// naming the file's place in the batch.
BatchHead decode_batch_head(std::span<const std::byte> in, std::span<const std::uint64_t> sizes,
                            bool packed);

// A compressed window: the head, then each chunk's bytes as they travel (a
// chunk as long as it is stored travels as it is), back to back. The head
// says how long the next window is, so every rank knows the size of each
// broadcast before it starts (the first one's comes in the plan).
inline constexpr std::uint64_t kWindowAlign = 4096;
std::uint64_t window_head_bytes(std::uint64_t chunks);
struct WindowHead {
  std::uint64_t next = 0;           // the next window's bytes; 0 after the last
  std::vector<std::uint64_t> wire;  // per chunk, its bytes on the wire
};
// `window`: the whole window as received; `stored`: each chunk's length as
// stored; the next window is [next_least, next_most] bytes long (both 0 after
// the last). Refuses a head past the window's end, a chunk of 0 bytes or more
// than it stores, chunks that do not fill the window exactly, a next length
// outside its range. Digests are read by the caller at
// window_digest_offset(chunks, j).
WindowHead decode_window_head(std::span<const std::byte> window,
                              std::span<const std::uint64_t> stored, std::uint64_t next_least,
                              std::uint64_t next_most);
inline std::uint64_t window_digest_offset(std::uint64_t chunks, std::uint64_t j) {
  return 8 + 8 * chunks + 32 * j;
}

std::string encode_manifest(const std::vector<TreeEntry>& entries);
// Besides the limits above, refuses what could make a rank write outside the
// output tree or apply an entry twice, before anything is written:
//  - a path that is absolute, has an empty, "." or ".." component or a NUL;
//  - the same path twice;
//  - a path whose parent is not a directory listed before it (so nothing
//    below a symlink or a file), the output itself standing as a directory
//    when no entry has the empty path;
//  - the empty path other than first, or a file there with other entries;
//  - a symlink with an empty target or a target on anything else;
//  - a size on anything but a file, more than kMaxFileBytes;
//  - an unknown kind, a mode above 07777, nanoseconds of 1e9 or more.
std::vector<TreeEntry> decode_manifest(const std::string& bytes);

// Big-endian fields into a buffer the caller has sized.
class WireWriter {
 public:
  explicit WireWriter(std::byte* p) : p_(p) {}
  WireWriter& u32(std::uint32_t v) { return put(v, 4); }
  WireWriter& u64(std::uint64_t v) { return put(v, 8); }
  // At most kFileErrorBytes of `s`, after its length as u32.
  WireWriter& text(const std::string& s);
  WireWriter& bytes(const void* d, std::uint64_t n);

 private:
  WireWriter& put(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) *p_++ = static_cast<std::byte>(v >> (8 * i));
    return *this;
  }
  std::byte* p_;
};

// Reads the fields WireWriter wrote; a field past the end throws FileWireError.
class WireReader {
 public:
  WireReader(const std::byte* p, std::uint64_t size) : p_(p), end_(p + size) {}
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::string text();
  void bytes(void* d, std::uint64_t n);

 private:
  void need(std::uint64_t n) const {
    if (n > static_cast<std::uint64_t>(end_ - p_))
      throw FileWireError("file broadcast: a message is shorter than its fields");
  }
  std::uint64_t get(int n) {
    need(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(*p_++);
    return v;
  }
  const std::byte* p_;
  const std::byte* end_;
};

}  // namespace gridbcast::files
