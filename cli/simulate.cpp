// gridbcast simulate: predicted broadcast times from the cost model (no network).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/heal_scenario.hpp"
#include "cli/json_out.hpp"
#include "runtime/subgrid.hpp"
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
  std::string s_lose, s_slow, s_digest_rate = "8 Gbit";
  double s_at = 0.3;

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
    sim_cmd->add_option("--lose", s_lose,
                        "a scenario: this node (name or rank) is lost at --at, and the others "
                        "heal as launch does (a new run over them with --resume); prints when "
                        "they are done against the undisturbed prediction");
    sim_cmd->add_option("--slow", s_slow,
                        "a scenario: NODE:RATE, this node (name or rank) slows to RATE (all its "
                        "NICs together) at --at "
                        "and is set aside as a straggler (launch --stragglers after); prints "
                        "when the others and when it are done");
    sim_cmd
        ->add_option("--at", s_at,
                     "when --lose or --slow happens, as a fraction of the "
                     "undisturbed prediction")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    sim_cmd
        ->add_option("--digest-rate", s_digest_rate,
                     "--lose/--slow: what the root's core digests (SHA-256) a second, for the "
                     "resume check")
        ->capture_default_str();
    sim_cmd->add_flag("--json", s_json, "JSON lines, one per prediction");
    sim_cmd->footer(
        "Examples:\n  gridbcast simulate site-configs/two-sites-16x16.yaml --algorithm all "
        "--sweep\n"
        "  gridbcast simulate --scale 10x1000 --size 1GiB\n"
        "  gridbcast simulate --scale 10x1000 --size 16GiB --slow s1n500:100Mbit --at 0.3");
  }

  // The prediction for one broadcast: simulated, or priced analytically past
  // the simulator's budget of segments (then `analytic` is set).
  static topology::SimResult predict(const topology::Grid& grid, topology::Algorithm algo, int root,
                                     std::uint64_t size, const topology::CostModel& model,
                                     bool& analytic) {
    const auto plan = topology::build_plan(grid, algo, root, size);
    const std::uint64_t segments = topology::simulated_segments(grid, plan, model);
    analytic = segments > topology::kMaxSimulatedSegments;
    if (!analytic) return topology::simulate(grid, plan, model);
    topology::SimResult r;
    r.makespan_s = topology::analytic_seconds(
        grid, plan, topology::resolve_segment_bytes(grid, plan, model.segment_bytes), model);
    r.slowest_rank = -1;
    r.segments = segments;
    return r;
  }

  // --lose / --slow: the undisturbed prediction, then the heal's
  // (cli/heal_scenario.hpp) over the others.
  int scenario(const topology::Grid& grid) {
    if (!s_lose.empty() && !s_slow.empty())
      throw CLI::ValidationError("--slow", "give --lose or --slow, not both");
    if (s_sweep) throw CLI::ValidationError("--sweep", "a scenario takes one --size");
    const bool slow = !s_slow.empty();
    std::string who = slow ? s_slow : s_lose;
    double slow_rate = 0;
    if (slow) {
      const auto colon = who.rfind(':');
      if (colon == std::string::npos)
        throw CLI::ValidationError("--slow", "expected NODE:RATE, e.g. s1n5:100Mbit");
      try {
        slow_rate = topology::parse_bandwidth(who.substr(colon + 1)) / 8;
      } catch (const std::exception& e) {
        throw CLI::ValidationError("--slow", e.what());
      }
      who.resize(colon);
    }
    const char* option = slow ? "--slow" : "--lose";
    int victim = -1;
    for (int r = 0; r < grid.size(); ++r)
      if (grid.nodes[static_cast<size_t>(r)].name == who) victim = r;
    if (victim < 0 && !who.empty() && who.find_first_not_of("0123456789") == std::string::npos &&
        who.size() < 10)
      victim = std::stoi(who);
    if (victim < 0 || victim >= grid.size())
      throw CLI::ValidationError(option, "no node " + who + " in " + grid.name + " (" +
                                             std::to_string(grid.size()) + " ranks)");
    if (victim == s_root)
      throw CLI::ValidationError(option,
                                 "the root cannot be healed around: a lost root fails the job");
    HealCosts costs;
    try {
      costs.digest_bytes_per_s = topology::parse_bandwidth(s_digest_rate) / 8;
    } catch (const std::exception& e) {
      throw CLI::ValidationError("--digest-rate", e.what());
    }
    topology::CostModel model;
    model.segment_bytes = parse_size_option(s_segment, "--segment");
    model.congestion = *topology::parse_congestion(s_congestion);
    HealScenario sc;
    sc.bytes = parse_size_option(s_size, "--size");
    sc.at_fraction = s_at;
    sc.slow = slow;
    sc.slow_bytes_per_s = slow_rate;
    const auto algo = resolve_algorithm(s_algorithm, grid, sc.bytes, s_root, model);
    bool analytic = false, analytic_others = false;
    sc.undisturbed_s = predict(grid, algo, s_root, sc.bytes, model, analytic).makespan_s;
    std::vector<int> others;
    for (int r = 0; r < grid.size(); ++r)
      if (r != victim) others.push_back(r);
    const topology::Grid rest = runtime::restrict_grid(grid, others);
    const int rest_root = s_root < victim ? s_root : s_root - 1;
    sc.survivors_s = predict(rest, resolve_algorithm(s_algorithm, rest, sc.bytes, rest_root, model),
                             rest_root, sc.bytes, model, analytic_others)
                         .makespan_s;
    const HealPrediction p = predict_heal(sc, costs);
    const std::string node = grid.nodes[static_cast<size_t>(victim)].name;
    const double u = sc.undisturbed_s;
    if (s_json) {
      Json j{{"algorithm", topology::algorithm_name(algo)},
             {"ranks", grid.size()},
             {"size", sc.bytes},
             {"node", node},
             {"rank", victim},
             {"event", slow ? "slow" : "lost"},
             {"at_seconds", number(p.happens_s)},
             {"undisturbed_seconds", number(u)},
             {"noticed_seconds", number(p.noticed_s)},
             {"held_bytes", p.held_bytes},
             {"check_seconds", number(p.check_s)},
             {"others_seconds", number(p.others_s)},
             {"others_ratio", number(u > 0 ? p.others_s / u : 0)},
             {"method", analytic || analytic_others ? "analytic" : "simulated"}};
      if (slow) {
        j["slow_rate_bytes_per_second"] = number(slow_rate);
        j["straggler_seconds"] = number(p.straggler_s);
      }
      write_json(std::cout, j);
      return 0;
    }
    std::cout << "# " << grid.name << ": " << grid.size() << " ranks, root " << s_root << ", "
              << topology::algorithm_name(algo) << ", " << topology::format_bytes(sc.bytes)
              << (analytic || analytic_others ? " (priced analytically)" : "") << "\n"
              << "# " << node << " (rank " << victim << ") "
              << (slow ? "slows to " + topology::format_bandwidth(8 * slow_rate)
                       : std::string("is lost"))
              << " at " << std::lround(100 * s_at) << " %; healed as launch does (docs/FILES.md)\n";
    std::printf("  undisturbed            %10.3f s\n", u);
    std::printf("  %-22s %10.3f s\n", slow ? "slowed" : "lost", p.happens_s);
    std::printf("  %-22s %10.3f s  (%s held by every other node, whole windows)\n",
                slow ? "set aside" : "noticed", p.noticed_s,
                topology::format_bytes(p.held_bytes).c_str());
    std::printf("  resume check           %10.3f s\n", p.check_s);
    std::printf("  the others done        %10.3f s = %.2f x the undisturbed\n", p.others_s,
                u > 0 ? p.others_s / u : 0.0);
    if (slow)
      std::printf("  %-22s %10.3f s  (from the root alone, at its rate)\n",
                  (node + " done").c_str(), p.straggler_s);
    return 0;
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
    if (!s_lose.empty() || !s_slow.empty()) return scenario(grid);
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
