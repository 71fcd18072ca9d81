// gridbcast bench: broadcast times over sizes x algorithms (table, JSON, CSV, SVG).
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/bench_report.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/launch_report.hpp"
#include "job/launcher.hpp"
#include "lanes/log.hpp"
#include "topology/bound.hpp"
#include "topology/plan/plan.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

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

struct Bench {
  CLI::App* bench_cmd = nullptr;
  TopologyOptions b_topology_options;
  std::string b_sizes = "1KiB:64MiB", b_algorithms = "all", b_method = "ack", b_plot,
              b_target = "3%";
  int b_root = 0;
  bool b_json = false, b_csv = false;
  RunOptions b_run;
  job::BenchSpec b_spec;

  explicit Bench(CLI::App& app) {
    bench_cmd = app.add_subcommand(
        "bench",
        "Measure broadcast time over sizes x algorithms (OSU-style table, JSON, CSV, SVG plot)");
    bench_cmd->add_option("TOPOLOGY", b_topology_options.path,
                          "site-config YAML (default: the embedded default)");
    add_topology_options(bench_cmd, b_topology_options);
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
    bench_cmd
        ->add_option("--max-iterations", b_spec.max_iterations, "the cap on samples per series")
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
    bench_cmd->add_option(
        "--plot", b_plot,
        "also write an SVG plot: time against size, log-log, a line per algorithm, "
        "the max-flow and the simple bound dashed");
    add_run_options(bench_cmd, b_run);
    bench_cmd->footer(
        "Examples:\n  gridbcast bench                                   # embedded default, 1 KiB "
        ".. "
        "64 MiB, every algorithm\n"
        "  gridbcast bench --sizes 1MiB:64MiB --algorithms multilane,binary --plot bench.svg\n"
        "  gridbcast bench --method barrier --csv > bench.csv\n"
        "  gridbcast testbed run site-configs/testbed-8x8.yaml -- gridbcast bench "
        "site-configs/testbed-8x8.yaml --sizes 1KiB,64MiB\n"
        "Bound(us) is the max-flow lower bound and x bound Max over it; Simple(us) is the simple "
        "bound (docs/ALGORITHMS.md); every copy is verified after each point.");
  }

  int run() {
    Loaded l = load(b_topology_options);
    slurm_default_backend(bench_cmd, l, b_run);
    job::LaunchOptions o;
    check_root(b_root, l.grid);
    b_spec.sizes = parse_sizes(b_sizes);
    if (b_algorithms == "all") {
      // Every algorithm this grid can run; a skipped one says why.
      for (const auto& a : topology::algorithms()) {
        if (const std::string why = topology::algorithm_unavailable(l.grid, a.id); !why.empty()) {
          std::cerr << "gridbcast bench: skipping " << a.name << ": " << why << "\n";
          continue;
        }
        b_spec.algorithms.emplace_back(a.name);
      }
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
        throw CLI::ValidationError("--target-stdev",
                                   "expected a share such as 3% or 0.03, not \"" + b_target + "\"");
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
    const bool progress = ::isatty(2) && lanes::log::enabled(lanes::log::Level::kNotice);
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
      cli::print_failure(std::cerr, std::cout, "bench", result, b_json);
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
};

}  // namespace

Command register_bench(CLI::App& app) {
  auto c = std::make_shared<Bench>(app);
  return {c->bench_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
