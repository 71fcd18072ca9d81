// Log levels: parsing, gating, the environment, timestamps, whole lines.
#include "lanes/log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <stdexcept>
#include <string>

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

}  // namespace
}  // namespace gridbcast::lanes::log
