// gridbcast simulate: predicted broadcast times from the cost model (no network).
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/json_out.hpp"
#include "topology/bound.hpp"
#include "topology/loader.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

struct Simulate {
  CLI::App* sim_cmd = nullptr;
  TopologyOptions s_topology_options;
  std::string s_algorithm = "multilane", s_size = "64 MiB", s_scale, s_segment = "0";
  bool s_mixed_nics = false;
  int s_root = 0;
  bool s_sweep = false, s_json = false;
  std::string s_congestion = "cubic";

  explicit Simulate(CLI::App& app) {
    sim_cmd =
        app.add_subcommand("simulate", "Predict broadcast times with a cost model (no network)");
    sim_cmd->add_option("TOPOLOGY", s_topology_options.path,
                        "site-config YAML (default: the embedded default)");
    add_topology_options(sim_cmd, s_topology_options, /*congestion=*/false);
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
    sim_cmd->add_flag(
        "--mixed-nics", s_mixed_nics,
        "with --scale: nodes of 2 x 10, 25 + 10, 4 x 10 and 1 x 40 Gbit NICs in turn");
    sim_cmd->add_option("--segment", s_segment, "pipelining segment; 0 = topology's or automatic")
        ->capture_default_str();
    sim_cmd
        ->add_option("--congestion", s_congestion,
                     "the hosts' default TCP congestion control, for links whose topology names "
                     "none (reno and cubic are held to the Mathis limit under loss, bbr is not); "
                     "see /proc/sys/net/ipv4/tcp_congestion_control")
        ->check(CLI::IsMember({"reno", "cubic", "bbr"}))
        ->capture_default_str();
    sim_cmd->add_flag("--json", s_json, "JSON lines, one per prediction");
    sim_cmd->footer(
        "Examples:\n  gridbcast simulate site-configs/two-sites-16x16.yaml --algorithm all "
        "--sweep\n"
        "  gridbcast simulate --scale 10x1000 --size 1GiB");
  }

  int run() {
    topology::Grid grid;
    if (!s_scale.empty()) {
      const auto x = s_scale.find('x');
      if (x == std::string::npos)
        throw CLI::ValidationError("--scale", "expected SITESxNODES, e.g. 10x1000");
      grid = topology::synthetic_grid(std::stoi(s_scale.substr(0, x)),
                                      std::stoi(s_scale.substr(x + 1)), s_mixed_nics);
      grid.lanes = s_topology_options.lanes;
    } else {
      if (s_mixed_nics) throw CLI::ValidationError("--mixed-nics", "needs --scale");
      grid = load(s_topology_options).grid;
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
      for (const auto& a : topology::algorithms()) {
        if (const std::string why = topology::algorithm_unavailable(grid, a.id); !why.empty()) {
          std::cerr << "gridbcast simulate: skipping " << a.name << ": " << why << "\n";
          continue;
        }
        names.emplace_back(a.name);
      }
    } else {
      std::stringstream ss(s_algorithm);
      for (std::string n; std::getline(ss, n, ',');) names.push_back(n);
    }
    topology::CostModel model;
    model.segment_bytes = parse_size_option(s_segment, "--segment");
    model.congestion = *topology::parse_congestion(s_congestion);
    if (!s_json)
      std::cout << "# " << grid.name << ": " << grid.size() << " ranks in " << grid.sites.size()
                << " site(s), root " << s_root << ", " << grid.lane_count()
                << " lanes, TCP congestion control " << s_congestion << "\n"
                << "# ratio: predicted over the max-flow bound; simple: the old bound "
                   "(docs/ALGORITHMS.md)\n"
                << "# algorithm            size      predicted s    max-flow s      simple s   "
                   "ratio  slowest rank\n";
    const topology::MaxFlowBound s_bound = topology::max_flow_bound(grid, s_root);
    for (std::uint64_t size : sizes) {
      for (const auto& name : names) {
        const auto algo = resolve_algorithm(name, grid, size, s_root, model);
        const auto plan = topology::build_plan(grid, algo, s_root, size);
        // Past the simulator's budget of segments, the one-pass estimate
        // (topology/select.hpp), said so on stderr and in the row.
        const std::uint64_t segments = topology::simulated_segments(grid, plan, model);
        const bool analytic = segments > topology::kMaxSimulatedSegments;
        topology::SimResult r;
        if (analytic) {
          std::cerr << "gridbcast simulate: " << topology::algorithm_name(algo) << " at "
                    << topology::format_bytes(size) << " cuts into " << segments
                    << " segments, more than the simulator holds ("
                    << topology::kMaxSimulatedSegments << "): priced analytically\n";
          r.makespan_s = topology::analytic_seconds(
              grid, plan, topology::resolve_segment_bytes(grid, plan, model.segment_bytes), model);
          r.slowest_rank = -1;
          r.segments = segments;
        } else {
          r = topology::simulate(grid, plan, model);
        }
        const double lb = topology::lower_bound_seconds(grid, s_root, size);
        const double mf = s_bound.seconds(size);
        if (s_json) {
          const double ratio = mf > 0 ? r.makespan_s / mf : 0.0;
          write_json(std::cout, Json{{"algorithm", topology::algorithm_name(algo)},
                                     {"ranks", grid.size()},
                                     {"size", size},
                                     {"predicted_seconds", number(r.makespan_s)},
                                     {"lower_bound_seconds", number(lb)},
                                     {"max_flow_bound_seconds", number(mf)},
                                     {"ratio_to_max_flow_bound", number(ratio)},
                                     {"slowest_rank", r.slowest_rank},
                                     {"segments", r.segments},
                                     {"method", analytic ? "analytic" : "simulated"}});
        } else {
          std::printf("  %-18s %10s %14.6f %13.6f %13.6f %7.2f  %s\n",
                      std::string(topology::algorithm_name(algo)).c_str(),
                      topology::format_bytes(size).c_str(), r.makespan_s, mf, lb,
                      mf > 0 ? r.makespan_s / mf : 0.0,
                      analytic ? "(analytic)" : std::to_string(r.slowest_rank).c_str());
        }
      }
    }
    return 0;
  }
};

}  // namespace

Command register_simulate(CLI::App& app) {
  auto c = std::make_shared<Simulate>(app);
  return {c->sim_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
