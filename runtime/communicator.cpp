#include "runtime/communicator.hpp"

#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>

#include "lanes/datagram.hpp"
#include "lanes/log.hpp"
#include "lanes/multicast.hpp"
#include "runtime/executor.hpp"
#include "runtime/p2p.hpp"
#include "runtime/probe.hpp"
#include "runtime/run_until.hpp"
#include "runtime/subgrid.hpp"
#include "runtime/transport.hpp"
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"

namespace gridbcast::runtime {

JobCredentials new_credentials() {
  JobCredentials c;
  c.secret.resize(32);
  std::uint64_t id = 0;
  if (RAND_bytes(c.secret.data(), static_cast<int>(c.secret.size())) != 1 ||
      RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof id) != 1)
    throw std::runtime_error("OpenSSL could not produce random bytes for the job secret");
  c.job_id = id;
  return c;
}

static_assert(std::is_same_v<RunNonce, lanes::RunNonce>, "one run nonce type for both layers");

RunNonce new_run_nonce() {
  RunNonce n{};
  // An all-zero draw (2^-128) would read as "none drawn": draw again.
  do {
    if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
      throw std::runtime_error("OpenSSL could not produce random bytes for the run nonce");
  } while (std::all_of(n.begin(), n.end(), [](std::uint8_t b) { return b == 0; }));
  return n;
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (auto b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument("not a hexadecimal string");
  };
  if (hex.size() % 2 != 0) throw std::invalid_argument("hexadecimal string of odd length");
  std::vector<std::uint8_t> out;
  for (size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<std::uint8_t>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  return out;
}

namespace {

// A peer rank a point-to-point call names: inside the grid, or a clear error.
void check_peer(int rank, int size, const char* role) {
  if (rank < 0 || rank >= size)
    throw std::invalid_argument(std::string(role) + " rank " + std::to_string(rank) +
                                " is outside 0.." + std::to_string(size - 1));
}

// A group's broadcast sequence numbers: distinct from other groups' and from the
// world's (plain 0, 1, 2, ...), the same on every member.
std::uint64_t group_seq(std::uint64_t context, std::uint64_t n) {
  std::uint64_t x = context + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return ((x ^ (x >> 31)) | (1ull << 63)) + n;
}

}  // namespace

struct P2pOperation {
  bool is_receive = false;
  int peer = -1;           // destination, or source (-1: any)
  PostedReceive posted;    // a receive
  bool sent = false;       // a send, broadcast or exchange: complete
  std::string send_error;  // a send, broadcast or exchange: why it failed
  std::string activity;    // a broadcast or exchange: what a stalled wait names
  P2pState state() const {
    if (!is_receive) return P2pState{sent, send_error, {}};
    const bool complete = posted.done || !posted.error.empty();
    return P2pState{complete, posted.error,
                    Received{posted.info.source, posted.info.tag, posted.info.bytes}};
  }
};

struct Communicator::Impl {
  // One communicator's multicast sockets (the world's, or a group's by its
  // context): one group per communicator and site, derived from the datagram
  // key (the job secret, job id, run nonce and communicator).
  struct MulticastSockets {
    bool keyed = false;
    lanes::DatagramKey key{};
    std::unique_ptr<lanes::MulticastReceiver> receiver;
    std::unique_ptr<lanes::MulticastSender> sender;
  };
  struct Group {
    std::vector<int> members;  // world ranks in group rank order
    std::vector<int> sorted;   // ascending: index in `grid` -> world rank
    // The topology restricted to the members; shared with its broadcasts in flight.
    std::shared_ptr<const topology::Grid> grid;
    std::uint64_t seq = 0;
    topology::AutoChoices auto_choices;  // what `auto` ran, by root and size class
  };

  topology::Grid grid;
  int rank;
  CommOptions options;
  topology::AutoChoices auto_choices;  // the world's
  asio::io_context io{1};
  Transport transport;
  Messenger messenger{transport};
  std::uint64_t seq = 0;
  std::exception_ptr failed;
  std::map<std::uint64_t, Group> groups;
  std::function<void()> idle_hook;
  std::chrono::microseconds idle_interval{1000};
  LiveCounters live;
  JobCredentials creds;
  std::optional<RunNonce> run_nonce;                    // from set_endpoints
  std::map<std::uint64_t, MulticastSockets> multicast;  // by communicator; the world's is 0
  // Contexts whose group had a datagram key here and was forgotten: defining
  // one again would repeat its key and restart its broadcast ids.
  std::set<std::uint64_t> retired_contexts;
  lanes::RejectionCounts retired_rejections{};  // of the receivers of forgotten groups

  Impl(topology::Grid g, int r, JobCredentials c, CommOptions o,
       std::shared_ptr<lanes::TlsContext> tls)
      : grid(std::move(g)),
        rank(r),
        options(o),
        transport(io, grid, r, lanes::Credentials{c.job_id, c.secret}, std::move(tls)),
        creds(std::move(c)) {}

  // The sockets a plan's multicasts need on this rank (`me` is this rank in
  // the grid `g` the plan was built on; the plan names world ranks), opened on first use and kept;
  // the world's receiver is opened ahead (open_world_receiver) so datagrams that come before this
  // rank calls bcast are kept. A socket that cannot be opened leaves the
  // reason in `unavailable`, and the executor fails the broadcast with it.
  // `sequence` is the broadcast about to run: a receiver opened now takes
  // nothing older.
  MulticastPort multicast_port(std::uint64_t communicator, const topology::Grid& g, int me,
                               const topology::Plan& plan, std::uint64_t sequence) {
    MulticastPort port;
    port.include = options.multicast_include;
    for (const auto& m : plan.multicasts) {
      const bool sends = m.from == rank;
      const bool joins = std::binary_search(m.to.begin(), m.to.end(), rank);
      if (!sends && !joins) continue;
      try {
        open_multicast(communicator, g, me, m.lane, sends, joins, sequence);
      } catch (const std::exception& e) {
        port.unavailable = e.what();
      }
    }
    if (auto it = multicast.find(communicator); it != multicast.end()) {
      port.receiver = it->second.receiver.get();
      port.sender = it->second.sender.get();
    }
    return port;
  }

  void open_multicast(std::uint64_t communicator, const topology::Grid& g, int me, int lane,
                      bool sender, bool receiver, std::uint64_t first_broadcast_id) {
    // Without the run's nonce the key would be the same in every run that
    // shares secret and job id: no socket at all rather than such a key.
    if (!run_nonce)
      throw lanes::NetworkError("rank " + std::to_string(rank) +
                                " has no run nonce (it comes with the endpoint table, "
                                "set_endpoints), so it cannot key multicast datagrams");
    MulticastSockets& s = multicast[communicator];
    if (!s.keyed) {
      s.key = lanes::datagram_key(creds.secret, creds.job_id, *run_nonce, communicator);
      s.keyed = true;
    }
    const auto& node = g.nodes[static_cast<size_t>(me)];
    const auto& site = g.sites[static_cast<size_t>(node.site)];
    const lanes::MulticastGroup group =
        lanes::derive_group(s.key, site.multicast.network, site.multicast.prefix,
                            site.multicast.port, static_cast<std::uint32_t>(node.site));
    const std::string iface = node.lane_nic(lane).address;
    const std::string where = "rank " + std::to_string(rank) + " (" + node.name + ", " + iface +
                              ") on multicast group " + group.str() + " of site " + site.name;
    try {
      if (receiver && !s.receiver) {
        lanes::ReceiverOptions ro;
        ro.group = group.address_string();
        ro.interface_address = iface;
        ro.port = group.port;
        ro.job_id = creds.job_id;
        ro.key = s.key;
        ro.first_broadcast_id = first_broadcast_id;
        s.receiver = lanes::MulticastReceiver::open(io, ro);
      }
      if (sender && !s.sender) {
        lanes::SenderOptions so;
        so.destination = group.address_string();
        so.port = group.port;
        so.interface_address = iface;
        so.ttl = site.multicast.ttl;
        // Ranks sharing this host (loopback grids, several ranks per node)
        // are members too; a host with none drops its copy at once.
        so.loopback = true;
        so.rate_bps = g.multicast_pace_bps(me, lane);
        // The site's `mtu` when it declares one (jumbo frames on every
        // member's lane); else loopback's 64 KiB when the site is this host's
        // loopback (every member shares the interface); elsewhere Ethernet's
        // 1500, which every member's NIC takes even where the sender's has
        // jumbo frames.
        if (site.multicast.mtu > 0)
          so.path_mtu = static_cast<size_t>(site.multicast.mtu);
        else
          so.path_mtu = iface.starts_with("127.") ? 0 : lanes::kDefaultPathMtu;
        so.job_id = creds.job_id;
        so.key = s.key;
        s.sender = lanes::MulticastSender::open(io, so);
      }
    } catch (const std::exception& e) {
      throw lanes::NetworkError(where + ": " + e.what());
    }
  }

  // At set_endpoints: the world's receiver, when this rank's site carries
  // multicast, so a broadcast's datagrams are caught even if they come before
  // this rank enters it. Failing here is not an error yet: only a multicast
  // broadcast needs the socket (and then says why it has none).
  void open_world_receiver() {
    const auto& node = grid.nodes[static_cast<size_t>(rank)];
    const auto& site = grid.sites[static_cast<size_t>(node.site)];
    if (!site.multicast.enabled || site.ranks.size() < 2) return;
    try {
      open_multicast(0, grid, rank, 0, false, true, seq);
    } catch (const std::exception&) {
      // Tried again, and reported, by the first multicast broadcast.
    }
  }

  // run_until, calling the idle hook whenever the loop has been idle for the interval.
  template <typename T>
  T drive(asio::awaitable<T> op) {
    if (!idle_hook) return run_until(io, std::move(op));
    std::optional<T> result;
    wait_hooked(store(std::move(op), result));
    return std::move(*result);
  }
  void drive(asio::awaitable<void> op) {
    if (!idle_hook) return run_until(io, std::move(op));
    wait_hooked(std::move(op));
  }
  template <typename T>
  static asio::awaitable<void> store(asio::awaitable<T> op, std::optional<T>& out) {
    out.emplace(co_await std::move(op));
  }
  void wait_hooked(asio::awaitable<void> op) {
    std::exception_ptr error;
    bool done = false;
    asio::co_spawn(io, std::move(op), [&](std::exception_ptr e) {
      error = e;
      done = true;
    });
    if (io.stopped()) io.restart();
    while (!done) {
      if (io.run_one_for(idle_interval) == 0) idle_hook();
      if (io.stopped()) io.restart();
    }
    if (error) std::rethrow_exception(error);
  }

  // drive(), failing this communicator when no point-to-point byte moves for
  // options.timeout while `op` waits (an MPI program's --timeout): the posted
  // operations fail with a message naming what was awaited, and every later
  // call fails the same way (the first error sticks).
  template <typename T>
  T drive_watched(asio::awaitable<T> op, const std::string& what) {
    struct Waiting {
      Impl& im;
      Waiting(Impl& i, const std::string& what) : im(i) {
        std::lock_guard lock(im.waiting_mu);
        im.waiting = what;
      }
      ~Waiting() {
        std::lock_guard lock(im.waiting_mu);
        im.waiting.clear();
      }
    } waiting_now{*this, what};
    if (options.timeout >= kNoTimeout) return drive(std::move(op));
    auto watch_state = std::make_shared<Watch>();
    asio::co_spawn(io, watch(watch_state, what), asio::detached);
    struct Done {
      std::shared_ptr<Watch> w;
      ~Done() { w->done = true; }
    } mark{watch_state};
    try {
      return drive(std::move(op));
    } catch (...) {
      if (watch_state->why.empty()) throw;
      failed = std::make_exception_ptr(lanes::NetworkError(watch_state->why));
      std::rethrow_exception(failed);
    }
  }
  mutable std::mutex waiting_mu;
  std::string waiting;  // under waiting_mu: what a blocking call waits for

  struct Watch {
    bool done = false;
    std::string why;  // set when the deadline fired
  };
  asio::awaitable<void> watch(std::shared_ptr<Watch> w, std::string what) {
    asio::steady_timer tick(io);
    const auto step =
        std::min<std::chrono::milliseconds>(options.timeout / 4, std::chrono::seconds(1));
    std::uint64_t last = moved_now();
    auto since = std::chrono::steady_clock::now();
    for (;;) {
      tick.expires_after(std::max(step, std::chrono::milliseconds(10)));
      co_await tick.async_wait(lanes::kAsTuple);
      if (w->done) co_return;
      const auto now = std::chrono::steady_clock::now();
      if (moved_now() != last) {
        last = moved_now();
        since = now;
      } else if (now - since >= options.timeout) {
        w->why = what + ": nothing moved for " + std::to_string(options.timeout.count()) +
                 " ms (--timeout)";
        messenger.close_all(w->why);
        transport.close_all();  // a send held back by a peer that stopped reading
        co_return;
      }
    }
  }

  // A broadcast started on this rank (bcast, ibcast, and their group forms),
  // waiting for its turn or running. Broadcasts start in the order they were
  // started, and each runs alone, after the ones before it are complete,
  // except one of a stream (ibcast_stream), which starts as soon as the one
  // before it has its place on its connections: a connection carries one
  // broadcast's frames at a time, in that order (runtime::LinkTurns; a frame
  // of another broadcast on a link is an error). Multicasts always run alone
  // (the receiver's window follows one broadcast at a time).
  struct Started {
    topology::Plan plan;  // names world ranks
    std::uint64_t sequence = 0;
    std::byte* buffer = nullptr;
    std::shared_ptr<const topology::Grid> group_grid;  // null: the world's
    int me = 0;                                        // this rank in that grid
    std::uint64_t communicator = 0;                    // 0: the world
    std::uint64_t ticket = 0;                          // its place in the order
    // Resolved on the plan's own grid, before a group's plan is translated to
    // world ranks (the model's choice reads the grid the plan was made for).
    std::uint64_t segment_bytes = 0;
    bool overlap = false;  // may start before the ones before it are complete
  };
  std::uint64_t bcast_tickets = 0;  // broadcasts started
  std::uint64_t bcast_turn = 0;     // the ticket whose broadcast may start now
  size_t bcasts_running = 0;        // started and not complete
  bool multicast_running = false;
  Event bcast_done{io.get_executor()};
  LinkTurns link_turns{io.get_executor()};
  size_t in_flight = 0;  // coroutines started by isend, ibcast and exchange, not finished
  std::map<std::uint64_t, size_t> broadcasts_in_flight;  // by communicator

  // `segment`: resolved on the plan's own grid (0: on the world's, from `plan`).
  Started started(topology::Plan plan, std::uint64_t sequence, void* buffer,
                  std::shared_ptr<const topology::Grid> group_grid, int me,
                  std::uint64_t communicator, std::uint64_t segment = 0) {
    if (segment == 0) segment = topology::resolve_segment_bytes(grid, plan, options.segment_bytes);
    return Started{std::move(plan),       sequence, static_cast<std::byte*>(buffer),
                   std::move(group_grid), me,       communicator,
                   bcast_tickets++,       segment};
  }

  // A started broadcast of the world, or of a group (plan over the group's
  // grid, translated to world ranks).
  Started world_broadcast(void* buffer, std::uint64_t bytes, int root,
                          std::optional<topology::Algorithm> algorithm,
                          std::uint64_t stream_bytes = 0) {
    if (failed) std::rethrow_exception(failed);
    auto [plan, segment] = world_plan(bytes, root, algorithm, stream_bytes);
    return started(std::move(plan), seq++, buffer, nullptr, rank, 0, segment);
  }
  // The plan bcast() runs for these arguments, and its segment (0: the plan's own).
  std::pair<topology::Plan, std::uint64_t> world_plan(std::uint64_t bytes, int root,
                                                      std::optional<topology::Algorithm> algorithm,
                                                      std::uint64_t stream_bytes) {
    const std::uint64_t priced = std::max(bytes, stream_bytes);
    // Named: no pricing. `auto`: the model's choice, the same on every rank.
    const auto algo =
        algorithm ? *algorithm : auto_choices.choose(grid, root, priced, options.thresholds);
    topology::Plan plan = topology::build_plan(grid, algo, root, bytes);
    std::uint64_t segment = 0;  // 0: this plan's own
    if (priced != bytes && plan.algorithm != topology::Algorithm::kCirculant) {
      if (stream_segment.algorithm != algo || stream_segment.root != root ||
          stream_segment.bytes != priced)
        // Priced as store and forward: each window takes its connections
        // in turn after the one before it, and larger segments cost more at
        // every boundary than forwarding pieces saves. A 64 MiB file on
        // testbed-2x4 (windows of 8 MiB): 32 and 64 KiB segments 3.02-3.10
        // s, 128 KiB 3.09-3.12, 256 KiB 3.15-3.22, 512 KiB (the cut-through
        // model's) 3.27-3.50 s, where in memory 512 KiB and 32 KiB measured
        // alike (docs/PERFORMANCE.md, "Cut-through").
        stream_segment = {algo, root, priced,
                          topology::resolve_segment_bytes(
                              grid, topology::build_plan(grid, algo, root, priced),
                              options.segment_bytes, topology::store_and_forward_model())};
      segment = stream_segment.segment;
    }
    return {std::move(plan), segment};
  }
  // The segment of the last stream priced (a file's windows ask for the same
  // one each time).
  struct {
    topology::Algorithm algorithm = topology::Algorithm::kMultilane;
    int root = -1;
    std::uint64_t bytes = 0;
    std::uint64_t segment = 0;
  } stream_segment;
  Started group_broadcast(std::uint64_t context, void* buffer, std::uint64_t bytes, int root,
                          std::optional<topology::Algorithm> algorithm) {
    if (failed) std::rethrow_exception(failed);
    const auto it = groups.find(context);
    if (it == groups.end())
      throw std::invalid_argument("no group with context " + std::to_string(context));
    auto& g = it->second;
    if (root < 0 || root >= static_cast<int>(g.members.size()))
      throw std::invalid_argument("root " + std::to_string(root) + " is outside the group's " +
                                  std::to_string(g.members.size()) + " ranks");
    const int root_world = g.members[static_cast<size_t>(root)];
    const int root_index = static_cast<int>(
        std::lower_bound(g.sorted.begin(), g.sorted.end(), root_world) - g.sorted.begin());
    const auto algo = algorithm
                          ? *algorithm
                          : g.auto_choices.choose(*g.grid, root_index, bytes, options.thresholds);
    topology::Plan plan = topology::build_plan(*g.grid, algo, root_index, bytes);
    const std::uint64_t segment =
        topology::resolve_segment_bytes(*g.grid, plan, options.segment_bytes);
    // The plan speaks of the restricted grid's ranks; the transport of the world's.
    for (auto& t : plan.transfers) {
      t.from = g.sorted[static_cast<size_t>(t.from)];
      t.to = g.sorted[static_cast<size_t>(t.to)];
    }
    for (auto& m : plan.multicasts) {
      m.from = g.sorted[static_cast<size_t>(m.from)];
      for (int& r : m.to) r = g.sorted[static_cast<size_t>(r)];  // stays ascending
    }
    plan.root = root_world;
    plan.ranks = grid.size();
    const int me = static_cast<int>(std::lower_bound(g.sorted.begin(), g.sorted.end(), rank) -
                                    g.sorted.begin());
    return started(std::move(plan), group_seq(context, g.seq++), buffer, g.grid, me, context,
                   segment);
  }

  // The first failure sticks: every link and message connection closes, and
  // every later call fails with it.
  void fail_all(std::exception_ptr e) {
    if (!failed) failed = e;
    transport.close_all();
    messenger.close_all("this rank's communicator failed in an earlier broadcast");
  }

  asio::awaitable<ExecStats> run_async(Started s) {
    const topology::Plan& plan = s.plan;
    const bool alone = !s.overlap || !plan.multicasts.empty();
    while (bcast_turn != s.ticket || (alone && bcasts_running > 0) || multicast_running)
      co_await bcast_done.wait();
    // The next broadcast may start once this one has its place on its
    // connections (or has ended without one).
    struct Next {
      Impl& im;
      bool multicasts;
      bool passed = false;
      void pass() {
        if (passed) return;
        passed = true;
        ++im.bcast_turn;
        im.bcast_done.notify_all();
      }
      ~Next() {
        --im.bcasts_running;
        if (multicasts) im.multicast_running = false;
        pass();
        im.bcast_done.notify_all();
      }
    } next{*this, !plan.multicasts.empty()};
    ++bcasts_running;
    multicast_running = next.multicasts;
    const topology::Grid& g = s.group_grid ? *s.group_grid : grid;
    try {
      if (failed) std::rethrow_exception(failed);
      ExecOptions eo;
      eo.timeout = options.timeout;
      eo.live = &live;
      MulticastPort port;
      if (!plan.multicasts.empty()) {
        port = multicast_port(s.communicator, g, s.me, plan, s.sequence);
        eo.multicast = &port;
      }
      // A broadcast that brings this rank no datagram (another algorithm, or a
      // multicast in other sites) still moves its receiver's window past its
      // id, so the next multicast's datagrams, which may come before this rank
      // asks for them, fall inside the window and are kept.
      const bool multicasts_here =
          std::any_of(plan.multicasts.begin(), plan.multicasts.end(), [&](const auto& m) {
            return m.from == rank || std::binary_search(m.to.begin(), m.to.end(), rank);
          });
      if (!multicasts_here)
        if (auto it = multicast.find(s.communicator); it != multicast.end() && it->second.receiver)
          it->second.receiver->pass(s.sequence);
      eo.segment_bytes = s.segment_bytes;
      eo.turns = &link_turns;
      eo.links_taken = [&next] { next.pass(); };
      if (!transport.failure().empty())
        throw lanes::NetworkError("rank " + std::to_string(rank) +
                                  " cannot serve its links: " + transport.failure());
      co_return co_await execute(transport, plan, s.sequence, s.buffer, eo);
    } catch (...) {
      fail_all(std::current_exception());
      throw;
    }
  }

  BcastInfo run(Started s) {
    const auto start = std::chrono::steady_clock::now();
    BcastInfo info{s.plan.algorithm, s.plan.size, s.segment_bytes, 0};
    const ExecStats stats = drive(run_async(std::move(s)));
    info.multicast_bytes_in = stats.multicast_bytes_in;
    info.multicast_bytes_out = stats.multicast_bytes_out;
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return info;
  }

  // A request for work that runs on the loop: complete (or failed) when `work` ends.
  P2pRequest spawn(asio::awaitable<void> work, std::string activity,
                   std::optional<std::uint64_t> broadcast_of) {
    auto op = std::make_shared<P2pOperation>();
    op->activity = std::move(activity);
    ++in_flight;
    if (broadcast_of) ++broadcasts_in_flight[*broadcast_of];
    asio::co_spawn(io, std::move(work), [op, this, broadcast_of](std::exception_ptr e) {
      if (e) op->send_error = lanes::what_of(e);
      op->sent = true;
      --in_flight;
      if (broadcast_of && --broadcasts_in_flight[*broadcast_of] == 0)
        broadcasts_in_flight.erase(*broadcast_of);
      messenger.notify();
    });
    return op;
  }
  P2pRequest ibroadcast(Started s) {
    const std::string activity =
        "broadcasting from " + transport.describe(s.plan.root, 0) +
        (s.communicator == 0 ? std::string() : " in group " + std::to_string(s.communicator));
    const std::uint64_t communicator = s.communicator;
    auto work = [](Impl& im, Started st) -> asio::awaitable<void> {
      co_await im.run_async(std::move(st));
    };
    return spawn(work(*this, std::move(s)), activity, communicator);
  }

  // One round's sends and receives at once, the rounds in order.
  asio::awaitable<void> run_rounds(std::uint64_t context,
                                   std::vector<std::vector<Communicator::Step>> rounds) {
    for (auto& round : rounds) {
      auto left = std::make_shared<size_t>(round.size());
      auto error = std::make_shared<std::string>();
      auto done = [this, left, error](std::exception_ptr e) {
        if (e && error->empty()) *error = lanes::what_of(e);
        --*left;
        messenger.notify();
      };
      for (const auto& step : round) {
        if (step.send && step.peer == rank) {
          messenger.deliver_local(context, step.tag, step.data, step.bytes);
          done(nullptr);
        } else if (step.send) {
          const std::uint64_t ticket = messenger.reserve_send(step.peer);
          asio::co_spawn(io,
                         messenger.send(step.peer, context, step.tag, step.data, step.bytes,
                                        lanes::Clock::now() + options.timeout, ticket),
                         done);
        } else {
          auto receive = [](Impl& im, std::uint64_t ctx,
                            Communicator::Step st) -> asio::awaitable<void> {
            const MessageInfo m =
                co_await im.messenger.receive(st.peer, ctx, st.tag, st.data, st.bytes);
            if (m.bytes != st.bytes)
              throw lanes::NetworkError(im.transport.describe(st.peer, 0) + " sent " +
                                        std::to_string(m.bytes) + " bytes where " +
                                        std::to_string(st.bytes) +
                                        " were expected (mismatched collective calls?)");
          };
          asio::co_spawn(io, receive(*this, context, step), done);
        }
      }
      while (*left > 0) co_await messenger.changed();
      if (!error->empty()) throw lanes::NetworkError(*error);
    }
  }

  std::uint64_t moved_now() const {
    return messenger.bytes_moved() + live.bytes_in.load(std::memory_order_relaxed) +
           live.bytes_out.load(std::memory_order_relaxed);
  }

  // Before the state goes: ends what was started and never waited for (the
  // peers see the connections close), so no coroutine outlives what it uses.
  // False if some did not end within a few seconds.
  bool drain() {
    if (in_flight == 0) return true;
    if (!failed)
      failed = std::make_exception_ptr(
          lanes::NetworkError("rank " + std::to_string(rank) + "'s communicator was closed"));
    transport.close_all();
    messenger.close_all("the communicator was closed with operations in flight");
    bcast_done.notify_all();
    transport.accepted().notify_all();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (in_flight > 0 && std::chrono::steady_clock::now() < until) {
      if (io.stopped()) io.restart();
      io.run_one_for(std::chrono::milliseconds(10));
    }
    return in_flight == 0;
  }
};

Communicator::Communicator(topology::Grid grid, int rank, JobCredentials creds,
                           CommOptions options) {
  if (rank < 0 || rank >= grid.size())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the topology's " +
                                std::to_string(grid.size()) + " ranks");
  // Certificates are loaded up front, so a missing file fails the rank before
  // any connection, naming the file; there is no plaintext fallback.
  std::shared_ptr<lanes::TlsContext> tls;
  if (grid.needs_tls(rank)) {
    std::string dir = options.cert_dir;
    if (dir.empty())
      if (const char* env = std::getenv(lanes::kCertDirEnv)) dir = env;
    const auto& node = grid.nodes[static_cast<size_t>(rank)];
    if (dir.empty())
      throw std::runtime_error(
          "rank " + std::to_string(rank) + " (" + node.name +
          ") has WAN links marked tls: true, so it needs certificates: give 'gridbcast launch' "
          "--cert-dir DIR or set " +
          lanes::kCertDirEnv +
          "=DIR, after 'gridbcast certs init DIR' and 'gridbcast certs issue TOPOLOGY --dir DIR'");
    tls = lanes::TlsContext::load(dir, node.name);
  }
  impl_ = std::make_unique<Impl>(std::move(grid), rank, std::move(creds), options, std::move(tls));
}

Communicator::~Communicator() {
  // A coroutine that did not end would touch the state after it is gone: then
  // the state is left behind (a leak, never a use after free).
  if (impl_ && !impl_->drain()) (void)impl_.release();
}

LanePorts Communicator::listen() {
  return impl_->transport.listen();
}

void Communicator::set_endpoints(EndpointTable table, const RunNonce& run_nonce) {
  if (impl_->run_nonce)
    throw std::logic_error("rank " + std::to_string(impl_->rank) +
                           ": set_endpoints called again (once per communicator: its "
                           "multicast keys hold the first run nonce)");
  if (std::all_of(run_nonce.begin(), run_nonce.end(), [](std::uint8_t b) { return b == 0; }))
    throw std::invalid_argument(
        "the run nonce is all zero: whoever makes the endpoint table draws one with "
        "new_run_nonce() for every run");
  if (static_cast<int>(table.size()) != impl_->grid.size())
    throw std::invalid_argument("endpoint table has " + std::to_string(table.size()) +
                                " ranks, the topology " + std::to_string(impl_->grid.size()));
  const int lanes = impl_->grid.lane_count();
  for (size_t r = 0; r < table.size(); ++r)
    for (int lane = 0; lane < kMaxLanes; ++lane)
      if ((table[r][static_cast<size_t>(lane)] == 0) == (lane < lanes))
        throw std::invalid_argument(
            "endpoint table: rank " + std::to_string(r) + " lane " + std::to_string(lane) +
            (lane < lanes ? " has no port"
                          : " has a port, but ranks have " + std::to_string(lanes) + " lanes"));
  impl_->transport.set_table(std::move(table));
  impl_->run_nonce = run_nonce;
  impl_->open_world_receiver();
}

std::vector<topology::ProbeSample> Communicator::probe(int index, const topology::ProbePhase& phase,
                                                       int pings) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  ProbeRunOptions o;
  o.pings = pings;
  o.grace = im.options.timeout;
  return im.drive(run_probe_phase(im.transport, index, phase, o));
}

BcastInfo Communicator::bcast(void* buffer, std::uint64_t bytes, int root,
                              std::optional<topology::Algorithm> algorithm,
                              std::uint64_t stream_bytes) {
  return impl_->run(impl_->world_broadcast(buffer, bytes, root, algorithm, stream_bytes));
}

void Communicator::prepare(std::uint64_t bytes, int root,
                           std::optional<topology::Algorithm> algorithm,
                           std::uint64_t stream_bytes) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  check_peer(root, im.grid.size(), "root");
  auto [plan, segment] = im.world_plan(bytes, root, algorithm, stream_bytes);
  topology::SegmentOptions so;
  so.segment_bytes = segment != 0
                         ? segment
                         : topology::resolve_segment_bytes(im.grid, plan, im.options.segment_bytes);
  const topology::RankSegments mine = topology::rank_segments(plan, im.rank, so);
  for (const auto& link : mine.send) {
    std::vector<bool> used(static_cast<size_t>(link.streams), false);
    for (const auto& seg : link.segments) used[static_cast<size_t>(seg.stream)] = true;
    for (int s = 0; s < link.streams; ++s) {
      if (!used[static_cast<size_t>(s)]) continue;
      const LinkKey key{link.to, link.lane_from, link.lane_to, s};
      // Made ahead, or not: the broadcast connects (and names a failure)
      // itself if this did not.
      auto connect = [](Impl& impl, LinkKey k) -> asio::awaitable<void> {
        try {
          (void)co_await impl.transport.outgoing(k, lanes::Clock::now() + impl.options.timeout);
        } catch (const std::exception& e) {
          lanes::log::debug("gridbcast rank " + std::to_string(impl.rank) +
                            ": a link made ahead of its broadcast failed (the broadcast "
                            "tries again): " +
                            e.what());
        }
      };
      ++im.in_flight;
      asio::co_spawn(im.io, connect(im, key), [&im](std::exception_ptr) {
        --im.in_flight;
        im.messenger.notify();
      });
    }
  }
}

topology::Algorithm Communicator::auto_algorithm(std::uint64_t bytes, int root) {
  auto& im = *impl_;
  if (root < 0 || root >= im.grid.size())
    throw std::invalid_argument("root " + std::to_string(root) + " is outside 0.." +
                                std::to_string(im.grid.size() - 1));
  return im.auto_choices.choose(im.grid, root, bytes, im.options.thresholds);
}

P2pRequest Communicator::ibcast(void* buffer, std::uint64_t bytes, int root,
                                std::optional<topology::Algorithm> algorithm) {
  return impl_->ibroadcast(impl_->world_broadcast(buffer, bytes, root, algorithm));
}

P2pRequest Communicator::ibcast_stream(void* buffer, std::uint64_t bytes, int root,
                                       std::optional<topology::Algorithm> algorithm,
                                       std::uint64_t stream_bytes, BcastInfo* info) {
  Impl::Started s = impl_->world_broadcast(buffer, bytes, root, algorithm, stream_bytes);
  s.overlap = true;
  if (info) *info = BcastInfo{s.plan.algorithm, s.plan.size, s.segment_bytes, 0};
  return impl_->ibroadcast(std::move(s));
}

void Communicator::define_group(std::uint64_t context, std::vector<int> world_ranks) {
  auto& im = *impl_;
  if (im.groups.contains(context))
    throw std::invalid_argument("a group with context " + std::to_string(context) +
                                " exists already");
  if (context == 0)
    throw std::invalid_argument("context 0 is the world's (its multicast key and sockets)");
  if (im.retired_contexts.contains(context))
    throw std::invalid_argument(
        "context " + std::to_string(context) +
        " multicast before it was forgotten; a context is used once per run (the same "
        "context would repeat its datagram key and broadcast ids)");
  std::vector<int> sorted = world_ranks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("a group lists a rank twice");
  if (!std::binary_search(sorted.begin(), sorted.end(), im.rank))
    throw std::invalid_argument("rank " + std::to_string(im.rank) +
                                " is not a member of the group");
  Impl::Group g;
  g.grid = std::make_shared<const topology::Grid>(restrict_grid(im.grid, sorted));  // checks ranks
  g.members = std::move(world_ranks);
  g.sorted = std::move(sorted);
  im.groups.emplace(context, std::move(g));
}

void Communicator::forget_group(std::uint64_t context) {
  auto& im = *impl_;
  if (im.broadcasts_in_flight.contains(context))
    throw std::logic_error("group " + std::to_string(context) +
                           " has a non-blocking broadcast in flight: wait for it before "
                           "forgetting the group");
  if (im.groups.erase(context) == 0 || context == 0) return;
  // Its multicast sockets too, keeping what they counted. A context that had
  // a datagram key is retired: only contexts that multicast here cost memory.
  const auto it = im.multicast.find(context);
  if (it == im.multicast.end()) return;
  if (const auto& r = it->second.receiver)
    for (size_t i = 0; i < lanes::kRejectionKinds; ++i)
      im.retired_rejections[i] += r->rejected(static_cast<lanes::Rejection>(i));
  if (it->second.keyed) im.retired_contexts.insert(context);
  im.multicast.erase(it);
}

BcastInfo Communicator::bcast_group(std::uint64_t context, void* buffer, std::uint64_t bytes,
                                    int root, std::optional<topology::Algorithm> algorithm) {
  return impl_->run(impl_->group_broadcast(context, buffer, bytes, root, algorithm));
}

P2pRequest Communicator::ibcast_group(std::uint64_t context, void* buffer, std::uint64_t bytes,
                                      int root, std::optional<topology::Algorithm> algorithm) {
  return impl_->ibroadcast(impl_->group_broadcast(context, buffer, bytes, root, algorithm));
}

P2pRequest Communicator::exchange(std::uint64_t context, std::vector<std::vector<Step>> rounds,
                                  std::string activity) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  for (const auto& round : rounds)
    for (const auto& step : round) check_peer(step.peer, im.grid.size(), "peer");
  return im.spawn(im.run_rounds(context, std::move(rounds)), std::move(activity), std::nullopt);
}

void Communicator::send(int dest, std::uint64_t context, std::int64_t tag, const void* data,
                        std::uint64_t bytes) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  check_peer(dest, im.grid.size(), "destination");
  const std::uint64_t ticket = dest == im.rank ? 0 : im.messenger.reserve_send(dest);
  im.drive_watched(im.messenger.send(dest, context, tag, static_cast<const std::byte*>(data), bytes,
                                     lanes::Clock::now() + im.options.timeout, ticket),
                   "sending to " + im.transport.describe(dest, 0));
}

Received Communicator::receive(std::optional<int> source, std::uint64_t context,
                               std::optional<std::int64_t> tag, void* data,
                               std::uint64_t capacity) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  if (source) check_peer(*source, im.grid.size(), "source");
  const MessageInfo m = im.drive_watched(
      im.messenger.receive(source, context, tag, static_cast<std::byte*>(data), capacity),
      source ? "waiting for a message from " + im.transport.describe(*source, 0)
             : std::string("waiting for a message from any rank"));
  return Received{m.source, m.tag, m.bytes};
}

P2pRequest Communicator::isend(int dest, std::uint64_t context, std::int64_t tag, const void* data,
                               std::uint64_t bytes) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  check_peer(dest, im.grid.size(), "destination");
  auto op = std::make_shared<P2pOperation>();
  op->peer = dest;
  const auto* p = static_cast<const std::byte*>(data);
  if (dest == im.rank) {
    im.messenger.deliver_local(context, tag, p, bytes);
    op->sent = true;
    return op;
  }
  // The ticket now, so the bytes leave in the order the sends were started.
  const std::uint64_t ticket = im.messenger.reserve_send(dest);
  ++im.in_flight;
  asio::co_spawn(im.io,
                 im.messenger.send(dest, context, tag, p, bytes,
                                   lanes::Clock::now() + im.options.timeout, ticket),
                 [op, &im](std::exception_ptr e) {
                   if (e) op->send_error = lanes::what_of(e);
                   op->sent = true;
                   --im.in_flight;
                   im.messenger.notify();
                 });
  return op;
}

P2pRequest Communicator::irecv(std::optional<int> source, std::uint64_t context,
                               std::optional<std::int64_t> tag, void* data,
                               std::uint64_t capacity) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  if (source) check_peer(*source, im.grid.size(), "source");
  auto op = std::make_shared<P2pOperation>();
  op->is_receive = true;
  op->peer = source.value_or(-1);
  op->posted.source = source;
  op->posted.context = context;
  op->posted.tag = tag;
  op->posted.data = static_cast<std::byte*>(data);
  op->posted.capacity = capacity;
  im.messenger.post(op->posted);
  return op;
}

void Communicator::settle(const std::vector<P2pRequest>& requests) noexcept {
  auto& im = *impl_;
  auto ended = [&requests] {
    return std::all_of(requests.begin(), requests.end(),
                       [](const P2pRequest& r) { return !r || r->state().complete; });
  };
  if (ended()) return;
  try {
    if (!im.failed) wait(requests, requests.size());
  } catch (const std::exception&) {
    // Failed or stalled: what is left is ended below.
  }
  if (ended()) return;
  im.fail_all(std::make_exception_ptr(lanes::NetworkError(
      "rank " + std::to_string(im.rank) + "'s communicator failed with broadcasts in flight")));
  im.bcast_done.notify_all();
  im.link_turns.changed.notify_all();
  im.transport.accepted().notify_all();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!ended() && std::chrono::steady_clock::now() < until) {
    if (im.io.stopped()) im.io.restart();
    im.io.run_one_for(std::chrono::milliseconds(10));
  }
  if (ended()) return;
  lanes::log::error("gridbcast rank " + std::to_string(im.rank) +
                    ": broadcasts still ran 5 s after their links were closed; stopping rather "
                    "than free the memory they use");
  std::abort();
}

void Communicator::progress_until(const std::function<bool()>& done) {
  auto& im = *impl_;
  if (done() || im.failed) return;
  auto until = [](Impl& i, const std::function<bool()>& d) -> asio::awaitable<void> {
    asio::steady_timer t(i.io);
    while (!d() && !i.failed) {
      t.expires_after(std::chrono::milliseconds(1));
      co_await t.async_wait(lanes::kAsTuple);
    }
  };
  im.drive(until(im, done));
}

void Communicator::poll() {
  auto& im = *impl_;
  if (im.io.stopped()) im.io.restart();
  im.io.poll();
}

P2pState Communicator::state(const P2pRequest& request) const {
  return request ? request->state() : P2pState{true, {}, {}};
}

void Communicator::wait(const std::vector<P2pRequest>& requests, size_t needed) {
  auto& im = *impl_;
  // Enough complete, or one failed.
  auto ready = [&requests, needed] {
    size_t complete = 0;
    for (const auto& r : requests) {
      const P2pState s = r ? r->state() : P2pState{true, {}, {}};
      if (!s.error.empty()) return true;
      if (s.complete) ++complete;
    }
    return complete >= needed;
  };
  auto first_error = [&requests]() -> std::string {
    for (const auto& r : requests)
      if (r && !r->state().error.empty()) return r->state().error;
    return {};
  };
  if (!ready()) {
    if (im.failed) std::rethrow_exception(im.failed);
    std::string what = "waiting for requests";
    for (const auto& r : requests) {
      if (!r || r->state().complete) continue;
      if (!r->activity.empty())
        what = r->activity;
      else if (!r->is_receive)
        what = "sending to " + im.transport.describe(r->peer, 0);
      else if (r->peer >= 0)
        what = "waiting for a message from " + im.transport.describe(r->peer, 0);
      else
        what = "waiting for a message from any rank";
      break;
    }
    auto until = [](Messenger& m, std::function<bool()> done) -> asio::awaitable<void> {
      while (!done()) co_await m.changed();
    };
    im.drive_watched(until(im.messenger, ready), what);
  }
  if (const std::string e = first_error(); !e.empty()) {
    if (im.failed) std::rethrow_exception(im.failed);  // the deadline's account
    throw lanes::NetworkError(e);
  }
}

void Communicator::cancel_receive(const P2pRequest& request) {
  if (request && request->is_receive) impl_->messenger.unpost(request->posted);
}

std::optional<Received> Communicator::probe(std::optional<int> source, std::uint64_t context,
                                            std::optional<std::int64_t> tag, bool block) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  if (source) check_peer(*source, im.grid.size(), "source");
  poll();
  std::optional<MessageInfo> m = im.messenger.probe(source, context, tag);
  if (!m && block) {
    auto until = [](Messenger& ms, std::optional<int> src, std::uint64_t ctx,
                    std::optional<std::int64_t> t) -> asio::awaitable<MessageInfo> {
      for (;;) {
        if (auto found = ms.probe(src, ctx, t)) co_return *found;
        co_await ms.changed();
      }
    };
    m = im.drive_watched(until(im.messenger, source, context, tag),
                         source ? "probing for a message from " + im.transport.describe(*source, 0)
                                : std::string("probing for a message from any rank"));
  }
  if (!m) return std::nullopt;
  return Received{m->source, m->tag, m->bytes};
}

void Communicator::set_idle_hook(std::function<void()> hook, std::chrono::microseconds interval) {
  impl_->idle_hook = std::move(hook);
  impl_->idle_interval = interval;
}

int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::size() const {
  return impl_->grid.size();
}
std::chrono::milliseconds Communicator::timeout() const {
  return impl_->options.timeout;
}
const topology::Grid& Communicator::grid() const {
  return impl_->grid;
}
Communicator::Progress Communicator::progress() const {
  return {impl_->live.bytes_in.load(std::memory_order_relaxed),
          impl_->live.bytes_out.load(std::memory_order_relaxed)};
}

std::vector<LinkSample> Communicator::link_samples() const {
  return impl_->transport.link_samples();
}

std::string Communicator::waiting() const {
  std::lock_guard lock(impl_->waiting_mu);
  return impl_->waiting;
}

std::uint64_t Communicator::moved() const {
  return impl_->live.bytes_in.load(std::memory_order_relaxed) +
         impl_->live.bytes_out.load(std::memory_order_relaxed) + impl_->messenger.bytes_moved();
}

std::uint64_t Communicator::rejected_connections() const {
  return impl_->transport.rejected_connections();
}

lanes::RejectionCounts Communicator::rejected_datagrams() const {
  lanes::RejectionCounts counts = impl_->retired_rejections;
  for (const auto& [communicator, sockets] : impl_->multicast)
    if (sockets.receiver)
      for (size_t i = 0; i < lanes::kRejectionKinds; ++i)
        counts[i] += sockets.receiver->rejected(static_cast<lanes::Rejection>(i));
  return counts;
}

}  // namespace gridbcast::runtime
