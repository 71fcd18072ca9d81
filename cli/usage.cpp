#include "cli/usage.hpp"

namespace gridbcast::cli {

const char* const kExitStatusHelp =
    "Exit status: 0 success; 1 a failure (a rank, the network, a file); 2 a usage error (an\n"
    "unknown option or command, a missing argument, a bad value, conflicting options) or a\n"
    "topology that does not load; 3 launch completed on the survivors of a lost node (the\n"
    "summary names the nodes without a copy). launch -- PROGRAM exits with the first failing\n"
    "rank's status.";

std::string unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* command = &app;
  std::string path = "gridbcast";
  for (const std::string& word : args) {
    if (word.empty() || word.front() == '-') return {};
    const auto subcommands = command->get_subcommands([](const CLI::App*) { return true; });
    // A leaf, or a command whose words are its arguments (TOPOLOGY, DIR, ...).
    if (subcommands.empty() ||
        !command->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty())
      return {};
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subcommands)
      if (s->check_name(word)) next = s;
    if (next == nullptr)
      return path + ": unknown command '" + word + "'\nRun '" + path +
             " --help' for the list of commands.\n";
    command = next;
    path += " " + word;
  }
  return {};
}

int usage_exit(CLI::App& app, const CLI::ParseError& e) {
  const int status = app.exit(e);
  return status == 0 ? kExitSuccess : kExitUsage;
}

}  // namespace gridbcast::cli
