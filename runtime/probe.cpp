#include "runtime/probe.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "lanes/tcp_info.hpp"
#include "runtime/event.hpp"
#include "runtime/executor.hpp"
#include "topology/units.hpp"

namespace gridbcast::runtime {
namespace {

using lanes::Clock;
using topology::ProbeFlow;
using topology::ProbeKind;
using topology::ProbeSample;

// One piece of a rate flow: small enough that the receiver's clock sees many
// of them in a short window, large enough to cost few system calls.
constexpr std::uint64_t kPieceBytes = 128 * 1024;
static_assert(kPieceBytes <= lanes::kMaxProbeFrameBytes);

// What one rate flow, all its streams together, has brought: constant-size
// state whatever a peer sends. The window closes the flow's connections
// when it ends.
struct Arrivals {
  Arrivals(asio::io_context& io, Clock::time_point phase_start, Clock::duration phase)
      : window_end(io), start(phase_start), seconds(phase), t0(phase_start) {}
  int open_streams = 0;
  std::vector<lanes::Stream*> sockets;
  asio::steady_timer window_end;
  bool over = false;        // the window ended: reads that fail now are the end
  Clock::time_point start;  // when this rank began the phase
  Clock::duration seconds;  // the phase's
  // The window's reference: the phase's start, or the first piece when none
  // came before the window would have begun (its sender started late).
  Clock::time_point t0;
  bool any = false;  // a piece arrived
  // The pieces inside the window by their arrival: the first one's time,
  // the last one's, and the bytes of those after the first (the rate where
  // the kernel does not count: rate_sample).
  std::optional<Clock::time_point> first_in, last_in;
  std::uint64_t bytes_in = 0;

  Clock::time_point at(double share) const {
    return t0 + std::chrono::duration_cast<Clock::duration>(seconds * share);
  }
  void piece(Clock::time_point t, std::uint64_t length) {
    if (!any) {
      any = true;
      if (t >= at(topology::kProbeWindowFrom)) t0 = t;
    }
    if (t < at(topology::kProbeWindowFrom) || t > at(topology::kProbeWindowTo)) return;
    if (!first_in) {
      first_in = t;
      return;
    }
    bytes_in += length;
    last_in = t;
  }
  // The kernel's count of bytes received on each socket when the window
  // began (lanes/tcp_info.hpp), and what the window counted that way.
  std::map<lanes::Stream*, std::uint64_t> base;
  bool counting = false;
  bool counted = false;
  Clock::time_point counted_from;
  ProbeSample by_kernel;
};

// The kernel's count of what `s` has received, if it says.
std::optional<std::uint64_t> received(lanes::Stream* s) {
  if (!s->is_open()) return std::nullopt;
  return lanes::tcp_bytes_received(s->socket().native_handle());
}

struct PhaseRun {
  Transport& transport;
  std::uint64_t seq;
  const topology::ProbePhase& phase;
  ProbeRunOptions options;
  Clock::time_point start = Clock::now();
  Clock::time_point stop_sending;  // the phase's seconds after its start
  // A rate flow's sender goes on until its receiver closes the connection at
  // the end of its window: a receiver the scheduler started late, or whose
  // window began at a late first piece, still counts a whole window of live
  // traffic. Nominally that is within twice the phase's seconds (stop_rate);
  // a sender gives up half the grace past it (give_up), before the watchdog.
  Clock::time_point stop_rate;
  Clock::time_point give_up;
  Clock::duration seconds;
  Event progress;
  std::exception_ptr error;
  int pending = 0;
  bool finished = false;
  asio::steady_timer dog;
  std::vector<lanes::Stream*> active;
  std::map<int, std::string> waiting_on;  // task id -> what it waits for
  int next_task = 0;
  std::vector<ProbeSample> samples;
  std::map<int, Arrivals> arrivals;  // by flow; an entry per flow this rank receives
  int windows_over = 0;              // windows of this rank that have closed
  std::vector<std::byte> scratch = std::vector<std::byte>(lanes::kMaxProbeFrameBytes);
  std::vector<std::byte> zeros = std::vector<std::byte>(kPieceBytes);

  PhaseRun(Transport& t, std::uint64_t s, const topology::ProbePhase& p, ProbeRunOptions o)
      : transport(t), seq(s), phase(p), options(o), progress(t.io().get_executor()), dog(t.io()) {
    seconds =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(phase.seconds));
    stop_sending = start + seconds;
    stop_rate = start + 2 * seconds;
    give_up = stop_rate + options.grace / 2;
  }
  void fail(std::exception_ptr e) {
    if (error) return;
    error = e;
    for (auto* s : active) transport.close(*s);
    for (auto& [flow, a] : arrivals) a.window_end.cancel();
    progress.notify_all();
    transport.accepted().notify_all();
  }
  void check() const {
    if (error) std::rethrow_exception(error);
  }
  std::string flow_text(int flow) const {
    const ProbeFlow& f = phase.flows[static_cast<size_t>(flow)];
    return "probe phase \"" + phase.name + "\" flow " + std::to_string(flow) + " (" +
           (f.kind == ProbeKind::kRate ? "rate" : "latency") + ", rank " + std::to_string(f.from) +
           " nic " + std::to_string(f.nic_from) + " to rank " + std::to_string(f.to) + " nic " +
           std::to_string(f.nic_to) + ")";
  }
};

[[noreturn]] void protocol_error(const std::string& peer, const std::string& why) {
  throw BroadcastError("protocol error from " + peer + ": " + why);
}

// The next header from `peer`, which must be of this phase and flow.
asio::awaitable<lanes::FrameHeader> read_header(PhaseRun& run, lanes::Stream& socket, int flow,
                                                const std::string& peer) {
  std::array<std::uint8_t, lanes::kFrameHeaderBytes> bytes{};
  auto [ec, n] = co_await socket.read(asio::buffer(bytes));
  run.check();
  if (ec == asio::error::eof) throw BroadcastError(peer + " closed the connection mid-probe");
  if (ec) throw BroadcastError("receiving from " + peer + " failed: " + ec.message());
  std::string why;
  auto h = lanes::decode_frame_header(bytes, why);
  if (!h) protocol_error(peer, why);
  if (h->kind != lanes::FrameKind::kProbe && h->kind != lanes::FrameKind::kPing)
    protocol_error(peer, "a frame that is not a probe's during " + run.flow_text(flow));
  // A piece names its flow; a ping its number, checked by whoever sent it.
  if (h->seq != run.seq ||
      (h->kind == lanes::FrameKind::kProbe && h->offset != static_cast<std::uint64_t>(flow)))
    protocol_error(peer, "a frame of phase " + std::to_string(h->seq) + " flow " +
                             std::to_string(h->offset) + " during " + run.flow_text(flow));
  co_return *h;
}

asio::awaitable<void> write_header(PhaseRun& run, lanes::Stream& socket, lanes::FrameHeader h,
                                   const std::string& peer, std::uint64_t payload = 0) {
  const auto header = lanes::encode(h);
  const std::array<asio::const_buffer, 2> bufs{asio::buffer(header),
                                               asio::buffer(run.zeros.data(), payload)};
  auto [ec, n] = co_await socket.write(bufs);
  run.check();
  if (ec) throw BroadcastError("sending to " + peer + " failed: " + ec.message());
}

// Sends pieces on one stream until the receiver closes the connection at the
// end of its window (a reset or a broken pipe: the normal end), or half the
// grace past twice the phase's seconds (then it closes it itself).
asio::awaitable<void> send_rate(PhaseRun& run, int flow, int stream) {
  const ProbeFlow& f = run.phase.flows[static_cast<size_t>(flow)];
  const std::string peer = run.transport.describe(f.to, f.nic_to);
  const int task = run.next_task++;
  run.waiting_on[task] = "connecting to " + peer;
  lanes::Stream* socket = co_await run.transport.outgoing(
      LinkKey{f.to, f.nic_from, f.nic_to, f.stream + stream}, Clock::now() + run.options.grace);
  run.active.push_back(socket);
  socket->set_pace(0);  // a broadcast's pace must not hold the measurement
  run.waiting_on[task] = "sending to " + peer;
  const auto header = lanes::encode(lanes::FrameHeader{
      lanes::FrameKind::kProbe, run.seq, static_cast<std::uint64_t>(flow), kPieceBytes});
  const std::array<asio::const_buffer, 2> bufs{asio::buffer(header),
                                               asio::buffer(run.zeros.data(), kPieceBytes)};
  while (Clock::now() < run.give_up) {
    auto [ec, n] = co_await socket->write(bufs);
    run.check();
    // The receiver closes its end when its window is over: a reset or a
    // broken pipe is that (a receiver that failed instead sends no sample,
    // which fails the probe at the launcher); anything else is a failure.
    if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
        ec == asio::error::eof || ec == asio::error::connection_aborted)
      break;
    if (ec) throw BroadcastError("sending to " + peer + " failed: " + ec.message());
  }
  run.transport.close(*socket);
  run.waiting_on.erase(task);
}

// The incoming connection of `key`, once the peer has made it.
asio::awaitable<lanes::Stream*> wait_incoming(PhaseRun& run, LinkKey key, const std::string& peer) {
  lanes::Stream* socket = nullptr;
  while ((socket = run.transport.incoming(key)) == nullptr) {
    run.check();
    if (run.transport.closed())
      throw BroadcastError("this rank's links were closed while it waited for " + peer +
                           " to connect");
    co_await run.transport.accepted().wait();
  }
  run.active.push_back(socket);
  co_return socket;
}

// The rate in the window by the pieces' arrival times: from the first piece
// that landed in it to the last, the bytes of the pieces after the first.
ProbeSample rate_sample(int flow, const Arrivals& a) {
  ProbeSample s;
  s.flow = flow;
  if (a.first_in && a.last_in) {
    s.seconds = std::chrono::duration<double>(*a.last_in - *a.first_in).count();
    s.bytes = a.bytes_in;
  }
  if (s.seconds <= 0) s.bytes = 0;
  return s;
}

void start(PhaseRun& run, asio::awaitable<void> task);

// The window: from kProbeWindowFrom to kProbeWindowTo of the phase's seconds
// after this rank began it, the same for every flow it receives, so the flows
// into one NIC (a confirmation's fan) add up to what the NIC took in at once.
// At its end the flow's connections close and its senders stop. A task of
// the phase, so the phase waits for it (its last stream's end cancels it).
//
// Where the kernel counts received bytes, the window's rate is its count at
// the end less its count at the start, over the time between the two
// readings: a rank the scheduler kept off the CPU for a while (two cores, a
// grid of ranks) reads late but counts right. Elsewhere the pieces' arrival
// times give it (rate_sample).
// A flow that has brought nothing by the time its window would begin (its
// sender started late) gets its window from its first piece instead.
asio::awaitable<void> close_window(PhaseRun& run, Arrivals& a) {
  a.window_end.expires_at(a.at(topology::kProbeWindowFrom));
  auto [ec] = co_await a.window_end.async_wait(lanes::kAsTuple);
  if (ec || run.error) co_return;
  if (!a.any) {
    while (!a.any && !run.error && a.open_streams > 0) co_await run.progress.wait();
    if (!a.any || run.error || a.open_streams == 0) co_return;
    a.window_end.expires_at(a.at(topology::kProbeWindowFrom));  // t0 is the first piece now
    std::tie(ec) = co_await a.window_end.async_wait(lanes::kAsTuple);
    if (ec || run.error) co_return;
  }
  a.counting = true;
  a.counted_from = Clock::now();
  for (auto* s : a.sockets)
    if (const auto n = received(s))
      a.base[s] = *n;
    else
      a.counting = false;
  // A whole window's length from the first reading, however late that was
  // (the senders go on until this end closes their connections).
  const auto length = std::chrono::duration_cast<Clock::duration>(
      a.seconds * (topology::kProbeWindowTo - topology::kProbeWindowFrom));
  a.window_end.expires_at(std::max(a.at(topology::kProbeWindowTo), a.counted_from + length));
  std::uint64_t bytes = 0;
  Clock::time_point now;
  bool restarted = false;
  for (;;) {
    std::tie(ec) = co_await a.window_end.async_wait(lanes::kAsTuple);
    if (ec || run.error) co_return;
    bytes = 0;
    for (auto* s : a.sockets) {
      const auto n = received(s);
      if (!n)
        a.counting = false;
      else
        bytes += *n - a.base[s];
    }
    now = Clock::now();
    if (!a.counting || length <= Clock::duration::zero() || now + length > run.give_up) break;
    if (bytes == 0) {
      // Nothing arrived (this rank was off the CPU all through the window
      // with its buffers full, or the senders stalled): the window starts
      // again from now while the senders still go (they stop at give_up),
      // unless another window of this rank has closed: flows into one NIC
      // are measured together, and one alone would take what the others'
      // closing left it. Every count is still its base, so the bases stand.
      if (run.windows_over > 0) break;
      restarted = true;
      a.counted_from = now;
      a.window_end.expires_at(now + length);
      continue;
    }
    if (!restarted) break;
    // The first window with bytes after a restart may have begun inside the
    // stall: one whole window more, from these counts.
    restarted = false;
    for (auto* s : a.sockets)
      if (const auto n = received(s))
        a.base[s] = *n;
      else
        a.counting = false;
    a.counted_from = now;
    a.window_end.expires_at(now + length);
  }
  if (a.counting) {
    a.counted = true;
    a.by_kernel.bytes = bytes;
    a.by_kernel.seconds = std::chrono::duration<double>(now - a.counted_from).count();
  }
  a.over = true;
  ++run.windows_over;
  for (auto* s : a.sockets) s->close();
}

asio::awaitable<void> receive_rate(PhaseRun& run, int flow, int stream) {
  const ProbeFlow& f = run.phase.flows[static_cast<size_t>(flow)];
  const std::string peer = run.transport.describe(f.from, f.nic_from);
  const int task = run.next_task++;
  run.waiting_on[task] = "waiting for " + peer + " to connect";
  lanes::Stream* socket =
      co_await wait_incoming(run, LinkKey{f.from, f.nic_from, f.nic_to, f.stream + stream}, peer);
  run.waiting_on[task] = "waiting for probe data from " + peer;
  Arrivals& a = run.arrivals.at(flow);
  a.sockets.push_back(socket);
  if (a.counting) {  // a stream that came after the window began counts from now
    if (const auto n = received(socket))
      a.base[socket] = *n;
    else
      a.counting = false;
  }
  if (a.over) socket->close();
  std::array<std::uint8_t, lanes::kFrameHeaderBytes> bytes{};
  for (;;) {
    auto [ec, n] = co_await socket->read(asio::buffer(bytes));
    run.check();
    if (ec && (a.over || ec == asio::error::eof)) break;  // the window ended, or the sender did
    if (ec) throw BroadcastError("receiving from " + peer + " failed: " + ec.message());
    std::string why;
    const auto h = lanes::decode_frame_header(bytes, why);
    if (!h) protocol_error(peer, why);
    if (h->kind != lanes::FrameKind::kProbe || h->seq != run.seq ||
        h->offset != static_cast<std::uint64_t>(flow) || h->length == 0)
      protocol_error(peer, "a frame that is not a piece of " + run.flow_text(flow));
    auto [rec, rn] = co_await socket->read(asio::buffer(run.scratch.data(), h->length));
    run.check();
    if (rec && a.over) break;
    if (rec) throw BroadcastError("receiving from " + peer + " failed: " + rec.message());
    const bool first = !a.any;
    a.piece(Clock::now(), h->length);
    if (first) run.progress.notify_all();  // a window may wait for it
  }
  run.transport.close(*socket);
  run.waiting_on.erase(task);
  if (--a.open_streams == 0) {
    a.window_end.cancel();
    ProbeSample smp = rate_sample(flow, a);
    if (a.counted) {
      smp.bytes = a.by_kernel.bytes;
      smp.seconds = a.by_kernel.seconds;
    }
    run.samples.push_back(smp);
  }
}

asio::awaitable<void> send_pings(PhaseRun& run, int flow) {
  const ProbeFlow& f = run.phase.flows[static_cast<size_t>(flow)];
  const std::string peer = run.transport.describe(f.to, f.nic_to);
  const int task = run.next_task++;
  run.waiting_on[task] = "connecting to " + peer;
  lanes::Stream* socket = co_await run.transport.outgoing(
      LinkKey{f.to, f.nic_from, f.nic_to, f.stream}, Clock::now() + run.options.grace);
  run.active.push_back(socket);
  socket->set_pace(0);
  std::vector<double> rtts;
  const int most = std::clamp(run.options.pings, 2, kMaxProbePings);
  for (int i = 0; i < most; ++i) {
    if (i >= 2 && Clock::now() >= run.stop_sending) break;
    run.waiting_on[task] = "waiting for ping " + std::to_string(i) + "'s echo from " + peer;
    const auto sent = Clock::now();
    co_await write_header(
        run, *socket, {lanes::FrameKind::kPing, run.seq, static_cast<std::uint64_t>(i), 0}, peer);
    const lanes::FrameHeader echo = co_await read_header(run, *socket, flow, peer);
    if (echo.kind != lanes::FrameKind::kPing || echo.offset != static_cast<std::uint64_t>(i))
      protocol_error(peer, "an echo of ping " + std::to_string(echo.offset) + " where ping " +
                               std::to_string(i) + " was sent");
    rtts.push_back(std::chrono::duration<double>(Clock::now() - sent).count());
  }
  co_await write_header(
      run, *socket, {lanes::FrameKind::kProbe, run.seq, static_cast<std::uint64_t>(flow), 0}, peer);
  run.waiting_on.erase(task);
  ProbeSample s;
  s.flow = flow;
  s.pings = static_cast<int>(rtts.size());
  std::sort(rtts.begin(), rtts.end());
  s.rtt_min_s = rtts.front();
  s.rtt_median_s = rtts[rtts.size() / 2];
  run.samples.push_back(s);
}

asio::awaitable<void> echo_pings(PhaseRun& run, int flow) {
  const ProbeFlow& f = run.phase.flows[static_cast<size_t>(flow)];
  const std::string peer = run.transport.describe(f.from, f.nic_from);
  const int task = run.next_task++;
  run.waiting_on[task] = "waiting for " + peer + " to connect";
  lanes::Stream* socket =
      co_await wait_incoming(run, LinkKey{f.from, f.nic_from, f.nic_to, f.stream}, peer);
  run.waiting_on[task] = "waiting for pings from " + peer;
  for (int echoed = 0;; ++echoed) {
    const lanes::FrameHeader h = co_await read_header(run, *socket, flow, peer);
    if (h.kind == lanes::FrameKind::kProbe) {
      if (h.length != 0) protocol_error(peer, "probe data on a latency flow");
      break;
    }
    if (echoed == kMaxProbePings)
      protocol_error(peer, "more than " + std::to_string(kMaxProbePings) + " pings in one flow");
    co_await write_header(run, *socket, h, peer);
  }
  run.waiting_on.erase(task);
}

void start(PhaseRun& run, asio::awaitable<void> task) {
  ++run.pending;
  asio::co_spawn(run.transport.io(), std::move(task), [&run](std::exception_ptr e) {
    if (e) run.fail(e);
    --run.pending;
    run.progress.notify_all();
  });
}

// Fails the phase once it has run `grace` past twice its seconds (the rate
// flows' longest), naming what waits.
asio::awaitable<void> watchdog(PhaseRun& run) {
  run.dog.expires_at(run.stop_rate + run.options.grace);
  co_await run.dog.async_wait(lanes::kAsTuple);
  if (run.finished || run.error) co_return;
  std::string what;
  for (const auto& [task, text] : run.waiting_on) what += (what.empty() ? "" : "; ") + text;
  run.fail(std::make_exception_ptr(
      BroadcastError("probe phase \"" + run.phase.name + "\" did not end " +
                     std::to_string(run.options.grace.count()) + " ms after twice its " +
                     topology::format_duration(run.phase.seconds) + ": " +
                     (what.empty() ? "no task left" : what))));
}

}  // namespace

asio::awaitable<std::vector<ProbeSample>> run_probe_phase(Transport& transport, int phase_index,
                                                          const topology::ProbePhase& phase,
                                                          const ProbeRunOptions& options) {
  PhaseRun run(transport, static_cast<std::uint64_t>(phase_index), phase, options);
  const int me = transport.rank();
  const std::vector<int> mine = topology::flows_of(phase, me);
  // Every flow checked before any starts: a bad one must not leave tasks
  // behind that point into this frame.
  const int lanes = transport.grid().lane_count();
  for (const int i : mine) {
    const ProbeFlow& f = phase.flows[static_cast<size_t>(i)];
    if (f.from < 0 || f.to < 0 || f.from >= transport.grid().size() ||
        f.to >= transport.grid().size() || f.from == f.to || f.nic_from < 0 || f.nic_to < 0 ||
        f.nic_from >= lanes || f.nic_to >= lanes)
      throw BroadcastError(run.flow_text(i) + " is not a flow of this grid of " +
                           std::to_string(transport.grid().size()) + " ranks and " +
                           std::to_string(lanes) + " lanes");
    if (f.streams < 1 || f.stream < 0 || f.stream + f.streams > kMaxLinkStreams)
      throw BroadcastError(run.flow_text(i) + " has streams " + std::to_string(f.stream) + ".." +
                           std::to_string(f.stream + f.streams - 1) + ", past the link's " +
                           std::to_string(kMaxLinkStreams));
  }
  for (const int i : mine) {
    const ProbeFlow& f = phase.flows[static_cast<size_t>(i)];
    if (f.kind == ProbeKind::kRate) {
      if (f.from == me)
        for (int s = 0; s < f.streams; ++s) start(run, send_rate(run, i, s));
      if (f.to == me) {
        Arrivals& a =
            run.arrivals.try_emplace(i, transport.io(), run.start, run.seconds).first->second;
        a.open_streams = f.streams;
        start(run, close_window(run, a));
        for (int s = 0; s < f.streams; ++s) start(run, receive_rate(run, i, s));
      }
    } else {
      if (f.from == me) start(run, send_pings(run, i));
      if (f.to == me) start(run, echo_pings(run, i));
    }
  }
  if (run.pending > 0) {
    bool watching = true;
    asio::co_spawn(transport.io(), watchdog(run), [&run, &watching](std::exception_ptr) {
      watching = false;
      run.progress.notify_all();
    });
    while (run.pending > 0) co_await run.progress.wait();
    run.finished = true;
    run.dog.cancel();
    while (watching) co_await run.progress.wait();
  }
  if (run.error) std::rethrow_exception(run.error);
  std::sort(run.samples.begin(), run.samples.end(),
            [](const ProbeSample& a, const ProbeSample& b) { return a.flow < b.flow; });
  co_return run.samples;
}

}  // namespace gridbcast::runtime
