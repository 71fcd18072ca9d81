// The emulated grid as data: which namespaces, interfaces, bridges, addresses,
// routes and shapers a topology turns into. Pure computation (no system calls),
// so every naming and addressing rule is unit-tested without root. The rules are
// documented in docs/TESTBED.md ("Addresses and names").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::testbed {

// Every testbed failure: says what went wrong and, where it can, what to do.
class TestbedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Ipv4 {
  std::uint32_t value = 0;  // host byte order
  std::string str() const;
  static std::optional<Ipv4> parse(std::string_view text);
  friend bool operator==(Ipv4, Ipv4) = default;
  friend auto operator<=>(Ipv4, Ipv4) = default;
};

struct Ipv4Net {
  Ipv4 base;  // network address (host bits zero)
  int length = 0;
  static Ipv4Net of(Ipv4 address, int length);  // clears the host bits
  static std::optional<Ipv4Net> parse(std::string_view cidr);
  std::uint32_t mask() const;
  bool contains(Ipv4 a) const;
  bool overlaps(const Ipv4Net& o) const;
  Ipv4 last_host() const;   // the address below the broadcast address
  std::string str() const;  // "10.1.2.0/24"
  friend bool operator==(const Ipv4Net&, const Ipv4Net&) = default;
};

inline constexpr std::size_t kMaxInterfaceName = 15;  // IFNAMSIZ - 1
// Longest prefix a site's lane subnet gets; shorter only if its addresses need it.
inline constexpr int kLaneSubnetLength = 24;
// Management network: the testbed takes one /22 block of this range.
inline constexpr std::string_view kManagementRange = "10.254.0.0/16";
inline constexpr int kManagementBlockLength = 22;
inline constexpr int kManagementBlocks = 64;
// WAN transit addresses between site routers: a /30 per link from this range.
inline constexpr std::string_view kTransitRange = "169.254.0.0/16";
// Policy-routing tables: lane L of a node uses kLaneTableBase + L; a router
// sends WAN-bound packets into the delay line through kDelayTable.
inline constexpr int kLaneTableBase = 100;
inline constexpr int kDelayTable = 200;
// Rule preferences of a router's delay-line rules: packets that come in on
// lane K or WAN end I look up kDelayTable first.
inline constexpr int kLaneRulePref = 1000;
inline constexpr int kWanRulePref = 2000;
inline constexpr std::string_view kManagementDevice = "mgmt";

// One NIC of a node: a veth `device` inside the node's namespace whose peer
// `port` is a port of bridge `bridge` in the site router's namespace.
struct NicPlan {
  int nic = 0;
  std::string device;
  Ipv4 address;
  Ipv4Net subnet;
  Ipv4 gateway;
  std::string port;    // the bridge-side veth, in the router namespace
  std::string bridge;  // "lane<nic>" in the router namespace
  double bandwidth_bps = 0;
};

struct NodePlan {
  int rank = 0;
  std::string name;
  int site = 0;
  std::string ns;
  std::vector<NicPlan> nics;
  Ipv4 mgmt_address;
  std::string mgmt_peer;  // root-namespace end of the management veth
};

// A site's switch for one NIC index, with the router's gateway address on it.
struct LanePlan {
  int nic = 0;
  std::string bridge;
  Ipv4Net subnet;
  Ipv4 gateway;
};

// This router's end of a WAN link; packets leaving through it are delayed by
// `latency_s` (delay line `tun` or netem) and shaped to `bandwidth_bps`.
struct WanEndPlan {
  int link = 0;  // index into Grid::wan
  int peer_site = 0;
  std::string dev;  // "wan<link>" in both routers
  Ipv4 address;
  Ipv4 peer_address;
  std::string tun;  // "dly<link>": the delay line for this direction
  double latency_s = 0;
  double bandwidth_bps = 0;
  double loss = 0;
};

// A remote site's subnet, reached through the first hop of the WAN path.
struct RoutePlan {
  Ipv4Net destination;
  int site = 0;
  int wan = 0;  // index into RouterPlan::wan
};

struct RouterPlan {
  int site = 0;
  std::string name;
  std::string ns;
  std::vector<LanePlan> lanes;
  std::vector<WanEndPlan> wan;
  std::vector<RoutePlan> routes;
  double ingress_bps = 0;  // upper bound of what can arrive (delay-line buffer sizing)
};

struct Layout {
  std::string topology_name;
  std::string id;
  std::string prefix;
  Ipv4Net mgmt_net;
  Ipv4 mgmt_gateway;  // on the root-namespace bridge; the launcher listens here
  std::string mgmt_bridge;
  std::vector<NodePlan> nodes;      // index == rank
  std::vector<RouterPlan> routers;  // index == site
};

// "gb" + 6 hex digits of a hash of the topology name and the id: unique per
// testbed, stable across runs, so a later `up` or `down` finds leftovers.
std::string testbed_prefix(const std::string& topology_name, const std::string& id);
// Namespace-safe form of a name: [A-Za-z0-9_.-] kept, anything else becomes '_'.
std::string sanitize_name(std::string_view name);

// Bytes a router's delay line holds for one WAN link: everything that can come
// into the router during one one-way delay, with room to spare (4-256 MiB).
std::size_t delay_buffer_bytes(double router_ingress_bps, double latency_s);
// The management block with this index (0..kManagementBlocks-1).
Ipv4Net management_block(int index);
// Where the search for a free management block starts for this prefix.
int preferred_management_block(const std::string& prefix);

// The whole emulated network of a grid. Throws TestbedError when the topology
// cannot be emulated (IPv6 or loopback addresses, overlapping lane subnets, bad
// device names, too many nodes), naming the node or site and the fix.
Layout plan_layout(const topology::Grid& grid, const std::string& id, int mgmt_block);

// The subnets of every (site, NIC index) and their gateways, by the rule in
// docs/TESTBED.md; shared with the compose generator.
struct LaneSubnet {
  int site = 0;
  int nic = 0;
  Ipv4Net subnet;
  Ipv4 gateway;                 // the site router's address on this lane
  std::vector<Ipv4> addresses;  // the nodes' addresses in it
};
std::vector<LaneSubnet> lane_subnets(const topology::Grid& grid);
// The highest host address of `net` below `below` that no node uses (nullopt if none).
std::optional<Ipv4> free_address_below(const Ipv4Net& net, Ipv4 below,
                                       const std::vector<Ipv4>& used);

}  // namespace gridbcast::testbed
