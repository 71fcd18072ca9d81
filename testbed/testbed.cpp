#include "testbed/testbed.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>

#include "testbed/delay_line.hpp"
#include "testbed/system.hpp"
#include "topology/units.hpp"

namespace gridbcast::testbed {
namespace {

using namespace std::chrono_literals;

constexpr auto kDelayLineStartTimeout = 10s;
constexpr auto kStopGrace = 2s;
constexpr std::string_view kDelayLineTag = " testbed delayline";

}  // namespace

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string tail_of_file(const std::string& path, std::size_t max_bytes = 2000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return trim(s);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int choose_management_block(const std::string& prefix) {
  std::vector<Ipv4Net> used;
  const std::string out = run_checked({ip_path(), "-o", "-4", "addr", "show"},
                                      "listing the addresses of the root namespace");
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w == "inet" && words >> w)
        if (auto net = Ipv4Net::parse(w)) used.push_back(*net);
  }
  for (const auto& other : list_testbeds()) {
    if (other == prefix) continue;
    try {
      if (auto net = Ipv4Net::parse(load_state(state_dir(other)).mgmt_net)) used.push_back(*net);
    } catch (const TestbedError&) {
    }
  }
  const int first = preferred_management_block(prefix);
  for (int i = 0; i < kManagementBlocks; ++i) {
    const int b = (first + i) % kManagementBlocks;
    const Ipv4Net block = management_block(b);
    if (std::none_of(used.begin(), used.end(), [&](const Ipv4Net& u) { return u.overlaps(block); }))
      return b;
  }
  throw TestbedError("no free /" + std::to_string(kManagementBlockLength) +
                     " management block in " + std::string(kManagementRange) +
                     ": every block overlaps an address of the root namespace or another testbed");
}

bool leftovers_exist(const std::string& prefix) {
  return state_exists(state_dir(prefix)) || !netns_with_prefix(prefix).empty() ||
         !root_links_with_prefix(prefix).empty();
}

// Starts the delay line inside its router's namespace and waits until it says
// "ready" (it then owns its TUNs).
DelayLineProcess start_delay_line(const StartDelayLine& d) {
  std::vector<std::string> argv = d.argv;
  const std::string& log_path = d.log;
  const std::string ns_path = "/run/netns/" + d.ns;
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0)
    throw TestbedError(std::string("pipe: ") + std::strerror(errno));
  const int logfd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int nsfd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || nsfd < 0 || devnull < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {ready[0], ready[1], logfd, nsfd, devnull})
      if (fd >= 0) ::close(fd);
    throw TestbedError("starting the delay line of site \"" + d.site_name + "\": cannot open " +
                       log_path + ", " + ns_path + " or /dev/null: " + why);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {ready[0], ready[1], logfd, nsfd, devnull}) ::close(fd);
    throw TestbedError("starting the delay line of site \"" + d.site_name + "\": fork: " + why);
  }
  if (pid == 0) {
    // The daemon: its own session, inside the router namespace, output to its log.
    ::setsid();
    if (::setns(nsfd, CLONE_NEWNET) != 0 || ::chdir("/") != 0) ::_exit(126);
    ::dup2(devnull, 0);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);
    if (ready[1] == 3)
      ::fcntl(3, F_SETFD, 0);
    else
      ::dup2(ready[1], 3);
    ::close_range(4, ~0U, 0);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  ::close(logfd);
  ::close(nsfd);
  ::close(devnull);
  std::string msg;
  const auto deadline = std::chrono::steady_clock::now() + kDelayLineStartTimeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{ready[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    char buf[512];
    const ssize_t got = ::read(ready[0], buf, sizeof buf);
    if (got <= 0) break;
    msg.append(buf, static_cast<size_t>(got));
    if (msg.find('\n') != std::string::npos) break;
  }
  ::close(ready[0]);
  if (msg.rfind("ready", 0) == 0) return {d.site, pid, process_start_time(pid), log_path};
  stop_process(pid, 0, 1s);
  throw TestbedError("the delay line of site \"" + d.site_name + "\" did not start" +
                     (msg.empty()
                          ? " within " + std::to_string(kDelayLineStartTimeout.count()) + " s"
                          : ": " + trim(msg)) +
                     "; its log " + log_path + " says: " + tail_of_file(log_path));
}

bool healthy(const State& s, std::ostream* report) {
  bool ok = s.status == "up";
  for (const auto& ns : s.namespaces())
    if (!netns_exists(ns)) {
      ok = false;
      if (report) *report << "  missing namespace " << ns << "\n";
    }
  if (!root_link_exists(s.mgmt_bridge)) {
    ok = false;
    if (report) *report << "  missing management bridge " << s.mgmt_bridge << "\n";
  }
  for (const auto& d : s.delay_lines)
    if (!process_alive(d.pid, d.start_time)) {
      ok = false;
      if (report)
        *report << "  the delay line of site " << d.site << " (PID " << d.pid
                << ") is not running; see " << d.log << "\n";
    }
  return ok;
}

// The latency decision (ChooseLatency): --delay, and with auto whether netem
// works here; recorded in the state and said in the log.
Latency choose_latency(const ChooseLatency& c, State& s, const UpOptions& o, std::ostream& log) {
  Latency chosen = Latency::kNone;
  if (c.probe_ns.empty()) {
    s.delay_mode = "none";
  } else {
    std::string why;
    const bool netem = o.delay != DelayMode::kDelayLine && netem_available(c.probe_ns, &why);
    if (o.delay == DelayMode::kNetem && !netem)
      throw TestbedError("--delay netem: tc netem does not work on this kernel (" + why +
                         "); use --delay delayline or auto");
    chosen = netem ? Latency::kNetem : Latency::kDelayLine;
    s.delay_mode = std::string(latency_name(chosen));
    if (!netem) check_prerequisites(true);
    if (netem)
      log << "testbed: WAN latency and loss by tc netem\n";
    else
      log << "testbed: WAN latency and loss by the userspace delay line (gridbcast testbed "
             "delayline)"
          << (o.delay == DelayMode::kDelayLine ? ", as asked"
                                               : "; this kernel has no netem: " + why)
          << "\n";
  }
  save_state(s);
  return chosen;
}

// The runner: executes the script of build_script() step by step. The state
// already names every namespace and root-namespace interface (state_from_layout),
// so a failure anywhere leaves `down` enough to remove it all; the delay lines
// are recorded one by one as they start.
void build(const topology::Grid& grid, const Layout& l, State& s, const UpOptions& o,
           std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  ScriptOptions so;
  so.latency = Latency::kDelayLine;  // until ChooseLatency decides; nothing before it depends on it
  so.exe = o.exe.empty() ? self_exe() : o.exe;
  so.state_dir = s.dir;
  so.offload = o.offload;
  std::vector<Step> script = build_script(grid, l, so);
  for (size_t i = 0; i < script.size(); ++i) {
    const Step& step = script[i];
    if (const auto* b = std::get_if<Batch>(&step.action)) {
      run_batch(b->tool, b->ns, b->lines, step.what);
    } else if (const auto* sc = std::get_if<Sysctls>(&step.action)) {
      if (!sc->ns.empty()) {
        write_sysctls(sc->ns, sc->settings);
      } else {
        for (const auto& x : sc->settings)  // best effort, as documented on Sysctls
          if (std::ofstream f("/proc/sys/" + x.path); f) f << x.value;
      }
    } else if (const auto* c = std::get_if<ChooseLatency>(&step.action)) {
      so.latency = choose_latency(*c, s, o, log);
      script = build_script(grid, l, so);  // the same steps up to here; `step` is gone
    } else if (const auto* d = std::get_if<StartDelayLine>(&step.action)) {
      s.delay_lines.push_back(start_delay_line(*d));
      save_state(s);
    }
  }
  s.status = "up";
  save_state(s);
  size_t bridges = 0;
  for (const auto& r : l.routers) bridges += r.lanes.size();
  std::ostringstream took;
  took << std::fixed << std::setprecision(1) << seconds_since(t0);
  log << "testbed " << l.prefix << " is up (" << took.str() << " s): " << l.nodes.size()
      << " node namespaces, " << l.routers.size() << " site routers, " << bridges
      << " lane bridges, " << grid.wan.size() << (grid.wan.size() == 1 ? " WAN link" : " WAN links")
      << (s.delay_mode == "delayline"
              ? ", " + std::to_string(s.delay_lines.size()) + " delay-line processes"
              : "")
      << "; launcher address " << l.mgmt_gateway.str() << " on " << l.mgmt_bridge << "; state in "
      << s.dir << "\n";
}

std::atomic<pid_t> g_child{0};
void forward_signal(int sig) {
  const pid_t c = g_child.load();
  if (c > 0) ::kill(c, sig);
}

}  // namespace

DelayMode parse_delay_mode(const std::string& text) {
  if (text == "auto") return DelayMode::kAuto;
  if (text == "netem") return DelayMode::kNetem;
  if (text == "delayline") return DelayMode::kDelayLine;
  throw TestbedError("--delay must be auto, netem or delayline, got \"" + text + "\"");
}

bool netem_available(const std::string& ns, std::string* why_not) {
  const std::string ip = ip_path(), tc = tc_path();
  const auto made = run_command(
      {ip, "-n", ns, "link", "add", "gbnetem0", "type", "veth", "peer", "name", "gbnetem1"});
  if (!made.ok()) {
    if (why_not) *why_not = "cannot create a scratch veth: " + trim(made.err);
    return false;
  }
  const auto r = run_command(
      {tc, "-n", ns, "qdisc", "add", "dev", "gbnetem0", "root", "netem", "delay", "1ms"});
  run_command({ip, "-n", ns, "link", "del", "gbnetem0"});
  if (why_not) *why_not = r.ok() ? "" : "`tc qdisc add ... netem` says: " + trim(r.err);
  return r.ok();
}

State up(const topology::Grid& grid, const UpOptions& o, std::ostream& log) {
  check_prerequisites(o.delay == DelayMode::kDelayLine && !grid.wan.empty());
  const std::string prefix = testbed_prefix(grid.name, o.id);
  (void)plan_layout(grid, o.id, 0);  // reject what cannot be emulated before touching anything
  if (leftovers_exist(prefix)) {
    log << "testbed " << prefix << ": removing what an earlier run left\n";
    down(prefix, log);
  }
  const Layout l = plan_layout(grid, o.id, choose_management_block(prefix));
  State s = state_from_layout(l, o.topology_source);
  save_state(s);
  try {
    build(grid, l, s, o, log);
  } catch (const std::exception& e) {
    log << "testbed " << prefix << ": setting up failed; removing what was created\n";
    std::ostringstream quiet;
    try {
      down(prefix, quiet);
    } catch (const std::exception& e2) {
      log << "testbed " << prefix << ": cleaning up failed too: " << e2.what() << "\n";
    }
    throw TestbedError(e.what());
  }
  return s;
}

std::string dry_run(const topology::Grid& grid, const UpOptions& o) {
  const std::string prefix = testbed_prefix(grid.name, o.id);
  const int block = preferred_management_block(prefix);
  const Layout l = plan_layout(grid, o.id, block);
  ScriptOptions so;
  so.latency = o.delay == DelayMode::kNetem ? Latency::kNetem : Latency::kDelayLine;
  so.exe = o.exe.empty() ? self_exe() : o.exe;
  so.state_dir = state_dir(prefix);
  so.offload = o.offload;
  std::string out = "# gridbcast testbed up --dry-run: testbed " + prefix + " of topology \"" +
                    grid.name + "\"; management network " + l.mgmt_net.str() +
                    " if free (else the next free block)";
  if (!grid.wan.empty() && o.delay == DelayMode::kAuto)
    out += "; WAN latency shown with the delay line (up uses netem where the kernel has it)";
  return out + "\n" + format_script(build_script(grid, l, so));
}

bool down(const std::string& prefix, std::ostream& log) {
  const std::string dir = state_dir(prefix);
  std::optional<State> s;
  if (state_exists(dir)) {
    try {
      s = load_state(dir);
    } catch (const TestbedError& e) {
      log << "testbed " << prefix << ": " << e.what() << "; removing by name instead\n";
    }
  }
  int stopped = 0;
  if (s)
    for (const auto& d : s->delay_lines)
      if (process_alive(d.pid, d.start_time) &&
          process_cmdline(d.pid).find(kDelayLineTag) != std::string::npos &&
          stop_process(d.pid, d.start_time, kStopGrace))
        ++stopped;

  std::set<std::string> namespaces;
  if (s)
    for (const auto& ns : s->namespaces())
      if (netns_exists(ns)) namespaces.insert(ns);
  for (const auto& ns : netns_with_prefix(prefix)) namespaces.insert(ns);
  std::string input;
  for (const auto& ns : namespaces) {
    for (const pid_t pid : processes_in_netns(ns)) {
      const std::string cmd = process_cmdline(pid);
      if (cmd.find(kDelayLineTag) != std::string::npos) {
        // A delay line of ours whose PID never reached the state file.
        if (stop_process(pid, process_start_time(pid), kStopGrace)) ++stopped;
      } else {
        log << "testbed " << prefix << ": warning: process " << pid << " (" << cmd
            << ") still runs inside namespace " << ns
            << "; the testbed did not start it, so it is left alone, and the namespace lives on "
               "until it exits\n";
      }
    }
    input += "netns del " + ns + "\n";
  }
  if (!input.empty()) run_command({ip_path(), "-force", "-batch", "-"}, input);
  std::vector<std::string> still;
  for (const auto& ns : namespaces)
    if (netns_exists(ns)) still.push_back(ns);

  std::set<std::string> links;
  if (s)
    for (const auto& l : s->root_links)
      if (root_link_exists(l)) links.insert(l);
  for (const auto& l : root_links_with_prefix(prefix)) links.insert(l);
  for (const auto& l : links) {
    if (!root_link_exists(l)) continue;  // went with its namespace
    const auto r = run_command({ip_path(), "link", "del", l});
    if (!r.ok() && root_link_exists(l))
      still.push_back("interface " + l + " (" + trim(r.err) + ")");
  }
  std::error_code ec;
  const bool had_state = std::filesystem::exists(dir, ec);
  std::filesystem::remove_all(dir, ec);
  const bool found = had_state || !namespaces.empty() || !links.empty() || stopped > 0;
  if (found)
    log << "testbed " << prefix << " removed: " << namespaces.size() << " namespaces, "
        << links.size() << " root-namespace interfaces, " << stopped << " delay-line processes\n";
  if (!still.empty()) {
    std::string what;
    for (const auto& x : still) what += (what.empty() ? "" : ", ") + x;
    throw TestbedError("testbed " + prefix + ": could not remove " + what);
  }
  return found;
}

std::vector<std::string> list_testbeds() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_root(), ec))
    if (state_exists(e.path().string())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

int status(const std::string& prefix, std::ostream& out) {
  const std::string dir = state_dir(prefix);
  if (!state_exists(dir)) {
    const auto ns = netns_with_prefix(prefix);
    const auto links = root_links_with_prefix(prefix);
    if (ns.empty() && links.empty()) {
      out << "testbed " << prefix << " is not up (no state in " << dir << ")\n";
      return 1;
    }
    out << "testbed " << prefix << " has no state in " << dir << " but " << ns.size()
        << " namespaces and " << links.size()
        << " interfaces with its prefix exist; `gridbcast testbed down` removes them\n";
    return 3;
  }
  const State s = load_state(dir);
  out << "testbed " << s.prefix << ": topology \"" << s.topology_name << "\""
      << (s.id.empty() ? "" : ", id \"" + s.id + "\"") << ", " << s.status << "\n"
      << "  state:      " << s.dir << "\n"
      << "  source:     " << s.topology_source << "\n"
      << "  latency:    "
      << (s.delay_mode == "netem"       ? "tc netem"
          : s.delay_mode == "delayline" ? "userspace delay line"
                                        : "no WAN links")
      << "\n";
  for (const auto& d : s.delay_lines)
    out << "  delay line: site " << s.routers[static_cast<size_t>(d.site)] << ", PID " << d.pid
        << (process_alive(d.pid, d.start_time) ? " (running)" : " (NOT RUNNING)") << ", log "
        << d.log << "\n";
  out << "  management: bridge " << s.mgmt_bridge << ", " << s.mgmt_net << ", launcher address "
      << s.mgmt_gateway << "\n";
  for (const auto& r : s.routers)
    out << "  router      " << r << (netns_exists(r) ? "" : "  (MISSING)") << "\n";
  for (const auto& n : s.nodes) {
    out << "  rank " << std::setw(3) << n.rank << "    " << n.ns << "  mgmt " << n.mgmt_address;
    for (const auto& a : n.addresses) out << "  " << a;
    out << (netns_exists(n.ns) ? "" : "  (MISSING)") << "\n";
  }
  std::ostringstream problems;
  const bool ok = healthy(s, &problems);
  if (!ok) out << "problems:\n" << problems.str();
  return ok ? 0 : 3;
}

int run(const topology::Grid& grid, const UpOptions& o, bool keep,
        const std::vector<std::string>& command, std::ostream& log) {
  if (command.empty()) throw TestbedError("run: no command given (write it after --)");
  const std::string prefix = testbed_prefix(grid.name, o.id);
  const std::string dir = state_dir(prefix);
  bool brought_up = false;
  if (state_exists(dir) && healthy(load_state(dir), nullptr)) {
    log << "testbed: using the running testbed " << prefix << "\n";
  } else {
    up(grid, o, log);
    brought_up = true;
  }
  std::vector<std::string> argv = command;
  if (argv[0] == "gridbcast") argv[0] = o.exe.empty() ? self_exe() : o.exe;
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw TestbedError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setenv("GRIDBCAST_BACKEND", "netns", 1);
    ::setenv("GRIDBCAST_TESTBED", dir.c_str(), 1);
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "gridbcast testbed run: cannot execute %s: %s\n", cargv[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  g_child = pid;
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGHUP, &old_hup, nullptr);
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  if (brought_up && !keep) down(prefix, log);
  return code;
}

int exec_in_node(const topology::Grid& grid, const std::string& id, const std::string& node,
                 const std::vector<std::string>& command) {
  if (command.empty()) throw TestbedError("exec: no command given (write it after --)");
  const std::string prefix = testbed_prefix(grid.name, id);
  const std::string dir = state_dir(prefix);
  if (!state_exists(dir))
    throw TestbedError("testbed " + prefix + " is not up; run `gridbcast testbed up` first");
  const State s = load_state(dir);
  const auto it = std::find_if(s.nodes.begin(), s.nodes.end(),
                               [&](const NodeState& n) { return n.name == node; });
  if (it == s.nodes.end()) throw TestbedError("no node \"" + node + "\" in testbed " + prefix);
  std::vector<std::string> argv = {ip_path(), "netns", "exec", it->ns};
  argv.insert(argv.end(), command.begin(), command.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(cargv[0], cargv.data());
  throw TestbedError(std::string("cannot execute ") + argv[0] + ": " + std::strerror(errno));
}

namespace {

// The layout `up` built for a testbed that is up: the same topology and id,
// and the management block its state records.
Layout running_layout(const topology::Grid& grid, const std::string& id) {
  const std::string prefix = testbed_prefix(grid.name, id);
  const std::string dir = state_dir(prefix);
  if (!state_exists(dir))
    throw TestbedError("testbed " + prefix + " is not up; run `gridbcast testbed up` first");
  const State s = load_state(dir);
  if (s.status != "up")
    throw TestbedError("testbed " + prefix + " is not up (status \"" + s.status + "\")");
  // The layout `up` built: the same topology and id, and the management block
  // the state records.
  std::optional<Layout> l;
  for (int block = 0; block < kManagementBlocks && !l; ++block) {
    Layout candidate = plan_layout(grid, id, block);
    if (candidate.mgmt_net.str() == s.mgmt_net) l = std::move(candidate);
  }
  if (!l) throw TestbedError("testbed " + prefix + " was not built from this topology");
  return std::move(*l);
}

}  // namespace

std::string shape(const topology::Grid& grid, const std::string& id, const std::string& node,
                  const ShapeOptions& o) {
  if ((o.bandwidth_bps > 0) + o.down + o.up + o.reset != 1)
    throw TestbedError("shape: say one of --bandwidth RATE, --down, --up or --reset");
  const Layout l = running_layout(grid, id);
  const std::string& prefix = l.prefix;
  const auto it = std::find_if(l.nodes.begin(), l.nodes.end(),
                               [&](const NodePlan& n) { return n.name == node; });
  if (it == l.nodes.end()) throw TestbedError("no node \"" + node + "\" in testbed " + prefix);
  const NodePlan& n = *it;
  const std::string& router = l.routers.at(static_cast<size_t>(n.site)).ns;
  const std::string what = "shaping node \"" + n.name + "\"";
  std::vector<std::string> links;
  if (o.down || o.up || o.reset) {
    for (const auto& nic : n.nics)
      links.push_back("link set dev " + nic.port + (o.down ? " down" : " up"));
    run_batch("ip", router, links, what);
    if (o.down)
      return "node " + n.name + " cut off: the switch ports of its " +
             std::to_string(n.nics.size()) + " NIC(s) are down";
  }
  std::vector<std::string> node_lines, router_lines;
  std::string rates;
  for (const auto& nic : n.nics) {
    const double rate = o.reset ? nic.bandwidth_bps : o.bandwidth_bps;
    const NicShaping shaping = nic_shaping(l, n, nic, rate);
    node_lines.push_back("qdisc del dev " + nic.device + " root");
    node_lines.insert(node_lines.end(), shaping.node.begin(), shaping.node.end());
    router_lines.push_back("qdisc del dev " + nic.port + " root");
    router_lines.insert(router_lines.end(), shaping.router.begin(), shaping.router.end());
    rates +=
        (rates.empty() ? "" : ", ") + nic.address.str() + " " + topology::format_bandwidth(rate);
  }
  if (o.up) return "node " + n.name + " back: the switch ports of its NIC(s) are up";
  run_batch("tc", n.ns, node_lines, what);
  run_batch("tc", router, router_lines, what);
  return "node " + n.name + (o.reset ? " at its declared rates: " : " shaped: ") + rates;
}

std::string shape_wan(const topology::Grid& grid, const std::string& id, int link, bool down) {
  if (link < 0 || static_cast<size_t>(link) >= grid.wan.size())
    throw TestbedError("shape: no WAN link " + std::to_string(link));
  const Layout l = running_layout(grid, id);
  const std::string nft = nft_path();
  if (nft.empty())
    throw TestbedError("shape: cutting a WAN link needs nft (apt-get install -y nftables)");
  const auto& w = grid.wan[static_cast<size_t>(link)];
  const std::string name = grid.sites.at(static_cast<size_t>(w.site_a)).name + "–" +
                           grid.sites.at(static_cast<size_t>(w.site_b)).name;
  // At both ends, every packet forwarded into or out of the link's
  // interface is dropped (a table of its own, so --up removes exactly it).
  // Not `ip link set down`: that flushes the routes through it, which
  // `up` would not bring back.
  const std::string table = "gridbcast_cut_wan" + std::to_string(link);
  for (const int site : {w.site_a, w.site_b}) {
    const RouterPlan& r = l.routers.at(static_cast<size_t>(site));
    const auto end = std::find_if(r.wan.begin(), r.wan.end(),
                                  [&](const WanEndPlan& e) { return e.link == link; });
    if (end == r.wan.end())
      throw TestbedError("shape: WAN link " + name + " has no end in " + r.ns);
    const std::vector<std::string> exec = {ip_path(), "netns", "exec", r.ns, nft, "-f", "-"};
    // Deleting a table that is not there fails: made first, then deleted.
    std::string script = "table inet " + table + "\ndelete table inet " + table + "\n";
    if (down)
      script += "table inet " + table + " {\n  chain forward {\n    type filter hook forward " +
                "priority 0; policy accept;\n    iifname \"" + end->dev +
                "\" drop\n    oifname \"" + end->dev + "\" drop\n  }\n}\n";
    run_checked(exec, "cutting WAN link " + name, script);
  }
  return down ? "WAN link " + name + " cut: every packet across it vanishes, both ways"
              : "WAN link " + name + " back up";
}

NetnsLaunch make_netns_launch(const topology::Grid& grid, std::vector<std::string> command) {
  std::string dir;
  if (const char* d = std::getenv("GRIDBCAST_TESTBED"); d && *d) {
    dir = d;
  } else {
    const char* id = std::getenv("GRIDBCAST_TESTBED_ID");
    dir = state_dir(testbed_prefix(grid.name, id ? id : ""));
  }
  if (!state_exists(dir))
    throw TestbedError("--backend netns: no testbed state in " + dir +
                       "; start the testbed with `gridbcast testbed up TOPOLOGY` or run the launch "
                       "through `gridbcast testbed run TOPOLOGY -- gridbcast launch TOPOLOGY ...`");
  State s = load_state(dir);
  if (s.status != "up")
    throw TestbedError("--backend netns: testbed " + s.prefix + " is not up (status \"" + s.status +
                       "\")");
  // Each rank's node by name, with the same addresses: the whole topology the
  // testbed was built from, or part of it (a job healing around lost nodes
  // runs on the survivors).
  std::vector<std::string> ns;
  for (size_t r = 0; r < grid.nodes.size(); ++r) {
    const auto& want = grid.nodes[r];
    const auto have = std::find_if(s.nodes.begin(), s.nodes.end(),
                                   [&](const NodeState& n) { return n.name == want.name; });
    bool same = have != s.nodes.end() && want.nics.size() == have->addresses.size();
    for (size_t k = 0; same && k < want.nics.size(); ++k)
      same = want.nics[k].address == have->addresses[k];
    if (!same)
      throw TestbedError("--backend netns: rank " + std::to_string(r) + " is node \"" + want.name +
                         "\", which testbed " + s.prefix + " (topology \"" + s.topology_name +
                         "\") " +
                         (have == s.nodes.end() ? "does not have" : "has with other addresses") +
                         "; launch the topology the testbed was built from");
    ns.push_back(have->ns);
  }
  const std::string ip = ip_path();
  if (ip.empty()) throw TestbedError("--backend netns needs the `ip` command (iproute2)");
  NetnsLaunch out;
  out.state_dir = dir;
  out.listen_address = s.mgmt_gateway;
  out.backend = job::make_prefixed_backend(
      "netns",
      [ip, ns](int rank, const topology::Node&) {
        return std::vector<std::string>{ip, "netns", "exec", ns.at(static_cast<size_t>(rank))};
      },
      std::move(command));
  return out;
}

}  // namespace gridbcast::testbed
