#include "files/compress.hpp"

#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "files/file_wire.hpp"

namespace gridbcast::files {

std::optional<Compression> parse_compression(const std::string& s) {
  if (s == "off") return Compression::kOff;
  if (s == "zstd") return Compression::kZstd;
  if (s == "auto") return Compression::kAuto;
  return std::nullopt;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kOff:
      return "off";
    case Compression::kZstd:
      return "zstd";
    case Compression::kAuto:
      return "auto";
  }
  return "?";
}

struct ChunkCompressor::Ctx {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ~Ctx() { ZSTD_freeCCtx(c); }
};

ChunkCompressor::ChunkCompressor(int level) : ctx_(std::make_unique<Ctx>()), level_(level) {
  if (!ctx_->c) throw std::bad_alloc();
}
ChunkCompressor::~ChunkCompressor() = default;

std::uint64_t ChunkCompressor::pack(const std::byte* src, std::uint64_t bytes, std::byte* dst) {
  // Room for one byte less than the chunk: zstd stops with an error as soon
  // as its output would not be smaller, and the chunk goes as it is.
  if (bytes > 1) {
    const size_t n = ZSTD_compressCCtx(ctx_->c, dst, bytes - 1, src, bytes, level_);
    if (!ZSTD_isError(n) && n < bytes) return n;
  }
  std::memcpy(dst, src, bytes);
  return bytes;
}

struct ChunkDecompressor::Ctx {
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~Ctx() { ZSTD_freeDCtx(d); }
};

ChunkDecompressor::ChunkDecompressor() : ctx_(std::make_unique<Ctx>()) {
  if (!ctx_->d) throw std::bad_alloc();
}
ChunkDecompressor::~ChunkDecompressor() = default;

void ChunkDecompressor::unpack(const std::byte* src, std::uint64_t wire, std::byte* dst,
                               std::uint64_t bytes) {
  if (wire == 0 || wire > bytes)
    throw FileWireError("a chunk of " + std::to_string(bytes) + " bytes came as " +
                        std::to_string(wire) + " bytes (1 to " + std::to_string(bytes) + ")");
  if (wire == bytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // One frame that fills the chunk's `wire` bytes and says it holds exactly
  // `bytes` (not several frames, a skippable one, or one of unknown size).
  // Whatever the header says, zstd refuses (dstSize_tooSmall) before it
  // writes past dst + bytes.
  const size_t frame = ZSTD_findFrameCompressedSize(src, wire);
  if (ZSTD_isError(frame) || frame != wire)
    throw FileWireError("a compressed chunk of " + std::to_string(bytes) +
                        " bytes is not one zstd frame of " + std::to_string(wire) + " bytes");
  const unsigned long long content = ZSTD_getFrameContentSize(src, wire);
  if (content != bytes)
    throw FileWireError("a compressed chunk of " + std::to_string(bytes) + " bytes says it holds " +
                        (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR
                             ? std::string("an unknown size")
                             : std::to_string(content)));
  const size_t n = ZSTD_decompressDCtx(ctx_->d, dst, bytes, src, wire);
  if (ZSTD_isError(n))
    throw FileWireError("a compressed chunk of " + std::to_string(bytes) +
                        " bytes does not expand: " + ZSTD_getErrorName(n));
  if (n != bytes)
    throw FileWireError("a compressed chunk of " + std::to_string(bytes) + " bytes expands to " +
                        std::to_string(n));
}

bool compression_pays(double ratio, double compress_bps, double network_bps) {
  if (!(network_bps > 0) || !(compress_bps > 0) || !(ratio > 0)) return false;
  const double plain = 1 / network_bps;
  const double packed = std::max(1 / compress_bps, ratio / network_bps);
  return packed <= 0.9 * plain;
}

namespace {
std::string rate_text(double bps) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f MB/s", bps / 1e6);
  return b;
}
}  // namespace

CompressionChoice judge_samples(std::uint64_t raw, std::uint64_t packed, double seconds,
                                double network_bps) {
  CompressionChoice c;
  c.network_bps = network_bps;
  c.ratio = static_cast<double>(packed) / static_cast<double>(std::max<std::uint64_t>(raw, 1));
  c.compress_bps = static_cast<double>(raw) / std::max(seconds, 1e-9);
  c.compress = compression_pays(c.ratio, c.compress_bps, network_bps);
  return c;
}

CompressionChoice choose_compression(FileSource& source, std::uint64_t size, double network_bps,
                                     std::uint64_t sample_bytes) {
  CompressionChoice c;
  c.network_bps = network_bps;
  const std::uint64_t each = std::min(sample_bytes, size);
  if (each == 0 || !(network_bps > 0)) {
    c.why = each == 0 ? "an empty file" : "no network rate to compare with";
    return c;
  }
  std::vector<std::byte> in(each), out(each);
  ChunkCompressor z;
  std::uint64_t raw = 0, packed = 0;
  double seconds = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> at{0};
  if (size >= 3 * each) at = {0, size / 2 - each / 2, size - each};
  for (std::uint64_t off : at) {
    source.read(off, in.data(), each);
    const auto t0 = std::chrono::steady_clock::now();
    packed += z.pack(in.data(), each, out.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    raw += each;
  }
  c = judge_samples(raw, packed, seconds, network_bps);
  c.sample_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char ratio[96];
  std::snprintf(ratio, sizeof ratio,
                "%zu samples of %.0f KiB to %.2f of their size in %.1f ms, at ", at.size(),
                static_cast<double>(each) / 1024, c.ratio, c.sample_seconds * 1e3);
  c.why = ratio + rate_text(c.compress_bps) + "; network at most " + rate_text(network_bps);
  return c;
}

}  // namespace gridbcast::files
