// Fuzz target: the file broadcast's decoders (files/file_wire.hpp) take any
// bytes a root could send (header, tree header, manifest, a batch's head);
// they accept or
// refuse (FileWireError), never read or allocate out of bounds, and what they
// accept is within the documented limits (and a header or manifest re-encodes
// identically). The first byte picks the decoder; a compressed window's head
// takes its chunks' stored lengths from the next bytes, a batch head its
// number of files, whether packed, and their sizes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "files/file_wire.hpp"

using namespace gridbcast::files;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto* body = reinterpret_cast<const std::byte*>(data + 1);
  const std::size_t n = size - 1;
  if (data[0] & 8) {
    // A batch of small files' head: 0-15 files (the next byte's low bits;
    // its top bit: packed), their sizes (a byte each), then the head.
    if (n < 1) return 0;
    const std::uint64_t files = std::to_integer<std::uint64_t>(body[0]) % 16;
    const bool packed = (std::to_integer<unsigned>(body[0]) & 0x80) != 0;
    if (n < 1 + files) return 0;
    std::vector<std::uint64_t> sizes(files);
    for (std::uint64_t j = 0; j < files; ++j)
      sizes[j] = std::to_integer<std::uint64_t>(body[1 + j]);
    const std::span<const std::byte> head(body + 1 + files, n - 1 - files);
    try {
      const BatchHead h = decode_batch_head(head, sizes, packed);
      if (head.size() < batch_head_bytes(files) || h.error.size() > kFileErrorBytes) std::abort();
      if (h.ok && (h.meta.size() != files || h.digests.size() != files || h.wire.size() != files))
        std::abort();
      for (const auto& m : h.meta)
        if (m.mode > 07777 || m.mtime.nsec >= 1'000'000'000) std::abort();
      for (std::uint64_t j = 0; j < h.wire.size(); ++j)
        if (packed ? (h.wire[j] > sizes[j] || (h.wire[j] == 0 && sizes[j] > 0))
                   : h.wire[j] != sizes[j])
          std::abort();
      if (h.ok) {
        std::vector<std::byte> again(batch_head_bytes(files));
        encode_batch_head(h, again.data());
        if (decode_batch_head(again, sizes, packed).digests != h.digests) std::abort();
      }
    } catch (const FileWireError&) {
    }
  } else if (data[0] & 4) {
    // A compressed window: 1-8 chunks of 1-65536 bytes as stored, then the
    // window as received.
    if (n < 1) return 0;
    const std::size_t chunks = std::to_integer<std::size_t>(body[0]) % 8 + 1;
    if (n < 1 + 2 * chunks) return 0;
    std::vector<std::uint64_t> stored(chunks);
    for (std::size_t j = 0; j < chunks; ++j)
      stored[j] = (std::to_integer<std::uint64_t>(body[1 + 2 * j]) << 8 |
                   std::to_integer<std::uint64_t>(body[2 + 2 * j])) +
                  1;
    const std::span<const std::byte> window(body + 1 + 2 * chunks, n - 1 - 2 * chunks);
    try {
      const WindowHead w = decode_window_head(window, stored, 100, 1 << 20);
      std::uint64_t sum = window_head_bytes(chunks);
      if (w.next < 100 || w.next > (1 << 20) || w.wire.size() != chunks) std::abort();
      for (std::size_t j = 0; j < chunks; ++j) {
        if (w.wire[j] == 0 || w.wire[j] > stored[j]) std::abort();
        sum += w.wire[j];
      }
      if (sum != window.size()) std::abort();
    } catch (const FileWireError&) {
    }
  } else if (data[0] & 2) {
    // The tree's header, also kTreeHeaderBytes on the wire.
    std::string header(reinterpret_cast<const char*>(body),
                       std::min<std::size_t>(n, kTreeHeaderBytes));
    header.resize(kTreeHeaderBytes, '\0');
    try {
      const TreeHeader h = decode_tree_header(header);
      if (!h.failed && h.manifest_bytes > kMaxManifestBytes) std::abort();
      if (!h.failed && h.batch_bytes > kMaxWindowBytes / 2) std::abort();
      if (!h.failed && h.batch_bytes > 0 && (h.batch_files == 0 || h.batch_files > kMaxBatchFiles))
        std::abort();
      if (h.error.size() > kTreeHeaderBytes) std::abort();
    } catch (const FileWireError&) {
    }
  } else if (data[0] & 1) {
    // The header is always kFileHeaderBytes on the wire: the input, padded.
    std::vector<std::byte> header(kFileHeaderBytes);
    std::copy(body, body + std::min<std::size_t>(n, kFileHeaderBytes), header.begin());
    try {
      const FileHeader h = decode_file_header(header);
      if (h.meta.mode > 07777 || h.meta.mtime.nsec >= 1'000'000'000) std::abort();
      if (h.ok && (h.chunk_bytes == 0 || h.chunk_bytes > h.window_bytes / 2 ||
                   h.window_bytes > kMaxWindowBytes || h.meta.size > kMaxFileBytes ||
                   chunk_count(h.meta.size, h.chunk_bytes) > kMaxChunks))
        std::abort();
      std::vector<std::byte> again(kFileHeaderBytes);
      encode_file_header(h, again.data());
      if (decode_file_header(again).meta.size != h.meta.size) std::abort();
    } catch (const FileWireError&) {
    }
  } else {
    const std::string manifest(reinterpret_cast<const char*>(body), n);
    try {
      const std::vector<TreeEntry> entries = decode_manifest(manifest);
      if (entries.empty() || entries.size() > n / kMinManifestEntryBytes) std::abort();
      if (encode_manifest(entries) != manifest) std::abort();
    } catch (const FileWireError&) {
    }
  }
  return 0;
}
