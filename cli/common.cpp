// What several subcommands share: loading a topology, sizes and algorithms
// given as options, and the options and backend that start the ranks.
#include "cli/common.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "lanes/log.hpp"
#include "testbed/testbed.hpp"
#include "topology/hosts.hpp"
#include "topology/loader.hpp"
#include "topology/select.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "gridbcast" : p.string();
}

// The program of `launch ... -- PROGRAM`: a path, or a name on PATH, that this
// user may execute. Throws naming what is wrong before any rank starts.
std::string resolve_program(const std::string& name) {
  auto runnable = [](const std::string& p) {
    std::error_code ec;
    return ::access(p.c_str(), X_OK) == 0 && !std::filesystem::is_directory(p, ec);
  };
  if (name.find('/') != std::string::npos) {
    if (!runnable(name))
      throw std::runtime_error("launch: cannot run " + name + ": no such executable");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (runnable((dir.empty() ? "." : dir) + "/" + name))
      return (dir.empty() ? "." : dir) + "/" + name;
  throw std::runtime_error("launch: cannot run " + name + ": not found on PATH");
}

}  // namespace

Loaded load(const std::string& path) {
  if (path.empty()) return {topology::default_grid(), topology::default_topology_yaml()};
  std::ifstream in(path);
  if (!in) throw topology::ConfigError({path, 0, 0}, "cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return {topology::load_grid_string(ss.str(), path), ss.str()};
}

namespace {

// A host's address as its lanes bind to it: the first IPv4 address its name
// resolves to, else the first IPv6 one.
std::string resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0)
    throw std::runtime_error(::gai_strerror(rc));
  std::string v4, v6;
  for (addrinfo* a = res; a; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST))
      continue;
    if (a->ai_family == AF_INET && v4.empty()) v4 = text;
    if (a->ai_family == AF_INET6 && v6.empty()) v6 = text;
  }
  ::freeaddrinfo(res);
  if (v4.empty() && v6.empty()) throw std::runtime_error("no IPv4 or IPv6 address");
  return v4.empty() ? v6 : v4;
}

template <typename T, typename Parse>
std::optional<T> parsed(const std::string& text, const char* option, Parse parse) {
  if (text.empty()) return std::nullopt;
  try {
    return parse(text);
  } catch (const std::exception& e) {
    throw CLI::ValidationError(option, e.what());
  }
}

}  // namespace

void add_topology_options(CLI::App* cmd, TopologyOptions& t, bool congestion, bool short_f) {
  cmd->add_option("--hosts", t.hosts,
                  "the topology from host names instead of TOPOLOGY: hostlists, each optionally "
                  "prefixed SITE:, e.g. 'tokyo:a[01-08],osaka:b[01-08]' (one NIC each, at the "
                  "address the name resolves to; docs/TOPOLOGY.md)");
  cmd->add_option(short_f ? "--hostfile,-f" : "--hostfile", t.hostfile,
                  "the topology from a host file: HOST [site=S] [nics=N] [bandwidth=B] "
                  "[address=A,...] per line");
  cmd->add_option("--nic-bandwidth", t.nic_bandwidth,
                  "every NIC's bandwidth, e.g. 25Gbit (default with --hosts: 10Gbit)");
  cmd->add_option("--wan-latency", t.wan_latency,
                  "every WAN link's one-way latency, e.g. 10ms (default with --hosts: 10ms)");
  cmd->add_option("--wan-bandwidth", t.wan_bandwidth,
                  "every WAN link's bandwidth (default with --hosts: 10Gbit)");
  cmd->add_option("--streams", t.streams,
                  "TCP streams per WAN hop on every link (default with --hosts: 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--lanes", t.lanes,
                  "logical lanes per rank, one part of the message each in multilane (default: "
                  "the topology's defaults.lanes, else the count with the best rate for the NICs; "
                  "docs/TOPOLOGY.md)")
      ->check(CLI::Range(1, topology::kMaxLanes));
  cmd->add_flag("--pace-lanes", t.pace_lanes,
                "cap each multilane connection at its part of the declared NIC and WAN "
                "bandwidths, as defaults.pace_lanes: true does (docs/TOPOLOGY.md)");
  cmd->add_option("--max-rate", t.max_rate,
                  "the most each node may send in all, over all its NICs and connections, e.g. "
                  "\"2 Gbit\": plans and the bound count it, the connections are paced to it; as "
                  "defaults.max_rate (docs/TOPOLOGY.md, \"Rate limits\")");
  if (congestion)
    cmd->add_option("--congestion", t.congestion,
                    "TCP congestion control of every socket, e.g. cubic or bbr");
}

Loaded load(const TopologyOptions& t) {
  const int given = !t.path.empty() + !t.hosts.empty() + !t.hostfile.empty();
  if (given > 1)
    throw CLI::ValidationError("--hosts", "give one of TOPOLOGY, --hosts and --hostfile");
  topology::Overrides o;
  o.nic_bandwidth_bps =
      parsed<double>(t.nic_bandwidth, "--nic-bandwidth", topology::parse_bandwidth);
  o.wan_latency_s = parsed<double>(t.wan_latency, "--wan-latency", topology::parse_duration);
  o.wan_bandwidth_bps =
      parsed<double>(t.wan_bandwidth, "--wan-bandwidth", topology::parse_bandwidth);
  if (t.streams > 0) o.streams = t.streams;
  if (!t.congestion.empty()) o.congestion = t.congestion;
  if (t.lanes > 0) o.lanes = t.lanes;
  if (t.pace_lanes) o.pace_lanes = true;
  o.max_rate_bps = parsed<double>(t.max_rate, "--max-rate", topology::parse_bandwidth);
  if (o.max_rate_bps && !(*o.max_rate_bps > 0))
    throw CLI::ValidationError("--max-rate", "must be above 0, e.g. \"1 Gbit\"");
  std::optional<topology::SlurmAllocation> slurm;
  if (given == 0) slurm = topology::slurm_allocation(std::getenv);
  if (t.hosts.empty() && t.hostfile.empty() && !slurm) {
    Loaded l = load(t.path);
    if (!o.any()) return l;
    std::string yaml = topology::apply_overrides(l.yaml, o);
    const std::string source = t.path.empty() ? "<embedded default>" : t.path;
    return {topology::load_grid_string(yaml, source), std::move(yaml)};
  }
  topology::HostDefaults d;
  d.resolve = resolve_host;
  if (o.nic_bandwidth_bps) d.nic_bandwidth_bps = *o.nic_bandwidth_bps;
  if (o.wan_latency_s) d.wan_latency_s = *o.wan_latency_s;
  if (o.wan_bandwidth_bps) d.wan_bandwidth_bps = *o.wan_bandwidth_bps;
  if (o.streams) d.streams = *o.streams;
  if (o.congestion) d.congestion = *o.congestion;
  std::vector<topology::HostEntry> hosts;
  std::string source = "--hosts";
  if (slurm) {
    hosts = std::move(slurm->hosts);
    source = "SLURM_JOB_NODELIST";
    d.name = "slurm-" + slurm->job_id;
    std::string note =
        "gridbcast: topology from SLURM_JOB_NODELIST: " + std::to_string(hosts.size()) +
        (hosts.size() == 1 ? " node" : " nodes");
    if (slurm->tasks_per_node > 1)
      note += ", one rank per node (SLURM_TASKS_PER_NODE asks for up to " +
              std::to_string(slurm->tasks_per_node) + ")";
    lanes::log::notice(note);
  } else if (!t.hosts.empty()) {
    hosts = topology::parse_hosts(t.hosts);
  } else {
    std::ifstream in(t.hostfile);
    if (!in) throw topology::ConfigError({t.hostfile, 0, 0}, "cannot read the file");
    std::stringstream ss;
    ss << in.rdbuf();
    hosts = topology::parse_hostfile(ss.str(), t.hostfile);
    source = t.hostfile;
    d.name = std::filesystem::path(t.hostfile).stem().string();
  }
  std::string yaml = topology::hosts_to_yaml(hosts, d);
  if (o.lanes || o.pace_lanes || o.max_rate_bps) {
    topology::Overrides lanes_only;
    lanes_only.lanes = o.lanes;
    lanes_only.pace_lanes = o.pace_lanes;
    lanes_only.max_rate_bps = o.max_rate_bps;
    yaml = topology::apply_overrides(yaml, lanes_only);
  }
  return {topology::load_grid_string(yaml, source), std::move(yaml), slurm.has_value()};
}

std::uint64_t parse_size_option(const std::string& text, const char* option) {
  try {
    return topology::parse_size(text);
  } catch (const std::exception& e) {
    throw CLI::ValidationError(option, e.what());
  }
}

std::string algorithm_list() {
  std::string s;
  for (const auto& a : topology::algorithms()) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

topology::Algorithm resolve_algorithm(const std::string& name, const topology::Grid& g,
                                      std::uint64_t size, int root,
                                      const topology::CostModel& model) {
  if (name == "auto")
    return topology::select_algorithm(g, root, size,
                                      topology::SelectionThresholds::from_environment(), model);
  auto a = topology::parse_algorithm(name);
  if (!a)
    throw CLI::ValidationError(
        "--algorithm", "unknown algorithm \"" + name + "\"; one of auto, " + algorithm_list());
  if (const std::string why = topology::algorithm_unavailable(g, *a); !why.empty())
    throw CLI::ValidationError("--algorithm", why);
  return *a;
}

// A --root outside the grid is a bad value (exit 2), not a failure of the run.
void check_root(int root, const topology::Grid& g) {
  if (root < 0 || root >= g.size())
    throw CLI::ValidationError("--root", "rank " + std::to_string(root) + " is outside 0.." +
                                             std::to_string(g.size() - 1));
}

void add_run_options(CLI::App* cmd, RunOptions& r) {
  cmd->add_option("--segment", r.segment,
                  "pipelining segment, e.g. \"256 KiB\"; 0 = topology's or automatic")
      ->capture_default_str();
  cmd->add_option(
         "--timeout", r.timeout,
         "seconds without progress before a broadcast fails: no data from a peer for this long "
         "fails a rank, no byte moved anywhere fails the job; a broadcast that keeps moving may "
         "last hours (launch -- PROGRAM: every blocking MPI call, none unless given)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--startup-timeout", r.startup, "seconds for every rank to connect")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--silence-timeout", r.silence,
                  "without --timeout (launch -- PROGRAM): seconds a rank may send nothing, not "
                  "even its heartbeat, before the job fails naming it (stopped, or its host or "
                  "network is down)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--backend", r.backend,
                  "local (fork/exec), ssh, netns (the namespace testbed; default when "
                  "GRIDBCAST_BACKEND=netns), "
                  "srun (one job step per rank inside a Slurm allocation; default when the "
                  "topology comes from SLURM_JOB_NODELIST), "
                  "or external (ranks started by srun, mpiexec, compose, by hand)")
      ->check(CLI::IsMember({"local", "ssh", "netns", "srun", "external"}))
      ->capture_default_str();
  cmd->add_option("--ssh-command", r.ssh, "ssh command for the ssh backend")->capture_default_str();
  cmd->add_option("--rank-exe", r.exe, "gridbcast binary the ranks run (default: this one)");
  cmd->add_option(
         "--listen", r.listen,
         "address of the launcher's control listener (default: 127.0.0.1; ssh and external: "
         "where the route to the nodes leaves this host; netns: the testbed's management "
         "address)")
      ->capture_default_str();
  cmd->add_option("--port", r.port, "port of the control listener (0: any)")->capture_default_str();
  cmd->add_flag("--tag-output", r.tag_output,
                "prefix every line ranks write with [rank R], each line whole (ranks' output "
                "goes through the launcher)");
  cmd->add_flag("--timestamp-output", r.timestamp_output,
                "prefix every line ranks write with the UTC time (implies whole lines, as "
                "--tag-output)");
  cmd->add_option("--cert-dir", r.cert_dir,
                  "certificates for WAN links marked tls: true (made by 'gridbcast certs'); "
                  "every rank reads DIR/ca.crt, DIR/NODE.crt, DIR/NODE.key (default: each rank's "
                  "GRIDBCAST_CERT_DIR)");
}

void slurm_default_backend(CLI::App* cmd, const Loaded& l, RunOptions& r) {
  const char* b = std::getenv("GRIDBCAST_BACKEND");
  if (l.slurm && !cmd->count("--backend") && !(b && *b)) r.backend = "srun";
}

// Fills the launch options `r` decides and returns the backend that starts the
// ranks (`command`: what each rank runs; empty: `gridbcast rank`).
namespace {

std::unique_ptr<job::Backend> choose_backend(CLI::App* cmd, RunOptions& r, job::LaunchOptions& o,
                                             std::vector<std::string> command);

}  // namespace

std::unique_ptr<job::Backend> make_backend(CLI::App* cmd, RunOptions& r, job::LaunchOptions& o,
                                           std::vector<std::string> command) {
  auto backend = choose_backend(cmd, r, o, std::move(command));
  // The launcher's own lines carry the time too (the ranks' get it from the relay).
  if (r.timestamp_output) lanes::log::set_timestamps(true);
  try {
    backend->set_output({r.tag_output, r.timestamp_output});
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError(r.tag_output ? "--tag-output" : "--timestamp-output", e.what());
  }
  return backend;
}

namespace {

std::unique_ptr<job::Backend> choose_backend(CLI::App* cmd, RunOptions& r, job::LaunchOptions& o,
                                             std::vector<std::string> command) {
  o.params.segment_bytes = parse_size_option(r.segment, "--segment");
  if (!r.cert_dir.empty()) o.params.cert_dir = std::filesystem::absolute(r.cert_dir).string();
  o.params.timeout_ms = static_cast<std::int64_t>(r.timeout * 1000);
  o.listen_address = r.listen;
  o.listen_port = r.port;
  o.startup_timeout_ms = static_cast<std::int64_t>(r.startup * 1000);
  o.program_silence_ms = static_cast<std::int64_t>(r.silence * 1000);
  const std::string exe = r.exe.empty() ? self_exe() : r.exe;
  // `gridbcast testbed run` selects the netns backend through the environment.
  if (const char* b = std::getenv("GRIDBCAST_BACKEND"); b && *b && !cmd->count("--backend"))
    r.backend = b;
  const bool program = !command.empty();
  if (!program) command = {exe, "rank"};
  if (program && (r.backend == "local" || r.backend == "netns"))
    command[0] = resolve_program(command[0]);
  if (r.backend == "local") return job::make_local_backend(command);
  if ((r.backend == "ssh" || r.backend == "srun" || r.backend == "external") &&
      !cmd->count("--listen")) {
    // Ranks on other hosts cannot reach 127.0.0.1: listen where the route to
    // the nodes leaves this host.
    std::string note;
    try {
      o.listen_address = job::reachable_listen_address(o.grid, job::route_source, &note);
    } catch (const std::exception& e) {
      throw CLI::ValidationError("--listen", std::string("cannot choose the launcher's address: ") +
                                                 e.what() + "; give --listen");
    }
    if (!note.empty()) lanes::log::notice("gridbcast launch: " + note);
  }
  if (r.backend == "ssh") return job::make_ssh_backend(r.ssh, command);
  if (r.backend == "srun") return job::make_srun_backend("srun", command);
  if (r.backend == "external") return job::make_external_backend();
  if (r.backend == "netns") {
    auto netns = testbed::make_netns_launch(o.grid, command);
    if (!cmd->count("--listen")) o.listen_address = netns.listen_address;
    return std::move(netns.backend);
  }
  throw CLI::ValidationError("GRIDBCAST_BACKEND",
                             "\"" + r.backend + "\" is not local, ssh, netns, srun or external");
}

}  // namespace

}  // namespace gridbcast::cli
