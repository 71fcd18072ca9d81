#include "runtime/executor.hpp"

#include <algorithm>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "topology/intervals.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/plan/segments.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::runtime {
namespace {

using lanes::Clock;
using topology::Segment;

// Every segment travels as one frame; the cost model counts its header.
static_assert(topology::kMaxSegmentBytes <= lanes::kMaxFrameBytes);
static_assert(topology::kFrameOverheadBytes == lanes::kFrameHeaderBytes);

// Everything one broadcast's coroutines share. Lives in execute()'s frame,
// which outlives every task it starts.
struct Run {
  Transport& transport;
  const topology::Plan& plan;
  std::uint64_t seq;
  std::byte* buffer;
  ExecOptions options;
  Event progress;  // new bytes arrived, a task ended, or the run failed
  topology::IntervalSet have;
  std::exception_ptr error;
  int pending = 0;
  Clock::time_point last_progress = Clock::now();
  ExecStats stats;
  // What each incoming link still expects: (offset, length) -> how many times.
  std::map<std::tuple<int, int, int>, std::map<std::pair<std::uint64_t, std::uint64_t>, int>>
      expected;
  asio::steady_timer dog;  // the progress deadline
  bool finished = false;
  std::vector<lanes::Stream*> active;  // sockets to close on failure
  // What each coroutine waits for (its socket, or itself) -> the peer.
  std::map<const void*, std::string> waiting_on;

  Run(Transport& t, const topology::Plan& p, std::uint64_t s, std::byte* b, ExecOptions o)
      : transport(t),
        plan(p),
        seq(s),
        buffer(b),
        options(o),
        progress(t.io().get_executor()),
        dog(t.io()) {}

  void fail(std::exception_ptr e) {
    if (error) return;  // the first error sticks
    error = e;
    for (auto* s : active) transport.close(*s);
    progress.notify_all();
    transport.accepted().notify_all();
    if (options.turns) options.turns->changed.notify_all();
  }
  void check() const {
    if (error) std::rethrow_exception(error);
  }
  void moved() {
    last_progress = Clock::now();
    if (options.turns) options.turns->last_progress = last_progress;
    progress.notify_all();
  }
  // The last progress of this run, or of any run it shares connections with.
  Clock::time_point seen_progress() const {
    return options.turns ? std::max(last_progress, options.turns->last_progress) : last_progress;
  }
};

// This run's place on one connection (LinkTurns): waits until every run
// ahead of it there is done with it, and gives it up when the coroutine that
// holds it ends, however it ends.
class Turn {
 public:
  Turn(Run& run, bool out, const LinkKey& key) : run_(run), key_{out, key} {}
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn() {
    if (LinkTurns* turns = run_.options.turns) leave(*turns, turns->queues.find(key_), &run_);
  }
  // Takes `run` off the queue at `it` (end: none), waking who waits.
  static std::map<LinkTurns::Key, std::deque<const void*>>::iterator leave(
      LinkTurns& turns, std::map<LinkTurns::Key, std::deque<const void*>>::iterator it,
      const void* run) {
    turns.changed.notify_all();
    if (it == turns.queues.end()) return it;
    auto& q = it->second;
    q.erase(std::remove(q.begin(), q.end(), run), q.end());
    return q.empty() ? turns.queues.erase(it) : std::next(it);
  }
  asio::awaitable<void> take(const std::string& peer) {
    LinkTurns* turns = run_.options.turns;
    if (!turns) co_return;
    for (;;) {
      run_.check();
      const auto it = turns->queues.find(key_);
      if (it == turns->queues.end() || it->second.empty() || it->second.front() == &run_) break;
      run_.waiting_on[this] = "waiting for the broadcast before to finish with its link " +
                              std::string(key_.out ? "to " : "from ") + peer;
      co_await turns->changed.wait();
    }
    run_.waiting_on.erase(this);
    if (run_.transport.closed())
      throw BroadcastError(
          "this rank's links were closed while it waited for its turn on the link " +
          std::string(key_.out ? "to " : "from ") + peer);
  }

 private:
  Run& run_;
  LinkTurns::Key key_;
};

std::string range(std::uint64_t off, std::uint64_t len) {
  return "[" + std::to_string(off) + ", " + std::to_string(off + len) + ")";
}

// `pace`: the link's pace per stream (topology/plan/pacing.hpp), 0 for none;
// set on every broadcast, since a connection outlives the plan that paced it.
asio::awaitable<void> send_stream(Run& run, LinkKey key, const std::vector<Segment>& segments,
                                  double pace) {
  Turn turn(run, true, key);
  co_await turn.take(run.transport.describe(key.peer, key.lane_to));
  const auto deadline = Clock::now() + run.options.timeout;
  lanes::Stream* socket = co_await run.transport.outgoing(key, deadline);
  run.active.push_back(socket);
  socket->set_pace(pace);
  const std::string peer = run.transport.describe(key.peer, key.lane_to);
  for (const Segment& seg : segments) {
    // Cut-through: the frame leaves with the first kForwardBytes of its bytes
    // held (all of them, if it is shorter), and the rest follows as it lands,
    // so a hop delays a segment by a piece, not by the whole segment.
    const auto header =
        lanes::encode(lanes::FrameHeader{lanes::FrameKind::kData, run.seq, seg.offset, seg.length});
    std::uint64_t sent = 0;
    do {
      const std::uint64_t left = seg.length - sent;
      const std::uint64_t want = std::min(left, topology::kForwardBytes);
      std::uint64_t ready = 0;
      while ((ready = std::min(left, run.have.run_from(seg.offset + sent))) < want) {
        run.check();
        co_await run.progress.wait();
      }
      run.check();
      const std::array<asio::const_buffer, 2> bufs{
          asio::buffer(header), asio::buffer(run.buffer + seg.offset + sent, ready)};
      const std::span<const asio::const_buffer> out =
          sent == 0 ? std::span<const asio::const_buffer>(bufs)
                    : std::span<const asio::const_buffer>(bufs).subspan(1);
      run.waiting_on[socket] = "sending to " + peer;
      auto [ec, n] = co_await socket->write(out);
      run.waiting_on.erase(socket);
      run.check();
      if (ec) throw BroadcastError("sending to " + peer + " failed: " + ec.message());
      sent += ready;
      run.stats.bytes_out += ready;
      if (run.options.live) run.options.live->bytes_out.fetch_add(ready, std::memory_order_relaxed);
      run.moved();
    } while (sent < seg.length);
    ++run.stats.frames_out;
  }
}

asio::awaitable<void> receive_stream(Run& run, LinkKey key, std::uint64_t frames) {
  const std::string peer = run.transport.describe(key.peer, key.lane_from);
  Turn turn(run, false, key);
  co_await turn.take(peer);
  lanes::Stream* socket = nullptr;
  while ((socket = run.transport.incoming(key)) == nullptr) {
    run.check();
    if (run.transport.closed())
      throw BroadcastError("this rank's links were closed while it waited for " + peer +
                           " to connect");
    co_await run.transport.accepted().wait();
  }
  run.active.push_back(socket);
  auto& expected = run.expected[{key.peer, key.lane_from, key.lane_to}];
  std::array<std::uint8_t, lanes::kFrameHeaderBytes> header_bytes{};
  for (std::uint64_t i = 0; i < frames; ++i) {
    run.waiting_on[socket] = "waiting for data from " + peer;
    auto [ec, n] = co_await socket->read(asio::buffer(header_bytes));
    run.check();
    if (ec == asio::error::eof)
      throw BroadcastError(peer + " closed the connection mid-broadcast (did it fail?)");
    if (ec) throw BroadcastError("receiving from " + peer + " failed: " + ec.message());
    std::string why;
    auto header = lanes::decode_frame_header(header_bytes, why);
    if (!header) throw BroadcastError("protocol error from " + peer + ": " + why);
    if (header->kind != lanes::FrameKind::kData)
      throw BroadcastError("protocol error from " + peer + ": a message frame on a broadcast link");
    if (header->seq != run.seq)
      throw BroadcastError("protocol error from " + peer + ": frame of broadcast " +
                           std::to_string(header->seq) + " during broadcast " +
                           std::to_string(run.seq));
    auto it = expected.find({header->offset, header->length});
    if (it == expected.end())
      throw BroadcastError("protocol error from " + peer + ": bytes " +
                           range(header->offset, header->length) +
                           " are not routed over this link, or arrived twice");
    if (--it->second == 0) expected.erase(it);
    // Each piece counts as held as it lands, and the links that forward it
    // take it from there (send_stream).
    for (std::uint64_t got = 0; got < header->length;) {
      const std::uint64_t at = header->offset + got;
      auto [rec, rn] =
          co_await socket->read_some(asio::buffer(run.buffer + at, header->length - got));
      run.check();
      if (rec == asio::error::eof)
        throw BroadcastError(peer + " closed the connection mid-segment (did it fail?)");
      if (rec) throw BroadcastError("receiving from " + peer + " failed: " + rec.message());
      got += rn;
      run.have.add(at, at + rn);
      run.stats.bytes_in += rn;
      if (run.options.live) run.options.live->bytes_in.fetch_add(rn, std::memory_order_relaxed);
      run.moved();
    }
    ++run.stats.frames_in;
  }
  run.waiting_on.erase(socket);
}

// Multicasts [m.offset, m.offset + m.length) to the site's group, each
// fragment once this rank holds it (a site's entry node is still receiving
// the message over the WAN), paced by the sender. Datagrams are best effort;
// a socket error that is not a full queue fails the broadcast.
asio::awaitable<void> multicast_send(Run& run, const topology::Multicast& m) {
  lanes::MulticastSender& sender = *run.options.multicast->sender;
  bool done = false;
  std::string error;
  // Leaving early (the run failed): the send must not read the buffer after.
  struct CancelUnlessDone {
    lanes::MulticastSender& sender;
    const bool& done;
    ~CancelUnlessDone() {
      if (!done) sender.cancel();
      sender.on_sent({});
    }
  } guard{sender, done};
  // Each datagram out is progress (the ring may be done long before a
  // multicast paced at a slower NIC), and the watchdog can say what waits.
  sender.on_sent([&run] { run.moved(); });
  run.waiting_on[nullptr] = "multicasting bytes " + range(m.offset, m.length) + " from rank " +
                            std::to_string(m.from) + " lane " + std::to_string(m.lane);
  const std::uint64_t base = m.offset;
  sender.send(
      run.seq,
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(run.buffer + base),
                                    m.length),
      [&run, &done, &error](const std::string& e) {
        done = true;
        error = e;
        run.progress.notify_all();
      },
      run.options.multicast->include,
      [&run, base](std::uint64_t off, std::uint64_t len) {
        return run.have.contains(base + off, base + off + len);
      });
  while (!done) {
    run.check();
    co_await run.progress.wait();
    sender.resume();
  }
  run.waiting_on.erase(nullptr);
  run.check();
  if (!error.empty()) throw BroadcastError(error);
  run.stats.multicast_bytes_out += m.length;
}

// Fails the run when nothing has moved for options.timeout. It sleeps until the
// deadline of the last progress it saw and re-arms if there was progress since.
asio::awaitable<void> watchdog(Run& run) {
  while (!run.finished && !run.error) {
    run.dog.expires_at(run.seen_progress() + run.options.timeout);
    co_await run.dog.async_wait(lanes::kAsTuple);
    if (run.finished || run.error) break;
    if (Clock::now() >= run.seen_progress() + run.options.timeout) {
      std::string who;
      for (const auto& [s, what] : run.waiting_on) who += (who.empty() ? "" : "; ") + what;
      if (who.empty()) who = "waiting for peers to connect";
      run.fail(std::make_exception_ptr(BroadcastError(
          "no progress for " + std::to_string(run.options.timeout.count()) + " ms: " + who)));
    }
  }
}

void start(Run& run, asio::awaitable<void> task) {
  ++run.pending;
  asio::co_spawn(run.transport.io(), std::move(task), [&run](std::exception_ptr e) {
    if (e) run.fail(e);
    --run.pending;
    run.progress.notify_all();
  });
}

}  // namespace

asio::awaitable<ExecStats> execute(Transport& transport, const topology::Plan& plan,
                                   std::uint64_t seq, std::byte* buffer,
                                   const ExecOptions& options) {
  Run run(transport, plan, seq, buffer, options);
  const int me = transport.rank();
  if (me == plan.root) run.have.add(0, plan.size);

  // The multicast this rank sends and the one it receives, if any.
  const topology::Multicast* multicast_out = nullptr;
  const topology::Multicast* multicast_in = nullptr;
  for (const auto& m : plan.multicasts) {
    if (m.from == me) multicast_out = &m;
    if (std::binary_search(m.to.begin(), m.to.end(), me)) multicast_in = &m;
  }
  MulticastPort* port = options.multicast;
  if ((multicast_out && (!port || !port->sender)) || (multicast_in && (!port || !port->receiver)))
    throw BroadcastError(
        "rank " + std::to_string(me) + " cannot take part in the multicast: " +
        (port && !port->unavailable.empty() ? port->unavailable : "no multicast socket"));
  // Datagrams of this broadcast land in the buffer and count as held, so the
  // ring forwards them before its predecessor's copy arrives (which is then
  // written over the same, already verified, bytes).
  struct FinishReceiver {
    lanes::MulticastReceiver* receiver;
    ~FinishReceiver() {
      if (receiver) receiver->finish();
    }
  } finish_receiver{multicast_in ? port->receiver : nullptr};
  // A sender's own datagrams come back to its host's members, its own
  // receiver among them: this broadcast is over for that socket.
  if (multicast_out && !multicast_in && port->receiver) port->receiver->pass(seq);
  if (multicast_in) {
    const std::uint64_t base = multicast_in->offset;
    port->receiver->expect(seq,
                           std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(buffer + base),
                                                   multicast_in->length),
                           {}, [&run, base](std::uint64_t off, std::uint64_t len) {
                             const std::uint64_t fresh = run.have.add(base + off, base + off + len);
                             if (fresh == 0) return;
                             run.stats.multicast_bytes_in += fresh;
                             run.moved();
                           });
  }

  // The plan's segments on this rank's links (topology/plan/segments.hpp); a
  // link's segments are dealt round-robin over its streams, and the receiver
  // derives the same lists, so each receiving stream knows how many frames it reads.
  topology::SegmentOptions so;
  so.segment_bytes = topology::resolve_segment_bytes(transport.grid(), plan, options.segment_bytes);
  topology::RankSegments mine = topology::rank_segments(plan, me, so);
  // Tasks start in link order (peer, lane_from, lane_to).
  auto by_key = [](int peer_a, const topology::LinkSegments& a, int peer_b,
                   const topology::LinkSegments& b) {
    return std::tie(peer_a, a.lane_from, a.lane_to) < std::tie(peer_b, b.lane_from, b.lane_to);
  };
  std::sort(mine.send.begin(), mine.send.end(),
            [&](const auto& a, const auto& b) { return by_key(a.to, a, b.to, b); });
  std::sort(mine.receive.begin(), mine.receive.end(),
            [&](const auto& a, const auto& b) { return by_key(a.from, a, b.from, b); });
  auto per_stream = [](const topology::LinkSegments& link) {
    std::vector<std::vector<Segment>> streams(static_cast<size_t>(link.streams));
    for (const Segment& s : link.segments) streams[static_cast<size_t>(s.stream)].push_back(s);
    return streams;
  };
  // The segment lists outlive the coroutines started below (this frame waits for them).
  std::vector<std::vector<std::vector<Segment>>> out_streams, in_streams;
  for (const auto& link : mine.send) out_streams.push_back(per_stream(link));
  for (const auto& link : mine.receive) {
    in_streams.push_back(per_stream(link));
    auto& exp = run.expected[{link.from, link.lane_from, link.lane_to}];
    for (const Segment& s : link.segments) ++exp[{s.offset, s.length}];
  }

  // This run's place on each connection it uses, behind the runs started
  // before it, taken before its first suspension.
  if (LinkTurns* turns = options.turns) {
    for (size_t l = 0; l < mine.send.size(); ++l) {
      const auto& link = mine.send[l];
      for (int s = 0; s < link.streams; ++s)
        if (!out_streams[l][static_cast<size_t>(s)].empty())
          turns->queues[{true, LinkKey{link.to, link.lane_from, link.lane_to, s}}].push_back(&run);
    }
    for (size_t l = 0; l < mine.receive.size(); ++l) {
      const auto& link = mine.receive[l];
      for (int s = 0; s < link.streams; ++s)
        if (!in_streams[l][static_cast<size_t>(s)].empty())
          turns->queues[{false, LinkKey{link.from, link.lane_from, link.lane_to, s}}].push_back(
              &run);
    }
  }
  // Whatever ends this run, no connection waits for it after.
  struct LeaveTurns {
    Run& run;
    ~LeaveTurns() {
      LinkTurns* turns = run.options.turns;
      if (!turns) return;
      for (auto it = turns->queues.begin(); it != turns->queues.end();)
        it = Turn::leave(*turns, it, &run);
    }
  } leave_turns{run};
  if (options.links_taken) options.links_taken();

  const std::vector<topology::LinkPace> paces =
      topology::link_paces(transport.grid(), plan, mine.segment_bytes);
  for (size_t l = 0; l < mine.send.size(); ++l) {
    const auto& link = mine.send[l];
    const double pace = topology::pace_of(paces, me, link.to, link.lane_from, link.lane_to);
    for (int s = 0; s < link.streams; ++s)
      if (!out_streams[l][static_cast<size_t>(s)].empty())
        start(run, send_stream(run, LinkKey{link.to, link.lane_from, link.lane_to, s},
                               out_streams[l][static_cast<size_t>(s)], pace));
  }
  for (size_t l = 0; l < mine.receive.size(); ++l) {
    const auto& link = mine.receive[l];
    for (int s = 0; s < link.streams; ++s)
      if (!in_streams[l][static_cast<size_t>(s)].empty())
        start(run, receive_stream(run, LinkKey{link.from, link.lane_from, link.lane_to, s},
                                  in_streams[l][static_cast<size_t>(s)].size()));
  }
  if (multicast_out) start(run, multicast_send(run, *multicast_out));

  if (run.pending > 0) {
    bool watching = true;
    asio::co_spawn(transport.io(), watchdog(run), [&run, &watching](std::exception_ptr) {
      watching = false;
      run.progress.notify_all();
    });
    while (run.pending > 0) co_await run.progress.wait();
    // Stop the watchdog before this frame, which it references, goes away.
    run.finished = true;
    run.dog.cancel();
    while (watching) co_await run.progress.wait();
  }
  if (run.error) std::rethrow_exception(run.error);
  co_return run.stats;
}

}  // namespace gridbcast::runtime
