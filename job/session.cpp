#include "job/session.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "job/control.hpp"
#include "job/rank.hpp"
#include "runtime/run_until.hpp"
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
  const int port = std::stoi(hp.substr(colon + 1));
  if (port <= 0 || port > 65535) throw std::runtime_error("bad port in GRIDBCAST_LAUNCHER");
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

}  // namespace

std::string read_job_secret(std::istream* fallback) {
  std::string secret = env_or_empty("GRIDBCAST_SECRET");
  if (!secret.empty()) return secret;
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
    secret = read_line_fd(fd);
    ::close(fd);
    ::unsetenv("GRIDBCAST_SECRET_FD");  // children of this rank must not try it again
    if (secret.empty())
      throw std::runtime_error("no job secret on descriptor " + fd_text + " (GRIDBCAST_SECRET_FD)");
    return secret;
  }
  if (fallback) std::getline(*fallback, secret);
  if (secret.empty())
    throw std::runtime_error(
        "no job secret: set GRIDBCAST_SECRET, or GRIDBCAST_SECRET_FD, or pass it on standard "
        "input");
  return secret;
}

struct Session::Impl {
  asio::io_context io{1};
  std::unique_ptr<lanes::tcp::socket> control;
  int rank = -1;
  runtime::JobCredentials creds;
  topology::Grid grid;
  JobParams params;
  std::unique_ptr<runtime::Communicator> comm;

  Message receive(const std::string& type) {
    Message m = runtime::run_until(io, receive_message(*control, "the launcher"));
    if (m.type() == "exit" && type != "exit")
      throw std::runtime_error("the launcher ended the job during the rendezvous");
    if (m.type() != type)
      throw std::runtime_error("the launcher sent \"" + m.type() + "\", expected \"" + type + "\"");
    return m;
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
  if (job.empty()) throw std::runtime_error("GRIDBCAST_JOB_ID is not set");
  im.creds.job_id = std::stoull(job, nullptr, 16);
  im.creds.secret = runtime::from_hex(read_job_secret(secret_fallback));

  lanes::Hello hello;
  hello.rank = static_cast<std::uint32_t>(im.rank);
  hello.lane_from = hello.lane_to = lanes::kControlLane;
  const lanes::Credentials lc{im.creds.job_id, im.creds.secret};
  const auto launcher_ep = parse_host_port(launcher);
  im.control = runtime::run_until(im.io, [&]() -> asio::awaitable<std::unique_ptr<lanes::tcp::socket>> {
    // The control channel is plain TCP (docs/SECURITY.md says what that leaves open).
    auto stream = co_await lanes::connect_authenticated(
        "", launcher_ep, hello, lc, lanes::Clock::now() + std::chrono::seconds(60), "the launcher");
    co_return std::make_unique<lanes::tcp::socket>(std::move(stream).release_plain());
  }());

  const Message config = im.receive("config");
  im.grid = topology::load_grid_string(config.at(1), config.at(2));
  im.params = JobParams::from_fields(config.fields, 3);
  if (im.rank >= im.grid.size())
    throw std::runtime_error("rank " + std::to_string(im.rank) + " is outside the topology's " +
                             std::to_string(im.grid.size()) + " ranks");

  runtime::CommOptions options;
  options.timeout =
      im.params.timeout_ms > 0 ? std::chrono::milliseconds(im.params.timeout_ms) : runtime::kNoTimeout;
  options.segment_bytes = im.params.segment_bytes;
  options.thresholds = topology::SelectionThresholds::from_environment();
  options.cert_dir = im.params.cert_dir;  // empty: this rank's GRIDBCAST_CERT_DIR
  im.comm = std::make_unique<runtime::Communicator>(im.grid, im.rank, im.creds, options);
  const auto ports = im.comm->listen();
  send(make_message("endpoints", std::to_string(ports[0]), std::to_string(ports[1])).fields);

  const Message table_msg = im.receive("table");
  runtime::EndpointTable table(static_cast<size_t>(im.grid.size()));
  for (size_t i = 0; i < table.size(); ++i)
    for (size_t l = 0; l < runtime::kLanes; ++l)
      table[i][l] = static_cast<std::uint16_t>(std::stoul(table_msg.at(1 + i * runtime::kLanes + l)));
  im.comm->set_endpoints(std::move(table));
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

void Session::send(const std::vector<std::string>& fields) {
  if (!impl_->control) throw std::logic_error("Session::send() without a control channel");
  Message m;
  m.fields = fields;
  runtime::run_until(impl_->io, send_message(*impl_->control, m));
}

std::vector<std::string> Session::receive() {
  if (!impl_->control) throw std::logic_error("Session::receive() without a control channel");
  return runtime::run_until(impl_->io, receive_message(*impl_->control, "the launcher")).fields;
}

void Session::report_error(const std::string& what) noexcept {
  auto& im = *impl_;
  if (!im.control || !im.control->is_open()) return;
  try {
    runtime::run_until(im.io, send_message(*im.control, make_message("error", what)));
  } catch (...) {
    // The launcher is gone too; the exit status still tells.
  }
}

void Session::close() {
  if (impl_->control) {
    asio::error_code ignored;
    impl_->control->shutdown(lanes::tcp::socket::shutdown_send, ignored);
    impl_->control->close(ignored);
  }
}

}  // namespace gridbcast::job
