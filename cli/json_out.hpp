// The one JSON writer of the gridbcast command (docs/JSON.md). Every --json
// output is built as an ordered_json (keys in the documented order) and
// written by write_json, so every command shares the same rules:
//   - doubles through number(): finite -> a number (shortest round-trip
//     form), NaN and infinities -> null; integers stay integers;
//   - strings as valid UTF-8: bytes that are not (a path or host name in
//     another encoding) become U+FFFD instead of throwing;
//   - one compact object per line, so scripts may read the last line.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::cli {

using Json = nlohmann::ordered_json;

// A finite double, or null.
Json number(double v);

// `j` as one line of JSON (no newline); never throws on bad UTF-8.
std::string dump_json(const Json& j);
// dump_json(j) and a newline.
void write_json(std::ostream& out, const Json& j);

// {"error": {"command", "message", "exit_code"}}: what a command run with
// --json prints on stdout when it fails (the human message still goes to stderr).
Json error_json(const std::string& command, const std::string& message, int exit_code);
// The same for a topology that does not load, with its "file", "line" and
// "column" (0 when unknown) too.
Json config_error_json(const std::string& command, const topology::ConfigError& e, int exit_code);

// `gridbcast plan --format json`: the plan and both lower bounds for its root
// and size.
Json plan_json(const topology::Grid& grid, const topology::Plan& plan);

// Which command `args` (argv without the program name) runs, and whether its
// output is JSON (--json, or plan's --format json); for main to report
// failures as error_json. Empty command when none is named.
struct JsonRequest {
  std::string command;
  bool json = false;
};
JsonRequest json_request(const std::vector<std::string>& args);

}  // namespace gridbcast::cli
