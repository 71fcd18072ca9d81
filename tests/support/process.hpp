// Runs a child process with its output captured in files, with a deadline.
// Tests kill only what they started, by PID.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gridbcast::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under /tmp; whoever calls it removes it (or use TempDir,
// support/temp_dir.hpp).
inline std::string temp_dir() {
  std::string tmpl = "/tmp/gridbcast-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

// The processes below `root` (children, their children, ...), from /proc.
inline std::vector<pid_t> descendants(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  if (DIR* d = ::opendir("/proc")) {
    while (auto* e = ::readdir(d)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
      const auto close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size()) continue;
      std::istringstream rest(stat.substr(close + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      parent_of.emplace_back(pid, ppid);
    }
    ::closedir(d);
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size() && out.size() < 256; ++i)
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == out[i]) out.push_back(pid);
  return out;
}

// What a hung process tree is doing, for a test's failure output: each
// process's command line, state and kernel wait channel, and, where gdb is
// installed, every thread's stack (bounded in time and size).
inline std::string describe_tree(pid_t root) {
  std::ostringstream out;
  const bool gdb = ::access("/usr/bin/gdb", X_OK) == 0;
  int described = 0;
  for (const pid_t pid : descendants(root)) {
    if (++described > 24) {
      out << "... more processes not described\n";
      break;
    }
    const std::string dir = "/proc/" + std::to_string(pid);
    std::string cmd = slurp(dir + "/cmdline");
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    const std::string stat = slurp(dir + "/stat");
    const auto close = stat.rfind(')');
    const char state =
        close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
    out << "--- pid " << pid << " [" << state << "] wchan " << slurp(dir + "/wchan") << ": "
        << cmd.substr(0, 300) << "\n";
    if (!gdb || state == 'Z') continue;
    const std::string command = "timeout 20 /usr/bin/gdb -nx -batch -p " + std::to_string(pid) +
                                " -ex 'thread apply all bt 16' 2>&1";
    if (FILE* f = ::popen(command.c_str(), "r")) {
      std::string text;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < 32768)
        text.append(buf, n);
      ::pclose(f);
      // Only the stack lines: gdb's banner and symbol-loading chatter say nothing.
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("Thread ", 0) == 0 || line.rfind("#", 0) == 0) out << "    " << line << "\n";
    }
  }
  return out.str();
}

// Its standard output and error go to DIR/stdout and DIR/stderr; without a
// DIR, to a temporary directory of its own, removed with it.
class Child {
 public:
  explicit Child(std::vector<std::string> argv, const std::string& dir = {})
      : owned_dir_(dir.empty() ? temp_dir() : std::string()),
        out_path_((dir.empty() ? owned_dir_ : dir) + "/stdout"),
        err_path_((dir.empty() ? owned_dir_ : dir) + "/stderr") {
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int in = ::open("/dev/null", O_RDONLY);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!owned_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(owned_dir_, ignored);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  // Exit status, or -1 if still running at the deadline (then the destructor
  // kills it); a hang is described on standard error first, so the test's
  // failure output says where each process of the tree was stuck.
  int wait(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::cerr << "still running after " << limit.count() << " ms: " << describe_tree(pid_);
    return -1;
  }
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }

 private:
  std::string owned_dir_;  // the temporary directory it made, or ""
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// Direct children of `parent`, with the value of one environment variable each.
inline std::vector<std::pair<pid_t, std::string>> children_of(pid_t parent,
                                                              const std::string& var) {
  std::vector<std::pair<pid_t, std::string>> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
    std::string value;
    const std::string key = var + "=";
    for (size_t pos = 0; pos < env.size();) {
      const size_t end = env.find('\0', pos);
      const std::string kv = env.substr(pos, end - pos);
      if (kv.rfind(key, 0) == 0) value = kv.substr(key.size());
      if (end == std::string::npos) break;
      pos = end + 1;
    }
    out.emplace_back(pid, value);
  }
  ::closedir(d);
  return out;
}

// The launcher `launcher`'s rank `rank` (its child with GRIDBCAST_RANK=rank),
// waited for up to 10 s (a child between fork and exec still has the
// launcher's environment); -1 if none showed.
inline pid_t rank_process(pid_t launcher, int rank) {
  const std::string want = std::to_string(rank);
  for (int i = 0; i < 200; ++i) {
    for (auto [pid, value] : children_of(launcher, "GRIDBCAST_RANK"))
      if (value == want) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

inline bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0;
}

// The IPv4 TCP ports process `pid` listens on, as (dotted address, port), from
// its socket descriptors and /proc/net/tcp.
inline std::vector<std::pair<std::string, int>> listening_ports(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      char target[64] = {};
      const std::string link = fd_dir + "/" + e->d_name;
      const auto n = ::readlink(link.c_str(), target, sizeof target - 1);
      const std::string t(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (t.rfind("socket:[", 0) == 0) inodes.push_back(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  std::vector<std::pair<std::string, int>> out;
  std::istringstream table(slurp("/proc/" + std::to_string(pid) + "/net/tcp"));
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "0A") continue;  // TCP_LISTEN
    bool ours = false;
    for (const auto& i : inodes) ours = ours || i == inode;
    if (!ours || local.size() != 13) continue;
    // "0101007F:1F90": the address in host (little-endian) order, then the port.
    const unsigned long addr = std::stoul(local.substr(0, 8), nullptr, 16);
    const std::string dotted =
        std::to_string(addr & 0xff) + "." + std::to_string((addr >> 8) & 0xff) + "." +
        std::to_string((addr >> 16) & 0xff) + "." + std::to_string((addr >> 24) & 0xff);
    out.emplace_back(dotted, static_cast<int>(std::stoul(local.substr(9), nullptr, 16)));
  }
  return out;
}

}  // namespace gridbcast::testing
