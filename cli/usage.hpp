// Exit statuses and usage errors of the gridbcast command (README.md, "Exit status").
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace gridbcast::cli {

// 0 success; 1 a failure at run time; 2 a usage error (an unknown option or
// command, a missing argument, a bad value, options that conflict) or a topology
// that does not load. CLI11's own codes (105, 106, 109, ...) never leave main.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
// launch: the broadcast completed on the survivors of a loss; some nodes
// hold no copy (the summary names them and why).
inline constexpr int kExitCompletedOnSurvivors = 3;

// The --help footer's paragraph on these statuses.
extern const char* const kExitStatusHelp;

// `args` without the program name. If a word where a command is expected names
// none ("gridbcast lunch", "gridbcast certs frob"), the message to print:
// "gridbcast: unknown command 'lunch'" and a hint to run --help. Empty otherwise.
std::string unknown_command(const CLI::App& app, const std::vector<std::string>& args);

// Prints what CLI11 prints for `e` (the help text, the version, or the error and
// "Run with --help ...") and returns the exit status: 0 for --help and
// --version, kExitUsage for every error.
int usage_exit(CLI::App& app, const CLI::ParseError& e);

}  // namespace gridbcast::cli
