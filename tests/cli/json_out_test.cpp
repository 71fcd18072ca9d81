// cli/json_out.cpp, the one JSON writer (docs/JSON.md): its rules (numbers,
// null for what is not finite, valid UTF-8 whatever the bytes), and every
// command's --json as a script reads it: the documented fields with their
// types, and the error object on failure with the exit status unchanged.
#include "cli/json_out.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "topology/loader.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

// Bytes that are not UTF-8 (a lone continuation byte, 0xff) and control
// characters, as a file or host name may hold them.
const std::string kBadBytes = std::string("caf\xc3\xa9-\x80-\xff-") + "\x01\t\n" + "end";

// `keys` in this order, each of the given type.
void expect_fields(const nlohmann::ordered_json& j,
                   const std::vector<std::pair<std::string, json::value_t>>& keys) {
  ASSERT_TRUE(j.is_object()) << j;
  ASSERT_EQ(j.size(), keys.size()) << j;
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    EXPECT_EQ(it.key(), keys[i].first) << j;
  }
  for (const auto& [key, type] : keys) {
    ASSERT_TRUE(j.contains(key)) << key << " missing: " << j;
    const auto& v = j[key];
    if (type == json::value_t::number_float)  // a double may print as an integer
      EXPECT_TRUE(v.is_number() || v.is_null()) << key << ": " << v;
    else if (type == json::value_t::number_unsigned)
      EXPECT_TRUE(v.is_number_integer() && v.get<std::int64_t>() >= 0) << key << ": " << v;
    else
      EXPECT_EQ(v.type(), type) << key << ": " << v;
  }
}

// Parsing keeps the key order of the text (as a script's json.loads does).
nlohmann::ordered_json parse_ordered(const std::string& line) {
  return nlohmann::ordered_json::parse(line);
}

// The last line of `out`, keys in order.
nlohmann::ordered_json last_ordered(const std::string& out) {
  std::string last;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return parse_ordered(last);
}

using T = json::value_t;

TEST(JsonOut, NumbersAreFiniteOrNull) {
  EXPECT_EQ(cli::dump_json(cli::number(0.25)), "0.25");
  EXPECT_EQ(cli::dump_json(cli::number(3.0)), "3.0");
  EXPECT_EQ(cli::dump_json(cli::number(std::nan(""))), "null");
  EXPECT_EQ(cli::dump_json(cli::number(std::numeric_limits<double>::infinity())), "null");
  EXPECT_EQ(cli::dump_json(cli::number(-std::numeric_limits<double>::infinity())), "null");
  // Round-trips: the shortest form that reads back as the same double.
  const double third = 1.0 / 3;
  EXPECT_EQ(json::parse(cli::dump_json(cli::number(third))).get<double>(), third);
}

TEST(JsonOut, BadBytesAndControlCharactersGiveValidJsonOnOneLine) {
  const std::string line = cli::dump_json(cli::Json{{"path", kBadBytes}});
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const json j = json::parse(line);  // throws on invalid UTF-8 or raw control characters
  const std::string path = j["path"];
  EXPECT_EQ(path, "caf\xc3\xa9-\xef\xbf\xbd-\xef\xbf\xbd-\x01\t\nend") << line;
  EXPECT_NE(line.find("\\u0001"), std::string::npos) << line;
}

TEST(JsonOut, TheErrorObjectNamesCommandMessageStatusAndWhere) {
  const auto e = cli::error_json("launch", "no route", 1);
  EXPECT_EQ(cli::dump_json(e),
            R"({"error":{"command":"launch","message":"no route","exit_code":1}})");
  const topology::ConfigError ce({"grid.yaml", 3, 10}, "\"tls\": expected true or false");
  const json c = json::parse(cli::dump_json(cli::config_error_json("plan", ce, 2)));
  EXPECT_EQ(c["error"]["message"], "grid.yaml:3:10: \"tls\": expected true or false");
  EXPECT_EQ(c["error"]["file"], "grid.yaml");
  EXPECT_EQ(c["error"]["line"], 3);
  EXPECT_EQ(c["error"]["column"], 10);
  EXPECT_EQ(c["error"]["exit_code"], 2);
}

TEST(JsonOut, WhichCommandsAskForJson) {
  using V = std::vector<std::string>;
  EXPECT_TRUE(cli::json_request(V{"launch", "--size", "1MiB", "--json"}).json);
  EXPECT_EQ(cli::json_request(V{"launch", "--json"}).command, "launch");
  EXPECT_FALSE(cli::json_request(V{"launch", "--size", "1MiB"}).json);
  // After --, the words are a program's, not gridbcast's.
  EXPECT_FALSE(cli::json_request(V{"testbed", "run", "g.yaml", "--", "x", "--json"}).json);
  EXPECT_TRUE(cli::json_request(V{"plan", "--format", "json"}).json);
  EXPECT_TRUE(cli::json_request(V{"plan", "-f", "json"}).json);
  EXPECT_TRUE(cli::json_request(V{"plan", "--format=json"}).json);
  EXPECT_FALSE(cli::json_request(V{"plan", "--format", "dot"}).json);
  EXPECT_FALSE(cli::json_request(V{"launch", "-f", "json"}).json);  // launch's -f is --hostfile
}

const std::vector<std::pair<std::string, T>> kPlanFields = {
    {"algorithm", T::string},
    {"ranks", T::number_unsigned},
    {"root", T::number_unsigned},
    {"size", T::number_unsigned},
    {"wan_streams", T::number_unsigned},
    {"lanes", T::number_unsigned},
    {"max_flow_bound_seconds", T::number_float},
    {"max_flow_rate_bps", T::number_float},
    {"max_flow_bottleneck_rank", T::number_unsigned},
    {"lower_bound_seconds", T::number_float},
    {"nodes", T::array},
    {"transfers", T::array},
    {"multicasts", T::array},
    {"max_rate_bps", T::number_float}};

TEST(JsonSchema, Plan) {
  Child c({kBin, "plan", "--algorithm", "binomial", "--size", "1MiB", "--format", "json"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  const auto lines = json_lines(c.out());
  ASSERT_EQ(lines.size(), 1u) << c.out();
  const auto j = last_ordered(c.out());
  expect_fields(j, kPlanFields);
  EXPECT_EQ(j["algorithm"], "binomial");
  EXPECT_EQ(j["size"], 1 << 20);
  ASSERT_EQ(j["nodes"].size(), 8u);
  expect_fields(j["nodes"][0], {{"rank", T::number_unsigned},
                                {"name", T::string},
                                {"site", T::string},
                                {"nics", T::number_unsigned}});
  EXPECT_EQ(j["lanes"], 2);
  ASSERT_EQ(j["transfers"].size(), 7u);  // binomial: one transfer to every other rank
  expect_fields(j["transfers"][0], {{"from", T::number_unsigned},
                                    {"to", T::number_unsigned},
                                    {"offset", T::number_unsigned},
                                    {"length", T::number_unsigned},
                                    {"lane_from", T::number_unsigned},
                                    {"lane_to", T::number_unsigned},
                                    {"streams", T::number_unsigned},
                                    {"pace_bps", T::number_float},
                                    {"paced_streams", T::number_unsigned}});
  EXPECT_GT(j["max_flow_bound_seconds"].get<double>(), 0);
  EXPECT_TRUE(j["multicasts"].empty());
}

TEST(JsonSchema, MulticastPlan) {
  Child c({kBin, "plan", "--algorithm", "multicast", "--size", "1MiB", "--format", "json"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  const auto j = last_ordered(c.out());
  expect_fields(j, kPlanFields);
  ASSERT_EQ(j["multicasts"].size(), 2u);  // one per site of the embedded default
  expect_fields(j["multicasts"][1], {{"from", T::number_unsigned},
                                     {"lane", T::number_unsigned},
                                     {"offset", T::number_unsigned},
                                     {"length", T::number_unsigned},
                                     {"to", T::array}});
  EXPECT_EQ(j["multicasts"][0]["to"].size(), 3u);
  EXPECT_EQ(j["multicasts"][1]["length"], 1 << 20);
}

TEST(JsonSchema, Simulate) {
  Child c({kBin, "simulate", "--algorithm", "multilane,binomial", "--size", "1MiB", "--json"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  const auto lines = json_lines(c.out());
  ASSERT_EQ(lines.size(), 2u) << "one line per prediction: " << c.out();
  std::istringstream in(c.out());
  for (std::string line; std::getline(in, line);)
    expect_fields(parse_ordered(line), {{"algorithm", T::string},
                                        {"ranks", T::number_unsigned},
                                        {"size", T::number_unsigned},
                                        {"predicted_seconds", T::number_float},
                                        {"lower_bound_seconds", T::number_float},
                                        {"max_flow_bound_seconds", T::number_float},
                                        {"ratio_to_max_flow_bound", T::number_float},
                                        {"slowest_rank", T::number_unsigned},
                                        {"segments", T::number_unsigned},
                                        {"method", T::string}});
  EXPECT_EQ(lines[1]["algorithm"], "binomial");
  EXPECT_GT(lines[1]["predicted_seconds"].get<double>(), 0);
}

const std::vector<std::pair<std::string, T>> kLaunchFields = {
    {"algorithm", T::string},
    {"ranks", T::number_unsigned},
    {"sites", T::number_unsigned},
    {"bytes", T::number_unsigned},
    {"root", T::number_unsigned},
    {"iterations", T::number_unsigned},
    {"segment_bytes", T::number_unsigned},
    {"seconds", T::object},
    {"bandwidth_bytes_per_second", T::number_float},
    {"lower_bound_seconds", T::number_float},
    {"ratio_to_lower_bound", T::number_float},
    {"max_flow_bound_seconds", T::number_float},
    {"ratio_to_max_flow_bound", T::number_float},
    {"verified", T::boolean},
    {"sha256", T::string},
    {"rejected_connections", T::number_unsigned},
    {"peak_rss_bytes", T::number_unsigned},
    {"slowest_per_site", T::array},
    {"per_iteration", T::array},
    {"copies", T::array},
    {"complete", T::boolean},
    {"missing", T::array},
    {"stragglers", T::array},
    {"routed_around", T::array},
    {"took_over", T::array},
    {"files", T::array},
    {"measured", T::null},
    {"declared_max_flow_bound_seconds", T::null}};

TEST(JsonSchema, LaunchAndItsProgressRecords) {
  TempDir dir;
  const std::string progress = (dir / "progress.jsonl").string();
  Child c(
      {kBin, "launch", "--size", "1MiB", "--iterations", "2", "--json", "--progress", progress});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const auto lines = json_lines(c.out());
  ASSERT_EQ(lines.size(), 1u) << c.out();
  const auto j = last_ordered(c.out());
  expect_fields(j, kLaunchFields);
  expect_fields(j["seconds"],
                {{"min", T::number_float}, {"median", T::number_float}, {"max", T::number_float}});
  EXPECT_EQ(j["iterations"], 2);
  EXPECT_EQ(j["verified"], true);
  ASSERT_EQ(j["per_iteration"].size(), 2u);
  expect_fields(j["per_iteration"][0], {{"root", T::number_unsigned},
                                        {"bytes", T::number_unsigned},
                                        {"algorithm", T::string},
                                        {"seconds", T::number_float},
                                        {"max_rss_bytes", T::number_unsigned}});
  ASSERT_EQ(j["slowest_per_site"].size(), 2u);
  expect_fields(j["slowest_per_site"][0], {{"site", T::string},
                                           {"rank", T::number_unsigned},
                                           {"node", T::string},
                                           {"seconds", T::number_float}});
  EXPECT_TRUE(j["copies"].empty());
  EXPECT_EQ(j["complete"], true);
  EXPECT_TRUE(j["missing"].empty());
  EXPECT_TRUE(j["routed_around"].empty());
  EXPECT_TRUE(j["took_over"].empty());
  EXPECT_TRUE(j["stragglers"].empty());
  EXPECT_TRUE(j["files"].empty());
  // Progress records, if the broadcast lasted long enough for one: one a line.
  std::ifstream in(progress);
  for (std::string line; std::getline(in, line);) {
    const auto p = parse_ordered(line);
    expect_fields(p, {{"type", T::string},
                      {"iteration", T::number_unsigned},
                      {"elapsed_seconds", T::number_float},
                      {"bytes_held", T::number_unsigned},
                      {"bytes_total", T::number_unsigned},
                      {"ranks_done", T::number_unsigned},
                      {"ranks", T::number_unsigned},
                      {"rate_bytes_per_second", T::number_float},
                      {"eta_seconds", T::number_float}});
    EXPECT_EQ(p["type"], "progress");
  }
}

// A file whose name is not UTF-8 and holds control characters: the copy is
// made under that very name, and the summary is still valid JSON naming it
// with U+FFFD where the bad bytes were.
TEST(JsonSchema, LaunchFileWithABadlyEncodedNameGivesValidJson) {
  TempDir dir;
  const std::string name = "bad-\xff\x80-\x01-name";
  std::ofstream(dir / name) << "some bytes";
  Child c({kBin, "launch", "--file", (dir / name).string(), "--output",
           (dir / "out" / "{node}").string() + "/", "--json"},
          dir.path().string());
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  const auto j = last_ordered(c.out());  // throws on invalid UTF-8
  ASSERT_EQ(j["files"].size(), 1u) << c.out();
  expect_fields(j["files"][0], {{"path", T::string},
                                {"bytes", T::number_unsigned},
                                {"chunks", T::number_unsigned},
                                {"chunks_sent", T::number_unsigned},
                                {"root_digest", T::string},
                                {"wire_bytes", T::number_unsigned},
                                {"compressed", T::boolean}});
  const std::string path = j["files"][0]["path"];
  EXPECT_NE(path.find("bad-\xef\xbf\xbd\xef\xbf\xbd-\x01-name"), std::string::npos) << c.out();
  EXPECT_EQ(j["files"][0]["bytes"], 10);
  ASSERT_FALSE(j["copies"].empty());
  expect_fields(j["copies"][0],
                {{"rank", T::number_unsigned}, {"node", T::string}, {"path", T::string}});
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "a2" / name)) << c.out();
}

TEST(JsonSchema, Bench) {
  Child c({kBin, "bench", "--sizes", "4KiB", "--algorithms", "binomial", "--min-iterations", "2",
           "--max-iterations", "2", "--json"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  ASSERT_EQ(json_lines(c.out()).size(), 1u) << c.out();
  const auto j = last_ordered(c.out());
  expect_fields(j, {{"topology", T::string},
                    {"ranks", T::number_unsigned},
                    {"sites", T::number_unsigned},
                    {"root", T::number_unsigned},
                    {"method", T::string},
                    {"target_rel_stdev", T::number_float},
                    {"min_iterations", T::number_unsigned},
                    {"max_iterations", T::number_unsigned},
                    {"max_seconds_per_point", T::number_float},
                    {"rejected_connections", T::number_unsigned},
                    {"peak_rss_bytes", T::number_unsigned},
                    {"points", T::array}});
  ASSERT_EQ(j["points"].size(), 1u) << c.out();
  expect_fields(j["points"][0], {{"algorithm", T::string},
                                 {"used", T::string},
                                 {"bytes", T::number_unsigned},
                                 {"avg_us", T::number_float},
                                 {"min_us", T::number_float},
                                 {"max_us", T::number_float},
                                 {"iterations", T::number_unsigned},
                                 {"rel_stdev", T::number_float},
                                 {"stop", T::string},
                                 {"rtt_us", T::number_float},
                                 {"lower_bound_us", T::number_float},
                                 {"ratio_to_lower_bound", T::number_float},
                                 {"max_flow_bound_us", T::number_float},
                                 {"ratio_to_max_flow_bound", T::number_float},
                                 {"bandwidth_bytes_per_second", T::number_float},
                                 {"verified", T::boolean},
                                 {"rank_us", T::array}});
  EXPECT_EQ(j["points"][0]["rank_us"].size(), 8u);
  EXPECT_EQ(j["points"][0]["bytes"], 4096);
}

// The error object of docs/JSON.md: one line on stdout, the exit status kept.
// `c` has exited with `status`.
json error_of(const Child& c, int status, const std::string& command) {
  const auto lines = json_lines(c.out());
  EXPECT_EQ(lines.size(), 1u) << c.out();
  if (lines.empty()) return {};
  const auto& e = lines.back();
  EXPECT_EQ(e.size(), 1u) << e;
  EXPECT_EQ(e["error"]["command"], command) << e;
  EXPECT_EQ(e["error"]["exit_code"], status) << e;
  EXPECT_TRUE(e["error"]["message"].is_string()) << e;
  EXPECT_FALSE(c.err().empty()) << "people still get the message on stderr";
  return e["error"];
}

json expect_error(Child& c, int status, const std::string& command) {
  EXPECT_EQ(c.wait(60s), status) << c.err();
  return error_of(c, status, command);
}

TEST(JsonErrors, UsageErrorsOfEveryCommand) {
  Child launch({kBin, "launch", "--size", "lots", "--json"});
  EXPECT_NE(expect_error(launch, 2, "launch")["message"].get<std::string>().find("--size"),
            std::string::npos);
  Child plan({kBin, "plan", "--root", "99", "--format", "json"});
  EXPECT_NE(expect_error(plan, 2, "plan")["message"].get<std::string>().find("--root"),
            std::string::npos);
  Child bench({kBin, "bench", "--no-such-option", "--json"});
  expect_error(bench, 2, "bench");
  Child simulate({kBin, "simulate", "--congestion", "vegas", "--json"});
  EXPECT_NE(expect_error(simulate, 2, "simulate")["message"].get<std::string>().find("vegas"),
            std::string::npos);
  // Without --json, stdout stays empty.
  Child plain({kBin, "launch", "--size", "lots"});
  EXPECT_EQ(plain.wait(60s), 2);
  EXPECT_EQ(plain.out(), "");
}

TEST(JsonErrors, ABadTopologyNamesFileLineAndColumn) {
  TempDir dir;
  const std::string file = (dir / "bad.yaml").string();
  std::ofstream(file) << "defaults:\n  wan:\n    tls: maybe\nsites: []\n";
  for (const char* command : {"launch", "simulate", "bench"}) {
    Child c({kBin, command, file, "--json"});
    const json e = expect_error(c, 2, command);
    EXPECT_EQ(e["file"], file) << e;
    EXPECT_EQ(e["line"], 3) << e;
    EXPECT_EQ(e["column"], 10) << e;
    EXPECT_NE(e["message"].get<std::string>().find(file + ":3:10: "), std::string::npos) << e;
  }
  Child plan({kBin, "plan", file, "--format", "json"});
  EXPECT_EQ(expect_error(plan, 2, "plan")["line"], 3);
}

TEST(JsonErrors, ATopologyPathThatIsNotUtf8GivesValidJson) {
  TempDir dir;
  const std::string file = (dir / ("missing-\xff\x01.yaml")).string();
  Child c({kBin, "plan", file, "--format", "json"});
  const json e = expect_error(c, 2, "plan");  // json_lines throws on invalid UTF-8
  EXPECT_NE(e["file"].get<std::string>().find("missing-\xef\xbf\xbd\x01.yaml"), std::string::npos)
      << e;
}

// A run that fails (no such congestion control on this host): the status the
// launcher returns, in the object too, with what followed the first cause.
TEST(JsonErrors, AFailedRunGivesItsStatusTheFirstCauseAndWhatFollowed) {
  TempDir dir;
  const std::string file = (dir / "cc.yaml").string();
  std::ofstream(file) << "defaults:\n  nic_bandwidth: 10 Gbit\n  congestion: nosuchcc\nsites:\n"
                         "  - {name: a, nodes: [{name: \"a[1-2]\", nics: [{address: "
                         "\"127.0.8.[1-2]\"}]}]}\n";
  Child c({kBin, "launch", file, "--size", "1MiB", "--timeout", "20", "--json"});
  const int status = c.wait(120s);
  ASSERT_GT(status, 0) << c.err();
  const json e = error_of(c, status, "launch");
  EXPECT_NE(e["message"].get<std::string>().find("nosuchcc"), std::string::npos) << e;
  EXPECT_TRUE(e["then"].is_array()) << e;
}

}  // namespace
}  // namespace gridbcast::testing
