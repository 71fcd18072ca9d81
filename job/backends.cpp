// Launcher backends: local fork/exec, ssh, external, prefixed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "job/backend.hpp"
#include "lanes/log.hpp"

extern char** environ;

namespace gridbcast::job {
namespace {

// write() to a pipe whose reader may be gone (a rank that exited at once):
// EPIPE instead of SIGPIPE killing the launcher. SIGPIPE is blocked in this
// thread for the call and a pending one consumed, so no other thread's
// disposition changes and the ranks inherit the default.
ssize_t write_without_sigpipe(int fd, const void* data, size_t size) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const ssize_t n = ::write(fd, data, size);
  const int saved = errno;
  if (n < 0 && errno == EPIPE) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &now) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved;
  return n;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

// Copies what ranks write into their pipes to the launcher's standard output
// and error, one whole line per write(), each with its rank's prefix; one
// thread polls every pipe.
class OutputRelay {
 public:
  explicit OutputRelay(bool timestamps) : timestamps_(timestamps) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    thread_ = std::thread([this] { run(); });
  }
  ~OutputRelay() {
    drain(std::chrono::seconds(2));
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake();
    thread_.join();
    for (const auto& s : incoming_) ::close(s.fd);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  // Takes `fd` (a pipe's read end); its lines go to `to` after `prefix`.
  void add(int fd, int to, std::string prefix) {
    {
      std::lock_guard lock(mu_);
      incoming_.push_back({fd, to, std::move(prefix), {}});
    }
    wake();
  }
  void drain(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    done_.wait_for(lock, limit, [&] { return open_ == 0 && incoming_.empty(); });
  }

 private:
  struct Stream {
    int fd;
    int to;
    std::string prefix;
    std::string pending;
  };

  void wake() {
    const char c = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
  }

  void emit(const Stream& s, std::string_view line) const {
    std::string out;
    if (timestamps_) out += lanes::log::utc_now();
    out += s.prefix;
    out += line;
    out += '\n';
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(s.to, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  // Whole lines of `s.pending`, and cuts of kMaxOutputLine; with `end`, the rest.
  void flush(Stream& s, bool end) const {
    size_t start = 0;
    for (;;) {
      const size_t nl = s.pending.find('\n', start);
      if (nl != std::string::npos && nl - start <= kMaxOutputLine) {
        emit(s, std::string_view(s.pending).substr(start, nl - start));
        start = nl + 1;
      } else if (s.pending.size() - start >= kMaxOutputLine) {
        emit(s, std::string_view(s.pending).substr(start, kMaxOutputLine));
        start += kMaxOutputLine;
      } else {
        break;
      }
    }
    s.pending.erase(0, start);
    if (end && !s.pending.empty()) {
      emit(s, s.pending);
      s.pending.clear();
    }
  }

  void run() {
    std::vector<Stream> streams;
    std::vector<char> buf(64 * 1024);
    for (;;) {
      {
        std::lock_guard lock(mu_);
        for (auto& s : incoming_) streams.push_back(std::move(s));
        incoming_.clear();
        open_ = streams.size();
        if (stop_) break;
      }
      done_.notify_all();
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
      for (const auto& s : streams) fds.push_back({s.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
      if (fds[0].revents) {
        char sink[64];
        while (::read(wake_[0], sink, sizeof sink) > 0) {
        }
      }
      std::vector<Stream> still;
      for (size_t i = 0; i < streams.size(); ++i) {
        Stream& s = streams[i];
        bool ended = false;
        if (fds[i + 1].revents) {
          const ssize_t n = ::read(s.fd, buf.data(), buf.size());
          if (n > 0) {
            s.pending.append(buf.data(), static_cast<size_t>(n));
            flush(s, false);
          } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            ended = true;
          }
        }
        if (ended) {
          flush(s, true);
          ::close(s.fd);
        } else {
          still.push_back(std::move(s));
        }
      }
      streams = std::move(still);
    }
    for (auto& s : streams) {
      flush(s, true);
      ::close(s.fd);
    }
    std::lock_guard lock(mu_);
    open_ = 0;
    done_.notify_all();
  }

  const bool timestamps_;
  int wake_[2] = {-1, -1};
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<Stream> incoming_;
  size_t open_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// How a started rank gets the job secret: an inherited pipe named by
// GRIDBCAST_SECRET_FD (local processes; standard input stays the program's), or
// its standard input (ssh, which forwards nothing else).
enum class SecretVia { kPipe, kStdin };

// Starts argv with env added to ours. The child dies with the launcher
// (PR_SET_PDEATHSIG), so no rank outlives it. Rank 0 keeps the launcher's
// standard input, as under mpiexec; the others read /dev/null.
class ProcessBackend : public Backend {
 public:
  std::vector<Exit> reap() override {
    std::vector<Exit> exits;
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = pids_.find(pid);
      if (it == pids_.end()) continue;
      exits.push_back({it->second, describe_status(status),
                       WIFEXITED(status) && WEXITSTATUS(status) == 0,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1});
      pids_.erase(it);
    }
    return exits;
  }
  int running() const override { return static_cast<int>(pids_.size()); }
  // Each rank leads its own process group (set in the child and here, so
  // neither order of fork's return races the other).
  void signal_all(int signo) override {
    for (const auto& [pid, rank] : pids_)
      if (::kill(-pid, signo) != 0) ::kill(pid, signo);
  }
  void set_output(OutputOptions options) override {
    tag_ = options.tag;
    if (options.tag || options.timestamps)
      relay_ = std::make_unique<OutputRelay>(options.timestamps);
  }
  void drain_output(std::chrono::milliseconds limit) override {
    if (relay_) relay_->drain(limit);
  }

 protected:
  void spawn(int rank, const std::vector<std::string>& argv, const Env& env,
             const std::string& secret_hex, SecretVia via) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    // Tagged output: the rank's standard output and error are pipes we read.
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    const auto close_all = [&] {
      for (int fd : {fds[0], fds[1], out[0], out[1], err[0], err[1]})
        if (fd >= 0) ::close(fd);
    };
    if (relay_ && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
      const int e = errno;
      close_all();
      throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
    }
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool overridden = false;
      for (const auto& [k, v] : env) overridden |= kv.rfind(k + "=", 0) == 0;
      // The secret only ever travels through the pipe.
      overridden |=
          kv.rfind("GRIDBCAST_SECRET=", 0) == 0 || kv.rfind("GRIDBCAST_SECRET_FD=", 0) == 0;
      if (!overridden) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    if (via == SecretVia::kPipe)
      env_strings.push_back("GRIDBCAST_SECRET_FD=" + std::to_string(fds[0]));
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    const std::string exec_failed =
        "gridbcast: cannot execute " + argv.at(0) + " for rank " + std::to_string(rank) + ": ";

    const pid_t parent = ::getpid();
    const bool stdin_is_terminal = ::isatty(0) == 1;
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      close_all();
      throw std::runtime_error(std::string("fork: ") + std::strerror(e));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      // Nothing of the launcher's crosses exec but the standard streams and the
      // secret pipe (re-enabled below): not its control listener, not other
      // ranks' pipes. Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: mark by hand.
      if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      if (via == SecretVia::kStdin) {
        ::dup2(fds[0], 0);
      } else {
        ::fcntl(fds[0], F_SETFD, 0);  // inherited across exec
        // In a process group of its own a rank reading the terminal would be
        // stopped (SIGTTIN): rank 0 keeps standard input only when it is a
        // file or a pipe.
        if (rank != 0 || stdin_is_terminal) {
          const int null = ::open("/dev/null", O_RDONLY);
          if (null >= 0 && null != 0) {
            ::dup2(null, 0);
            ::close(null);
          }
        }
      }
      if (out[1] >= 0) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
      }
      ::execvpe(cargv[0], cargv.data(), cenv.data());
      const std::string msg = exec_failed + std::strerror(errno) + "\n";
      [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // EACCES once the child has exec'd: it did it itself
    ::close(fds[0]);
    if (relay_) {
      ::close(out[1]);
      ::close(err[1]);
      const std::string prefix = tag_ ? "[rank " + std::to_string(rank) + "] " : std::string();
      relay_->add(out[0], 1, prefix);
      relay_->add(err[0], 2, prefix);
    }
    const std::string line = secret_hex + "\n";
    // A rank that exited at once (not a gridbcast program) closed its end:
    // its exit status says so, not a SIGPIPE of the launcher.
    [[maybe_unused]] auto n = write_without_sigpipe(fds[1], line.data(), line.size());
    ::close(fds[1]);
    pids_[pid] = rank;
  }

  std::map<pid_t, int> pids_;
  std::unique_ptr<OutputRelay> relay_;  // with tagged or timestamped output
  bool tag_ = false;
};

class LocalBackend : public ProcessBackend {
 public:
  explicit LocalBackend(std::vector<std::string> command) : command_(std::move(command)) {}
  std::string name() const override { return "local"; }
  void start(int rank, const topology::Node&, const Env& env, const std::string& secret) override {
    spawn(rank, command_, env, secret, SecretVia::kPipe);
  }

 private:
  std::vector<std::string> command_;
};

class PrefixedBackend : public ProcessBackend {
 public:
  PrefixedBackend(std::string name, CommandPrefix prefix, std::vector<std::string> command)
      : name_(std::move(name)), prefix_(std::move(prefix)), command_(std::move(command)) {}
  std::string name() const override { return name_; }
  void start(int rank, const topology::Node& node, const Env& env,
             const std::string& secret) override {
    std::vector<std::string> argv = prefix_(rank, node);
    argv.insert(argv.end(), command_.begin(), command_.end());
    spawn(rank, argv, env, secret, SecretVia::kPipe);
  }

 private:
  std::string name_;
  CommandPrefix prefix_;
  std::vector<std::string> command_;
};

class SshBackend : public ProcessBackend {
 public:
  SshBackend(std::string ssh, std::vector<std::string> command) : command_(std::move(command)) {
    std::istringstream in(ssh);
    for (std::string w; in >> w;) ssh_.push_back(w);
    if (ssh_.empty()) throw std::invalid_argument("empty ssh command");
    if (ssh_[0].find('/') == std::string::npos) ssh_[0] = "/usr/bin/" + ssh_[0];
  }
  std::string name() const override { return "ssh"; }
  void start(int rank, const topology::Node& node, const Env& env,
             const std::string& secret) override {
    const std::string host = node.host.empty() ? node.name : node.host;
    // ssh reads a word starting with '-' as an option, wherever it stands
    // before the host (e.g. -oProxyCommand=... runs a local command).
    if (host.empty() || host[0] == '-' ||
        host.find_first_of(" \t\r\n'\"\\;&|`$") != std::string::npos)
      throw std::runtime_error("rank " + std::to_string(rank) + " (" + node.name + "): host \"" +
                               host + "\" is not a host name ssh can be given");
    std::vector<std::string> argv = ssh_;
    argv.push_back("--");
    argv.push_back(host);
    // ssh joins its arguments with spaces for the remote shell: one string,
    // every word quoted, so arguments reach the program as they were given.
    std::string remote = "exec env";
    for (const auto& [k, v] : env) remote += " " + shell_quote(k + "=" + v);
    for (const auto& a : command_) remote += " " + shell_quote(a);
    argv.push_back(remote);
    spawn(rank, argv, {}, secret, SecretVia::kStdin);
  }

 private:
  std::vector<std::string> ssh_;
  std::vector<std::string> command_;
};

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

class SrunBackend : public ProcessBackend {
 public:
  SrunBackend(std::string srun, std::vector<std::string> command)
      : srun_(split_words(srun)), command_(std::move(command)) {
    if (srun_.empty()) throw std::invalid_argument("empty srun command");
  }
  std::string name() const override { return "srun"; }
  void start(int rank, const topology::Node& node, const Env& env,
             const std::string& secret) override {
    spawn(rank, srun_argv(srun_, rank, node, env, command_), {}, secret, SecretVia::kStdin);
  }

 private:
  std::vector<std::string> srun_;
  std::vector<std::string> command_;
};

class ExternalBackend : public Backend {
 public:
  std::string name() const override { return "external"; }
  void start(int, const topology::Node&, const Env&, const std::string&) override {}
  std::vector<Exit> reap() override { return {}; }
  int running() const override { return 0; }
  void signal_all(int) override {}
  bool external() const override { return true; }
};

}  // namespace

std::vector<std::string> srun_argv(const std::vector<std::string>& srun, int rank,
                                   const topology::Node& node, const Backend::Env& env,
                                   const std::vector<std::string>& command) {
  const std::string host = node.host.empty() ? node.name : node.host;
  if (host.empty() || host[0] == '-' || host.find_first_of(",[] \t\r\n=") != std::string::npos)
    throw std::runtime_error("rank " + std::to_string(rank) + " (" + node.name + "): node \"" +
                             host + "\" is not a node name srun can be given");
  std::vector<std::string> argv = srun;
  for (const char* a : {"--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1"}) argv.push_back(a);
  argv.push_back("--nodelist=" + host);
  argv.push_back("--job-name=gridbcast-rank-" + std::to_string(rank));
  // env(1) sets GRIDBCAST_* whatever --export the allocation was made with.
  argv.push_back("/usr/bin/env");
  for (const auto& [k, v] : env) argv.push_back(k + "=" + v);
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::string shell_quote(const std::string& word) {
  std::string q = "'";
  for (const char c : word) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::unique_ptr<Backend> make_local_backend(std::string exe) {
  return make_local_backend(std::vector<std::string>{std::move(exe), "rank"});
}
std::unique_ptr<Backend> make_local_backend(std::vector<std::string> command) {
  return std::make_unique<LocalBackend>(std::move(command));
}
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command, std::string exe) {
  return make_ssh_backend(std::move(ssh_command), std::vector<std::string>{std::move(exe), "rank"});
}
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command,
                                          std::vector<std::string> command) {
  return std::make_unique<SshBackend>(std::move(ssh_command), std::move(command));
}
std::unique_ptr<Backend> make_srun_backend(std::string srun_command,
                                           std::vector<std::string> command) {
  return std::make_unique<SrunBackend>(std::move(srun_command), std::move(command));
}
std::unique_ptr<Backend> make_external_backend() {
  return std::make_unique<ExternalBackend>();
}
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::string exe) {
  return make_prefixed_backend(std::move(name), std::move(prefix),
                               std::vector<std::string>{std::move(exe), "rank"});
}
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::vector<std::string> command) {
  return std::make_unique<PrefixedBackend>(std::move(name), std::move(prefix), std::move(command));
}

void Backend::set_output(OutputOptions options) {
  if (options.tag || options.timestamps)
    throw std::invalid_argument("the " + name() +
                                " backend's ranks were started by someone else: their output is "
                                "not the launcher's to tag");
}

std::string route_source(const std::string& destination) {
  sockaddr_storage to{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&to);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&to);
  if (::inet_pton(AF_INET, destination.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);
    len = sizeof *v4;
  } else if (::inet_pton(AF_INET6, destination.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    len = sizeof *v6;
  } else {
    throw std::runtime_error(destination + " is not an IPv4 or IPv6 address");
  }
  // A UDP "connect" sends nothing: it only asks the kernel for the route.
  const int fd = ::socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_storage from{};
  socklen_t from_len = sizeof from;
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error("no route to " + destination + ": " + std::strerror(err));
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      from.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&from)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr);
  ::inet_ntop(from.ss_family, addr, text, sizeof text);
  return text;
}

std::string reachable_listen_address(const topology::Grid& grid,
                                     const std::function<std::string(const std::string&)>& route,
                                     std::string* note) {
  const auto loopback = [](const std::string& a) { return a.rfind("127.", 0) == 0 || a == "::1"; };
  std::string chosen, first_node;
  std::vector<std::string> others;
  for (const auto& node : grid.nodes) {
    for (const auto& nic : node.nics) {
      if (loopback(nic.address)) continue;
      const std::string from = route(nic.address);
      if (chosen.empty()) {
        chosen = from;
        first_node = node.name;
      } else if (from != chosen && others.size() < 4) {
        others.push_back(node.name + " (" + nic.address + ", from " + from + ")");
      }
      break;  // a node's first NIC that is not loopback
    }
  }
  if (chosen.empty()) return "127.0.0.1";
  if (note && !others.empty()) {
    *note = "the launcher listens on " + chosen + " (the route to " + first_node +
            "); this host reaches other nodes from other addresses:";
    for (const auto& o : others) *note += " " + o;
    *note += "; give --listen if they cannot reach " + chosen;
  }
  return chosen;
}

}  // namespace gridbcast::job
