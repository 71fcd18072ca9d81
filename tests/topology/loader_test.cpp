#include "topology/loader.hpp"

#include "topology/emit.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gridbcast::topology {
namespace {

const std::string kConfigDir = std::string(GRIDBCAST_SOURCE_DIR) + "/site-configs";

// One YAML document from its lines, so that line N of the list is line N of the
// text and positions in the tests can be read off directly.
std::string yaml(std::initializer_list<std::string_view> lines) {
  std::string text;
  for (const std::string_view line : lines) {
    text += line;
    text += '\n';
  }
  return text;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void expect_config_error(const std::string& text, int line, int column, const std::string& phrase) {
  try {
    const Grid grid = load_grid_string(text, "test.yaml");
    ADD_FAILURE() << "loaded without error, expected: " << phrase;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.where().file, "test.yaml");
    EXPECT_EQ(e.where().line, line) << e.what();
    EXPECT_EQ(e.where().column, column) << e.what();
    EXPECT_TRUE(contains(e.message(), phrase))
        << "message: " << e.message() << "\nexpected to contain: " << phrase;
    EXPECT_EQ(std::string(e.what()), e.where().str() + ": " + e.message());
  }
}

#define EXPECT_CONFIG_ERROR(text, line, column, phrase) \
  do {                                                  \
    SCOPED_TRACE("expected error: " phrase);            \
    expect_config_error(text, line, column, phrase);    \
  } while (false)

// ---------------------------------------------------------------------------
// Errors

TEST(LoaderErrors, YamlSyntaxErrorsCarryTheirPosition) {
  EXPECT_CONFIG_ERROR(yaml({"sites: [tokyo"}), 2, 1,
                      "invalid YAML: end of sequence flow not found");
  EXPECT_CONFIG_ERROR(yaml({"name: grid", " sites: []"}), 2, 7, "invalid YAML: illegal map value");
}

TEST(LoaderErrors, EmptyAndNonMapDocuments) {
  EXPECT_CONFIG_ERROR("", 0, 0, "the site-config is empty");
  EXPECT_CONFIG_ERROR(yaml({"# nothing but a comment"}), 0, 0, "the site-config is empty");
  EXPECT_CONFIG_ERROR(yaml({"- tokyo", "- osaka"}), 1, 1,
                      "expected the site-config to be a map with keys name, defaults, sites, wan");
  EXPECT_CONFIG_ERROR(yaml({"name: x"}), 1, 1, "the site-config has no \"sites\" list");
}

TEST(LoaderErrors, MoreThanOneDocument) {
  EXPECT_CONFIG_ERROR(yaml({"name: a", "---", "name: b"}), 2, 1,
                      "a site-config holds one YAML document");
  // A leading marker is fine; comments before it do not count as a document.
  EXPECT_CONFIG_ERROR(yaml({"# c", "---", "name: a", "---", "x: 1"}), 4, 1, "one YAML document");
}

TEST(LoaderErrors, UnknownTopLevelKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 1 Gbit",   // 7
                          "wans: []",                        // 8
                      }),
                      8, 1,
                      "unknown key \"wans\" in the site-config; allowed keys: name, defaults, "
                      "sites, wan");
}

TEST(LoaderErrors, UnknownSiteKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    location: japan",             // 3
                          "    nodes:",                      // 4
                          "      - name: a1",                // 5
                          "        nics:",                   // 6
                          "          - address: 127.0.0.1",  // 7
                          "            bandwidth: 1 Gbit",   // 8
                      }),
                      3, 5,
                      "unknown key \"location\" in a site entry; allowed keys: name, nodes, "
                      "multicast");
}

TEST(LoaderErrors, UnknownNodeKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nic: eth0",               // 5
                          "        nics:",                   // 6
                          "          - address: 127.0.0.1",  // 7
                          "            bandwidth: 1 Gbit",   // 8
                      }),
                      5, 9,
                      "unknown key \"nic\" in a node entry of site \"tokyo\"; allowed keys: name, "
                      "host, nics");
}

TEST(LoaderErrors, UnknownNicKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            speed: 1 Gbit",       // 7
                      }),
                      7, 13,
                      "unknown key \"speed\" in a NIC entry of node entry \"a1\"; allowed "
                      "keys: address, bandwidth, device");
}

TEST(LoaderErrors, UnknownWanKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 1 Gbit",   // 7
                          "wan:",                            // 8
                          "  - sites: [tokyo, tokyo]",       // 9
                          "    latncy: 10 ms",               // 10
                      }),
                      10, 5,
                      "unknown key \"latncy\" in a WAN link; allowed keys: sites, latency, "
                      "bandwidth, max_rate, loss, streams, tls, congestion");
}

// The cost model's figures: a duration each, within bounds, with the
// position of the bad value; a good one loads and survives the emitter.
TEST(LoaderErrors, ModelOverheadsAreBoundedDurations) {
  const std::string sites =
      "sites: [{name: s, nodes: [{name: n, nics: [{address: 127.0.0.1, bandwidth: 1 Gbit}]}]}]";
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  hop_overhead: 0 us", sites}), 2, 17,
                      "\"hop_overhead\" must be above 0 and at most 1 s");
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  hop_overhead: 2 s", sites}), 2, 17,
                      "\"hop_overhead\" must be above 0 and at most 1 s");
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  hop_overhead: fast", sites}), 2, 17,
                      "\"hop_overhead\": ");
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  segment_overhead: 1 s", sites}), 2, 21,
                      "\"segment_overhead\" must be above 0 and at most 100 ms");
  const Grid g = load_grid_string(yaml({"defaults:", "  hop_overhead: 250 us", sites}), "t.yaml");
  EXPECT_DOUBLE_EQ(g.hop_overhead_s, 250e-6);
  EXPECT_DOUBLE_EQ(load_grid_string(grid_to_yaml(g), "again.yaml").hop_overhead_s, 250e-6);
}

TEST(LoaderErrors, UnknownDefaultsKeys) {
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",         // 1
                          "  nic_bw: 1 Gbit",  // 2
                          "sites: []",         // 3
                      }),
                      2, 3,
                      "unknown key \"nic_bw\" in \"defaults\"; allowed keys: nic_bandwidth, "
                      "segment, segment_overhead, hop_overhead, lanes, congestion, pace_lanes, "
                      "probe, max_rate, wan");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",      // 1
                          "  wan:",         // 2
                          "    stream: 4",  // 3
                          "sites: []",      // 4
                      }),
                      3, 5,
                      "unknown key \"stream\" in \"defaults.wan\"; allowed keys: latency, "
                      "bandwidth, max_rate, loss, streams, tls, congestion");
}

TEST(LoaderErrors, DuplicateKey) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",           // 1
                          "  - name: tokyo",  // 2
                          "    name: osaka",  // 3
                      }),
                      3, 5,
                      "duplicate key \"name\" in a site entry (first given at test.yaml:2:5)");
}

TEST(LoaderErrors, WrongTypes) {
  EXPECT_CONFIG_ERROR(yaml({"sites: {tokyo: 1}"}), 1, 8,
                      "\"sites\" must be a non-empty list of sites (maps with keys name, nodes); "
                      "got a map");
  EXPECT_CONFIG_ERROR(yaml({"sites:"}), 1, 1, "\"sites\" must be a non-empty list");
  EXPECT_CONFIG_ERROR(yaml({"sites: []"}), 1, 8, "got an empty list");
  EXPECT_CONFIG_ERROR(
      yaml({"sites:", "  - tokyo"}), 2, 5,
      "expected a site entry to be a map with keys name, nodes, multicast, latency; got \"tokyo\"");
  EXPECT_CONFIG_ERROR(yaml({"sites:", "  -", "  - name: x"}), 2, 3,
                      "entry 1 of \"sites\" is empty");
  EXPECT_CONFIG_ERROR(yaml({"sites:", "  - name: [a, b]"}), 2, 11,
                      "\"name\": expected a name, got a list");
  EXPECT_CONFIG_ERROR(yaml({"sites:", "  - name:"}), 2, 5,
                      "\"name\": expected a name, got nothing");
  EXPECT_CONFIG_ERROR(yaml({"sites:", "  - name: ''"}), 2, 11, "\"name\" must not be empty");
  EXPECT_CONFIG_ERROR(yaml({"defaults: [1]", "sites: []"}), 1, 11,
                      "expected \"defaults\" to be a map");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",              // 1
                          "  - name: tokyo",     // 2
                          "    nodes:",          // 3
                          "      - name: a1",    // 4
                          "        nics: eth0",  // 5
                      }),
                      5, 15, "node entry \"a1\" has no NICs: \"nics\" must be a non-empty list");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 1 Gbit",   // 7
                          "wan: {}",                         // 8
                      }),
                      8, 6, "\"wan\" must be a list of WAN links");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 1 Gbit",   // 7
                          "            device: [eth0]",      // 8
                      }),
                      8, 21, "\"device\": expected an interface name such as \"eth0\", got a list");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",       // 1
                          "  wan:",          // 2
                          "    tls: maybe",  // 3
                          "sites: []",       // 4
                      }),
                      3, 10, "\"tls\": expected true or false, got \"maybe\"");
}

TEST(LoaderErrors, CongestionControlNamesAreLinuxNames) {
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",              // 1
                          "  congestion: Cubic 2",  // 2
                          "sites: []",              // 3
                      }),
                      2, 15,
                      "\"congestion\": expected a TCP congestion control name such as cubic");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                            // 1
                          "  wan:",                               // 2
                          "    congestion: a_name_far_too_long",  // 3
                          "sites: []",                            // 4
                      }),
                      3, 17, "got \"a_name_far_too_long\"");
}

TEST(LoaderErrors, BadUnits) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 1 Gbyte",  // 7
                      }),
                      7, 24,
                      "\"bandwidth\": expected a bandwidth such as \"1 Gbit\" (units bit, Kbit");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                          "            bandwidth: 0 Gbit",   // 7
                      }),
                      7, 24, "\"bandwidth\": bandwidth must be greater than 0, got \"0 Gbit\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                // 1
                          "  wan:",                   // 2
                          "    latency: 10 parsecs",  // 3
                          "sites: []",                // 4
                      }),
                      3, 14,
                      "\"latency\": expected a duration such as \"10 ms\" (units ns, us, ms, s, "
                      "min), got \"10 parsecs\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",        // 1
                          "  wan:",           // 2
                          "    loss: 200 %",  // 3
                          "sites: []",        // 4
                      }),
                      3, 11, "\"loss\": expected a fraction such as \"0.1 %\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",         // 1
                          "  segment: 1.3 B",  // 2
                          "sites: []",         // 3
                      }),
                      2, 12, "\"segment\": expected a size such as \"256 KiB\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                 // 1
                          "  nic_bandwidth: 10 gbit",  // 2
                          "sites: []",                 // 3
                      }),
                      2, 18, "\"nic_bandwidth\": expected a bandwidth");
}

const std::string kTwoSites = yaml({
    "sites:",                              // 1
    "  - name: tokyo",                     // 2
    "    nodes:",                          // 3
    "      - name: a[1-3]",                // 4
    "        nics:",                       // 5
    "          - address: 127.0.1.[1-3]",  // 6
    "            bandwidth: 1 Gbit",       // 7
    "  - name: osaka",                     // 8
    "    nodes:",                          // 9
    "      - name: b1",                    // 10
    "        nics:",                       // 11
    "          - address: 127.0.1.11",     // 12
    "            bandwidth: 1 Gbit",       // 13
    "wan:",                                // 14
    "  - sites: [tokyo, osaka]",           // 15
    "    latency: 10 ms",                  // 16
    "    bandwidth: 1 Gbit",               // 17
});

TEST(LoaderErrors, TheReferenceConfigOfTheseTestsLoads) {
  const Grid grid = load_grid_string(kTwoSites, "test.yaml");
  EXPECT_EQ(grid.size(), 4);
}

TEST(LoaderErrors, DuplicateNodeNames) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                              // 1
                          "  - name: tokyo",                     // 2
                          "    nodes:",                          // 3
                          "      - name: a[1-3]",                // 4
                          "        nics:",                       // 5
                          "          - address: 127.0.1.[1-3]",  // 6
                          "            bandwidth: 1 Gbit",       // 7
                          "  - name: osaka",                     // 8
                          "    nodes:",                          // 9
                          "      - name: a3",                    // 10
                          "        nics:",                       // 11
                          "          - address: 127.0.1.11",     // 12
                          "            bandwidth: 1 Gbit",       // 13
                      }),
                      10, 15, "duplicate node name \"a3\" (first defined at test.yaml:4:15)");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                              // 1
                          "  - name: tokyo",                     // 2
                          "    nodes:",                          // 3
                          "      - name: a[1-2,2]",              // 4
                          "        nics:",                       // 5
                          "          - address: 127.0.1.[1-3]",  // 6
                          "            bandwidth: 1 Gbit",       // 7
                      }),
                      4, 15, "duplicate node name \"a2\" (first defined at test.yaml:4:15)");
}

TEST(LoaderErrors, DuplicateAddresses) {
  // Across nodes of different sites.
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                              // 1
                          "  - name: tokyo",                     // 2
                          "    nodes:",                          // 3
                          "      - name: a[1-3]",                // 4
                          "        nics:",                       // 5
                          "          - address: 127.0.1.[1-3]",  // 6
                          "            bandwidth: 1 Gbit",       // 7
                          "  - name: osaka",                     // 8
                          "    nodes:",                          // 9
                          "      - name: b1",                    // 10
                          "        nics:",                       // 11
                          "          - address: 127.0.1.2",      // 12
                          "            bandwidth: 1 Gbit",       // 13
                      }),
                      12, 22,
                      "duplicate address \"127.0.1.2\" of node \"b1\" (already used by node "
                      "\"a2\" at test.yaml:6:22)");
  // Across the NICs of one node entry.
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                           // 1
                          "  nic_bandwidth: 1 Gbit",             // 2
                          "sites:",                              // 3
                          "  - name: tokyo",                     // 4
                          "    nodes:",                          // 5
                          "      - name: a[1-2]",                // 6
                          "        nics:",                       // 7
                          "          - address: 127.0.1.[1-2]",  // 8
                          "          - address: 127.0.1.[2-3]",  // 9
                      }),
                      9, 22, "duplicate address \"127.0.1.2\" of node \"a1\"");
  // Two spellings of one IPv6 address.
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                            // 1
                          "  nic_bandwidth: 1 Gbit",              // 2
                          "sites:",                               // 3
                          "  - name: tokyo",                      // 4
                          "    nodes:",                           // 5
                          "      - name: a1",                     // 6
                          "        nics:",                        // 7
                          "          - address: fd00::1",         // 8
                          "          - address: fd00:0:0::0001",  // 9
                      }),
                      9, 22, "duplicate address \"fd00:0:0::0001\" of node \"a1\"");
}

TEST(LoaderErrors, InvalidAddresses) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                                  // 1
                          "  - name: tokyo",                         // 2
                          "    nodes:",                              // 3
                          "      - name: a[1-2]",                    // 4
                          "        nics:",                           // 5
                          "          - address: 127.0.1.[255-256]",  // 6
                          "            bandwidth: 1 Gbit",           // 7
                      }),
                      6, 22,
                      "\"address\": \"127.0.1.256\" (node \"a2\") is not an IPv4 or IPv6 address");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: localhost",  // 6
                          "            bandwidth: 1 Gbit",   // 7
                      }),
                      6, 22, "is not an IPv4 or IPv6 address");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                            // 1
                          "  - name: tokyo",                   // 2
                          "    nodes:",                        // 3
                          "      - name: a1",                  // 4
                          "        nics:",                     // 5
                          "          - address: 127.0.1.[1-",  // 6
                          "            bandwidth: 1 Gbit",     // 7
                      }),
                      6, 22, "\"address\": invalid hostlist \"127.0.1.[1-\"");
}

TEST(LoaderErrors, AddressCountMustMatchNodeCount) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                              // 1
                          "  - name: tokyo",                     // 2
                          "    nodes:",                          // 3
                          "      - name: a[1-4]",                // 4
                          "        nics:",                       // 5
                          "          - address: 127.0.1.[1-3]",  // 6
                          "            bandwidth: 1 Gbit",       // 7
                      }),
                      6, 22,
                      "\"address\" \"127.0.1.[1-3]\" expands to 3 address(es) but \"name\" "
                      "\"a[1-4]\" expands to 4 node(s); give exactly one address per node");
}

TEST(LoaderErrors, HostCountMustMatchNodeCount) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                              // 1
                          "  - name: tokyo",                     // 2
                          "    nodes:",                          // 3
                          "      - name: a[1-2]",                // 4
                          "        host: gateway",               // 5
                          "        nics:",                       // 6
                          "          - address: 127.0.1.[1-2]",  // 7
                          "            bandwidth: 1 Gbit",       // 8
                      }),
                      5, 15,
                      "\"host\" expands to 1 host(s) but \"name\" expands to 2 node(s); give "
                      "exactly one host per node");
}

TEST(LoaderErrors, NodeNameHostlistErrors) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                // 1
                          "  - name: tokyo",       // 2
                          "    nodes:",            // 3
                          "      - name: a[3-1]",  // 4
                          "        nics: [{address: 127.0.0.1}]",
                      }),
                      4, 15, "\"name\": invalid hostlist \"a[3-1]\": range 3-1 is empty");
}

// Node names become parts of paths (launch --output '/data/{node}/x'): a name
// such as "../etc" would write outside the directory.
TEST(LoaderErrors, NodeNamesThatCannotBePartOfAPathAreRefused) {
  for (const char* bad : {"\"../etc\"", "\"..\"", "\".\"", "\"a/b\"", "\"n 1\"", "\"n$1\""}) {
    SCOPED_TRACE(bad);
    EXPECT_CONFIG_ERROR(yaml({
                            "sites:",           // 1
                            "  - name: tokyo",  // 2
                            "    nodes:",       // 3
                            std::string("      - name: ") + bad,
                            "        nics: [{address: 127.0.0.1}]",
                        }),
                        4, 15, "may hold only letters, digits, '-', '_' and '.'");
  }
  // Hostlists expand to names that are checked the same way.
  const Grid g = load_grid_string(yaml({
                                      "sites:",
                                      "  - name: tokyo",
                                      "    nodes:",
                                      "      - name: node_a.x[1-2]",
                                      "        nics:",
                                      "          - address: 127.0.9.[1-2]",
                                      "            bandwidth: 1 Gbit",
                                  }),
                                  "test.yaml");
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].name, "node_a.x2");
}

TEST(LoaderErrors, SiteWithoutNodes) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",           // 1
                          "  - name: tokyo",  // 2
                          "    nodes: []",    // 3
                      }),
                      3, 12, "site \"tokyo\" has no nodes");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",           // 1
                          "  - name: tokyo",  // 2
                          "    nodes:",       // 3
                      }),
                      3, 5, "site \"tokyo\" has no nodes");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",           // 1
                          "  - name: tokyo",  // 2
                      }),
                      2, 5, "site \"tokyo\" is missing the required key \"nodes\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",         // 1
                          "  - nodes: []",  // 2
                      }),
                      2, 5, "a site entry is missing the required key \"name\"");
}

TEST(LoaderErrors, NodeWithoutNics) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",            // 1
                          "  - name: tokyo",   // 2
                          "    nodes:",        // 3
                          "      - name: a1",  // 4
                          "        nics: []",  // 5
                      }),
                      5, 15, "node entry \"a1\" has no NICs");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",            // 1
                          "  - name: tokyo",   // 2
                          "    nodes:",        // 3
                          "      - name: a1",  // 4
                      }),
                      4, 9, "node entry \"a1\" is missing the required key \"nics\"");
  // Control characters from the input are escaped, so the message is whole
  // (what() is a C string) and on one line; the entry is judged before its
  // hostlist expands (found by fuzzing).
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                               // 1
                          "  - name: tokyo",                      // 2
                          "    nodes:",                           // 3
                          "      - name: \"a\\0\\nb[1-99999]\"",  // 4
                      }),
                      4, 9,
                      "node entry \"a\\x00\\nb[1-99999]\" is missing the required key \"nics\"");
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                    // 1
                          "  - name: tokyo",           // 2
                          "    nodes:",                // 3
                          "      - name: a1",          // 4
                          "        nics:",             // 5
                          "          - device: eth0",  // 6
                      }),
                      6, 13, "is missing the required key \"address\"");
}

TEST(LoaderErrors, NicWithoutBandwidthAndNoDefault) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                          // 1
                          "  - name: tokyo",                 // 2
                          "    nodes:",                      // 3
                          "      - name: a1",                // 4
                          "        nics:",                   // 5
                          "          - address: 127.0.0.1",  // 6
                      }),
                      6, 13,
                      "NIC of node entry \"a1\" has no \"bandwidth\" and defaults.nic_bandwidth "
                      "is not set");
}

// kTwoSites with its WAN list replaced by `wan_lines`, which start at line 14.
std::string two_sites_with_wan(std::initializer_list<std::string_view> wan_lines) {
  std::string text = kTwoSites.substr(0, kTwoSites.find("wan:"));
  for (const std::string_view line : wan_lines) {
    text += line;
    text += '\n';
  }
  return text;
}

TEST(LoaderErrors, WanLinkToUnknownSite) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                       // 14
                          "  - sites: [tokyo, kyoto]",  // 15
                          "    latency: 10 ms",         // 16
                          "    bandwidth: 1 Gbit",      // 17
                      }),
                      15, 20, "WAN link names unknown site \"kyoto\"; the sites are: tokyo, osaka");
}

TEST(LoaderErrors, WanLinkWithTheSameSiteTwice) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                       // 14
                          "  - sites: [tokyo, tokyo]",  // 15
                          "    latency: 10 ms",         // 16
                          "    bandwidth: 1 Gbit",      // 17
                      }),
                      15, 20, "WAN link connects site \"tokyo\" to itself");
}

TEST(LoaderErrors, WanLinkSitesMustBeAPair) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                // 14
                          "  - sites: [tokyo]",  // 15
                      }),
                      15, 12,
                      "\"sites\" must be a list of exactly two site names such as [tokyo, osaka]; "
                      "got a list of 1 entry");
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                    // 14
                          "  - sites: tokyo-osaka",  // 15
                      }),
                      15, 12, "got \"tokyo-osaka\"");
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                // 14
                          "  - latency: 10 ms",  // 15
                      }),
                      15, 5, "a WAN link is missing the required key \"sites\"");
}

TEST(LoaderErrors, DuplicateWanLink) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                       // 14
                          "  - sites: [tokyo, osaka]",  // 15
                          "    latency: 10 ms",         // 16
                          "    bandwidth: 1 Gbit",      // 17
                          "  - sites: [osaka, tokyo]",  // 18
                          "    latency: 5 ms",          // 19
                          "    bandwidth: 1 Gbit",      // 20
                      }),
                      18, 12,
                      "duplicate WAN link between \"osaka\" and \"tokyo\" (first defined at "
                      "test.yaml:15:5)");
}

TEST(LoaderErrors, WanLinkWithoutLatencyOrBandwidth) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                       // 14
                          "  - sites: [tokyo, osaka]",  // 15
                          "    bandwidth: 1 Gbit",      // 16
                      }),
                      15, 5,
                      "WAN link between \"tokyo\" and \"osaka\" has no \"latency\" and "
                      "defaults.wan gives none");
  EXPECT_CONFIG_ERROR(two_sites_with_wan({
                          "wan:",                       // 14
                          "  - sites: [tokyo, osaka]",  // 15
                          "    latency: 1 ms",          // 16
                      }),
                      15, 5, "has no \"bandwidth\" and defaults.wan gives none");
}

TEST(LoaderErrors, StreamsOutOfRange) {
  for (const char* streams : {"0", "65", "-1", "4.5", "many", "99999999999"}) {
    SCOPED_TRACE(streams);
    const std::string line = std::string("    streams: ") + streams;
    expect_config_error(
        two_sites_with_wan({
            "wan:",                       // 14
            "  - sites: [tokyo, osaka]",  // 15
            "    latency: 10 ms",         // 16
            "    bandwidth: 1 Gbit",      // 17
            line,                         // 18
        }),
        18, 14,
        std::string("\"streams\": expected an integer from 1 to 64, got \"") + streams + "\"");
  }
  // The bounds themselves are fine.
  for (const char* streams : {"1", "64"}) {
    const std::string line = std::string("    streams: ") + streams;
    const Grid grid = load_grid_string(two_sites_with_wan({
                                           "wan:",
                                           "  - sites: [tokyo, osaka]",
                                           "    latency: 10 ms",
                                           "    bandwidth: 1 Gbit",
                                           line,
                                       }),
                                       "test.yaml");
    EXPECT_EQ(grid.wan.at(0).streams, std::stoi(streams));
  }
}

TEST(LoaderErrors, SitesNotConnectedToTheFirstSite) {
  EXPECT_CONFIG_ERROR(two_sites_with_wan({}), 8, 5,
                      "site \"osaka\" is not connected to site \"tokyo\" (the first site) through "
                      "WAN links");
  EXPECT_CONFIG_ERROR(yaml({
                          "defaults:",                                            // 1
                          "  nic_bandwidth: 1 Gbit",                              // 2
                          "  wan: {latency: 1 ms, bandwidth: 1 Gbit}",            // 3
                          "sites:",                                               // 4
                          "  - name: s1",                                         // 5
                          "    nodes: [{name: a, nics: [{address: 10.0.0.1}]}]",  // 6
                          "  - name: s2",                                         // 7
                          "    nodes: [{name: b, nics: [{address: 10.0.0.2}]}]",  // 8
                          "  - name: s3",                                         // 9
                          "    nodes: [{name: c, nics: [{address: 10.0.0.3}]}]",  // 10
                          "  - name: s4",                                         // 11
                          "    nodes: [{name: d, nics: [{address: 10.0.0.4}]}]",  // 12
                          "wan:",                                                 // 13
                          "  - sites: [s1, s2]",                                  // 14
                          "  - sites: [s3, s4]",                                  // 15
                      }),
                      9, 5, "site \"s3\" is not connected to site \"s1\"");
}

TEST(LoaderErrors, DuplicateSiteNames) {
  EXPECT_CONFIG_ERROR(yaml({
                          "sites:",                           // 1
                          "  - name: tokyo",                  // 2
                          "    nodes:",                       // 3
                          "      - name: a1",                 // 4
                          "        nics:",                    // 5
                          "          - address: 127.0.1.1",   // 6
                          "            bandwidth: 1 Gbit",    // 7
                          "  - name: tokyo",                  // 8
                          "    nodes:",                       // 9
                          "      - name: b1",                 // 10
                          "        nics:",                    // 11
                          "          - address: 127.0.1.11",  // 12
                          "            bandwidth: 1 Gbit",    // 13
                      }),
                      8, 11, "duplicate site name \"tokyo\" (first defined at test.yaml:2:11)");
}

// A one-site grid whose site entry has `multicast: <value>` on line 3.
std::string multicast_site(std::string_view value) {
  return yaml({
      "sites:",                                                                  // 1
      "  - name: tokyo",                                                         // 2
      std::string("    multicast: ") + std::string(value),                       // 3
      "    nodes: [{name: a, nics: [{address: 10.0.0.1, bandwidth: 1 Gbit}]}]",  // 4
  });
}

TEST(LoaderErrors, MulticastValues) {
  EXPECT_CONFIG_ERROR(
      multicast_site("maybe"), 3, 16,
      "\"multicast\": expected true, false or a map with keys group, ttl, port, mtu; "
      "got \"maybe\"");
  EXPECT_CONFIG_ERROR(multicast_site("[1, 2]"), 3, 16, "expected true, false or a map");
  EXPECT_CONFIG_ERROR(
      multicast_site("{groups: 239.0.0.0/8}"), 3, 17,
      "unknown key \"groups\" in \"multicast\"; allowed keys: group, ttl, port, mtu");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 239.1.2.3}"), 3, 24,
                      "\"group\": expected an IPv4 multicast range such as \"239.192.0.0/14\"");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 239.0.0.0/33}"), 3, 24, "expected an IPv4 multicast");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 239.0.0.0/}"), 3, 24, "expected an IPv4 multicast");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 239.0.0.0/-8}"), 3, 24, "expected an IPv4 multicast");
  EXPECT_CONFIG_ERROR(multicast_site("{group: \"ff02::1/16\"}"), 3, 24,
                      "expected an IPv4 multicast");
  EXPECT_CONFIG_ERROR(
      multicast_site("{group: 10.0.0.0/8}"), 3, 24,
      "\"group\": \"10.0.0.0/8\" is not inside the IPv4 multicast range 224.0.0.0/4");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 192.0.0.0/2}"), 3, 24,
                      "is not inside the IPv4 multicast range");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 239.1.0.0/8}"), 3, 24, "has host bits set");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 224.0.0.0/4}"), 3, 24, "overlaps 224.0.0.0/24");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 224.0.0.0/16}"), 3, 24, "overlaps 224.0.0.0/24");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 224.0.0.128/25}"), 3, 24, "overlaps 224.0.0.0/24");
  EXPECT_CONFIG_ERROR(multicast_site("{group: 224.0.0.251/32}"), 3, 24, "overlaps 224.0.0.0/24");
  EXPECT_CONFIG_ERROR(multicast_site("{ttl: 0}"), 3, 22,
                      "\"ttl\": expected an integer from 1 to 255, got \"0\"");
  EXPECT_CONFIG_ERROR(multicast_site("{ttl: 256}"), 3, 22, "expected an integer from 1 to 255");
  EXPECT_CONFIG_ERROR(multicast_site("{ttl: one}"), 3, 22, "expected an integer from 1 to 255");
  EXPECT_CONFIG_ERROR(multicast_site("{port: 0}"), 3, 23,
                      "\"port\": expected an integer from 1 to 65535, got \"0\"");
  EXPECT_CONFIG_ERROR(multicast_site("{port: 65536}"), 3, 23, "from 1 to 65535");
  EXPECT_CONFIG_ERROR(multicast_site("{ttl: 1, ttl: 2}"), 3, 25, "duplicate key \"ttl\"");
  EXPECT_CONFIG_ERROR(multicast_site("{mtu: 575}"), 3, 22,
                      "\"mtu\": expected an integer from 576 to 65535, got \"575\"");
  EXPECT_CONFIG_ERROR(multicast_site("{mtu: 65536}"), 3, 22, "from 576 to 65535");
  EXPECT_CONFIG_ERROR(multicast_site("{mtu: jumbo}"), 3, 22, "from 576 to 65535");
}

TEST(Loader, MulticastIsOffUnlessTheSiteSaysSo) {
  const Grid grid = load_grid_string(
      yaml({
          "sites:",                                                                  // 1
          "  - name: plain",                                                         // 2
          "    nodes: [{name: a, nics: [{address: 10.0.0.1, bandwidth: 1 Gbit}]}]",  // 3
          "  - name: on",                                                            // 4
          "    multicast: true",                                                     // 5
          "    nodes: [{name: b, nics: [{address: 10.0.1.1, bandwidth: 1 Gbit}]}]",  // 6
          "  - name: off",                                                           // 7
          "    multicast: no",                                                       // 8
          "    nodes: [{name: c, nics: [{address: 10.0.2.1, bandwidth: 1 Gbit}]}]",  // 9
          "  - name: tuned",                                                         // 10
          "    multicast:",                                                          // 11
          "      group: 239.192.0.0/14",                                             // 12
          "      ttl: 4",                                                            // 13
          "      port: 5400",                                                        // 14
          "      mtu: 9000",                                                         // 15
          "    nodes: [{name: d, nics: [{address: 10.0.3.1, bandwidth: 1 Gbit}]}]",  // 16
          "  - name: single",                                                        // 17
          "    multicast: {group: 224.0.1.0/32}",                                    // 18
          "    nodes: [{name: e, nics: [{address: 10.0.4.1, bandwidth: 1 Gbit}]}]",  // 19
          "wan:",
          "  - {sites: [plain, on], latency: 1 ms, bandwidth: 1 Gbit}",
          "  - {sites: [on, off], latency: 1 ms, bandwidth: 1 Gbit}",
          "  - {sites: [off, tuned], latency: 1 ms, bandwidth: 1 Gbit}",
          "  - {sites: [tuned, single], latency: 1 ms, bandwidth: 1 Gbit}",
      }),
      "test.yaml");
  ASSERT_EQ(grid.sites.size(), 5u);
  const SiteMulticast& plain = grid.sites[0].multicast;
  EXPECT_FALSE(plain.enabled);
  EXPECT_EQ(plain.range(), "239.0.0.0/8");
  const SiteMulticast& on = grid.sites[1].multicast;
  EXPECT_TRUE(on.enabled);
  EXPECT_EQ(on.range(), "239.0.0.0/8");  // the defaults: administratively scoped, TTL 1
  EXPECT_EQ(on.network, 0xEF000000u);
  EXPECT_EQ(on.prefix, 8);
  EXPECT_EQ(on.size(), 1u << 24);
  EXPECT_EQ(on.ttl, 1);
  EXPECT_EQ(on.port, 0);
  EXPECT_EQ(on.where.str(), "test.yaml:5:16");
  EXPECT_FALSE(grid.sites[2].multicast.enabled);
  const SiteMulticast& tuned = grid.sites[3].multicast;
  EXPECT_TRUE(tuned.enabled);  // a map means yes
  EXPECT_EQ(tuned.range(), "239.192.0.0/14");
  EXPECT_EQ(tuned.network, 0xEFC00000u);
  EXPECT_EQ(tuned.size(), 1u << 18);
  EXPECT_EQ(tuned.ttl, 4);
  EXPECT_EQ(tuned.port, 5400);
  EXPECT_EQ(tuned.mtu, 9000);
  EXPECT_EQ(on.mtu, 0);  // unknown: Ethernet's 1500 off loopback
  const SiteMulticast& single = grid.sites[4].multicast;
  EXPECT_EQ(single.range(), "224.0.1.0/32");
  EXPECT_EQ(single.size(), 1u);
  EXPECT_EQ(single.ttl, 1);
}

TEST(LoaderErrors, MissingFile) {
  const std::string path = kConfigDir + "/does-not-exist.yaml";
  try {
    load_grid_file(path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.where().file, path);
    EXPECT_EQ(e.where().line, 0);
    EXPECT_EQ(std::string(e.what()), path + ": cannot open site-config: No such file or directory");
  }
}

TEST(LoaderErrors, FileErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "gridbcast_loader_test_bad.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("sites:\n  - name: tokyo\n    nodes: []\n", f);
    std::fclose(f);
  }
  try {
    load_grid_file(path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.where().str(), path + ":3:12");
    EXPECT_TRUE(contains(e.what(), path + ":3:12: site \"tokyo\" has no nodes")) << e.what();
  }
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------
// Loading

TEST(Location, Formats) {
  EXPECT_EQ((Location{"f.yaml", 3, 7}).str(), "f.yaml:3:7");
  EXPECT_EQ((Location{"f.yaml", 0, 0}).str(), "f.yaml");
  const ConfigError e(Location{"f.yaml", 3, 7}, "bad");
  EXPECT_STREQ(e.what(), "f.yaml:3:7: bad");
  EXPECT_EQ(e.message(), "bad");
}

// defaults.congestion for the sites and for WAN paths whose links name none;
// a link's own, or defaults.wan's, for paths through it.
TEST(Loader, CongestionControlPerSiteDefaultAndWanLink) {
  const Grid grid =
      load_grid_string(yaml({
                           "defaults:",                                  // 1
                           "  nic_bandwidth: 1 Gbit",                    // 2
                           "  congestion: cubic",                        // 3
                           "  wan: {latency: 5 ms, bandwidth: 1 Gbit}",  // 4
                           "sites:",                                     // 5
                           "  - {name: a, nodes: [{name: a1, nics: [{address: 10.0.0.1}]}]}",
                           "  - {name: b, nodes: [{name: b1, nics: [{address: 10.0.1.1}]}]}",
                           "  - {name: c, nodes: [{name: c1, nics: [{address: 10.0.2.1}]}]}",
                           "wan:",
                           "  - sites: [a, b]",
                           "  - sites: [b, c]",
                           "    congestion: bbr",
                       }),
                       "inline.yaml");
  EXPECT_EQ(grid.congestion, "cubic");
  EXPECT_EQ(grid.wan[0].congestion, "");
  EXPECT_EQ(grid.wan[1].congestion, "bbr");
  EXPECT_EQ(grid.congestion_between(0, 0), "cubic");
  EXPECT_EQ(grid.congestion_between(0, 1), "cubic");  // a-b names none
  EXPECT_EQ(grid.congestion_between(1, 2), "bbr");
  EXPECT_EQ(grid.congestion_between(2, 0), "bbr");  // c-b-a: the first link that names one
  const Grid host =
      load_grid_string(yaml({
                           "defaults: {nic_bandwidth: 1 Gbit, wan: {latency: 5 ms, "
                           "bandwidth: 1 Gbit, congestion: reno}}",
                           "sites:",
                           "  - {name: a, nodes: [{name: a1, nics: [{address: 10.0.0.1}]}]}",
                           "  - {name: b, nodes: [{name: b1, nics: [{address: 10.0.1.1}]}]}",
                           "wan: [{sites: [a, b]}]",
                       }),
                       "inline.yaml");
  EXPECT_EQ(host.congestion_between(0, 0), "");  // the host's default
  EXPECT_EQ(host.congestion_between(0, 1), "reno");
}

TEST(Loader, LanesAreAutomaticOrGivenFromOneToEight) {
  auto with = [](const std::string& lanes) {
    return load_grid_string(yaml({
                                "defaults:",
                                "  nic_bandwidth: 1 Gbit",
                                "  lanes: " + lanes,
                                "sites:",
                                "  - {name: a, nodes: [{name: a1, nics: [{address: 10.0.0.1}, "
                                "{address: 10.0.1.1}, {address: 10.0.2.1}]}]}",
                            }),
                            "inline.yaml");
  };
  EXPECT_EQ(with("auto").lane_count(), 3);  // the most NICs a node has
  EXPECT_EQ(with("1").lane_count(), 1);
  EXPECT_EQ(with("8").lane_count(), 8);
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  lanes: 9", "sites: []"}), 2, 10,
                      "\"lanes\": expected an integer from 1 to 8 or \"auto\", got \"9\"");
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  lanes: 0", "sites: []"}), 2, 10,
                      "\"lanes\": expected an integer from 1 to 8 or \"auto\", got \"0\"");
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  lanes: two", "sites: []"}), 2, 10,
                      "\"lanes\": expected an integer from 1 to 8 or \"auto\", got \"two\"");
}

TEST(Loader, PacingIsOffUnlessTheDefaultsAskForIt) {
  auto with = [](const std::string& line) {
    return load_grid_string(yaml({"defaults:", "  nic_bandwidth: 1 Gbit", line,
                                  "sites: [{name: a, nodes: [{name: a1, nics: [{address: "
                                  "10.0.0.1}]}]}]"}),
                            "inline.yaml");
  };
  EXPECT_FALSE(with("").pace_lanes);
  EXPECT_TRUE(with("  pace_lanes: true").pace_lanes);
  EXPECT_FALSE(with("  pace_lanes: false").pace_lanes);
  EXPECT_CONFIG_ERROR(yaml({"defaults:", "  pace_lanes: sometimes", "sites: []"}), 2, 15,
                      "\"pace_lanes\": expected true or false, got \"sometimes\"");
}

TEST(Loader, RanksFollowSitesThenNodeEntriesThenHostlistOrder) {
  const Grid grid = load_grid_string(yaml({
                                         "name: ranks",                        // 1
                                         "defaults:",                          // 2
                                         "  nic_bandwidth: 10 Gbit",           // 3
                                         "  segment: 1 MiB",                   // 4
                                         "  wan:",                             // 5
                                         "    latency: 5 ms",                  // 6
                                         "    bandwidth: 2 Gbit",              // 7
                                         "    loss: 0.5 %",                    // 8
                                         "    streams: 6",                     // 9
                                         "    tls: true",                      // 10
                                         "sites:",                             // 11
                                         "  - name: s1",                       // 12
                                         "    nodes:",                         // 13
                                         "      - name: x[2-3]",               // 14
                                         "        host: h[2-3].example",       // 15
                                         "        nics:",                      // 16
                                         "          - address: 10.0.0.[2-3]",  // 17
                                         "            device: eth0",           // 18
                                         "          - address: 10.0.1.[2-3]",  // 19
                                         "            bandwidth: 25 Gbit",     // 20
                                         "      - name: y1",                   // 21
                                         "        nics:",                      // 22
                                         "          - address: fd00::1",       // 23
                                         "  - name: s2",                       // 24
                                         "    nodes:",                         // 25
                                         "      - name: z[1-2]",               // 26
                                         "        nics:",                      // 27
                                         "          - address: 10.0.2.[1-2]",  // 28
                                         "wan:",                               // 29
                                         "  - sites: [s2, s1]",                // 30
                                         "    streams: 2",                     // 31
                                     }),
                                     "inline.yaml");
  EXPECT_EQ(grid.name, "ranks");
  EXPECT_EQ(grid.source, "inline.yaml");
  EXPECT_EQ(grid.segment_bytes, 1u << 20);
  ASSERT_EQ(grid.size(), 5);
  const std::vector<std::string> names = {"x2", "x3", "y1", "z1", "z2"};
  for (int r = 0; r < grid.size(); ++r) {
    EXPECT_EQ(grid.nodes[static_cast<size_t>(r)].name, names[static_cast<size_t>(r)]);
  }
  ASSERT_EQ(grid.sites.size(), 2u);
  EXPECT_EQ(grid.sites[0].name, "s1");
  EXPECT_EQ(grid.sites[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(grid.sites[1].ranks, (std::vector<int>{3, 4}));
  EXPECT_EQ(grid.sites[1].where.str(), "inline.yaml:24:5");
  EXPECT_EQ(grid.site_of(2), 0);
  EXPECT_EQ(grid.site_of(3), 1);

  const Node& x3 = grid.nodes[1];
  EXPECT_EQ(x3.host, "h3.example");
  EXPECT_EQ(x3.where.str(), "inline.yaml:14:15");
  ASSERT_EQ(x3.nics.size(), 2u);
  EXPECT_EQ(x3.nics[0].address, "10.0.0.3");
  EXPECT_EQ(x3.nics[0].device, "eth0");
  EXPECT_DOUBLE_EQ(x3.nics[0].bandwidth_bps, 10e9);
  EXPECT_EQ(x3.nics[1].address, "10.0.1.3");
  EXPECT_EQ(x3.nics[1].device, "");
  EXPECT_DOUBLE_EQ(x3.nics[1].bandwidth_bps, 25e9);
  EXPECT_DOUBLE_EQ(x3.total_bandwidth_bps(), 35e9);
  // Lanes go to NICs by bandwidth: 25 Gbit, then 25/2 > 10, then 10 > 25/3.
  EXPECT_EQ(x3.lane_nic(0).address, "10.0.1.3");
  EXPECT_EQ(x3.lane_nic(1).address, "10.0.1.3");
  EXPECT_EQ(x3.lane_nic(2).address, "10.0.0.3");

  const Node& y1 = grid.nodes[2];
  EXPECT_EQ(y1.host, "y1");  // host defaults to the node name
  ASSERT_EQ(y1.nics.size(), 1u);
  EXPECT_EQ(y1.nics[0].address, "fd00::1");
  EXPECT_EQ(y1.lane_nic(0).address, "fd00::1");
  EXPECT_EQ(y1.lane_nic(1).address, "fd00::1");

  ASSERT_EQ(grid.wan.size(), 1u);
  const WanLink& link = grid.wan[0];
  EXPECT_EQ(link.site_a, 1);
  EXPECT_EQ(link.site_b, 0);
  EXPECT_DOUBLE_EQ(link.latency_s, 0.005);
  EXPECT_DOUBLE_EQ(link.bandwidth_bps, 2e9);
  EXPECT_DOUBLE_EQ(link.loss, 0.005);
  EXPECT_EQ(link.streams, 2);  // its own value beats defaults.wan
  EXPECT_TRUE(link.tls);
  EXPECT_EQ(link.where.str(), "inline.yaml:30:5");
}

TEST(Loader, BuiltInWanDefaultsAndGridNameFromTheSource) {
  const Grid grid = load_grid_string(kTwoSites, "some/dir/my-grid.yaml");
  EXPECT_EQ(grid.name, "my-grid");
  EXPECT_EQ(grid.segment_bytes, 0u);
  ASSERT_EQ(grid.wan.size(), 1u);
  EXPECT_EQ(grid.wan[0].loss, 0.0);
  EXPECT_EQ(grid.wan[0].streams, 1);
  EXPECT_FALSE(grid.wan[0].tls);
  EXPECT_EQ(grid.max_wan_streams(), 1);
}

TEST(Loader, EmptyOptionalSectionsAreAbsent) {
  const Grid grid = load_grid_string(yaml({
                                         "defaults:",
                                         "sites:",
                                         "  - name: only",
                                         "    nodes:",
                                         "      - name: n1",
                                         "        nics:",
                                         "          - address: 127.0.0.1",
                                         "            bandwidth: 1 Gbit",
                                         "wan:",
                                     }),
                                     "x.yml");
  EXPECT_EQ(grid.name, "x");
  EXPECT_EQ(grid.size(), 1);
  EXPECT_TRUE(grid.wan.empty());
  EXPECT_EQ(grid.max_wan_streams(), 1);
  EXPECT_EQ(grid.site_chain(0), std::vector<int>{0});
  EXPECT_EQ(grid.streams_between(0, 0), 1);
}

// ---------------------------------------------------------------------------
// The shipped site-configs

struct Lanes {
  int rank;
  std::string name;
  std::string lane0;
  std::string lane1;
};

struct Expected {
  std::string file;
  int ranks;
  std::vector<std::string> sites;
  std::vector<int> site_sizes;
  std::vector<Lanes> lanes;
};

const std::vector<Expected>& expected_configs() {
  static const std::vector<Expected> kExpected = {
      {"default.yaml",
       8,
       {"tokyo", "osaka"},
       {4, 4},
       {{0, "a1", "127.0.1.1", "127.0.2.1"},
        {3, "a4", "127.0.1.4", "127.0.2.4"},
        {4, "b1", "127.0.1.11", "127.0.2.11"},
        {7, "b4", "127.0.1.14", "127.0.2.14"}}},
      {"single-site-15.yaml",
       15,
       {"cluster"},
       {15},
       {{0, "n01", "127.0.3.1", "127.0.4.1"}, {14, "n15", "127.0.3.15", "127.0.4.15"}}},
      {"two-sites-16x16.yaml",
       32,
       {"east", "west"},
       {16, 16},
       {{0, "e01", "127.0.5.1", "127.0.6.1"},
        {15, "e16", "127.0.5.16", "127.0.6.16"},
        {16, "w01", "127.0.5.101", "127.0.6.101"},
        {31, "w16", "127.0.5.116", "127.0.6.116"}}},
      {"three-sites-hetero.yaml",
       15,
       {"alpha", "beta", "gamma"},
       {5, 3, 7},
       {{0, "alpha1", "127.0.7.1", "127.0.8.1"},
        {5, "beta1", "127.0.7.21", "127.0.7.21"},
        {7, "beta3", "127.0.7.23", "127.0.7.23"},
        {8, "gamma1", "127.0.7.41", "127.0.8.41"},
        {11, "gamma4", "127.0.7.44", "127.0.8.44"},
        {12, "gamma5", "127.0.7.45", "127.0.7.45"},
        {14, "gamma7", "127.0.7.47", "127.0.7.47"}}},
      {"testbed-2x4.yaml",
       8,
       {"a", "b"},
       {4, 4},
       {{0, "a1", "10.201.1.1", "10.201.2.1"},
        {3, "a4", "10.201.1.4", "10.201.2.4"},
        {4, "b1", "10.202.1.1", "10.202.2.1"},
        {7, "b4", "10.202.1.4", "10.202.2.4"}}},
  };
  return kExpected;
}

void expect_matches(const Grid& grid, const Expected& e) {
  EXPECT_EQ(grid.size(), e.ranks);
  ASSERT_EQ(grid.sites.size(), e.sites.size());
  int next_rank = 0;
  for (size_t s = 0; s < e.sites.size(); ++s) {
    EXPECT_EQ(grid.sites[s].name, e.sites[s]);
    ASSERT_EQ(grid.sites[s].ranks.size(), static_cast<size_t>(e.site_sizes[s]));
    for (const int r : grid.sites[s].ranks) {
      EXPECT_EQ(r, next_rank++);
      EXPECT_EQ(grid.site_of(r), static_cast<int>(s));
    }
  }
  for (const Lanes& l : e.lanes) {
    const Node& node = grid.nodes.at(static_cast<size_t>(l.rank));
    EXPECT_EQ(node.name, l.name);
    EXPECT_EQ(node.host, l.name);
    EXPECT_EQ(node.lane_nic(0).address, l.lane0) << node.name;
    EXPECT_EQ(node.lane_nic(1).address, l.lane1) << node.name;
  }
  // Every site is reachable, so the chain from the first site covers them all.
  EXPECT_EQ(grid.site_chain(0).size(), grid.sites.size());
}

TEST(SiteConfigs, EveryFileLoadsAndIsNamedAfterItself) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigDir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    ++files;
    const Grid grid = load_grid_file(entry.path().string());
    EXPECT_EQ(grid.name, entry.path().stem().string());
    EXPECT_EQ(grid.source, entry.path().string());
    EXPECT_GT(grid.size(), 0);
  }
  EXPECT_GE(files, static_cast<int>(expected_configs().size()));
}

TEST(SiteConfigs, ShapesRanksAndLaneAddresses) {
  for (const Expected& e : expected_configs()) {
    SCOPED_TRACE(e.file);
    expect_matches(load_grid_file(kConfigDir + "/" + e.file), e);
  }
}

TEST(SiteConfigs, LinkParameters) {
  const Grid two = load_grid_file(kConfigDir + "/two-sites-16x16.yaml");
  ASSERT_EQ(two.wan.size(), 1u);
  EXPECT_DOUBLE_EQ(two.wan[0].latency_s, 0.010);
  EXPECT_DOUBLE_EQ(two.wan[0].bandwidth_bps, 10e9);
  EXPECT_EQ(two.wan[0].streams, 4);
  EXPECT_DOUBLE_EQ(two.nodes[0].total_bandwidth_bps(), 20e9);

  const Grid single = load_grid_file(kConfigDir + "/single-site-15.yaml");
  EXPECT_TRUE(single.wan.empty());
  EXPECT_EQ(single.nodes[0].nics.size(), 2u);

  const Grid testbed = load_grid_file(kConfigDir + "/testbed-2x4.yaml");
  ASSERT_EQ(testbed.wan.size(), 1u);
  EXPECT_DOUBLE_EQ(testbed.wan[0].latency_s, 0.010);
  EXPECT_DOUBLE_EQ(testbed.wan[0].bandwidth_bps, 1e9);
  EXPECT_EQ(testbed.wan[0].streams, 4);
  for (const Node& node : testbed.nodes) {
    ASSERT_EQ(node.nics.size(), 2u);
    EXPECT_DOUBLE_EQ(node.nics[0].bandwidth_bps, 100e6);
    EXPECT_DOUBLE_EQ(node.nics[1].bandwidth_bps, 100e6);
    EXPECT_EQ(node.nics[0].device, "eth0");
    EXPECT_EQ(node.nics[1].device, "eth1");
  }
}

TEST(DefaultGrid, IsTheEmbeddedDefaultYaml) {
  const Grid grid = default_grid();
  EXPECT_EQ(grid.source, "<embedded default>");
  EXPECT_EQ(grid.name, "default");
  expect_matches(grid, expected_configs().front());
  ASSERT_EQ(grid.wan.size(), 1u);
  EXPECT_EQ(grid.wan[0].site_a, 0);
  EXPECT_EQ(grid.wan[0].site_b, 1);
  EXPECT_EQ(grid.wan[0].latency_s, 0.0);
  EXPECT_DOUBLE_EQ(grid.wan[0].bandwidth_bps, 10e9);
  EXPECT_EQ(grid.wan[0].streams, 3);
  EXPECT_EQ(grid.max_wan_streams(), 3);
  for (const Node& node : grid.nodes) {
    ASSERT_EQ(node.nics.size(), 2u);
    EXPECT_DOUBLE_EQ(node.nics[0].bandwidth_bps, 10e9);
  }

  // The compiled-in text is site-configs/default.yaml, byte for byte.
  std::FILE* f = std::fopen((kConfigDir + "/default.yaml").c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string file_text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) file_text.append(buffer, n);
  std::fclose(f);
  EXPECT_EQ(std::string(default_topology_yaml()), file_text);
}

TEST(Docs, TheCompleteExampleInTopologyMdLoads) {
  // docs/TOPOLOGY.md is the contract; its example must stay valid.
  const std::string path = std::string(GRIDBCAST_SOURCE_DIR) + "/docs/TOPOLOGY.md";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr) << path;
  std::string doc;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) doc.append(buffer, n);
  std::fclose(f);
  const size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const Grid grid = load_grid_string(doc.substr(begin + 8, end - begin - 8), "TOPOLOGY.md");
  EXPECT_EQ(grid.name, "japan");
  EXPECT_EQ(grid.size(), 13);
  EXPECT_EQ(grid.segment_bytes, 256u * 1024);
  EXPECT_EQ(grid.nodes[4].name, "a05");
  EXPECT_EQ(grid.nodes[4].lane_nic(1).address, "10.1.1.5");
  EXPECT_EQ(grid.nodes[3].host, "a04.tokyo.example");
  EXPECT_EQ(grid.nodes[5].name, "b1");
  EXPECT_EQ(grid.sites[1].ranks.front(), 5);
  ASSERT_EQ(grid.wan.size(), 1u);
  EXPECT_EQ(grid.wan[0].streams, 8);
  EXPECT_TRUE(grid.wan[0].tls);
  EXPECT_FALSE(grid.sites[0].multicast.enabled);
  EXPECT_TRUE(grid.sites[1].multicast.enabled);
  EXPECT_EQ(grid.sites[1].multicast.range(), "239.192.0.0/14");
}

// ---------------------------------------------------------------------------
// Graph queries

TEST(GridQueries, MulticastPaceIsTheSlowestReceivingNicOfTheLane) {
  const Grid grid =
      load_grid_string(yaml({
                           "sites:",
                           "  - name: s",
                           "    multicast: true",
                           "    nodes:",
                           "      - {name: a, nics: [{address: 10.0.0.1, bandwidth: 10 Gbit},",
                           "                         {address: 10.0.1.1, bandwidth: 10 Gbit}]}",
                           "      - {name: b, nics: [{address: 10.0.0.2, bandwidth: 2 Gbit},",
                           "                         {address: 10.0.1.2, bandwidth: 1.5 Gbit}]}",
                           "      - {name: c, nics: [{address: 10.0.0.3, bandwidth: 5 Gbit}]}",
                           "  - name: alone",
                           "    nodes: [{name: d, nics: [{address: 10.0.2.1, bandwidth: 1 Gbit}]}]",
                           "wan: [{sites: [s, alone], latency: 1 ms, bandwidth: 1 Gbit}]",
                       }),
                       "test.yaml");
  // b's lanes: 0 on its 2 Gbit NIC, 1 on its 1.5 Gbit one (Node::lane_nic_index);
  // c has one NIC for every lane.
  EXPECT_EQ(grid.multicast_pace_bps(0, 0), 2e9);
  EXPECT_EQ(grid.multicast_pace_bps(0, 1), 1.5e9);
  EXPECT_EQ(grid.multicast_pace_bps(1, 0), 5e9);  // the sender's own NIC does not count
  EXPECT_EQ(grid.multicast_pace_bps(2, 1), 1.5e9);
  EXPECT_EQ(grid.multicast_pace_bps(3, 0), 0);  // nobody to receive
}

TEST(GridQueries, HeteroChainPathsAndStreams) {
  const Grid grid = load_grid_file(kConfigDir + "/three-sites-hetero.yaml");
  ASSERT_EQ(grid.wan.size(), 2u);
  const WanLink* alpha_beta = &grid.wan[0];
  const WanLink* beta_gamma = &grid.wan[1];

  EXPECT_EQ(grid.site_chain(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(grid.site_chain(1), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(grid.site_chain(2), (std::vector<int>{2, 1, 0}));

  EXPECT_TRUE(grid.wan_path(1, 1).empty());
  EXPECT_EQ(grid.wan_path(0, 1), (std::vector<const WanLink*>{alpha_beta}));
  EXPECT_EQ(grid.wan_path(0, 2), (std::vector<const WanLink*>{alpha_beta, beta_gamma}));
  EXPECT_EQ(grid.wan_path(2, 0), (std::vector<const WanLink*>{beta_gamma, alpha_beta}));

  EXPECT_EQ(grid.link_between(0, 1), alpha_beta);
  EXPECT_EQ(grid.link_between(2, 1), beta_gamma);
  EXPECT_EQ(grid.link_between(0, 2), nullptr);
  EXPECT_EQ(grid.site_named("gamma"), 2);
  EXPECT_EQ(grid.site_named("delta"), -1);

  // alpha ranks 0-4, beta 5-7, gamma 8-14.
  EXPECT_EQ(grid.streams_between(0, 4), 1);
  EXPECT_EQ(grid.streams_between(0, 5), 2);
  EXPECT_EQ(grid.streams_between(5, 8), 8);
  EXPECT_EQ(grid.streams_between(14, 7), 8);
  EXPECT_EQ(grid.streams_between(0, 14), 2);
  EXPECT_EQ(grid.streams_between(14, 0), 2);
  EXPECT_EQ(grid.max_wan_streams(), 8);

  EXPECT_DOUBLE_EQ(beta_gamma->loss, 0.0001);
  EXPECT_DOUBLE_EQ(beta_gamma->latency_s, 0.020);
  EXPECT_DOUBLE_EQ(beta_gamma->bandwidth_bps, 2e9);
  EXPECT_DOUBLE_EQ(alpha_beta->latency_s, 0.005);
  EXPECT_DOUBLE_EQ(grid.nodes[0].total_bandwidth_bps(), 20e9);
  EXPECT_DOUBLE_EQ(grid.nodes[5].total_bandwidth_bps(), 1e9);
  EXPECT_EQ(grid.nodes[5].nics.size(), 1u);
  EXPECT_EQ(grid.nodes[11].nics.size(), 2u);
  EXPECT_EQ(grid.nodes[12].nics.size(), 1u);

  EXPECT_THROW(grid.site_chain(3), std::out_of_range);
  EXPECT_THROW(grid.wan_path(-1, 0), std::out_of_range);
}

// One single-node site per name, with the given WAN links (pairs of names), so
// that graph shapes can be written compactly.
Grid sites_and_links(const std::vector<std::string>& sites,
                     const std::vector<std::pair<std::string, std::string>>& links,
                     const std::vector<int>& streams) {
  std::string text =
      "defaults:\n  nic_bandwidth: 1 Gbit\n  wan: {latency: 1 ms, bandwidth: 1 Gbit}\n";
  text += "sites:\n";
  int address = 1;
  for (const std::string& site : sites) {
    text += "  - name: " + site + "\n    nodes: [{name: " + site + "1, nics: [{address: 10.0.0." +
            std::to_string(address++) + "}]}]\n";
  }
  text += "wan:\n";
  for (size_t i = 0; i < links.size(); ++i) {
    text += "  - {sites: [" + links[i].first + ", " + links[i].second +
            "], streams: " + std::to_string(streams[i]) + "}\n";
  }
  return load_grid_string(text, "graph.yaml");
}

TEST(GridQueries, SiteChainIsDepthFirstPreorderWithNeighboursInFileOrder) {
  // Sites A B C D E (0-4); links in file order A-C, B-D, A-B, C-E.
  const Grid grid = sites_and_links({"A", "B", "C", "D", "E"},
                                    {{"A", "C"}, {"B", "D"}, {"A", "B"}, {"C", "E"}}, {1, 2, 3, 4});
  // From A: C first (listed first), all of C's subtree (E), then B and its D.
  EXPECT_EQ(grid.site_chain(0), (std::vector<int>{0, 2, 4, 1, 3}));
  EXPECT_EQ(grid.site_chain(3), (std::vector<int>{3, 1, 0, 2, 4}));
  EXPECT_EQ(grid.site_chain(4), (std::vector<int>{4, 2, 0, 1, 3}));

  const std::vector<const WanLink*> path = grid.wan_path(3, 4);  // D-B-A-C-E
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(path[0], &grid.wan[1]);
  EXPECT_EQ(path[1], &grid.wan[2]);
  EXPECT_EQ(path[2], &grid.wan[0]);
  EXPECT_EQ(path[3], &grid.wan[3]);
  // D's rank is 3, E's 4: min(2, 3, 1, 4).
  EXPECT_EQ(grid.streams_between(3, 4), 1);
  EXPECT_EQ(grid.streams_between(1, 3), 2);
  EXPECT_EQ(grid.max_wan_streams(), 4);
}

TEST(GridQueries, WanPathTakesFewestHopsAndBreaksTiesByFileOrder) {
  // A cycle P-Q-S-R-P plus a long detour: P to S has two 2-hop paths.
  const Grid grid = sites_and_links({"P", "Q", "R", "S"},
                                    {{"P", "Q"}, {"P", "R"}, {"R", "S"}, {"Q", "S"}}, {5, 7, 3, 6});
  const std::vector<const WanLink*> path = grid.wan_path(0, 3);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path[0], &grid.wan[0]);  // P-Q is listed before P-R
  EXPECT_EQ(path[1], &grid.wan[3]);
  EXPECT_EQ(grid.streams_between(0, 3), 5);
  EXPECT_EQ(grid.wan_path(3, 0).size(), 2u);

  // A direct link always wins over a longer path.
  const Grid direct =
      sites_and_links({"P", "Q", "R"}, {{"P", "Q"}, {"Q", "R"}, {"P", "R"}}, {1, 1, 9});
  EXPECT_EQ(direct.wan_path(0, 2), (std::vector<const WanLink*>{&direct.wan[2]}));
  EXPECT_EQ(direct.streams_between(0, 2), 9);
}

TEST(GridQueries, HandBuiltDisconnectedGridsStillChainEverySite) {
  Grid grid = sites_and_links({"A", "B", "C"}, {{"A", "B"}, {"B", "C"}}, {1, 1});
  grid.wan.pop_back();  // C is now an island
  EXPECT_EQ(grid.site_chain(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(grid.site_chain(2), (std::vector<int>{2, 0, 1}));
  EXPECT_THROW(grid.wan_path(0, 2), std::invalid_argument);
}

}  // namespace
}  // namespace gridbcast::topology
