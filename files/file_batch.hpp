// A tree's small files, many to a broadcast.
//
// Each file of a tree that goes alone (files/file_broadcast.hpp) pays its
// exchange before data moves: the header to every rank, every rank's status
// to the root, the plan back; on testbed-2x4 (10 ms one-way WAN) 33 ms a
// file, so a tree of 500 files of 4 KiB took 16.4 s, 178 x the bound. Small
// files instead travel in batches, one broadcast each, that no exchange
// precedes: every rank cuts the manifest into the same batches (the files'
// sizes and the tree header's bytes and files a batch say it), so it knows
// each batch's length before it starts.
//
//   root                                        every other rank
//   ----                                        ----------------
//   open, fstat, read and digest each file   ║  check each file's SHA-256, write
//     of batch k+1 (a changed size fails)    ║    it beside its final name,
//   bcast [head | each file's bytes] (batch k)║   fsync, mode, mtime, rename
//                                                 (batch k-1)
//
// The head carries each file's mode, mtime, device and inode (as a single
// file's header does) and the SHA-256 of its bytes, or the root's error
// instead, which stops every rank naming the root. A file lands through the
// same FileSink as a file alone: beneath the output root, never through a
// link, under a temporary name renamed into place. What a batch does not do:
// keep what a rank holds already (--resume); a small file's bytes cost less
// than the round trip to ask whether they are needed, so every batch moves
// whole, and a rank writes each file again. Packed (--compress zstd, or auto
// when its sample of the small files says it pays), each file is packed by
// itself and the head, which says how long each is on the wire, goes first.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "files/compress.hpp"
#include "files/file_broadcast.hpp"
#include "files/file_wire.hpp"
#include "runtime/communicator.hpp"

namespace gridbcast::files {

// A regular file of a tree goes in a batch when it has at most this many
// bytes (and fits one batch); larger ones go alone, in windows.
inline constexpr std::uint64_t kBatchFileBytes = 1ull << 20;

// The file data one batch holds at most for a window of `window_bytes`
// (0: kDefaultWindowBytes): half of it, since a rank holds two batches (one
// on the network, one on its disk), as it holds two windows of a file alone.
std::uint64_t batch_bytes_for_window(std::uint64_t window_bytes);

// The files one batch holds at most for a progress deadline of `timeout`: a
// rank writes batch k-1 while batch k comes, and its peers' next broadcast
// waits for it, so a batch's files must land well within the deadline on a
// slow disk: 50 ms each (an HDD's create, write, fsync and rename, with room
// to spare), 16 to 512.
std::uint64_t batch_files_for_timeout(std::chrono::milliseconds timeout);

// The entries (indices) that travel in batches, in manifest order, cut into
// batches of at most `batch_bytes` of data and `batch_files` files: the
// regular files of at most min(kBatchFileBytes, batch_bytes) bytes. Every
// rank computes it alike from the manifest and the tree header.
std::vector<std::vector<size_t>> plan_batches(const std::vector<TreeEntry>& entries,
                                              std::uint64_t batch_bytes, std::uint64_t batch_files);

// `auto` for a tree's batches, at the root before the tree header: packs the
// first of their files (up to `sample_bytes` of them, in the order they go)
// and applies compression_pays (files/compress.hpp) as a file alone does with
// its samples. A file it cannot read ends the sample (its batch will say why).
CompressionChoice choose_batch_compression(const std::vector<TreeEntry>& entries,
                                           const std::vector<std::vector<size_t>>& batches,
                                           const std::function<FileSource(size_t)>& open_source,
                                           double network_bps,
                                           std::uint64_t sample_bytes = 1ull << 20);

// How a tree's small files go: every rank's alike, from the manifest and
// the tree header.
struct BatchPlan {
  std::vector<std::vector<size_t>> batches;  // plan_batches
  std::uint64_t bytes = 0;                   // the tree header's batch bytes
  bool packed = false;                       // each file packed by zstd
};

struct BatchIo {
  // The root's: opens entry i's source (below its directory, never through
  // a link).
  std::function<FileSource(size_t i)> open_source;
  // Every other rank's: opens entry i's copy.
  std::function<FileSink(size_t i, const FileMeta&, const SinkOptions&)> open_sink;
  // Every other rank's: fsyncs the directories that hold these entries, once
  // each, after their copies were renamed into place (FileSink::commit
  // leaves it to the batch: one fsync a directory, not one a file).
  std::function<void(const std::vector<size_t>& entries)> sync_dirs;
  // Entry i's path on this rank (the root's source, another rank's copy),
  // for messages and results.
  std::function<std::string(size_t i)> path;
  // Called on every rank after batch k is broadcast; tests change the source
  // between batches with it.
  std::function<void(std::uint64_t k)> after_batch;
  // Called on every non-root rank with batch k as it arrived, before its
  // files are checked and written; tests damage a file in flight with it.
  std::function<void(std::uint64_t k, std::byte* data, std::uint64_t bytes)> on_arrival;
};

// Every rank calls it with the same root, entries and batches. Returns, per
// file of every batch, its entry index and its FileResult (name left to the
// caller). Throws std::runtime_error starting "rank R (node N): ", naming the
// file and what failed, or the root when its error stops this rank.
std::vector<std::pair<size_t, FileResult>> broadcast_batches(runtime::Communicator& comm,
                                                             const FileSpec& spec, int root,
                                                             const std::vector<TreeEntry>& entries,
                                                             const BatchPlan& plan,
                                                             const BatchIo& io);

}  // namespace gridbcast::files
