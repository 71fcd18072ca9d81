#include "testbed/system.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gridbcast::testbed {
namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::string find_tool(const char* name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input,
                          std::chrono::milliseconds limit) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/')
    throw TestbedError("internal: run_command needs an absolute path, got \"" +
                       (argv.empty() ? std::string() : argv[0]) + "\"");
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw TestbedError(errno_text("pipe"));
  if (::pipe2(out, O_CLOEXEC) != 0) throw TestbedError(errno_text("pipe"));
  if (::pipe2(err, O_CLOEXEC) != 0) throw TestbedError(errno_text("pipe"));
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  // A child that exits before reading all its input must not kill us with SIGPIPE.
  struct sigaction ignore {
  }, old_pipe{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::sigaction(SIGPIPE, &old_pipe, nullptr);
    throw TestbedError(errno_text("fork"));
  }
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execv(cargv[0], cargv.data());
    const char msg[] = "cannot execute the program\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  CommandResult r;
  size_t written = 0;
  int in_fd = in[1];
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  int out_fd = out[0], err_fd = err[0];
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  char buf[8192];
  while (out_fd >= 0 || err_fd >= 0 || in_fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}, {in_fd, POLLOUT, 0}};
    const int n = ::poll(fds, 3, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        (i == 0 ? out_fd : err_fd) = -1;
      }
    }
    if (fds[2].revents & (POLLOUT | POLLERR | POLLHUP)) {
      const ssize_t put = ::write(in_fd, input.data() + written, input.size() - written);
      if (put > 0) written += static_cast<size_t>(put);
      if ((put < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
  }
  for (int fd : {in_fd, out_fd, err_fd})
    if (fd >= 0) ::close(fd);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    r.status = -1;
  else
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string run_checked(const std::vector<std::string>& argv, const std::string& what,
                        const std::string& input) {
  const auto r = run_command(argv, input);
  if (!r.ok()) {
    throw TestbedError(
        what + ": `" + join(argv) + "` " +
        (r.status < 0 ? "timed out" : "failed (status " + std::to_string(r.status) + ")") +
        (r.err.empty() ? "" : ": " + trim(r.err)));
  }
  return r.out;
}

std::string ip_path() {
  return find_tool("ip");
}
std::string tc_path() {
  return find_tool("tc");
}
std::string ping_path() {
  return find_tool("ping");
}
std::string nft_path() {
  return find_tool("nft");
}

void check_prerequisites(bool need_tun) {
  if (::geteuid() != 0)
    throw TestbedError(
        "the testbed needs root (it creates network namespaces, interfaces and "
        "qdiscs); run it as root or with sudo");
  if (ip_path().empty())
    throw TestbedError(
        "the testbed needs the `ip` command (Debian package iproute2): apt-get install iproute2");
  if (tc_path().empty())
    throw TestbedError(
        "the testbed needs the `tc` command (Debian package iproute2): apt-get install iproute2");
  if (need_tun) {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
      throw TestbedError(
          errno_text("the delay line needs /dev/net/tun (TUN devices); cannot open it") +
          " (load the tun module, or in a container pass --device /dev/net/tun)");
    ::close(fd);
  }
  const auto r = run_command({ip_path(), "netns", "list"});
  if (!r.ok())
    throw TestbedError("network namespaces do not work here: `ip netns list` failed: " +
                       trim(r.err));
}

void run_batch(const std::string& tool, const std::string& ns,
               const std::vector<std::string>& lines, const std::string& what) {
  if (lines.empty()) return;
  const std::string exe = tool == "tc" ? tc_path() : ip_path();
  std::vector<std::string> argv = {exe};
  if (!ns.empty()) argv.insert(argv.end(), {"-n", ns});
  argv.insert(argv.end(), {"-batch", "-"});
  std::string input;
  for (const auto& l : lines) {
    // Every name in these lines was checked where it was made; this is the
    // last guard before root runs them: nothing iproute2's batch parser
    // treats specially (line ends, comments, quotes, escapes) may slip in.
    for (const char c : l)
      if (c < 0x20 || c >= 0x7f || c == '#' || c == '"' || c == '\'' || c == '\\')
        throw TestbedError(
            what + ": refusing to run `" + tool + " -batch` with a line holding " +
            (c < 0x20 || c >= 0x7f ? "a control character" : std::string("'") + c + "'") +
            " (line " + std::to_string(&l - lines.data() + 1) + ")");
    input += l + "\n";
  }
  const auto r = run_command(argv, input);
  if (r.ok()) return;
  // iproute2 reports "Command failed -:N": name the line.
  std::string failed;
  const auto at = r.err.find("Command failed -:");
  if (at != std::string::npos) {
    const size_t n = std::strtoul(r.err.c_str() + at + 17, nullptr, 10);
    if (n >= 1 && n <= lines.size()) failed = " at `" + tool + " " + lines[n - 1] + "`";
  }
  throw TestbedError(what + ": " + tool + (ns.empty() ? "" : " in namespace " + ns) + " failed" +
                     failed + ": " + trim(r.err));
}

bool netns_exists(const std::string& ns) {
  struct stat st {};
  return ::stat(("/run/netns/" + ns).c_str(), &st) == 0;
}

std::vector<std::string> netns_with_prefix(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix + "-", 0) == 0) out.push_back(name);
  }
  return out;
}

bool root_link_exists(const std::string& name) {
  std::error_code ec;
  return std::filesystem::exists("/sys/class/net/" + name, ec);
}

std::vector<std::string> root_links_with_prefix(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

void write_sysctls(const std::string& ns, const std::vector<Sysctl>& settings) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw TestbedError(errno_text("pipe"));
  const std::string ns_path = "/run/netns/" + ns;
  std::vector<std::string> paths;
  for (const auto& s : settings) paths.push_back("/proc/sys/" + s.path);
  const pid_t pid = ::fork();
  if (pid < 0) throw TestbedError(errno_text("fork"));
  if (pid == 0) {
    // Child: join the namespace, write, report the first failure on the pipe.
    ::close(fds[0]);
    auto fail = [&](const std::string& msg) {
      [[maybe_unused]] auto n = ::write(fds[1], msg.data(), msg.size());
      ::_exit(1);
    };
    const int nsfd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) fail(errno_text("cannot enter " + ns_path));
    for (size_t i = 0; i < settings.size(); ++i) {
      const int fd = ::open(paths[i].c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) {
        if (settings[i].optional && errno == ENOENT) continue;
        fail(errno_text("cannot open " + paths[i]));
      }
      const auto& v = settings[i].value;
      if (::write(fd, v.data(), v.size()) != static_cast<ssize_t>(v.size()))
        fail(errno_text("cannot write " + v + " to " + paths[i]));
      ::close(fd);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n > 0)
      msg.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw TestbedError("setting sysctls in namespace " + ns + ": " +
                       (msg.empty() ? "failed" : msg));
}

unsigned long long process_start_time(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  // Fields after the command: state is field 3; starttime is field 22.
  for (int i = 3; i < 22 && rest >> field; ++i) {
  }
  unsigned long long start = 0;
  rest >> start;
  return start;
}

namespace {
char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '\0' : stat[close + 2];
}
}  // namespace

bool process_alive(pid_t pid, unsigned long long start_time) {
  if (pid <= 0) return false;
  const char state = process_state(pid);
  if (state == '\0' || state == 'Z' || state == 'X') return false;
  return start_time == 0 || process_start_time(pid) == start_time;
}

std::string process_cmdline(pid_t pid) {
  std::string s = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : s)
    if (c == '\0') c = ' ';
  return trim(s);
}

std::vector<pid_t> processes_in_netns(const std::string& ns) {
  std::vector<pid_t> out;
  struct stat target {};
  if (::stat(("/run/netns/" + ns).c_str(), &target) != 0) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    struct stat st {};
    if (::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) != 0) continue;
    if (st.st_ino == target.st_ino && st.st_dev == target.st_dev) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

bool stop_process(pid_t pid, unsigned long long start_time, std::chrono::milliseconds grace) {
  if (!process_alive(pid, start_time)) {
    ::waitpid(pid, nullptr, WNOHANG);  // reap it if it is our zombie
    return false;
  }
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    ::waitpid(pid, nullptr, WNOHANG);
    if (!process_alive(pid, start_time)) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  for (int i = 0; i < 200 && process_alive(pid, start_time); ++i) {
    ::waitpid(pid, nullptr, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw TestbedError("cannot find this program's path (/proc/self/exe): " + ec.message());
  return p.string();
}

}  // namespace gridbcast::testbed
