// Per-chunk SHA-256 digests of a file and the root digest over them (a
// two-level Merkle tree):
//
//   root = SHA-256( d0 || d1 || ... || d(n-1) )      di = SHA-256(chunk i)
//   chunk i = bytes [i*chunk, min((i+1)*chunk, size))
//
// The root sends each chunk's digest with the chunk; every rank checks a chunk
// as it lands and keeps its own digests, so its root digest is computed from
// the bytes it holds, never copied from the sender. Two copies are identical
// when their root digests are (and sizes and chunk sizes agree).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gridbcast::files {

inline constexpr std::uint64_t kDefaultChunkBytes = 4ull << 20;

using Digest = std::array<std::byte, 32>;

Digest sha256(const std::byte* data, std::uint64_t bytes);
std::string to_hex(const Digest& d);

// How a file of `size` bytes is cut into chunks of `chunk_bytes` (the last
// one shorter); size 0 has no chunks.
struct ChunkLayout {
  std::uint64_t size = 0;
  std::uint64_t chunk_bytes = kDefaultChunkBytes;

  // Without the overflow of (size + chunk_bytes - 1) / chunk_bytes.
  std::uint64_t count() const { return size / chunk_bytes + (size % chunk_bytes != 0 ? 1 : 0); }
  std::uint64_t offset(std::uint64_t i) const { return i * chunk_bytes; }
  std::uint64_t length(std::uint64_t i) const {
    const std::uint64_t off = offset(i);
    return off >= size ? 0 : std::min(chunk_bytes, size - off);
  }
};

// The root digest over chunk digests in chunk order (SHA-256 of the empty
// string for a file without chunks).
Digest root_digest(const std::vector<Digest>& chunks);

}  // namespace gridbcast::files
