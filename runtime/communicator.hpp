// The rank side of gridbcast: `bcast(buf, bytes, root)` over lanes, for one
// rank of a job. No Asio in this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lanes/datagram.hpp"
#include "runtime/endpoints.hpp"
#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"
#include "topology/probe.hpp"

namespace gridbcast::runtime {

// A deadline so far away that it never fires: MPI programs wait as long as
// their peers compute (the launcher still notices a rank that dies).
inline constexpr std::chrono::milliseconds kNoTimeout{std::chrono::hours(24 * 365 * 10)};

struct CommOptions {
  std::chrono::milliseconds timeout{30'000};  // a broadcast fails after this long without progress
  std::uint64_t segment_bytes = 0;            // 0: the topology's, else automatic
  topology::SelectionThresholds thresholds;   // for algorithm selection
  // Certificates for WAN links marked tls: true (`gridbcast certs`): the CA
  // and NODE.crt/NODE.key of this rank's node. Empty: GRIDBCAST_CERT_DIR.
  // Unused (and not needed) when no tls: true link leads to this rank.
  std::string cert_dir;
  // Tests: which fragments of a multicast this rank sends (datagram loss on
  // purpose, the reliable ring delivers the rest). Empty: every fragment.
  std::function<bool(std::uint32_t index)> multicast_include;
};

struct BcastInfo {
  topology::Algorithm algorithm;
  std::uint64_t bytes = 0;
  std::uint64_t segment_bytes = 0;
  double seconds = 0;  // on this rank, from the call to its return
  // Multicast algorithm: bytes this rank held first by datagram (before the
  // ring brought them), and bytes it multicast.
  std::uint64_t multicast_bytes_in = 0;
  std::uint64_t multicast_bytes_out = 0;
};

// What receive() found: the sender (world rank), its tag, and the message's full
// length (more than the capacity: it was truncated to the capacity).
struct Received {
  int source = -1;
  std::int64_t tag = 0;
  std::uint64_t bytes = 0;
};

// A started non-blocking send or receive (Communicator::isend / irecv). It
// moves whenever the communicator's event loop runs, i.e. inside any call of
// the communicator (test, wait, send, receive, bcast, ...); between calls
// nothing moves. Shared by the caller and the loop; the buffer it was given
// must stay valid until it is complete (done or failed).
struct P2pOperation;
using P2pRequest = std::shared_ptr<P2pOperation>;
struct P2pState {
  bool complete = false;  // done or failed
  std::string error;      // failed: why, naming the peer
  Received received;      // a completed receive: sender, tag, full length
};

class Communicator {
 public:
  Communicator(topology::Grid grid, int rank, JobCredentials creds, CommOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Opens this rank's listening lanes; the ports go to the rendezvous.
  LanePorts listen();
  // Every rank's ports, and the run's nonce (new_run_nonce(), drawn once per
  // launch by whoever made the table, the same on every rank). Called once.
  // Throws std::invalid_argument for a table that does not fit the topology
  // or an all-zero nonce, std::logic_error when called again. Multicast keys
  // its datagrams with the nonce: a communicator without one never opens a
  // multicast socket (its multicast broadcasts fail saying so).
  void set_endpoints(EndpointTable table, const RunNonce& run_nonce);

  // Every rank calls it with the same bytes, root, algorithm and
  // stream_bytes (they decide the plan and its segments). Throws
  // std::runtime_error naming the failed peer; after a failure every later
  // call throws the same error. `stream_bytes`, when above `bytes`: this
  // broadcast is one of back-to-back broadcasts from this root that move that
  // many bytes in all (a file's windows), whose pipeline fills once, so the
  // algorithm (when none is given) and the segment are the ones chosen for
  // the stream, not for each part (circulant keeps its plan's blocks).
  BcastInfo bcast(void* buffer, std::uint64_t bytes, int root,
                  std::optional<topology::Algorithm> algorithm = std::nullopt,
                  std::uint64_t stream_bytes = 0);
  // Starts making, in the background, the connections this rank sends on in
  // the broadcast bcast() would run for the same arguments, so that their
  // handshakes (a round trip or two each across a WAN link) overlap whatever
  // this rank does on the communicator before that broadcast (a file's
  // start-up exchange). Any call progresses them; one that fails is made
  // again by the broadcast, which names the failure. Throws like bcast() for
  // a bad root or a failed communicator.
  void prepare(std::uint64_t bytes, int root,
               std::optional<topology::Algorithm> algorithm = std::nullopt,
               std::uint64_t stream_bytes = 0);
  // What bcast() without an algorithm runs for these bytes and root: the cost
  // model's choice (topology/select.hpp), priced on the first call of each
  // size class and root and remembered. A benchmark asks before it starts
  // its clock, so that the pricing is not timed.
  topology::Algorithm auto_algorithm(std::uint64_t bytes, int root);

  // Subgroups (what MPI communicators from split and dup map onto): world ranks
  // in the group's rank order, including this rank, under a context id that is
  // the same on every member and unique in the job. A group broadcast plans over
  // the topology restricted to the members (runtime/subgrid.hpp) and has its own
  // sequence numbers. Throws std::invalid_argument for bad ranks, a context
  // already in use, context 0 (the world's multicast key), or a context whose
  // group multicast on this rank before it was forgotten: its datagram key
  // would be the same again and its broadcast ids would start over, so that
  // group's recorded datagrams would verify in the new one.
  void define_group(std::uint64_t context, std::vector<int> world_ranks);
  // Throws std::logic_error while a broadcast of the group started with
  // ibcast_group is not complete (wait for it first).
  void forget_group(std::uint64_t context);
  // Like bcast(), on the members of a group; `root` is a group rank.
  BcastInfo bcast_group(std::uint64_t context, void* buffer, std::uint64_t bytes, int root,
                        std::optional<topology::Algorithm> algorithm = std::nullopt);

  // Point-to-point messages between world ranks (runtime/p2p.hpp), separated
  // by context and tag. send() returns once the bytes are on their way (a send
  // to this rank is queued); messages from one sender in one context are
  // received in the order sent. receive() takes the first matching message
  // (nullopt: any source, any tag), copies at most `capacity` bytes and reports
  // the full length. Both throw std::runtime_error naming the peer.
  void send(int dest, std::uint64_t context, std::int64_t tag, const void* data,
            std::uint64_t bytes);
  Received receive(std::optional<int> source, std::uint64_t context,
                   std::optional<std::int64_t> tag, void* data, std::uint64_t capacity);

  // Non-blocking point-to-point with the semantics of send() and receive():
  // isend's bytes leave after those of every earlier send to `dest` (a send to
  // this rank completes at once, queued as unexpected if nobody waits); irecv
  // is posted at once, so receives are matched in the order they were started,
  // blocking ones included. Throw std::runtime_error if the communicator failed.
  P2pRequest isend(int dest, std::uint64_t context, std::int64_t tag, const void* data,
                   std::uint64_t bytes);
  P2pRequest irecv(std::optional<int> source, std::uint64_t context,
                   std::optional<std::int64_t> tag, void* data, std::uint64_t capacity);
  // Non-blocking broadcasts, with the semantics of bcast() and bcast_group():
  // started now (the plan is chosen now, from the same arguments on every
  // member), progressed whenever this communicator runs (any call, poll() and
  // wait() included), complete when this rank's part is done; wait(), state()
  // and poll() serve them like a send. Every broadcast of a communicator,
  // blocking or not and whatever its group, runs after the ones started
  // before it (their links carry one broadcast at a time), so members must
  // start them in the same order. A wait on one that stalls names it
  // ("broadcasting from rank R"). Throws std::invalid_argument like bcast().
  P2pRequest ibcast(void* buffer, std::uint64_t bytes, int root,
                    std::optional<topology::Algorithm> algorithm = std::nullopt);
  P2pRequest ibcast_group(std::uint64_t context, void* buffer, std::uint64_t bytes, int root,
                          std::optional<topology::Algorithm> algorithm = std::nullopt);
  // Like ibcast(), for one of back-to-back broadcasts of a stream
  // (`stream_bytes` as in bcast()), which does not wait for the broadcasts
  // started before it to complete: it starts once the one before it has its
  // place on its connections, and each connection carries their frames first.
  // So its segments leave on a link the broadcast before has finished with
  // while that one still arrives on another, and the pipeline does not drain
  // between the two. Its buffer must not be another running broadcast's.
  // Every member starts the same ones in the same order. `info`, when given:
  // the plan's algorithm, bytes and segment (seconds 0).
  P2pRequest ibcast_stream(void* buffer, std::uint64_t bytes, int root,
                           std::optional<topology::Algorithm> algorithm, std::uint64_t stream_bytes,
                           BcastInfo* info = nullptr);

  // A non-blocking schedule of point-to-point rounds (a non-blocking barrier,
  // for instance): round k's sends and receives are all started when round
  // k-1 is complete; a receive must bring exactly `bytes` bytes, else the
  // request fails naming the sender. Messages are in `context` and are
  // matched like any other (choose tags nobody else uses there). `data` must
  // stay valid until the request is complete. `activity` names the schedule
  // when a wait on it stalls ("in MPI_Ibarrier").
  struct Step {
    bool send = false;
    int peer = 0;  // world rank
    std::int64_t tag = 0;
    std::byte* data = nullptr;
    std::uint64_t bytes = 0;
  };
  P2pRequest exchange(std::uint64_t context, std::vector<std::vector<Step>> rounds,
                      std::string activity);

  // Runs whatever is ready without blocking.
  void poll();
  P2pState state(const P2pRequest& request) const;
  // Blocks until at least `needed` of `requests` are complete (null entries
  // count as complete), or one failed. Fails, naming the first peer still
  // awaited, when nothing moves for the timeout (then the communicator fails
  // as receive() does and the requests fail). Throws std::runtime_error then.
  void wait(const std::vector<P2pRequest>& requests, size_t needed);
  // Runs this communicator until every one of `requests` has ended, complete
  // or failed, whatever failed before: a caller leaving on an error frees
  // the buffers they use only after it (wait() returns at the first failure,
  // and at once on a failed communicator). What does not end within the
  // timeout, or once the communicator has failed, is ended by failing the
  // communicator and closing its links. Never throws; aborts the process,
  // saying so, if they still have not ended 5 s after that (they would use
  // freed memory).
  void settle(const std::vector<P2pRequest>& requests) noexcept;
  // Runs this communicator, so that what is in flight moves, until `done`
  // (asked about every millisecond) is true: for a wait on another thread's
  // work while broadcasts are in flight. Returns early if the communicator
  // has failed (the next call on it says why).
  void progress_until(const std::function<bool()>& done);
  // Withdraws a receive that has not completed yet (its buffer is released).
  void cancel_receive(const P2pRequest& request);
  // The message a receive posted now would take first: nullopt when none has
  // arrived (or started arriving); with `block`, waits for one (with the
  // timeout of receive()).
  std::optional<Received> probe(std::optional<int> source, std::uint64_t context,
                                std::optional<std::int64_t> tag, bool block);

  // Called about every `interval` while a call of this communicator waits, e.g.
  // to let another communication library make progress. Empty: none.
  void set_idle_hook(std::function<void()> hook,
                     std::chrono::microseconds interval = std::chrono::milliseconds(1));

  int rank() const;
  int size() const;
  const topology::Grid& grid() const;
  std::uint64_t rejected_connections() const;

  // `gridbcast probe`: phase `index` of a probe schedule (topology/probe.hpp,
  // built over this communicator's grid), run with every other rank at once;
  // this rank's samples (the flows it measures). A phase that has not ended
  // the communicator's timeout after twice its seconds fails, naming what it
  // waits for. Throws std::runtime_error naming the peer.
  std::vector<topology::ProbeSample> probe(int index, const topology::ProbePhase& phase, int pings);
  // Multicast datagrams this rank's receivers dropped, by reason (bad MAC, a
  // broadcast id already over or too far ahead, ...), every communicator's
  // together, forgotten groups' included. Call from the rank's own thread.
  lanes::RejectionCounts rejected_datagrams() const;
  // How long a call may wait with nothing moving (CommOptions::timeout).
  std::chrono::milliseconds timeout() const;
  // Broadcast bytes received and sent since this communicator began, all
  // broadcasts together. Safe to call from another thread while one runs.
  struct Progress {
    std::uint64_t bytes_in = 0;
    std::uint64_t bytes_out = 0;
  };
  Progress progress() const;
  // The kernel's figures for this rank's outgoing broadcast connections, one
  // per (peer, lane_from, lane_to): bytes acknowledged and bytes waiting to be
  // sent (runtime::LinkSample). Safe to call from another thread while one runs.
  std::vector<LinkSample> link_samples() const;
  // What this rank waits for in a blocking call now ("waiting for a message
  // from rank 0 (...)"), or "" when it is in none; and the bytes it has moved
  // in all (broadcasts and messages). Both safe from any thread: the job's
  // heartbeat reports them, so the launcher can name a program that is stuck.
  std::string waiting() const;
  std::uint64_t moved() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridbcast::runtime
