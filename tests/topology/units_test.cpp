#include "topology/units.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace gridbcast::topology {
namespace {

// The message of the std::invalid_argument `parse` throws for `text`.
template <typename Parse>
std::string error_of(Parse parse, const std::string& text) {
  try {
    parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for \"" << text << "\"";
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ParseDuration, AcceptsEveryUnitWithAndWithoutSpace) {
  EXPECT_DOUBLE_EQ(parse_duration("10 ms"), 0.010);
  EXPECT_DOUBLE_EQ(parse_duration("10ms"), 0.010);
  EXPECT_DOUBLE_EQ(parse_duration("1.5 s"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("250 us"), 250e-6);
  EXPECT_DOUBLE_EQ(parse_duration("100 ns"), 100e-9);
  EXPECT_DOUBLE_EQ(parse_duration("2 min"), 120.0);
  EXPECT_DOUBLE_EQ(parse_duration("0.5min"), 30.0);
  EXPECT_DOUBLE_EQ(parse_duration(".5 s"), 0.5);
  EXPECT_DOUBLE_EQ(parse_duration("  7 s  "), 7.0);
}

TEST(ParseDuration, ZeroNeedsNoUnit) {
  EXPECT_EQ(parse_duration("0"), 0.0);
  EXPECT_EQ(parse_duration("0.0"), 0.0);
  EXPECT_EQ(parse_duration("0 ms"), 0.0);
}

TEST(ParseDuration, RejectsBadInputWithExpectation) {
  EXPECT_TRUE(contains(error_of(parse_duration, "10 parsecs"),
                       R"(expected a duration such as "10 ms" (units ns, us, ms, s, min), )"
                       R"(got "10 parsecs")"));
  EXPECT_TRUE(contains(error_of(parse_duration, "10 parsecs"), "unknown unit \"parsecs\""));
  EXPECT_TRUE(contains(error_of(parse_duration, "-5 ms"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_duration, "10"), "missing unit"));
  EXPECT_TRUE(contains(error_of(parse_duration, ""), "empty"));
  EXPECT_TRUE(contains(error_of(parse_duration, "ms"), "no number"));
  EXPECT_TRUE(contains(error_of(parse_duration, "10 MS"), "unknown unit \"MS\""));
  EXPECT_TRUE(contains(error_of(parse_duration, "1e3 ms"), "unknown unit"));
  EXPECT_TRUE(contains(error_of(parse_duration, "1.2.3 s"), "unknown unit"));
  EXPECT_TRUE(contains(error_of(parse_duration, "10 m s"), "unknown unit \"m s\""));
  EXPECT_TRUE(contains(error_of(parse_duration, "+5 s"), "no number"));
}

TEST(ParseBandwidth, AcceptsEveryUnit) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 Gbit"), 1e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100 Mbit"), 100e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10 Gbit/s"), 10e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 Gbps"), 1e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100 Mbps"), 100e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("800 Kbit"), 800e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("2 Tbit"), 2e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("125 MB/s"), 1e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 GB/s"), 8e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("64 bit"), 64.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("64 bps"), 64.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("64 bit/s"), 64.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3 Kbps"), 3e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3 Kbit/s"), 3e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3 Mbit/s"), 3e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3 Tbps"), 3e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3 Tbit/s"), 3e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10 B/s"), 80.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10 KB/s"), 80e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 TB/s"), 8e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("2.5Gbit"), 2.5e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("0 Gbit"), 0.0);
}

TEST(ParseBandwidth, RejectsBadInputWithExpectation) {
  const std::string message = error_of(parse_bandwidth, "1 gbit");
  EXPECT_TRUE(contains(message, R"(expected a bandwidth such as "1 Gbit")")) << message;
  EXPECT_TRUE(contains(message, R"(got "1 gbit")")) << message;
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "1 GiB/s"), "unknown unit \"GiB/s\""));
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "1 Gbyte"), "unknown unit"));
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "100"), "missing unit"));
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "0"), "missing unit"));
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "-1 Gbit"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_bandwidth, "fast"), "no number"));
}

TEST(ParseSize, AcceptsEveryUnit) {
  EXPECT_EQ(parse_size("256 KiB"), 256u * 1024);
  EXPECT_EQ(parse_size("1 MiB"), 1u << 20);
  EXPECT_EQ(parse_size("64 MB"), 64'000'000u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("3 GiB"), 3ull << 30);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("1.5 MiB"), 1'572'864u);
  EXPECT_EQ(parse_size("12 B"), 12u);
  EXPECT_EQ(parse_size("2 KB"), 2000u);
  EXPECT_EQ(parse_size("2 GB"), 2'000'000'000u);
  EXPECT_EQ(parse_size("2 TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_size("2 TiB"), 2ull << 40);
  EXPECT_EQ(parse_size("0.5 KB"), 500u);
  EXPECT_EQ(parse_size("1.000 KiB"), 1024u);
  EXPECT_EQ(parse_size("7.0"), 7u);
  EXPECT_EQ(parse_size("1MiB"), 1u << 20);
}

TEST(ParseSize, IsExactUpToTheLargestValue) {
  EXPECT_EQ(parse_size("18446744073709551615"), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(parse_size("9007199254740993"), 9'007'199'254'740'993u);  // 2^53 + 1
  EXPECT_EQ(parse_size("0.25 TiB"), 1ull << 38);
}

TEST(ParseSize, RejectsBadInputWithExpectation) {
  const std::string message = error_of(parse_size, "1 EiB");
  EXPECT_TRUE(contains(message, R"(expected a size such as "256 KiB")")) << message;
  EXPECT_TRUE(contains(message, R"(got "1 EiB")")) << message;
  EXPECT_TRUE(contains(error_of(parse_size, "1.3 B"), "not a whole number of bytes"));
  EXPECT_TRUE(contains(error_of(parse_size, "0.1"), "not a whole number of bytes"));
  EXPECT_TRUE(contains(error_of(parse_size, "1.0000001 KiB"), "not a whole number of bytes"));
  EXPECT_TRUE(contains(error_of(parse_size, "18446744073709551616"), "larger than"));
  EXPECT_TRUE(contains(error_of(parse_size, "16777216 TiB"), "larger than"));
  EXPECT_TRUE(contains(error_of(parse_size, "-1"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_size, "1 kb"), "unknown unit \"kb\""));
  EXPECT_TRUE(contains(error_of(parse_size, "1 KB/s"), "unknown unit"));
  EXPECT_TRUE(contains(error_of(parse_size, "1 MiB/s"), "unknown unit"));
  EXPECT_TRUE(contains(error_of(parse_size, "KiB"), "no number"));
}

TEST(ParseSize, AcceptsDdAndIperfLettersAsPowersOfTwo) {
  EXPECT_EQ(parse_size("1K"), 1u << 10);
  EXPECT_EQ(parse_size("1k"), 1u << 10);
  EXPECT_EQ(parse_size("1M"), 1u << 20);
  EXPECT_EQ(parse_size("1m"), 1u << 20);
  EXPECT_EQ(parse_size("1G"), 1ull << 30);
  EXPECT_EQ(parse_size("1g"), 1ull << 30);
  EXPECT_EQ(parse_size("1T"), 1ull << 40);
  EXPECT_EQ(parse_size("1t"), 1ull << 40);
  EXPECT_EQ(parse_size("64 M"), 64u << 20);
  EXPECT_EQ(parse_size("1.5k"), 1536u);
  EXPECT_EQ(parse_size("0.5 G"), 1u << 29);
  // The letters mean what KiB and friends mean; kB is KB (powers of ten).
  EXPECT_EQ(parse_size("3K"), parse_size("3 KiB"));
  EXPECT_EQ(parse_size("3t"), parse_size("3 TiB"));
  EXPECT_EQ(parse_size("2 kB"), 2000u);
  EXPECT_EQ(parse_size("2kB"), parse_size("2 KB"));
  // The largest whole number of TiB, and one more.
  EXPECT_EQ(parse_size("16777215T"), 16777215ull << 40);
  EXPECT_TRUE(contains(error_of(parse_size, "16777216T"), "larger than"));
  EXPECT_TRUE(contains(error_of(parse_size, "16777216t"), "larger than"));
  EXPECT_TRUE(contains(error_of(parse_size, "17179869184 G"), "larger than"));
  EXPECT_TRUE(contains(error_of(parse_size, "99999999999999999999k"), "larger than"));
}

TEST(ParseSize, RejectsGarbageNextToTheLetters) {
  for (const char* bad : {"1 KK", "1Kb", "1 kib", "1 mb", "1P", "1 E", "K1", "1 K B", "1,5K", "1e3",
                          "0x10", "1M extra", ""}) {
    const std::string message = error_of(parse_size, bad);
    EXPECT_TRUE(contains(message, R"(expected a size such as "256 KiB")"))
        << bad << ": " << message;
    EXPECT_TRUE(contains(message, "K, M, G, T")) << bad << ": " << message;
  }
  EXPECT_TRUE(contains(error_of(parse_size, "1P"), "unknown unit \"P\""));
  EXPECT_TRUE(contains(error_of(parse_size, "-1K"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_size, "k"), "no number"));
  EXPECT_TRUE(contains(error_of(parse_size, "1.3k"), "not a whole number of bytes"));
}

TEST(ParseFraction, AcceptsPercentAndPlainFractions) {
  EXPECT_DOUBLE_EQ(parse_fraction("0.1 %"), 0.001);
  EXPECT_DOUBLE_EQ(parse_fraction("0.1%"), 0.001);
  EXPECT_DOUBLE_EQ(parse_fraction("0.001"), 0.001);
  EXPECT_DOUBLE_EQ(parse_fraction("0"), 0.0);
  EXPECT_DOUBLE_EQ(parse_fraction("0 %"), 0.0);
  EXPECT_DOUBLE_EQ(parse_fraction("99.5 %"), 0.995);
}

TEST(ParseFraction, RejectsOutOfRangeAndBadUnits) {
  const std::string message = error_of(parse_fraction, "100 %");
  EXPECT_TRUE(contains(message, R"(expected a fraction such as "0.1 %" or "0.001")")) << message;
  EXPECT_TRUE(contains(message, "below 1")) << message;
  EXPECT_TRUE(contains(error_of(parse_fraction, "1"), "below 1"));
  EXPECT_TRUE(contains(error_of(parse_fraction, "1.5"), "below 1"));
  EXPECT_TRUE(contains(error_of(parse_fraction, "-0.1"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_fraction, "-1 %"), "negative"));
  EXPECT_TRUE(contains(error_of(parse_fraction, "5 percent"), "unknown unit \"percent\""));
  EXPECT_TRUE(contains(error_of(parse_fraction, "%"), "no number"));
}

TEST(FormatBytes, PicksTheLargestBinaryUnit) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1000), "1000 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1'572'864), "1.5 MiB");
  EXPECT_EQ(format_bytes(256 * 1024), "256 KiB");
  EXPECT_EQ(format_bytes(3ull << 30), "3 GiB");
  EXPECT_EQ(format_bytes(5ull << 40), "5 TiB");
  EXPECT_EQ(format_bytes(1'234'567), "1.18 MiB");
  // Rounding up to the next unit moves to that unit.
  EXPECT_EQ(format_bytes((1u << 20) - 1), "1 MiB");
}

TEST(FormatBandwidth, PicksTheLargestDecimalUnit) {
  EXPECT_EQ(format_bandwidth(1e9), "1 Gbit/s");
  EXPECT_EQ(format_bandwidth(800e3), "800 Kbit/s");
  EXPECT_EQ(format_bandwidth(2.5e9), "2.5 Gbit/s");
  EXPECT_EQ(format_bandwidth(100e6), "100 Mbit/s");
  EXPECT_EQ(format_bandwidth(2e12), "2 Tbit/s");
  EXPECT_EQ(format_bandwidth(64), "64 bit/s");
  EXPECT_EQ(format_bandwidth(0), "0 bit/s");
}

TEST(FormatDuration, PicksTheLargestUnit) {
  EXPECT_EQ(format_duration(0.010), "10 ms");
  EXPECT_EQ(format_duration(1.5), "1.5 s");
  EXPECT_EQ(format_duration(250e-6), "250 us");
  EXPECT_EQ(format_duration(100e-9), "100 ns");
  EXPECT_EQ(format_duration(120), "2 min");
  EXPECT_EQ(format_duration(0), "0 s");
  EXPECT_EQ(format_duration(0.0009999999), "1 ms");
  EXPECT_EQ(format_duration(-0.002), "-2 ms");
}

TEST(Format, OutputParsesBack) {
  for (const std::uint64_t bytes : {0ull, 512ull, 1024ull, 1'572'864ull, 3ull << 30}) {
    EXPECT_EQ(parse_size(format_bytes(bytes)), bytes) << format_bytes(bytes);
  }
  for (const double bps : {64.0, 800e3, 2.5e9, 2e12}) {
    EXPECT_DOUBLE_EQ(parse_bandwidth(format_bandwidth(bps)), bps) << format_bandwidth(bps);
  }
  for (const double s : {0.0, 100e-9, 250e-6, 0.010, 1.5, 120.0}) {
    EXPECT_DOUBLE_EQ(parse_duration(format_duration(s)), s) << format_duration(s);
  }
}

}  // namespace
}  // namespace gridbcast::topology
