// Supervision of a job's rank processes, apart from what the job does (the
// drivers and the control protocol, job/launcher.cpp):
//  - starting the ranks through a Backend;
//  - their exits, and the launcher's own SIGINT and SIGTERM, as events on the
//    launcher's io_context;
//  - their liveness: when each was last heard from, and which went silent;
//  - stopping them;
//  - the record of what went wrong, and the verdict it adds up to: which
//    cause heads the report and which ranks were lost.
// The launcher decides what an exit or a silence means for its kind of job;
// this class only reports them and keeps the record.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "job/backend.hpp"
#include "lanes/net.hpp"
#include "topology/grid.hpp"

namespace gridbcast::job {

// Why the job failed, ranked: the headline is the most telling cause, earliest
// first within a rank. A rank's own report explains its exit; a process that
// died or stopped without a word explains what its peers report about it.
enum class Cause {
  kStraggler = -1,  // a rank that held the others back (job/straggler.hpp), set aside
  kSilence = 0,     // a rank sent nothing, not even heartbeats (stopped, host or link down)
  kDeath = 1,       // a rank process died or exited before its time, unexplained
  // A rank alive but cut off from its peers (its links stalled, job/cut.hpp),
  // or with rank -1 a WAN link the others route around.
  kCutOff = 2,
  kAbort = 3,     // MPI_Abort (or a fatal MPI error, often about a peer above)
  kReported = 4,  // a rank's own error report
  kOther = 5,     // what followed, or the launcher's own findings
};

struct Failure {
  Cause cause;
  std::string what;
  lanes::Clock::time_point when;
  // kDeath, kSilence, kCutOff, kStraggler: the rank that died, went silent,
  // was cut off or straggled (kCutOff: -1 for a WAN link)
  int rank = -1;
};

// What went wrong in a job, in the order it came.
class FailureLog {
 public:
  static constexpr size_t kMaxThen = 5;  // causes reported after the headline

  void add(Cause cause, std::string what, int rank = -1);
  bool empty() const { return failures_.empty(); }
  const std::vector<Failure>& all() const { return failures_; }
  // Whether a failure of `cause` about `rank` is recorded.
  bool names(Cause cause, int rank) const;

  struct Lost {
    int rank = -1;
    std::string cause;       // the first failure about it
    bool straggler = false;  // alive, set aside as a straggler
  };
  struct Verdict {
    std::string headline;           // the most telling cause, the earliest of its kind
    std::vector<std::string> then;  // the others in the order they came, at most kMaxThen
    // The headline is a lost rank (died, went silent, cut off, or set aside
    // as a straggler: then the job was stopped for it), or a WAN link cut.
    bool lost_first = false;
    // Every rank that died, went silent or was cut off, once; when a straggler heads the
    // verdict, the stragglers alone (the others were stopped with the job).
    std::vector<Lost> lost;
  };
  // Throws std::logic_error when nothing failed.
  Verdict verdict() const;

 private:
  std::vector<Failure> failures_;
};

class Supervisor {
 public:
  using Clock = lanes::Clock;
  struct Handlers {
    std::function<void(const Backend::Exit&)> exited;  // a rank process ended
    std::function<void(int signo)> interrupted;        // SIGINT or SIGTERM reached the launcher
  };

  // Installs the signal handlers at once, before any rank starts, so that no
  // child's exit goes unnoticed.
  Supervisor(asio::io_context& io, Backend& backend, int ranks);

  // Starts every rank of `grid` with `env` plus GRIDBCAST_RANK; `starting`
  // hears of each first. Throws what the backend throws.
  void start_all(const topology::Grid& grid, const Backend::Env& env, const std::string& secret_hex,
                 const std::function<void(int rank)>& starting);
  // Delivers exits and interrupts to `h` until the io_context stops.
  asio::awaitable<void> watch(Handlers h);
  // Exits the signal watch has not delivered yet, for a launcher that polls.
  std::vector<Backend::Exit> reap() { return backend_.reap(); }
  int running() const { return backend_.running(); }
  bool external() const { return backend_.external(); }
  // SIGTERM to every rank's process group, SIGKILL after 3 s; returns within
  // about 6 s, with SIGKILL to whatever is left.
  void stop_all();

  // Liveness. A rank is heard from with every control message it sends, its
  // heartbeats included.
  void heard(int rank, Clock::time_point now = Clock::now());
  void heard_all(Clock::time_point now = Clock::now());
  Clock::time_point last_heard(int rank) const;
  // The ranks `watched` accepts that have been silent for longer than
  // `limit` at `now`, with how long. A rank named here counts as heard at
  // `now`, so it is named again only after another `limit`.
  std::vector<std::pair<int, Clock::duration>> silent(Clock::time_point now, Clock::duration limit,
                                                      const std::function<bool(int)>& watched);

  FailureLog& failures() { return failures_; }
  const FailureLog& failures() const { return failures_; }

 private:
  Backend& backend_;
  asio::signal_set signals_;
  std::vector<Clock::time_point> last_heard_;
  FailureLog failures_;
};

}  // namespace gridbcast::job
