// The safe writer of a copy. Nothing the user had is lost and nothing looks
// complete before it is:
//
//   DIR/.NAME.gridbcast-XXXXXXXXXXXX   written here (O_CREAT|O_EXCL|O_NOFOLLOW,
//        |                             0600, in the destination directory)
//        |  fsync, source mode and mtime
//        v
//   DIR/NAME                           renamed into place, then DIR fsynced
//
// The temporary file has the fixed name DIR/.NAME.gridbcast-partial, is
// locked (flock) while a job writes it, and is kept by a failure, by
// destruction without commit() and by SIGINT/SIGTERM/SIGHUP once it holds a
// byte (never under the final name; an existing DIR/NAME stays untouched), so
// a rerun with resume keeps the chunks it holds; a rerun without resume starts
// it over. Before its first byte (a failure while opening, a full disk) it is
// removed, by install_signal_cleanup()'s handler too.
//
// With a chunk size (SinkOptions::chunk_bytes), the sink keeps beside the
// partial its chunk record, DIR/.NAME.gridbcast-chunks (0600, same rules):
//
//   [ header: magic, size, chunk size, count | seal | d(c0) | d(c1) | ... ]
//
// record(c, d) writes chunk c's digest after its bytes landed (zeros: not
// held). When the sink goes without commit (a failure, SIGINT, SIGTERM or
// SIGHUP; not SIGKILL) it seals the record: the partial's device, inode,
// size and ctime, and the kernel's boot id, are written in the seal, after
// the digests. A later run with resume trusts the record only when the
// partial is still that file with that ctime (anything that changes a file's
// data or inode changes its ctime, and nobody can set it) in the same boot
// (a crash may lose pages that were never written back, so nothing needs a
// sync; where the boot id cannot be read, the partial and the record are
// synced before the seal). The chunks a run verified as they landed are
// then not read back and digested again; every other chunk is checked as
// before. A record that is not ours, not a regular file with one
// link, of another size or format, or unsealed is not followed nor trusted,
// and is replaced (a directory there, which cannot be, is refused naming
// it). Before bytes are written over a chunk, the record stops vouching for
// it. A commit removes the record, then renames the partial into place.
//
// Directories on the way to the output root (the path the user named) are
// walked from "/" one component at a time without following symlinks, except
// a symlink owned by root or by us; each one must be owned by root or by us
// and not world-writable unless sticky (as /tmp); missing ones are made with
// `dir_mode` (0700 unless the user chose). Below the output root (a tree's
// copy: open_in with a directory from job/beneath.hpp) no symlink is followed
// at all. An existing DIR/NAME that is not a regular file (a symlink, a
// directory, a pipe, ...) or that is the source itself (same device and
// inode) is refused before anything is created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "files/beneath.hpp"
#include "files/chunk_digest.hpp"
#include "files/file_source.hpp"

namespace gridbcast::files {

// Alignment of offset, length and memory for FileSink's direct writes.
inline constexpr std::uint64_t kDirectAlign = 4096;

struct SinkOptions {
  std::uint32_t dir_mode = 0700;  // for directories this sink creates
  bool resume = false;            // reuse what DIR/.NAME.gridbcast-partial and DIR/NAME hold
  // The source on the root's host: a destination with the same device and
  // inode is the source (this rank is on the root's host, or the file system
  // is shared) and is refused. Both 0: unknown, not checked.
  std::uint64_t source_dev = 0;
  std::uint64_t source_ino = 0;
  bool direct_io = true;  // use O_DIRECT for aligned writes where the file system can
  // Below a tree's output root: a symbolic link at the final name is our copy
  // of a link the source no longer has, and the rename replaces it (the link,
  // never what it points to). Elsewhere such a link is refused.
  bool replace_symlink = false;
  // > 0: keep the chunk record for chunks of this size (see above).
  std::uint64_t chunk_bytes = 0;
};

// Throws std::runtime_error naming the node and what is wrong when a node name
// cannot be part of a path: only letters, digits, '-', '_' and '.', not empty,
// not "." or "..". (The topology loader refuses such names too.)
void check_node_name_for_path(const std::string& node);

// The launcher's check, before any rank starts, for ranks on the root's host:
// throws when `copy` is the source, by path (absolute, symlinks and "." resolved)
// or by device and inode (a hard link). The ranks check device and inode again
// before they open anything.
void refuse_copy_over_source(const std::string& copy, const std::string& source,
                             const FileMeta& source_meta);

// The directory `dir` and what is missing on the way to it, made with `mode`,
// with the checks FileSink::open makes of its directories: an output root.
UniqueFd open_output_dir(const std::string& dir, std::uint32_t mode);

// A symbolic link NAME in the directory `dir_fd` (at `dir_path`) pointing to
// `target` (copied as it is, never followed): made under a temporary name and
// renamed into place, replacing what is there unless it is a directory.
void place_symlink_at(int dir_fd, const std::string& dir_path, const std::string& name,
                      const std::string& target);

// The temporary name of DIR/NAME's copy in progress with resume.
std::string partial_name(const std::string& name);
// The name of its chunk record.
std::string chunk_record_name(const std::string& name);

// Removes DIR/.NAME.gridbcast-partial and its chunk record beside the whole
// copy DIR/NAME: a copy in progress that no run will resume, because its file
// is complete (a rank that became the root of its own copy). The directories
// are walked as FileSink::open walks them; each name is removed only when it
// is a regular file of ours with one link, and both only while this holds
// the partial's lock (no job is writing it; a record without its partial is
// left). Returns how many it removed; throws naming the path when the
// directory cannot be opened or a name not removed.
int discard_partial(const std::string& final_path);

class FileSink {
 public:
  // Checks the path and opens the temporary file at `meta.size` bytes (space
  // reserved with fallocate where the file system supports it, so a full disk
  // fails here, not in the middle). Throws naming the path and the errno text.
  static FileSink open(const std::string& final_path, const FileMeta& meta,
                       const SinkOptions& options);
  // The same for NAME in a directory opened already (`dir_path` names it in
  // messages); takes the descriptor over.
  static FileSink open_in(UniqueFd dir, const std::string& dir_path, const std::string& name,
                          const FileMeta& meta, const SinkOptions& options);
  FileSink() = default;
  FileSink(FileSink&& other) noexcept;
  FileSink& operator=(FileSink&& other) noexcept;
  ~FileSink();  // without commit(): keeps the partial copy if it holds a byte

  // Writes bytes at offset. Where the file system takes direct I/O (O_DIRECT)
  // and offset, length and address are multiples of kDirectAlign, the bytes
  // go straight to the device, bypassing the page cache: a copy of a large
  // file then neither costs a kernel memcpy per byte nor evicts the rest of
  // the cache. Anything else (a tail, tmpfs) goes through the page cache.
  // Either way the data is on disk after commit()'s fsync.
  void write(std::uint64_t offset, const std::byte* data, std::uint64_t bytes);
  bool direct_io() const { return direct_fd_ >= 0; }
  // Reads what the temporary file (resume: a partial of an earlier run) holds;
  // returns the bytes read (fewer at its end).
  std::uint64_t read_partial(std::uint64_t offset, std::byte* data, std::uint64_t bytes) const;
  // Where the temporary file holds data at or after `from`: the next data's
  // offset (its size when none follows) and the end of that data (the next
  // hole). The file is allocated whole, and a range allocated but never
  // written is a hole to the file system (SEEK_DATA, SEEK_HOLE), so a resume
  // reads only what an earlier run wrote. Where the file system cannot tell,
  // all of it is data.
  std::uint64_t partial_next_data(std::uint64_t from) const;
  std::uint64_t partial_next_hole(std::uint64_t from) const;
  // Reads what an existing DIR/NAME holds (resume); 0 when there is none.
  std::uint64_t read_existing(std::uint64_t offset, std::byte* data, std::uint64_t bytes) const;
  bool reused_partial() const { return reused_partial_; }
  // Resume: whether DIR/NAME existed (read_existing reads it).
  bool has_existing() const { return existing_fd_ >= 0; }
  // The chunk record: chunk c's digest, written once its bytes landed. Throws
  // for a chunk past the file's, or without a chunk size.
  void record(std::uint64_t chunk, const Digest& d);
  // Per chunk, whether the sealed record of an earlier run says the partial
  // holds it with the digest `want` gives; all false when there is no such
  // record. `want` has one digest per chunk.
  std::vector<bool> recorded(const std::vector<Digest>& want) const;
  // fsync, the source's mode and mtime, rename into place, fsync the
  // directory; without `sync_dir` the caller fsyncs the directory after the
  // rename (a batch of small files does it once per directory, not per file).
  void commit(bool sync_dir = true);

  const std::string& final_path() const { return final_path_; }
  std::string temp_path() const { return dir_path_ + "/" + temp_name_; }

 private:
  void release();
  void lock_partial();
  void open_record(bool keep);
  bool load_record();
  std::string record_path() const { return dir_path_ + "/" + record_name_; }
  std::string final_path_, dir_path_, name_, temp_name_, record_name_;
  FileMeta meta_;
  std::uint64_t chunk_bytes_ = 0, chunks_ = 0;
  bool record_trusted_ = false;  // the record is an earlier run's, sealed on this partial
  int record_fd_ = -1;
  int seal_slot_ = -1;
  bool reused_partial_ = false;
  bool committed_ = false;
  bool held_ = false;  // holds bytes of this run or an earlier one: kept on failure
  int dir_fd_ = -1;
  int fd_ = -1;
  int existing_fd_ = -1;
  int direct_fd_ = -1;  // the temporary file again, with O_DIRECT; -1: not supported
  int cleanup_slot_ = -1;
};

// Handlers for SIGINT, SIGTERM and SIGHUP that remove every temporary file of a
// live FileSink, then end the process with the same signal. Call once per
// process (a rank's driver), before the first FileSink.
void install_signal_cleanup();

}  // namespace gridbcast::files
