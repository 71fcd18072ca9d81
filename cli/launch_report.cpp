#include "cli/launch_report.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <thread>

#include "cli/json_out.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {
namespace {

std::string fmt_seconds(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(s < 0.01 ? 6 : 4) << s;
  return o.str();
}

struct Times {
  double min = 0, median = 0, max = 0;
};

Times times_of(const job::BroadcastSummary& s) {
  std::vector<double> t;
  for (const auto& it : s.iterations) t.push_back(it.seconds);
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2], t.back()};
}

std::string duration_text(double s) {
  std::ostringstream o;
  const auto whole = static_cast<long long>(s);
  if (s < 60)
    o << std::fixed << std::setprecision(1) << s << " s";
  else if (s < 3600)
    o << whole / 60 << " min " << whole % 60 << " s";
  else
    o << whole / 3600 << " h " << (whole % 3600) / 60 << " min";
  return o.str();
}

}  // namespace

void print_broadcast_text(std::ostream& out, const job::BroadcastSummary& s) {
  const Times t = times_of(s);
  const double bw = t.median > 0 ? static_cast<double>(s.bytes) / t.median : 0;
  out << "gridbcast launch: " << s.algorithm << ", " << s.ranks << " ranks in " << s.sites
      << " site(s), " << topology::format_bytes(s.bytes) << " from rank " << s.root << ", "
      << s.iterations.size() << " iteration(s)";
  // A file job's is its first file's chunk; one of directories alone has none.
  if (s.files.empty() && s.copies.empty())
    out << ", segment " << topology::format_bytes(s.segment_bytes);
  else if (s.segment_bytes != 0)
    out << ", chunk " << topology::format_bytes(s.segment_bytes);
  out << "\n";
  out << "  time until the last rank holds the data: " << fmt_seconds(t.median) << " s";
  if (s.iterations.size() > 1)
    out << " (median; min " << fmt_seconds(t.min) << ", max " << fmt_seconds(t.max) << ")";
  out << "\n  effective bandwidth: " << topology::format_bandwidth(bw * 8) << " (" << std::fixed
      << std::setprecision(1) << bw / (1 << 20) << " MiB/s)\n";
  out << (s.measured.empty() ? "  lower bound from the topology: max-flow "
                             : "  lower bound from the measured network: max-flow ")
      << fmt_seconds(s.max_flow_bound_seconds) << " s";
  if (s.max_flow_bound_seconds > 0)
    out << ", ratio " << std::setprecision(2) << t.median / s.max_flow_bound_seconds;
  out << " (simple bound " << fmt_seconds(s.lower_bound_seconds) << " s";
  if (s.lower_bound_seconds > 0)
    out << ", ratio " << std::setprecision(2) << t.median / s.lower_bound_seconds;
  out << ")";
  if (!s.measured.empty()) {
    out << "\n  figures " << s.measured << "; on the topology's declared figures the bound is "
        << fmt_seconds(s.declared_max_flow_bound_seconds) << " s";
    if (s.declared_max_flow_bound_seconds > 0)
      out << " (ratio " << std::setprecision(2) << t.median / s.declared_max_flow_bound_seconds
          << ")";
  }
  if (s.loopback_nic_bps > 0)
    out << "\n  note: all " << s.ranks << " ranks share this host over loopback; the bound "
        << "assumes the topology's NICs (" << topology::format_bandwidth(s.loopback_nic_bps)
        << " each), not " << std::thread::hardware_concurrency()
        << " shared cores: the ratio measures the host, not a network";
  out << "\n  slowest rank per site:";
  for (size_t i = 0; i < s.slowest_per_site.size(); ++i) {
    const auto& sl = s.slowest_per_site[i];
    out << (i ? "," : "") << " " << sl.site << " rank " << sl.rank << " (" << sl.node << ") "
        << fmt_seconds(sl.seconds) << " s";
  }
  out << "\n";
  const std::string all = s.missing.empty() ? "all " + std::to_string(s.ranks) + " ranks"
                                            : "the " + std::to_string(s.ranks) + " surviving ranks";
  if (s.verified && s.copies.empty())
    out << "  verified: " << all << " hold the root's SHA-256 " << s.sha256 << "\n";
  else if (s.verified)  // --file: checked chunk by chunk as it landed (docs/FILES.md)
    out << "  verified: " << all
        << " hold the root's chunk digest (SHA-256 over each chunk's SHA-256) " << s.sha256 << "\n";
  if (!s.copies.empty()) {
    out << "  copies: " << s.copies.size() << " (";
    for (size_t i = 0; i < s.copies.size() && i < 3; ++i)
      out << (i ? ", " : "") << s.copies[i].node << ": " << s.copies[i].path;
    if (s.copies.size() > 3) out << ", ...; --json lists all";
    out << ")\n";
  }
  if (!s.files.empty()) {
    // Each file the root sent (its name in the job, size, and with --resume
    // how many chunks moved); the first ten, then a count.
    constexpr size_t kListed = 10;
    out << "  files: " << s.files.size() << "\n";
    for (size_t i = 0; i < s.files.size() && i < kListed; ++i) {
      const auto& f = s.files[i];
      out << "    " << f.path << "  " << topology::format_bytes(f.bytes);
      if (f.chunks_sent != f.chunks)
        out << ", " << f.chunks_sent << " of " << f.chunks << " chunks sent";
      if (f.compressed) out << ", packed to " << topology::format_bytes(f.wire_bytes);
      out << "\n";
    }
    if (s.files.size() > kListed)
      out << "    ... and " << s.files.size() - kListed << " more; --json lists all\n";
  }
  if (!s.missing.empty()) {
    out << "  missing: " << s.missing.size() << (s.missing.size() == 1 ? " node" : " nodes")
        << " lost during the job, without a verified copy:\n";
    for (const auto& m : s.missing)
      out << "    rank " << m.rank << " (" << m.node << "): " << m.cause << "\n";
  }
  if (!s.stragglers.empty()) {
    out << "  stragglers: " << s.stragglers.size()
        << (s.stragglers.size() == 1 ? " node" : " nodes")
        << " set aside while the others finished, then sent their copies from the root:\n";
    for (const auto& st : s.stragglers)
      out << "    rank " << st.rank << " (" << st.node
          << "): " << topology::format_bandwidth(8 * st.rate_bytes_per_s)
          << " while behind; its copy took " << fmt_seconds(st.seconds) << " s after the others\n";
  }
  for (const auto& w : s.routed_around) out << "  routed around: " << w.cause << "\n";
  for (const auto& o : s.took_over)
    out << "  source: rank " << o.rank << " (" << o.node << ") sent its verified copy after rank "
        << o.lost_rank << " (" << o.lost_node << ") " << o.after << "\n";
  out << "  largest rank resident set: " << topology::format_bytes(s.peak_rss_bytes) << "\n";
  if (s.rejected_connections > 0)
    out << "  rejected connections: " << s.rejected_connections << "\n";
}

void print_broadcast_json(std::ostream& out, const job::BroadcastSummary& s) {
  const Times t = times_of(s);
  const double bw = t.median > 0 ? static_cast<double>(s.bytes) / t.median : 0;
  Json j;
  j["algorithm"] = s.algorithm;
  j["ranks"] = s.ranks;
  j["sites"] = s.sites;
  j["bytes"] = s.bytes;
  j["root"] = s.root;
  j["iterations"] = s.iterations.size();
  j["segment_bytes"] = s.segment_bytes;
  j["seconds"] = {{"min", number(t.min)}, {"median", number(t.median)}, {"max", number(t.max)}};
  j["bandwidth_bytes_per_second"] = number(bw);
  j["lower_bound_seconds"] = number(s.lower_bound_seconds);
  j["ratio_to_lower_bound"] =
      number(s.lower_bound_seconds > 0 ? t.median / s.lower_bound_seconds : 0);
  j["max_flow_bound_seconds"] = number(s.max_flow_bound_seconds);
  j["ratio_to_max_flow_bound"] =
      number(s.max_flow_bound_seconds > 0 ? t.median / s.max_flow_bound_seconds : 0);
  j["verified"] = s.verified;
  j["sha256"] = s.sha256;
  j["rejected_connections"] = s.rejected_connections;
  j["peak_rss_bytes"] = s.peak_rss_bytes;
  Json& slowest = j["slowest_per_site"] = Json::array();
  for (const auto& sl : s.slowest_per_site)
    slowest.push_back(
        {{"site", sl.site}, {"rank", sl.rank}, {"node", sl.node}, {"seconds", number(sl.seconds)}});
  Json& per_iteration = j["per_iteration"] = Json::array();
  for (const auto& it : s.iterations)
    per_iteration.push_back({{"root", it.root},
                             {"bytes", it.bytes},
                             {"algorithm", it.algorithm},
                             {"seconds", number(it.seconds)},
                             {"max_rss_bytes", it.max_rss_bytes}});
  Json& copies = j["copies"] = Json::array();
  for (const auto& c : s.copies)
    copies.push_back({{"rank", c.rank}, {"node", c.node}, {"path", c.path}});
  j["complete"] = s.missing.empty();
  Json& missing = j["missing"] = Json::array();
  for (const auto& m : s.missing)
    missing.push_back({{"rank", m.rank}, {"node", m.node}, {"cause", m.cause}});
  Json& stragglers = j["stragglers"] = Json::array();
  for (const auto& st : s.stragglers)
    stragglers.push_back({{"rank", st.rank},
                          {"node", st.node},
                          {"cause", st.cause},
                          {"rate_bytes_per_second", number(st.rate_bytes_per_s)},
                          {"seconds", number(st.seconds)}});
  Json& routed = j["routed_around"] = Json::array();
  for (const auto& w : s.routed_around)
    routed.push_back({{"sites", {w.site_a, w.site_b}}, {"cause", w.cause}});
  Json& took = j["took_over"] = Json::array();
  for (const auto& o : s.took_over)
    took.push_back({{"rank", o.rank},
                    {"node", o.node},
                    {"lost_rank", o.lost_rank},
                    {"lost_node", o.lost_node},
                    {"after", o.after}});
  Json& files = j["files"] = Json::array();
  for (const auto& f : s.files)
    files.push_back({{"path", f.path},
                     {"bytes", f.bytes},
                     {"chunks", f.chunks},
                     {"chunks_sent", f.chunks_sent},
                     {"root_digest", f.root_digest},
                     {"wire_bytes", f.wire_bytes},
                     {"compressed", f.compressed}});
  // launch --probe: the bounds above are the measured network's.
  j["measured"] = s.measured.empty() ? Json(nullptr) : Json(s.measured);
  j["declared_max_flow_bound_seconds"] =
      s.measured.empty() ? Json(nullptr) : number(s.declared_max_flow_bound_seconds);
  write_json(out, j);
}

void print_failure(std::ostream& err, std::ostream& out, const std::string& command,
                   const job::LaunchResult& r, bool json) {
  err << "gridbcast launch: FAILED: " << r.failure << "\n";  // the job's launcher, for bench too
  for (const auto& t : r.then) err << "  then: " << t << "\n";
  if (!json) return;
  Json j = error_json(command, r.failure, r.status);
  j["error"]["then"] = r.then;
  write_json(out, j);
}

std::string progress_line(const job::ProgressSample& s) {
  std::ostringstream line;
  line << "\r  ";
  if (s.iterations > 1) line << "iteration " << (s.iteration + 1) << "/" << s.iterations << ": ";
  const double share = s.bytes_total > 0 ? 100.0 * static_cast<double>(s.bytes_held) /
                                               static_cast<double>(s.bytes_total)
                                         : 100.0;
  line << topology::format_bytes(s.bytes_held) << " of " << topology::format_bytes(s.bytes_total)
       << " held (" << std::fixed << std::setprecision(1) << share << " %), "
       << duration_text(s.elapsed_s);
  if (s.rate_bytes_per_s > 0) line << ", " << topology::format_bandwidth(s.rate_bytes_per_s * 8);
  if (s.eta_s >= 0) line << ", ETA " << duration_text(s.eta_s);
  line << ", " << s.ranks_done << "/" << s.ranks << " ranks done   ";
  return line.str();
}

std::string progress_json(const job::ProgressSample& s) {
  Json j;
  j["type"] = "progress";
  j["iteration"] = s.iteration;
  j["elapsed_seconds"] = number(s.elapsed_s);
  j["bytes_held"] = s.bytes_held;
  j["bytes_total"] = s.bytes_total;
  j["ranks_done"] = s.ranks_done;
  j["ranks"] = s.ranks;
  j["rate_bytes_per_second"] = number(s.rate_bytes_per_s);
  j["eta_seconds"] = s.eta_s >= 0 ? number(s.eta_s) : Json(nullptr);
  return dump_json(j);
}

}  // namespace gridbcast::cli
