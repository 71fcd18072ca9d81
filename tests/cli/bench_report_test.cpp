// cli/bench_report.cpp: the table, CSV, JSON and SVG plot of `gridbcast bench`.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli/bench_report.hpp"

namespace gridbcast::cli {
namespace {

BenchRow row(const std::string& algo, std::uint64_t bytes, std::vector<double> us, double bound) {
  BenchRow r;
  r.point.algorithm = algo;
  r.point.used = algo == "auto" ? "binomial" : algo;
  r.point.bytes = bytes;
  r.point.root = 0;
  r.point.rank_us = std::move(us);
  r.point.iterations = 9;
  r.point.rel_stdev = 0.02;
  r.point.verified = true;
  r.lower_bound_us = bound;
  r.max_flow_bound_us = bound / 2;  // a different figure, so a mix-up shows
  return r;
}

std::vector<BenchRow> rows() {
  return {row("multilane", 0, {0, 30, 40}, 5), row("multilane", 1024, {0, 100, 300}, 50),
          row("multilane", 1 << 20, {0, 2000, 4000}, 1000), row("binomial", 1024, {0, 90, 150}, 50),
          row("binomial", 1 << 20, {0, 5000, 8000}, 1000)};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(BenchReport, TableHasAnOsuHeaderPerAlgorithmAndTheRatioToTheBound) {
  BenchContext ctx{"default", 3, 1, 0, {}, 0, 0};
  std::ostringstream out;
  print_bench_table(out, ctx, rows());
  const std::string t = out.str();
  EXPECT_EQ(count(t, "# Size"), 2u) << t;
  EXPECT_NE(t.find("Avg(us)      Min(us)      Max(us)  Iterations"), std::string::npos) << t;
  EXPECT_NE(t.find("\n# multilane\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\n# binomial\n"), std::string::npos) << t;
  // 1 MiB multilane: avg 3000, min 2000, max 4000 us; 262.14 MB/s; 8 x the 500 us
  // max-flow bound, and the 1000 us simple bound next to it.
  EXPECT_TRUE(
      std::regex_search(t, std::regex("\n1048576 +3000\\.00 +2000\\.00 +4000\\.00 +9 +262\\.14 "
                                      "+500\\.00 +8\\.00 +1000\\.00  stdev 2\\.0%")))
      << t;
  EXPECT_NE(t.find("Bound(us)  x bound   Simple(us)"), std::string::npos) << t;
}

TEST(BenchReport, CsvHasAHeaderAndOneLinePerPointWithTheSameColumns) {
  std::ostringstream out;
  print_bench_csv(out, rows());
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  const auto columns = count(line, ",");
  EXPECT_EQ(line.rfind("algorithm,used,bytes,avg_us,min_us,max_us,iterations", 0), 0u) << line;
  int n = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(count(line, ","), columns) << line;
    ++n;
  }
  EXPECT_EQ(n, 5);
  EXPECT_NE(out.str().find("binomial,binomial,1048576,6500,5000,8000,9,"), std::string::npos)
      << out.str();
}

TEST(BenchReport, JsonCarriesEveryPointAndTheRanksLatencies) {
  BenchContext ctx{"two \"sites\"", 3, 2, 0, {}, 4, 1 << 20};
  std::ostringstream out;
  print_bench_json(out, ctx, rows());
  EXPECT_EQ(count(out.str(), "\n"), 1u) << "one object on one line: " << out.str();
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["topology"], "two \"sites\"");
  EXPECT_EQ(j["rejected_connections"], 4);
  EXPECT_EQ(j["peak_rss_bytes"], 1 << 20);
  ASSERT_EQ(j["points"].size(), 5u);
  const auto& p = j["points"][4];  // binomial, 1 MiB
  EXPECT_EQ(p["algorithm"], "binomial");
  EXPECT_EQ(p["bytes"], 1 << 20);
  EXPECT_EQ(p["max_us"], 8000.0);
  EXPECT_EQ(p["iterations"], 9);
  EXPECT_EQ(p["rank_us"], nlohmann::json({0.0, 5000.0, 8000.0}));
  // Binomial 1 MiB: 8000 us over the 1000 us simple bound (the old key keeps its
  // meaning) and over the 500 us max-flow bound.
  EXPECT_EQ(p["lower_bound_us"], 1000.0);
  EXPECT_EQ(p["ratio_to_lower_bound"], 8.0);
  EXPECT_EQ(p["max_flow_bound_us"], 500.0);
  EXPECT_EQ(p["ratio_to_max_flow_bound"], 16.0);
}

TEST(BenchReport, JsonHasNullForTimesThatAreNotNumbers) {
  auto r = rows();
  r[0].point.rank_us = {0, std::nan(""), 40};
  r[0].lower_bound_us = std::numeric_limits<double>::infinity();
  std::ostringstream out;
  print_bench_json(out, {"default", 3, 1, 0, {}, 0, 0}, r);
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_TRUE(j["points"][0]["rank_us"][1].is_null()) << out.str();
  EXPECT_TRUE(j["points"][0]["lower_bound_us"].is_null()) << out.str();
  EXPECT_EQ(j["points"][0]["rank_us"][2], 40.0) << out.str();
  for (const auto& [key, value] : j["points"][0].items())
    EXPECT_TRUE(value.is_number() || value.is_null() || value.is_string() || value.is_boolean() ||
                value.is_array())
        << key;
  EXPECT_EQ(j["points"][1]["lower_bound_us"], 50.0) << "the other points keep their numbers";
}

TEST(BenchReport, PlotHasALinePerAlgorithmAndTheLowerBoundDashedOnLogAxes) {
  const std::string svg = render_svg_plot("bench <default> & co", bench_plot_series(rows()));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("bench &lt;default&gt; &amp; co"), std::string::npos) << "title escaped";
  EXPECT_EQ(count(svg, "<polyline class=\"series\""), 4u);
  EXPECT_NE(svg.find("data-name=\"multilane\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"binomial\""), std::string::npos);
  for (const char* name : {"max-flow bound", "simple bound"}) {
    const auto bound = svg.find(std::string("data-name=\"") + name + "\"");
    ASSERT_NE(bound, std::string::npos) << name;
    EXPECT_NE(svg.substr(bound, 200).find("stroke-dasharray"), std::string::npos)
        << name << " is dashed";
  }
  // Decades from 1 kB (1024 rounded down) to 10 MB, and from 10 us to 10 ms.
  EXPECT_NE(svg.find(">1 kB<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">10 MB<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">10 us<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">10 ms<"), std::string::npos) << svg;
  // The 0-byte point has no place on a log axis: multilane has two points, not three.
  const auto ml = svg.find("data-name=\"multilane\"");
  const auto pts = svg.find("points=\"", ml);
  const std::string coords = svg.substr(pts + 8, svg.find('"', pts + 8) - pts - 8);
  EXPECT_EQ(count(coords, ","), 2u) << coords;
  EXPECT_EQ(count(svg, "<circle"), 4u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(BenchReport, PlotWithNothingPositiveSaysSo) {
  const std::string svg = render_svg_plot("empty", bench_plot_series({row("chain", 0, {0, 0}, 0)}));
  EXPECT_NE(svg.find("no positive sizes and times to plot"), std::string::npos);
}

}  // namespace
}  // namespace gridbcast::cli
