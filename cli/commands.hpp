// The subcommands of the gridbcast command, one file each in cli/ (plan.cpp,
// launch.cpp, ...). main adds them to the app in help order and, after parsing,
// runs the chosen one.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gridbcast::cli {

// A subcommand added to the app. `run` is called after app.parse() when
// `command` was chosen and returns the exit status; usage errors are thrown as
// CLI::ParseError, failures as other exceptions, for main to report.
struct Command {
  CLI::App* command = nullptr;
  std::function<int()> run;
};

Command register_plan(CLI::App& app);
// `program`: what follows "--" (take_program); every rank runs it instead of
// the broadcast job.
Command register_launch(CLI::App& app, std::optional<std::vector<std::string>> program);
Command register_simulate(CLI::App& app);
Command register_bench(CLI::App& app);
Command register_probe(CLI::App& app);
Command register_certs(CLI::App& app);
Command register_testbed(CLI::App& app);
Command register_rank(CLI::App& app);

// -v/--verbose (repeatable) and -q/--quiet on every command but the internal
// rank entry (which follows GRIDBCAST_LOG_LEVEL): the level of gridbcast's own
// diagnostics (lanes/log.hpp), handed on to the ranks a launch starts.
struct LogFlags {
  std::shared_ptr<int> verbose = std::make_shared<int>(0);
  std::shared_ptr<bool> quiet = std::make_shared<bool>(false);
};
LogFlags add_log_flags(const std::vector<Command>& commands);
// Sets the level when -v or -q was given (else the environment's stands).
void apply_log_flags(const LogFlags& flags);

// `gridbcast launch [TOPOLOGY] [OPTIONS] -- PROGRAM [ARGS...]`: what follows the
// first "--" after the launch subcommand is the program every rank runs. Cuts
// it off argv (argc shrinks) and returns it; nullopt without "--".
std::optional<std::vector<std::string>> take_program(int& argc, char** argv);

}  // namespace gridbcast::cli
