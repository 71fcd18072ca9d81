// Diagnostics with levels, one whole line per write (lanes::write_line), so
// lines from concurrent threads and from ranks sharing one standard error never
// tear into each other.
//
//   error   always said: what failed, and what a user must do (-q keeps these)
//   notice  the default: notes and warnings (refused connections, resume, ...)
//   info    -v: what each rank and the launcher are doing (starts, connections,
//           plans, per-iteration times)
//   debug   -vv: per-lane and per-peer detail
//
// The level is set by the command line (set_level) and reaches ranks in
// GRIDBCAST_LOG_LEVEL, which a process reads at its first log call unless
// set_level came first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gridbcast::lanes::log {

enum class Level { kError = 0, kNotice = 1, kInfo = 2, kDebug = 3 };

inline constexpr const char* kLevelEnv = "GRIDBCAST_LOG_LEVEL";
inline constexpr const char* kTimestampsEnv = "GRIDBCAST_LOG_TIMESTAMPS";

// "error", "notice", "info", "debug" (or 0..3). Throws std::invalid_argument
// naming the accepted values.
Level parse_level(std::string_view text);
const char* level_name(Level level);

// The current level: set_level's, else GRIDBCAST_LOG_LEVEL's (an invalid value
// is said once and the default, notice, kept), else notice.
Level level();
// What GRIDBCAST_LOG_LEVEL asks for (notice when unset; an invalid value is
// said, and notice used).
Level level_from_environment();
void set_level(Level level);
inline bool enabled(Level l) {
  return static_cast<int>(l) <= static_cast<int>(level());
}

// Prefix every line with the UTC time (ISO 8601, milliseconds). Also on when
// GRIDBCAST_LOG_TIMESTAMPS=1.
void set_timestamps(bool on);
bool timestamps();
// "2026-11-24T05:01:02.345Z " when timestamps are on, else "".
std::string stamp();
// The same, always: "2026-11-24T05:01:02.345Z ".
std::string utc_now();

// Text from outside the job (a peer certificate's names, ...) made safe for a
// terminal and a log line: every byte outside printable ASCII 0x20..0x7e, and
// the backslash itself, becomes \xNN, so an escape sequence cannot restyle the
// terminal and \r or \n cannot forge a line. At most `max` bytes of escaped
// text (an escape is never cut), then "..." when some of `text` was left out.
inline constexpr std::size_t kPrintableMax = 256;
std::string printable(std::string_view text, std::size_t max = kPrintableMax);

// Writes `line` (stamped) to standard error in one write when `l` is enabled.
void write(Level l, const std::string& line);
inline void error(const std::string& line) {
  write(Level::kError, line);
}
inline void notice(const std::string& line) {
  write(Level::kNotice, line);
}
inline void info(const std::string& line) {
  write(Level::kInfo, line);
}
inline void debug(const std::string& line) {
  write(Level::kDebug, line);
}

}  // namespace gridbcast::lanes::log
