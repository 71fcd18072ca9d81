#include "job/session.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "job/control.hpp"
#include "job/rank.hpp"
#include "lanes/log.hpp"
#include "runtime/run_until.hpp"
#include "runtime/subgrid.hpp"
#include "topology/loader.hpp"

namespace gridbcast::job {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

lanes::tcp::endpoint parse_host_port(const std::string& hp) {
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::runtime_error("GRIDBCAST_LAUNCHER must be host:port, got \"" + hp + "\"");
  std::string host = hp.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = hp.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error("bad port in GRIDBCAST_LAUNCHER \"" + hp + "\"");
  const int port = std::stoi(port_text);
  if (port <= 0 || port > 65535)
    throw std::runtime_error("bad port in GRIDBCAST_LAUNCHER \"" + hp + "\"");
  return lanes::make_endpoint(host, static_cast<std::uint16_t>(port));
}

// One line from a file descriptor, unbuffered (nothing past the newline is consumed).
std::string read_line_fd(int fd) {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n' || line.size() > 4096) break;
    line += c;
  }
  return line;
}

// At least 128 bits of secret: a short one can be guessed offline from one
// recorded handshake.
constexpr size_t kMinSecretHexDigits = 32;

std::string checked_secret(std::string secret, const std::string& from) {
  while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ')) secret.pop_back();
  if (secret.size() < kMinSecretHexDigits)
    throw std::runtime_error("the job secret from " + from + " has " +
                             std::to_string(secret.size() * 4) +
                             " bits; at least 128 are needed (32 hex digits, e.g. from "
                             "`openssl rand -hex 32`)");
  return secret;
}

// The rank's outgoing broadcast links for a Progress message: the most
// backlogged first when there are more than a message carries.
std::vector<control::LinkReport> link_reports(const runtime::Communicator& comm) {
  std::vector<runtime::LinkSample> samples = comm.link_samples();
  if (samples.size() > control::kMaxLinkReports) {
    std::partial_sort(samples.begin(), samples.begin() + control::kMaxLinkReports, samples.end(),
                      [](const auto& a, const auto& b) {
                        // Links not yet up tell of a cut as much as the most backlogged.
                        // Then what waits or is in flight: a cut leaves both.
                        return a.connecting != b.connecting ? a.connecting
                                                            : a.notsent_bytes + a.unacked_bytes >
                                                                  b.notsent_bytes + b.unacked_bytes;
                      });
    samples.resize(control::kMaxLinkReports);
  }
  std::vector<control::LinkReport> links;
  links.reserve(samples.size());
  for (const auto& l : samples)
    links.push_back(
        {l.peer, static_cast<std::uint8_t>(l.lane_from), static_cast<std::uint8_t>(l.lane_to),
         static_cast<std::uint16_t>(std::clamp(l.streams, 1, int{control::kMaxLinkStreams})),
         l.bytes_acked, l.notsent_bytes, l.rwnd_limited_us, l.unacked_bytes, l.connecting});
  return links;
}

}  // namespace

std::string read_job_secret(std::istream* fallback) {
  if (std::string secret = env_or_empty("GRIDBCAST_SECRET"); !secret.empty()) {
    // Read once and removed, so nothing this rank starts inherits it.
    ::unsetenv("GRIDBCAST_SECRET");
    return checked_secret(std::move(secret), "GRIDBCAST_SECRET");
  }
  if (const std::string fd_text = env_or_empty("GRIDBCAST_SECRET_FD"); !fd_text.empty()) {
    size_t used = 0;
    int fd = -1;
    try {
      fd = std::stoi(fd_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != fd_text.size() || fd < 0)
      throw std::runtime_error("GRIDBCAST_SECRET_FD is not a file descriptor: \"" + fd_text + "\"");
    std::string secret = read_line_fd(fd);
    ::close(fd);
    ::unsetenv("GRIDBCAST_SECRET_FD");  // children of this rank must not try it again
    if (secret.empty())
      throw std::runtime_error("no job secret on descriptor " + fd_text + " (GRIDBCAST_SECRET_FD)");
    return checked_secret(std::move(secret), "GRIDBCAST_SECRET_FD");
  }
  std::string secret;
  if (fallback) std::getline(*fallback, secret);
  if (secret.empty())
    throw std::runtime_error(
        "no job secret: set GRIDBCAST_SECRET, or GRIDBCAST_SECRET_FD, or pass it on standard "
        "input");
  return checked_secret(std::move(secret), "standard input");
}

std::chrono::milliseconds heartbeat_interval(std::int64_t timeout_ms) {
  if (timeout_ms <= 0) return std::chrono::milliseconds(1000);
  return std::chrono::milliseconds(std::clamp<std::int64_t>(timeout_ms / 4, 100, 1000));
}

struct Session::Impl {
  asio::io_context io{1};
  std::optional<control::Channel> channel;
  int rank = -1;
  runtime::JobCredentials creds;
  topology::Grid grid;
  JobParams params;
  std::unique_ptr<runtime::Communicator> comm;

  // The control thread: runs `io` once the rendezvous is over.
  std::thread thread;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<asio::steady_timer> heartbeat;
  // On the control thread: set when stop_thread() runs there, so a beat whose
  // timer fired just before the cancel does not arm it again (the thread
  // would then never run out of work, and the rank never exit).
  bool stopped = false;

  // Frames to write, sealed in the order they are written (one writer).
  struct Outgoing {
    control::ToLauncher message;
    std::shared_ptr<std::promise<void>> written;  // null for heartbeats
  };
  std::deque<Outgoing> outbox;
  bool writing = false;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<control::ToRank> inbox;
  std::string lost;  // why the launcher is gone; empty while it is there
  bool closing = false;
  bool exit_expected = false;
  int progress_iteration = -1;                    // under mu
  runtime::Communicator::Progress progress_base;  // under mu: totals when it began
  std::atomic<std::uint64_t> worked{0};
  std::uint64_t work_base = 0;  // under mu
  std::function<void(const std::string&)> on_lost;

  ~Impl() {
    {
      std::unique_lock lock(mu);
      closing = true;
    }
    stop_thread();
  }

  void stop_thread() {
    if (!thread.joinable()) return;
    asio::post(io, [this] {
      stopped = true;
      if (heartbeat) heartbeat->cancel();
      asio::error_code ignored;
      if (channel) {
        channel->socket.shutdown(lanes::tcp::socket::shutdown_both, ignored);
        channel->socket.close(ignored);
      }
      work.reset();
    });
    thread.join();
  }

  // During the rendezvous, on the caller's thread.
  control::ToRank receive_now() {
    const std::string body = runtime::run_until(io, control::receive_body(*channel));
    return control::decode_to_rank(body, static_cast<std::uint32_t>(grid.size()));
  }
  void send_now(const control::ToLauncher& m) {
    runtime::run_until(io, control::send_body(*channel, control::encode_body(m)));
  }

  void start_thread() {
    work.emplace(io.get_executor());
    heartbeat.emplace(io);
    asio::co_spawn(io, read_loop(), reporter("reader"));
    asio::co_spawn(io, beat(), reporter("heartbeat"));
    if (io.stopped()) io.restart();
    thread = std::thread([this] { io.run(); });
  }

  // The control thread's coroutines catch what they expect; anything else
  // ends the rank loudly rather than leaving it without heartbeats or reader.
  std::function<void(std::exception_ptr)> reporter(const char* what) {
    return [this, what](std::exception_ptr e) {
      if (!e) return;
      const std::string why = lanes::what_of(e);
      {
        std::unique_lock lock(mu);
        if (closing) return;
      }
      lanes::log::error("gridbcast rank " + std::to_string(rank) + ": the control channel's " +
                        what + " failed: " + why + "; exiting");
      ::_exit(1);
    };
  }

  // On the control thread.
  void enqueue(Outgoing o) {
    outbox.push_back(std::move(o));
    if (!writing) {
      writing = true;
      asio::co_spawn(io, write_loop(), reporter("writer"));
    }
  }

  asio::awaitable<void> write_loop() {
    while (!outbox.empty()) {
      Outgoing o = std::move(outbox.front());
      outbox.pop_front();
      try {
        co_await control::send_body(*channel, control::encode_body(o.message));
        if (o.written) o.written->set_value();
      } catch (...) {
        if (o.written) o.written->set_exception(std::current_exception());
      }
    }
    writing = false;
  }

  asio::awaitable<void> beat() {
    const auto interval = heartbeat_interval(params.timeout_ms);
    for (;;) {
      heartbeat->expires_after(interval);
      auto [ec] = co_await heartbeat->async_wait(lanes::kAsTuple);
      if (ec || stopped) co_return;
      int it = -1;
      runtime::Communicator::Progress base;
      std::uint64_t worked_base = 0;
      {
        std::unique_lock lock(mu);
        it = progress_iteration;
        base = progress_base;
        worked_base = work_base;
      }
      if (it >= 0 && comm) {
        const auto p = comm->progress();
        control::Progress m{it, p.bytes_in - base.bytes_in, p.bytes_out - base.bytes_out,
                            worked.load() - worked_base, link_reports(*comm)};
        enqueue({std::move(m), nullptr});
      } else {
        control::Alive alive;
        if (comm) {
          alive.waiting = comm->waiting().substr(0, control::kMaxWaitingText);
          alive.moved = comm->moved();
        }
        enqueue({std::move(alive), nullptr});
      }
    }
  }

  asio::awaitable<void> read_loop() {
    std::string why;
    bool ended_by_launcher = false;
    try {
      for (;;) {
        const std::string body = co_await control::receive_body(*channel);
        control::ToRank m = control::decode_to_rank(body, static_cast<std::uint32_t>(grid.size()));
        const bool is_exit = std::holds_alternative<control::Exit>(m);
        std::unique_lock lock(mu);
        if (is_exit && !exit_expected && !closing) {
          why = "the launcher ended the job";
          ended_by_launcher = true;
          break;
        }
        inbox.push_back(std::move(m));
        cv.notify_all();
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::function<void(const std::string&)> handler;
    {
      std::unique_lock lock(mu);
      lost = why.empty() ? "the launcher closed the control connection" : why;
      cv.notify_all();
      if (closing) co_return;
      handler = on_lost;
    }
    if (heartbeat) heartbeat->cancel();
    const std::string what = ended_by_launcher ? why : "lost the launcher: " + lost;
    if (handler) {
      handler(what);
    } else {
      lanes::log::error("gridbcast rank " + std::to_string(rank) + ": " + what + "; exiting");
      ::_exit(1);
    }
  }
};

Session::Session() : impl_(std::make_unique<Impl>()) {}
Session::~Session() = default;

void Session::join(std::istream* secret_fallback) {
  auto& im = *impl_;
  const auto r = rank_from_environment();
  if (!r) throw std::runtime_error("no rank: set GRIDBCAST_RANK (or run under srun/mpiexec)");
  im.rank = *r;
  const std::string launcher = env_or_empty("GRIDBCAST_LAUNCHER");
  if (launcher.empty()) throw std::runtime_error("GRIDBCAST_LAUNCHER is not set");
  const std::string job = env_or_empty("GRIDBCAST_JOB_ID");
  if (job.empty() || job.size() > 16 ||
      job.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw std::runtime_error("GRIDBCAST_JOB_ID is not a job id (hex): \"" + job + "\"");
  im.creds.job_id = std::stoull(job, nullptr, 16);
  im.creds.secret = runtime::from_hex(read_job_secret(secret_fallback));

  lanes::Hello hello;
  hello.rank = static_cast<std::uint32_t>(im.rank);
  hello.lane_from = hello.lane_to = lanes::kControlLane;
  const lanes::Credentials lc{im.creds.job_id, im.creds.secret};
  const auto launcher_ep = parse_host_port(launcher);
  auto socket =
      runtime::run_until(im.io, [&]() -> asio::awaitable<std::unique_ptr<lanes::tcp::socket>> {
        auto stream = co_await lanes::connect_authenticated(
            "", launcher_ep, hello, lc, lanes::Clock::now() + std::chrono::seconds(60),
            "the launcher");
        co_return std::make_unique<lanes::tcp::socket>(std::move(stream).release_plain());
      }());
  im.channel.emplace(control::Channel{
      std::move(*socket),
      control::Sealer(im.creds.secret, im.creds.job_id, static_cast<std::uint32_t>(im.rank)),
      control::Direction::kToLauncher, "the launcher"});

  auto config_msg = im.receive_now();
  auto* config = std::get_if<control::Config>(&config_msg);
  if (!config)
    throw std::runtime_error("the launcher sent " + control::name_of(config_msg) +
                             " where Config was expected");
  im.grid = topology::load_grid_string(config->topology_yaml, config->topology_name);
  im.params = std::move(config->params);
  if (!im.params.rank_labels.empty()) {
    // A healed job: the survivors of the first run (their first-run ranks,
    // ascending), on the topology restricted to them, numbered anew.
    const auto& labels = im.params.rank_labels;
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] >= im.grid.size() || (i > 0 && labels[i] <= labels[i - 1]))
        throw std::runtime_error(
            "the launcher named survivors that are not ascending ranks of "
            "the topology's " +
            std::to_string(im.grid.size()));
    im.grid = runtime::restrict_grid(im.grid, std::vector<int>(labels.begin(), labels.end()));
  }
  if (im.rank >= im.grid.size())
    throw std::runtime_error("rank " + std::to_string(im.rank) + " is outside the topology's " +
                             std::to_string(im.grid.size()) + " ranks");
  if (im.params.root >= im.grid.size())
    throw std::runtime_error("the launcher named root " + std::to_string(im.params.root) +
                             " outside the topology's " + std::to_string(im.grid.size()) +
                             " ranks");

  runtime::CommOptions options;
  options.timeout = im.params.timeout_ms > 0 ? std::chrono::milliseconds(im.params.timeout_ms)
                                             : runtime::kNoTimeout;
  options.segment_bytes = im.params.segment_bytes;
  options.thresholds = topology::SelectionThresholds::from_environment();
  options.cert_dir = im.params.cert_dir;  // empty: this rank's GRIDBCAST_CERT_DIR
  im.comm = std::make_unique<runtime::Communicator>(im.grid, im.rank, im.creds, options);
  im.send_now(control::Endpoints{im.comm->listen()});

  auto table_msg = im.receive_now();
  auto* table = std::get_if<control::Table>(&table_msg);
  if (!table)
    throw std::runtime_error("the launcher sent " + control::name_of(table_msg) +
                             " where Table was expected");
  im.comm->set_endpoints(std::move(table->ports), table->run_nonce);
  im.start_thread();
}

int Session::rank() const {
  return impl_->rank;
}
const topology::Grid& Session::grid() const {
  return impl_->grid;
}
const JobParams& Session::params() const {
  return impl_->params;
}
const runtime::JobCredentials& Session::credentials() const {
  return impl_->creds;
}

runtime::Communicator& Session::communicator() {
  if (!impl_->comm) throw std::logic_error("Session::communicator() before join()");
  return *impl_->comm;
}

void Session::send(const control::ToLauncher& m) {
  auto& im = *impl_;
  if (!im.channel) throw std::logic_error("Session::send() without a control channel");
  if (!im.thread.joinable()) {
    if (im.closing) throw std::logic_error("Session::send() after close()");
    return im.send_now(m);
  }
  auto written = std::make_shared<std::promise<void>>();
  auto done = written->get_future();
  asio::post(im.io, [&im, m, written] { im.enqueue({m, written}); });
  done.get();
}

control::ToRank Session::receive() {
  auto& im = *impl_;
  if (!im.channel) throw std::logic_error("Session::receive() without a control channel");
  std::unique_lock lock(im.mu);
  im.cv.wait(lock, [&] { return !im.inbox.empty() || !im.lost.empty(); });
  if (im.inbox.empty()) throw std::runtime_error("lost the launcher: " + im.lost);
  control::ToRank m = std::move(im.inbox.front());
  im.inbox.pop_front();
  return m;
}

void Session::expect_exit() {
  std::unique_lock lock(impl_->mu);
  impl_->exit_expected = true;
}

void Session::report_progress(int iteration) {
  auto& im = *impl_;
  const auto base = im.comm ? im.comm->progress() : runtime::Communicator::Progress{};
  std::unique_lock lock(im.mu);
  if (iteration >= 0 && iteration != im.progress_iteration) {
    im.progress_base = base;
    im.work_base = im.worked.load();
  }
  im.progress_iteration = iteration;
}

void Session::note_work(std::uint64_t bytes) {
  impl_->worked += bytes;
}

void Session::report_error(const std::string& what) noexcept {
  auto& im = *impl_;
  if (!im.channel || !im.channel->socket.is_open()) return;
  try {
    send(control::Error{what});
  } catch (...) {
    // The launcher is gone too; the exit status still tells.
  }
}

void Session::close() {
  auto& im = *impl_;
  {
    std::unique_lock lock(im.mu);
    im.closing = true;
  }
  if (im.thread.joinable()) {
    im.stop_thread();
  } else if (im.channel) {
    asio::error_code ignored;
    im.channel->socket.shutdown(lanes::tcp::socket::shutdown_send, ignored);
    im.channel->socket.close(ignored);
  }
}

void Session::on_launcher_lost(std::function<void(const std::string&)> handler) {
  std::unique_lock lock(impl_->mu);
  impl_->on_lost = std::move(handler);
}

}  // namespace gridbcast::job
