// What `gridbcast bench` prints: an OSU-style table per algorithm, CSV, JSON,
// and a log-log SVG plot drawn here (no plotting library). Pure formatting.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "job/bench.hpp"

namespace gridbcast::cli {

struct BenchContext {
  std::string topology;  // the grid's name
  int ranks = 0;
  int sites = 0;
  int root = 0;
  job::BenchSpec spec;
  std::uint64_t rejected_connections = 0;
  std::uint64_t peak_rss_bytes = 0;
};

// One measured point and the topology's lower bounds for its size: the simple
// one (topology::lower_bound_seconds) and the max-flow one
// (topology::max_flow_bound), which "x bound" uses (docs/ALGORITHMS.md).
struct BenchRow {
  job::BenchPoint point;
  double lower_bound_us = 0;     // the simple bound
  double max_flow_bound_us = 0;  // the max-flow bound

  double ratio() const { return max_flow_bound_us > 0 ? point.max_us() / max_flow_bound_us : 0; }
  double simple_ratio() const { return lower_bound_us > 0 ? point.max_us() / lower_bound_us : 0; }
  // Bytes per second until the last rank holds the data.
  double bandwidth() const;
};

// A named line on the plot: (bytes, microseconds) pairs.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<std::uint64_t, double>> points;
  bool dashed = false;
};

std::string describe_method(const job::BenchSpec& spec);

void print_bench_table(std::ostream& out, const BenchContext& ctx,
                       const std::vector<BenchRow>& rows);
void print_bench_csv(std::ostream& out, const std::vector<BenchRow>& rows);
void print_bench_json(std::ostream& out, const BenchContext& ctx,
                      const std::vector<BenchRow>& rows);

// One line per algorithm (its max_us) and both lower bounds, dashed.
std::vector<PlotSeries> bench_plot_series(const std::vector<BenchRow>& rows);
// Time against size, both axes logarithmic with decade ticks; points whose
// size or time is not positive are left out (a log axis has no place for 0).
std::string render_svg_plot(const std::string& title, const std::vector<PlotSeries>& series);

}  // namespace gridbcast::cli
