#include "topology/units.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <system_error>

namespace gridbcast::topology {

namespace {

constexpr std::string_view kDurationExpected =
    R"(a duration such as "10 ms" (units ns, us, ms, s, min))";
constexpr std::string_view kBandwidthExpected =
    R"(a bandwidth such as "1 Gbit" (units bit, Kbit, Mbit, Gbit, Tbit, optionally with "/s"; )"
    R"(bps, Kbps, Mbps, Gbps, Tbps; B/s, KB/s, MB/s, GB/s, TB/s))";
constexpr std::string_view kSizeExpected =
    R"(a size such as "256 KiB" (a byte count, or units B; KB or kB, MB, GB, TB (powers of 1000); )"
    R"(KiB, MiB, GiB, TiB or K, M, G, T in either case (powers of 1024)))";
constexpr std::string_view kFractionExpected =
    R"(a fraction such as "0.1 %" or "0.001" (at least 0 and below 1, i.e. below 100 %))";

struct Unit {
  std::string_view name;
  double scale;
};

constexpr Unit kDurationUnits[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}, {"min", 60.0},
};

constexpr Unit kBandwidthUnits[] = {
    {"bit", 1.0},    {"bit/s", 1.0}, {"bps", 1.0},    {"Kbit", 1e3},    {"Kbit/s", 1e3},
    {"Kbps", 1e3},   {"Mbit", 1e6},  {"Mbit/s", 1e6}, {"Mbps", 1e6},    {"Gbit", 1e9},
    {"Gbit/s", 1e9}, {"Gbps", 1e9},  {"Tbit", 1e12},  {"Tbit/s", 1e12}, {"Tbps", 1e12},
    {"B/s", 8.0},    {"KB/s", 8e3},  {"MB/s", 8e6},   {"GB/s", 8e9},    {"TB/s", 8e12},
};

struct SizeUnit {
  std::string_view name;
  std::uint64_t scale;
};

constexpr SizeUnit kSizeUnits[] = {
    {"", 1},
    {"B", 1},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"kB", 1000ULL},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
    // dd's and iperf3's single letters: powers of 1024, either case.
    {"K", 1ULL << 10},
    {"k", 1ULL << 10},
    {"M", 1ULL << 20},
    {"m", 1ULL << 20},
    {"G", 1ULL << 30},
    {"g", 1ULL << 30},
    {"T", 1ULL << 40},
    {"t", 1ULL << 40},
};

[[noreturn]] void fail(std::string_view expected, std::string_view text,
                       std::string_view why = {}) {
  std::string message = "expected ";
  message += expected;
  message += ", got \"";
  message += text;
  message += '"';
  if (!why.empty()) {
    message += " (";
    message += why;
    message += ')';
  }
  throw std::invalid_argument(message);
}

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// "<digits>[.<digits>] [unit]", split into its parts. Signs and exponents are not
// part of the grammar: a leading '-' is reported as "negative", anything else as
// a malformed number.
struct Quantity {
  std::string_view number;    // integer and fraction, as written
  std::string_view integer;   // digits before the point
  std::string_view fraction;  // digits after the point
  std::string_view unit;      // may be empty
};

Quantity split_quantity(std::string_view text, std::string_view expected) {
  const std::string_view s = trim(text);
  if (s.empty()) fail(expected, text, "empty");
  if (s.front() == '-') fail(expected, text, "negative values are not allowed");
  size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  Quantity q;
  q.integer = s.substr(0, i);
  if (i < s.size() && s[i] == '.') {
    const size_t begin = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    q.fraction = s.substr(begin, i - begin);
  }
  if (q.integer.empty() && q.fraction.empty()) fail(expected, text, "no number");
  q.number = s.substr(0, i);
  q.unit = trim(s.substr(i));
  return q;
}

double to_double(const Quantity& q, std::string_view text, std::string_view expected) {
  double value = 0;
  const char* first = q.number.data();
  const char* last = first + q.number.size();
  const auto [ptr, ec] = std::from_chars(first, last, value, std::chars_format::fixed);
  if (ec != std::errc() || ptr != last || !std::isfinite(value)) {
    fail(expected, text, "number out of range");
  }
  return value;
}

template <typename UnitT, size_t N>
const UnitT* find_unit(const UnitT (&units)[N], std::string_view name) {
  for (const UnitT& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

std::string unknown_unit(std::string_view unit) {
  return "unknown unit \"" + std::string(unit) + "\"";
}

// Picks the largest unit not above the value, rounds to two decimals and moves one
// unit up when rounding reached it ("1023.999 KiB" prints as "1 MiB").
std::string format_scaled(double value, std::span<const Unit> units) {
  std::string sign;
  if (value < 0) {
    sign = "-";
    value = -value;
  }
  size_t index = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    if (value >= units[i].scale) index = i;
  }
  if (value == 0) {
    // Zero reads best in the base unit of the family.
    for (size_t i = 0; i < units.size(); ++i) {
      if (units[i].scale == 1.0) index = i;
    }
  }
  double scaled = std::round(value / units[index].scale * 100.0) / 100.0;
  if (index + 1 < units.size() && scaled * units[index].scale >= units[index + 1].scale) {
    ++index;
    scaled = std::round(value / units[index].scale * 100.0) / 100.0;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.2f", scaled);
  std::string number = buffer;
  if (number.find('.') != std::string::npos) {
    while (number.back() == '0') number.pop_back();
    if (number.back() == '.') number.pop_back();
  }
  return sign + number + " " + std::string(units[index].name);
}

}  // namespace

double parse_duration(std::string_view text) {
  const Quantity q = split_quantity(text, kDurationExpected);
  const double value = to_double(q, text, kDurationExpected);
  if (q.unit.empty()) {
    // "0" means the same in every unit; any other bare number would be a guess.
    if (value == 0) return 0;
    fail(kDurationExpected, text, "missing unit");
  }
  const Unit* unit = find_unit(kDurationUnits, q.unit);
  if (unit == nullptr) fail(kDurationExpected, text, unknown_unit(q.unit));
  return value * unit->scale;
}

double parse_bandwidth(std::string_view text) {
  const Quantity q = split_quantity(text, kBandwidthExpected);
  const double value = to_double(q, text, kBandwidthExpected);
  // No bare numbers, not even 0: bits and bytes are too easy to confuse.
  if (q.unit.empty()) fail(kBandwidthExpected, text, "missing unit");
  const Unit* unit = find_unit(kBandwidthUnits, q.unit);
  if (unit == nullptr) fail(kBandwidthExpected, text, unknown_unit(q.unit));
  return value * unit->scale;
}

std::uint64_t parse_size(std::string_view text) {
  const Quantity q = split_quantity(text, kSizeExpected);
  const SizeUnit* unit = find_unit(kSizeUnits, q.unit);
  if (unit == nullptr) fail(kSizeExpected, text, unknown_unit(q.unit));

  // Integer arithmetic throughout so that large sizes stay exact.
  constexpr std::string_view kTooLarge = "larger than 2^64 - 1 bytes";
  std::uint64_t whole = 0;
  for (const char c : q.integer) {
    if (__builtin_mul_overflow(whole, 10U, &whole) ||
        __builtin_add_overflow(whole, static_cast<std::uint64_t>(c - '0'), &whole)) {
      fail(kSizeExpected, text, kTooLarge);
    }
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(whole, unit->scale, &bytes)) fail(kSizeExpected, text, kTooLarge);

  std::string_view fraction = q.fraction;
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  if (!fraction.empty()) {
    constexpr std::string_view kNotWhole = "not a whole number of bytes";
    // 10^19 is the largest power of ten below 2^64.
    if (fraction.size() > 19) fail(kSizeExpected, text, kNotWhole);
    std::uint64_t numerator = 0;
    std::uint64_t denominator = 1;
    for (const char c : fraction) {
      numerator = numerator * 10 + static_cast<std::uint64_t>(c - '0');
      denominator *= 10;
    }
    // numerator / denominator * scale must be an integer; cancel the common factor
    // of scale and denominator first so the product cannot overflow needlessly.
    const std::uint64_t common = std::gcd(unit->scale, denominator);
    const std::uint64_t reduced_denominator = denominator / common;
    if (numerator % reduced_denominator != 0) fail(kSizeExpected, text, kNotWhole);
    std::uint64_t part = 0;
    if (__builtin_mul_overflow(numerator / reduced_denominator, unit->scale / common, &part) ||
        __builtin_add_overflow(bytes, part, &bytes)) {
      fail(kSizeExpected, text, kTooLarge);
    }
  }
  return bytes;
}

double parse_fraction(std::string_view text) {
  const Quantity q = split_quantity(text, kFractionExpected);
  double value = to_double(q, text, kFractionExpected);
  if (q.unit == "%") {
    value /= 100.0;
  } else if (!q.unit.empty()) {
    fail(kFractionExpected, text, unknown_unit(q.unit));
  }
  if (value >= 1.0) fail(kFractionExpected, text, "must be below 1 (100 %)");
  return value;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr Unit kUnits[] = {
      {"B", 1.0},
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
  };
  return format_scaled(static_cast<double>(bytes), kUnits);
}

std::string format_bandwidth(double bps) {
  static constexpr Unit kUnits[] = {
      {"bit/s", 1.0}, {"Kbit/s", 1e3}, {"Mbit/s", 1e6}, {"Gbit/s", 1e9}, {"Tbit/s", 1e12},
  };
  return format_scaled(bps, kUnits);
}

std::string format_duration(double seconds) {
  static constexpr Unit kUnits[] = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}, {"min", 60.0},
  };
  return format_scaled(seconds, kUnits);
}

}  // namespace gridbcast::topology
