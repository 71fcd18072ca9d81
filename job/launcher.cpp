#include "job/launcher.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <sstream>
#include <variant>

#include "job/control.hpp"
#include "job/session.hpp"
#include "job/supervisor.hpp"
#include "lanes/log.hpp"
#include "lanes/rejections.hpp"
#include "runtime/event.hpp"
#include "runtime/run_until.hpp"
#include "topology/bound.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::job {

namespace {

using lanes::Clock;
using namespace std::chrono_literals;

// How long an exit with a failure status waits for the rank's report to be
// read (its connection ends with the process, so this is a bound only).
constexpr auto kExitReportGrace = 2s;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream o;
  o << static_cast<double>(ms.count()) / 1000.0;
  return o.str();
}

// Thrown inside the drivers to unwind once the job has failed.
struct JobFailed {};

struct RankState {
  std::unique_ptr<control::Channel> channel;
  std::deque<std::string> outbox;  // sealed when written, one writer
  bool writing = false;
  std::deque<control::ToLauncher> inbox;  // messages of substance, in order
  std::optional<Clock::time_point> exited_ok;
  bool exited = false;
  bool closed = false;          // its control connection ended
  bool finished = false;        // MPI_Finalize
  bool reported_error = false;  // sent Error: its exit is explained
  // An exit with a failure status before its control connection ended: its
  // report may still be unread (Launcher::settle_exit).
  std::optional<std::string> exit_unread;
  Clock::time_point exited_at;
  // The current broadcast, as the rank last reported it.
  std::uint64_t bytes_in = 0, bytes_out = 0, bytes_worked = 0;
  bool done = false;
  // A program's rank, as its last heartbeat said: what it waits for in MPI
  // ("" when in no blocking call) and the bytes it has moved in all.
  std::string waiting;
  std::uint64_t moved = 0;
};

// How long every rank of a program may wait in MPI with no byte moving
// before the launcher names them (once, as a hint: without --timeout it does
// not fail the job). GRIDBCAST_STUCK_HINT_SECONDS overrides it; 0 turns it off.
std::chrono::seconds stuck_hint_after() {
  if (const char* e = std::getenv("GRIDBCAST_STUCK_HINT_SECONDS"); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != nullptr && *end == '\0' && v >= 0) return std::chrono::seconds(v);
  }
  return std::chrono::seconds(60);
}

class Launcher;

struct BroadcastDriver {
  asio::awaitable<void> run(Launcher& l);
};
struct BenchDriver {
  asio::awaitable<void> run(Launcher& l);
};
struct ProgramDriver {
  asio::awaitable<void> run(Launcher& l);
};
struct ProbeDriver {
  asio::awaitable<void> run(Launcher& l);
};
using Driver = std::variant<BroadcastDriver, BenchDriver, ProgramDriver, ProbeDriver>;

Driver driver_for(JobKind kind) {
  switch (kind) {
    case JobKind::kBench:
      return BenchDriver{};
    case JobKind::kProgram:
      return ProgramDriver{};
    case JobKind::kProbe:
      return ProbeDriver{};
    case JobKind::kBroadcast:
      break;
  }
  return BroadcastDriver{};
}

class Launcher {
 public:
  Launcher(const LaunchOptions& o, Backend& b, std::ostream& err)
      : o_(o),
        err_(err),
        p_(o.grid.size()),
        ev_(io_.get_executor()),
        sup_(io_, b, o.grid.size()),
        ranks_(static_cast<size_t>(p_)),
        heartbeat_(heartbeat_interval(o.params.timeout_ms)) {}

  // The io_context goes last among the members that matter here, and with it
  // any coroutine still suspended (a rank that never closed its connection):
  // their frames must not touch the ranks' state by then.
  ~Launcher() { *alive_ = false; }

  LaunchResult run();

  // --- for the drivers ---
  const LaunchOptions& options() const { return o_; }
  const JobParams& params() const { return o_.params; }
  int size() const { return p_; }
  RankState& rank(int r) { return ranks_[static_cast<size_t>(r)]; }
  std::string who(int r) const {
    const auto& n = o_.grid.nodes[static_cast<size_t>(r)];
    return "rank " + std::to_string(r) + " (" + n.name + ")";
  }
  void fail(Cause c, const std::string& what, int about = -1) {
    // What the links looked like when the broadcast first failed: the
    // ranks' reports that follow may no longer list the links they closed.
    if (sup_.failures().empty() && broadcast_iteration_ >= 0 && straggler_watch_) {
      // Stalled for a whole report interval: a live link acknowledges
      // something within a round trip or a retransmission timeout. Not
      // more: a broadcast's first report of a link starts no stall (there
      // is none before it), and the ranks' deadline may come 3 reports on.
      cut_links_ = straggler_watch_->links(Clock::now(), heartbeat_);
      const Iteration it = iteration_at(o_.params, broadcast_iteration_, o_.grid);
      cut_root_ = it.root;
      cut_size_ = it.size;
    }
    sup_.failures().add(c, what, about);
    ev_.notify_all();
  }
  void check() const {
    if (!sup_.failures().empty()) throw JobFailed{};
  }
  // One line of the launcher's own on standard error (or the stream given),
  // when the log level lets it through (lanes/log.hpp).
  void say(lanes::log::Level level, const std::string& line) {
    if (!lanes::log::enabled(level)) return;
    err_ << (lanes::log::stamp() + "gridbcast launch: " + line + "\n") << std::flush;
  }
  asio::awaitable<void> wait() { co_await ev_.wait(); }
  void send(int r, const control::ToRank& m);
  void send_all(const control::ToRank& m) {
    for (int r = 0; r < p_; ++r) send(r, m);
  }
  // The next message of substance from r, which must be a T.
  template <typename T>
  asio::awaitable<T> next(int r);
  asio::awaitable<control::ToLauncher> next_any(int r);
  asio::awaitable<void> finish();
  void set_exit_code(int code) {
    if (exit_code_ == 0) exit_code_ = (code & 0xff) != 0 ? (code & 0xff) : 1;
  }
  // The broadcast being watched for progress (-1: none).
  void begin_broadcast(int iteration);
  void end_broadcast() { broadcast_iteration_ = -1; }
  bool finishing() const { return finishing_; }
  // --file: what the root reported sending of each file in this broadcast.
  std::vector<control::FileRecord> take_file_records() { return std::move(file_records_); }

  LaunchResult result;

 private:
  asio::awaitable<void> rendezvous();
  asio::awaitable<void> read_loop(int r);
  asio::awaitable<void> write_loop(int r);
  void on_exit(const Backend::Exit& e);
  // An exit kept by on_exit until its report could be read: failed now, as
  // a death unless the rank had reported an error.
  void settle_exit(int r);
  // Those whose connection ended or whose grace passed (all: every one).
  void settle_exits(bool all);
  // A --file job that failed on ranks' own reports alone: the others finish
  // their copies while they make progress (docs/FILES.md, "A rank that
  // cannot write its copy").
  void wait_for_copies_in_progress();
  asio::awaitable<void> watchdog();
  void on_message(int r, control::ToLauncher m);
  void report_progress();
  // A rank whose silence would be a failure: joined, running, not finalized,
  // not already explained by its own report.
  bool watched(int r) {
    const auto& st = rank(r);
    return st.channel && !st.exited && !st.finished && !st.reported_error;
  }
  std::chrono::milliseconds silence_limit() const;
  // A completion handler for the launcher's own coroutines: whatever escapes
  // one fails the job naming it, never vanishes.
  auto reporter(std::string what) {
    return [this, what = std::move(what)](std::exception_ptr e) {
      if (e) fail(Cause::kOther, what + " failed: " + lanes::what_of(e));
    };
  }

  // False from the launcher's destructor on (see ~Launcher).
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  const LaunchOptions& o_;
  std::ostream& err_;
  const int p_;
  asio::io_context io_{1};
  runtime::Event ev_;
  // The rank processes: starts, exits, signals, liveness, the failure record.
  Supervisor sup_;
  std::vector<RankState> ranks_;
  std::optional<control::Sealer> sealer_proto_;
  runtime::JobCredentials creds_;
  std::chrono::milliseconds heartbeat_;
  bool finishing_ = false;
  bool joined_all_ = false;
  bool table_sent_ = false;
  Clock::time_point startup_deadline_{};
  int exit_code_ = 0;
  // Progress of the current broadcast.
  int broadcast_iteration_ = -1;
  Clock::time_point broadcast_start_{}, last_change_{}, last_report_{};
  std::uint64_t last_total_ = 0;
  // A program in which every rank waits in MPI and nothing moves.
  void check_stuck(Clock::time_point now);
  const std::chrono::seconds stuck_hint_after_ = stuck_hint_after();
  Clock::time_point stuck_since_{};
  std::uint64_t stuck_moved_ = 0;
  bool stuck_named_ = false;
  std::deque<std::pair<Clock::time_point, std::uint64_t>> held_samples_;
  std::vector<control::FileRecord> file_records_;
  // The watch keeps the ranks' link reports of every broadcast of 2 or more
  // ranks; it looks for stragglers (found: by rank) only with
  // LaunchOptions::stragglers.
  std::optional<StragglerWatch> straggler_watch_;
  std::map<int, Straggler> stragglers_;
  void watch_stragglers(Clock::time_point now);
  // The links at the first failure of a broadcast, and its root: who was
  // cut off, when no rank died or went silent (job/cut.hpp).
  std::vector<LinkState> cut_links_;
  int cut_root_ = -1;
  std::uint64_t cut_size_ = 0;
  bool interrupted_ = false;
  void explain_cut_off();
  // --file: each non-root rank's latest committed copy, and the root's
  // digest of each iteration it finished (LaunchResult::held).
  std::map<int, LaunchResult::Held> copies_;
  std::map<int, std::string> root_digests_;
};

void Launcher::send(int r, const control::ToRank& m) {
  auto& st = rank(r);
  if (!st.channel) return;
  st.outbox.push_back(control::encode_body(m));
  if (!st.writing) {
    st.writing = true;
    asio::co_spawn(io_, write_loop(r), reporter("the control writer of " + who(r)));
  }
}

asio::awaitable<void> Launcher::write_loop(int r) {
  auto& st = rank(r);
  while (!st.outbox.empty() && st.channel) {
    std::string body = std::move(st.outbox.front());
    st.outbox.pop_front();
    try {
      co_await control::send_body(*st.channel, body);
    } catch (const std::exception& e) {
      if (!finishing_ && !st.exited)
        fail(Cause::kOther, "cannot reach " + who(r) + " on its control connection: " + e.what());
      st.outbox.clear();
    }
  }
  st.writing = false;
}

template <typename T>
asio::awaitable<T> Launcher::next(int r) {
  control::ToLauncher m = co_await next_any(r);
  if (auto* t = std::get_if<T>(&m)) co_return std::move(*t);
  fail(Cause::kOther, who(r) + " sent " + control::name_of(m) + " where " +
                          control::name_of(control::ToLauncher{T{}}) + " was expected");
  throw JobFailed{};
}

asio::awaitable<control::ToLauncher> Launcher::next_any(int r) {
  auto& box = rank(r).inbox;
  while (box.empty()) {
    check();
    co_await ev_.wait();
  }
  check();
  control::ToLauncher m = std::move(box.front());
  box.pop_front();
  co_return m;
}

std::chrono::milliseconds Launcher::silence_limit() const {
  const std::int64_t timeout = o_.params.timeout_ms;
  std::int64_t ms = timeout > 0 ? timeout : o_.program_silence_ms;
  if (!o_.params.program() && timeout <= 0) ms = o_.program_silence_ms;
  // Allow two heartbeats to be late, whatever the timeout.
  return std::chrono::milliseconds(ms) + 2 * heartbeat_;
}

void Launcher::begin_broadcast(int iteration) {
  broadcast_iteration_ = iteration;
  broadcast_start_ = last_change_ = last_report_ = Clock::now();
  last_total_ = 0;
  held_samples_.clear();
  file_records_.clear();
  straggler_watch_.reset();
  if (o_.params.kind == JobKind::kBroadcast && p_ >= 2)
    straggler_watch_.emplace(o_.grid, o_.stragglers.value_or(StragglerRule{}));
  for (auto& st : ranks_) {
    st.bytes_in = st.bytes_out = st.bytes_worked = 0;
    st.done = false;
  }
}

void Launcher::on_message(int r, control::ToLauncher m) {
  auto& st = rank(r);
  sup_.heard(r);
  if (auto* a = std::get_if<control::Alive>(&m)) {
    st.waiting = std::move(a->waiting);
    st.moved = a->moved;
    return;
  }
  if (auto* p = std::get_if<control::Progress>(&m)) {
    if (p->iteration == broadcast_iteration_) {
      if (!st.done) {
        st.bytes_in = p->bytes_in;
        st.bytes_out = p->bytes_out;
        st.bytes_worked = p->bytes_worked;
      }
      // A rank done with its part may still have bytes in flight to the
      // others: its links say whether they arrive (job/cut.hpp).
      if (straggler_watch_) {
        if (const std::string bad = straggler_watch_->check(r, p->links); !bad.empty())
          fail(Cause::kOther, who(r) + " reported " + bad);
        else
          straggler_watch_->report(r, Clock::now(), p->links);
      }
    }
    return;
  }
  if (auto* e = std::get_if<control::Error>(&m)) {
    st.reported_error = true;
    fail(Cause::kReported, who(r) + " failed: " + e->what);
    return;
  }
  if (auto* a = std::get_if<control::Abort>(&m)) {
    st.reported_error = true;  // its exit follows from it
    set_exit_code(a->code);
    fail(Cause::kAbort, who(r) + " called MPI_Abort with error code " + std::to_string(a->code) +
                            (a->why.empty() ? "" : ": " + a->why));
    return;
  }
  if (std::holds_alternative<control::Finished>(m)) {
    st.finished = true;
    ev_.notify_all();
    return;
  }
  if (auto* l = std::get_if<control::FileList>(&m)) {
    // Only the root of the broadcast under way, and never more records than
    // the job has files (the launcher counted them itself).
    const bool root = broadcast_iteration_ >= 0 &&
                      iteration_at(o_.params, broadcast_iteration_, o_.grid).root == r;
    if (!root || l->iteration != broadcast_iteration_ || o_.params.files.empty()) {
      fail(Cause::kOther, who(r) + " sent a file list it was not asked for");
      return;
    }
    if (l->files.size() > o_.params.file_count -
                              std::min<std::uint64_t>(file_records_.size(), o_.params.file_count)) {
      fail(Cause::kOther,
           who(r) + " reported more files than the job's " + std::to_string(o_.params.file_count));
      return;
    }
    for (auto& f : l->files) file_records_.push_back(std::move(f));
    return;
  }
  if (auto* d = std::get_if<control::Done>(&m); d && d->iteration == broadcast_iteration_) {
    st.done = true;
    if (!o_.params.files.empty()) {
      if (iteration_at(o_.params, d->iteration, o_.grid).root == r)
        root_digests_[d->iteration] = d->sha256;
      else if (!d->path.empty())
        copies_[r] = {r, d->iteration, d->sha256};
    }
  }
  // What the drivers consume comes in order and one at a time per phase: a
  // rank that sends more than a few unasked is refused, not queued forever.
  if (st.inbox.size() >= 64) {
    fail(Cause::kOther, who(r) + " sent " + std::to_string(st.inbox.size()) +
                            " control messages nobody asked for");
    return;
  }
  st.inbox.push_back(std::move(m));
  ev_.notify_all();
}

asio::awaitable<void> Launcher::read_loop(int r) {
  auto& st = rank(r);
  struct Closed {
    RankState& st;
    runtime::Event& ev;
    std::shared_ptr<bool> alive;
    ~Closed() {
      if (!*alive) return;  // destroyed with the launcher, suspended
      st.closed = true;
      ev.notify_all();
    }
  } closed{st, ev_, alive_};
  for (;;) {
    std::string error;
    try {
      const std::string body = co_await control::receive_body(*st.channel);
      on_message(r, control::decode_to_launcher(body));
      continue;
    } catch (const control::ProtocolError& e) {
      if (!finishing_) fail(Cause::kOther, who(r) + " sent a bad control message: " + e.what());
      co_return;
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (st.exit_unread) {
      settle_exit(r);  // everything it sent has been read
      co_return;
    }
    if (finishing_ || st.finished || st.reported_error || !sup_.failures().empty()) co_return;
    // A rank that died shows as a closed connection first; give SIGCHLD a
    // moment so the report says how it died.
    asio::steady_timer grace(io_);
    for (int i = 0; i < 30 && !sup_.external() && !st.exited && sup_.failures().empty(); ++i) {
      grace.expires_after(100ms);
      co_await grace.async_wait(lanes::kAsTuple);
    }
    if (st.exit_unread) {
      settle_exit(r);  // it exited (with a failure status) during the grace
      co_return;
    }
    if (finishing_ || !sup_.failures().empty()) co_return;
    if (st.exited_ok && o_.params.program())
      fail(Cause::kDeath, who(r) + " exited with status 0 without calling MPI_Finalize", r);
    else if (!st.exited)
      fail(Cause::kDeath, who(r) + " closed its control connection: " + error, r);
    co_return;
  }
}

// What an exit means depends on the job: a rank that never joined, one that
// ended before the job did, a program's exit status.
void Launcher::on_exit(const Backend::Exit& e) {
  auto& st = rank(e.rank);
  st.exited = true;
  if (!st.channel) {
    // It never joined: say so now, not when the start-up time runs out.
    set_exit_code(e.code > 0 ? e.code : 1);
    fail(Cause::kDeath,
         who(e.rank) + " " + e.status + " before joining the job" +
             (o_.params.program() ? " (a program under 'gridbcast launch --' must call "
                                    "MPI_Init; was it built with gridbcast-cc?)"
                                  : ""),
         e.rank);
    return;
  }
  if (e.success) {
    st.exited_ok = Clock::now();
    if (!o_.params.program() && !finishing_)
      fail(Cause::kDeath, who(e.rank) + " " + e.status + " before the job ended", e.rank);
    ev_.notify_all();
    return;
  }
  if (o_.params.program()) set_exit_code(e.code > 0 ? e.code : 1);
  // A rank that fails sends its report, then exits; on a busy host the exit
  // can be reaped before the report is read. Until its connection ends (or
  // kExitReportGrace passes) the exit is not called a death: a rank that
  // failed because a peer died is a survivor, not lost.
  st.exit_unread = who(e.rank) + " " + e.status;
  st.exited_at = Clock::now();
  if (st.closed || st.reported_error) settle_exit(e.rank);
}

void Launcher::settle_exit(int r) {
  auto& st = rank(r);
  if (!st.exit_unread) return;
  const std::string what = std::move(*st.exit_unread);
  st.exit_unread.reset();
  fail(st.reported_error ? Cause::kOther : Cause::kDeath, what, r);
}

// A rank whose copy cannot be written relays the file for the others and
// reports its failure once the windows have passed, when the others may still
// check and write their last window: stopping them then would leave their
// copies as partials. So while every rank that failed said why first (none
// was lost) the others may finish, for as long as their bytes keep moving (the
// watchdog's stall: --timeout and four heartbeats, or 30 s without one).
void Launcher::wait_for_copies_in_progress() {
  if (o_.params.files.empty() || broadcast_iteration_ < 0) return;
  // Only when a rank's own report came first and nothing but reports and
  // what followed them since (no death, silence, cut or the launcher's own
  // finding: those end the job at once).
  const auto& failures = sup_.failures().all();
  if (failures.empty() || failures.front().cause != Cause::kReported) return;
  for (const auto& f : failures)
    if (f.cause != Cause::kReported && f.cause != Cause::kOther) return;
  const auto lost = [](const RankState& st) {
    return (st.exited || st.closed || st.exit_unread.has_value()) && !st.reported_error;
  };
  const auto busy = [](const RankState& st) {
    return !st.done && !st.reported_error && !st.exited && !st.closed;
  };
  const auto stall =
      std::chrono::milliseconds(o_.params.timeout_ms > 0 ? o_.params.timeout_ms : 30'000) +
      4 * heartbeat_;
  std::uint64_t last = ~std::uint64_t{0};
  Clock::time_point moved = Clock::now();
  for (;;) {
    if (std::any_of(ranks_.begin(), ranks_.end(), lost) ||
        std::none_of(ranks_.begin(), ranks_.end(), busy))
      return;
    std::uint64_t total = 0;
    for (const auto& st : ranks_) total += st.bytes_in + st.bytes_out + st.bytes_worked;
    if (total != last) {
      last = total;
      moved = Clock::now();
    } else if (Clock::now() - moved > stall) {
      return;
    }
    io_.restart();
    io_.run_for(50ms);
    if (io_.stopped()) return;
  }
}

void Launcher::settle_exits(bool all) {
  const auto now = Clock::now();
  for (int r = 0; r < p_; ++r) {
    const auto& st = rank(r);
    if (st.exit_unread &&
        (all || st.closed || st.reported_error || now - st.exited_at >= kExitReportGrace))
      settle_exit(r);
  }
}

// Four times a second: the start-up deadline, ranks that went silent, a
// broadcast that stopped moving, and the progress report.
asio::awaitable<void> Launcher::watchdog() {
  asio::steady_timer tick(io_);
  for (;;) {
    tick.expires_after(250ms);
    auto [ec] = co_await tick.async_wait(lanes::kAsTuple);
    if (ec || finishing_) co_return;
    settle_exits(false);
    const auto now = Clock::now();
    if (!joined_all_ && now >= startup_deadline_) {
      std::vector<int> missing;
      for (int r = 0; r < p_; ++r)
        if (!rank(r).channel) missing.push_back(r);
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 8; ++i)
        list += (i ? ", " : "") + who(missing[i]);
      if (missing.size() > 8) list += ", ...";
      if (!missing.empty())
        fail(Cause::kOther, std::to_string(missing.size()) + " rank(s) did not connect within " +
                                std::to_string(o_.startup_timeout_ms / 1000) + " s: " + list);
    }
    const auto limit = silence_limit();
    // Ranks start their heartbeats once they have the table: a rank that
    // joined early and waits for the others is not silent.
    if (table_sent_)
      for (const auto& [r, quiet] : sup_.silent(now, limit, [this](int r) { return watched(r); }))
        fail(Cause::kSilence,
             who(r) + " sent nothing for " + seconds_text(limit) + " s (heartbeats are due every " +
                 seconds_text(heartbeat_) +
                 " s): stopped, overloaded, or its host or network is down",
             r);
    if (o_.params.program() && table_sent_) check_stuck(now);
    if (broadcast_iteration_ >= 0) {
      std::uint64_t total = 0;
      for (const auto& st : ranks_)
        total += st.bytes_in + st.bytes_out + st.bytes_worked + (st.done ? 1 : 0);
      if (total != last_total_) {
        last_total_ = total;
        last_change_ = now;
      }
      // The ranks' own deadlines (no data from a peer for --timeout) name the
      // peer; this one, a little later, catches what they cannot see.
      const auto stall = std::chrono::milliseconds(o_.params.timeout_ms) + 4 * heartbeat_;
      if (o_.params.timeout_ms > 0 && now - last_change_ > stall) {
        std::string waiting;
        int n = 0;
        for (int r = 0; r < p_; ++r)
          if (!rank(r).done && n++ < 8) waiting += (n > 1 ? ", " : "") + who(r);
        fail(Cause::kOther, "no rank moved a byte for " + seconds_text(stall) + " s in iteration " +
                                std::to_string(broadcast_iteration_) + "; waiting for " + waiting);
        last_change_ = now;
      }
      if (straggler_watch_ && o_.stragglers && p_ >= 3) watch_stragglers(now);
      if (o_.on_progress && now - last_report_ >= 1s && now - broadcast_start_ >= 1s) {
        last_report_ = now;
        report_progress();
      }
    }
  }
}

void Launcher::check_stuck(Clock::time_point now) {
  if (stuck_named_ || stuck_hint_after_.count() == 0) return;
  bool all_wait = true;
  int live = 0;
  std::uint64_t moved = 0;
  for (const auto& st : ranks_) {
    if (st.exited || st.finished || st.reported_error) continue;
    ++live;
    all_wait = all_wait && !st.waiting.empty();
    moved += st.moved;
  }
  if (!all_wait || live == 0 || moved != stuck_moved_ || stuck_since_ == Clock::time_point{}) {
    stuck_since_ = now;
    stuck_moved_ = moved;
    return;
  }
  if (now - stuck_since_ < stuck_hint_after_) return;
  stuck_named_ = true;
  std::string line = "every rank has waited in MPI for " +
                     std::to_string(stuck_hint_after_.count()) +
                     " s with no byte moving anywhere (a deadlock in the program?); the job "
                     "goes on (--timeout S would end it):";
  int n = 0;
  for (int r = 0; r < p_; ++r) {
    const auto& st = rank(r);
    if (st.exited || st.finished || st.reported_error) continue;
    if (n++ == 8) {
      line += "\n  ... and " + std::to_string(live - 8) + " more";
      break;
    }
    line += "\n  " + who(r) + ": " + lanes::log::printable(st.waiting, 256);
  }
  say(lanes::log::Level::kNotice, line);
}

// A rank whose own links hold the others back (job/straggler.hpp) ends
// this run: the job goes on without it, and it is finished after the others
// (cli/launch.cpp).
void Launcher::watch_stragglers(Clock::time_point now) {
  std::vector<bool> done(static_cast<size_t>(p_));
  for (int r = 0; r < p_; ++r) done[static_cast<size_t>(r)] = rank(r).done;
  for (const Straggler& f : straggler_watch_->observe(now, done)) {
    stragglers_[f.rank] = f;
    fail(Cause::kStraggler,
         who(f.rank) + " is a straggler: its links " + (f.receiving ? "in" : "out") + " carried " +
             topology::format_bandwidth(8 * f.rate_bytes_per_s) + " for " +
             seconds_text(std::chrono::milliseconds(static_cast<std::int64_t>(f.seconds * 1000))) +
             " s with data waiting, under " +
             std::to_string(static_cast<int>(o_.stragglers->fraction * 100 + 0.5)) + " % of the " +
             topology::format_bandwidth(8 * f.expected_bytes_per_s) +
             " the topology declares for them (" + straggler_watch_->describe_links(f.rank, now) +
             ")",
         f.rank);
  }
}

// A broadcast that failed with links stalled and nobody dead or silent: the
// ranks cut off from their peers are lost (and healed around, as the dead
// are), WAN links the others can route around are said so. Not when the
// launcher was interrupted, nor for a loss already explained.
void Launcher::explain_cut_off() {
  if (interrupted_ || cut_links_.empty() || cut_root_ < 0) return;
  for (const auto& f : sup_.failures().all())
    if (f.cause == Cause::kDeath || f.cause == Cause::kSilence || f.cause == Cause::kStraggler ||
        f.cause == Cause::kCutOff)
      return;
  // Whether the next run plans with multilane or circulant, which feed each
  // site from the one before it in the chain (job/cut.hpp): the explicit
  // algorithm, or what `auto` picks over the grid it will run on.
  const auto chains_sites = [this](const topology::Grid& next) {
    if (o_.params.algorithm == "random") return false;
    const auto named = topology::parse_algorithm(o_.params.algorithm);
    const topology::Algorithm a =
        named ? *named
              : topology::select_algorithm(next, cut_root_, cut_size_,
                                           topology::SelectionThresholds::from_environment());
    return a == topology::Algorithm::kMultilane || a == topology::Algorithm::kCirculant;
  };
  CutVerdict v;
  try {
    v = explain_cut(o_.grid, cut_root_, cut_links_, chains_sites);
  } catch (const std::exception& e) {
    // Said, and the job fails as it would have without the verdict.
    fail(Cause::kOther, std::string("cannot tell who was cut off: ") + e.what());
    return;
  }
  for (const auto& n : v.cut_off) fail(Cause::kCutOff, who(n.rank) + " is " + n.cause, n.rank);
  for (const auto& w : v.routed_around) {
    fail(Cause::kCutOff, w.cause + ": the others route around it");
    result.routed_around.push_back({o_.grid.sites.at(static_cast<size_t>(w.site_a)).name,
                                    o_.grid.sites.at(static_cast<size_t>(w.site_b)).name, w.cause});
  }
}

void Launcher::report_progress() {
  const auto now = Clock::now();
  const Iteration it = iteration_at(o_.params, broadcast_iteration_, o_.grid);
  ProgressSample s;
  s.iteration = broadcast_iteration_;
  s.iterations = o_.params.iterations;
  s.elapsed_s = seconds_between(broadcast_start_, now);
  s.ranks = p_;
  s.bytes_total = it.size * static_cast<std::uint64_t>(p_ - 1);
  for (int r = 0; r < p_; ++r) {
    const auto& st = rank(r);
    if (st.done) ++s.ranks_done;
    if (r != it.root) s.bytes_held += st.done ? it.size : std::min(st.bytes_in, it.size);
  }
  held_samples_.emplace_back(now, s.bytes_held);
  while (held_samples_.size() > 2 && now - held_samples_.front().first > 5s)
    held_samples_.pop_front();
  const auto& [t0, b0] = held_samples_.front();
  const double dt = seconds_between(t0, now);
  if (dt > 0 && s.bytes_held >= b0)
    s.rate_bytes_per_s = static_cast<double>(s.bytes_held - b0) / dt;
  if (s.rate_bytes_per_s > 0)
    s.eta_s = static_cast<double>(s.bytes_total - std::min(s.bytes_total, s.bytes_held)) /
              s.rate_bytes_per_s;
  o_.on_progress(s);
}

asio::awaitable<void> Launcher::rendezvous() {
  // Every rank connects (each is sent Config as it does), reports its ports,
  // and gets the table of all.
  while (true) {
    check();
    bool all = true;
    for (int r = 0; r < p_; ++r) all = all && rank(r).channel != nullptr;
    if (all) break;
    co_await ev_.wait();
  }
  joined_all_ = true;
  control::Table table;
  // Fresh for this launch whatever the secret and job id are (an external
  // backend's may come from the environment and repeat): multicast keys are
  // bound to it, so datagrams recorded in another run never verify here.
  table.run_nonce = runtime::new_run_nonce();
  table.ports.resize(static_cast<size_t>(p_));
  for (int r = 0; r < p_; ++r) {
    const auto e = co_await next<control::Endpoints>(r);
    table.ports[static_cast<size_t>(r)] = e.ports;
  }
  send_all(table);
  table_sent_ = true;
  sup_.heard_all();
}

// Tells every rank to exit and waits for them to do so on their own: a
// gridbcast rank for up to 10 s; a program for as long as it runs (it may
// work on after MPI_Finalize, and its exit status is the job's, as with
// mpiexec).
asio::awaitable<void> Launcher::finish() {
  finishing_ = true;
  send_all(control::Exit{});
  const auto deadline = o_.params.program() ? Clock::time_point::max() : Clock::now() + 10s;
  asio::steady_timer t(io_);
  // Exit is written before anything ends (external ranks have nothing else to go by).
  const auto writing = [this] {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const RankState& st) { return st.writing; });
  };
  const auto since = Clock::now();
  bool named = false;
  while ((sup_.running() > 0 || writing()) && Clock::now() < deadline) {
    check();
    t.expires_after(50ms);
    co_await t.async_wait(lanes::kAsTuple);
    for (const auto& e : sup_.reap()) {
      rank(e.rank).exited = true;
      if (!e.success) fail(Cause::kDeath, who(e.rank) + " " + e.status + " while exiting");
    }
    settle_exits(false);
    // A program may work on after MPI_Finalize, so the job waits; but a rank
    // that lingers is named once, as a stuck program is.
    if (!named && stuck_hint_after_.count() > 0 && Clock::now() - since >= stuck_hint_after_ &&
        !sup_.external()) {
      named = true;
      std::string line;
      int n = 0;
      for (int r = 0; r < p_; ++r) {
        if (rank(r).exited) continue;
        if (n++ == 8) {
          line += ", ...";
          break;
        }
        line += (n > 1 ? ", " : "") + who(r);
      }
      say(lanes::log::Level::kNotice, "the job is over but " + std::to_string(sup_.running()) +
                                          " rank process(es) have not exited after " +
                                          std::to_string(stuck_hint_after_.count()) + " s: " +
                                          line + " (the launcher waits for them, as mpiexec does)");
    }
  }
  settle_exits(true);
  check();
}

asio::awaitable<void> BroadcastDriver::run(Launcher& l) {
  const auto& params = l.params();
  const auto& grid = l.options().grid;
  const int p = l.size();
  BroadcastSummary sum;
  std::vector<control::Done> last(static_cast<size_t>(p));
  for (int i = 0; i < params.iterations; ++i) {
    const Iteration it = iteration_at(params, i, grid);
    for (int r = 0; r < p; ++r) {
      const auto ready = co_await l.next<control::Ready>(r);
      if (ready.iteration != i) {
        l.fail(Cause::kOther, l.who(r) + " is ready for iteration " +
                                  std::to_string(ready.iteration) + " while the job is at " +
                                  std::to_string(i));
        l.check();
      }
    }
    l.begin_broadcast(i);
    l.send_all(control::Go{i});
    for (int r = 0; r < p; ++r) {
      auto d = co_await l.next<control::Done>(r);
      if (d.iteration != i) {
        l.fail(Cause::kOther, l.who(r) + " reported iteration " + std::to_string(d.iteration) +
                                  " done while the job is at " + std::to_string(i));
        l.check();
      }
      last[static_cast<size_t>(r)] = std::move(d);
    }
    l.end_broadcast();
    if (!params.files.empty()) {
      sum.files = l.take_file_records();
      if (sum.files.size() != params.file_count) {
        l.fail(Cause::kOther, l.who(it.root) + " reported " + std::to_string(sum.files.size()) +
                                  " files sent of the job's " + std::to_string(params.file_count));
        l.check();
      }
    }
    const auto& root = last[static_cast<size_t>(it.root)];
    std::int64_t end = root.t0_ns;
    IterationSummary is{it.root, it.size, root.algorithm, 0, 0};
    for (int r = 0; r < p; ++r) {
      const auto& d = last[static_cast<size_t>(r)];
      end = std::max(end, d.t1_ns);
      is.max_rss_bytes = std::max(is.max_rss_bytes, d.rss);
      if (params.verify && d.sha256 != root.sha256) {
        l.fail(Cause::kOther, l.who(r) + " holds a copy whose SHA-256 " + d.sha256 +
                                  " differs from the root's " + root.sha256 + " (iteration " +
                                  std::to_string(i) + ")");
        l.check();
      }
    }
    is.seconds = static_cast<double>(end - root.t0_ns) * 1e-9;
    if (lanes::log::enabled(lanes::log::Level::kInfo)) {
      std::ostringstream line;
      line << "iteration " << i + 1 << "/" << params.iterations << ": " << it.size
           << " bytes from rank " << it.root << " by " << root.algorithm << " in " << is.seconds
           << " s";
      l.say(lanes::log::Level::kInfo, line.str());
    }
    sum.iterations.push_back(is);
    sum.sha256 = root.sha256;
  }
  const auto& li = sum.iterations.back();
  sum.algorithm = li.algorithm;
  sum.ranks = p;
  sum.sites = static_cast<int>(grid.sites.size());
  sum.bytes = li.bytes;
  sum.root = li.root;
  sum.segment_bytes = last[0].segment_bytes;
  sum.lower_bound_seconds = topology::lower_bound_seconds(grid, li.root, li.bytes);
  sum.max_flow_bound_seconds = topology::max_flow_bound_seconds(grid, li.root, li.bytes);
  bool loopback = true;
  double fastest = 0;
  for (const auto& node : grid.nodes)
    for (const auto& nic : node.nics) {
      loopback = loopback && (nic.address.rfind("127.", 0) == 0 || nic.address == "::1");
      fastest = std::max(fastest, nic.bandwidth_bps);
    }
  sum.loopback_nic_bps = loopback ? fastest : 0;
  sum.verified = params.verify;
  const auto t0 = last[static_cast<size_t>(li.root)].t0_ns;
  sum.slowest_per_site.resize(grid.sites.size());
  for (int r = 0; r < p; ++r) {
    const auto& d = last[static_cast<size_t>(r)];
    // Each rank reports the connections it has rejected so far: the job's
    // count is their sum.
    sum.rejected_connections += d.rejected;
    sum.peak_rss_bytes = std::max(sum.peak_rss_bytes, d.peak_rss);
    const double s = static_cast<double>(d.t1_ns - t0) * 1e-9;
    const int site = grid.site_of(r);
    auto& sl = sum.slowest_per_site[static_cast<size_t>(site)];
    if (sl.rank < 0 || s > sl.seconds)
      sl = {grid.sites[static_cast<size_t>(site)].name, r, grid.nodes[static_cast<size_t>(r)].name,
            s};
    if (!d.path.empty()) sum.copies.push_back({r, grid.nodes[static_cast<size_t>(r)].name, d.path});
  }
  co_await l.finish();
  l.result.broadcast = std::move(sum);
}

asio::awaitable<void> BenchDriver::run(Launcher& l) {
  const auto& params = l.params();
  const BenchSpec spec = BenchSpec::decode(params.bench);
  const size_t points = spec.sizes.size() * spec.algorithms.size();
  BenchOutcome outcome;
  while (outcome.points.size() < points) {
    const auto m = co_await l.next<control::Point>(params.root);
    BenchPoint p = BenchPoint::decode(m.encoded);
    if (l.options().on_bench_point) l.options().on_bench_point(p);
    outcome.points.push_back(std::move(p));
  }
  for (int r = 0; r < l.size(); ++r) {
    const auto d = co_await l.next<control::BenchDone>(r);
    outcome.rejected_connections += d.rejected;
    outcome.peak_rss_bytes = std::max(outcome.peak_rss_bytes, d.peak_rss);
  }
  co_await l.finish();
  l.result.bench = std::move(outcome);
}

// Above any NIC or link there is (10 Tbit/s): a sample that claims more is refused.
constexpr double kMaxProbedRate = 1e13;

// Every rank's report of probe phase i, checked against the phase: only
// flows the rank measures, each once, none missing, rates a network can have.
asio::awaitable<void> collect_probe_reports(Launcher& l, ProbeOutcome& outcome, int i) {
  const topology::ProbePhase& phase = outcome.phases[static_cast<size_t>(i)];
  std::vector<bool> seen(phase.flows.size(), false);
  for (int r = 0; r < l.size(); ++r) {
    auto report = co_await l.next<control::ProbeReport>(r);
    std::string bad;
    int set_aside = 0;
    if (report.phase != i) bad = "a report of phase " + std::to_string(report.phase);
    for (auto& smp : report.samples) {
      if (!bad.empty()) break;
      if (smp.flow >= static_cast<int>(phase.flows.size())) {
        bad = "a sample of flow " + std::to_string(smp.flow) + ", which phase " +
              std::to_string(i) + " does not have";
        break;
      }
      const auto& f = phase.flows[static_cast<size_t>(smp.flow)];
      const int measurer = f.kind == topology::ProbeKind::kRate ? f.to : f.from;
      // A rate is counted over a window of 40 % of the phase (or from the
      // first piece to the last inside it): one far shorter (a rank the
      // scheduler starved), or a rate no NIC has, is not a measurement. It is
      // set aside, not used: the NIC then keeps its declared figure.
      const double rate = smp.rate_bps();
      if (f.kind == topology::ProbeKind::kRate && smp.bytes > 0 &&
          (smp.seconds < 0.05 * phase.seconds || !(rate <= kMaxProbedRate))) {
        ++set_aside;
        smp.bytes = 0;
        smp.seconds = 0;
      }
      if (measurer != r)
        bad = "a sample of flow " + std::to_string(smp.flow) + ", which rank " +
              std::to_string(measurer) + " measures";
      else if (seen[static_cast<size_t>(smp.flow)])
        bad = "flow " + std::to_string(smp.flow) + " twice";
      else
        seen[static_cast<size_t>(smp.flow)] = true;
    }
    if (!bad.empty()) {
      l.fail(Cause::kOther, l.who(r) + " sent " + bad);
      l.check();
    }
    if (set_aside > 0)
      l.say(lanes::log::Level::kNotice,
            "probe phase \"" + phase.name + "\": " + std::to_string(set_aside) + " sample" +
                (set_aside == 1 ? "" : "s") + " of " + l.who(r) +
                " set aside (a window far shorter than the phase's, or an impossible rate)");
    auto& all = outcome.samples[static_cast<size_t>(i)];
    all.insert(all.end(), report.samples.begin(), report.samples.end());
  }
  for (size_t f = 0; f < seen.size(); ++f)
    if (!seen[f]) {
      const auto& flow = phase.flows[f];
      const int measurer = flow.kind == topology::ProbeKind::kRate ? flow.to : flow.from;
      l.fail(Cause::kOther, l.who(measurer) + " sent no sample of probe flow " + std::to_string(f) +
                                " in phase \"" + phase.name + "\"");
      l.check();
    }
}

// The probe's phases in lockstep: every rank Ready, Go, every rank's report
// (collect_probe_reports), then the next phase; then the confirmations the
// launcher decides on, each started by its ProbePhaseSpec.
asio::awaitable<void> ProbeDriver::run(Launcher& l) {
  const auto& grid = l.options().grid;
  ProbeOutcome outcome;
  outcome.phases = topology::probe_schedule(grid, l.params().probe);
  outcome.samples.resize(outcome.phases.size());
  const int n = static_cast<int>(outcome.phases.size());
  const auto announce = [&l](int i, const std::string& of, const topology::ProbePhase& phase) {
    std::ostringstream line;
    line << "probe: phase " << i + 1 << of << ", " << phase.name << ": " << phase.flows.size()
         << " flows, " << topology::format_duration(phase.seconds);
    l.say(lanes::log::Level::kNotice, line.str());
  };
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < l.size(); ++r) {
      const auto ready = co_await l.next<control::Ready>(r);
      if (ready.iteration != i) {
        l.fail(Cause::kOther, l.who(r) + " is ready for probe phase " +
                                  std::to_string(ready.iteration) + " while the probe is at " +
                                  std::to_string(i));
        l.check();
      }
    }
    announce(i, "/" + std::to_string(n), outcome.phases[static_cast<size_t>(i)]);
    l.send_all(control::Go{i});
    co_await collect_probe_reports(l, outcome, i);
  }
  // Confirmations: NICs that met only slower partners and measured below
  // their declared figure get partners of their own.
  if (l.options().probe_declared) {
    const auto extra = topology::confirm_phases(*l.options().probe_declared, outcome.phases,
                                                outcome.samples, l.params().probe);
    for (const auto& phase : extra) {
      const int i = static_cast<int>(outcome.phases.size());
      outcome.phases.push_back(phase);
      outcome.samples.emplace_back();
      announce(i, "", phase);
      l.send_all(control::ProbePhaseSpec{i, phase});
      co_await collect_probe_reports(l, outcome, i);
    }
  }
  co_await l.finish();
  l.result.probe = std::move(outcome);
}

// The ranks run the program: wait until every rank has called MPI_Finalize
// (Finished) and exited. No deadline on the program's own time; silence,
// deaths, aborts and errors end the job.
asio::awaitable<void> ProgramDriver::run(Launcher& l) {
  for (;;) {
    l.check();
    bool all = true;
    for (int r = 0; r < l.size(); ++r) {
      auto& st = l.rank(r);
      all = all && st.finished && (st.exited || st.closed);
      // A clean exit without MPI_Finalize; its last message may still be on the way.
      if (st.exited_ok && !st.finished && Clock::now() > *st.exited_ok + 500ms) {
        l.set_exit_code(1);
        l.fail(Cause::kDeath, l.who(r) + " exited with status 0 without calling MPI_Finalize");
      }
    }
    if (all) break;
    co_await l.wait();
  }
  co_await l.finish();
}

LaunchResult Launcher::run() {
  creds_ = runtime::new_credentials();
  // External ranks must share the secret: take it from the environment then.
  if (const char* s = std::getenv("GRIDBCAST_SECRET"); s && *s) {
    creds_.secret = runtime::from_hex(s);
    ::unsetenv("GRIDBCAST_SECRET");
    if (creds_.secret.size() < 16) {
      result.status = 1;
      result.failure = "GRIDBCAST_SECRET has " + std::to_string(creds_.secret.size() * 8) +
                       " bits; at least 128 are needed (e.g. `openssl rand -hex 32`)";
      return std::move(result);
    }
  }
  if (const char* j = std::getenv("GRIDBCAST_JOB_ID"); j && *j) {
    const std::string id = j;
    if (id.size() > 16 || id.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
      result.status = 1;
      result.failure = "GRIDBCAST_JOB_ID is not a job id (at most 16 hex digits): \"" + id + "\"";
      return std::move(result);
    }
    creds_.job_id = std::stoull(id, nullptr, 16);
  }
  std::shared_ptr<lanes::Listener> listener;
  try {
    listener = lanes::Listener::open(io_.get_executor(), o_.listen_address, o_.listen_port,
                                     lanes::Credentials{creds_.job_id, creds_.secret});
  } catch (const std::exception& e) {
    result.status = 1;
    result.failure = e.what();
    return std::move(result);
  }
  // Only ranks of this job on the control lane: anything else is refused
  // before the listener proves the secret (lanes/wire.hpp), so it answers no
  // data lane's Hello that an impostor at a rank's address passes on.
  listener->check_peers([p = p_](const lanes::Hello& h) {
    lanes::PeerPolicy policy;
    if (h.lane_from != lanes::kControlLane || h.lane_to != lanes::kControlLane)
      policy.refuse = "it names lanes " + std::to_string(h.lane_from) + " and " +
                      std::to_string(h.lane_to) + ", not the control lane";
    else if (h.rank >= static_cast<std::uint32_t>(p))
      policy.refuse = "rank " + std::to_string(h.rank) + " is outside the job of " +
                      std::to_string(p) + " ranks";
    return policy;
  });
  const control::Config config{o_.grid.name, o_.yaml_text, o_.params};
  // Refusals cost a counter and a bounded log, whoever sends them.
  lanes::RejectionLog rejections("gridbcast launch", [this](const std::string& line) {
    say(lanes::log::Level::kNotice, line);
  });
  listener->start(
      [this, &config, &rejections](lanes::Stream s, const lanes::Hello& h) {
        // The claim is checked against the job before anything is indexed by it.
        if (h.lane_from != lanes::kControlLane || h.rank >= static_cast<std::uint32_t>(p_) ||
            rank(static_cast<int>(h.rank)).channel) {
          rejections.reject("refused a control connection claiming rank " + std::to_string(h.rank) +
                            (h.rank < static_cast<std::uint32_t>(p_) ? " (already joined)"
                                                                     : " (outside the job)"));
          return;
        }
        const int r = static_cast<int>(h.rank);
        auto& st = rank(r);
        st.channel = std::make_unique<control::Channel>(control::Channel{
            std::move(s).release_plain(), control::Sealer(creds_.secret, creds_.job_id, h.rank),
            control::Direction::kToRank, who(r)});
        sup_.heard(r);
        say(lanes::log::Level::kInfo, who(r) + " connected; sending the job");
        send(r, config);
        asio::co_spawn(io_, read_loop(r), reporter("the control reader of " + who(r)));
        ev_.notify_all();
      },
      [&rejections](const std::string& why) { rejections.reject(why); });

  std::ostringstream job;
  job << std::hex << creds_.job_id;
  const std::string address = listener->address().find(':') != std::string::npos
                                  ? "[" + listener->address() + "]"
                                  : listener->address();
  Backend::Env env = {{"GRIDBCAST_LAUNCHER", address + ":" + std::to_string(listener->port())},
                      {"GRIDBCAST_JOB_ID", job.str()}};
  // The thresholds that make `auto` follow the old rule reach every rank the
  // way they reach the launcher (ssh forwards no environment of its own).
  for (const char* name :
       {"GRIDBCAST_SMALL_BYTES", "GRIDBCAST_MULTICAST_BYTES", "GRIDBCAST_MULTICAST_MIN_SITE_NODES"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') env.push_back({name, v});
  // The ranks say as much as the launcher (its -v/-q).
  if (const auto level = lanes::log::level(); level != lanes::log::Level::kNotice)
    env.push_back({lanes::log::kLevelEnv, lanes::log::level_name(level)});
  if (sup_.external()) {
    std::string command = "gridbcast rank";
    if (o_.params.program()) {
      command.clear();
      for (const auto& a : o_.program) command += (command.empty() ? "" : " ") + a;
    }
    // What the user must do, so said even with -q.
    say(lanes::log::Level::kError,
        "waiting for " + std::to_string(p_) +
            " ranks; start each with\n  GRIDBCAST_LAUNCHER=" + env[0].second +
            " GRIDBCAST_JOB_ID=" + env[1].second + " GRIDBCAST_RANK=<rank> " + command +
            "\n  and the job secret in GRIDBCAST_SECRET or on "
            "standard input (the value of this launcher's GRIDBCAST_SECRET)");
  }

  asio::co_spawn(io_,
                 sup_.watch({[this](const Backend::Exit& e) { on_exit(e); },
                             [this](int signo) {
                               interrupted_ = true;
                               fail(Cause::kOther, std::string("interrupted by ") +
                                                       (signo == SIGINT ? "SIGINT" : "SIGTERM"));
                             }}),
                 reporter("the launcher's signal watch"));
  bool ok = true;
  try {
    startup_deadline_ = Clock::now() + std::chrono::milliseconds(o_.startup_timeout_ms);
    sup_.start_all(o_.grid, env, runtime::to_hex(creds_.secret),
                   [this](int r) { say(lanes::log::Level::kInfo, "starting " + who(r)); });
    asio::co_spawn(io_, watchdog(), reporter("the launcher's watchdog"));
    runtime::run_until(io_, [this]() -> asio::awaitable<void> {
      co_await rendezvous();
      Driver d = driver_for(o_.params.kind);
      co_await std::visit([this](auto& driver) { return driver.run(*this); }, d);
    }());
  } catch (const JobFailed&) {
    ok = false;
  } catch (const std::exception& e) {
    fail(Cause::kOther, e.what());
    ok = false;
  }
  listener->close();
  if (!ok) {
    // Peers often report a dead rank before SIGCHLD does: give the signal a
    // moment so the headline names the rank that died, not its neighbour.
    // And exits reaped before their reports were read: the reports, for
    // up to kExitReportGrace.
    const auto unread = [this] {
      return std::any_of(ranks_.begin(), ranks_.end(),
                         [](const RankState& st) { return st.exit_unread.has_value(); });
    };
    if (sup_.running() > 0 || unread()) {
      io_.restart();
      io_.run_for(300ms);
    }
    for (const auto until = Clock::now() + kExitReportGrace; unread() && Clock::now() < until;) {
      io_.restart();
      io_.run_for(50ms);
      if (io_.stopped()) break;  // nothing left that could read a report
    }
    wait_for_copies_in_progress();
    settle_exits(true);
    // A rank silent well past its heartbeats when the job fails is most
    // likely why its peers failed (their deadlines may fire before the
    // launcher's silence limit does).
    if (table_sent_)
      for (const auto& [r, quiet] : sup_.silent(
               Clock::now(), std::max<Clock::duration>(3 * heartbeat_, 1500ms),
               [this](int r) { return watched(r) && !sup_.failures().names(Cause::kSilence, r); }))
        fail(Cause::kSilence,
             who(r) + " sent nothing for " +
                 seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(quiet)) +
                 " s before the job failed: stopped, overloaded, or its host "
                 "or network is down",
             r);
    explain_cut_off();
    finishing_ = true;
    sup_.stop_all();
    const FailureLog::Verdict v = sup_.failures().verdict();
    result.failure = v.headline;
    result.then = v.then;
    result.lost_first = v.lost_first;
    for (const auto& l : v.lost) {
      const auto found = stragglers_.find(l.rank);
      result.lost.push_back(
          {l.rank, l.cause, l.straggler,
           l.straggler && found != stragglers_.end() ? found->second.rate_bytes_per_s : 0});
    }
    if (!v.lost_first) result.routed_around.clear();
    for (const auto& [r, copy] : copies_) {
      const bool lost =
          std::any_of(v.lost.begin(), v.lost.end(), [r = r](const auto& l) { return l.rank == r; });
      const auto root = root_digests_.find(copy.iteration);
      if (!lost && (root == root_digests_.end() || root->second == copy.sha256))
        result.held.push_back(copy);
    }
    result.status = o_.params.program() && exit_code_ != 0 ? exit_code_ : 1;
    result.broadcast.reset();
    result.bench.reset();
    return std::move(result);
  }
  result.status = 0;
  return std::move(result);
}

}  // namespace

LaunchResult launch(const LaunchOptions& options, Backend& backend, std::ostream& err) {
  if (options.grid.size() == 0) {
    LaunchResult r;
    r.status = 1;
    r.failure = "the topology has no nodes";
    return r;
  }
  Launcher l(options, backend, err);
  return l.run();
}

}  // namespace gridbcast::job
