// Hostlist ranges, as in "n[01-16]": one compact string for many node names or
// addresses.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gridbcast::topology {

// More names than this is certainly a typo, and would exhaust memory first.
inline constexpr std::size_t kMaxHostlistNames = 1'000'000;
// Likewise for the names' total length: a million short names fit, but long
// text between groups must not multiply into gigabytes (found by fuzzing).
inline constexpr std::size_t kMaxHostlistChars = 16u << 20;

// Expands every [..] group of a hostlist. A group is a comma-separated list of
// decimal numbers and ranges "lo-hi"; numbers are zero-padded to the width of the
// lower bound as written ("[08-10]" gives 08, 09, 10). With several groups the
// result is their cartesian product, leftmost group outermost. Text outside
// groups is copied literally. Throws std::invalid_argument on unbalanced or nested
// brackets, empty groups or items, non-numeric bounds, lo > hi, or more than
// kMaxHostlistNames names or kMaxHostlistChars characters in all (checked before
// anything is expanded).
std::vector<std::string> expand_hostlist(std::string_view hostlist);

}  // namespace gridbcast::topology
