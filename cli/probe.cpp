// gridbcast probe: measure the network a topology describes and compare it
// with what the topology declares; -o writes the topology with the measured
// figures. `launch --probe` runs the same job before it plans.
#include "cli/probe.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/launch_report.hpp"
#include "lanes/log.hpp"
#include "topology/emit.hpp"
#include "topology/loader.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string figure(const std::optional<double>& v, const std::string& unit) {
  if (!v) return "-";
  if (unit == "s") return topology::format_duration(*v);
  return topology::format_bandwidth(*v);
}

std::string difference(const topology::ProbeRow& r) {
  if (!r.declared || !r.measured || *r.declared <= 0) return "";
  std::ostringstream o;
  const double d = (*r.measured - *r.declared) / *r.declared * 100;
  o << std::showpos << std::fixed << std::setprecision(0) << d << "%";
  return o.str();
}

// The measured topology with a comment on each figure saying how it was measured.
std::string measured_yaml(const topology::Grid& declared, const topology::ProbeEstimate& e,
                          const std::string& when, const topology::ProbeSettings& s) {
  topology::GridComments c;
  c["top"] = "Measured by gridbcast probe at " + when + " from " + declared.source +
             ": NIC rates on rings inside each site (" + topology::format_duration(s.lan_seconds) +
             " per phase), latencies by ping-pong, WAN links with their streams (" +
             topology::format_duration(s.wan_seconds) + "). docs/TOPOLOGY.md, \"Measuring it\".";
  for (int r = 0; r < declared.size(); ++r) {
    const auto& n = declared.nodes[static_cast<size_t>(r)];
    for (size_t j = 0; j < n.nics.size(); ++j) {
      const double m = e.measured.nodes[static_cast<size_t>(r)].nics[j].bandwidth_bps;
      const double d = n.nics[j].bandwidth_bps;
      c["nic:" + std::to_string(r) + ":" + std::to_string(j)] =
          m == d ? "declared " + topology::format_bandwidth(d) + ", not measured"
                 : "measured " + when + " (declared " + topology::format_bandwidth(d) + ")";
    }
  }
  for (size_t s2 = 0; s2 < declared.sites.size(); ++s2)
    if (e.measured.sites[s2].latency_s > 0)
      c["site:" + std::to_string(s2)] = "one hop, measured " + when + " (median of ping-pongs)";
  for (size_t i = 0; i < declared.wan.size(); ++i) {
    const auto& d = declared.wan[i];
    const auto& m = e.measured.wan[i];
    c["wan:" + std::to_string(i) + ":latency"] =
        "measured " + when + " (declared " + topology::format_duration(d.latency_s) + ")";
    c["wan:" + std::to_string(i) + ":bandwidth"] =
        m.bandwidth_bps == d.bandwidth_bps
            ? "declared; the probe saw at least this much or could not tell"
            : "measured " + when + " with " + std::to_string(d.streams) +
                  " streams per pair (declared " + topology::format_bandwidth(d.bandwidth_bps) +
                  ")";
  }
  return topology::grid_to_yaml(e.measured, c);
}

// Same sites, nodes, addresses and links: the cache describes this topology.
bool same_shape(const topology::Grid& a, const topology::Grid& b) {
  if (a.sites.size() != b.sites.size() || a.nodes.size() != b.nodes.size() ||
      a.wan.size() != b.wan.size())
    return false;
  for (size_t s = 0; s < a.sites.size(); ++s)
    if (a.sites[s].name != b.sites[s].name || a.sites[s].ranks != b.sites[s].ranks) return false;
  for (size_t r = 0; r < a.nodes.size(); ++r) {
    const auto& x = a.nodes[r];
    const auto& y = b.nodes[r];
    if (x.name != y.name || x.nics.size() != y.nics.size()) return false;
    for (size_t j = 0; j < x.nics.size(); ++j)
      if (x.nics[j].address != y.nics[j].address) return false;
  }
  for (size_t i = 0; i < a.wan.size(); ++i)
    if (a.wan[i].site_a != b.wan[i].site_a || a.wan[i].site_b != b.wan[i].site_b ||
        a.wan[i].streams != b.wan[i].streams)
      return false;
  return true;
}

}  // namespace

topology::Grid with_measured_figures(const topology::Grid& declared,
                                     const topology::Grid& measured) {
  topology::Grid g = declared;
  for (size_t r = 0; r < g.nodes.size(); ++r)
    for (size_t j = 0; j < g.nodes[r].nics.size(); ++j)
      g.nodes[r].nics[j].bandwidth_bps = measured.nodes[r].nics[j].bandwidth_bps;
  for (size_t s2 = 0; s2 < g.sites.size(); ++s2)
    g.sites[s2].latency_s = measured.sites[s2].latency_s;
  for (size_t i = 0; i < g.wan.size(); ++i) {
    g.wan[i].latency_s = measured.wan[i].latency_s;
    g.wan[i].bandwidth_bps = measured.wan[i].bandwidth_bps;
  }
  g.pace_lanes = declared.pace_lanes || measured.pace_lanes;
  return g;
}

std::optional<Probed> run_probe(CLI::App* cmd, RunOptions& run, const topology::Grid& declared,
                                const topology::ProbeSettings& settings,
                                job::LaunchResult& failure) {
  (void)topology::probe_schedule(declared,
                                 settings);  // settings out of range: said before any start
  job::LaunchOptions o;
  o.grid = topology::probe_grid(declared);
  o.yaml_text = topology::grid_to_yaml(o.grid);
  o.params.kind = job::JobKind::kProbe;
  o.params.probe = settings;
  o.probe_declared = declared;
  auto backend = make_backend(cmd, run, o);
  const auto start = std::chrono::steady_clock::now();
  job::LaunchResult result = job::launch(o, *backend, std::cerr);
  backend->drain_output(std::chrono::seconds(2));
  if (result.status != 0 || !result.probe) {
    failure = std::move(result);
    if (failure.status == 0) failure.status = 1;
    return std::nullopt;
  }
  Probed p;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  p.when = utc_now();
  p.estimate = topology::estimate(declared, result.probe->phases, result.probe->samples);
  p.yaml = measured_yaml(declared, p.estimate, p.when, settings);
  return p;
}

void print_probe_table(std::ostream& out, const Probed& p, bool flagged_only) {
  const auto& rows = p.estimate.rows;
  size_t width = 10;
  for (const auto& r : rows) width = std::max(width, r.what.size());
  out << std::left << std::setw(static_cast<int>(width)) << "what"
      << "  " << std::setw(14) << "declared" << std::setw(16) << "measured"
      << "difference\n";
  int shown = 0;
  for (const auto& r : rows) {
    if (flagged_only && !r.flagged()) continue;
    ++shown;
    out << std::left << std::setw(static_cast<int>(width)) << r.what << "  " << std::setw(14)
        << figure(r.declared, r.unit) << std::setw(16)
        << ((r.lower_bound && r.measured ? ">= " : "") + figure(r.measured, r.unit))
        << difference(r) << (r.flagged() ? "  !" : "")
        << (r.note.empty() ? "" : "  (" + r.note + ")") << "\n";
  }
  if (flagged_only && shown == 0) out << "(no figure is more than 25 % off)\n";
  for (const auto& n : p.estimate.notes) out << "note: " << n << "\n";
  out << p.estimate.flagged << " figure(s) more than 25 % off the topology's (marked !)";
  if (flagged_only && static_cast<int>(rows.size()) > shown)
    out << "; " << rows.size() << " rows in all (--all)";
  out << "; the probe took " << std::fixed << std::setprecision(1) << p.seconds << " s\n";
}

Json probe_json(const Probed& p, const topology::Grid& declared) {
  Json j;
  j["type"] = "probe";
  j["topology"] = declared.name;
  j["when"] = p.when;
  j["seconds"] = number(p.seconds);
  j["flagged"] = p.estimate.flagged;
  Json& rows = j["rows"] = Json::array();
  for (const auto& r : p.estimate.rows) {
    Json row;
    row["what"] = r.what;
    row["unit"] = r.unit;
    row["declared"] = r.declared ? number(*r.declared) : Json(nullptr);
    row["measured"] = r.measured ? number(*r.measured) : Json(nullptr);
    row["lower_bound"] = r.lower_bound;
    row["flagged"] = r.flagged();
    row["note"] = r.note;
    rows.push_back(std::move(row));
  }
  j["notes"] = p.estimate.notes;
  return j;
}

std::string probe_cache_path(const TopologyOptions& t, const topology::Grid& declared) {
  if (!t.path.empty()) {
    std::filesystem::path p(t.path);
    std::string stem = p.filename().string();
    for (const char* ext : {".yaml", ".yml"})
      if (stem.size() > std::strlen(ext) && stem.ends_with(ext))
        stem.resize(stem.size() - std::strlen(ext));
    return (p.parent_path() / (stem + ".probe.yaml")).string();
  }
  // A user's own cache directory, never a shared one: another user must not
  // be able to put a "measurement" there.
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache";
  else
    return "";
  std::string name = declared.name;
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
      ch = '_';
  return dir + "/gridbcast/" + name + ".probe.yaml";
}

std::optional<Probed> load_cached_probe(const std::string& path, const topology::Grid& declared,
                                        double max_age_s) {
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return std::nullopt;
  // Only a regular file of this user's that nobody else may write: the
  // figures in it decide plans and pacing.
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    lanes::log::notice("gridbcast launch: " + path +
                       " is not a regular file of this user's that only it may write: not used; "
                       "probing again");
    return std::nullopt;
  }
  const double age = std::difftime(std::time(nullptr), st.st_mtime);
  if (age > max_age_s) {
    lanes::log::notice("gridbcast launch: " + path + " is " + topology::format_duration(age) +
                       " old, over --probe-max-age: probing again");
    return std::nullopt;
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  Probed p;
  topology::Grid cached;
  try {
    cached = topology::load_grid_string(ss.str(), path);
  } catch (const std::exception& e) {
    lanes::log::notice("gridbcast launch: " + path + " does not load (" + e.what() +
                       "): probing again");
    return std::nullopt;
  }
  if (!same_shape(cached, declared)) {
    lanes::log::notice("gridbcast launch: " + path +
                       " describes other nodes, addresses or links than the topology: probing "
                       "again");
    return std::nullopt;
  }
  // Only the measured figures come from the cache; everything else (hosts,
  // TLS, multicast, streams, congestion control, ...) is the topology's own.
  p.estimate.measured = with_measured_figures(declared, cached);
  p.yaml = topology::grid_to_yaml(p.estimate.measured);
  p.cached = path;
  p.age_s = age;
  return p;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = true;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e2 = ok ? errno : e;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(e2));
  }
}

namespace {

struct Probe {
  CLI::App* cmd = nullptr;
  TopologyOptions topology_options;
  RunOptions run_options;
  topology::ProbeSettings settings;
  std::string output;
  bool json = false, all = false;

  explicit Probe(CLI::App& app) {
    cmd = app.add_subcommand(
        "probe",
        "Measure the network: each NIC's send and receive rate, latencies inside the sites, "
        "each WAN link's latency and bandwidth; compare with the topology");
    cmd->add_option("TOPOLOGY", topology_options.path,
                    "site-config YAML (default: the embedded default)");
    add_topology_options(cmd, topology_options);
    cmd->add_option("--lan-seconds", settings.lan_seconds,
                    "length of each rate phase inside the sites")
        ->check(CLI::Range(0.05, 600.0))
        ->capture_default_str();
    cmd->add_option("--wan-seconds", settings.wan_seconds, "length of the WAN rate phase")
        ->check(CLI::Range(0.05, 600.0))
        ->capture_default_str();
    cmd->add_option("--pings", settings.pings, "round trips per latency flow, at most")
        ->check(CLI::Range(2, 10000))
        ->capture_default_str();
    cmd->add_option("--wan-pairs", settings.wan_pairs,
                    "node pairs that drive each WAN link, at most")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd->add_option("-o,--output", output,
                    "write the topology with the measured figures to FILE (YAML that launch, plan "
                    "and simulate take; a comment says how and when each was measured)");
    cmd->add_flag("--json", json, "print the figures as JSON");
    cmd->add_flag("--all", all,
                  "list every figure, also on grids of over 64 nodes (default there: only the "
                  "ones more than 25 % off)");
    run_options.timeout = 10;
    add_run_options(cmd, run_options);
    cmd->footer(
        "Examples:\n"
        "  gridbcast probe site-configs/testbed-2x4.yaml -o measured.yaml   # inside the testbed\n"
        "  gridbcast probe --hosts 'n[01-16]' --backend ssh --json\n"
        "  gridbcast launch measured.yaml --size 1GiB     # plan from what was measured\n"
        "  gridbcast launch TOPOLOGY --probe              # probe, then plan (docs/TOPOLOGY.md)\n"
        "It sends traffic between the nodes for a few seconds: every NIC, every WAN link.\n"
        "A node or link it cannot reach fails the probe naming it, within --timeout.");
  }

  int run() {
    const Loaded l = load(topology_options);
    slurm_default_backend(cmd, l, run_options);
    job::LaunchResult failure;
    const auto p = run_probe(cmd, run_options, l.grid, settings, failure);
    if (!p) {
      print_failure(std::cerr, std::cout, "probe", failure, json);
      return failure.status;
    }
    if (!output.empty()) write_file_atomically(output, p->yaml);
    if (json) {
      Json j = probe_json(*p, l.grid);
      j["output"] = output.empty() ? Json(nullptr) : Json(output);
      write_json(std::cout, j);
    } else {
      std::cout << "gridbcast probe: " << l.grid.name << ", " << l.grid.size() << " nodes in "
                << l.grid.sites.size() << " site(s), " << l.grid.wan.size() << " WAN link(s)\n";
      print_probe_table(std::cout, *p, !all && l.grid.size() > 64);
      if (!output.empty()) std::cout << "measured topology written to " << output << "\n";
    }
    return 0;
  }
};

}  // namespace

Command register_probe(CLI::App& app) {
  auto c = std::make_shared<Probe>(app);
  return {c->cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
