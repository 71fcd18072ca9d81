// Compression of a file's chunks on the wire (--compress): each chunk is
// compressed once, by the root, with zstd; it travels compressed on every
// link of the broadcast and is stored as it was. Digests are over the bytes
// as stored, so a copy is checked exactly as without compression.
//
// A chunk that zstd does not make smaller travels as it is: its length on the
// wire equals its length, and that is how a receiver tells the two apart (see
// the window head in file_wire.hpp).
//
// `auto` decides once per file, at the root, before the header: it compresses
// three samples of the file (start, middle, end) and compresses the file when
// the model says that pays,
//
//     max(size / compress_rate, ratio * size / network_rate) <= 0.9 * size / network_rate
//
// with network_rate the max-flow bound's rate of the grid from the root (what
// the broadcast can reach at best) and compress_rate the samples' (one core).
// Random or already compressed data (ratio near 1) and fast networks (rate
// above compression's) are sent as they are. docs/FILES.md, "Compression".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "files/file_source.hpp"

namespace gridbcast::files {

enum class Compression : std::uint8_t { kOff = 0, kZstd = 1, kAuto = 2 };

// "off", "zstd", "auto"; std::nullopt for anything else.
std::optional<Compression> parse_compression(const std::string& s);
const char* compression_name(Compression c);

// The zstd level the root compresses with: the fastest of the standard ones
// (about 170 MB/s on a core of the reference machine, docs/FILES.md).
inline constexpr int kZstdLevel = 1;

// One rank's compressor (the root's): not thread-safe, one per thread.
class ChunkCompressor {
 public:
  explicit ChunkCompressor(int level = kZstdLevel);
  ~ChunkCompressor();
  ChunkCompressor(const ChunkCompressor&) = delete;
  ChunkCompressor& operator=(const ChunkCompressor&) = delete;
  // Writes `bytes` bytes at `src` to `dst` (room for `bytes`), compressed when
  // that is smaller; returns the bytes written: less than `bytes` when
  // compressed, `bytes` when copied as they are.
  std::uint64_t pack(const std::byte* src, std::uint64_t bytes, std::byte* dst);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  int level_;
};

// One rank's decompressor: not thread-safe, one per thread.
class ChunkDecompressor {
 public:
  ChunkDecompressor();
  ~ChunkDecompressor();
  ChunkDecompressor(const ChunkDecompressor&) = delete;
  ChunkDecompressor& operator=(const ChunkDecompressor&) = delete;
  // The inverse of pack: `wire` bytes at `src` into exactly `bytes` bytes at
  // `dst`. Throws FileWireError when `wire` is 0 or above `bytes`, when the
  // data is not exactly one zstd frame whose header says it holds `bytes`
  // bytes, or does not expand to them (zstd never writes past
  // `dst + bytes`, whatever a peer sent).
  void unpack(const std::byte* src, std::uint64_t wire, std::byte* dst, std::uint64_t bytes);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// What `auto` found, and what it chose.
struct CompressionChoice {
  bool compress = false;
  double ratio = 1;           // samples' compressed bytes / their bytes
  double compress_bps = 0;    // samples' bytes per second of compression
  double network_bps = 0;     // the rate it was compared with
  double sample_seconds = 0;  // reading and compressing the samples
  std::string why;            // one line, for the root's notice
};

// The pure rule above: whether compressing `ratio` at `compress_bps` beats
// sending at `network_bps` by at least 10 %. A rate of 0 or less (unknown,
// or a grid of one node) never compresses.
bool compression_pays(double ratio, double compress_bps, double network_bps);

// What samples of `raw` bytes, packed to `packed` bytes in `seconds` of
// compression, say against `network_bps`: the ratio, the rate and the choice
// (compression_pays); the caller adds the time and the why.
CompressionChoice judge_samples(std::uint64_t raw, std::uint64_t packed, double seconds,
                                double network_bps);
// `auto` for `source` (size bytes) against `network_bps` (bytes per second):
// reads and compresses up to three samples of `sample_bytes` each.
CompressionChoice choose_compression(FileSource& source, std::uint64_t size, double network_bps,
                                     std::uint64_t sample_bytes = 1ull << 20);

}  // namespace gridbcast::files
