// Log levels: parsing, gating, the environment, timestamps, whole lines.
#include "lanes/log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gridbcast::lanes::log {
namespace {

// Standard error written while `f` runs, through a pipe.
template <typename F>
std::string stderr_of(F f) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  const int saved = ::dup(2);
  ::dup2(p[1], 2);
  f();
  ::dup2(saved, 2);
  ::close(saved);
  ::close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  return out;
}

class Log : public ::testing::Test {
 protected:
  void TearDown() override {
    set_level(Level::kNotice);
    set_timestamps(false);
  }
};

TEST_F(Log, LevelsParseByNameOrNumberAndAnythingElseIsRefusedNamingTheValues) {
  EXPECT_EQ(parse_level("error"), Level::kError);
  EXPECT_EQ(parse_level("notice"), Level::kNotice);
  EXPECT_EQ(parse_level("info"), Level::kInfo);
  EXPECT_EQ(parse_level("3"), Level::kDebug);
  for (Level l : {Level::kError, Level::kNotice, Level::kInfo, Level::kDebug})
    EXPECT_EQ(parse_level(level_name(l)), l);
  try {
    parse_level("loud");
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("error, notice, info, debug"), std::string::npos);
  }
  EXPECT_THROW(parse_level("4"), std::invalid_argument);
  EXPECT_THROW(parse_level(""), std::invalid_argument);
  // A hostile value is not echoed whole.
  try {
    parse_level(std::string(10000, 'x'));
  } catch (const std::invalid_argument& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
  }
}

TEST_F(Log, EachLevelLetsThroughItselfAndWhatIsMoreSevere) {
  set_level(Level::kNotice);
  const std::string out = stderr_of([] {
    error("e1");
    notice("n1");
    info("i1");
    debug("d1");
  });
  EXPECT_EQ(out, "e1\nn1\n");
  set_level(Level::kError);
  EXPECT_EQ(stderr_of([] {
              notice("n2");
              error("e2");
            }),
            "e2\n");
  set_level(Level::kDebug);
  EXPECT_EQ(stderr_of([] {
              info("i3");
              debug("d3");
            }),
            "i3\nd3\n");
}

// "2026-11-24T05:01:02.345Z " (checked by hand: <regex> trips GCC 12's
// maybe-uninitialized warning in the sanitizer builds).
bool is_utc_stamp(const std::string& s) {
  const std::string shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
  if (s.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != shape[i])
      return false;
  return true;
}

TEST_F(Log, TimestampsPrefixEveryLineWithTheUtcTime) {
  set_timestamps(true);
  const std::string out = stderr_of([] { notice("stamped"); });
  const std::string tail = "stamped\n";
  ASSERT_GT(out.size(), tail.size()) << out;
  EXPECT_TRUE(is_utc_stamp(out.substr(0, out.size() - tail.size()))) << out;
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  set_timestamps(false);
  EXPECT_EQ(stamp(), "");
}

// A process that never called set_level (a rank) takes GRIDBCAST_LOG_LEVEL.
TEST_F(Log, TheEnvironmentGivesTheLevelAndAnInvalidValueIsSaidAndIgnored) {
  ::setenv(kLevelEnv, "info", 1);
  EXPECT_EQ(level_from_environment(), Level::kInfo);
  ::setenv(kLevelEnv, "error", 1);
  EXPECT_EQ(level_from_environment(), Level::kError);
  ::setenv(kLevelEnv, "shout", 1);
  Level got = Level::kDebug;
  const std::string said = stderr_of([&] { got = level_from_environment(); });
  EXPECT_EQ(got, Level::kNotice);
  EXPECT_NE(said.find("GRIDBCAST_LOG_LEVEL"), std::string::npos) << said;
  ::unsetenv(kLevelEnv);
  EXPECT_EQ(level_from_environment(), Level::kNotice);
}

bool all_printable_ascii(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  return true;
}

// A peer certificate's names reach the log: an escape sequence in them must not
// restyle the terminal, nor a \r or \n forge a line.
TEST(Printable, EscapesEveryByteOutsidePrintableAsciiAndTheBackslash) {
  EXPECT_EQ(printable("b1.site-a_2 ok"), "b1.site-a_2 ok");
  EXPECT_EQ(printable("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(printable("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d");
  EXPECT_EQ(printable(std::string_view("x\0y", 3)), "x\\x00y");
  // The backslash too, so an escape in the output always means a byte in the input.
  EXPECT_EQ(printable("a\\x0a"), "a\\x5cx0a");
  EXPECT_EQ(printable("\x7f\x80\xff"), "\\x7f\\x80\\xff");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(printable(""), "");
  const std::string forged = "\n[forged] rank 0: ok\x1b[2J\r";
  EXPECT_TRUE(all_printable_ascii(printable(forged))) << printable(forged);
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const std::string escaped = printable(every_byte, 4096);
  EXPECT_TRUE(all_printable_ascii(escaped)) << escaped;
  EXPECT_EQ(escaped.size(), 94u + 162u * 4u);  // 0x20..0x7e but '\' plain, the rest \xNN
}

TEST(Printable, LongTextIsCutAtTheBoundWithAnEllipsisAndNoEscapeIsSplit) {
  EXPECT_EQ(printable(std::string(kPrintableMax, 'a')), std::string(kPrintableMax, 'a'));
  EXPECT_EQ(printable(std::string(kPrintableMax + 1, 'a')),
            std::string(kPrintableMax, 'a') + "...");
  EXPECT_EQ(printable(std::string(100000, 'a')), std::string(kPrintableMax, 'a') + "...");
  // An escape that would not fit whole is left out, not cut.
  EXPECT_EQ(printable(std::string(kPrintableMax - 2, 'a') + "\n"),
            std::string(kPrintableMax - 2, 'a') + "...");
  EXPECT_EQ(printable(std::string(100000, '\x1b')).size(), kPrintableMax + 3);
  EXPECT_EQ(printable("abcdef", 4), "abcd...");
  EXPECT_EQ(printable("\n\n", 4), "\\x0a...");
}

}  // namespace
}  // namespace gridbcast::lanes::log
