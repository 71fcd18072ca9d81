// What several subcommands share: loading a topology, sizes and algorithms
// given as options, and the options and backend that start the ranks.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job/launcher.hpp"
#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"
#include "topology/simulate.hpp"

namespace gridbcast::cli {

// A topology and its YAML text; an empty path is the embedded default.
struct Loaded {
  topology::Grid grid;
  std::string yaml;
  bool slurm = false;  // taken from SLURM_JOB_NODELIST (load(TopologyOptions))
};

Loaded load(const std::string& path);

// Where a command's topology comes from: the TOPOLOGY file (or the embedded
// default), --hosts or --hostfile (topology/hosts.hpp), and the overrides of
// its NIC and WAN figures.
struct TopologyOptions {
  std::string path;  // the TOPOLOGY positional
  std::string hosts, hostfile;
  std::string nic_bandwidth, wan_latency, wan_bandwidth, congestion;
  int streams = 0;
  int lanes = 0;            // --lanes; 0: the topology's
  bool pace_lanes = false;  // --pace-lanes; false: the topology's
  std::string max_rate;     // --max-rate; empty: the topology's defaults.max_rate
};

// The options above on `cmd` (the positional is the command's own);
// `congestion`: whether to add --congestion too (simulate has its own);
// `short_f`: -f for --hostfile, as mpiexec has it (plan's -f is --format).
void add_topology_options(CLI::App* cmd, TopologyOptions& t, bool congestion = true,
                          bool short_f = true);

// The topology `t` names, overrides applied; giving more than one of
// TOPOLOGY, --hosts and --hostfile is a usage error. Given none of them inside
// a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST set), the
// allocation's nodes, one rank per node, said on stderr.
Loaded load(const TopologyOptions& t);

// topology::parse_size, a bad value reported as a usage error naming `option`.
std::uint64_t parse_size_option(const std::string& text, const char* option);

// "multilane, binomial, ...": every algorithm's name.
std::string algorithm_list();

// "auto" (topology::select_algorithm: the cost model's choice, or the
// thresholds' rule where the environment gives thresholds) or an
// algorithm's name; anything else is a usage error (--algorithm).
topology::Algorithm resolve_algorithm(const std::string& name, const topology::Grid& g,
                                      std::uint64_t size, int root = 0,
                                      const topology::CostModel& model = {});

// A --root outside the grid is a bad value (exit 2), not a failure of the run.
void check_root(int root, const topology::Grid& g);

// How ranks are started and reached: the options `launch` and `bench` share.
struct RunOptions {
  std::string backend = "local", ssh = "ssh", exe, listen = "127.0.0.1", segment = "0", cert_dir;
  double timeout = 30, startup = 60, silence = 30;
  bool tag_output = false, timestamp_output = false;
  std::uint16_t port = 0;
};

void add_run_options(CLI::App* cmd, RunOptions& r);

// A topology from SLURM_JOB_NODELIST makes srun the default backend (an
// explicit --backend or GRIDBCAST_BACKEND wins).
void slurm_default_backend(CLI::App* cmd, const Loaded& l, RunOptions& r);

// Fills the launch options `r` decides and returns the backend that starts the
// ranks (`command`: what each rank runs; empty: `gridbcast rank`).
std::unique_ptr<job::Backend> make_backend(CLI::App* cmd, RunOptions& r, job::LaunchOptions& o,
                                           std::vector<std::string> command = {});

}  // namespace gridbcast::cli
