#include "job/launcher.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <iomanip>
#include <optional>
#include <sstream>

#include "job/control.hpp"
#include "runtime/endpoints.hpp"
#include "runtime/event.hpp"
#include "runtime/run_until.hpp"
#include "topology/plan/format.hpp"
#include "topology/plan/plan.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::job {

namespace {

using lanes::Clock;

struct RankResult {
  std::int64_t t0 = 0, t1 = 0;
  std::string digest, algorithm;
  std::uint64_t segment = 0, rejected = 0, peak_rss = 0, rss = 0;
};

// What the root of a bench job sends while the sweep runs, and at its end.
const std::vector<std::string> kPointOrAlive{"point", "alive"};
const std::vector<std::string> kDoneOrAlive{"bench_done", "alive"};

struct IterationResult {
  Iteration it;
  double seconds = 0;
  std::vector<RankResult> ranks;
};

class Launcher {
 public:
  Launcher(const LaunchOptions& o, Backend& b, std::ostream& out, std::ostream& err)
      : o_(o),
        backend_(b),
        out_(out),
        err_(err),
        p_(o.grid.size()),
        ev_(io_.get_executor()),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        sockets_(static_cast<size_t>(p_)),
        inbox_(static_cast<size_t>(p_)),
        finished_(static_cast<size_t>(p_), false),
        exited_(static_cast<size_t>(p_)) {}

  int run();

 private:
  std::string who(int r) const {
    const auto& n = o_.grid.nodes[static_cast<size_t>(r)];
    return "rank " + std::to_string(r) + " (" + n.name + ")";
  }
  void fail(const std::string& what) {
    failures_.push_back(what);
    ev_.notify_all();
  }
  // A rank process that died is the likely root cause of what its peers report.
  void fail_death(const std::string& what) {
    if (death_failure_.empty()) death_failure_ = what;
    fail(what);
  }
  void check() const {
    if (!failures_.empty()) throw std::runtime_error(failures_.front());
  }
  asio::awaitable<void> read_loop(int r);
  asio::awaitable<Message> next(int r, const std::string& type, Clock::time_point deadline);
  // The next message of r, which must be one of `types`.
  // (`types` must outlive the call: GCC 12 miscompiles initializer lists in coroutines.)
  asio::awaitable<Message> next_of(int r, const std::vector<std::string>& types,
                                   Clock::time_point deadline);
  asio::awaitable<void> send_all(const Message& m);
  asio::awaitable<void> orchestrate();
  asio::awaitable<void> run_program();
  asio::awaitable<void> run_bench();
  asio::awaitable<void> finish();
  bool program() const { return o_.params.program; }
  bool bench() const { return !o_.params.bench.empty(); }
  // A failed program-mode job exits with this status (the first failure's).
  void set_exit_code(int code) {
    if (exit_code_ == 0) exit_code_ = (code & 0xff) != 0 ? (code & 0xff) : 1;
  }
  asio::awaitable<void> watch_signals();
  // On a terminal: a line that says how long the current broadcast has run and
  // how many ranks hold the data, refreshed while it lasts over a second.
  asio::awaitable<void> show_progress(int iteration, std::shared_ptr<bool> running);
  void report(std::ostream& out) const;
  void stop_ranks();

  const LaunchOptions& o_;
  Backend& backend_;
  std::ostream& out_;
  std::ostream& err_;
  const int p_;
  asio::io_context io_{1};
  runtime::Event ev_;
  // Installed before any rank starts, so no child's exit goes unnoticed.
  asio::signal_set signals_;
  std::vector<std::unique_ptr<lanes::tcp::socket>> sockets_;
  std::vector<std::deque<Message>> inbox_;
  std::vector<std::string> failures_;
  std::string death_failure_;  // the first rank process that died, if any
  std::vector<IterationResult> results_;
  std::uint64_t rejected_ = 0;
  std::uint64_t peak_rss_ = 0;  // largest resident set of any rank
  bool finishing_ = false;
  int done_seen_ = 0;  // "done" messages received, all iterations
  std::string root_digest_;
  // Program mode: who sent "finished", who exited cleanly and when, MPI_Abort.
  std::vector<bool> finished_;
  std::vector<std::optional<Clock::time_point>> exited_;
  std::string abort_failure_;
  int exit_code_ = 0;
};

asio::awaitable<void> Launcher::read_loop(int r) {
  auto& s = *sockets_[static_cast<size_t>(r)];
  for (;;) {
    auto [ec, msg] = co_await [&]() -> asio::awaitable<std::tuple<std::string, Message>> {
      try {
        co_return std::tuple<std::string, Message>{"", co_await receive_message(s, who(r))};
      } catch (const std::exception& e) {
        co_return std::tuple<std::string, Message>{e.what(), Message{}};
      }
    }();
    if (!ec.empty()) {
      if (finishing_ || finished_[static_cast<size_t>(r)]) co_return;
      // A rank that died shows as a closed connection first; give SIGCHLD a
      // moment so the report says how it died.
      asio::steady_timer grace(io_, std::chrono::milliseconds(300));
      co_await grace.async_wait(lanes::kAsTuple);
      // A program's clean exit: wait for its SIGCHLD (up to 3 s more) to say so.
      for (int i = 0; i < 30 && program() && !backend_.external() && failures_.empty() &&
                      !exited_[static_cast<size_t>(r)];
           ++i) {
        grace.expires_after(std::chrono::milliseconds(100));
        co_await grace.async_wait(lanes::kAsTuple);
      }
      if (program() && exited_[static_cast<size_t>(r)] && !finishing_) {
        set_exit_code(1);
        fail(who(r) + " exited with status 0 without calling MPI_Finalize");
      } else if (!finishing_) {
        fail(who(r) + " lost its control connection: " + ec);
      }
      co_return;
    }
    if (msg.type() == "error") {
      fail(who(r) + " failed: " + msg.at(1));
      co_return;
    }
    if (msg.type() == "abort") {
      // MPI_Abort: reported first, whatever else the ending job brings.
      const std::string why = msg.fields.size() > 2 && !msg.at(2).empty() ? ": " + msg.at(2) : "";
      const std::string what = who(r) + " called MPI_Abort with error code " + msg.at(1) + why;
      if (abort_failure_.empty()) abort_failure_ = what;
      set_exit_code(std::atoi(msg.at(1).c_str()));
      fail(what);
      co_return;
    }
    if (msg.type() == "finished") finished_[static_cast<size_t>(r)] = true;
    if (msg.type() == "done") ++done_seen_;
    inbox_[static_cast<size_t>(r)].push_back(std::move(msg));
    ev_.notify_all();
  }
}

asio::awaitable<Message> Launcher::next(int r, const std::string& type,
                                        Clock::time_point deadline) {
  std::vector<std::string> types;
  types.push_back(type);
  co_return co_await next_of(r, types, deadline);
}

asio::awaitable<Message> Launcher::next_of(int r, const std::vector<std::string>& types,
                                           Clock::time_point deadline) {
  asio::steady_timer timer(io_, deadline);
  timer.async_wait([this](asio::error_code ec) {
    if (!ec) ev_.notify_all();
  });
  auto& box = inbox_[static_cast<size_t>(r)];
  while (box.empty()) {
    check();
    if (Clock::now() >= deadline)
      throw std::runtime_error(who(r) + " did not report \"" + types.front() +
                               "\" in time (stalled?)");
    co_await ev_.wait();
  }
  Message m = std::move(box.front());
  box.pop_front();
  if (std::find(types.begin(), types.end(), m.type()) == types.end())
    throw std::runtime_error(who(r) + " sent \"" + m.type() + "\" where \"" + types.front() +
                             "\" was expected");
  co_return m;
}

asio::awaitable<void> Launcher::send_all(const Message& m) {
  for (int r = 0; r < p_; ++r) co_await send_message(*sockets_[static_cast<size_t>(r)], m);
}

asio::awaitable<void> Launcher::show_progress(int iteration, std::shared_ptr<bool> running) {
  const int done_before = done_seen_;
  const auto start = Clock::now();
  asio::steady_timer tick(io_);
  bool shown = false;
  for (;;) {
    tick.expires_after(std::chrono::milliseconds(500));
    co_await tick.async_wait(lanes::kAsTuple);
    if (!*running || finishing_) break;
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s < 1) continue;
    std::ostringstream line;
    line << "\r  ";
    if (o_.params.iterations > 1)
      line << "iteration " << (iteration + 1) << "/" << o_.params.iterations << ": ";
    line << "broadcasting "
         << topology::format_bytes(iteration_at(o_.params, iteration, o_.grid).size) << ", "
         << std::fixed << std::setprecision(1) << s << " s, " << (done_seen_ - done_before)
         << " of " << p_ << " ranks hold the data ";
    err_ << line.str() << std::flush;
    shown = true;
  }
  // Leave the line to what follows it (the next iteration's or the summary).
  if (shown && o_.params.iterations <= 1)
    err_ << "\r" << std::string(72, ' ') << "\r" << std::flush;
}

asio::awaitable<void> Launcher::watch_signals() {
  for (;;) {
    auto [ec, signo] = co_await signals_.async_wait(lanes::kAsTuple);
    if (ec) co_return;
    if (signo == SIGINT || signo == SIGTERM) {
      fail(std::string("interrupted by ") + (signo == SIGINT ? "SIGINT" : "SIGTERM"));
      continue;
    }
    for (const auto& e : backend_.reap()) {
      if (program()) {
        if (!e.success) {
          set_exit_code(e.code > 0 ? e.code : 1);
          fail(who(e.rank) + " " + e.status);
        } else {
          exited_[static_cast<size_t>(e.rank)] = Clock::now();  // judged by run_program()
        }
        continue;
      }
      if (!finishing_ || !e.success) fail_death(who(e.rank) + " " + e.status);
    }
    ev_.notify_all();
    if (finishing_ && backend_.running() == 0) co_return;
  }
}

asio::awaitable<void> Launcher::orchestrate() {
  const auto& params = o_.params;
  const auto startup = Clock::now() + std::chrono::milliseconds(o_.startup_timeout_ms);
  while (true) {
    check();
    std::vector<int> missing;
    for (int r = 0; r < p_; ++r)
      if (!sockets_[static_cast<size_t>(r)]) missing.push_back(r);
    if (missing.empty()) break;
    if (Clock::now() >= startup) {
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 8; ++i)
        list += (i ? ", " : "") + who(missing[i]);
      if (missing.size() > 8) list += ", ...";
      throw std::runtime_error(std::to_string(missing.size()) + " rank(s) did not connect within " +
                               std::to_string(o_.startup_timeout_ms / 1000) + " s: " + list);
    }
    asio::steady_timer t(io_, std::min(startup, Clock::now() + std::chrono::milliseconds(200)));
    t.async_wait([this](asio::error_code) { ev_.notify_all(); });
    co_await ev_.wait();
  }

  Message config = make_message("config", o_.yaml_text, o_.grid.source);
  for (auto& f : params.to_fields()) config.fields.push_back(f);
  co_await send_all(config);
  Message table = make_message("table");
  for (int r = 0; r < p_; ++r) {
    const Message m = co_await next(r, "endpoints", startup);
    table.fields.push_back(m.at(1));
    table.fields.push_back(m.at(2));
  }
  co_await send_all(table);
  if (program()) co_return co_await run_program();
  if (bench()) co_return co_await run_bench();

  // While a broadcast runs the ranks enforce their own progress deadline; the
  // launcher allows that much again before calling a silent rank stalled.
  const auto patience = std::chrono::milliseconds(params.timeout_ms) * 2 + std::chrono::seconds(5);
  for (int i = 0; i < params.iterations; ++i) {
    IterationResult res;
    res.it = iteration_at(params, i, o_.grid);
    res.ranks.resize(static_cast<size_t>(p_));
    for (int r = 0; r < p_; ++r) co_await next(r, "ready", Clock::now() + patience);
    co_await send_all(make_message("go", std::to_string(i)));
    auto running = std::make_shared<bool>(true);
    if (o_.progress && !o_.json) asio::co_spawn(io_, show_progress(i, running), asio::detached);
    struct Stop {
      std::shared_ptr<bool> flag;
      ~Stop() { *flag = false; }
    } stop_progress{running};
    for (int r = 0; r < p_; ++r) {
      const Message m = co_await next(r, "done", Clock::now() + patience);
      auto& rr = res.ranks[static_cast<size_t>(r)];
      rr.t0 = std::stoll(m.at(2));
      rr.t1 = std::stoll(m.at(3));
      rr.digest = m.at(4);
      rr.algorithm = m.at(5);
      rr.segment = std::stoull(m.at(6));
      rr.rejected = std::stoull(m.at(7));
      rr.peak_rss = std::stoull(m.at(8));
      rr.rss = std::stoull(m.at(9));
    }
    const auto& root = res.ranks[static_cast<size_t>(res.it.root)];
    std::int64_t end = root.t0;
    for (int r = 0; r < p_; ++r) {
      const auto& rr = res.ranks[static_cast<size_t>(r)];
      end = std::max(end, rr.t1);
      if (params.verify && rr.digest != root.digest)
        throw std::runtime_error(who(r) + " holds a copy whose SHA-256 " + rr.digest +
                                 " differs from the root's " + root.digest + " (iteration " +
                                 std::to_string(i) + ")");
    }
    *running = false;
    res.seconds = static_cast<double>(end - root.t0) * 1e-9;
    root_digest_ = root.digest;
    results_.push_back(std::move(res));
    if (o_.progress && !o_.json && params.iterations > 1)
      err_ << "\r  iteration " << (i + 1) << "/" << params.iterations << std::string(40, ' ')
           << std::flush;
  }
  if (o_.progress && !o_.json && params.iterations > 1) err_ << "\n";
  // Each rank reports the connections it has rejected so far: the job's count
  // is their sum.
  rejected_ = 0;
  for (const auto& rr : results_.back().ranks) {
    rejected_ += rr.rejected;
    peak_rss_ = std::max(peak_rss_, rr.peak_rss);
  }
  co_await finish();
}

// Tells every rank to exit and waits for them to do so on their own.
asio::awaitable<void> Launcher::finish() {
  finishing_ = true;
  co_await send_all(make_message("exit"));
  // Wait for the ranks to exit on their own.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (backend_.running() > 0 && Clock::now() < deadline) {
    check();
    asio::steady_timer t(io_, std::chrono::milliseconds(50));
    co_await t.async_wait(asio::use_awaitable);
    for (const auto& e : backend_.reap())
      if (!e.success) fail_death(who(e.rank) + " " + e.status);
  }
  check();
}

// Bench mode after the rendezvous: the root reports each point as it
// completes, then every rank says it is done.
asio::awaitable<void> Launcher::run_bench() {
  const auto& params = o_.params;
  const BenchSpec spec = BenchSpec::decode(params.bench);
  // Between samples the root says it is alive (about once a second), so a
  // stalled root is noticed after one sample's worth of broadcasts, bounded from
  // a generous estimate of the slowest algorithm, plus the ranks' own patience.
  const double slow_bcast =
      std::max(1.0, 30 * topology::lower_bound_seconds(o_.grid, params.root, spec.largest_size()));
  const auto per_sample = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>((std::max(spec.warmup, spec.rounds) + 2) * slow_bcast));
  const auto patience = std::chrono::milliseconds(params.timeout_ms) * 2 + std::chrono::seconds(5);
  const size_t points = spec.sizes.size() * spec.algorithms.size();
  LaunchOptions::BenchOutcome outcome;
  while (outcome.points.size() < points) {
    Message m = co_await next_of(params.root, kPointOrAlive, Clock::now() + per_sample + patience);
    if (m.type() == "alive") continue;
    BenchPoint p = BenchPoint::decode(m.at(1));
    if (o_.on_bench_point) o_.on_bench_point(p);
    outcome.points.push_back(std::move(p));
  }
  // Ticks sent after the last point may still be queued.
  for (int r = 0; r < p_; ++r) {
    Message m = co_await next_of(r, kDoneOrAlive, Clock::now() + patience);
    while (m.type() == "alive") m = co_await next_of(r, kDoneOrAlive, Clock::now() + patience);
    outcome.rejected_connections += std::stoull(m.at(1));
    outcome.peak_rss_bytes = std::max<std::uint64_t>(outcome.peak_rss_bytes, std::stoull(m.at(2)));
  }
  if (o_.bench_outcome) *o_.bench_outcome = std::move(outcome);
  co_await finish();
}

// Program mode after the rendezvous: the ranks run the program; wait until
// every rank has called MPI_Finalize ("finished") and exited, with no deadline.
asio::awaitable<void> Launcher::run_program() {
  for (;;) {
    check();
    bool all = true;
    for (int r = 0; r < p_; ++r) {
      const auto i = static_cast<size_t>(r);
      const bool gone = backend_.external() || exited_[i].has_value();
      all = all && finished_[i] && gone;
      // A clean exit without MPI_Finalize; allow its last message time to arrive.
      if (exited_[i] && !finished_[i] &&
          Clock::now() > *exited_[i] + std::chrono::milliseconds(500)) {
        set_exit_code(1);
        fail(who(r) + " exited with status 0 without calling MPI_Finalize");
      }
    }
    if (all) break;
    asio::steady_timer t(io_, std::chrono::milliseconds(200));
    t.async_wait([this](asio::error_code) { ev_.notify_all(); });
    co_await ev_.wait();
  }
  finishing_ = true;
}

void Launcher::stop_ranks() {
  backend_.signal_all(SIGTERM);
  for (int round = 0; round < 60 && backend_.running() > 0; ++round) {
    if (round == 30) backend_.signal_all(SIGKILL);  // after 3 s, no more waiting
    ::usleep(100'000);
    for (const auto& e : backend_.reap()) (void)e;
  }
}

std::string fmt_seconds(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(s < 0.01 ? 6 : 4) << s;
  return o.str();
}

void Launcher::report(std::ostream& out) const {
  const auto& g = o_.grid;
  std::vector<double> times;
  for (const auto& r : results_) times.push_back(r.seconds);
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const auto& last = results_.back();
  const std::uint64_t bytes = last.it.size;
  const double lb = topology::lower_bound_seconds(g, last.it.root, bytes);
  const double bw = median > 0 ? static_cast<double>(bytes) / median : 0;
  // Slowest rank per site, in the last iteration.
  struct Slow {
    int rank = -1;
    double seconds = 0;
  };
  std::vector<Slow> slow(g.sites.size());
  const auto t0 = last.ranks[static_cast<size_t>(last.it.root)].t0;
  for (int r = 0; r < p_; ++r) {
    const double s = static_cast<double>(last.ranks[static_cast<size_t>(r)].t1 - t0) * 1e-9;
    auto& sl = slow[static_cast<size_t>(g.site_of(r))];
    if (sl.rank < 0 || s > sl.seconds) sl = {r, s};
  }
  const std::string algo = last.ranks[static_cast<size_t>(last.it.root)].algorithm;
  if (o_.json) {
    out << "{\"algorithm\": \"" << algo << "\", \"ranks\": " << p_
        << ", \"sites\": " << g.sites.size() << ", \"bytes\": " << bytes
        << ", \"root\": " << last.it.root << ", \"iterations\": " << results_.size()
        << ", \"segment_bytes\": " << last.ranks[0].segment
        << ", \"seconds\": {\"min\": " << sorted.front() << ", \"median\": " << median
        << ", \"max\": " << sorted.back() << "}, \"bandwidth_bytes_per_second\": " << bw
        << ", \"lower_bound_seconds\": " << lb
        << ", \"ratio_to_lower_bound\": " << (lb > 0 ? median / lb : 0)
        << ", \"verified\": " << (o_.params.verify ? "true" : "false") << ", \"sha256\": \""
        << root_digest_ << "\", \"rejected_connections\": " << rejected_
        << ", \"peak_rss_bytes\": " << peak_rss_ << ", \"slowest_per_site\": [";
    for (size_t s = 0; s < slow.size(); ++s)
      out << (s ? ", " : "") << "{\"site\": \"" << topology::json_escape(g.sites[s].name)
          << "\", \"rank\": " << slow[s].rank << ", \"node\": \""
          << topology::json_escape(g.nodes[static_cast<size_t>(slow[s].rank)].name)
          << "\", \"seconds\": " << slow[s].seconds << "}";
    out << "], \"per_iteration\": [";
    for (size_t i = 0; i < results_.size(); ++i)
      out << (i ? ", " : "") << "{\"root\": " << results_[i].it.root
          << ", \"bytes\": " << results_[i].it.size << ", \"algorithm\": \""
          << results_[i].ranks[static_cast<size_t>(results_[i].it.root)].algorithm
          << "\", \"seconds\": " << results_[i].seconds << ", \"max_rss_bytes\": "
          << std::max_element(
                 results_[i].ranks.begin(), results_[i].ranks.end(),
                 [](const RankResult& a, const RankResult& b) { return a.rss < b.rss; })
                 ->rss
          << "}";
    out << "]}\n";
    return;
  }
  out << "gridbcast launch: " << algo << ", " << p_ << " ranks in " << g.sites.size()
      << " site(s), " << topology::format_bytes(bytes) << " from rank " << last.it.root << ", "
      << results_.size() << " iteration(s), segment "
      << topology::format_bytes(last.ranks[0].segment) << "\n";
  out << "  time until the last rank holds the data: " << fmt_seconds(median) << " s";
  if (results_.size() > 1)
    out << " (median; min " << fmt_seconds(sorted.front()) << ", max " << fmt_seconds(sorted.back())
        << ")";
  out << "\n  effective bandwidth: " << topology::format_bandwidth(bw * 8) << " (" << std::fixed
      << std::setprecision(1) << bw / (1 << 20) << " MiB/s)\n";
  out << "  lower bound from the topology: " << fmt_seconds(lb) << " s";
  if (lb > 0) out << ", ratio " << std::setprecision(2) << median / lb;
  out << "\n  slowest rank per site:";
  for (size_t s = 0; s < slow.size(); ++s)
    out << (s ? "," : "") << " " << g.sites[s].name << " " << who(slow[s].rank) << " "
        << fmt_seconds(slow[s].seconds) << " s";
  out << "\n";
  if (o_.params.verify)
    out << "  verified: all " << p_ << " ranks hold the root's SHA-256 " << root_digest_ << "\n";
  out << "  largest rank resident set: " << topology::format_bytes(peak_rss_) << "\n";
  if (rejected_ > 0) out << "  rejected connections: " << rejected_ << "\n";
}

int Launcher::run() {
  const auto creds = [] {
    // External ranks must share the secret: take it from the environment then.
    runtime::JobCredentials c = runtime::new_credentials();
    if (const char* s = std::getenv("GRIDBCAST_SECRET"); s && *s) c.secret = runtime::from_hex(s);
    if (const char* j = std::getenv("GRIDBCAST_JOB_ID"); j && *j)
      c.job_id = std::stoull(j, nullptr, 16);
    return c;
  }();
  std::shared_ptr<lanes::Listener> listener;
  try {
    listener = lanes::Listener::open(io_.get_executor(), o_.listen_address, o_.listen_port,
                                     lanes::Credentials{creds.job_id, creds.secret});
  } catch (const std::exception& e) {
    err_ << "gridbcast launch: " << e.what() << "\n";
    return 1;
  }
  listener->start(
      [this](lanes::Stream s, const lanes::Hello& h) {
        const int r = static_cast<int>(h.rank);
        if (h.lane_from != lanes::kControlLane || r >= p_ || sockets_[static_cast<size_t>(r)]) {
          err_ << "gridbcast launch: rejected a control connection claiming rank " << r << "\n";
          return;
        }
        sockets_[static_cast<size_t>(r)] =
            std::make_unique<lanes::tcp::socket>(std::move(s).release_plain());
        asio::co_spawn(io_, read_loop(r), asio::detached);
        ev_.notify_all();
      },
      [this](const std::string& why) { err_ << "gridbcast launch: " << why << "\n"; });

  std::ostringstream job;
  job << std::hex << creds.job_id;
  const std::string address = listener->address().find(':') != std::string::npos
                                  ? "[" + listener->address() + "]"
                                  : listener->address();
  const Backend::Env env = {
      {"GRIDBCAST_LAUNCHER", address + ":" + std::to_string(listener->port())},
      {"GRIDBCAST_JOB_ID", job.str()}};
  if (backend_.external()) {
    std::string command = "gridbcast rank";
    if (program()) {
      command.clear();
      for (const auto& a : o_.program) command += (command.empty() ? "" : " ") + a;
    }
    err_ << "gridbcast launch: waiting for " << p_
         << " ranks; start each with\n  GRIDBCAST_LAUNCHER=" << env[0].second
         << " GRIDBCAST_JOB_ID=" << env[1].second << " GRIDBCAST_RANK=<rank> " << command
         << "\n  and the job secret in GRIDBCAST_SECRET or on "
            "standard input (the value of this launcher's GRIDBCAST_SECRET)\n";
  }

  asio::co_spawn(io_, watch_signals(), asio::detached);
  bool ok = true;
  try {
    for (int r = 0; r < p_; ++r) {
      Backend::Env e = env;
      e.push_back({"GRIDBCAST_RANK", std::to_string(r)});
      backend_.start(r, o_.grid.nodes[static_cast<size_t>(r)], e, runtime::to_hex(creds.secret));
    }
    runtime::run_until(io_, orchestrate());
  } catch (const std::exception& e) {
    if (failures_.empty()) failures_.push_back(e.what());
    ok = false;
  }
  listener->close();
  if (!ok) {
    // Peers often report a dead rank before SIGCHLD does: give the signal a
    // moment so the headline names the rank that died, not its neighbour.
    if (death_failure_.empty() && backend_.running() > 0) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(300));
    }
    finishing_ = true;
    stop_ranks();
    const std::string& first = !abort_failure_.empty()   ? abort_failure_
                               : !death_failure_.empty() ? death_failure_
                                                         : failures_.front();
    err_ << "gridbcast launch: FAILED: " << first << "\n";
    int shown = 0;
    for (size_t i = 0; i < failures_.size() && shown < 5; ++i)
      if (failures_[i] != first) {
        err_ << "  then: " << failures_[i] << "\n";
        ++shown;
      }
    return program() && exit_code_ != 0 ? exit_code_ : 1;
  }
  if (!program() && !bench()) report(out_);
  return 0;
}

}  // namespace

int launch(const LaunchOptions& options, Backend& backend, std::ostream& out, std::ostream& err) {
  if (options.grid.size() == 0) {
    err << "gridbcast launch: the topology has no nodes\n";
    return 1;
  }
  Launcher l(options, backend, out, err);
  return l.run();
}

}  // namespace gridbcast::job
