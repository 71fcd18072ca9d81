#include "topology/hostlist.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace gridbcast::topology {

namespace {

// Longer bounds cannot be meant; the limit keeps the arithmetic in 64 bits.
constexpr std::size_t kMaxDigits = 18;

struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0;  // zero-padding width, from the lower bound as written
};

// Either literal text (ranges empty) or one [..] group.
struct Segment {
  std::string literal;
  std::vector<Range> ranges;
  std::uint64_t count = 1;
};

[[noreturn]] void fail(std::string_view hostlist, const std::string& why) {
  throw std::invalid_argument("invalid hostlist \"" + std::string(hostlist) + "\": " + why);
}

std::uint64_t parse_bound(std::string_view hostlist, std::string_view group, std::string_view item,
                          std::string_view text) {
  if (text.empty()) {
    fail(hostlist,
         "missing number in \"" + std::string(item) + "\" of [" + std::string(group) + "]");
  }
  for (const char c : text) {
    if (c < '0' || c > '9') {
      fail(hostlist,
           "\"" + std::string(text) + "\" in [" + std::string(group) + "] is not a decimal number");
    }
  }
  if (text.size() > kMaxDigits) {
    fail(hostlist, "number \"" + std::string(text) + "\" has more than " +
                       std::to_string(kMaxDigits) + " digits");
  }
  std::uint64_t value = 0;
  for (const char c : text) value = value * 10 + static_cast<std::uint64_t>(c - '0');
  return value;
}

Segment parse_group(std::string_view hostlist, std::string_view group) {
  if (group.empty()) fail(hostlist, "empty range \"[]\"");
  Segment segment;
  segment.count = 0;
  std::string_view rest = group;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item.empty()) fail(hostlist, "empty item in [" + std::string(group) + "]");
    const size_t dash = item.find('-');
    const std::string_view lo_text = item.substr(0, dash);
    const std::string_view hi_text =
        dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    Range range;
    range.lo = parse_bound(hostlist, group, item, lo_text);
    range.hi = parse_bound(hostlist, group, item, hi_text);
    range.width = lo_text.size();
    if (range.lo > range.hi) {
      fail(hostlist,
           "range " + std::string(item) + " is empty: the lower bound is above the upper bound");
    }
    // Checked per range so that the sum below cannot overflow.
    const std::uint64_t n = range.hi - range.lo + 1;
    if (n > kMaxHostlistNames || segment.count + n > kMaxHostlistNames) {
      fail(hostlist, "expands to more than " + std::to_string(kMaxHostlistNames) + " names");
    }
    segment.count += n;
    segment.ranges.push_back(range);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return segment;
}

std::string padded(std::uint64_t value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist) {
  if (hostlist.empty()) fail(hostlist, "empty hostlist");

  std::vector<Segment> segments;
  std::uint64_t total = 1;
  std::uint64_t longest = 0;  // the longest name the segments can make
  size_t i = 0;
  while (i < hostlist.size()) {
    const size_t open = hostlist.find_first_of("[]", i);
    const std::string_view literal =
        hostlist.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    if (!literal.empty()) segments.push_back(Segment{std::string(literal), {}, 1});
    longest += literal.size();
    if (open == std::string_view::npos) break;
    if (hostlist[open] == ']') {
      fail(hostlist, "']' at character " + std::to_string(open + 1) + " has no matching '['");
    }
    const size_t close = hostlist.find_first_of("[]", open + 1);
    if (close == std::string_view::npos) {
      fail(hostlist, "'[' at character " + std::to_string(open + 1) + " is never closed");
    }
    if (hostlist[close] == '[') {
      fail(hostlist, "'[' at character " + std::to_string(close + 1) +
                         " is nested inside another [...] group");
    }
    Segment group = parse_group(hostlist, hostlist.substr(open + 1, close - open - 1));
    total *= group.count;  // both factors <= kMaxHostlistNames, so no overflow
    if (total > kMaxHostlistNames) {
      fail(hostlist, "expands to more than " + std::to_string(kMaxHostlistNames) + " names");
    }
    std::uint64_t widest = 0;
    for (const Range& r : group.ranges)
      widest = std::max<std::uint64_t>(widest, std::max(r.width, std::to_string(r.hi).size()));
    longest += widest;
    segments.push_back(std::move(group));
    i = close + 1;
  }
  // total <= kMaxHostlistNames and longest <= the hostlist's length: no overflow.
  if (total * longest > kMaxHostlistChars) {
    fail(hostlist, "expands to " + std::to_string(total) + " names of up to " +
                       std::to_string(longest) + " characters, more than " +
                       std::to_string(kMaxHostlistChars >> 20) + " MiB of names in all");
  }

  // Extend every partial name by each value of the next segment in turn, which
  // makes the leftmost group the outermost (slowest-changing) one.
  std::vector<std::string> names{""};
  for (const Segment& segment : segments) {
    if (segment.ranges.empty()) {
      for (std::string& name : names) name += segment.literal;
      continue;
    }
    std::vector<std::string> next;
    next.reserve(names.size() * segment.count);
    for (const std::string& prefix : names) {
      for (const Range& range : segment.ranges) {
        for (std::uint64_t v = range.lo; v <= range.hi; ++v) {
          next.push_back(prefix + padded(v, range.width));
        }
      }
    }
    names = std::move(next);
  }
  return names;
}

}  // namespace gridbcast::topology
