#include "job/protocol.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace gridbcast::job::control {
namespace {

// Type bytes on the wire. New messages take new numbers; none is reused.
// A changed message takes a new number too, so a launcher and a rank of
// different builds refuse each other's by type, not by a misread field.
enum class Type : std::uint8_t {
  // 1: the Config before probe jobs (refused now).
  // 2: the Table without a run nonce (refused now).
  // 6: the Config before --compress (refused now).
  kGo = 3,
  kExit = 4,
  kTable = 5,
  kProbePhaseSpec = 7,
  kConfig = 8,
  kEndpoints = 20,
  kReady = 21,
  kProgress = 22,
  kDone = 23,
  kAlive = 24,
  kPoint = 25,
  kBenchDone = 26,
  kError = 27,
  kAbort = 28,
  kFinished = 29,
  // 30: the FileList before wire bytes (refused now).
  kProbeReport = 31,
  kFileList = 32,
};

class Writer {
 public:
  explicit Writer(Type t) { out_ += static_cast<char>(t); }
  Writer& u8(std::uint8_t v) {
    out_ += static_cast<char>(v);
    return *this;
  }
  Writer& u16(std::uint16_t v) { return be(v, 2); }
  Writer& u32(std::uint32_t v) { return be(v, 4); }
  Writer& u64(std::uint64_t v) { return be(v, 8); }
  Writer& i32(std::int32_t v) { return u32(static_cast<std::uint32_t>(v)); }
  Writer& i64(std::int64_t v) { return u64(static_cast<std::uint64_t>(v)); }
  Writer& flag(bool v) { return u8(v ? 1 : 0); }
  template <size_t N>
  Writer& bytes(const std::array<std::uint8_t, N>& b) {
    out_.append(reinterpret_cast<const char*>(b.data()), N);
    return *this;
  }
  Writer& text(const std::string& s) {
    if (s.size() > kMaxText)
      throw ProtocolError("a control message field of " + std::to_string(s.size()) +
                          " bytes is over the limit of " + std::to_string(kMaxText));
    u32(static_cast<std::uint32_t>(s.size()));
    out_ += s;
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  Writer& be(std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& body, const char* what) : in_(body), what_(what) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(be(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(be(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(be(4)); }
  std::uint64_t u64() { return be(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(be(8)); }
  // An int32 in [lo, hi].
  std::int32_t i32(std::int32_t lo, std::int32_t hi, const char* field) {
    const auto v = static_cast<std::int32_t>(u32());
    if (v < lo || v > hi)
      fail(std::string(field) + " " + std::to_string(v) + " is outside " + std::to_string(lo) +
           ".." + std::to_string(hi));
    return v;
  }
  bool flag(const char* field) {
    const std::uint8_t v = u8();
    if (v > 1) fail(std::string(field) + " is neither 0 nor 1");
    return v == 1;
  }
  template <size_t N>
  std::array<std::uint8_t, N> bytes() {
    std::array<std::uint8_t, N> b{};
    for (auto& v : b) v = u8();
    return b;
  }
  std::string text(const char* field) {
    const std::uint32_t n = u32();
    if (n > kMaxText || n > in_.size() - pos_)
      fail(std::string(field) + " claims " + std::to_string(n) + " bytes, " +
           std::to_string(in_.size() - pos_) + " remain");
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void end() {
    if (pos_ != in_.size()) fail(std::to_string(in_.size() - pos_) + " bytes after the last field");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw ProtocolError(std::string("malformed ") + what_ + " message: " + why);
  }

 private:
  std::uint64_t be(int bytes) {
    if (in_.size() - pos_ < static_cast<size_t>(bytes)) fail("truncated");
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<std::uint8_t>(in_[pos_++]);
    return v;
  }
  const std::string& in_;
  const char* what_;
  size_t pos_ = 1;  // past the type byte
};

void write_params(Writer& w, const JobParams& p) {
  w.u8(static_cast<std::uint8_t>(p.kind))
      .text(p.algorithm)
      .i32(p.root)
      .u64(p.size)
      .i32(p.iterations)
      .flag(p.random_roots)
      .flag(p.random_sizes)
      .u64(p.seed)
      .u64(p.segment_bytes)
      .i64(p.timeout_ms)
      .u32(static_cast<std::uint32_t>(p.files.size()));
  for (const auto& f : p.files) w.text(f);
  w.u64(p.file_count)
      .text(p.output)
      .u32(p.file_mode)
      .i64(p.file_mtime_ns)
      .u64(p.source_dev)
      .u64(p.source_ino)
      .u64(p.window_bytes)
      .flag(p.resume)
      .flag(p.source_is_copy)
      .text(p.compress)
      .flag(p.verify)
      .text(p.bench)
      .text(p.cert_dir)
      .u32(static_cast<std::uint32_t>(p.rank_labels.size()));
  for (const std::int32_t l : p.rank_labels) w.i32(l);
  // Probe settings in microseconds (durations) and counts.
  const auto us = [](double s) { return static_cast<std::uint64_t>(std::llround(s * 1e6)); };
  w.u64(us(p.probe.lan_seconds))
      .u64(us(p.probe.wan_seconds))
      .u64(us(p.probe.latency_seconds))
      .i32(p.probe.pings)
      .i32(p.probe.wan_pairs);
}

JobParams read_params(Reader& r) {
  JobParams p;
  const std::uint8_t kind = r.u8();
  if (kind > static_cast<std::uint8_t>(JobKind::kProbe))
    r.fail("job kind " + std::to_string(kind) + " is unknown");
  p.kind = static_cast<JobKind>(kind);
  p.algorithm = r.text("algorithm");
  p.root = r.i32(0, static_cast<std::int32_t>(kMaxRanks) - 1, "root");
  p.size = r.u64();
  p.iterations = r.i32(1, kMaxIterations, "iterations");
  p.random_roots = r.flag("random_roots");
  p.random_sizes = r.flag("random_sizes");
  p.seed = r.u64();
  p.segment_bytes = r.u64();
  p.timeout_ms = r.i64();
  if (p.timeout_ms < 0) r.fail("timeout " + std::to_string(p.timeout_ms) + " ms is negative");
  const std::uint32_t sources = r.u32();
  if (sources > kMaxSources)
    r.fail(std::to_string(sources) + " files to send, over the limit of " +
           std::to_string(kMaxSources));
  for (std::uint32_t i = 0; i < sources; ++i) {
    p.files.push_back(r.text("file"));
    if (p.files.back().empty()) r.fail("an empty file name");
  }
  p.file_count = r.u64();
  if (p.file_count > kMaxFiles)
    r.fail(std::to_string(p.file_count) + " files, over the limit of " + std::to_string(kMaxFiles));
  p.output = r.text("output");
  p.file_mode = r.u32();
  if (p.file_mode > 07777) r.fail("file mode " + std::to_string(p.file_mode) + " is not a mode");
  p.file_mtime_ns = r.i64();
  p.source_dev = r.u64();
  p.source_ino = r.u64();
  p.window_bytes = r.u64();
  p.resume = r.flag("resume");
  p.source_is_copy = r.flag("source_is_copy");
  if (p.source_is_copy && p.files.size() != 1)
    r.fail("a root sending its own copy, with " + std::to_string(p.files.size()) +
           " files to send (one is)");
  p.compress = r.text("compress");
  // files::parse_compression's names (this half links no zstd).
  if (p.compress != "off" && p.compress != "zstd" && p.compress != "auto")
    r.fail("compression \"" + p.compress + "\" is unknown");
  p.verify = r.flag("verify");
  p.bench = r.text("bench");
  p.cert_dir = r.text("cert_dir");
  const std::uint32_t labels = r.u32();
  if (labels > kMaxRanks)
    r.fail(std::to_string(labels) + " rank labels, over the limit of " + std::to_string(kMaxRanks));
  for (std::uint32_t i = 0; i < labels; ++i)
    p.rank_labels.push_back(r.i32(0, static_cast<std::int32_t>(kMaxRanks) - 1, "rank label"));
  // Within what topology::probe_schedule accepts (it checks again).
  const auto seconds = [&r](const char* field, std::uint64_t least) {
    const std::uint64_t v = r.u64();
    if (v < least || v > 600'000'000)
      r.fail(std::string(field) + " of " + std::to_string(v) + " us is outside " +
             std::to_string(least) + "..600000000");
    return static_cast<double>(v) / 1e6;
  };
  p.probe.lan_seconds = seconds("probe LAN phase", 50'000);
  p.probe.wan_seconds = seconds("probe WAN phase", 50'000);
  p.probe.latency_seconds = seconds("probe latency phase", 10'000);
  p.probe.pings = r.i32(2, 10000, "probe pings");
  p.probe.wan_pairs = r.i32(1, 64, "probe WAN pairs");
  return p;
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// A rank's lane ports: lane 0's is never 0, and past its lane count
// (Grid::lane_count) every slot is 0. Whether that count is the topology's is
// checked where the table is used (runtime::Communicator::set_endpoints).
runtime::LanePorts lane_ports(Reader& r) {
  runtime::LanePorts ports{};
  bool ended = false;
  for (auto& p : ports) {
    p = r.u16();
    if (p == 0 && &p == ports.data()) r.fail("a port of 0 for lane 0");
    if (p != 0 && ended) r.fail("a port after a lane without one");
    ended = ended || p == 0;
  }
  return ports;
}

}  // namespace

std::string name_of(const ToRank& m) {
  return std::visit(
      Overloaded{[](const Config&) { return "Config"; }, [](const Table&) { return "Table"; },
                 [](const Go&) { return "Go"; }, [](const Exit&) { return "Exit"; },
                 [](const ProbePhaseSpec&) { return "ProbePhaseSpec"; }},
      m);
}

std::string name_of(const ToLauncher& m) {
  return std::visit(
      Overloaded{[](const Endpoints&) { return "Endpoints"; }, [](const Ready&) { return "Ready"; },
                 [](const Progress&) { return "Progress"; }, [](const Done&) { return "Done"; },
                 [](const Alive&) { return "Alive"; }, [](const Point&) { return "Point"; },
                 [](const BenchDone&) { return "BenchDone"; }, [](const Error&) { return "Error"; },
                 [](const Abort&) { return "Abort"; }, [](const Finished&) { return "Finished"; },
                 [](const FileList&) { return "FileList"; },
                 [](const ProbeReport&) { return "ProbeReport"; }},
      m);
}

std::string encode_body(const ToRank& m) {
  return std::visit(
      Overloaded{[](const Config& c) {
                   Writer w(Type::kConfig);
                   w.text(c.topology_name).text(c.topology_yaml);
                   write_params(w, c.params);
                   return w.take();
                 },
                 [](const Table& t) {
                   Writer w(Type::kTable);
                   w.bytes(t.run_nonce).u32(static_cast<std::uint32_t>(t.ports.size()));
                   for (const auto& lanes : t.ports)
                     for (const std::uint16_t p : lanes) w.u16(p);
                   return w.take();
                 },
                 [](const Go& g) { return Writer(Type::kGo).i32(g.iteration).take(); },
                 [](const Exit&) { return Writer(Type::kExit).take(); },
                 [](const ProbePhaseSpec& p) {
                   Writer w(Type::kProbePhaseSpec);
                   w.i32(p.index)
                       .u8(static_cast<std::uint8_t>(p.phase.kind))
                       .text(p.phase.name)
                       .u64(static_cast<std::uint64_t>(std::llround(p.phase.seconds * 1e6)))
                       .u32(static_cast<std::uint32_t>(p.phase.flows.size()));
                   for (const auto& f : p.phase.flows)
                     w.u8(static_cast<std::uint8_t>(f.kind))
                         .i32(f.from)
                         .i32(f.to)
                         .u8(static_cast<std::uint8_t>(f.nic_from))
                         .u8(static_cast<std::uint8_t>(f.nic_to))
                         .u8(static_cast<std::uint8_t>(f.streams))
                         .u8(static_cast<std::uint8_t>(f.stream))
                         .i32(f.wan);
                   return w.take();
                 }},
      m);
}

std::string encode_body(const ToLauncher& m) {
  return std::visit(
      Overloaded{[](const Endpoints& e) {
                   Writer w(Type::kEndpoints);
                   for (const std::uint16_t p : e.ports) w.u16(p);
                   return w.take();
                 },
                 [](const Ready& r) { return Writer(Type::kReady).i32(r.iteration).take(); },
                 [](const Progress& p) {
                   Writer w(Type::kProgress);
                   w.i32(p.iteration).u64(p.bytes_in).u64(p.bytes_out).u64(p.bytes_worked);
                   w.u32(static_cast<std::uint32_t>(p.links.size()));
                   for (const auto& l : p.links)
                     w.i32(l.peer)
                         .u8(l.lane_from)
                         .u8(l.lane_to)
                         .u16(l.streams)
                         .u64(l.bytes_acked)
                         .u64(l.notsent_bytes)
                         .u64(l.rwnd_limited_us)
                         .u64(l.unacked_bytes)
                         .u8(l.connecting ? 1 : 0);
                   return w.take();
                 },
                 [](const Done& d) {
                   return Writer(Type::kDone)
                       .i32(d.iteration)
                       .i64(d.t0_ns)
                       .i64(d.t1_ns)
                       .text(d.sha256)
                       .text(d.algorithm)
                       .u64(d.segment_bytes)
                       .u64(d.rejected)
                       .u64(d.peak_rss)
                       .u64(d.rss)
                       .text(d.path)
                       .take();
                 },
                 [](const Alive& a) {
                   return Writer(Type::kAlive)
                       .text(a.waiting.substr(0, kMaxWaitingText))
                       .u64(a.moved)
                       .take();
                 },
                 [](const Point& p) { return Writer(Type::kPoint).text(p.encoded).take(); },
                 [](const BenchDone& b) {
                   return Writer(Type::kBenchDone).u64(b.rejected).u64(b.peak_rss).take();
                 },
                 [](const Error& e) { return Writer(Type::kError).text(e.what).take(); },
                 [](const Abort& a) { return Writer(Type::kAbort).i32(a.code).text(a.why).take(); },
                 [](const ProbeReport& p) {
                   // Durations in nanoseconds.
                   const auto ns = [](double s) {
                     return static_cast<std::uint64_t>(std::llround(s * 1e9));
                   };
                   Writer w(Type::kProbeReport);
                   w.i32(p.phase).u32(static_cast<std::uint32_t>(p.samples.size()));
                   for (const auto& smp : p.samples)
                     w.i32(smp.flow)
                         .u64(smp.bytes)
                         .u64(ns(smp.seconds))
                         .u64(ns(smp.rtt_min_s))
                         .u64(ns(smp.rtt_median_s))
                         .i32(smp.pings);
                   return w.take();
                 },
                 [](const Finished&) { return Writer(Type::kFinished).take(); },
                 [](const FileList& l) {
                   Writer w(Type::kFileList);
                   w.i32(l.iteration).u32(static_cast<std::uint32_t>(l.files.size()));
                   for (const auto& f : l.files)
                     w.text(f.path)
                         .u64(f.bytes)
                         .u64(f.chunks)
                         .u64(f.chunks_sent)
                         .text(f.root_digest)
                         .u64(f.wire_bytes)
                         .flag(f.compressed);
                   return w.take();
                 }},
      m);
}

ToRank decode_to_rank(const std::string& body, std::uint32_t ranks) {
  if (body.empty()) throw ProtocolError("an empty control message");
  const auto type = static_cast<Type>(static_cast<std::uint8_t>(body[0]));
  ToRank out;
  switch (type) {
    case Type::kConfig: {
      Reader r(body, "Config");
      Config c;
      c.topology_name = r.text("topology name");
      c.topology_yaml = r.text("topology");
      c.params = read_params(r);
      r.end();
      out = std::move(c);
      break;
    }
    case Type::kTable: {
      Reader r(body, "Table");
      Table t;
      t.run_nonce = r.bytes<runtime::kRunNonceBytes>();
      if (std::all_of(t.run_nonce.begin(), t.run_nonce.end(),
                      [](std::uint8_t b) { return b == 0; }))
        r.fail("a run nonce of zeros (none was drawn)");
      const std::uint32_t n = r.u32();
      if (n == 0 || n > kMaxRanks || (ranks != 0 && n != ranks))
        r.fail("a table of " + std::to_string(n) + " ranks" +
               (ranks != 0 ? " for a job of " + std::to_string(ranks) : std::string()));
      // Type, nonce and count were read, so the body holds at least that.
      constexpr size_t kHead = 1 + runtime::kRunNonceBytes + 4;
      if (static_cast<std::uint64_t>(n) * runtime::kMaxLanes * 2 != body.size() - kHead)
        r.fail("a table of " + std::to_string(n) + " ranks in " + std::to_string(body.size()) +
               " bytes");
      t.ports.resize(n);
      for (auto& lanes : t.ports) lanes = lane_ports(r);
      r.end();
      out = std::move(t);
      break;
    }
    case Type::kGo: {
      Reader r(body, "Go");
      Go g{r.i32(0, kMaxIterations, "iteration")};
      r.end();
      out = g;
      break;
    }
    case Type::kProbePhaseSpec: {
      Reader r(body, "ProbePhaseSpec");
      ProbePhaseSpec p;
      p.index = r.i32(0, kMaxIterations, "phase");
      const std::uint8_t phase_kind = r.u8();
      if (phase_kind > topology::kLastProbePhaseKind)
        r.fail("phase kind " + std::to_string(phase_kind) + " is unknown");
      p.phase.kind = static_cast<topology::ProbePhaseKind>(phase_kind);
      p.phase.name = r.text("phase name");
      if (p.phase.name.size() > 256)
        r.fail("a phase name of " + std::to_string(p.phase.name.size()) + " bytes");
      const std::uint64_t us = r.u64();
      if (us == 0 || us > 600'000'000) r.fail("a phase of " + std::to_string(us) + " us");
      p.phase.seconds = static_cast<double>(us) / 1e6;
      const std::uint32_t n = r.u32();
      if (n > kMaxProbeFlows)
        r.fail(std::to_string(n) + " flows, over the limit of " + std::to_string(kMaxProbeFlows));
      const std::int32_t last_rank = ranks == 0 ? static_cast<std::int32_t>(kMaxRanks) - 1
                                                : static_cast<std::int32_t>(ranks) - 1;
      p.phase.flows.resize(n);
      for (auto& f : p.phase.flows) {
        const std::uint8_t kind = r.u8();
        if (kind > static_cast<std::uint8_t>(topology::ProbeKind::kLatency))
          r.fail("flow kind " + std::to_string(kind) + " is unknown");
        f.kind = static_cast<topology::ProbeKind>(kind);
        f.from = r.i32(0, last_rank, "flow source");
        f.to = r.i32(0, last_rank, "flow destination");
        if (f.from == f.to) r.fail("a flow from rank " + std::to_string(f.from) + " to itself");
        f.nic_from = r.u8();
        f.nic_to = r.u8();
        if (f.nic_from >= topology::kMaxLanes || f.nic_to >= topology::kMaxLanes)
          r.fail("a flow's NIC past the " + std::to_string(topology::kMaxLanes) +
                 " lanes a rank has");
        f.streams = r.u8();
        f.stream = r.u8();
        if (f.streams < 1 || f.stream + f.streams > kMaxProbeStreams)
          r.fail("a flow's streams " + std::to_string(f.stream) + " + " +
                 std::to_string(f.streams) + " past the " + std::to_string(kMaxProbeStreams) +
                 " of a link");
        f.wan = r.i32(-1, static_cast<std::int32_t>(kMaxRanks), "flow WAN link");
      }
      r.end();
      out = std::move(p);
      break;
    }
    case Type::kExit: {
      Reader r(body, "Exit");
      r.end();
      out = Exit{};
      break;
    }
    default:
      throw ProtocolError("a control message of unknown type " +
                          std::to_string(static_cast<int>(type)) + " for a rank");
  }
  return out;
}

ToLauncher decode_to_launcher(const std::string& body) {
  if (body.empty()) throw ProtocolError("an empty control message");
  const auto type = static_cast<Type>(static_cast<std::uint8_t>(body[0]));
  ToLauncher out;
  switch (type) {
    case Type::kEndpoints: {
      Reader r(body, "Endpoints");
      Endpoints e;
      e.ports = lane_ports(r);
      r.end();
      out = e;
      break;
    }
    case Type::kReady: {
      Reader r(body, "Ready");
      Ready m{r.i32(0, kMaxIterations, "iteration")};
      r.end();
      out = m;
      break;
    }
    case Type::kProgress: {
      Reader r(body, "Progress");
      Progress p;
      p.iteration = r.i32(0, kMaxIterations, "iteration");
      p.bytes_in = r.u64();
      p.bytes_out = r.u64();
      p.bytes_worked = r.u64();
      const std::uint32_t n = r.u32();
      if (n > kMaxLinkReports)
        r.fail(std::to_string(n) + " links, over the limit of " + std::to_string(kMaxLinkReports));
      for (std::uint32_t i = 0; i < n; ++i) {
        LinkReport l;
        l.peer = r.i32(0, static_cast<std::int32_t>(kMaxRanks) - 1, "link peer");
        l.lane_from = r.u8();
        l.lane_to = r.u8();
        l.streams = r.u16();
        if (l.streams < 1 || l.streams > kMaxLinkStreams)
          r.fail("a link of " + std::to_string(l.streams) + " streams, outside 1.." +
                 std::to_string(kMaxLinkStreams));
        l.bytes_acked = r.u64();
        l.notsent_bytes = r.u64();
        l.rwnd_limited_us = r.u64();
        l.unacked_bytes = r.u64();
        const std::uint8_t connecting = r.u8();
        if (connecting > 1) r.fail("a link whose state is " + std::to_string(connecting));
        l.connecting = connecting == 1;
        if (l.connecting && (l.bytes_acked | l.notsent_bytes | l.rwnd_limited_us | l.unacked_bytes))
          r.fail("a link being connected that claims bytes moved");
        // What a kernel can hold unsent for one peer: a socket buffer per stream.
        if (l.notsent_bytes > (std::uint64_t{1} << 40))
          r.fail("a link with " + std::to_string(l.notsent_bytes) + " bytes unsent");
        if (l.unacked_bytes > (std::uint64_t{1} << 40))
          r.fail("a link with " + std::to_string(l.unacked_bytes) + " bytes unacknowledged");
        p.links.push_back(l);
      }
      r.end();
      out = std::move(p);
      break;
    }
    case Type::kDone: {
      Reader r(body, "Done");
      Done d;
      d.iteration = r.i32(0, kMaxIterations, "iteration");
      d.t0_ns = r.i64();
      d.t1_ns = r.i64();
      if (d.t1_ns < d.t0_ns) r.fail("the broadcast ended before it began");
      d.sha256 = r.text("sha256");
      if (!d.sha256.empty() &&
          (d.sha256.size() != 64 ||
           d.sha256.find_first_not_of("0123456789abcdef") != std::string::npos))
        r.fail("sha256 is not 64 lower-case hex digits");
      d.algorithm = r.text("algorithm");
      d.segment_bytes = r.u64();
      d.rejected = r.u64();
      d.peak_rss = r.u64();
      d.rss = r.u64();
      d.path = r.text("path");
      r.end();
      out = std::move(d);
      break;
    }
    case Type::kAlive: {
      Reader r(body, "Alive");
      Alive a;
      a.waiting = r.text("waiting");
      if (a.waiting.size() > kMaxWaitingText)
        r.fail("a waiting text of " + std::to_string(a.waiting.size()) + " bytes (at most " +
               std::to_string(kMaxWaitingText) + ")");
      a.moved = r.u64();
      r.end();
      out = std::move(a);
      break;
    }
    case Type::kPoint: {
      Reader r(body, "Point");
      Point p{r.text("point")};
      r.end();
      out = std::move(p);
      break;
    }
    case Type::kBenchDone: {
      Reader r(body, "BenchDone");
      BenchDone b;
      b.rejected = r.u64();
      b.peak_rss = r.u64();
      r.end();
      out = b;
      break;
    }
    case Type::kError: {
      Reader r(body, "Error");
      Error e{r.text("what")};
      r.end();
      out = std::move(e);
      break;
    }
    case Type::kAbort: {
      Reader r(body, "Abort");
      Abort a;
      a.code = static_cast<std::int32_t>(r.u32());
      a.why = r.text("why");
      r.end();
      out = std::move(a);
      break;
    }
    case Type::kFileList: {
      Reader r(body, "FileList");
      FileList l;
      l.iteration = r.i32(0, kMaxIterations, "iteration");
      const std::uint32_t n = r.u32();
      if (n > kMaxFileRecordsPerList)
        r.fail(std::to_string(n) + " file records, over the limit of " +
               std::to_string(kMaxFileRecordsPerList));
      l.files.resize(n);
      for (auto& f : l.files) {
        f.path = r.text("path");
        if (f.path.empty() || f.path.size() > kMaxPathBytes)
          r.fail("a file path of " + std::to_string(f.path.size()) + " bytes");
        f.bytes = r.u64();
        f.chunks = r.u64();
        f.chunks_sent = r.u64();
        if (f.chunks_sent > f.chunks) r.fail("more chunks sent than the file has");
        f.root_digest = r.text("root_digest");
        if (f.root_digest.size() != 64 ||
            f.root_digest.find_first_not_of("0123456789abcdef") != std::string::npos)
          r.fail("root_digest is not 64 lower-case hex digits");
        f.wire_bytes = r.u64();
        // Only reported; within what any file's windows could take.
        if (f.wire_bytes > kMaxWireBytes)
          r.fail("wire bytes " + std::to_string(f.wire_bytes) + " beyond any file's windows");
        f.compressed = r.flag("compressed");
      }
      r.end();
      out = std::move(l);
      break;
    }
    case Type::kProbeReport: {
      Reader r(body, "ProbeReport");
      ProbeReport p;
      p.phase = r.i32(0, kMaxIterations, "phase");
      const std::uint32_t n = r.u32();
      if (n > kMaxProbeSamples)
        r.fail(std::to_string(n) + " samples, over the limit of " +
               std::to_string(kMaxProbeSamples));
      // A phase lasts at most 600 s (and its grace): no duration of a sample is longer.
      constexpr std::uint64_t kMaxNs = 3600ull * 1'000'000'000;
      const auto seconds = [&r](const char* field) {
        const std::uint64_t v = r.u64();
        if (v > kMaxNs)
          r.fail(std::string(field) + " of " + std::to_string(v) + " ns is over an hour");
        return static_cast<double>(v) / 1e9;
      };
      p.samples.resize(n);
      for (auto& smp : p.samples) {
        smp.flow = r.i32(0, std::numeric_limits<std::int32_t>::max(), "flow");
        smp.bytes = r.u64();
        if (smp.bytes > (std::uint64_t{1} << 50))
          r.fail("a sample of " + std::to_string(smp.bytes) + " bytes");
        smp.seconds = seconds("window");
        smp.rtt_min_s = seconds("least round trip");
        smp.rtt_median_s = seconds("median round trip");
        if (smp.rtt_min_s > smp.rtt_median_s) r.fail("the least round trip is above the median");
        smp.pings = r.i32(0, 10000, "pings");
      }
      r.end();
      out = std::move(p);
      break;
    }
    case Type::kFinished: {
      Reader r(body, "Finished");
      r.end();
      out = Finished{};
      break;
    }
    default:
      throw ProtocolError("a control message of unknown type " +
                          std::to_string(static_cast<int>(type)) + " for the launcher");
  }
  return out;
}

namespace {

void hmac(const std::uint8_t* key, size_t key_len, const std::string& msg, std::uint8_t* out) {
  unsigned int len = 32;
  if (!HMAC(EVP_sha256(), key, static_cast<int>(key_len),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len))
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
}

std::string tag_input(Direction d, std::uint64_t seq, const std::string& body) {
  std::string m;
  m += static_cast<char>(d);
  for (int i = 7; i >= 0; --i) m += static_cast<char>((seq >> (8 * i)) & 0xff);
  return m + body;
}

}  // namespace

Sealer::Sealer(const std::vector<std::uint8_t>& secret, std::uint64_t job_id, std::uint32_t rank) {
  std::string info = "gridbcast control";
  for (int i = 7; i >= 0; --i) info += static_cast<char>((job_id >> (8 * i)) & 0xff);
  for (int i = 3; i >= 0; --i) info += static_cast<char>((rank >> (8 * i)) & 0xff);
  hmac(secret.data(), secret.size(), info, key_.data());
}

std::string Sealer::seal(Direction d, const std::string& body) {
  if (body.size() > kMaxFrameBytes)
    throw ProtocolError("a control message of " + std::to_string(body.size()) +
                        " bytes is over the limit of " + std::to_string(kMaxFrameBytes));
  std::array<std::uint8_t, 32> mac{};
  hmac(key_.data(), key_.size(), tag_input(d, sent_[static_cast<int>(d)]++, body), mac.data());
  std::string out;
  const auto n = static_cast<std::uint32_t>(body.size());
  for (int i = 3; i >= 0; --i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += body;
  out.append(reinterpret_cast<const char*>(mac.data()), kTagBytes);
  return out;
}

void Sealer::open(Direction d, const std::string& body,
                  const std::array<std::uint8_t, kTagBytes>& tag) {
  std::array<std::uint8_t, 32> mac{};
  hmac(key_.data(), key_.size(), tag_input(d, received_[static_cast<int>(d)], body), mac.data());
  if (CRYPTO_memcmp(mac.data(), tag.data(), kTagBytes) != 0)
    throw ProtocolError(
        "a control message failed its authentication check (altered, replayed "
        "or out of order)");
  ++received_[static_cast<int>(d)];
}

}  // namespace gridbcast::job::control
