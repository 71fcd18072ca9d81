// The gridbcast command: plan, launch, testbed, and the internal rank entry.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "runtime/launcher.hpp"
#include "runtime/rank.hpp"
#include "testbed/cli.hpp"
#include "testbed/testbed.hpp"
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
  if (name == "auto") return topology::select_algorithm(g, size, topology::SelectionThresholds::from_environment());
  auto a = topology::parse_algorithm(name);
  if (!a) throw CLI::ValidationError("--algorithm", "unknown algorithm \"" + name + "\"; one of auto, " + algorithm_list());
  return *a;
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
    if (!runnable(name)) throw std::runtime_error("launch: cannot run " + name + ": no such executable");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (runnable((dir.empty() ? "." : dir) + "/" + name)) return (dir.empty() ? "." : dir) + "/" + name;
  throw std::runtime_error("launch: cannot run " + name + ": not found on PATH");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gridbcast: grid-wide multi-lane broadcast over TCP.\n"
               "Sends one buffer or file from a root to every rank of a grid of sites."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gridbcast 0.1.0");
  app.footer("Examples:\n  gridbcast launch                       # embedded default topology\n"
             "  gridbcast plan site-configs/three-sites-hetero.yaml --format text\n"
             "Run 'gridbcast COMMAND --help' for a command's options.");

  // plan
  auto* plan_cmd = app.add_subcommand("plan", "Print the broadcast plan (who sends what to whom) for a topology");
  std::string plan_topology, plan_algorithm = "auto", plan_format = "text", plan_size = "1 MiB";
  int plan_root = 0;
  bool plan_check = false;
  plan_cmd->add_option("TOPOLOGY", plan_topology, "site-config YAML (default: the embedded default)");
  plan_cmd->add_option("--algorithm,-a", plan_algorithm, "auto or one of: " + algorithm_list())->capture_default_str();
  plan_cmd->add_option("--root,-r", plan_root, "root rank")->capture_default_str();
  plan_cmd->add_option("--size,-s", plan_size, "message size, e.g. 4096, \"64 MiB\"")->capture_default_str();
  plan_cmd->add_option("--format,-f", plan_format, "text, json or dot")
      ->check(CLI::IsMember({"text", "json", "dot"}))->capture_default_str();
  plan_cmd->add_flag("--check", plan_check, "verify coverage, causality, exactness and the multilane invariants; exit 1 on a violation");
  plan_cmd->footer("Example:\n  gridbcast plan site-configs/two-sites-16x16.yaml --algorithm multilane --size 64MiB --format json");

  // launch
  auto* launch_cmd = app.add_subcommand("launch", "Start one rank per node and broadcast (the main job), or run a program on every rank (-- PROGRAM)");
  std::string l_topology, l_algorithm = "auto", l_size = "64 MiB", l_file, l_output = "/tmp/gridbcast/{node}/", l_backend = "local",
              l_ssh = "ssh", l_exe, l_listen = "127.0.0.1", l_segment = "0";
  int l_root = 0, l_iterations = 1;
  double l_timeout = 30, l_startup = 60;
  std::uint16_t l_port = 0;
  std::uint64_t l_seed = 1;
  bool l_json = false, l_no_verify = false, l_random_roots = false, l_random_sizes = false;
  launch_cmd->add_option("TOPOLOGY", l_topology, "site-config YAML (default: the embedded default, 2 sites x 4 nodes on loopback)");
  launch_cmd->add_option("--size,-s", l_size, "bytes to broadcast, e.g. 1048576, \"64 MiB\"")->capture_default_str();
  launch_cmd->add_option("--file", l_file, "broadcast this file instead of generated data");
  launch_cmd->add_option("--output,-o", l_output, "where other ranks write --file; {node} and {rank} are replaced; a trailing / appends the file name")->capture_default_str();
  launch_cmd->add_option("--root,-r", l_root, "root rank")->capture_default_str();
  launch_cmd->add_option("--algorithm,-a", l_algorithm, "auto, random (per iteration) or one of: " + algorithm_list())->capture_default_str();
  launch_cmd->add_option("--iterations,-n", l_iterations, "back-to-back broadcasts")->check(CLI::PositiveNumber)->capture_default_str();
  launch_cmd->add_flag("--random-roots", l_random_roots, "draw each iteration's root at random (from --seed)");
  launch_cmd->add_flag("--random-sizes", l_random_sizes, "draw each iteration's size from [0, --size] (from --seed)");
  launch_cmd->add_option("--seed", l_seed, "seed for generated data and random draws")->capture_default_str();
  launch_cmd->add_option("--segment", l_segment, "pipelining segment, e.g. \"256 KiB\"; 0 = topology's or automatic")->capture_default_str();
  launch_cmd->add_option("--timeout", l_timeout, "seconds without progress before a broadcast fails (after --: none unless given)")->check(CLI::PositiveNumber)->capture_default_str();
  launch_cmd->add_option("--startup-timeout", l_startup, "seconds for every rank to connect")->check(CLI::PositiveNumber)->capture_default_str();
  launch_cmd->add_option("--backend", l_backend, "local (fork/exec), ssh, netns (the namespace testbed; default when GRIDBCAST_BACKEND=netns), "
                         "or external (ranks started by srun, mpiexec, compose, by hand)")
      ->check(CLI::IsMember({"local", "ssh", "netns", "external"}))->capture_default_str();
  launch_cmd->add_option("--ssh-command", l_ssh, "ssh command for the ssh backend")->capture_default_str();
  launch_cmd->add_option("--rank-exe", l_exe, "gridbcast binary the ranks run (default: this one)");
  launch_cmd->add_option("--listen", l_listen, "address of the launcher's control listener (netns: the testbed's management address)")->capture_default_str();
  launch_cmd->add_option("--port", l_port, "port of the control listener (0: any)")->capture_default_str();
  launch_cmd->add_flag("--json", l_json, "print the summary as JSON");
  launch_cmd->add_flag("--no-verify", l_no_verify, "skip the SHA-256 check of every copy");
  launch_cmd->footer("Examples:\n  gridbcast launch\n  gridbcast launch site-configs/single-site-15.yaml --size 256MiB --algorithm multilane\n"
                     "  gridbcast launch --file big.iso --output /tmp/copies/{node}.iso\n"
                     "  gridbcast launch site-configs/default.yaml -- ./my_mpi_program ARGS   # docs/MPI.md\n"
                     "After --, every rank runs the program (built with gridbcast-cc against libgridbcast_mpi)\n"
                     "instead of the broadcast job; the launcher exits with the first failing rank's status.\n"
                     "The job secret never appears in argv: ranks get it through an inherited pipe (local),\n"
                     "on standard input (ssh) or from GRIDBCAST_SECRET (external).");

  // simulate
  auto* sim_cmd = app.add_subcommand("simulate", "Predict broadcast times with a cost model (no network)");
  std::string s_topology, s_algorithm = "multilane", s_size = "64 MiB", s_scale, s_segment = "0";
  int s_root = 0;
  bool s_sweep = false, s_json = false;
  sim_cmd->add_option("TOPOLOGY", s_topology, "site-config YAML (default: the embedded default)");
  sim_cmd->add_option("--algorithm,-a", s_algorithm, "auto, all, or a comma-separated list of: " + algorithm_list())->capture_default_str();
  sim_cmd->add_option("--root,-r", s_root, "root rank")->capture_default_str();
  sim_cmd->add_option("--size,-s", s_size, "message size")->capture_default_str();
  sim_cmd->add_flag("--sweep", s_sweep, "sizes 1 KiB .. 256 MiB, x4");
  sim_cmd->add_option("--scale", s_scale, "a synthetic grid SITESxNODES instead of TOPOLOGY (2 x 10 Gbit NICs, 10 ms WAN), e.g. 10x1000");
  sim_cmd->add_option("--segment", s_segment, "pipelining segment; 0 = topology's or automatic")->capture_default_str();
  sim_cmd->add_flag("--json", s_json, "JSON lines, one per prediction");
  sim_cmd->footer("Examples:\n  gridbcast simulate site-configs/two-sites-16x16.yaml --algorithm all --sweep\n"
                  "  gridbcast simulate --scale 10x1000 --size 1GiB");

  // testbed
  testbed::TestbedCommand testbed_cmd(app);

  // rank (internal)
  auto* rank_cmd = app.add_subcommand("rank", "Run one rank (started by 'launch' or by srun/mpiexec with GRIDBCAST_LAUNCHER set)");
  rank_cmd->footer("Environment: GRIDBCAST_LAUNCHER=host:port, GRIDBCAST_JOB_ID, GRIDBCAST_RANK (or SLURM_PROCID,\n"
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*plan_cmd) {
      const Loaded l = load(plan_topology);
      const std::uint64_t size = parse_size_option(plan_size, "--size");
      const auto algo = resolve_algorithm(plan_algorithm, l.grid, size);
      const auto plan = topology::build_plan(l.grid, algo, plan_root, size);
      if (plan_format == "json") std::cout << topology::plan_to_json(l.grid, plan);
      else if (plan_format == "dot") std::cout << topology::plan_to_dot(l.grid, plan);
      else std::cout << topology::plan_to_text(l.grid, plan);
      if (plan_check) {
        const auto check = topology::verify_plan(l.grid, plan);
        for (const auto& e : check.errors) std::cerr << "gridbcast plan: property violated: " << e << "\n";
        if (!check.ok()) return 1;
        std::cerr << "gridbcast plan: all properties hold\n";
      }
      return 0;
    }
    if (*sim_cmd) {
      topology::Grid grid;
      if (!s_scale.empty()) {
        const auto x = s_scale.find('x');
        if (x == std::string::npos) throw CLI::ValidationError("--scale", "expected SITESxNODES, e.g. 10x1000");
        grid = topology::synthetic_grid(std::stoi(s_scale.substr(0, x)), std::stoi(s_scale.substr(x + 1)));
      } else {
        grid = load(s_topology).grid;
      }
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
      if (!s_json)
        std::cout << "# " << grid.name << ": " << grid.size() << " ranks in " << grid.sites.size()
                  << " site(s), root " << s_root << "\n"
                  << "# algorithm            size      predicted s   lower bound s   ratio  slowest rank\n";
      for (std::uint64_t size : sizes) {
        for (const auto& name : names) {
          const auto algo = resolve_algorithm(name, grid, size);
          const auto plan = topology::build_plan(grid, algo, s_root, size);
          const auto r = topology::simulate(grid, plan, model);
          const double lb = topology::lower_bound_seconds(grid, s_root, size);
          if (s_json) {
            std::cout << "{\"algorithm\": \"" << topology::algorithm_name(algo) << "\", \"ranks\": " << grid.size()
                      << ", \"size\": " << size << ", \"predicted_seconds\": " << r.makespan_s
                      << ", \"lower_bound_seconds\": " << lb << ", \"slowest_rank\": " << r.slowest_rank
                      << ", \"segments\": " << r.segments << "}\n";
          } else {
            std::printf("  %-18s %10s %14.6f %15.6f %7.2f  %d\n", std::string(topology::algorithm_name(algo)).c_str(),
                        topology::format_bytes(size).c_str(), r.makespan_s, lb, lb > 0 ? r.makespan_s / lb : 0.0,
                        r.slowest_rank);
          }
        }
      }
      return 0;
    }
    if (*rank_cmd) return runtime::run_rank(std::cin, std::cerr);
    if (testbed_cmd.selected()) return testbed_cmd.run();
    if (*launch_cmd) {
      Loaded l = load(l_topology);
      runtime::LaunchOptions o;
      o.params.algorithm = l_algorithm;
      if (l_algorithm != "auto" && l_algorithm != "random") (void)resolve_algorithm(l_algorithm, l.grid, 0);
      if (l_root < 0 || l_root >= l.grid.size())
        throw CLI::ValidationError("--root", "rank " + std::to_string(l_root) + " is outside 0.." + std::to_string(l.grid.size() - 1));
      o.params.root = l_root;
      o.params.iterations = l_iterations;
      o.params.random_roots = l_random_roots;
      o.params.random_sizes = l_random_sizes;
      o.params.seed = l_seed;
      o.params.segment_bytes = parse_size_option(l_segment, "--segment");
      o.params.timeout_ms = static_cast<std::int64_t>(l_timeout * 1000);
      o.params.verify = !l_no_verify;
      if (l_program_given) {
        if (l_program.empty()) throw CLI::ValidationError("--", "name the program every rank runs after --");
        o.params.program = true;
        o.program = l_program;
        // An MPI program waits as long as its peers compute: no progress deadline unless asked.
        if (!launch_cmd->count("--timeout")) o.params.timeout_ms = 0;
      }
      if (!l_file.empty()) {
        std::error_code ec;
        const auto fsize = std::filesystem::file_size(l_file, ec);
        if (ec) throw std::runtime_error("--file " + l_file + ": " + ec.message());
        o.params.file = std::filesystem::absolute(l_file).string();
        o.params.size = fsize;
        o.params.output = l_output;
        if (!o.params.output.empty() && o.params.output.back() == '/')
          o.params.output += std::filesystem::path(l_file).filename().string();
        if (l_random_sizes) throw CLI::ValidationError("--random-sizes", "cannot be used with --file");
      } else {
        o.params.size = parse_size_option(l_size, "--size");
      }
      o.grid = std::move(l.grid);
      o.yaml_text = std::move(l.yaml);
      o.listen_address = l_listen;
      o.listen_port = l_port;
      o.startup_timeout_ms = static_cast<std::int64_t>(l_startup * 1000);
      o.json = l_json;
      o.progress = ::isatty(2) && o.params.iterations > 1;
      const std::string exe = l_exe.empty() ? self_exe() : l_exe;
      // `gridbcast testbed run` selects the netns backend through the environment.
      if (const char* b = std::getenv("GRIDBCAST_BACKEND"); b && *b && !launch_cmd->count("--backend")) l_backend = b;
      std::unique_ptr<runtime::Backend> backend;
      std::vector<std::string> command{exe, "rank"};
      if (o.params.program) {
        command = l_program;
        if (l_backend == "local") command[0] = resolve_program(command[0]);
        if (l_backend == "netns")
          throw CLI::ValidationError("--backend", "netns does not run programs yet (launch -- PROGRAM); use local");
      }
      if (l_backend == "local") backend = runtime::make_local_backend(command);
      else if (l_backend == "ssh") backend = runtime::make_ssh_backend(l_ssh, command);
      else if (l_backend == "external") backend = runtime::make_external_backend();
      else if (l_backend == "netns") {
        auto netns = testbed::make_netns_launch(o.grid, exe);
        if (!launch_cmd->count("--listen")) o.listen_address = netns.listen_address;
        backend = std::move(netns.backend);
      } else throw CLI::ValidationError("GRIDBCAST_BACKEND", "\"" + l_backend + "\" is not local, ssh, netns or external");
      return runtime::launch(o, *backend, std::cout, std::cerr);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const topology::ConfigError& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
