// The gridbcast command: plan, launch, testbed, and the internal rank entry.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/bench_report.hpp"
#include "cli/launch_report.hpp"
#include "cli/usage.hpp"
#include "job/file_sink.hpp"
#include "job/file_source.hpp"
#include "job/file_tree.hpp"
#include "job/launcher.hpp"
#include "job/params.hpp"
#include "job/rank.hpp"
#include "lanes/certs.hpp"
#include "lanes/tls.hpp"
#include "testbed/cli.hpp"
#include "testbed/testbed.hpp"
#include "topology/bound.hpp"
#include "topology/loader.hpp"
#include "topology/plan/format.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/verify.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace {

using namespace gridbcast;

struct Loaded {
  topology::Grid grid;
  std::string yaml;
};

Loaded load(const std::string& path) {
  if (path.empty()) return {topology::default_grid(), topology::default_topology_yaml()};
  std::ifstream in(path);
  if (!in) throw topology::ConfigError({path, 0, 0}, "cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return {topology::load_grid_string(ss.str(), path), ss.str()};
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
                                      std::uint64_t size) {
  if (name == "auto")
    return topology::select_algorithm(g, size, topology::SelectionThresholds::from_environment());
  auto a = topology::parse_algorithm(name);
  if (!a)
    throw CLI::ValidationError(
        "--algorithm", "unknown algorithm \"" + name + "\"; one of auto, " + algorithm_list());
  return *a;
}

// A --root outside the grid is a bad value (exit 2), not a failure of the run.
void check_root(int root, const topology::Grid& g) {
  if (root < 0 || root >= g.size())
    throw CLI::ValidationError("--root", "rank " + std::to_string(root) + " is outside 0.." +
                                             std::to_string(g.size() - 1));
}

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

// How ranks are started and reached: the options `launch` and `bench` share.
struct RunOptions {
  std::string backend = "local", ssh = "ssh", exe, listen = "127.0.0.1", segment = "0", cert_dir;
  double timeout = 30, startup = 60, silence = 30;
  std::uint16_t port = 0;
};

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
                  "or external (ranks started by srun, mpiexec, compose, by hand)")
      ->check(CLI::IsMember({"local", "ssh", "netns", "external"}))
      ->capture_default_str();
  cmd->add_option("--ssh-command", r.ssh, "ssh command for the ssh backend")->capture_default_str();
  cmd->add_option("--rank-exe", r.exe, "gridbcast binary the ranks run (default: this one)");
  cmd->add_option(
         "--listen", r.listen,
         "address of the launcher's control listener (netns: the testbed's management address)")
      ->capture_default_str();
  cmd->add_option("--port", r.port, "port of the control listener (0: any)")->capture_default_str();
  cmd->add_option("--cert-dir", r.cert_dir,
                  "certificates for WAN links marked tls: true (made by 'gridbcast certs'); "
                  "every rank reads DIR/ca.crt, DIR/NODE.crt, DIR/NODE.key (default: each rank's "
                  "GRIDBCAST_CERT_DIR)");
}

// Fills the launch options `r` decides and returns the backend that starts the
// ranks (`command`: what each rank runs; empty: `gridbcast rank`).
std::unique_ptr<job::Backend> make_backend(CLI::App* cmd, RunOptions& r, job::LaunchOptions& o,
                                           std::vector<std::string> command = {}) {
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
  if (program && r.backend == "local") command[0] = resolve_program(command[0]);
  if (program && r.backend == "netns")
    throw CLI::ValidationError("--backend",
                               "netns does not run programs yet (launch -- PROGRAM); use local");
  if (r.backend == "local") return job::make_local_backend(command);
  if (r.backend == "ssh") return job::make_ssh_backend(r.ssh, command);
  if (r.backend == "external") return job::make_external_backend();
  if (r.backend == "netns") {
    auto netns = testbed::make_netns_launch(o.grid, exe);
    if (!cmd->count("--listen")) o.listen_address = netns.listen_address;
    return std::move(netns.backend);
  }
  throw CLI::ValidationError("GRIDBCAST_BACKEND",
                             "\"" + r.backend + "\" is not local, ssh, netns or external");
}

// "1KiB:64MiB" (x4 steps), "1KiB:64MiB:x2", or a list "4096,1MiB".
std::vector<std::uint64_t> parse_sizes(const std::string& text) {
  std::vector<std::uint64_t> sizes;
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');)
      sizes.push_back(parse_size_option(item, "--sizes"));
  } else {
    const auto second = text.find(':', colon + 1);
    const std::uint64_t lo = parse_size_option(text.substr(0, colon), "--sizes");
    const std::uint64_t hi =
        parse_size_option(text.substr(colon + 1, second - colon - 1), "--sizes");
    std::uint64_t factor = 4;
    if (second != std::string::npos) {
      const std::string f = text.substr(second + 1);
      if (f.size() < 2 || f[0] != 'x' ||
          f.find_first_not_of("0123456789", 1) != std::string::npos || std::stoull(f.substr(1)) < 2)
        throw CLI::ValidationError("--sizes", "the step is x2, x4, ...: \"" + text + "\"");
      factor = std::stoull(f.substr(1));
    }
    if (lo == 0 || lo > hi)
      throw CLI::ValidationError("--sizes",
                                 "expected FROM:TO with 0 < FROM <= TO: \"" + text + "\"");
    for (std::uint64_t s = lo; s <= hi; s *= factor) sizes.push_back(s);
  }
  if (sizes.empty()) throw CLI::ValidationError("--sizes", "no sizes in \"" + text + "\"");
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gridbcast: grid-wide multi-lane broadcast over TCP.\n"
      "Sends one buffer or file from a root to every rank of a grid of sites."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gridbcast 0.1.0");
  app.footer(
      "Examples:\n  gridbcast launch                       # embedded default topology\n"
      "  gridbcast plan site-configs/three-sites-hetero.yaml --format text\n"
      "Run 'gridbcast COMMAND --help' for a command's options.\n" +
      std::string(cli::kExitStatusHelp));

  // plan
  auto* plan_cmd = app.add_subcommand(
      "plan", "Print the broadcast plan (who sends what to whom) for a topology");
  std::string plan_topology, plan_algorithm = "auto", plan_format = "text", plan_size = "1 MiB";
  int plan_root = 0;
  bool plan_check = false;
  plan_cmd->add_option("TOPOLOGY", plan_topology,
                       "site-config YAML (default: the embedded default)");
  plan_cmd->add_option("--algorithm,-a", plan_algorithm, "auto or one of: " + algorithm_list())
      ->capture_default_str();
  plan_cmd->add_option("--root,-r", plan_root, "root rank")->capture_default_str();
  plan_cmd->add_option("--size,-s", plan_size, "message size, e.g. 4096, \"64 MiB\"")
      ->capture_default_str();
  plan_cmd->add_option("--format,-f", plan_format, "text, json or dot")
      ->check(CLI::IsMember({"text", "json", "dot"}))
      ->capture_default_str();
  plan_cmd->add_flag(
      "--check", plan_check,
      "verify coverage, causality, exactness and the multilane invariants; exit 1 on a violation");
  plan_cmd->footer(
      "Example:\n  gridbcast plan site-configs/two-sites-16x16.yaml --algorithm multilane --size "
      "64MiB --format json");

  // launch
  auto* launch_cmd = app.add_subcommand("launch",
                                        "Start one rank per node and broadcast (the main job), or "
                                        "run a program on every rank (-- PROGRAM)");
  std::string l_topology, l_algorithm = "auto", l_size = "64 MiB", l_file,
                          l_output = "/tmp/gridbcast/{node}/";
  int l_root = 0, l_iterations = 1;
  RunOptions l_run;
  std::uint64_t l_seed = 1;
  bool l_json = false, l_no_verify = false, l_random_roots = false, l_random_sizes = false;
  std::string l_progress;
  launch_cmd->add_option(
      "TOPOLOGY", l_topology,
      "site-config YAML (default: the embedded default, 2 sites x 4 nodes on loopback)");
  launch_cmd->add_option("--size,-s", l_size, "bytes to broadcast, e.g. 1048576, \"64 MiB\"")
      ->capture_default_str();
  launch_cmd->add_option("--file", l_file,
                         "broadcast this file or directory (recursively, symlinks as links) "
                         "instead of generated data (- reads standard input, spooled to $TMPDIR "
                         "first; docs/FILES.md)");
  launch_cmd
      ->add_option("--output,-o", l_output,
                   "where other ranks write --file; {node} and {rank} are replaced; a trailing / "
                   "appends the file name")
      ->capture_default_str();
  std::string l_window = "64 MiB";
  bool l_resume = false;
  launch_cmd
      ->add_option("--window", l_window,
                   "memory per rank for --file data in flight (the file may be larger)")
      ->capture_default_str();
  launch_cmd->add_flag("--resume", l_resume,
                       "--file: keep the chunks each copy (or a partial copy a failed run left) "
                       "already holds, checked against the digests; move only the rest");
  launch_cmd->add_option("--root,-r", l_root, "root rank")->capture_default_str();
  launch_cmd
      ->add_option("--algorithm,-a", l_algorithm,
                   "auto, random (per iteration) or one of: " + algorithm_list())
      ->capture_default_str();
  launch_cmd->add_option("--iterations,-i", l_iterations, "back-to-back broadcasts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  launch_cmd->add_flag("--random-roots", l_random_roots,
                       "draw each iteration's root at random (from --seed)");
  launch_cmd->add_flag("--random-sizes", l_random_sizes,
                       "draw each iteration's size from [0, --size] (from --seed)");
  launch_cmd->add_option("--seed", l_seed, "seed for generated data and random draws")
      ->capture_default_str();
  add_run_options(launch_cmd, l_run);
  launch_cmd->add_flag("--json", l_json, "print the summary (or the failure) as JSON");
  launch_cmd->add_option("--progress", l_progress,
                         "write a JSON progress record about every second to FILE (- for "
                         "stderr) while a broadcast runs");
  launch_cmd->add_flag("--no-verify", l_no_verify, "skip the SHA-256 check of every copy");
  launch_cmd->footer(
      "Examples:\n  gridbcast launch\n  gridbcast launch site-configs/single-site-15.yaml --size "
      "256MiB --algorithm multilane\n"
      "  gridbcast launch --file big.iso --output /tmp/copies/{node}.iso\n"
      "  tar c data | gridbcast launch --file - --output /scratch/data.tar --resume\n"
      "  gridbcast launch site-configs/default.yaml -- ./my_mpi_program ARGS   # docs/MPI.md\n"
      "  gridbcast launch site-configs/two-sites-tls.yaml --cert-dir /etc/gridbcast/certs   # "
      "docs/SECURITY.md\n"
      "After --, every rank runs the program (built with gridbcast-cc against libgridbcast_mpi)\n"
      "instead of the broadcast job; the launcher exits with the first failing rank's status.\n"
      "The job secret never appears in argv: ranks get it through an inherited pipe (local),\n"
      "on standard input (ssh) or from GRIDBCAST_SECRET (external).");

  // simulate
  auto* sim_cmd =
      app.add_subcommand("simulate", "Predict broadcast times with a cost model (no network)");
  std::string s_topology, s_algorithm = "multilane", s_size = "64 MiB", s_scale, s_segment = "0";
  int s_root = 0;
  bool s_sweep = false, s_json = false;
  sim_cmd->add_option("TOPOLOGY", s_topology, "site-config YAML (default: the embedded default)");
  sim_cmd
      ->add_option("--algorithm,-a", s_algorithm,
                   "auto, all, or a comma-separated list of: " + algorithm_list())
      ->capture_default_str();
  sim_cmd->add_option("--root,-r", s_root, "root rank")->capture_default_str();
  sim_cmd->add_option("--size,-s", s_size, "message size")->capture_default_str();
  sim_cmd->add_flag("--sweep", s_sweep, "sizes 1 KiB .. 256 MiB, x4");
  sim_cmd->add_option("--scale", s_scale,
                      "a synthetic grid SITESxNODES instead of TOPOLOGY (2 x 10 Gbit NICs, 10 ms "
                      "WAN), e.g. 10x1000");
  sim_cmd->add_option("--segment", s_segment, "pipelining segment; 0 = topology's or automatic")
      ->capture_default_str();
  std::string s_congestion = "cubic";
  sim_cmd
      ->add_option("--congestion", s_congestion,
                   "the hosts' default TCP congestion control, for links whose topology names "
                   "none (reno and cubic are held to the Mathis limit under loss, bbr is not); "
                   "see /proc/sys/net/ipv4/tcp_congestion_control")
      ->check(CLI::IsMember({"reno", "cubic", "bbr"}))
      ->capture_default_str();
  sim_cmd->add_flag("--json", s_json, "JSON lines, one per prediction");
  sim_cmd->footer(
      "Examples:\n  gridbcast simulate site-configs/two-sites-16x16.yaml --algorithm all --sweep\n"
      "  gridbcast simulate --scale 10x1000 --size 1GiB");

  // bench
  auto* bench_cmd = app.add_subcommand(
      "bench",
      "Measure broadcast time over sizes x algorithms (OSU-style table, JSON, CSV, SVG plot)");
  std::string b_topology, b_sizes = "1KiB:64MiB", b_algorithms = "all", b_method = "ack", b_plot,
                          b_target = "3%";
  int b_root = 0;
  bool b_json = false, b_csv = false;
  RunOptions b_run;
  job::BenchSpec b_spec;
  bench_cmd->add_option("TOPOLOGY", b_topology, "site-config YAML (default: the embedded default)");
  bench_cmd
      ->add_option("--sizes,-s", b_sizes,
                   "FROM:TO (x4 steps), FROM:TO:xN, or a list such as 4096,1MiB")
      ->capture_default_str();
  bench_cmd
      ->add_option("--algorithms,-a", b_algorithms,
                   "all, or a comma-separated list of auto, " + algorithm_list())
      ->capture_default_str();
  bench_cmd
      ->add_option("--method,-m", b_method,
                   "ack (per-rank latency OL_i with acknowledgements), barrier, or rounds")
      ->check(CLI::IsMember({"ack", "barrier", "rounds"}))
      ->capture_default_str();
  bench_cmd->add_option("--root,-r", b_root, "root rank")->capture_default_str();
  bench_cmd
      ->add_option("--target-stdev", b_target,
                   "repeat until the standard deviation is under this share of the mean")
      ->capture_default_str();
  bench_cmd
      ->add_option("--min-iterations", b_spec.min_iterations,
                   "samples per series before the standard deviation may stop it")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  bench_cmd->add_option("--max-iterations", b_spec.max_iterations, "the cap on samples per series")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  bench_cmd
      ->add_option("--max-time", b_spec.max_seconds,
                   "seconds per point (algorithm x size) before it stops with what it has")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_cmd->add_option("--warmup", b_spec.warmup, "untimed broadcasts before each series")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench_cmd->add_option("--rounds", b_spec.rounds, "broadcasts per sample with --method rounds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_cmd->add_flag("--json", b_json, "print JSON instead of the table");
  bench_cmd->add_flag("--csv", b_csv, "print CSV instead of the table");
  bench_cmd->add_option("--plot", b_plot,
                        "also write an SVG plot: time against size, log-log, a line per algorithm, "
                        "the max-flow and the simple bound dashed");
  add_run_options(bench_cmd, b_run);
  bench_cmd->footer(
      "Examples:\n  gridbcast bench                                   # embedded default, 1 KiB .. "
      "64 MiB, every algorithm\n"
      "  gridbcast bench --sizes 1MiB:64MiB --algorithms multilane,binary --plot bench.svg\n"
      "  gridbcast bench --method barrier --csv > bench.csv\n"
      "  gridbcast testbed run site-configs/testbed-8x8.yaml -- gridbcast bench "
      "site-configs/testbed-8x8.yaml --sizes 1KiB,64MiB\n"
      "Bound(us) is the max-flow lower bound and x bound Max over it; Simple(us) is the simple "
      "bound (docs/ALGORITHMS.md); every copy is verified after each point.");

  // certs
  auto* certs_cmd = app.add_subcommand(
      "certs", "Create the grid CA and per-node certificates for WAN links marked tls: true");
  certs_cmd->require_subcommand(1);
  certs_cmd->footer(
      "Examples:\n  gridbcast certs init /etc/gridbcast/certs\n"
      "  gridbcast certs issue site-configs/two-sites-tls.yaml --dir /etc/gridbcast/certs\n"
      "  gridbcast launch site-configs/two-sites-tls.yaml --cert-dir /etc/gridbcast/certs\n"
      "Copy ca.crt and each node's NODE.crt and NODE.key to that node; ca.key stays with whoever "
      "issues.");
  auto* certs_init = certs_cmd->add_subcommand(
      "init", "Create a grid CA: DIR/ca.key (mode 0600) and the self-signed DIR/ca.crt (EC P-256)");
  std::string ci_dir, ci_name = "gridbcast grid CA";
  int ci_days = 3650;
  bool ci_force = false;
  certs_init->add_option("DIR", ci_dir, "directory to create or fill")->required();
  certs_init->add_option("--name", ci_name, "the CA's subject CN")->capture_default_str();
  certs_init->add_option("--days", ci_days, "validity in days")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  certs_init->add_flag("--force", ci_force,
                       "replace an existing CA (certificates it issued stop working)");
  certs_init->footer("Example:\n  gridbcast certs init /etc/gridbcast/certs");
  auto* certs_issue =
      certs_cmd->add_subcommand("issue",
                                "Issue DIR/NODE.key (mode 0600) and DIR/NODE.crt, signed by the "
                                "grid CA, for every node of a topology");
  std::string cs_topology, cs_dir;
  std::vector<std::string> cs_nodes;
  int cs_days = 365;
  bool cs_force = false;
  certs_issue->add_option("TOPOLOGY", cs_topology, "site-config YAML whose nodes get certificates")
      ->required();
  certs_issue->add_option("--dir", cs_dir, "the CA's directory (from 'gridbcast certs init')")
      ->required();
  certs_issue->add_option("--node", cs_nodes, "only these nodes (repeatable; default: every node)");
  certs_issue->add_option("--days", cs_days, "validity in days")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  certs_issue->add_flag("--force", cs_force, "replace existing certificates and keys");
  certs_issue->footer(
      "Example:\n  gridbcast certs issue site-configs/two-sites-tls.yaml --dir "
      "/etc/gridbcast/certs\n"
      "Each certificate names its node in the subject CN and as a DNS subject alternative name;\n"
      "a rank accepts a peer only if the certificate names the node of the rank the peer claims.");

  // testbed
  testbed::TestbedCommand testbed_cmd(app);

  // rank (internal)
  auto* rank_cmd = app.add_subcommand(
      "rank", "Run one rank (started by 'launch' or by srun/mpiexec with GRIDBCAST_LAUNCHER set)");
  rank_cmd->footer(
      "Environment: GRIDBCAST_LAUNCHER=host:port, GRIDBCAST_JOB_ID, GRIDBCAST_RANK (or "
      "SLURM_PROCID,\n"
      "PMI_RANK, OMPI_COMM_WORLD_RANK), and the secret in GRIDBCAST_SECRET, through the pipe\n"
      "GRIDBCAST_SECRET_FD names, or on standard input.");

  // `gridbcast launch [TOPOLOGY] [OPTIONS] -- PROGRAM [ARGS...]`: what follows the
  // first "--" after the launch subcommand is the program every rank runs.
  std::vector<std::string> l_program;
  bool l_program_given = false;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (std::string(argv[i]) != "launch") break;
    for (int j = i + 1; j < argc; ++j) {
      if (std::string(argv[j]) != "--") continue;
      l_program.assign(argv + j + 1, argv + argc);
      l_program_given = true;
      argc = j;
      break;
    }
    break;
  }

  if (const std::string unknown = cli::unknown_command(app, {argv + 1, argv + argc});
      !unknown.empty()) {
    std::cerr << unknown;
    return cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::usage_exit(app, e);
  }

  try {
    if (*plan_cmd) {
      const Loaded l = load(plan_topology);
      check_root(plan_root, l.grid);
      const std::uint64_t size = parse_size_option(plan_size, "--size");
      const auto algo = resolve_algorithm(plan_algorithm, l.grid, size);
      const auto plan = topology::build_plan(l.grid, algo, plan_root, size);
      if (plan_format == "json")
        std::cout << topology::plan_to_json(l.grid, plan);
      else if (plan_format == "dot")
        std::cout << topology::plan_to_dot(l.grid, plan);
      else
        std::cout << topology::plan_to_text(l.grid, plan);
      if (plan_check) {
        const auto check = topology::verify_plan(l.grid, plan);
        for (const auto& e : check.errors)
          std::cerr << "gridbcast plan: property violated: " << e << "\n";
        if (!check.ok()) return 1;
        std::cerr << "gridbcast plan: all properties hold\n";
      }
      return 0;
    }
    if (*sim_cmd) {
      topology::Grid grid;
      if (!s_scale.empty()) {
        const auto x = s_scale.find('x');
        if (x == std::string::npos)
          throw CLI::ValidationError("--scale", "expected SITESxNODES, e.g. 10x1000");
        grid = topology::synthetic_grid(std::stoi(s_scale.substr(0, x)),
                                        std::stoi(s_scale.substr(x + 1)));
      } else {
        grid = load(s_topology).grid;
      }
      check_root(s_root, grid);
      std::vector<std::uint64_t> sizes;
      if (s_sweep) {
        for (std::uint64_t sz = 1024; sz <= (256ull << 20); sz *= 4) sizes.push_back(sz);
      } else {
        sizes.push_back(parse_size_option(s_size, "--size"));
      }
      std::vector<std::string> names;
      if (s_algorithm == "all") {
        for (const auto& a : topology::algorithms()) names.emplace_back(a.name);
      } else {
        std::stringstream ss(s_algorithm);
        for (std::string n; std::getline(ss, n, ',');) names.push_back(n);
      }
      topology::CostModel model;
      model.segment_bytes = parse_size_option(s_segment, "--segment");
      model.congestion = *topology::parse_congestion(s_congestion);
      if (!s_json)
        std::cout << "# " << grid.name << ": " << grid.size() << " ranks in " << grid.sites.size()
                  << " site(s), root " << s_root << ", TCP congestion control " << s_congestion
                  << "\n"
                  << "# ratio: predicted over the max-flow bound; simple: the old bound "
                     "(docs/ALGORITHMS.md)\n"
                  << "# algorithm            size      predicted s    max-flow s      simple s   "
                     "ratio  slowest rank\n";
      const topology::MaxFlowBound s_bound = topology::max_flow_bound(grid, s_root);
      for (std::uint64_t size : sizes) {
        for (const auto& name : names) {
          const auto algo = resolve_algorithm(name, grid, size);
          const auto plan = topology::build_plan(grid, algo, s_root, size);
          const auto r = topology::simulate(grid, plan, model);
          const double lb = topology::lower_bound_seconds(grid, s_root, size);
          const double mf = s_bound.seconds(size);
          if (s_json) {
            std::cout << "{\"algorithm\": \"" << topology::algorithm_name(algo)
                      << "\", \"ranks\": " << grid.size() << ", \"size\": " << size
                      << ", \"predicted_seconds\": " << r.makespan_s
                      << ", \"lower_bound_seconds\": " << lb
                      << ", \"max_flow_bound_seconds\": " << mf
                      << ", \"ratio_to_max_flow_bound\": " << (mf > 0 ? r.makespan_s / mf : 0.0)
                      << ", \"slowest_rank\": " << r.slowest_rank
                      << ", \"segments\": " << r.segments << "}\n";
          } else {
            std::printf("  %-18s %10s %14.6f %13.6f %13.6f %7.2f  %d\n",
                        std::string(topology::algorithm_name(algo)).c_str(),
                        topology::format_bytes(size).c_str(), r.makespan_s, mf, lb,
                        mf > 0 ? r.makespan_s / mf : 0.0, r.slowest_rank);
          }
        }
      }
      return 0;
    }
    if (*bench_cmd) {
      Loaded l = load(b_topology);
      job::LaunchOptions o;
      check_root(b_root, l.grid);
      b_spec.sizes = parse_sizes(b_sizes);
      if (b_algorithms == "all") {
        for (const auto& a : topology::algorithms()) b_spec.algorithms.emplace_back(a.name);
      } else {
        std::stringstream ss(b_algorithms);
        for (std::string n; std::getline(ss, n, ',');) {
          if (n != "auto") (void)resolve_algorithm(n, l.grid, 0);
          b_spec.algorithms.push_back(n);
        }
      }
      b_spec.method = job::parse_bench_method(b_method);
      {
        const bool percent = !b_target.empty() && b_target.back() == '%';
        double t = 0;
        try {
          t = std::stod(percent ? b_target.substr(0, b_target.size() - 1) : b_target);
        } catch (const std::exception&) {
          throw CLI::ValidationError(
              "--target-stdev", "expected a share such as 3% or 0.03, not \"" + b_target + "\"");
        }
        b_spec.target_rel_stdev = percent ? t / 100 : t;
        if (!(b_spec.target_rel_stdev > 0 && b_spec.target_rel_stdev < 1))
          throw CLI::ValidationError("--target-stdev", "expected a share between 0 and 100 %");
      }
      if (b_spec.min_iterations > b_spec.max_iterations)
        throw CLI::ValidationError("--min-iterations", "is above --max-iterations");
      o.params.root = b_root;
      o.params.size = b_spec.largest_size();
      o.params.kind = job::JobKind::kBench;
      o.params.bench = b_spec.encode();
      const cli::BenchContext base{
          l.grid.name, l.grid.size(), static_cast<int>(l.grid.sites.size()), b_root, b_spec, 0, 0};
      o.grid = l.grid;
      o.yaml_text = std::move(l.yaml);
      auto backend = make_backend(bench_cmd, b_run, o);
      std::vector<cli::BenchRow> rows;
      const topology::MaxFlowBound b_bound = topology::max_flow_bound(l.grid, b_root);
      const size_t total = b_spec.sizes.size() * b_spec.algorithms.size();
      const bool progress = ::isatty(2);
      o.on_bench_point = [&](const job::BenchPoint& p) {
        rows.push_back({p, topology::lower_bound_seconds(l.grid, b_root, p.bytes) * 1e6,
                        b_bound.seconds(p.bytes) * 1e6});
        if (progress)
          std::cerr << "\r  " << rows.size() << "/" << total << " " << p.algorithm << " "
                    << topology::format_bytes(p.bytes) << "            " << std::flush;
      };
      const job::LaunchResult result = job::launch(o, *backend, std::cerr);
      if (progress) std::cerr << "\r" << std::string(60, ' ') << "\r";
      if (result.status != 0) {
        cli::print_failure(std::cerr, std::cout, result, b_json);
        return result.status;
      }
      const job::BenchOutcome& outcome = *result.bench;
      cli::BenchContext ctx = base;
      ctx.rejected_connections = outcome.rejected_connections;
      ctx.peak_rss_bytes = outcome.peak_rss_bytes;
      if (b_json)
        cli::print_bench_json(std::cout, ctx, rows);
      else if (b_csv)
        cli::print_bench_csv(std::cout, rows);
      else
        cli::print_bench_table(std::cout, ctx, rows);
      if (!b_plot.empty()) {
        std::ofstream f(b_plot);
        f << cli::render_svg_plot("gridbcast bench: " + ctx.topology + ", " +
                                      std::to_string(ctx.ranks) + " ranks, method " + b_method,
                                  cli::bench_plot_series(rows));
        if (!f) throw std::runtime_error("--plot " + b_plot + ": cannot write the file");
      }
      return 0;
    }
    if (*rank_cmd) return job::run_rank(std::cin, std::cerr);
    if (*certs_init) {
      lanes::CertOptions o;
      o.not_after = std::chrono::hours(24) * ci_days;
      o.overwrite = ci_force;
      lanes::create_grid_ca(ci_dir, ci_name, o);
      std::cout << "gridbcast certs: created "
                << (std::filesystem::path(ci_dir) / lanes::kCaCertFile).string() << " and "
                << (std::filesystem::path(ci_dir) / lanes::kCaKeyFile).string() << " (0600)\n";
      return 0;
    }
    if (*certs_issue) {
      const Loaded l = load(cs_topology);
      std::vector<std::string> nodes = cs_nodes;
      if (nodes.empty())
        for (const auto& n : l.grid.nodes) nodes.push_back(n.name);
      for (const auto& name : nodes) {
        bool known = false;
        for (const auto& n : l.grid.nodes) known = known || n.name == name;
        if (!known)
          throw CLI::ValidationError("--node", "\"" + name + "\" is not a node of " + cs_topology);
      }
      lanes::CertOptions o;
      o.not_after = std::chrono::hours(24) * cs_days;
      o.overwrite = cs_force;
      for (const auto& name : nodes) {
        lanes::issue_node_cert(cs_dir, name, o);
        std::cout << "gridbcast certs: issued " << lanes::node_cert_path(cs_dir, name).string()
                  << " and " << lanes::node_key_path(cs_dir, name).string() << " (0600)\n";
      }
      return 0;
    }
    if (testbed_cmd.selected()) return testbed_cmd.run();
    if (*launch_cmd) {
      // `--file -`: the spooled copy of standard input, removed when the job ends.
      struct Spool {
        std::string path;
        ~Spool() {
          if (!path.empty()) ::unlink(path.c_str());
        }
      } spool;
      Loaded l = load(l_topology);
      job::LaunchOptions o;
      o.params.algorithm = l_algorithm;
      if (l_algorithm != "auto" && l_algorithm != "random")
        (void)resolve_algorithm(l_algorithm, l.grid, 0);
      check_root(l_root, l.grid);
      o.params.root = l_root;
      o.params.iterations = l_iterations;
      o.params.random_roots = l_random_roots;
      o.params.random_sizes = l_random_sizes;
      o.params.seed = l_seed;
      o.params.verify = !l_no_verify;
      if (l_program_given) {
        if (l_program.empty())
          throw CLI::ValidationError("--", "name the program every rank runs after --");
        o.params.kind = job::JobKind::kProgram;
        o.program = l_program;
      }
      if (!l_file.empty()) {
        if (launch_cmd->count("--size"))
          throw CLI::ValidationError("--size",
                                     "cannot be used with --file: the file's size is sent");
        if (l_random_sizes)
          throw CLI::ValidationError("--random-sizes", "cannot be used with --file");
        if (l_random_roots)
          throw CLI::ValidationError("--random-roots",
                                     "cannot be used with --file: the file is on the root's host");
        std::string source = l_file;
        if (l_file == "-") {
          if (l_output.empty() || l_output.back() == '/')
            throw CLI::ValidationError("--output",
                                       "--file - needs --output naming the copies' file, not a "
                                       "directory");
          // Standard input has no size in advance: spooled to a file first.
          const char* tmp = std::getenv("TMPDIR");
          spool.path = job::spool_to_file(0, tmp && *tmp ? tmp : "/tmp");
          source = spool.path;
        }
        const job::FileMeta meta = job::stat_file(source);
        o.params.file = std::filesystem::absolute(source).string();
        o.params.size = 0;  // a directory: the bytes of its regular files
        for (const auto& e : job::scan_tree(o.params.file)) o.params.size += e.size;
        o.params.file_mode = meta.mode;
        o.params.file_mtime_ns = meta.mtime_ns;
        o.params.source_dev = meta.dev;
        o.params.source_ino = meta.ino;
        o.params.window_bytes = parse_size_option(l_window, "--window");
        if (o.params.window_bytes < 2)
          throw CLI::ValidationError("--window", "must be at least 2 bytes");
        o.params.resume = l_resume;
        o.params.output = l_output;
        if (!o.params.output.empty() && o.params.output.back() == '/')
          o.params.output += std::filesystem::path(l_file).filename().string();
        // A copy over the source destroys it: refused for every rank on the
        // root's host (all of them with the local and netns backends) before
        // any rank starts; the ranks check again by device and inode.
        const bool one_host = l_run.backend == "local" || l_run.backend == "netns";
        const auto& root_node = l.grid.nodes[static_cast<size_t>(l_root)];
        for (int r = 0; r < l.grid.size(); ++r) {
          const auto& node = l.grid.nodes[static_cast<size_t>(r)];
          if (r == l_root || (!one_host && node.host != root_node.host)) continue;
          try {
            job::refuse_copy_over_source(job::output_path(o.params.output, r, node.name),
                                         o.params.file, meta);
          } catch (const std::runtime_error& e) {
            throw CLI::ValidationError(
                "--output", "rank " + std::to_string(r) + " (node " + node.name + "): " + e.what());
          }
        }
      } else {
        for (const char* opt : {"--output", "--window", "--resume"})
          if (launch_cmd->count(opt)) throw CLI::ValidationError(opt, "only applies to --file");
        o.params.size = parse_size_option(l_size, "--size");
      }
      o.grid = std::move(l.grid);
      o.yaml_text = std::move(l.yaml);
      // Progress: a line on a terminal (stderr, so stdout stays the summary),
      // and with --progress one JSON record a second to a file or stderr.
      const bool progress_line = ::isatty(2) && ::isatty(1) && !l_json;
      std::unique_ptr<std::ofstream> progress_file;
      if (!l_progress.empty() && l_progress != "-") {
        progress_file = std::make_unique<std::ofstream>(l_progress, std::ios::app);
        if (!*progress_file)
          throw CLI::ValidationError("--progress", l_progress + ": cannot open for writing");
      }
      bool line_shown = false;
      if (progress_line || !l_progress.empty())
        o.on_progress = [&](const job::ProgressSample& s) {
          if (progress_line) {
            std::cerr << cli::progress_line(s) << std::flush;
            line_shown = true;
          }
          if (!l_progress.empty()) {
            std::ostream& to = progress_file ? *progress_file : std::cerr;
            to << cli::progress_json(s) << std::endl;
          }
        };
      auto backend = make_backend(launch_cmd, l_run, o, l_program);
      // An MPI program waits as long as its peers compute: no progress deadline
      // unless asked (a rank that stops or dies is still noticed: heartbeats).
      if (o.params.program() && !launch_cmd->count("--timeout")) o.params.timeout_ms = 0;
      const job::LaunchResult result = job::launch(o, *backend, std::cerr);
      if (line_shown) std::cerr << "\r" << std::string(100, ' ') << "\r" << std::flush;
      if (result.status != 0) {
        cli::print_failure(std::cerr, std::cout, result, l_json);
        return result.status;
      }
      if (result.broadcast) {
        if (l_json)
          cli::print_broadcast_json(std::cout, *result.broadcast);
        else
          cli::print_broadcast_text(std::cout, *result.broadcast);
      }
      return 0;
    }
  } catch (const CLI::ParseError& e) {
    return cli::usage_exit(app, e);
  } catch (const topology::ConfigError& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return cli::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return cli::kExitFailure;
  }
  return 0;
}
