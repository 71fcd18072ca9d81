#include "lanes/log.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <stdexcept>

#include "lanes/net.hpp"

namespace gridbcast::lanes::log {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};
std::atomic<int> g_timestamps{kUnset};

}  // namespace

Level level_from_environment() {
  const char* v = std::getenv(kLevelEnv);
  if (!v || !*v) return Level::kNotice;
  try {
    return parse_level(v);
  } catch (const std::invalid_argument& e) {
    write_line(std::string("gridbcast: ") + kLevelEnv + ": " + e.what() + "; using notice");
    return Level::kNotice;
  }
}

Level parse_level(std::string_view text) {
  static constexpr std::string_view kNames[] = {"error", "notice", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (text == kNames[i] || (text.size() == 1 && text[0] == static_cast<char>('0' + i)))
      return static_cast<Level>(i);
  std::string shown(text.substr(0, 32));
  throw std::invalid_argument("\"" + shown + "\" is not a log level (error, notice, info, debug)");
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError:
      return "error";
    case Level::kNotice:
      return "notice";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "notice";
}

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l == kUnset) {
    // Racing first calls compute the same value from the same environment.
    int expected = kUnset;
    const int from_env = static_cast<int>(level_from_environment());
    g_level.compare_exchange_strong(expected, from_env);
    l = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<Level>(l);
}

void set_level(Level level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_timestamps(bool on) {
  g_timestamps.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool timestamps() {
  int t = g_timestamps.load(std::memory_order_relaxed);
  if (t == kUnset) {
    const char* v = std::getenv(kTimestampsEnv);
    int expected = kUnset;
    g_timestamps.compare_exchange_strong(expected, v && std::string_view(v) == "1" ? 1 : 0);
    t = g_timestamps.load(std::memory_order_relaxed);
  }
  return t == 1;
}

std::string stamp() {
  return timestamps() ? utc_now() : std::string();
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string printable(std::string_view text, std::size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max) + 3);
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = c >= 0x20 && c <= 0x7e && c != '\\';
    if (out.size() + (plain ? 1 : 4) > max) {
      out += "...";
      break;
    }
    if (plain) {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    }
  }
  return out;
}

void write(Level l, const std::string& line) {
  if (!enabled(l)) return;
  write_line(stamp() + line);
}

}  // namespace gridbcast::lanes::log
