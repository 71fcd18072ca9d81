// gridbcast launch: start one rank per node and broadcast, or run a program on every rank.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/file_job.hpp"
#include "cli/launch_report.hpp"
#include "cli/probe.hpp"
#include "cli/usage.hpp"
#include "files/file_sink.hpp"
#include "files/file_source.hpp"
#include "files/file_tree.hpp"
#include "job/heal.hpp"
#include "job/launcher.hpp"
#include "lanes/log.hpp"
#include "topology/bound.hpp"
#include "topology/emit.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

struct Launch {
  CLI::App* launch_cmd = nullptr;
  TopologyOptions l_topology_options;
  std::string l_algorithm = "auto", l_size = "64 MiB", l_output = "/tmp/gridbcast/{node}/";
  std::vector<std::string> l_files;
  int l_root = 0, l_iterations = 1;
  RunOptions l_run;
  std::uint64_t l_seed = 1;
  bool l_json = false, l_no_verify = false, l_random_roots = false, l_random_sizes = false;
  std::string l_progress;
  std::string l_window = "64 MiB";
  bool l_resume = false;
  std::string l_compress = "auto";
  std::string l_require = "1";
  std::string l_stragglers = "after";
  std::vector<std::string> l_program;
  bool l_program_given = false;
  bool l_probe = false, l_no_probe = false;
  double l_probe_max_age = 0;

  Launch(CLI::App& app, std::optional<std::vector<std::string>> program)
      : l_program(program.value_or(std::vector<std::string>{})),
        l_program_given(program.has_value()) {
    launch_cmd = app.add_subcommand("launch",
                                    "Start one rank per node and broadcast (the main job), or "
                                    "run a program on every rank (-- PROGRAM)");
    launch_cmd->add_option(
        "TOPOLOGY", l_topology_options.path,
        "site-config YAML (default: the embedded default, 2 sites x 4 nodes on loopback)");
    add_topology_options(launch_cmd, l_topology_options);
    launch_cmd->add_option("--size,-s", l_size, "bytes to broadcast, e.g. 1048576, \"64 MiB\"")
        ->capture_default_str();
    launch_cmd
        ->add_option("--file", l_files,
                     "broadcast this file or directory (recursively, symlinks as links) "
                     "instead of generated data; repeat for several, each copied under its name "
                     "into the --output directory (- reads standard input, spooled to $TMPDIR "
                     "first; docs/FILES.md)")
        ->allow_extra_args(false);
    launch_cmd
        ->add_option("--output,-o", l_output,
                     "where other ranks write --file; {node} and {rank} are replaced; a trailing / "
                     "appends the file name; with several files, the directory they go into")
        ->capture_default_str();
    launch_cmd
        ->add_option("--window", l_window,
                     "memory per rank for --file data in flight (the file may be larger)")
        ->capture_default_str();
    launch_cmd->add_flag(
        "--resume", l_resume,
        "--file: keep the chunks each copy (or the partial copy an interrupted run "
        "left) already holds, checked against the digests; move only the rest");
    launch_cmd
        ->add_option("--compress", l_compress,
                     "--file: send chunks packed by zstd (zstd), as they are (off), or packed "
                     "when the root's samples of the file say that beats the network (auto: "
                     "compressible data on links slower than compression); copies are stored "
                     "as they were and checked against the same digests")
        ->capture_default_str();
    launch_cmd
        ->add_option("--require", l_require,
                     "broadcasts (--size, --file): how many nodes, the root included, must end "
                     "with a verified copy: all, a count, or a percentage (90%); a node lost "
                     "mid-job (died, silent, cut off from its peers) is healed around while at "
                     "least that many remain "
                     "(exit status 3), else the job fails")
        ->capture_default_str();
    launch_cmd
        ->add_option("--stragglers", l_stragglers,
                     "broadcasts: after (a node whose own links carry under a third of their "
                     "declared rate with data waiting for 3 s is set aside, the others finish "
                     "without it, then it gets its copy from the root at its own pace) or off "
                     "(everybody waits for it)")
        ->check(CLI::IsMember({"after", "off"}))
        ->capture_default_str();
    launch_cmd->add_flag("--probe", l_probe,
                         "measure the network first (gridbcast probe: a few seconds of traffic "
                         "between the nodes), then plan, pace and report against what was "
                         "measured; the topology's defaults.probe: true does the same");
    launch_cmd->add_flag("--no-probe", l_no_probe, "do not probe, whatever the topology says");
    launch_cmd
        ->add_option("--probe-max-age", l_probe_max_age,
                     "with --probe: reuse the last probe's result (TOPOLOGY.probe.yaml beside "
                     "the file) if it is at most this many seconds old")
        ->check(CLI::NonNegativeNumber);
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
  }

  int run() {
    // `--file -`: the spooled copy of standard input, removed when the job ends.
    struct Spool {
      std::string path;
      ~Spool() {
        if (!path.empty()) ::unlink(path.c_str());
      }
    } spool;
    Loaded l = load(l_topology_options);
    slurm_default_backend(launch_cmd, l, l_run);
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
      if (launch_cmd->count("--require"))
        throw CLI::ValidationError(
            "--require", "applies to broadcasts: an MPI program ends when a rank is lost");
      if (launch_cmd->count("--stragglers"))
        throw CLI::ValidationError("--stragglers", "applies to broadcasts, not to -- PROGRAM");
      o.params.kind = job::JobKind::kProgram;
      o.program = l_program;
    }
    if (l_stragglers == "after" && !o.params.program() && !l_random_roots)
      o.stragglers = job::StragglerRule{};
    if (!l_files.empty()) {
      if (launch_cmd->count("--size"))
        throw CLI::ValidationError("--size", "cannot be used with --file: the file's size is sent");
      if (l_random_sizes)
        throw CLI::ValidationError("--random-sizes", "cannot be used with --file");
      if (l_random_roots)
        throw CLI::ValidationError("--random-roots",
                                   "cannot be used with --file: the file is on the root's host");
      FileJobRequest fr;
      fr.files = l_files;
      fr.output = l_output;
      fr.window_bytes = parse_size_option(l_window, "--window");
      fr.resume = l_resume;
      fr.compress = l_compress;
      fr.one_host = l_run.backend == "local" || l_run.backend == "netns";
      fr.root = l_root;
      spool.path = prepare_file_job(fr, l.grid, o.params);
    } else {
      for (const char* opt : {"--output", "--window", "--resume", "--compress"})
        if (launch_cmd->count(opt)) throw CLI::ValidationError(opt, "only applies to --file");
      o.params.size = parse_size_option(l_size, "--size");
    }
    // --probe: plan from the measured network (topology/probe.hpp).
    std::optional<Probed> probed;
    const topology::Grid declared = l.grid;
    if ((l_probe || l.grid.probe) && !l_no_probe) {
      if (o.params.program())
        throw CLI::ValidationError("--probe", "applies to broadcasts, not to -- PROGRAM");
      const std::string cache = probe_cache_path(l_topology_options, declared);
      if (launch_cmd->count("--probe-max-age"))
        probed = load_cached_probe(cache, declared, l_probe_max_age);
      if (probed) {
        lanes::log::notice("gridbcast launch: planning from the probe of " +
                           topology::format_duration(probed->age_s) + " ago (" + cache + ")");
      } else {
        lanes::log::notice(
            "gridbcast launch: probing the network first (a few seconds of "
            "traffic between the nodes; --no-probe skips it)");
        job::LaunchResult failure;
        probed = run_probe(launch_cmd, l_run, declared, topology::ProbeSettings{}, failure);
        if (!probed) {
          print_failure(std::cerr, std::cout, "launch", failure, l_json);
          return failure.status;
        }
        lanes::log::notice("gridbcast launch: probed in " +
                           topology::format_duration(probed->seconds) + "; " +
                           std::to_string(probed->estimate.flagged) +
                           " figure(s) more than 25 % off the topology's (gridbcast probe "
                           "lists them)");
        try {
          if (!cache.empty()) write_file_atomically(cache, probed->yaml);
        } catch (const std::exception& e) {
          lanes::log::notice(std::string("gridbcast launch: cannot keep the probe's result: ") +
                             e.what());
        }
      }
      l.grid = probed->estimate.measured;
      l.yaml = topology::grid_to_yaml(l.grid);
    }
    o.grid = std::move(l.grid);
    o.yaml_text = std::move(l.yaml);
    // Progress: a line on a terminal (stderr, so stdout stays the summary),
    // and with --progress one JSON record a second to a file or stderr.
    const bool progress_line =
        ::isatty(2) && ::isatty(1) && !l_json && lanes::log::enabled(lanes::log::Level::kNotice);
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
    // A lossy WAN link whose streams hold the broadcast below its rate.
    if (std::any_of(o.grid.wan.begin(), o.grid.wan.end(), [](const auto& w) { return w.loss > 0; }))
      for (const auto& sf :
           topology::stream_shortfalls(o.grid, topology::Congestion::kLossBased,
                                       topology::max_flow_bound(o.grid, o.params.root).rate_bps))
        lanes::log::notice("gridbcast launch: " + topology::describe(o.grid, sf));
    if (!o.params.program() && o.params.algorithm == "auto" && o.params.iterations > 0)
      lanes::log::info("gridbcast launch: " +
                       topology::describe(topology::select_broadcast(
                           o.grid, o.params.root, o.params.size,
                           topology::SelectionThresholds::from_environment())));
    auto backend = make_backend(launch_cmd, l_run, o, l_program);
    // An MPI program waits as long as its peers compute: no progress deadline
    // unless asked (a rank that stops or dies is still noticed: heartbeats).
    if (o.params.program() && !launch_cmd->count("--timeout")) o.params.timeout_ms = 0;
    const int required = required_nodes(o.grid.size());
    job::LaunchResult result = job::launch(o, *backend, std::cerr);
    backend->drain_output(std::chrono::seconds(2));  // ranks' last lines before the summary
    // Healing (broadcasts, not programs): after each run, job::Healer says
    // which comes next (the survivors of a loss, the same ranks around a
    // cut WAN link, the stragglers after the others) or that the job is
    // over. docs/FILES.md, "When a node is lost".
    static_assert(job::kExitCompletedOnSurvivors == cli::kExitCompletedOnSurvivors);
    job::HealSettings heal;
    heal.required = required;
    heal.heal =
        !o.params.program() && o.params.kind == job::JobKind::kBroadcast && !o.params.random_roots;
    heal.files = !l_files.empty();
    // One regular file (a directory's copy is not sent from).
    heal.one_file = o.params.files.size() == 1 && o.params.file_count == 1 &&
                    std::filesystem::is_regular_file(o.params.files.front());
    job::Healer healer(o.grid, o.params.root, heal, [](const std::string& line) {
      lanes::log::notice("gridbcast launch: " + line);
    });
    for (auto next = healer.run_ended(std::move(result)); next;
         next = healer.run_ended(std::move(result))) {
      o.grid = std::move(next->grid);
      o.params.root = next->root;
      o.params.rank_labels = std::move(next->labels);
      o.params.resume = o.params.resume || next->resume;
      if (next->source_is_copy) {
        // Its own copy is the source: the first root's device and inode
        // mean nothing on its host (the header carries its copy's).
        o.params.source_is_copy = true;
        o.params.source_dev = o.params.source_ino = 0;
      }
      if (!next->watch_stragglers) o.stragglers.reset();
      if (next->topology_yaml) o.yaml_text = std::move(*next->topology_yaml);
      backend = make_backend(launch_cmd, l_run, o, l_program);
      result = job::launch(o, *backend, std::cerr);
      backend->drain_output(std::chrono::seconds(2));
    }
    result = healer.outcome();
    if (line_shown) std::cerr << "\r" << std::string(100, ' ') << "\r" << std::flush;
    if (result.status != 0) {
      for (const auto& m : healer.missing())
        lanes::log::notice("gridbcast launch: lost rank " + std::to_string(m.rank) + " (" + m.node +
                           ") before: " + m.cause);
      cli::print_failure(std::cerr, std::cout, "launch", result, l_json);
      if (!l_files.empty()) {
        // A rank whose copy could not be written relays the file for the
        // others (docs/FILES.md), so theirs may be whole.
        std::vector<int> whole;
        for (const auto& h : result.held)
          if (h.rank != o.params.root) whole.push_back(h.rank);
        std::sort(whole.begin(), whole.end());
        whole.erase(std::unique(whole.begin(), whole.end()), whole.end());
        if (!whole.empty()) {
          std::string names;
          for (size_t i = 0; i < whole.size() && i < 8; ++i)
            names += (i ? ", " : "") + o.grid.nodes.at(static_cast<size_t>(whole[i])).name;
          if (whole.size() > 8) names += ", ...";
          lanes::log::notice("gridbcast launch: " + std::to_string(whole.size()) + " of " +
                             std::to_string(o.grid.nodes.size() - 1) +
                             " copies were written and verified, and stand (" + names + ")");
        }
        lanes::log::notice(
            "gridbcast launch: ranks that had received part of the file keep it beside their "
            "copy as .NAME.gridbcast-partial (private); the same command with --resume moves "
            "only what they lack");
      }
      return result.status;
    }
    if (result.broadcast) {
      job::BroadcastSummary& b = *result.broadcast;
      if (probed) {
        b.declared_max_flow_bound_seconds = topology::max_flow_bound_seconds(
            declared, b.root, b.iterations.empty() ? 0 : b.iterations.back().bytes);
        b.measured = probed->cached.empty()
                         ? "measured by --probe just before"
                         : "measured by a probe " + topology::format_duration(probed->age_s) +
                               " before (" + probed->cached + ")";
      }
      if (l_json)
        cli::print_broadcast_json(std::cout, b);
      else
        cli::print_broadcast_text(std::cout, b);
    }
    return healer.exit_status();
  }

  // --require as a count of nodes out of `nodes`.
  int required_nodes(int nodes) const {
    const std::string& r = l_require;
    if (r == "all") return nodes;
    try {
      size_t used = 0;
      if (!r.empty() && r.back() == '%') {
        const double pct = std::stod(r.substr(0, r.size() - 1), &used);
        if (used + 1 == r.size() && pct > 0 && pct <= 100)
          return std::max(1, static_cast<int>(std::ceil(pct / 100 * nodes - 1e-9)));
      } else {
        const long n = std::stol(r, &used);
        if (used == r.size() && n >= 1) {
          if (n > nodes)
            throw CLI::ValidationError(
                "--require",
                std::to_string(n) + " nodes, but the topology has " + std::to_string(nodes));
          return static_cast<int>(n);
        }
      }
    } catch (const std::logic_error&) {
    }
    throw CLI::ValidationError("--require",
                               "\"" + r + "\" is not all, a count of nodes or a percentage (90%)");
  }
};

}  // namespace

std::optional<std::vector<std::string>> take_program(int& argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (std::string(argv[i]) != "launch") break;
    for (int j = i + 1; j < argc; ++j) {
      if (std::string(argv[j]) != "--") continue;
      std::vector<std::string> program(argv + j + 1, argv + argc);
      argc = j;
      return program;
    }
    break;
  }
  return std::nullopt;
}

Command register_launch(CLI::App& app, std::optional<std::vector<std::string>> program) {
  auto c = std::make_shared<Launch>(app, std::move(program));
  return {c->launch_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
