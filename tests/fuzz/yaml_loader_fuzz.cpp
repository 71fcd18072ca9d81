// Fuzz target: the site-config loader must turn any input into a Grid or a
// ConfigError, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "topology/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto grid = gridbcast::topology::load_grid_string(text, "<fuzz>");
    // A Grid that loads must be usable: chains and paths exist for every site.
    if (!grid.sites.empty()) (void)grid.site_chain(0);
  } catch (const gridbcast::topology::ConfigError&) {
  }
  return 0;
}
