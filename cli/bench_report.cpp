#include "cli/bench_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

#include "cli/json_out.hpp"
#include "topology/units.hpp"

namespace gridbcast::cli {
namespace {

// Doubles in the table's header and the CSV: 10 significant digits, "null"
// when not finite (as the JSON has it).
std::string text_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o << std::setprecision(10) << v;
  return o.str();
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Distinguishable on white, in print and for common colour-vision deficiencies
// (Okabe-Ito), then a few more.
constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                    "#56B4E9", "#000000", "#8C564B", "#7F7F7F", "#BCBD22"};

// Ticks fall on powers of ten, so they are labelled in SI units.
std::string size_label(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1000 && u < 5) bytes /= 1000, ++u;
  std::ostringstream o;
  o << std::setprecision(3) << bytes << ' ' << units[u];
  return o.str();
}

std::string time_label(double us) {
  std::ostringstream o;
  if (us >= 1e6)
    o << std::setprecision(3) << us / 1e6 << " s";
  else if (us >= 1e3)
    o << std::setprecision(3) << us / 1e3 << " ms";
  else
    o << std::setprecision(3) << us << " us";
  return o.str();
}

}  // namespace

double BenchRow::bandwidth() const {
  const double us = point.max_us();
  return us > 0 ? static_cast<double>(point.bytes) / (us * 1e-6) : 0;
}

std::string describe_method(const job::BenchSpec& spec) {
  switch (spec.method) {
    case job::BenchMethod::kAck:
      return "ack: per rank i, the root times a broadcast until i acknowledges, minus half "
             "their round trip (OL_i)";
    case job::BenchMethod::kBarrier:
      return "barrier: every rank times its own broadcast call after an untimed sync";
    case job::BenchMethod::kRounds:
      return "rounds: the root times " + std::to_string(spec.rounds) +
             " back-to-back broadcasts until every rank has reported, divided by " +
             std::to_string(spec.rounds);
  }
  return "";
}

void print_bench_table(std::ostream& out, const BenchContext& ctx,
                       const std::vector<BenchRow>& rows) {
  const auto& spec = ctx.spec;
  out << "# gridbcast bench: " << ctx.topology << ", " << ctx.ranks << " ranks in " << ctx.sites
      << " site(s), root " << ctx.root << "\n"
      << "# method " << describe_method(spec) << "\n"
      << "# Avg/Min/Max over the non-root ranks of each rank's mean latency; Max is the broadcast "
         "time\n"
      << "# Bound is the max-flow bound, x bound is Max over it; Simple is the simple bound "
         "(docs/ALGORITHMS.md)\n"
      << "# a series repeats until its standard deviation is under "
      << text_num(spec.target_rel_stdev * 100) << " % of its mean (at least " << spec.min_iterations
      << "), or " << spec.max_iterations << " samples (cap), or " << text_num(spec.max_seconds)
      << " s per point (time)\n";
  std::string current;
  char line[256];
  for (const auto& r : rows) {
    const auto& p = r.point;
    if (p.algorithm != current) {
      current = p.algorithm;
      out << "\n# " << p.algorithm;
      if (p.algorithm == "auto") out << " (the selector's choice per size)";
      out << "\n";
      std::snprintf(line, sizeof line, "%-12s %12s %12s %12s %11s %10s %12s %8s %12s  %-5s %s\n",
                    "# Size", "Avg(us)", "Min(us)", "Max(us)", "Iterations", "MB/s", "Bound(us)",
                    "x bound", "Simple(us)", "Stop", "Stdev");
      out << line;
    }
    std::snprintf(line, sizeof line,
                  "%-12llu %12.2f %12.2f %12.2f %11d %10.2f %12.2f %8.2f %12.2f  %-5s %.1f%%%s%s\n",
                  static_cast<unsigned long long>(p.bytes), p.avg_us(), p.min_us(), p.max_us(),
                  p.iterations, r.bandwidth() / 1e6, r.max_flow_bound_us, r.ratio(),
                  r.lower_bound_us, job::bench_stop_name(p.stop), p.rel_stdev * 100,
                  p.algorithm == "auto" ? ("  " + p.used).c_str() : "",
                  p.verified ? "" : "  NOT VERIFIED");
    out << line;
  }
  out << "\n# every rank's copy was checked against the root's data after each point";
  if (ctx.rejected_connections > 0) out << "; rejected connections: " << ctx.rejected_connections;
  out << "\n";
}

void print_bench_csv(std::ostream& out, const std::vector<BenchRow>& rows) {
  out << "algorithm,used,bytes,avg_us,min_us,max_us,iterations,rel_stdev,stop,rtt_us,"
         "lower_bound_us,ratio_to_lower_bound,bandwidth_bytes_per_second,verified,"
         "max_flow_bound_us,ratio_to_max_flow_bound\n";
  for (const auto& r : rows) {
    const auto& p = r.point;
    out << p.algorithm << ',' << p.used << ',' << p.bytes << ',' << text_num(p.avg_us()) << ','
        << text_num(p.min_us()) << ',' << text_num(p.max_us()) << ',' << p.iterations << ','
        << text_num(p.rel_stdev) << ',' << job::bench_stop_name(p.stop) << ',' << text_num(p.rtt_us)
        << ',' << text_num(r.lower_bound_us) << ',' << text_num(r.simple_ratio()) << ','
        << text_num(r.bandwidth()) << ',' << (p.verified ? "true" : "false") << ','
        << text_num(r.max_flow_bound_us) << ',' << text_num(r.ratio()) << '\n';
  }
}

void print_bench_json(std::ostream& out, const BenchContext& ctx,
                      const std::vector<BenchRow>& rows) {
  const auto& spec = ctx.spec;
  Json j;
  j["topology"] = ctx.topology;
  j["ranks"] = ctx.ranks;
  j["sites"] = ctx.sites;
  j["root"] = ctx.root;
  j["method"] = job::bench_method_name(spec.method);
  j["target_rel_stdev"] = number(spec.target_rel_stdev);
  j["min_iterations"] = spec.min_iterations;
  j["max_iterations"] = spec.max_iterations;
  j["max_seconds_per_point"] = number(spec.max_seconds);
  j["rejected_connections"] = ctx.rejected_connections;
  j["peak_rss_bytes"] = ctx.peak_rss_bytes;
  Json& points = j["points"] = Json::array();
  for (const auto& r : rows) {
    const auto& p = r.point;
    Json rank_us = Json::array();
    for (double us : p.rank_us) rank_us.push_back(number(us));
    points.push_back({{"algorithm", p.algorithm},
                      {"used", p.used},
                      {"bytes", p.bytes},
                      {"avg_us", number(p.avg_us())},
                      {"min_us", number(p.min_us())},
                      {"max_us", number(p.max_us())},
                      {"iterations", p.iterations},
                      {"rel_stdev", number(p.rel_stdev)},
                      {"stop", job::bench_stop_name(p.stop)},
                      {"rtt_us", number(p.rtt_us)},
                      {"lower_bound_us", number(r.lower_bound_us)},
                      {"ratio_to_lower_bound", number(r.simple_ratio())},
                      {"max_flow_bound_us", number(r.max_flow_bound_us)},
                      {"ratio_to_max_flow_bound", number(r.ratio())},
                      {"bandwidth_bytes_per_second", number(r.bandwidth())},
                      {"verified", p.verified},
                      {"rank_us", std::move(rank_us)}});
  }
  write_json(out, j);
}

std::vector<PlotSeries> bench_plot_series(const std::vector<BenchRow>& rows) {
  std::vector<PlotSeries> series;
  std::map<std::uint64_t, std::pair<double, double>> bound;  // max-flow, simple
  for (const auto& r : rows) {
    auto it = std::find_if(series.begin(), series.end(),
                           [&](const PlotSeries& s) { return s.name == r.point.algorithm; });
    if (it == series.end()) {
      series.push_back({r.point.algorithm, {}, false});
      it = series.end() - 1;
    }
    it->points.emplace_back(r.point.bytes, r.point.max_us());
    bound[r.point.bytes] = {r.max_flow_bound_us, r.lower_bound_us};
  }
  PlotSeries max_flow{"max-flow bound", {}, true};
  PlotSeries simple{"simple bound", {}, true};
  for (const auto& [bytes, us] : bound) {
    max_flow.points.emplace_back(bytes, us.first);
    simple.points.emplace_back(bytes, us.second);
  }
  series.push_back(std::move(max_flow));
  series.push_back(std::move(simple));
  return series;
}

std::string render_svg_plot(const std::string& title, const std::vector<PlotSeries>& series) {
  constexpr double kW = 860, kH = 520, kLeft = 80, kRight = 190, kTop = 40, kBottom = 60;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  double xmin = std::numeric_limits<double>::infinity(), xmax = 0;
  double ymin = std::numeric_limits<double>::infinity(), ymax = 0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (x == 0 || !(y > 0)) continue;
      xmin = std::min(xmin, static_cast<double>(x));
      xmax = std::max(xmax, static_cast<double>(x));
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" viewBox=\"0 0 " << kW << ' ' << kH << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kW / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << xml_escape(title) << "</text>\n";
  if (xmax == 0) {
    o << "<text x=\"" << kW / 2 << "\" y=\"" << kH / 2
      << "\" text-anchor=\"middle\">no positive sizes and times to plot</text>\n</svg>\n";
    return o.str();
  }
  // Whole decades around the data, at least one decade wide on each axis.
  const double lx0 = std::floor(std::log10(xmin)),
               lx1 = std::max(lx0 + 1, std::ceil(std::log10(xmax)));
  const double ly0 = std::floor(std::log10(ymin)),
               ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));
  auto px = [&](double x) { return kLeft + (std::log10(x) - lx0) / (lx1 - lx0) * pw; };
  auto py = [&](double y) { return kTop + ph - (std::log10(y) - ly0) / (ly1 - ly0) * ph; };

  o << "<g stroke=\"#dddddd\">\n";
  for (double d = lx0; d <= lx1; ++d)
    o << "<line x1=\"" << px(std::pow(10, d)) << "\" y1=\"" << kTop << "\" x2=\""
      << px(std::pow(10, d)) << "\" y2=\"" << kTop + ph << "\"/>\n";
  for (double d = ly0; d <= ly1; ++d)
    o << "<line x1=\"" << kLeft << "\" y1=\"" << py(std::pow(10, d)) << "\" x2=\"" << kLeft + pw
      << "\" y2=\"" << py(std::pow(10, d)) << "\"/>\n";
  o << "</g>\n<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\""
    << ph << "\" fill=\"none\" stroke=\"black\"/>\n";
  for (double d = lx0; d <= lx1; ++d)
    o << "<text class=\"xtick\" x=\"" << px(std::pow(10, d)) << "\" y=\"" << kTop + ph + 18
      << "\" text-anchor=\"middle\">" << size_label(std::pow(10, d)) << "</text>\n";
  for (double d = ly0; d <= ly1; ++d)
    o << "<text class=\"ytick\" x=\"" << kLeft - 6 << "\" y=\"" << py(std::pow(10, d)) + 4
      << "\" text-anchor=\"end\">" << time_label(std::pow(10, d)) << "</text>\n";
  o << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 15
    << "\" text-anchor=\"middle\">message size (log; 1 kB = 1000 bytes)</text>\n"
    << "<text x=\"18\" y=\"" << kTop + ph / 2
    << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << kTop + ph / 2
    << ")\">broadcast time (log)</text>\n";

  size_t colour = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const std::string c = s.dashed ? "#555555" : kColours[colour++ % std::size(kColours)];
    std::ostringstream pts;
    pts << std::fixed << std::setprecision(2);
    int n = 0;
    for (const auto& [x, y] : s.points) {
      if (x == 0 || !(y > 0)) continue;
      pts << (n++ ? " " : "") << px(static_cast<double>(x)) << ',' << py(y);
    }
    o << "<polyline class=\"series\" data-name=\"" << xml_escape(s.name)
      << "\" fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"" << pts.str() << "\"/>\n";
    if (!s.dashed)
      for (const auto& [x, y] : s.points)
        if (x != 0 && y > 0)
          o << "<circle cx=\"" << px(static_cast<double>(x)) << "\" cy=\"" << py(y)
            << "\" r=\"3\" fill=\"" << c << "\"/>\n";
    const double ly = kTop + 10 + 20 * static_cast<double>(i);
    o << "<line x1=\"" << kLeft + pw + 15 << "\" y1=\"" << ly << "\" x2=\"" << kLeft + pw + 45
      << "\" y2=\"" << ly << "\" stroke=\"" << c << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n"
      << "<text x=\"" << kLeft + pw + 52 << "\" y=\"" << ly + 4 << "\">" << xml_escape(s.name)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace gridbcast::cli
