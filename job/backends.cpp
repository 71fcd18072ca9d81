// Launcher backends: local fork/exec, ssh, external, prefixed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "job/backend.hpp"

extern char** environ;

namespace gridbcast::job {
namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

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

 protected:
  void spawn(int rank, const std::vector<std::string>& argv, const Env& env,
             const std::string& secret_hex, SecretVia via) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
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
      ::close(fds[0]);
      ::close(fds[1]);
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
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
      ::execvpe(cargv[0], cargv.data(), cenv.data());
      const std::string msg = exec_failed + std::strerror(errno) + "\n";
      [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // EACCES once the child has exec'd: it did it itself
    ::close(fds[0]);
    const std::string line = secret_hex + "\n";
    [[maybe_unused]] auto n = ::write(fds[1], line.data(), line.size());
    ::close(fds[1]);
    pids_[pid] = rank;
  }

  std::map<pid_t, int> pids_;
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
