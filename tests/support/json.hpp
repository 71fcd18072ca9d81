// Commands' --json output as the scripts read it: one JSON value per line.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace gridbcast::testing {

// Every line of `out` parsed (throws nlohmann::json::parse_error on a line that
// is not JSON, so a test sees it); empty lines are skipped.
inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> values;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) values.push_back(nlohmann::json::parse(line));
  return values;
}

// The last line of `out` parsed, as scripts/*.py read it; null when none.
inline nlohmann::json last_json(const std::string& out) {
  const auto values = json_lines(out);
  return values.empty() ? nlohmann::json() : values.back();
}

}  // namespace gridbcast::testing
