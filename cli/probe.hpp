// `gridbcast probe` and `launch --probe`: measure the network the topology
// describes (topology/probe.hpp), then print it against the declared figures
// or plan from it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "cli/common.hpp"
#include "cli/json_out.hpp"
#include "job/launcher.hpp"
#include "topology/probe.hpp"

namespace gridbcast::cli {

struct Probed {
  topology::ProbeEstimate estimate;
  double seconds = 0;  // the whole probe job, start-up included
  std::string when;    // UTC, ISO 8601
  std::string yaml;    // the measured topology, with a comment per figure
  std::string cached;  // the cache file it came from, if it did
  double age_s = 0;    // of the cached result
};

// Runs the probe job over `declared` with the run options of `cmd`; on a
// failure of the job, nullopt and `failure` holds it.
std::optional<Probed> run_probe(CLI::App* cmd, RunOptions& run, const topology::Grid& declared,
                                const topology::ProbeSettings& settings,
                                job::LaunchResult& failure);

// The table of declared against measured figures (all rows, or with
// `flagged_only` the ones over 25 % off), then the notes.
void print_probe_table(std::ostream& out, const Probed& p, bool flagged_only);
Json probe_json(const Probed& p, const topology::Grid& declared);

// Where `launch --probe` keeps its result for a topology: TOPOLOGY.probe.yaml
// beside the file, else $XDG_CACHE_HOME (or ~/.cache)/gridbcast/NAME.probe.yaml;
// empty without either (then nothing is kept).
std::string probe_cache_path(const TopologyOptions& t, const topology::Grid& declared);
// `declared` with the figures a probe measures (NIC bandwidths, sites'
// latency, WAN latency and bandwidth, pace_lanes turned on) taken from
// `measured`, which describes the same nodes and links; nothing else.
topology::Grid with_measured_figures(const topology::Grid& declared,
                                     const topology::Grid& measured);
// The cached measurement, if it is a regular file of this user's that only it
// may write, at most `max_age_s` old and of the same nodes, addresses and
// links as `declared`: `declared` with the cached figures. Else nullopt (said
// on stderr when there was a file).
std::optional<Probed> load_cached_probe(const std::string& path, const topology::Grid& declared,
                                        double max_age_s);
// Writes `yaml` to `path` through a new temporary file renamed into place.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace gridbcast::cli
