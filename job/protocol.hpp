// The control protocol between the launcher and its ranks: one struct per
// message, encoded and decoded side by side (job/protocol.cpp), every field
// range-checked on decode. No Asio here; job/control.hpp carries the frames.
//
//   launcher                                   rank
//      ◄── Endpoints{ports per lane} ─────────── (after the authenticated Hello)
//      ─── Config{topology, JobParams} ────────►   (sent first, on connect)
//      ─── Table{run nonce, ports of all} ─────►
//   broadcast:  ◄─ Ready{i} ─  ─ Go{i} ─►  ◄─ Progress{i, bytes}* ─  ◄─ Done{i, ...} ─
//   bench:      ◄─ Point{...}* / Alive* ─  ◄─ BenchDone ─
//   program:    ◄─ Alive* ─ (heartbeat)    ◄─ Finished ─ (MPI_Finalize) / Abort
//   probe:      ◄─ Ready{phase} ─  ─ Go{phase} ─►  ◄─ ProbeReport{phase, samples} ─  (each phase)
//               then ─ ProbePhaseSpec{phase, flows} ─►  ◄─ ProbeReport ─  (confirmations, if any)
//      ─── Exit ───────────────────────────────►
//   any time:   ◄─ Error{what} ─
//
// A frame on the wire (big-endian):
//   u32 length | u8 type | fields... | 16-byte tag
// where tag = HMAC-SHA256(key, direction | u64 sequence | type | fields)[0..16),
// key = HMAC-SHA256(secret, "gridbcast control" | job id | rank), and each
// direction numbers its frames from 0. So every control message, not only the
// handshake, proves the secret, and none can be altered, dropped, replayed or
// moved to another rank's connection unnoticed.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "job/params.hpp"
#include "runtime/endpoints.hpp"

namespace gridbcast::job::control {

// A control message that does not decode or fails its checks.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bounds a decoder holds every peer to, whatever it claims.
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 20;  // a topology of ~100k nodes
inline constexpr std::uint32_t kMaxRanks = 1u << 20;
inline constexpr std::uint32_t kMaxText = 16u << 20;  // one string field
inline constexpr std::int32_t kMaxIterations = 1 << 30;
inline constexpr std::uint32_t kMaxSources = 1u << 16;         // --file arguments of one job
inline constexpr std::uint64_t kMaxFiles = 1ull << 32;         // regular files of one job
inline constexpr std::uint32_t kMaxFileRecordsPerList = 1024;  // per FileList message
inline constexpr std::uint32_t kMaxPathBytes = 4096;           // PATH_MAX
// A file's windows on the wire: its bytes (files::kMaxFileBytes, 2^60) and
// their heads, far from it.
inline constexpr std::uint64_t kMaxWireBytes = 1ull << 61;
inline constexpr size_t kTagBytes = 16;

// launcher → rank
struct Config {
  std::string topology_name;  // the file name errors mention
  std::string topology_yaml;
  JobParams params;
};
struct Table {
  // Drawn by the launcher for this launch (runtime::new_run_nonce), the same
  // for every rank: it keys multicast datagrams to this run. Never all zero.
  runtime::RunNonce run_nonce{};
  runtime::EndpointTable ports;  // one entry per rank
};
struct Go {
  std::int32_t iteration = 0;
};
struct Exit {};
// A probe phase the launcher decides once the schedule's have run
// (topology::confirm_phases), numbered after them; it starts the phase on
// every rank at once, as Go does. Decoded with every flow range-checked
// against the job's ranks and the lanes a rank has.
inline constexpr std::uint32_t kMaxProbeFlows = 1u << 16;
inline constexpr int kMaxProbeStreams = 64;  // a link's (runtime::kMaxLinkStreams)
struct ProbePhaseSpec {
  std::int32_t index = 0;
  topology::ProbePhase phase;
};

// rank → launcher
struct Endpoints {
  runtime::LanePorts ports{};
};
struct Ready {
  std::int32_t iteration = 0;
};
// One of a rank's outgoing broadcast links, as its kernel counts it
// (runtime::LinkSample): what the peer acknowledged so far on it, and what
// waits to be sent now. The launcher finds stragglers from these
// (job/straggler.hpp); it checks the peer and lanes against the grid.
struct LinkReport {
  std::int32_t peer = 0;
  std::uint8_t lane_from = 0, lane_to = 0;
  std::uint16_t streams = 1;  // its connections (WAN streams), 1..kMaxLinkStreams
  std::uint64_t bytes_acked = 0;
  std::uint64_t notsent_bytes = 0;
  std::uint64_t rwnd_limited_us = 0;  // the peer's window held them back, summed over streams
  std::uint64_t unacked_bytes = 0;    // sent and not yet acknowledged
  // No stream up yet: `streams` connections being made, the figures 0.
  bool connecting = false;
};
// Links in one Progress message: a rank with more sends the most backlogged.
inline constexpr std::uint32_t kMaxLinkReports = 1024;
inline constexpr std::uint16_t kMaxLinkStreams = 64;  // topology: streams per WAN link
// Sent about every second while a broadcast runs: totals since the rank
// started, so the launcher judges progress, not wall-clock time.
struct Progress {
  std::int32_t iteration = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_worked = 0;  // hashed or checked on this rank (its own work)
  std::vector<LinkReport> links;   // at most kMaxLinkReports
};
struct Done {
  std::int32_t iteration = 0;
  std::int64_t t0_ns = 0, t1_ns = 0;  // system clock, around the broadcast
  std::string sha256;                 // hex, or empty without verification
  std::string algorithm;
  std::uint64_t segment_bytes = 0;
  std::uint64_t rejected = 0;  // connections this rank refused so far
  std::uint64_t peak_rss = 0, rss = 0;
  std::string path;  // where this rank's copy of --file went; empty otherwise
};
// --file: what the root sent of each regular file, in manifest order, in
// lists of at most kMaxFileRecordsPerList, before its Done. The launcher takes
// at most the job's file_count of them.
struct FileRecord {
  std::string path;  // within the job: the file's name, or its path under a directory
  std::uint64_t bytes = 0;
  std::uint64_t chunks = 0;
  std::uint64_t chunks_sent = 0;  // fewer than chunks with --resume
  std::string root_digest;        // hex: SHA-256 over the chunks' SHA-256
  // The bytes of the windows' broadcasts that carried the chunks sent
  // (fewer than theirs when packed by zstd: --compress).
  std::uint64_t wire_bytes = 0;
  bool compressed = false;
};
struct FileList {
  std::int32_t iteration = 0;
  std::vector<FileRecord> files;
};
// A heartbeat between messages of substance. A program's rank says what it
// waits for in a blocking call ("" if none) and the bytes it has moved in
// all, so the launcher can name a job in which every rank waits and nothing
// moves (without a --timeout, it does not fail it).
inline constexpr std::size_t kMaxWaitingText = 1024;
struct Alive {
  std::string waiting;  // at most kMaxWaitingText bytes
  std::uint64_t moved = 0;
};
struct Point {
  std::string encoded;  // a BenchPoint (job/bench.hpp)
};
struct BenchDone {
  std::uint64_t rejected = 0;
  std::uint64_t peak_rss = 0;
};
struct Error {
  std::string what;
};
struct Abort {  // MPI_Abort
  std::int32_t code = 0;
  std::string why;
};
struct Finished {};  // MPI_Finalize
// A probe phase's samples from one rank (topology::ProbeSample): the flows it
// measured. The launcher checks each names a flow of the phase that this rank
// measures, once.
inline constexpr std::uint32_t kMaxProbeSamples = 1u << 16;
struct ProbeReport {
  std::int32_t phase = 0;
  std::vector<topology::ProbeSample> samples;
};

using ToRank = std::variant<Config, Table, Go, Exit, ProbePhaseSpec>;
using ToLauncher = std::variant<Endpoints, Ready, Progress, Done, Alive, Point, BenchDone, Error,
                                Abort, Finished, FileList, ProbeReport>;

// The message's name in errors ("Done", ...).
std::string name_of(const ToRank& m);
std::string name_of(const ToLauncher& m);

// Bodies (type and fields, without length and tag). Decoders throw
// ProtocolError for anything out of range: an unknown type, a truncated or
// over-long field, trailing bytes, a negative iteration, a port of 0, a table
// whose rank count differs from `ranks` (when non-zero) or whose run nonce is
// all zero.
std::string encode_body(const ToRank& m);
std::string encode_body(const ToLauncher& m);
ToRank decode_to_rank(const std::string& body, std::uint32_t ranks = 0);
ToLauncher decode_to_launcher(const std::string& body);

// Per-connection message authentication: the key of one rank's control
// connection and each direction's sequence number.
enum class Direction : std::uint8_t { kToRank = 1, kToLauncher = 2 };
class Sealer {
 public:
  Sealer(const std::vector<std::uint8_t>& secret, std::uint64_t job_id, std::uint32_t rank);
  // length | body | tag, numbered by this direction's counter.
  std::string seal(Direction d, const std::string& body);
  // Checks the tag of the next frame in direction d; throws ProtocolError.
  void open(Direction d, const std::string& body, const std::array<std::uint8_t, kTagBytes>& tag);

 private:
  std::array<std::uint8_t, 32> key_{};
  std::uint64_t sent_[3] = {0, 0, 0};
  std::uint64_t received_[3] = {0, 0, 0};
};

}  // namespace gridbcast::job::control
