// A file or a whole directory from the root to every other rank: the root
// scans the tree (without following symlinks) and broadcasts a manifest, then
// every regular file goes through broadcast_file (job/file_broadcast.hpp) in
// manifest order; symlinks are made as links last, and directories get their
// modes and mtimes once their contents are in place (deepest first).
//
//   SOURCE/                      OUTPUT/            (on every other rank)
//     a.bin            ──►         a.bin            broadcast_file, safe sink
//     sub/ (0755)                  sub/ (0755)      made 0700, mode set last
//       b.txt                        b.txt
//       link -> ../a.bin             link -> ../a.bin   a link, never followed
//
// A single file is a manifest of one entry whose path is empty: OUTPUT is the
// copy itself.
//
// A tree's OUTPUT is a closed world: it is opened once (job/file_sink.hpp's
// rules for the path to it) and everything below it is reached from its
// descriptor without following any symbolic link (job/beneath.hpp), modes and
// times set through descriptors. The manifest is checked whole before
// anything is written (job/file_wire.hpp): no duplicate, nothing below a link
// or a file. The root reads each file below its source directory the same
// way, so a link or a pipe swapped in after its walk is refused, not followed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "files/file_broadcast.hpp"
#include "files/file_wire.hpp"

namespace gridbcast::files {

// The root's walk: a regular file is one entry with an empty path; a directory
// is itself (path "") then everything under it, parents before children, in
// name order. Anything else (devices, sockets, pipes) is refused, naming it.
std::vector<TreeEntry> scan_tree(const std::string& source);

// The name a source has in a job of several (`FileSpec::sources`): its last
// path component ("/data/set/" -> "set"). Throws for "/" and other paths
// without one.
std::string source_name(const std::string& source);

struct TreeResult {
  std::string path;  // root: the source; others: where the copy (tree) is
  std::uint64_t files = 0, directories = 0, symlinks = 0;
  std::uint64_t bytes = 0;  // of the regular files
  std::uint64_t chunks = 0, chunks_sent = 0;
  std::uint64_t chunks_digested = 0;  // the root's, with resume (FileResult::chunks_digested)
  double check_seconds = 0;           // summed over the files (FileResult::check_seconds)
  // Summed over the files: the bytes of the chunks sent, and of the windows'
  // broadcasts that carried them (fewer when compressed).
  std::uint64_t bytes_sent = 0, wire_bytes = 0;
  std::uint64_t files_compressed = 0;
  // Small files that travelled in batches (files/file_batch.hpp), and the batches.
  std::uint64_t files_batched = 0, batches = 0;
  std::string compression_why;  // the root's, the first file's that has one
  std::string root_digest;      // over every entry and every file's root digest
  std::string algorithm;
  std::vector<FileResult> per_file;
};

// Every rank calls it with the same root; `spec.source` (the root's) is a file
// or a directory, `spec.output` where the copy goes; or `spec.sources` are
// several, and each goes to `spec.output`/NAME (two with the same NAME are
// refused). Throws as broadcast_file
// does, naming the rank, the path and the errno text.
TreeResult broadcast_tree(runtime::Communicator& comm, const FileSpec& spec, int root);

}  // namespace gridbcast::files
