// gridbcast testbed: the emulated grid on this machine (docs/TESTBED.md), and the
// internal delay line and traffic commands it starts.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.hpp"
#include "testbed/compose.hpp"
#include "testbed/delay_line.hpp"
#include "testbed/testbed.hpp"
#include "testbed/traffic.hpp"
#include "topology/loader.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

using namespace gridbcast::testbed;

struct Testbed {
  CLI::App* cmd = nullptr;
  CLI::App *up = nullptr, *down = nullptr, *status = nullptr, *run = nullptr, *exec = nullptr,
           *shape = nullptr, *compose = nullptr, *delayline = nullptr, *traffic = nullptr,
           *server = nullptr, *client = nullptr;
  std::string shape_bandwidth, shape_wan;
  bool shape_down = false, shape_up = false, shape_reset = false;
  std::string topology, id, delay = "auto", prefix, node, output, image = "gridbcast:latest",
                            env_file = "gridbcast.env";
  bool keep = false, no_offload = false, dry_run = false;
  std::vector<std::string> command, links, launch_args;
  int ready_fd = -1;
  int priority = kDelayLinePriority;
  std::uint16_t port = 7000;
  TrafficServerOptions server_options;
  TrafficClientOptions client_options;
  std::string rate = "0bit";
  ComposeOptions compose_options;

  topology::Grid grid() const { return topology::load_grid_file(topology); }
  UpOptions up_options() const {
    UpOptions o;
    o.id = id;
    o.delay = parse_delay_mode(delay);
    o.topology_source = std::filesystem::absolute(topology).string();
    o.offload = !no_offload;
    return o;
  }
  std::string chosen_prefix() const {
    if (!prefix.empty()) return prefix;
    if (topology.empty()) throw CLI::ValidationError("TOPOLOGY", "give a TOPOLOGY or --prefix");
    return testbed_prefix(grid().name, id);
  }

  explicit Testbed(CLI::App& app);
};

Testbed::Testbed(CLI::App& app) {
  auto& m = *this;
  m.cmd = app.add_subcommand(
      "testbed", "Emulate a topology's grid on this machine with network namespaces (root)");
  m.cmd->require_subcommand(1);
  m.cmd->footer(
      "Examples:\n"
      "  gridbcast testbed up site-configs/testbed-2x4.yaml\n"
      "  gridbcast testbed run site-configs/testbed-2x4.yaml -- gridbcast launch "
      "site-configs/testbed-2x4.yaml --size 64MiB\n"
      "  gridbcast testbed exec site-configs/testbed-2x4.yaml a1 -- ping -c 3 10.202.1.1\n"
      "  gridbcast testbed shape site-configs/testbed-2x4.yaml b2 --bandwidth 10Mbit\n"
      "  gridbcast testbed down site-configs/testbed-2x4.yaml\n"
      "  gridbcast testbed compose site-configs/docker-default.yaml -o "
      "docker/compose.default.yaml\n"
      "How it works: docs/TESTBED.md.");
  auto topology_arg = [&](CLI::App* c, bool required) {
    auto* opt = c->add_option("TOPOLOGY", m.topology,
                              "site-config YAML with routable (non-loopback) IPv4 addresses");
    if (required) opt->required();
    c->add_option("--id", m.id,
                  "tells several testbeds of one topology apart (part of the name prefix)");
  };
  auto delay_opt = [&](CLI::App* c) {
    c->add_flag(
        "--no-offload", m.no_offload,
        "delay line: 1500-byte packets even on loss-free links (no GSO), e.g. to measure it");
    c->add_option("--delay", m.delay,
                  "WAN latency and loss by: auto (netem if the kernel has it, else the delay "
                  "line), netem, delayline")
        ->check(CLI::IsMember({"auto", "netem", "delayline"}))
        ->capture_default_str();
  };

  m.up = m.cmd->add_subcommand(
      "up", "Build the emulated grid: namespaces, lane bridges, routers, shaping, WAN delay");
  topology_arg(m.up, true);
  delay_opt(m.up);
  m.up->add_flag("--dry-run", m.dry_run,
                 "print the ip, tc and sysctl commands and the delay lines `up` would run, one a "
                 "line, and change nothing (no root needed)");
  m.up->footer(
      "Removes leftovers of the same testbed first. Prints the launcher (management) address.\n"
      "Example: gridbcast testbed up --dry-run site-configs/testbed-2x2.yaml | grep mcast");

  m.down = m.cmd->add_subcommand(
      "down", "Remove every namespace, interface and process the testbed created");
  topology_arg(m.down, false);
  m.down->add_option("--prefix", m.prefix,
                     "the testbed's name prefix (gb......), instead of TOPOLOGY");

  m.status =
      m.cmd->add_subcommand("status", "Show a testbed (or list all testbeds without TOPOLOGY)");
  topology_arg(m.status, false);
  m.status->add_option("--prefix", m.prefix, "the testbed's name prefix, instead of TOPOLOGY");
  m.status->footer("Exit status: 0 up and healthy, 1 not up, 3 parts missing.");

  m.run = m.cmd->add_subcommand(
      "run", "Run a command against the testbed (bringing it up and down if it is not up)");
  topology_arg(m.run, true);
  delay_opt(m.run);
  m.run->add_flag("--keep", m.keep, "leave a testbed this command brought up running");
  m.run
      ->add_option("COMMAND", m.command,
                   "after --: the command; GRIDBCAST_BACKEND=netns and GRIDBCAST_TESTBED are set")
      ->required();
  m.run->footer(
      "Example:\n  gridbcast testbed run grid.yaml -- gridbcast launch grid.yaml --algorithm "
      "multilane --size 256MiB\n"
      "A first word \"gridbcast\" means this very binary.");

  m.exec = m.cmd->add_subcommand("exec", "Run a command inside a node's namespace");
  topology_arg(m.exec, true);
  m.exec->add_option("NODE", m.node, "node name")->required();
  m.exec->add_option("COMMAND", m.command, "after --: the command")->required();

  m.shape = m.cmd->add_subcommand(
      "shape", "Change one node's links in a running testbed (fault injection while jobs run)");
  topology_arg(m.shape, true);
  auto* node_arg = m.shape->add_option("NODE", m.node, "node name");
  auto* wan_opt = m.shape->add_option(
      "--wan", m.shape_wan,
      "a WAN link instead of a node, by its sites (a-b): --down cuts it, --up or --reset mends it");
  node_arg->excludes(wan_opt);
  auto* bw = m.shape->add_option("--bandwidth", m.shape_bandwidth,
                                 "shape every NIC of the node at this rate, both ways (10Mbit)");
  auto* dn = m.shape->add_flag(
      "--down", m.shape_down, "cut the node off: its packets vanish silently, as with a cut cable");
  auto* upf = m.shape->add_flag("--up", m.shape_up, "undo --down");
  auto* rs =
      m.shape->add_flag("--reset", m.shape_reset, "the declared NIC rates again, and the links up");
  bw->excludes(dn, upf, rs);
  dn->excludes(upf, rs);
  upf->excludes(rs);
  m.shape->footer(
      "Example, 30 s into a broadcast:\n"
      "  gridbcast testbed shape site-configs/testbed-8x8.yaml b3 --bandwidth 10Mbit\n"
      "  gridbcast testbed shape site-configs/testbed-8x8.yaml b3 --down\n"
      "  gridbcast testbed shape site-configs/testbed-8x8.yaml --wan a-b --down");

  m.compose = m.cmd->add_subcommand(
      "compose", "Write a docker compose file emulating the topology (see docker/README.md)");
  m.compose
      ->add_option("TOPOLOGY", m.topology,
                   "site-config YAML with private (non-loopback) IPv4 addresses")
      ->required();
  m.compose->add_option("--output,-o", m.output, "file to write (default: standard output)");
  m.compose->add_option("--image", m.image, "image with gridbcast, iproute2 (docker/Dockerfile)")
      ->capture_default_str();
  m.compose
      ->add_option(
          "--env-file", m.env_file,
          "env file with GRIDBCAST_SECRET and GRIDBCAST_JOB_ID, relative to the compose file")
      ->capture_default_str();
  m.compose->add_option("--port", m.port, "the launcher's control port")->capture_default_str();
  m.compose
      ->add_option("--engine", m.compose_options.engine,
                   "docker (docker compose) or podman (docker-compose talking to `podman system "
                   "service`): podman's networks are internal, so that it masquerades nothing")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, ComposeEngine>{{"docker", ComposeEngine::kDocker},
                                               {"podman", ComposeEngine::kPodman}},
          CLI::ignore_case))
      ->capture_default_str();
  m.compose
      ->add_option("--nofile", m.compose_options.nofile,
                   "every container's open-file limit; no higher than the host's hard limit")
      ->check(CLI::Range(64L, 1L << 30))
      ->capture_default_str();
  m.compose
      ->add_option("--nproc", m.compose_options.nproc,
                   "every container's process limit; no higher than the host's hard limit")
      ->check(CLI::Range(64L, 1L << 30))
      ->capture_default_str();
  m.compose->add_option("--launch-arg", m.launch_args,
                        "extra argument for `gridbcast launch` (repeat), e.g. --launch-arg=--size "
                        "--launch-arg=256MiB");

  m.delayline =
      m.cmd->add_subcommand("delayline", "internal: the userspace WAN delay line of one router");
  m.delayline->group("");
  m.delayline
      ->add_option("--link", m.links,
                   "dev=TUN,delay=10ms,loss=0.001,offload=on,buffer=16MiB (repeat)")
      ->required();
  m.delayline->add_option("--ready-fd", m.ready_fd,
                          "file descriptor that gets \"ready\" once running");
  m.delayline->add_option("--priority", m.priority, "SCHED_FIFO priority; 0 = normal scheduling")
      ->capture_default_str();

  m.traffic = m.cmd->add_subcommand("traffic", "internal: TCP streams for measuring the emulation");
  m.traffic->group("");
  m.traffic->require_subcommand(1);
  m.server = m.traffic->add_subcommand("server", "receive streams, print the throughput as JSON");
  m.server->add_option("--listen", m.server_options.listen)->capture_default_str();
  m.server->add_option("--port", m.server_options.port)->capture_default_str();
  m.server->add_option("--streams", m.server_options.streams)->capture_default_str();
  m.server->add_option("--timeout", m.server_options.timeout_s, "seconds for the whole session")
      ->capture_default_str();
  m.server
      ->add_option("--warmup", m.server_options.warmup_s,
                   "seconds after the first connection before measuring")
      ->capture_default_str();
  m.client = m.traffic->add_subcommand("client", "send streams for some seconds");
  m.client->add_option("--connect", m.client_options.connect)->required();
  m.client->add_option("--port", m.client_options.port)->capture_default_str();
  m.client->add_option("--bind", m.client_options.bind, "local address");
  m.client->add_option("--streams", m.client_options.streams)->capture_default_str();
  m.client->add_option("--seconds", m.client_options.seconds)->capture_default_str();
  m.client->add_option("--rate", m.rate, "pacing per stream, e.g. \"250 Mbit\"; 0bit = none")
      ->capture_default_str();
  m.client->add_option("--congestion", m.client_options.congestion,
                       "TCP congestion control, e.g. cubic");
}

// The index in grid.wan of the link "A-B" names (its two sites, either
// order; site names may hold '-' themselves).
int wan_link_named(const topology::Grid& grid, const std::string& text) {
  std::string links;
  for (const auto& w : grid.wan)
    links += (links.empty() ? "" : ", ") + grid.sites[static_cast<size_t>(w.site_a)].name + "-" +
             grid.sites[static_cast<size_t>(w.site_b)].name;
  for (size_t at = text.find('-'); at != std::string::npos; at = text.find('-', at + 1)) {
    const int a = grid.site_named(text.substr(0, at)), b = grid.site_named(text.substr(at + 1));
    if (a < 0 || b < 0) continue;
    if (const auto* link = grid.link_between(a, b)) return static_cast<int>(link - grid.wan.data());
  }
  throw CLI::ValidationError("--wan", "\"" + text + "\" is not a WAN link of the topology (" +
                                          (links.empty() ? "it has none" : links) + ")");
}

// Runs the chosen sub-subcommand; errors are thrown (TestbedError,
// topology::ConfigError) for main to report.
int run_testbed(Testbed& m) {
  if (m.up->parsed() && m.dry_run) {
    std::cout << dry_run(m.grid(), m.up_options());
    return 0;
  }
  if (m.up->parsed()) {
    up(m.grid(), m.up_options(), std::cerr);
    return 0;
  }
  if (m.down->parsed()) {
    const std::string prefix = m.chosen_prefix();
    if (!down(prefix, std::cerr))
      std::cerr << "testbed " << prefix << " is not up; nothing to remove\n";
    return 0;
  }
  if (m.status->parsed()) {
    if (m.topology.empty() && m.prefix.empty()) {
      const auto all = list_testbeds();
      if (all.empty()) std::cout << "no testbeds on this machine (" << state_root() << ")\n";
      int worst = all.empty() ? 1 : 0;
      for (const auto& p : all) worst = std::max(worst, status(p, std::cout));
      return worst;
    }
    return status(m.chosen_prefix(), std::cout);
  }
  if (m.run->parsed()) return testbed::run(m.grid(), m.up_options(), m.keep, m.command, std::cerr);
  if (m.exec->parsed()) return exec_in_node(m.grid(), m.id, m.node, m.command);
  if (m.shape->parsed()) {
    ShapeOptions o;
    if (!m.shape_bandwidth.empty()) {
      try {
        o.bandwidth_bps = topology::parse_bandwidth(m.shape_bandwidth);
      } catch (const std::exception& e) {
        throw CLI::ValidationError("--bandwidth", e.what());
      }
      if (o.bandwidth_bps <= 0) throw CLI::ValidationError("--bandwidth", "must be above 0");
    }
    o.down = m.shape_down;
    o.up = m.shape_up;
    o.reset = m.shape_reset;
    if ((o.bandwidth_bps > 0) + o.down + o.up + o.reset != 1)
      throw CLI::ValidationError("shape", "say one of --bandwidth RATE, --down, --up or --reset");
    const topology::Grid grid = m.grid();
    if (!m.shape_wan.empty()) {
      if (o.bandwidth_bps > 0)
        throw CLI::ValidationError("--wan", "a WAN link takes --down, --up or --reset");
      std::cout << shape_wan(grid, m.id, wan_link_named(grid, m.shape_wan), o.down) << "\n";
      return 0;
    }
    if (m.node.empty())
      throw CLI::ValidationError("shape", "name a NODE, or a WAN link with --wan");
    std::cout << shape(grid, m.id, m.node, o) << "\n";
    return 0;
  }
  if (m.compose->parsed()) {
    const topology::Grid grid = m.grid();
    ComposeOptions o = m.compose_options;
    o.image = m.image;
    o.env_file = m.env_file;
    o.port = m.port;
    o.launch_args = m.launch_args;
    const auto base = m.output.empty() ? std::filesystem::current_path()
                                       : std::filesystem::absolute(m.output).parent_path();
    o.topology_mount = std::filesystem::absolute(m.topology).lexically_relative(base).string();
    if (o.topology_mount.empty()) o.topology_mount = std::filesystem::absolute(m.topology).string();
    if (o.topology_mount.front() != '/' && o.topology_mount.front() != '.')
      o.topology_mount = "./" + o.topology_mount;
    o.generated_by =
        "gridbcast testbed compose " + m.topology + (m.output.empty() ? "" : " -o " + m.output);
    const std::string text = compose_file(grid, o);
    if (m.output.empty()) {
      std::cout << text;
    } else {
      std::ofstream out(m.output, std::ios::trunc);
      out << text;
      if (!out.flush()) throw TestbedError("cannot write " + m.output);
      std::cerr << "gridbcast testbed compose: wrote " << m.output << " (" << grid.nodes.size()
                << " node services, " << grid.sites.size() << " routers, 1 launcher)\n";
    }
    return 0;
  }
  if (m.delayline->parsed()) {
    std::vector<DelayLinkConfig> links;
    for (const auto& spec : m.links) {
      try {
        links.push_back(parse_delay_link(spec));
      } catch (const std::exception& e) {
        throw CLI::ValidationError("--link", e.what());
      }
    }
    return run_delay_line(links, m.ready_fd, m.priority, std::cerr);
  }
  if (m.server->parsed()) return run_traffic_server(m.server_options, std::cout, std::cerr);
  if (m.client->parsed()) {
    try {
      m.client_options.rate_bps =
          m.rate == "0" || m.rate == "0bit" ? 0 : topology::parse_bandwidth(m.rate);
    } catch (const std::exception& e) {
      throw CLI::ValidationError("--rate", e.what());
    }
    return run_traffic_client(m.client_options, std::cout, std::cerr);
  }
  return 0;
}

}  // namespace

Command register_testbed(CLI::App& app) {
  auto t = std::make_shared<Testbed>(app);
  return {t->cmd, [t] { return run_testbed(*t); }};
}

}  // namespace gridbcast::cli
