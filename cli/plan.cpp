// gridbcast plan: the broadcast plan of a topology, as text, JSON or dot.
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/json_out.hpp"
#include "lanes/log.hpp"
#include "topology/bound.hpp"
#include "topology/plan/format.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/verify.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

struct Plan {
  CLI::App* plan_cmd = nullptr;
  TopologyOptions plan_topology_options;
  std::string plan_algorithm = "auto", plan_format = "text", plan_size = "1 MiB";
  int plan_root = 0;
  bool plan_check = false;

  explicit Plan(CLI::App& app) {
    plan_cmd = app.add_subcommand(
        "plan", "Print the broadcast plan (who sends what to whom) for a topology");
    plan_cmd->add_option("TOPOLOGY", plan_topology_options.path,
                         "site-config YAML (default: the embedded default)");
    add_topology_options(plan_cmd, plan_topology_options, true, /*short_f=*/false);
    plan_cmd->add_option("--algorithm,-a", plan_algorithm, "auto or one of: " + algorithm_list())
        ->capture_default_str();
    plan_cmd->add_option("--root,-r", plan_root, "root rank")->capture_default_str();
    plan_cmd->add_option("--size,-s", plan_size, "message size, e.g. 4096, \"64 MiB\"")
        ->capture_default_str();
    plan_cmd->add_option("--format,-f", plan_format, "text, json or dot")
        ->check(CLI::IsMember({"text", "json", "dot"}))
        ->capture_default_str();
    plan_cmd->add_flag("--check", plan_check,
                       "verify coverage, causality, exactness and the multilane invariants; exit 1 "
                       "on a violation");
    plan_cmd->footer(
        "Example:\n  gridbcast plan site-configs/two-sites-16x16.yaml --algorithm multilane --size "
        "64MiB --format json");
  }

  int run() {
    const Loaded l = load(plan_topology_options);
    check_root(plan_root, l.grid);
    const std::uint64_t size = parse_size_option(plan_size, "--size");
    const auto algo = resolve_algorithm(plan_algorithm, l.grid, size, plan_root);
    if (plan_algorithm == "auto")  // what auto chose, and what the model predicts of each candidate
      lanes::log::notice(
          "gridbcast plan: " +
          topology::describe(topology::select_broadcast(
              l.grid, plan_root, size, topology::SelectionThresholds::from_environment())));
    if (std::any_of(l.grid.wan.begin(), l.grid.wan.end(), [](const auto& w) { return w.loss > 0; }))
      for (const auto& sf :
           topology::stream_shortfalls(l.grid, topology::Congestion::kLossBased,
                                       topology::max_flow_bound(l.grid, plan_root).rate_bps))
        lanes::log::notice("gridbcast plan: " + topology::describe(l.grid, sf));
    const auto plan = topology::build_plan(l.grid, algo, plan_root, size);
    if (plan_format == "json")
      write_json(std::cout, plan_json(l.grid, plan));
    else if (plan_format == "dot")
      std::cout << topology::plan_to_dot(l.grid, plan);
    else
      std::cout << topology::plan_to_text(l.grid, plan);
    if (plan_check) {
      const auto check = topology::verify_plan(l.grid, plan);
      for (const auto& e : check.errors)
        std::cerr << "gridbcast plan: property violated: " << e << "\n";
      if (!check.ok()) {
        // --format json: the plan, then the error object as the last line.
        if (plan_format == "json") {
          Json e = error_json("plan", "property violated: " + check.errors.front(), 1);
          e["error"]["violations"] = check.errors;
          write_json(std::cout, e);
        }
        return 1;
      }
      lanes::log::notice("gridbcast plan: all properties hold");
    }
    return 0;
  }
};

}  // namespace

Command register_plan(CLI::App& app) {
  auto c = std::make_shared<Plan>(app);
  return {c->plan_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
