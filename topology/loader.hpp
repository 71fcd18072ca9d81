// Site-config YAML -> validated Grid. Every error is a ConfigError naming
// file:line:col and what was expected.
#pragma once

#include <string>

#include "topology/grid.hpp"

namespace gridbcast::topology {

Grid load_grid_file(const std::string& path);
Grid load_grid_string(const std::string& yaml_text, const std::string& source_name);

// The embedded default (site-configs/default.yaml compiled in).
const char* default_topology_yaml();
Grid default_grid();

}  // namespace gridbcast::topology
