// Parsing and printing of the quantities site-configs and the CLI are written in:
// durations, bandwidths, sizes and loss fractions. Every parser accepts an
// optional space between number and unit and throws std::invalid_argument naming
// what was expected and what it got.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gridbcast::topology {

// Seconds. Units ns, us, ms, s, min; a bare "0" is accepted, other bare numbers
// are not (they would be ambiguous).
double parse_duration(std::string_view text);

// Bits per second, decimal multipliers. Units bit, Kbit, Mbit, Gbit, Tbit (each
// optionally followed by "/s"), bps, Kbps, Mbps, Gbps, Tbps, and byte rates B/s,
// KB/s, MB/s, GB/s, TB/s (x8). Case-sensitive: "Mbit" is not "MB/s".
double parse_bandwidth(std::string_view text);

// Bytes. A bare integer is bytes; units B, KB (or kB), MB, GB, TB (powers of
// 1000), KiB, MiB, GiB, TiB and, as in dd and iperf3, K, M, G, T in either case
// (powers of 1024). Fractions are allowed only when the result
// is a whole number of bytes ("1.5 MiB"); the result must fit in 64 bits.
std::uint64_t parse_size(std::string_view text);

// A fraction in [0, 1): "0.1 %" / "0.1%" is a percentage, a bare number is the
// fraction itself ("0.001").
double parse_fraction(std::string_view text);

// Human-readable forms, at most two decimals with trailing zeros dropped; each is
// accepted back by the matching parser (up to that rounding).
std::string format_bytes(std::uint64_t bytes);  // "1.5 MiB", "512 B"
std::string format_bandwidth(double bps);       // "1 Gbit/s", "800 Kbit/s"
std::string format_duration(double seconds);    // "10 ms", "1.5 s", "2 min"

}  // namespace gridbcast::topology
