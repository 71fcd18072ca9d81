// `launch --tag-output`: every line a rank writes reaches the launcher's
// standard output or error whole (one write per line, however the rank wrote
// it) and prefixed with its rank; a line longer than kMaxOutputLine is cut;
// without the option ranks' output is their own. Ranks here are a shell
// script (it never joins the job, so the launcher fails after it; the lines
// are what is checked).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>

#include "job/backend.hpp"
#include "support/process.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(TagOutput, EveryLineIsWholeAndNamesItsRank) {
  // Each line in three writes (printf is a shell builtin: one write each),
  // 40 lines per rank on stdout, one on stderr, and a 70,000-byte line.
  const std::string script =
      "for i in $(seq 1 40); do printf 'r%s-' \"$GRIDBCAST_RANK\"; printf '%s-' \"$i\"; "
      "printf 'end\\n'; done; echo \"err $GRIDBCAST_RANK\" >&2; "
      "[ \"$GRIDBCAST_RANK\" = 3 ] && head -c 70000 /dev/zero | tr '\\0' x; exit 0";
  Child c(
      {kBin, "launch", "--tag-output", "--startup-timeout", "5", "--", "/bin/sh", "-c", script});
  c.wait(60s);
  std::map<int, int> per_rank;
  const std::regex line(R"(\[rank (\d)\] r(\d)-(\d+)-end)");
  size_t long_pieces = 0, long_bytes = 0;
  for (const auto& l : lines_of(c.out())) {
    std::smatch m;
    if (std::regex_match(l, m, line)) {
      EXPECT_EQ(m[1], m[2]) << "a line under another rank's name: " << l;
      ++per_rank[std::stoi(m[1])];
    } else if (l.rfind("[rank 3] x", 0) == 0) {
      ++long_pieces;
      long_bytes += l.size() - std::string("[rank 3] ").size();
      EXPECT_LE(l.size() - 9, job::kMaxOutputLine);
    } else {
      ADD_FAILURE() << "a torn or untagged line: \"" << l.substr(0, 120) << "\"";
    }
  }
  EXPECT_EQ(per_rank.size(), 8u);
  for (const auto& [rank, n] : per_rank) EXPECT_EQ(n, 40) << "rank " << rank;
  EXPECT_EQ(long_pieces, 2u) << "70,000 bytes cut at " << job::kMaxOutputLine;
  EXPECT_EQ(long_bytes, 70000u);
  for (int r = 0; r < 8; ++r)
    EXPECT_NE(c.err().find("[rank " + std::to_string(r) + "] err " + std::to_string(r) + "\n"),
              std::string::npos)
        << c.err();
}

TEST(TagOutput, TimestampsComeFirstAndTheExternalBackendRefusesIt) {
  Child c({kBin, "launch", "--timestamp-output", "--startup-timeout", "5", "--", "/bin/sh", "-c",
           "echo hi"});
  c.wait(60s);
  EXPECT_TRUE(std::regex_search(c.out(),
                                std::regex(R"((^|\n)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z hi\n)")))
      << c.out();
  Child ext({kBin, "launch", "--backend", "external", "--tag-output"});
  EXPECT_EQ(ext.wait(30s), 2);
  EXPECT_NE(ext.err().find("not the launcher's to tag"), std::string::npos) << ext.err();
}

}  // namespace
}  // namespace gridbcast::testing
