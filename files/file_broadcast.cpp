#include "files/file_broadcast.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

#include "files/compress.hpp"
#include "files/file_source.hpp"
#include "files/file_wire.hpp"
#include "lanes/log.hpp"
#include "runtime/buffer.hpp"
#include "topology/bound.hpp"

namespace gridbcast::files {
namespace {

// Messages of this module, in network byte order. The header and the plan are
// broadcast; each rank's status goes to the root as a point-to-point message
// in a context of its own.
constexpr std::uint64_t kPlanBytes = 1024;  // + the bitmap of needed chunks
constexpr std::int64_t kStatusTag = 1;
// With digests on demand, each rank's bitmap of the chunks it may hold, to
// the root before the digests.
constexpr std::int64_t kMayHoldTag = 4;

// Sends kStillWorkingTag to `to` at most every quarter of the communicator's
// timeout, when tick() is called (none when there is no timeout).
class StillWorking {
 public:
  StillWorking(runtime::Communicator& comm, std::vector<int> to)
      : comm_(comm), to_(std::move(to)), every_(comm.timeout() / 4), last_(Clock::now()) {}
  void tick() {
    if (comm_.timeout() >= runtime::kNoTimeout || Clock::now() - last_ < every_) return;
    const std::byte b{0};
    for (int r : to_) comm_.send(r, kFileContext, kStillWorkingTag, &b, 1);
    last_ = Clock::now();
  }
  void also(int r) { to_.push_back(r); }

 private:
  using Clock = std::chrono::steady_clock;
  runtime::Communicator& comm_;
  std::vector<int> to_;
  std::chrono::milliseconds every_;
  Clock::time_point last_;
};

// A non-root rank: waits for the root's go, taking its still-working notes.
void await_go(runtime::Communicator& comm, int root) {
  std::byte b{};
  for (;;) {
    const runtime::Received got = comm.receive(root, kFileContext, std::nullopt, &b, 1);
    if (got.tag == kGoTag) return;
    if (got.tag != kStillWorkingTag)
      throw std::runtime_error("rank " + std::to_string(root) +
                               " sent an unexpected file message (tag " + std::to_string(got.tag) +
                               ")");
  }
}

// To every rank at once: each first message to a rank opens its connection
// (a round trip or more across a WAN link), and one after the other they
// added up to 0.2 s on testbed-2x4.
std::vector<runtime::P2pRequest> start_go(runtime::Communicator& comm, int root) {
  static const std::byte b{1};
  std::vector<runtime::P2pRequest> sends;
  for (int r = 0; r < comm.size(); ++r)
    if (r != root) sends.push_back(comm.isend(r, kFileContext, kGoTag, &b, 1));
  return sends;
}
void send_go(runtime::Communicator& comm, int root) {
  auto sends = start_go(comm, root);
  comm.wait(sends, sends.size());
}

// Whether `bytes` bytes at `data` are all zero, at memory speed.
bool all_zero(const std::byte* data, std::uint64_t bytes) {
  return bytes == 0 || (data[0] == std::byte{0} && std::memcmp(data, data + 1, bytes - 1) == 0);
}

// Whether the chunk at `data` matches `want`. A chunk of zeros (what a
// partial reads as where nothing landed, on a file system that cannot report
// its holes) is told apart by a scan at memory speed, not a SHA-256: `zeros`
// remembers the digest of a zero chunk of each length.
bool holds(const std::byte* data, std::uint64_t bytes, const Digest& want,
           std::vector<std::pair<std::uint64_t, Digest>>& zeros) {
  if (all_zero(data, bytes)) {
    auto it = std::find_if(zeros.begin(), zeros.end(), [&](auto& z) { return z.first == bytes; });
    if (it == zeros.end()) it = zeros.insert(zeros.end(), {bytes, sha256(data, bytes)});
    return it->second == want;
  }
  return sha256(data, bytes) == want;
}

bool test_bit(const std::vector<std::uint8_t>& bits, std::uint64_t i) {
  return (bits[i / 8] >> (i % 8)) & 1;
}
void set_bit(std::vector<std::uint8_t>& bits, std::uint64_t i) {
  bits[i / 8] = static_cast<std::uint8_t>(bits[i / 8] | (1u << (i % 8)));
}

// Every page touched now (runtime::MappedBuffer::anonymous): faulting pages in
// inside the kernel's receive path made a single-window broadcast 4x slower.
runtime::MappedBuffer allocate(std::uint64_t bytes) {
  return runtime::MappedBuffer::anonymous(std::max<std::uint64_t>(bytes, 1));
}

// A window's buffer: the digests of its chunks, padded to kDirectAlign so the
// data is aligned for direct writes, then their bytes back to back.
//   [ d(c0) | d(c1) | ... | d(ck-1) | pad | bytes of c0 | bytes of c1 | ... ]
std::uint64_t digest_area(std::uint64_t chunks) {
  const std::uint64_t bytes = chunks * sizeof(Digest);
  return (bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}

// What the root's header gives a file of `size` bytes under `spec`; it checks
// that they fit (agree_header).
std::uint64_t window_bytes_of(const FileSpec& spec) {
  return spec.window_bytes ? spec.window_bytes : kDefaultWindowBytes;
}
std::uint64_t chunk_bytes_for(const FileSpec& spec, std::uint64_t size) {
  if (spec.chunk_bytes) return spec.chunk_bytes;
  const std::uint64_t c =
      std::max<std::uint64_t>(1, std::min(kDefaultChunkBytes, window_bytes_of(spec) / 2));
  // Chunks are bounded in number (every rank sizes its digests from the
  // count): a file that would need more gets larger chunks, within half the
  // window.
  return chunk_count(size, c) > kMaxChunks ? chunk_count(size, kMaxChunks) : c;
}
// Whether the header may carry them (the window 2 bytes to kMaxWindowBytes,
// chunks within half of it and at most kMaxChunks of them).
bool sizes_fit(std::uint64_t window_bytes, std::uint64_t chunk_bytes, std::uint64_t size) {
  return window_bytes >= 2 && window_bytes <= kMaxWindowBytes && chunk_bytes >= 1 &&
         chunk_bytes <= window_bytes / 2 && chunk_count(size, chunk_bytes) <= kMaxChunks;
}

// Chunks per window: what one of the `nbufs` buffers sharing the window
// holds, but no more than an eighth of the file's chunks (rounded up), so
// that the root's first read and digest and the ranks' last check and write,
// which do not overlap the network, are a small part of a medium file too: a
// 64 MiB file on testbed-2x4 took 1.52 x the bound in two 32 MiB windows,
// 1.28 x in eight of 8 MiB, 1.21 x once the start-up exchange overlapped its
// connections (docs/FILES.md, "Figures"); sixteen of 4 MiB were no faster.
// Every rank computes it from the header alike.
std::uint64_t chunks_per_window(std::uint64_t window_bytes, std::uint64_t chunk_bytes,
                                std::uint64_t count, int nbufs) {
  return std::max<std::uint64_t>(
      1, std::min((window_bytes / static_cast<std::uint64_t>(nbufs)) / chunk_bytes,
                  std::max<std::uint64_t>(1, (count + kMinWindows - 1) / kMinWindows)));
}

// Begins the connections of the windows' broadcast when every chunk moves
// (Communicator::prepare): its first window's bytes and the stream's, as
// they go uncompressed.
void prepare_stream(runtime::Communicator& comm, const ChunkLayout& layout,
                    std::uint64_t per_window, int root,
                    std::optional<topology::Algorithm> algorithm) {
  const std::uint64_t count = layout.count();
  if (count == 0) return;
  std::uint64_t first = 0, stream = 0;
  for (std::uint64_t c = 0; c < count; c += per_window) {
    const std::uint64_t n = std::min(per_window, count - c);
    std::uint64_t bytes = digest_area(n);
    for (std::uint64_t j = c; j < c + n; ++j) bytes += layout.length(j);
    if (c == 0) first = bytes;
    stream += bytes;
  }
  comm.prepare(first, root, algorithm, stream);
}

struct WindowLayout {
  std::vector<std::uint64_t> chunks;  // indices into the file's chunks
  std::vector<std::uint64_t> stored;  // their lengths
  std::uint64_t data = 0;             // their bytes
  std::uint64_t bytes = 0;            // uncompressed: digests + data
};

void put_u64(std::byte* at, std::uint64_t v) {
  WireWriter(at).u64(v);
}

// One rank's part in one file's broadcast, as the stages every rank goes
// through in step: agree on the header (and, with resume, the digests), open
// the copy and check what it holds, agree on the plan (which chunks move, or
// who failed), stream the windows. Without resume or compression the middle
// two are skipped (every chunk moves; start_at_once): the windows follow the
// header, each rank opens its copy while the first comes, and one that
// cannot relays them for the others and fails at the end. Each stage's state
// is a member the later stages read.
struct FileRun {
  FileRun(runtime::Communicator& c, const FileSpec& s, int r)
      : comm(c), spec(s), root(r), rank(c.rank()), is_root(c.rank() == r), me(who(c.rank())) {}

  runtime::Communicator& comm;
  const FileSpec& spec;
  const int root;
  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  const int rank;
  const bool is_root;
  const std::string me;

  FileHeader h;
  FileSource source;            // the root's
  std::vector<Digest> digests;  // per chunk; filled as chunks are read or land
  runtime::BcastInfo info;      // of the header's broadcast, then the first window's
  ChunkLayout layout;
  std::uint64_t count = 0, bitmap_bytes = 0, per_window = 0, buffer_bytes = 0;
  FileSink sink;                     // every other rank's copy
  std::uint64_t kept = 0;            // chunks held already (resume)
  std::uint64_t trusted = 0;         // of which on the chunk record's word
  std::uint64_t digested = 0;        // the root's, with resume: chunks digested before the plan
  std::vector<std::uint8_t> needed;  // this rank's, then the plan's (any rank's)
  // Two window buffers, three when compressed (the root packs window k+1
  // while window k is sent and k+2 while k+1 is).
  runtime::MappedBuffer bufs[3];
  int nbufs = 2;
  runtime::MappedBuffer stage;  // compressed: one chunk as stored
  std::unique_ptr<ChunkCompressor> packer;
  std::unique_ptr<ChunkDecompressor> unpacker;
  std::string compression_why;
  std::vector<std::uint64_t> wire;  // per window, the bytes of its broadcast
  std::string my_error;             // this rank's failure before the plan, said in its status
  double check_seconds = 0;
  std::vector<std::uint64_t> todo;  // the chunks that move
  std::vector<WindowLayout> windows;
  // A non-root rank's first message to the root, a still-working note sent
  // before the header so that the connection it opens (a round trip or more
  // across a WAN link) is made while the header comes; waited on before the
  // status, which it must precede.
  runtime::P2pRequest hello;
  // The root's goes before the header, waited on after it (streaming at
  // once, after the first window).
  std::vector<runtime::P2pRequest> go;
  // Without resume or compression every chunk moves whatever the ranks hold,
  // so no report of theirs can change the windows: they start right after
  // the header, and a rank that cannot open its copy relays them for the
  // ranks below it and fails at the end (start_at_once).
  bool at_once = false;
  // Streaming at once, every other rank's copy, opened on a thread of its own
  // while the first window comes; what failed, or empty.
  std::future<std::string> opening;
  // The header, and on the root its broadcast while it goes on.
  std::vector<std::byte> header_buf = std::vector<std::byte>(kFileHeaderBytes);
  InFlight header_going{comm};
  // The root's read of the first window, started while the ranks report (at
  // once: while the header goes) (declared last: joined before everything it
  // uses goes).
  std::future<std::uint64_t> first_fill;

  std::string who(int r) const { return rank_name(comm, r); }
  void agree_header();
  void shape();
  void open_buffers();
  void open_copy();
  std::string open_all();
  void prepare_windows();
  void start_at_once();
  void take_opening();
  void gather(std::int64_t tag, std::vector<std::byte>& buf, StillWorking& note,
              const std::function<void(int, std::uint64_t)>& take);
  void digest_source(const std::vector<std::uint8_t>& which);
  void agree_digests_on_demand(const std::vector<bool>& may_hold);
  void open_and_check();
  void agree_plan();
  void plan_windows();
  std::uint64_t fill(size_t k, std::byte* buf, const std::function<void()>& each_chunk = {});
  void drain(size_t k, const std::byte* buf, const WindowHead& head);
  std::pair<std::uint64_t, std::uint64_t> wire_range(size_t k) const;
  void stream_windows();
  FileResult result() const;
};

}  // namespace

void FileRun::agree_header() {
  // 1. The header: the source's size, mode, mtime and identity, the chunk and
  // window sizes everyone uses, or why the root cannot send.
  if (is_root) {
    try {
      source = spec.open_source ? spec.open_source() : FileSource::open(spec.source);
      h.meta = source.meta();
      if (spec.expected_size && *spec.expected_size != h.meta.size)
        throw std::runtime_error(spec.source + ": changed size since the launch began (" +
                                 std::to_string(h.meta.size) + " bytes, " +
                                 std::to_string(*spec.expected_size) + " announced)");
      h.window_bytes = window_bytes_of(spec);
      h.chunk_bytes = chunk_bytes_for(spec, h.meta.size);
      if (!sizes_fit(h.window_bytes, h.chunk_bytes, h.meta.size))
        throw std::runtime_error(spec.source + ": " + std::to_string(h.meta.size) +
                                 " bytes do not fit in at most " + std::to_string(kMaxChunks) +
                                 " chunks of at most half the " + std::to_string(h.window_bytes) +
                                 "-byte window (the window may be 2 bytes to " +
                                 std::to_string(kMaxWindowBytes) + " bytes: --window)");
      h.resume = spec.resume;
      h.compressed = spec.compress == Compression::kZstd;
      if (spec.compress == Compression::kAuto) {
        // The best rate the grid allows from this root, in bytes per second.
        double network = 0;
        if (comm.size() > 1) network = topology::max_flow_bound(comm.grid(), root).rate_bps / 8;
        const CompressionChoice c = choose_compression(source, h.meta.size, network);
        h.compressed = c.compress;
        compression_why = std::string("auto chose ") + (c.compress ? "zstd" : "off") + ": " + c.why;
      }
      if (h.resume) {
        // Every chunk's digest before any data moves, so ranks can tell which
        // chunks they hold already; for a large file only those some rank
        // may hold, once they said which (agree_digests_on_demand).
        h.digests_on_demand = comm.size() > 1 && h.meta.size > spec.digests_on_demand_above;
        if (!h.digests_on_demand) {
          const ChunkLayout all{h.meta.size, h.chunk_bytes};
          digest_source(std::vector<std::uint8_t>((all.count() + 7) / 8, 0xff));
        }
      }
    } catch (const std::exception& e) {
      h.ok = false;
      h.error = e.what();
    }
    // Streaming at once, the first window is read and digested while the
    // header goes (40 ms for 8 MiB here).
    at_once = h.ok && !h.resume && !h.compressed;
    if (at_once) {
      shape();
      h.error = open_all();
      h.ok = h.error.empty();
      if (h.ok) {
        needed.assign(bitmap_bytes, 0xff);
        plan_windows();
        if (!windows.empty())
          first_fill = std::async(std::launch::async, [this] { return fill(0, bufs[0].data()); });
      }
    }
    encode_file_header(h, header_buf.data());
    go = start_go(comm, root);
  } else {
    hello = open_lines(comm, root, kFileContext).front();
    await_go(comm, root);
  }
  info = broadcast_header(comm, header_buf.data(), kFileHeaderBytes, root, spec.algorithm,
                          header_going);
  // The root's goes are waited for after the header, not before it: each
  // first message to a rank opens a connection, a round trip or two across a
  // WAN link, and the header's broadcast makes its own meanwhile (on
  // testbed-2x4 site a's ranks had the header 65 ms after the start, when
  // the last go to site b had left).
  if (is_root && (!at_once || !h.ok)) comm.wait(go, go.size());
  if (!is_root) {
    try {
      h = decode_file_header(header_buf);
    } catch (const FileWireError& e) {
      throw std::runtime_error(me + ": refused before anything was written: " + e.what());
    }
  }
  if (!h.ok) {
    if (is_root) throw std::runtime_error(me + ": " + h.error);
    throw std::runtime_error(me + ": stopped: the root, " + who(root) +
                             ", cannot send: " + h.error);
  }
  // The root streaming at once is reading its first window already.
  if (!is_root) {
    at_once = !h.resume && !h.compressed;
    shape();
  } else if (!at_once) {
    shape();
  }
  if (h.resume && !h.digests_on_demand)
    comm.bcast(digests.data(), count * sizeof(Digest), root, spec.algorithm);
}

// The root, with resume: reads and digests the chunks set in `which` (a
// bitmap over the source's chunks), telling every other rank it still works.
void FileRun::digest_source(const std::vector<std::uint8_t>& which) {
  std::vector<int> others;
  for (int r = 0; r < comm.size(); ++r)
    if (r != root) others.push_back(r);
  StillWorking note(comm, std::move(others));
  const ChunkLayout all{h.meta.size, h.chunk_bytes};
  auto buf = allocate(h.chunk_bytes);
  digests.resize(all.count());
  for (std::uint64_t i = 0; i < all.count(); ++i) {
    if (!test_bit(which, i)) continue;
    source.read(all.offset(i), buf.data(), all.length(i));
    digests[i] = sha256(buf.data(), all.length(i));
    ++digested;
    if (spec.on_work) spec.on_work(all.length(i));
    note.tick();
  }
}

// The root: one message of `tag` from every other rank, in the order they
// come, each handed to `take` (its rank and length; the bytes in `buf`).
// Still-working notes are taken as they come, and the ranks that reported
// hear through `note` that the root still waits for the others; a rank that sends anything
// else, or twice, fails the root naming it, and a deadline names the ranks
// not heard from.
void FileRun::gather(std::int64_t tag, std::vector<std::byte>& buf, StillWorking& note,
                     const std::function<void(int, std::uint64_t)>& take) {
  std::vector<bool> heard(static_cast<size_t>(comm.size()), false);
  heard[static_cast<size_t>(root)] = true;
  for (int reported = 0; reported < comm.size() - 1;) {
    note.tick();
    runtime::Received got;
    try {
      got = comm.receive(std::nullopt, kFileContext, std::nullopt, buf.data(), buf.size());
    } catch (const std::exception& e) {
      std::string waiting;
      for (int r = 0; r < comm.size(); ++r)
        if (!heard[static_cast<size_t>(r)]) waiting += (waiting.empty() ? "" : ", ") + who(r);
      throw std::runtime_error(std::string(e.what()) + " (still checking: " + waiting + ")");
    }
    if (got.tag == kStillWorkingTag) continue;
    const int r = got.source;
    if (got.tag != tag || r == root || heard[static_cast<size_t>(r)])
      throw std::runtime_error(me + ": " + who(r) + " sent an unexpected file message (tag " +
                               std::to_string(got.tag) + ")");
    heard[static_cast<size_t>(r)] = true;
    ++reported;
    note.also(r);
    take(r, std::min<std::uint64_t>(got.bytes, buf.size()));
  }
}

// Digests on demand (a large file with resume): every other rank sends the
// chunks it may hold (`may_hold`: where its partial has data, or all of them
// when it has a copy under the final name); the root digests their union and
// broadcasts the digests, zero where nobody may hold a chunk (it moves, and
// is checked against the digest sent with it).
void FileRun::agree_digests_on_demand(const std::vector<bool>& may_hold) {
  std::vector<std::uint8_t> bits(bitmap_bytes, 0);
  if (is_root) {
    // One byte more than a bitmap: a longer message is seen as one.
    std::vector<std::byte> msg(bitmap_bytes + 1);
    StillWorking note(comm, {});
    gather(kMayHoldTag, msg, note, [&](int r, std::uint64_t bytes) {
      if (bytes != bitmap_bytes)
        throw std::runtime_error(me + ": " + who(r) + " said which chunks it may hold in " +
                                 (bytes > bitmap_bytes ? "more than " + std::to_string(bitmap_bytes)
                                                       : std::to_string(bytes)) +
                                 " bytes, where " + std::to_string(count) + " chunks take " +
                                 std::to_string(bitmap_bytes));
      const auto* theirs = reinterpret_cast<const std::uint8_t*>(msg.data());
      if (count % 8 != 0 && (theirs[bitmap_bytes - 1] >> (count % 8)) != 0)
        throw std::runtime_error(me + ": " + who(r) + " said it may hold chunks past the file's " +
                                 std::to_string(count));
      for (std::uint64_t b = 0; b < bitmap_bytes; ++b)
        bits[b] = static_cast<std::uint8_t>(bits[b] | theirs[b]);
    });
    if (my_error.empty()) {
      try {
        digest_source(bits);
      } catch (const std::exception& e) {
        my_error = e.what();  // said in the plan, like any failure before it
      }
    }
    send_go(comm, root);
  } else {
    for (std::uint64_t i = 0; i < count; ++i)
      if (may_hold[i]) set_bit(bits, i);
    comm.send(root, kFileContext, kMayHoldTag, bits.data(), bitmap_bytes);
    await_go(comm, root);
  }
  comm.bcast(digests.data(), count * sizeof(Digest), root, spec.algorithm);
}

// The chunks and windows every rank derives from the header alike.
void FileRun::shape() {
  layout = ChunkLayout{h.meta.size, h.chunk_bytes};
  count = layout.count();
  bitmap_bytes = (count + 7) / 8;
  digests.resize(count);
  // Compressed, three buffers share the window.
  nbufs = h.compressed ? 3 : 2;
  per_window = chunks_per_window(h.window_bytes, h.chunk_bytes, count, nbufs);
  buffer_bytes = (h.compressed ? window_head_bytes(per_window) : digest_area(per_window)) +
                 per_window * h.chunk_bytes;
}

// Without resume every chunk moves, so the windows' broadcast is known once
// the header is: its connections are made while the ranks open their copies
// (and report), not when the first window starts (a WAN link's handshakes are
// round trips). With compression the windows are shorter on the wire, but
// their algorithm and segment are priced from these bytes alike.
void FileRun::prepare_windows() {
  if (!h.resume) prepare_stream(comm, layout, per_window, root, spec.algorithm);
}

// The window buffers, and compressed, the packer or unpacker.
void FileRun::open_buffers() {
  for (int b = 0; b < nbufs; ++b) bufs[b] = allocate(buffer_bytes);
  if (h.compressed) {
    stage = allocate(h.chunk_bytes);
    if (is_root)
      packer = std::make_unique<ChunkCompressor>();
    else
      unpacker = std::make_unique<ChunkDecompressor>();
  }
}

// Every other rank's copy (files/file_sink.hpp): beneath the output, never
// through a link, refused where it would be the source.
void FileRun::open_copy() {
  SinkOptions so;
  so.dir_mode = spec.dir_mode;
  so.resume = h.resume;
  so.chunk_bytes = h.chunk_bytes;  // the chunk record: what lands, for a later resume
  so.source_dev = spec.source_dev || spec.source_ino ? spec.source_dev : h.meta.dev;
  so.source_ino = spec.source_dev || spec.source_ino ? spec.source_ino : h.meta.ino;
  sink = spec.open_sink ? spec.open_sink(h.meta, so) : FileSink::open(spec.output, h.meta, so);
}

// Both; what failed, or empty.
std::string FileRun::open_all() {
  try {
    open_buffers();
    if (!is_root) open_copy();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Streaming at once (every other rank; the root's first window is being read
// since before the header): the buffers now, since a rank relays the windows
// to the ranks below it whatever becomes of its copy, and the copy on a
// thread of its own while the first window comes. On testbed-2x4 this starts
// a 64 MiB file's windows 0.2 s sooner than the report and the plan did.
void FileRun::start_at_once() {
  check_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (is_root) return;
  prepare_windows();
  try {
    open_buffers();
  } catch (const std::exception& e) {
    throw std::runtime_error(me + ": " + e.what());
  }
  needed.assign(bitmap_bytes, 0xff);
  plan_windows();
  opening = std::async(std::launch::async, [this]() -> std::string {
    try {
      open_copy();
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  });
}

// Streaming at once, every other rank: whether its copy opened. One that did
// not is said at once (the rank goes on relaying and fails at the end).
void FileRun::take_opening() {
  if (!opening.valid()) return;
  my_error = opening.get();
  if (!my_error.empty())
    lanes::log::notice("gridbcast rank " + std::to_string(rank) + ": " + my_error +
                       "; relaying the file for the others, then failing");
}

void FileRun::open_and_check() {
  // 2. Every other rank opens its copy (and with resume keeps what it holds
  // already), then tells the root it is ready and which chunks it needs.
  needed.assign(bitmap_bytes, 0);
  prepare_windows();
  // The buffers and the copy are opened on a thread of their own while the
  // communicator (on this one) finishes the connection to the root that the
  // still-working note before the header began, so the status below does not
  // wait for it: a round trip or more across a WAN link, 60 ms on
  // testbed-2x4 when the note left after the header.
  if (is_root) {
    my_error = open_all();
    if (h.digests_on_demand) agree_digests_on_demand({});
    return;
  }
  opening = std::async(std::launch::async, [this] { return open_all(); });
  comm.wait({hello}, 1);  // if it throws, the run's destructor waits for the open
  my_error = opening.get();
  // Where the partial holds data, asked before anything is read: reading
  // a range never written (and the kernel's read-ahead past it) fills the
  // page cache with zeros, which SEEK_DATA then reports as data.
  // One step per extent of data, each past the last.
  std::vector<bool> may_hold(count, false);
  if (my_error.empty() && h.resume && sink.reused_partial()) {
    try {
      for (std::uint64_t at = sink.partial_next_data(0); at < h.meta.size;) {
        const std::uint64_t end = sink.partial_next_hole(at);
        for (std::uint64_t c = at / h.chunk_bytes; c < count && layout.offset(c) < end; ++c)
          may_hold[c] = true;
        at = sink.partial_next_data(end);
      }
    } catch (const std::exception& e) {
      my_error = e.what();
    }
  }
  if (h.digests_on_demand) {
    // A copy under the final name may hold any chunk.
    std::vector<bool> asked = may_hold;
    if (my_error.empty() && sink.has_existing()) asked.assign(count, true);
    agree_digests_on_demand(my_error.empty() ? asked : std::vector<bool>(count, false));
  }
  if (!my_error.empty()) return;
  try {
    StillWorking note(comm, {root});
    std::vector<std::pair<std::uint64_t, Digest>> zeros;
    // The chunks an earlier run verified as they landed, on its sealed record
    // (files/file_sink.hpp): not read back nor digested again.
    const std::vector<bool> recorded =
        h.resume && sink.reused_partial() ? sink.recorded(digests) : std::vector<bool>(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      if (h.resume) note.tick();
      const std::uint64_t off = layout.offset(i), len = layout.length(i);
      bool have = false;
      if (recorded[i]) {
        ++trusted;
        ++kept;
        continue;
      }
      // With digests on demand, a chunk nobody may hold has no digest: it moves.
      const bool known = !h.digests_on_demand || digests[i] != Digest{};
      if (h.resume && known) {
        std::byte* b = bufs[0].data();
        if (may_hold[i] && sink.read_partial(off, b, len) == len &&
            holds(b, len, digests[i], zeros)) {
          have = true;
        } else if (sink.read_existing(off, b, len) == len && holds(b, len, digests[i], zeros)) {
          sink.write(off, b, len);
          have = true;
        }
        if (have) sink.record(i, digests[i]);
      }
      if (h.resume && spec.on_work) spec.on_work(len);
      if (have) {
        ++kept;
      } else {
        set_bit(needed, i);
      }
    }
  } catch (const std::exception& e) {
    my_error = e.what();
  }
}

void FileRun::agree_plan() {
  // 3. The plan: the chunks any rank needs, or the first rank that failed.
  std::vector<std::byte> plan(kPlanBytes + bitmap_bytes);
  const std::uint64_t status_bytes = 8 + bitmap_bytes + kFileErrorBytes;
  if (is_root) {
    int failed = my_error.empty() ? -1 : root;
    std::string failure = my_error;
    // Without resume every chunk moves (and the root digests each as it reads
    // it, even with no other rank).
    std::vector<std::uint8_t> all(bitmap_bytes, h.resume ? 0 : 0xff);
    std::vector<std::byte> status(status_bytes);
    std::vector<std::uint8_t> theirs(bitmap_bytes);
    StillWorking note(comm, {});
    gather(kStatusTag, status, note, [&](int r, std::uint64_t bytes) {
      WireReader rd(status.data(), bytes);
      const bool ok = rd.u32() == 0;
      rd.bytes(theirs.data(), bitmap_bytes);
      const std::string why = rd.text();
      if (!ok && failed < 0) {
        failed = r;
        failure = why;
      }
      for (std::uint64_t b = 0; b < bitmap_bytes; ++b)
        all[b] = static_cast<std::uint8_t>(all[b] | theirs[b]);
    });
    // Compressed, the first window's length goes in the plan: the root packs
    // it now, telling the ranks waiting for the plan that it still works (a
    // third of a large --window takes longer than --timeout to pack).
    std::uint64_t first = 0;
    if (failed < 0 && h.compressed) {
      needed = all;
      plan_windows();
      try {
        if (!windows.empty()) first = fill(0, bufs[0].data(), [&note] { note.tick(); });
      } catch (const std::exception& e) {
        failed = root;
        failure = e.what();
        // Said once: the plan names the failed rank.
        if (failure.rfind(me + ": ", 0) == 0) failure.erase(0, me.size() + 2);
      }
    }
    WireWriter(plan.data())
        .u32(failed < 0 ? 0 : 1)
        .u32(static_cast<std::uint32_t>(failed < 0 ? 0 : failed))
        .u64(first)
        .text(failure)
        .bytes(all.data(), bitmap_bytes);
    send_go(comm, root);
  } else {
    std::vector<std::byte> status(status_bytes);
    WireWriter(status.data())
        .u32(my_error.empty() ? 0 : 1)
        .bytes(needed.data(), bitmap_bytes)
        .text(my_error);
    comm.send(root, kFileContext, kStatusTag, status.data(), status.size());
    await_go(comm, root);
  }
  comm.bcast(plan.data(), plan.size(), root, spec.algorithm);
  {
    WireReader rd(plan.data(), plan.size());
    const bool failed = rd.u32() != 0;
    const int failed_rank = static_cast<int>(rd.u32());
    const std::uint64_t first = rd.u64();
    const std::string failure = rd.text();
    rd.bytes(needed.data(), bitmap_bytes);
    if (!my_error.empty()) throw std::runtime_error(me + ": " + my_error);
    if (failed && (failed_rank < 0 || failed_rank >= comm.size()))
      throw std::runtime_error(me + ": the root's plan names rank " + std::to_string(failed_rank) +
                               ", which is not in the job of " + std::to_string(comm.size()));
    if (failed)
      throw std::runtime_error(me + ": stopped before any data moved: " + who(failed_rank) +
                               " failed: " + failure);
    if (todo.empty()) plan_windows();  // the compressed root's are made
    if (h.compressed && !windows.empty()) {
      const auto [least, most] = wire_range(0);
      if (first < least || first > most)
        throw std::runtime_error(me + ": refused the root's plan: its first window is " +
                                 std::to_string(first) + " bytes long (" + std::to_string(least) +
                                 " to " + std::to_string(most) + ")");
      wire[0] = first;
    }
  }

  check_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void FileRun::plan_windows() {
  for (std::uint64_t i = 0; i < count; ++i)
    if (test_bit(needed, i)) todo.push_back(i);
  for (std::uint64_t first = 0; first < todo.size(); first += per_window) {
    WindowLayout w;
    for (std::uint64_t j = first; j < std::min<std::uint64_t>(todo.size(), first + per_window);
         ++j) {
      w.chunks.push_back(todo[j]);
      w.stored.push_back(layout.length(todo[j]));
      w.data += layout.length(todo[j]);
    }
    w.bytes = w.data + digest_area(w.chunks.size());
    windows.push_back(std::move(w));
  }
  wire.assign(windows.size() + 1, 0);
  for (size_t k = 0; k < windows.size(); ++k) wire[k] = windows[k].bytes;
}

// Compressed: the bytes window k may take, its head and at least a byte per
// chunk to its head and every chunk as stored.
std::pair<std::uint64_t, std::uint64_t> FileRun::wire_range(size_t k) const {
  if (k >= windows.size()) return {0, 0};
  const WindowLayout& w = windows[k];
  const std::uint64_t head = window_head_bytes(w.chunks.size());
  return {head + w.chunks.size(), head + w.data};
}

// The root: reads window k's chunks into `buf`, digests them, and packs them
// when compressed; returns the window's bytes. Compressed, the head's "next"
// is left 0 for the loop to set.
std::uint64_t FileRun::fill(size_t k, std::byte* buf, const std::function<void()>& each_chunk) {
  const WindowLayout& w = windows[k];
  const std::uint64_t n = w.chunks.size();
  auto digest = [&](std::uint64_t c, const std::byte* at, std::uint64_t len) {
    const Digest d = sha256(at, len);
    if (h.resume && digests[c] != Digest{} && d != digests[c])
      throw std::runtime_error(me + ": " + spec.source + ": changed during the broadcast (chunk " +
                               std::to_string(c) + " no longer matches its digest)");
    digests[c] = d;
    if (spec.on_work) spec.on_work(len);
    if (each_chunk) each_chunk();
    return d;
  };
  if (!h.compressed) {
    std::byte* data = buf + digest_area(n);
    for (size_t j = 0; j < n; ++j) {
      const std::uint64_t c = w.chunks[j], len = w.stored[j];
      source.read(layout.offset(c), data, len);
      const Digest d = digest(c, data, len);
      std::memcpy(buf + j * sizeof(Digest), d.data(), sizeof(Digest));
      data += len;
    }
    return w.bytes;
  }
  const std::uint64_t head = window_head_bytes(n);
  std::memset(buf, 0, head);
  std::byte* data = buf + head;
  for (size_t j = 0; j < n; ++j) {
    const std::uint64_t c = w.chunks[j], len = w.stored[j];
    source.read(layout.offset(c), stage.data(), len);
    const Digest d = digest(c, stage.data(), len);
    std::memcpy(buf + window_digest_offset(n, j), d.data(), sizeof(Digest));
    const std::uint64_t packed = packer->pack(stage.data(), len, data);
    put_u64(buf + 8 + 8 * j, packed);
    data += packed;
  }
  return static_cast<std::uint64_t>(data - buf);
}

// Every other rank: checks window k's chunks against the digests that came
// with them (and, with resume, the header's list) and writes them.
void FileRun::drain(size_t k, const std::byte* buf, const WindowHead& head) {
  const WindowLayout& w = windows[k];
  const std::uint64_t n = w.chunks.size();
  const std::byte* data = buf + (h.compressed ? window_head_bytes(n) : digest_area(n));
  for (size_t j = 0; j < n; ++j) {
    const std::uint64_t c = w.chunks[j], len = w.stored[j];
    const std::string what = "chunk " + std::to_string(c) + " of " + sink.final_path() +
                             " (bytes " + std::to_string(layout.offset(c)) + ".." +
                             std::to_string(layout.offset(c) + len) + ")";
    Digest sent;
    std::memcpy(sent.data(), buf + (h.compressed ? window_digest_offset(n, j) : j * sizeof(Digest)),
                sizeof(Digest));
    const std::byte* bytes = data;
    if (h.compressed) {
      try {
        unpacker->unpack(data, head.wire[j], stage.data(), len);
      } catch (const FileWireError& e) {
        throw std::runtime_error(me + ": " + what + " arrived damaged: " + e.what());
      }
      bytes = stage.data();
      data += head.wire[j];
    } else {
      data += len;
    }
    const Digest got = sha256(bytes, len);
    if (got != sent || (h.resume && digests[c] != Digest{} && got != digests[c]))
      throw std::runtime_error(me + ": " + what + " arrived damaged: SHA-256 " + to_hex(got) +
                               ", the root's " + to_hex(sent));
    digests[c] = got;
    sink.write(layout.offset(c), bytes, len);
    sink.record(c, got);
    if (spec.on_work) spec.on_work(len);
  }
}

void FileRun::stream_windows() {
  // 4. The needed chunks, window by window; the disk (or the digests) of one
  // window overlaps the network of the next. Compressed, the root packs two
  // windows ahead (window k's head says window k+1's length).
  auto with_rank = [&](auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.rfind("rank ", 0) == 0) throw;
      throw std::runtime_error(me + ": " + what);
    }
  };
  const size_t n = windows.size();
  // The windows go back to back, so the pipeline fills once: each window's
  // broadcast takes the algorithm and segment chosen for all of them (on
  // testbed-2x4, 64 MiB in eight windows: 32 KiB segments where 8 MiB alone
  // would take 16 KiB). Uncompressed bytes, which every rank knows alike.
  std::uint64_t stream = 0;
  for (const WindowLayout& w : windows) stream += w.bytes;
  auto bcast = [&](size_t k, std::byte* buf) {
    const runtime::BcastInfo i = comm.bcast(buf, wire[k], root, spec.algorithm, stream);
    if (k == 0) info = i;
  };
  // Uncompressed, every rank knows every window's length, so window k+1's
  // broadcast starts while window k's still runs: a rank forwards the first
  // segments of k+1 on a link it has finished k's sends on while k's last
  // segments still come down another (Communicator::ibcast_stream). One
  // window at a time, each rank would wait at every boundary for the last
  // segment of the window to reach it through the deepest of its trees.
  // At most two windows go at once, k and k+1, each in its own buffer;
  // leaving early (a read, a check or a write failed), they end first.
  InFlight going[2]{InFlight(comm), InFlight(comm)};
  auto set_off = [&](size_t k) {
    going[k % 2].add(comm.ibcast_stream(bufs[k % static_cast<size_t>(nbufs)].data(), wire[k], root,
                                        spec.algorithm, stream, k == 0 ? &info : nullptr));
  };
  auto finish = [&](size_t k) { going[k % 2].wait(); };
  // Another thread's read or write of a window, while windows are in flight:
  // they move meanwhile (a rank waiting on its disk still relays).
  auto join = [&](std::future<std::uint64_t>& f) {
    comm.progress_until(
        [&f] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    return f.get();
  };

  std::future<std::uint64_t> io;  // declared after the buffers and the sink: joined first
  auto wait_goes = [&] {
    if (!go.empty()) comm.wait(go, go.size());
    go.clear();
  };
  with_rank([&] {
    if (is_root) {
      // Compressed, window k+2 is packed while window k goes (window 0 was
      // packed for the plan); uncompressed, window k+1 is read.
      const size_t ahead = 2;
      size_t started = h.compressed ? 1 : 0;
      auto begin_fill = [&](size_t k) {
        std::byte* buf = bufs[k % static_cast<size_t>(nbufs)].data();
        io = std::async(std::launch::async, [this, k, buf] { return fill(k, buf); });
        started = k + 1;
      };
      if (first_fill.valid()) {
        io = std::move(first_fill);
        started = 1;
      } else if (started < n) {
        begin_fill(started);
      }
      for (size_t k = 0; k < n && !h.compressed; ++k) {
        join(io);  // window k is read
        set_off(k);
        if (k == 0) wait_goes();
        // Window k+1 is read into the buffer window k-1 went from.
        if (k > 0) {
          finish(k - 1);
          if (spec.after_window) spec.after_window(k - 1);
        }
        if (k + 1 < n) begin_fill(k + 1);
      }
      if (!h.compressed && n > 0) {
        finish(n - 1);
        if (spec.after_window) spec.after_window(n - 1);
      }
      for (size_t k = 0; k < n && h.compressed; ++k) {
        std::byte* buf = bufs[k % static_cast<size_t>(nbufs)].data();
        if (k + 1 < n) wire[k + 1] = io.get();
        if (started < n && started <= k + ahead) begin_fill(started);
        put_u64(buf, wire[k + 1]);
        bcast(k, buf);
        if (k == 0) wait_goes();
        if (spec.after_window) spec.after_window(k);
      }
      wait_goes();
    } else {
      if (!h.compressed && n > 0) set_off(0);
      for (size_t k = 0; k < n; ++k) {
        std::byte* buf = bufs[k % static_cast<size_t>(nbufs)].data();
        if (h.compressed) {
          bcast(k, buf);
        } else {
          // Window k+1 lands in the buffer window k-1 was written from.
          if (io.valid()) join(io);
          if (k + 1 < n) set_off(k + 1);
          finish(k);
        }
        if (spec.on_arrival) spec.on_arrival(k, buf, wire[k]);
        WindowHead head;
        if (h.compressed) {
          const auto [least, most] = wire_range(k + 1);
          try {
            head = decode_window_head({buf, wire[k]}, windows[k].stored, least, most);
          } catch (const FileWireError& e) {
            throw std::runtime_error(me + ": refused window " + std::to_string(k) + ": " +
                                     e.what());
          }
          wire[k + 1] = head.next;
        }
        if (io.valid()) io.get();
        if (k == 0) take_opening();
        // A rank whose copy did not open relays the windows and writes none.
        if (my_error.empty())
          io = std::async(std::launch::async, [this, k, buf, head = std::move(head)] {
            drain(k, buf, head);
            return std::uint64_t{0};
          });
        if (spec.after_window) spec.after_window(k);
      }
    }
    if (io.valid()) io.get();
    take_opening();  // a file of no chunks
    if (!is_root && my_error.empty()) sink.commit();
  });
  if (!my_error.empty())
    throw std::runtime_error(me + ": " + my_error +
                             " (it relayed the file for the others, whose copies stand)");
  // The ranks' notes before the header, which no report came after.
  if (is_root && at_once) take_notes(comm);
  if (!is_root && at_once) comm.wait({hello}, 1);
}

FileResult FileRun::result() const {
  FileResult r;
  r.path = is_root ? spec.source : sink.final_path();
  r.size = h.meta.size;
  r.mode = h.meta.mode;
  r.mtime = h.meta.mtime;
  r.root_digest = to_hex(root_digest(digests));
  r.chunk_bytes = h.chunk_bytes;
  r.chunks = count;
  r.chunks_sent = todo.size();
  r.chunks_kept = kept;
  r.chunks_trusted = trusted;
  r.chunks_digested = digested;
  for (std::uint64_t c : todo) r.bytes_sent += layout.length(c);
  r.windows = windows.size();
  r.algorithm = std::string(topology::algorithm_name(info.algorithm));
  r.buffer_bytes = static_cast<std::uint64_t>(nbufs) * buffer_bytes + stage.size();
  r.compressed = h.compressed;
  r.compression_why = compression_why;
  for (size_t k = 0; k < windows.size(); ++k) r.wire_bytes += wire[k];
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.check_seconds = check_seconds;
  return r;
}

void prepare_file(runtime::Communicator& comm, const FileSpec& spec, std::uint64_t size, int root) {
  if (spec.resume || spec.compress == Compression::kZstd) return;
  const std::uint64_t chunk = chunk_bytes_for(spec, size);
  const ChunkLayout layout{size, chunk};
  const std::uint64_t window = window_bytes_of(spec);
  if (!sizes_fit(window, chunk, size)) return;  // the header says why
  prepare_stream(comm, layout, chunks_per_window(window, chunk, layout.count(), 2), root,
                 spec.algorithm);
}

namespace {
// The ranks a rank exchanges notes with: the root every other rank, every
// other rank the root.
std::vector<int> line_peers(const runtime::Communicator& comm, int root) {
  std::vector<int> peers;
  for (int r = 0; r < comm.size(); ++r)
    if (r != comm.rank() && (r == root || comm.rank() == root)) peers.push_back(r);
  return peers;
}
}  // namespace

std::vector<runtime::P2pRequest> open_lines(runtime::Communicator& comm, int root,
                                            std::uint64_t context) {
  static const std::byte still_working{0};
  std::vector<runtime::P2pRequest> notes;
  for (int r : line_peers(comm, root))
    notes.push_back(comm.isend(r, context, kStillWorkingTag, &still_working, 1));
  return notes;
}

void close_lines(runtime::Communicator& comm, int root,
                 const std::vector<runtime::P2pRequest>& lines, std::uint64_t context) {
  comm.wait(lines, lines.size());
  std::byte b{};
  for (int r : line_peers(comm, root)) comm.receive(r, context, kStillWorkingTag, &b, 1);
}

InFlight::~InFlight() {
  comm_.settle(going_);
}

void InFlight::wait() {
  if (going_.empty()) return;
  comm_.wait(going_, going_.size());
  going_.clear();
}

runtime::BcastInfo broadcast_header(runtime::Communicator& comm, void* data, std::uint64_t bytes,
                                    int root, std::optional<topology::Algorithm> algorithm,
                                    InFlight& sent) {
  if (comm.rank() != root) return comm.bcast(data, bytes, root, algorithm);
  runtime::BcastInfo info;
  sent.add(comm.ibcast_stream(data, bytes, root, algorithm, bytes, &info));
  return info;
}

void take_notes(runtime::Communicator& comm) {
  std::byte b{};
  while (const auto m = comm.probe(std::nullopt, kFileContext, kStillWorkingTag, false))
    comm.receive(m->source, kFileContext, kStillWorkingTag, &b, 1);
}

std::string rank_name(const runtime::Communicator& comm, int rank) {
  return "rank " + std::to_string(rank) + " (node " +
         comm.grid().nodes.at(static_cast<size_t>(rank)).name + ")";
}

FileResult broadcast_file(runtime::Communicator& comm, const FileSpec& spec, int root) {
  FileRun run(comm, spec, root);
  run.agree_header();
  if (run.at_once) {
    run.start_at_once();
  } else {
    run.open_and_check();
    run.agree_plan();
  }
  run.stream_windows();
  run.header_going.wait();
  return run.result();
}

}  // namespace gridbcast::files
