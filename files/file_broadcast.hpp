// One file from the root to every rank, streamed in windows of chunks, with
// no protocol of its own beyond the Communicator (the driver reports the
// FileResult to the launcher however the control protocol does).
//
//   root                                   every other rank
//   ----                                   ----------------
//   open source, stat          header ──►  check path, open temp file (FileSink),
//   [resume: digest every chunk] list ──►  [resume: keep chunks whose digest matches]
//                              ◄── status  "ok" + chunks it needs, or the error
//   union of the needs; abort  plan ───►   (any rank's error fails every rank,
//     if any rank failed                    naming that rank, before data moves)
//   per window of needed chunks:
//     read + digest (window k+1) ║ bcast [digests | chunk data] (window k) ║
//                                          check each chunk's digest, pwrite
//                                          (window k-1)
//   (reports its root digest)              fsync, mode, mtime, rename; root digest
//
// Memory per rank: two window halves of `window_bytes / 2` (double buffering:
// the network fills one while the disk drains the other), independent of the
// file size. The chunk size is the root's, at most half a window.
//
// Compressed (--compress, files/compress.hpp), a window's length is known only
// once the root has packed it: each window's head says the next one's, so the
// root packs window k+1 before it sends window k and keeps three buffers of
// about a third of the window each (see stream_windows).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "files/chunk_digest.hpp"
#include "files/compress.hpp"
#include "files/file_sink.hpp"
#include "runtime/communicator.hpp"

namespace gridbcast::files {

inline constexpr std::uint64_t kDefaultWindowBytes = 64ull << 20;
// A file of at least this many chunks goes in at least this many windows
// (each at most half of --window): see per_window in file_broadcast.cpp.
inline constexpr std::uint64_t kMinWindows = 8;

struct FileSpec {
  std::string source;  // the root's: path of the file to send
  // broadcast_tree only, the root's: several files or directories, each copied
  // to OUTPUT/NAME (NAME: its last path component); empty: `source` alone,
  // copied to OUTPUT.
  std::vector<std::string> sources;
  std::string output;  // every other rank's: final path of its copy
  // The size the launcher announced of the one regular file the job sends
  // (`source` or, a directory, the one it holds). The root's: a source file
  // of another size fails the job before data moves (it changed since the
  // launch began). broadcast_tree begins its windows' connections with the
  // job (prepare_file).
  std::optional<std::uint64_t> expected_size;
  std::uint64_t window_bytes = 0;  // memory per rank for data in flight; 0: kDefaultWindowBytes
  std::uint64_t chunk_bytes = 0;   // 0: 4 MiB, or half the window if that is smaller
  bool resume = false;             // keep verified chunks of a partial or an existing copy
  // The root's, with resume: a file larger than this has its chunks digested
  // only where some rank may hold them (its partial has data there, or it
  // has a copy under the final name), after one more exchange; a smaller one
  // is digested whole at once. After a loss that is what was sent before it.
  std::uint64_t digests_on_demand_above = 64ull << 20;
  std::uint32_t dir_mode = 0700;  // directories the copy's path needs
  // The source's device and inode on the root's host (the launcher's stat);
  // a destination that is the same file is refused. 0/0: taken from the root's
  // header, which is enough on the root's own host.
  std::uint64_t source_dev = 0;
  std::uint64_t source_ino = 0;
  std::optional<topology::Algorithm> algorithm;
  // The root's: whether chunks travel compressed (files/compress.hpp); the
  // root's choice reaches every rank in the header.
  Compression compress = Compression::kOff;
  // The root's: opens the source instead of FileSource::open(source) (a
  // tree's file, reached below its directory without following links).
  std::function<FileSource()> open_source;
  // Every other rank's: opens the copy instead of FileSink::open(output, ...)
  // (a tree's file, below the output root without following links).
  std::function<FileSink(const FileMeta&, const SinkOptions&)> open_sink;
  // Told the bytes this rank reads, hashes or writes (from any thread), so the
  // launcher sees a long check of an existing copy as progress. May be empty.
  std::function<void(std::uint64_t bytes)> on_work;
  // Called on every rank after each window (index from 0) is broadcast; tests
  // stop a rank mid-transfer with it.
  std::function<void(std::uint64_t window)> after_window;
  // Called on every non-root rank with a window as it arrived, before its
  // chunks are checked and written; tests damage a chunk in flight with it.
  std::function<void(std::uint64_t window, std::byte* data, std::uint64_t bytes)> on_arrival;
  // broadcast_tree's batches of small files (files/file_batch.hpp): called
  // on every rank after batch k is broadcast, and on every non-root rank
  // with batch k as it arrived.
  std::function<void(std::uint64_t batch)> after_batch;
  std::function<void(std::uint64_t batch, std::byte* data, std::uint64_t bytes)> on_batch_arrival;
};

struct FileResult {
  std::string path;  // root: the source; other ranks: where the copy is
  std::string name;  // broadcast_tree: the file's path within the job (its name, or under a tree)
  std::uint64_t size = 0;
  std::uint32_t mode = 0;
  FileTime mtime;
  std::string root_digest;  // hex; equal on every rank when every copy is whole
  std::uint64_t chunk_bytes = 0;
  std::uint64_t chunks = 0;       // in the file
  std::uint64_t chunks_sent = 0;  // broadcast in this run (what any rank needed)
  std::uint64_t chunks_kept = 0;  // this rank: held already and verified (resume)
  // Of those, the chunks its sealed chunk record vouched for (an earlier run
  // verified them as they landed), not read back.
  std::uint64_t chunks_trusted = 0;
  // The root's, with resume: the chunks it digested before the plan (every
  // chunk, or with digests on demand those some rank may hold).
  std::uint64_t chunks_digested = 0;
  std::uint64_t bytes_sent = 0;  // bytes of the chunks broadcast
  std::uint64_t windows = 0;
  std::string algorithm;           // what the broadcasts of the largest window ran
  std::uint64_t buffer_bytes = 0;  // this rank's window buffers
  double seconds = 0;
  // From the start to the plan: the root's digests and, with resume, every
  // rank's check of what it holds (no data moves before the plan).
  double check_seconds = 0;
  bool compressed = false;       // the chunks travelled packed by zstd
  std::string compression_why;   // the root's, with auto: what it measured
  std::uint64_t wire_bytes = 0;  // bytes of the windows' broadcasts (heads and digests too)
};

// "rank R (node N)": how the file pipeline names a rank in its messages.
std::string rank_name(const runtime::Communicator& comm, int rank);

// Begins the connections on which a broadcast_file of `size` bytes under
// `spec` from `root` streams its windows when every chunk moves (no resume;
// not compressed, or auto: their plan is priced on the bytes uncompressed),
// so that their handshakes (round trips across a WAN link, with their
// authentication) overlap the start-up exchange; the file's own header
// prepares them again (a link being made is waited for, not made twice).
// Nothing for a spec the header would refuse; never throws for a link that
// cannot be made (the broadcast makes it again and names the failure).
void prepare_file(runtime::Communicator& comm, const FileSpec& spec, std::uint64_t size, int root);

// Still-working notes between the root and every other rank in `context`,
// sent before they wait for anything of each other's: each opens the
// connection its sender will send on (one per ordered pair of ranks; a round
// trip or more across a WAN link, with its authentication), which is then
// made while they wait, and the root's go and the ranks' reports find it
// ready. A non-root rank gets its one note to the root. Wait on them before
// returning (close_lines).
std::vector<runtime::P2pRequest> open_lines(runtime::Communicator& comm, int root,
                                            std::uint64_t context);
// Waits for `lines` (open_lines in `context`) to leave, then takes the notes
// that came the other way: the root one from every other rank, every other
// rank the root's. The root thus runs its communicator until every rank's
// connection to it is made: one that returned after its own sends would leave
// a rank that reached the tree late waiting for the handshake of a root that
// no longer answers (a small file is sent before that rank starts).
void close_lines(runtime::Communicator& comm, int root,
                 const std::vector<runtime::P2pRequest>& lines, std::uint64_t context);
// Takes the still-working notes that have arrived, which nothing else waits
// for (a tree of many files would pile them up otherwise).
void take_notes(runtime::Communicator& comm);

// Broadcasts this rank started and still reads or fills buffers of the
// scope that holds them: whatever ends the scope, they end first
// (Communicator::settle; a failure while leaving on another error is not
// reported over it). Declare it after those buffers.
class InFlight {
 public:
  explicit InFlight(runtime::Communicator& comm) : comm_(comm) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight();
  void add(runtime::P2pRequest r) { going_.push_back(std::move(r)); }
  // Waits for all of them; throws like Communicator::wait.
  void wait();

 private:
  runtime::Communicator& comm_;
  std::vector<runtime::P2pRequest> going_;
};

// A header the tree's or a file's ranks decide by: the root starts its
// broadcast and goes on (its sends over a link not yet made, a round trip or
// two across a WAN link, no longer hold up what it sends next on the links
// that are), every other rank waits for it. On the root `sent` keeps it.
runtime::BcastInfo broadcast_header(runtime::Communicator& comm, void* data, std::uint64_t bytes,
                                    int root, std::optional<topology::Algorithm> algorithm,
                                    InFlight& sent);

// Every rank calls it with the same root. Throws std::runtime_error starting
// "rank R (node N): " with the path and the errno text, or naming the rank
// that failed first when another rank's failure stops this one.
FileResult broadcast_file(runtime::Communicator& comm, const FileSpec& spec, int root);

}  // namespace gridbcast::files
