#include "topology/hostlist.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace gridbcast::topology {
namespace {

using Names = std::vector<std::string>;

std::string error_of(const std::string& hostlist) {
  try {
    expand_hostlist(hostlist);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for \"" << hostlist << "\"";
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ExpandHostlist, PlainNameIsItself) {
  EXPECT_EQ(expand_hostlist("plain"), Names{"plain"});
  EXPECT_EQ(expand_hostlist("node-7.example.org"), Names{"node-7.example.org"});
}

TEST(ExpandHostlist, KeepsZeroPaddingOfTheLowerBound) {
  const Names names = expand_hostlist("n[01-16]");
  ASSERT_EQ(names.size(), 16u);
  EXPECT_EQ(names.front(), "n01");
  EXPECT_EQ(names[8], "n09");
  EXPECT_EQ(names[9], "n10");
  EXPECT_EQ(names.back(), "n16");
  EXPECT_EQ(expand_hostlist("n[08-10]"), (Names{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_hostlist("n[9-11]"), (Names{"n9", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("n[098-100]"), (Names{"n098", "n099", "n100"}));
}

TEST(ExpandHostlist, ListsOfNumbersAndRanges) {
  EXPECT_EQ(expand_hostlist("n[1-3,7]"), (Names{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(expand_hostlist("n[7,1-2]"), (Names{"n7", "n1", "n2"}));
  EXPECT_EQ(expand_hostlist("n[5]"), Names{"n5"});
  EXPECT_EQ(expand_hostlist("n[3-3]"), Names{"n3"});
}

TEST(ExpandHostlist, SeveralGroupsAreACartesianProductLeftmostOutermost) {
  EXPECT_EQ(expand_hostlist("a[1-2]b[1-2]"), (Names{"a1b1", "a1b2", "a2b1", "a2b2"}));
  EXPECT_EQ(expand_hostlist("r[1-2]-n[1-3].x"),
            (Names{"r1-n1.x", "r1-n2.x", "r1-n3.x", "r2-n1.x", "r2-n2.x", "r2-n3.x"}));
  EXPECT_EQ(expand_hostlist("[1-2]"), (Names{"1", "2"}));
}

TEST(ExpandHostlist, AddressRanges) {
  EXPECT_EQ(expand_hostlist("127.0.1.[1-4]"),
            (Names{"127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"}));
  EXPECT_EQ(expand_hostlist("10.[1-2].0.1"), (Names{"10.1.0.1", "10.2.0.1"}));
}

TEST(ExpandHostlist, UnbalancedBrackets) {
  EXPECT_TRUE(contains(error_of("n[1-3"), "'[' at character 2 is never closed"));
  EXPECT_TRUE(contains(error_of("n1-3]"), "']' at character 5 has no matching '['"));
  EXPECT_TRUE(contains(error_of("n[1-[2]]"), "nested"));
  EXPECT_TRUE(contains(error_of("n[1-3]]"), "no matching '['"));
  EXPECT_TRUE(contains(error_of("n[1-3"), "invalid hostlist \"n[1-3\""));
}

TEST(ExpandHostlist, EmptyRanges) {
  EXPECT_TRUE(contains(error_of("n[]"), "empty range"));
  EXPECT_TRUE(contains(error_of("n[1-3,]"), "empty item"));
  EXPECT_TRUE(contains(error_of("n[,1]"), "empty item"));
  EXPECT_TRUE(contains(error_of("n[-3]"), "missing number"));
  EXPECT_TRUE(contains(error_of("n[3-]"), "missing number"));
  EXPECT_TRUE(contains(error_of(""), "empty hostlist"));
}

TEST(ExpandHostlist, LowerAboveUpper) {
  EXPECT_TRUE(contains(error_of("n[5-3]"), "range 5-3 is empty: the lower bound is above"));
}

TEST(ExpandHostlist, NonNumeric) {
  EXPECT_TRUE(contains(error_of("n[a-c]"), "\"a\" in [a-c] is not a decimal number"));
  EXPECT_TRUE(contains(error_of("n[1-x]"), "\"x\" in [1-x] is not a decimal number"));
  EXPECT_TRUE(contains(error_of("n[1 - 3]"), "not a decimal number"));
  EXPECT_TRUE(contains(error_of("n[1-2-3]"), "\"2-3\" in [1-2-3] is not a decimal number"));
  EXPECT_TRUE(contains(error_of("n[0x10]"), "not a decimal number"));
  EXPECT_TRUE(contains(error_of("n[1234567890123456789]"), "more than 18 digits"));
}

TEST(ExpandHostlist, AtMostAMillionNames) {
  EXPECT_EQ(expand_hostlist("n[000000-999999]").size(), kMaxHostlistNames);
  EXPECT_TRUE(contains(error_of("n[0-1000000]"), "more than 1000000 names"));
  EXPECT_TRUE(contains(error_of("n[1-1001]m[1-1000]"), "more than 1000000 names"));
  EXPECT_TRUE(contains(error_of("n[1-600000,1-600000]"), "more than 1000000 names"));
  // The product is checked before anything is built, so huge requests fail fast.
  EXPECT_TRUE(contains(error_of("n[1-999999999999]"), "more than 1000000 names"));
}

// Found by fuzzing: long text between groups multiplied into a gigabyte of names.
TEST(ExpandHostlist, AtMost16MiBOfNamesInAll) {
  const std::string long_text(200, 'x');
  EXPECT_EQ(expand_hostlist(long_text + "[1-1000]").size(), 1000u);
  EXPECT_EQ(expand_hostlist("node[000001-999999]").size(), 999999u);  // 11 MB: fits
  EXPECT_TRUE(contains(error_of(long_text + "[1-100000]"),
                       "expands to 100000 names of up to 206 characters, more than 16 MiB"));
  EXPECT_TRUE(contains(error_of("a[1-100]" + long_text + "[1-100]" + long_text + "[1-100]"),
                       "more than 16 MiB of names"));
}

}  // namespace
}  // namespace gridbcast::topology
