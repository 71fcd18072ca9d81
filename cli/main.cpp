// The gridbcast command: plan, launch, simulate, bench, certs, testbed, and the
// internal rank entry. Each subcommand is a file in cli/ (cli/commands.hpp).
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "cli/usage.hpp"
#include "topology/loader.hpp"

int main(int argc, char** argv) {
  using namespace gridbcast;
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

  // What follows "--" after launch is the program every rank runs, not options.
  auto program = cli::take_program(argc, argv);
  const std::vector<cli::Command> commands = {
      cli::register_plan(app),     cli::register_launch(app, std::move(program)),
      cli::register_simulate(app), cli::register_bench(app),
      cli::register_probe(app),    cli::register_certs(app),
      cli::register_testbed(app),  cli::register_rank(app)};
  const cli::LogFlags log_flags = cli::add_log_flags(commands);

  // With --json (plan: --format json), a failure is also an error object on
  // stdout (cli/json_out.hpp); the message for people stays on stderr.
  const cli::JsonRequest request = cli::json_request({argv + 1, argv + argc});
  auto fail = [&](const cli::Json& error) {
    if (request.json) cli::write_json(std::cout, error);
    return error["error"]["exit_code"].get<int>();
  };
  if (const std::string unknown = cli::unknown_command(app, {argv + 1, argv + argc});
      !unknown.empty()) {
    std::cerr << unknown;
    return fail(
        cli::error_json(request.command, unknown.substr(0, unknown.find('\n')), cli::kExitUsage));
  }
  try {
    app.parse(argc, argv);
    cli::apply_log_flags(log_flags);
    for (const auto& c : commands)
      if (c.command->parsed()) return c.run();
  } catch (const CLI::ParseError& e) {
    const int status = cli::usage_exit(app, e);
    if (status == cli::kExitSuccess) return status;  // --help, --version
    return fail(cli::error_json(request.command, e.what(), status));
  } catch (const topology::ConfigError& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return fail(cli::config_error_json(request.command, e, cli::kExitUsage));
  } catch (const std::exception& e) {
    std::cerr << "gridbcast: " << e.what() << "\n";
    return fail(cli::error_json(request.command, e.what(), cli::kExitFailure));
  }
  return cli::kExitSuccess;
}
