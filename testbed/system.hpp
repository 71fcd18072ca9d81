// What the testbed asks of the system: running ip and tc (one batch per
// namespace), entering a namespace, checking prerequisites, and the processes
// it started. Every failure is a TestbedError naming the command and its output.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "testbed/layout.hpp"

namespace gridbcast::testbed {

struct CommandResult {
  int status = -1;  // exit status, 128 + signal, or -1 when it timed out
  std::string out, err;
  bool ok() const { return status == 0; }
};

// Runs argv[0] (an absolute path) with `input` on standard input; kills it at
// the deadline.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = {},
                          std::chrono::milliseconds limit = std::chrono::seconds(60));
// The same, throwing TestbedError("<what>: <command> failed: <stderr>") on failure.
std::string run_checked(const std::vector<std::string>& argv, const std::string& what,
                        const std::string& input = {});

// Absolute paths of ip and tc (/usr/sbin, /sbin, /usr/bin, /bin), or "" if missing.
std::string ip_path();
std::string tc_path();
std::string ping_path();
std::string nft_path();

// Root, ip, tc, /dev/net/tun and working network namespaces; throws with the fix.
void check_prerequisites(bool need_tun);

// Runs `ip [-n NS] -batch -` (tool "ip") or `tc [-n NS] -batch -` with the
// given lines; on failure names the line that failed. NS "" is the root namespace.
void run_batch(const std::string& tool, const std::string& ns,
               const std::vector<std::string>& lines, const std::string& what);

bool netns_exists(const std::string& ns);
std::vector<std::string> netns_with_prefix(const std::string& prefix);
bool root_link_exists(const std::string& name);
std::vector<std::string> root_links_with_prefix(const std::string& prefix);

// Writes /proc/sys files inside a namespace (in a forked child that joins it).
// Files that do not exist (e.g. IPv6 disabled) are skipped when `optional` is set.
struct Sysctl {
  std::string path;  // relative to /proc/sys, e.g. "net/ipv4/ip_forward"
  std::string value;
  bool optional = false;
};
void write_sysctls(const std::string& ns, const std::vector<Sysctl>& settings);

// A process: its start time (field 22 of /proc/PID/stat) guards against PID reuse.
unsigned long long process_start_time(pid_t pid);  // 0 if it does not exist
bool process_alive(pid_t pid, unsigned long long start_time);
std::string process_cmdline(pid_t pid);  // arguments joined by spaces
// PIDs of the processes inside network namespace `ns` (compared by inode).
std::vector<pid_t> processes_in_netns(const std::string& ns);
// Sends SIGTERM, waits up to `grace`, then SIGKILL; reaps it if it is our child.
// Returns false if it was not running (or no longer the same process).
bool stop_process(pid_t pid, unsigned long long start_time, std::chrono::milliseconds grace);

// This program's absolute path (/proc/self/exe).
std::string self_exe();

}  // namespace gridbcast::testbed
