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
constexpr int kLaneRulePref = 1000;  // + lane index: iif laneK -> delay table
constexpr int kWanRulePref = 2000;   // + WAN end index: iif wanI -> delay table
constexpr std::size_t kMinDelayBuffer = 4u << 20;
constexpr std::size_t kMaxDelayBuffer = 256u << 20;

std::string num(double v) {
  return std::to_string(std::llround(v));
}

// One HTB class line. Burst: 1 ms at the rate, but at least one GSO packet
// (64 KiB) so big segments do not stall the class.
std::string htb_class(const std::string& dev, const std::string& parent, const std::string& id,
                      double rate_bps, double ceil_bps, long long quantum) {
  const long long burst = std::max<long long>(std::llround(ceil_bps / 8 / 1000), 70000);
  return "class add dev " + dev + " parent " + parent + " classid " + id + " htb rate " +
         num(rate_bps) + "bit ceil " + num(ceil_bps) + "bit burst " + std::to_string(burst) +
         " cburst " + std::to_string(burst) + " quantum " + std::to_string(quantum);
}

// HTB with one class at `rate_bps` and `leaf` below it: shapes egress of `dev`.
std::vector<std::string> htb(const std::string& dev, double rate_bps, const std::string& leaf) {
  const long long quantum = std::clamp<long long>(std::llround(rate_bps / 80), 1514, 200000);
  return {"qdisc add dev " + dev + " root handle 1: htb default 1",
          htb_class(dev, "1:", "1:1", rate_bps, rate_bps, quantum),
          "qdisc add dev " + dev + " parent 1:1 handle 10: " + leaf};
}

}  // namespace

std::string bfifo(double rate_bps, double seconds) {
  return "bfifo limit " + num(std::max(rate_bps / 8 * seconds, 131072.0));
}

std::vector<std::string> fair_htb(const std::string& dev, double rate_bps, std::string_view key,
                                  const std::vector<Ipv4>& peers) {
  const bool per_peer = peers.size() <= kFairPeers;
  const size_t children = 1 + (per_peer ? peers.size() : kFairBuckets);
  const double child_rate = std::max(rate_bps / static_cast<double>(children), 8000.0);
  std::vector<std::string> lines = {"qdisc add dev " + dev + " root handle 1: htb default 2",
                                    htb_class(dev, "1:", "1:1", rate_bps, rate_bps, 200000)};
  auto child = [&](unsigned minor) {
    char id[16];
    std::snprintf(id, sizeof id, "1:%x", minor);
    lines.push_back(htb_class(dev, "1:1", id, child_rate, rate_bps, 65536));
    lines.push_back("qdisc add dev " + dev + " parent " + id + " " + bfifo(rate_bps, 0.01));
    return std::string(id);
  };
  child(2);
  const std::string filter_prio = "filter add dev " + dev + " parent 1: protocol ip prio 1 ";
  const std::string filter = filter_prio + "u32 ";
  if (per_peer) {
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string id = child(0x100 + static_cast<unsigned>(i));
      lines.push_back(filter + "match ip " + std::string(key) + " " + peers[i].str() +
                      "/32 flowid " + id);
    }
  } else {
    lines.push_back(filter_prio + "handle 2: u32 divisor " + std::to_string(kFairBuckets));
    lines.push_back(filter +
                    "ht 800:: match ip protocol 6 0xff hashkey mask 0x003e0000 at 20 link 2:");
    for (int b = 0; b < kFairBuckets; ++b) {
      const std::string id = child(0x100 + static_cast<unsigned>(b));
      char bucket[16];
      std::snprintf(bucket, sizeof bucket, "2:%x:", b);
      lines.push_back(filter + "ht " + bucket + " match u32 0 0 flowid " + id);
    }
  }
  return lines;
}

namespace {

std::string loss_percent(double loss) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g%%", loss * 100);
  return buf;
}

std::string netem_leaf(const WanEndPlan& w) {
  const double packets = w.bandwidth_bps / 8 * (w.latency_s + 0.05) / 1500 * 1.5;
  std::string leaf = "netem delay " + num(w.latency_s * 1e6) + "us";
  if (w.loss > 0) leaf += " loss " + loss_percent(w.loss);
  return leaf + " limit " + num(std::max(1000.0, packets));
}

std::size_t delay_buffer_bytes(const RouterPlan& r, const WanEndPlan& w) {
  const double bytes = r.ingress_bps / 8 * w.latency_s * 1.5 + static_cast<double>(kMinDelayBuffer);
  return static_cast<std::size_t>(std::clamp(bytes, static_cast<double>(kMinDelayBuffer),
                                             static_cast<double>(kMaxDelayBuffer)));
}

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

DelayLineProcess spawn_delay_line(const RouterPlan& r, const std::string& dir,
                                  const std::string& exe, bool offload) {
  std::vector<std::string> argv = {exe, "testbed", "delayline", "--ready-fd", "3"};
  for (const auto& w : r.wan) {
    DelayLinkConfig c;
    c.tun = w.tun;
    c.delay_s = w.latency_s;
    c.loss = w.loss;
    c.offload = offload && w.loss == 0;  // loss must hit single segments, not 64 KiB bursts
    c.buffer_bytes = delay_buffer_bytes(r, w);
    argv.push_back("--link");
    argv.push_back(format_delay_link(c));
  }
  const std::string log_path = dir + "/delayline-" + sanitize_name(r.name) + ".log";
  const std::string ns_path = "/run/netns/" + r.ns;
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
    throw TestbedError("starting the delay line of site \"" + r.name + "\": cannot open " +
                       log_path + ", " + ns_path + " or /dev/null: " + why);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {ready[0], ready[1], logfd, nsfd, devnull}) ::close(fd);
    throw TestbedError("starting the delay line of site \"" + r.name + "\": fork: " + why);
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
  if (msg.rfind("ready", 0) == 0) return {r.site, pid, process_start_time(pid), log_path};
  stop_process(pid, 0, 1s);
  throw TestbedError("the delay line of site \"" + r.name + "\" did not start" +
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

void build(const topology::Grid& grid, const Layout& l, State& s, const UpOptions& o,
           std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  // 1. Namespaces, with sysctls set before any interface exists.
  std::vector<std::string> lines;
  for (const auto& ns : s.namespaces()) lines.push_back("netns add " + ns);
  run_batch("ip", "", lines, "creating the namespaces");
  const std::vector<Sysctl> common = {{"net/ipv6/conf/all/disable_ipv6", "1", true},
                                      {"net/ipv6/conf/default/disable_ipv6", "1", true},
                                      {"net/ipv4/conf/all/rp_filter", "0"},
                                      {"net/ipv4/conf/default/rp_filter", "0"}};
  std::vector<Sysctl> router = common;
  router.insert(router.end(), {{"net/ipv4/ip_forward", "1"},
                               {"net/ipv4/conf/all/send_redirects", "0"},
                               {"net/ipv4/conf/default/send_redirects", "0"}});
  for (const auto& r : l.routers) write_sysctls(r.ns, router);
  for (const auto& n : l.nodes) write_sysctls(n.ns, common);

  // 2. How latency is emulated.
  bool use_netem = false;
  if (grid.wan.empty()) {
    s.delay_mode = "none";
  } else {
    std::string why;
    const bool netem = o.delay != DelayMode::kDelayLine && netem_available(l.routers[0].ns, &why);
    if (o.delay == DelayMode::kNetem && !netem)
      throw TestbedError("--delay netem: tc netem does not work on this kernel (" + why +
                         "); use --delay delayline or auto");
    use_netem = netem;
    s.delay_mode = use_netem ? "netem" : "delayline";
    if (!use_netem) check_prerequisites(true);
    if (use_netem)
      log << "testbed: WAN latency and loss by tc netem\n";
    else
      log << "testbed: WAN latency and loss by the userspace delay line (gridbcast testbed "
             "delayline)"
          << (o.delay == DelayMode::kDelayLine ? ", as asked"
                                               : "; this kernel has no netem: " + why)
          << "\n";
  }
  save_state(s);

  // 3. Routers: bridges (one per lane) and the WAN veth pairs.
  for (const auto& r : l.routers) {
    lines = {"link set lo up"};
    for (const auto& lane : r.lanes) lines.push_back("link add " + lane.bridge + " type bridge");
    for (const auto& w : r.wan)
      if (r.site < w.peer_site)
        lines.push_back("link add " + w.dev + " type veth peer name " + w.dev + " netns " +
                        l.routers[static_cast<size_t>(w.peer_site)].ns);
    run_batch("ip", r.ns, lines, "setting up the router of site \"" + r.name + "\"");
  }
  // 4. Nodes: one veth per NIC, its peer in the router namespace.
  for (const auto& n : l.nodes) {
    lines = {"link set lo up"};
    for (const auto& nic : n.nics) {
      lines.push_back("link add " + nic.device + " type veth peer name " + nic.port + " netns " +
                      l.routers[static_cast<size_t>(n.site)].ns);
      lines.push_back("addr add " + nic.address.str() + "/" + std::to_string(nic.subnet.length) +
                      " dev " + nic.device);
      lines.push_back("link set " + nic.device + " up");
    }
    run_batch("ip", n.ns, lines, "setting up node \"" + n.name + "\"");
  }
  // 5. Management: a bridge in the root namespace, one veth per node.
  lines = {"link add " + l.mgmt_bridge + " type bridge"};
  for (const auto& n : l.nodes) {
    lines.push_back("link add " + n.mgmt_peer + " type veth peer name " +
                    std::string(kManagementDevice) + " netns " + n.ns);
    lines.push_back("link set " + n.mgmt_peer + " master " + l.mgmt_bridge);
  }
  run_batch("ip", "", lines, "creating the management network");
  for (const auto& dev : s.root_links) {
    const std::string p = "/proc/sys/net/ipv6/conf/" + dev + "/disable_ipv6";
    if (std::ofstream f(p); f) f << "1";  // quiet links: no IPv6 link-local traffic
  }
  lines = {"addr add " + l.mgmt_gateway.str() + "/" + std::to_string(l.mgmt_net.length) + " dev " +
               l.mgmt_bridge,
           "link set " + l.mgmt_bridge + " up"};
  for (const auto& n : l.nodes) lines.push_back("link set " + n.mgmt_peer + " up");
  run_batch("ip", "", lines, "configuring the management network");

  // 6. Routers: ports, gateway addresses, WAN addresses and routes, delay lines' TUNs.
  for (const auto& r : l.routers) {
    lines.clear();
    for (const auto& n : l.nodes)
      if (n.site == r.site)
        for (const auto& nic : n.nics) {
          lines.push_back("link set " + nic.port + " master " + nic.bridge);
          lines.push_back("link set " + nic.port + " up");
        }
    for (const auto& lane : r.lanes) {
      lines.push_back("addr add " + lane.gateway.str() + "/" + std::to_string(lane.subnet.length) +
                      " dev " + lane.bridge);
      lines.push_back("link set " + lane.bridge + " up");
    }
    for (const auto& w : r.wan) {
      lines.push_back("addr add " + w.address.str() + "/30 dev " + w.dev);
      lines.push_back("link set " + w.dev + " up");
    }
    for (const auto& rt : r.routes) {
      const auto& w = r.wan[static_cast<size_t>(rt.wan)];
      lines.push_back("route add " + rt.destination.str() + " via " + w.peer_address.str() +
                      " dev " + w.dev);
    }
    if (!use_netem && !r.wan.empty()) {
      const std::string table = std::to_string(kDelayTable);
      for (const auto& w : r.wan) {
        lines.push_back("tuntap add dev " + w.tun + " mode tun");
        lines.push_back("link set dev " + w.tun + " txqueuelen 10000");
        lines.push_back("link set " + w.tun + " up");
      }
      for (const auto& rt : r.routes)
        lines.push_back("route add " + rt.destination.str() + " dev " +
                        r.wan[static_cast<size_t>(rt.wan)].tun + " table " + table);
      // Packets from the lanes and from other WAN links go through the delay
      // line; packets coming out of it (iif dly*) use the main table: no loop.
      for (size_t i = 0; i < r.lanes.size(); ++i)
        lines.push_back("rule add iif " + r.lanes[i].bridge + " lookup " + table + " pref " +
                        std::to_string(kLaneRulePref + static_cast<int>(i)));
      for (size_t i = 0; i < r.wan.size(); ++i)
        lines.push_back("rule add iif " + r.wan[i].dev + " lookup " + table + " pref " +
                        std::to_string(kWanRulePref + static_cast<int>(i)));
    }
    run_batch("ip", r.ns, lines, "configuring the router of site \"" + r.name + "\"");
  }
  // 7. Nodes: management address, per-lane source routing, routes to every lane subnet.
  std::vector<LanePlan> all_lanes;
  for (const auto& r : l.routers) all_lanes.insert(all_lanes.end(), r.lanes.begin(), r.lanes.end());
  for (const auto& n : l.nodes) {
    lines = {"addr add " + n.mgmt_address.str() + "/" + std::to_string(l.mgmt_net.length) +
                 " dev " + std::string(kManagementDevice),
             "link set " + std::string(kManagementDevice) + " up"};
    for (const auto& nic : n.nics) {
      const std::string table = std::to_string(kLaneTableBase + nic.nic);
      lines.push_back("rule add from " + nic.address.str() + " lookup " + table + " pref " + table);
      lines.push_back("route add " + nic.subnet.str() + " dev " + nic.device + " src " +
                      nic.address.str() + " table " + table);
      lines.push_back("route add default via " + nic.gateway.str() + " dev " + nic.device +
                      " src " + nic.address.str() + " table " + table);
    }
    const auto& first = n.nics.front();
    lines.push_back("route add default via " + first.gateway.str() + " dev " + first.device);
    for (const auto& lane : all_lanes) {
      const bool own = std::any_of(n.nics.begin(), n.nics.end(),
                                   [&](const NicPlan& nic) { return nic.subnet == lane.subnet; });
      if (own || lane.nic >= static_cast<int>(n.nics.size())) continue;
      const auto& nic = n.nics[static_cast<size_t>(lane.nic)];
      lines.push_back("route add " + lane.subnet.str() + " via " + nic.gateway.str() + " dev " +
                      nic.device);
    }
    run_batch("ip", n.ns, lines, "configuring node \"" + n.name + "\"");
  }
  // 8. Shaping: HTB on both ends of every NIC, fair among its flows, and on
  // every WAN end (a router's FIFO).
  // The NIC addresses of every node but one: the peers whose flows a NIC shares.
  auto peers_of = [&](const NodePlan& n) {
    std::vector<Ipv4> peers;
    for (const auto& m : l.nodes)
      if (m.rank != n.rank)
        for (const auto& nic : m.nics) peers.push_back(nic.address);
    return peers;
  };
  for (const auto& n : l.nodes) {
    lines.clear();
    const auto peers = peers_of(n);
    for (const auto& nic : n.nics) {
      auto q = fair_htb(nic.device, nic.bandwidth_bps, "dst", peers);
      lines.insert(lines.end(), q.begin(), q.end());
    }
    run_batch("tc", n.ns, lines, "shaping the NICs of node \"" + n.name + "\"");
  }
  for (const auto& r : l.routers) {
    lines.clear();
    for (const auto& n : l.nodes)
      if (n.site == r.site) {
        const auto peers = peers_of(n);
        for (const auto& nic : n.nics) {
          auto q = fair_htb(nic.port, nic.bandwidth_bps, "src", peers);
          lines.insert(lines.end(), q.begin(), q.end());
        }
      }
    for (const auto& w : r.wan) {
      const std::string leaf =
          use_netem ? netem_leaf(w) : bfifo(w.bandwidth_bps, std::max(2 * w.latency_s, 0.01));
      auto q = htb(w.dev, w.bandwidth_bps, leaf);
      lines.insert(lines.end(), q.begin(), q.end());
    }
    run_batch("tc", r.ns, lines, "shaping the links of site \"" + r.name + "\"");
  }
  // 9. The delay lines, one process per router.
  if (!use_netem) {
    const std::string exe = o.exe.empty() ? self_exe() : o.exe;
    for (const auto& r : l.routers) {
      if (r.wan.empty()) continue;
      s.delay_lines.push_back(spawn_delay_line(r, s.dir, exe, o.offload));
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

NetnsLaunch make_netns_launch(const topology::Grid& grid, const std::string& exe) {
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
  if (s.nodes.size() != grid.nodes.size())
    throw TestbedError("--backend netns: testbed " + s.prefix + " was built from topology \"" +
                       s.topology_name + "\" with " + std::to_string(s.nodes.size()) +
                       " nodes, but this launch has " + std::to_string(grid.nodes.size()));
  for (size_t r = 0; r < grid.nodes.size(); ++r) {
    const auto& want = grid.nodes[r];
    const auto& have = s.nodes[r];
    bool same = want.name == have.name && want.nics.size() == have.addresses.size();
    for (size_t k = 0; same && k < want.nics.size(); ++k)
      same = want.nics[k].address == have.addresses[k];
    if (!same)
      throw TestbedError("--backend netns: rank " + std::to_string(r) + " is node \"" + want.name +
                         "\" here but \"" + have.name + "\" (or has other addresses) in testbed " +
                         s.prefix + " (topology \"" + s.topology_name +
                         "\"); launch the topology the testbed was built from");
  }
  const std::string ip = ip_path();
  if (ip.empty()) throw TestbedError("--backend netns needs the `ip` command (iproute2)");
  std::vector<std::string> ns;
  for (const auto& n : s.nodes) ns.push_back(n.ns);
  NetnsLaunch out;
  out.state_dir = dir;
  out.listen_address = s.mgmt_gateway;
  out.backend = job::make_prefixed_backend(
      "netns",
      [ip, ns](int rank, const topology::Node&) {
        return std::vector<std::string>{ip, "netns", "exec", ns.at(static_cast<size_t>(rank))};
      },
      exe);
  return out;
}

}  // namespace gridbcast::testbed
