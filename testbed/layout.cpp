#include "testbed/layout.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <set>

namespace gridbcast::testbed {
namespace {

std::uint32_t mask_of(int length) {
  return length <= 0 ? 0u : ~std::uint32_t{0} << (32 - length);
}

int common_prefix_length(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t diff = a ^ b;
  int n = 0;
  for (std::uint32_t bit = 0x80000000u; bit != 0 && !(diff & bit); bit >>= 1) ++n;
  return n;
}

std::string where(const topology::Node& n) {
  return n.where.line > 0 ? " (" + n.where.str() + ")" : "";
}

// Linux's rules for interface names (dev_valid_name), narrowed to a strict
// character set: device names end up in `ip -batch` and `tc -batch` input run
// as root, where '\r', '#', quotes, a trailing '\\' and spaces have meanings
// of their own, and a leading '-' would read as an option.
void check_device_name(const std::string& device, const topology::Node& node) {
  std::string shown;
  for (const char c : device)
    shown += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : "\\x" + [&] {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      return std::string(hex);
    }();
  const std::string who =
      "node \"" + node.name + "\"" + where(node) + ": NIC device \"" + shown + "\"";
  if (device.empty() || device.size() > kMaxInterfaceName)
    throw TestbedError(who + " must be 1 to 15 characters long (a Linux interface name)");
  const auto is_alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  bool ok = is_alnum(device.front());
  for (const char c : device) ok = ok && (is_alnum(c) || c == '_' || c == '.' || c == '-');
  if (!ok)
    throw TestbedError(who +
                       " is not allowed: NIC device names use letters, digits, '_', '.' and '-', "
                       "and start with a letter or digit");
  if (device == "lo" || device == kManagementDevice)
    throw TestbedError(who + " is reserved by the testbed (\"lo\" and \"" +
                       std::string(kManagementDevice) + "\" exist in every node namespace)");
}

Ipv4 node_address(const topology::Grid& grid, const topology::Node& node, size_t nic) {
  const std::string& text = node.nics[nic].address;
  const auto a = Ipv4::parse(text);
  const std::string who = "node \"" + node.name + "\"" + where(node) + ", NIC " +
                          std::to_string(nic) + ": address " + text;
  if (!a) throw TestbedError(who + " is not IPv4; the namespace testbed emulates IPv4 grids only");
  const auto mgmt = *Ipv4Net::parse(kManagementRange);
  const auto transit = *Ipv4Net::parse(kTransitRange);
  if ((a->value >> 24) == 127)
    throw TestbedError(who +
                       " is a loopback address; the testbed needs routable addresses, one "
                       "subnet per site and lane (see site-configs/testbed-2x4.yaml; \"" +
                       grid.name + "\" suits the local backend instead)");
  if ((a->value >> 24) == 0 || (a->value >> 28) >= 14)
    throw TestbedError(who + " is not a unicast host address");
  if (mgmt.contains(*a))
    throw TestbedError(who + " is in " + std::string(kManagementRange) +
                       ", which the testbed uses for its management network");
  if (transit.contains(*a))
    throw TestbedError(who + " is in " + std::string(kTransitRange) +
                       ", which the testbed uses between site routers");
  return *a;
}

}  // namespace

std::string Ipv4::str() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", value >> 24, (value >> 16) & 255,
                (value >> 8) & 255, value & 255);
  return buf;
}

std::optional<Ipv4> Ipv4::parse(std::string_view text) {
  std::uint32_t v = 0;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int part = 0; part < 4; ++part) {
    if (part > 0) {
      if (p == end || *p != '.') return std::nullopt;
      ++p;
    }
    if (p == end || *p < '0' || *p > '9') return std::nullopt;
    unsigned octet = 0;
    const auto [next, ec] = std::from_chars(p, end, octet);
    if (ec != std::errc{} || octet > 255 || next - p > 3) return std::nullopt;
    v = (v << 8) | octet;
    p = next;
  }
  if (p != end) return std::nullopt;
  return Ipv4{v};
}

Ipv4Net Ipv4Net::of(Ipv4 address, int length) {
  return {Ipv4{address.value & mask_of(length)}, length};
}

std::optional<Ipv4Net> Ipv4Net::parse(std::string_view cidr) {
  const auto slash = cidr.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto a = Ipv4::parse(cidr.substr(0, slash));
  int length = -1;
  const auto tail = cidr.substr(slash + 1);
  const auto [next, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), length);
  if (!a || ec != std::errc{} || next != tail.data() + tail.size() || length < 0 || length > 32)
    return std::nullopt;
  return of(*a, length);
}

std::uint32_t Ipv4Net::mask() const {
  return mask_of(length);
}
bool Ipv4Net::contains(Ipv4 a) const {
  return (a.value & mask()) == base.value;
}
bool Ipv4Net::overlaps(const Ipv4Net& o) const {
  const std::uint32_t m = mask_of(std::min(length, o.length));
  return (base.value & m) == (o.base.value & m);
}
Ipv4 Ipv4Net::last_host() const {
  return Ipv4{(base.value | ~mask()) - 1};
}
std::string Ipv4Net::str() const {
  return base.str() + "/" + std::to_string(length);
}

std::string testbed_prefix(const std::string& topology_name, const std::string& id) {
  std::uint32_t h = 2166136261u;  // FNV-1a
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 16777619u;
  };
  mix(topology_name);
  mix(std::string_view("\0", 1));
  mix(id);
  char buf[16];
  std::snprintf(buf, sizeof buf, "gb%06x", (h ^ (h >> 24)) & 0xffffffu);
  return buf;
}

std::size_t delay_buffer_bytes(double router_ingress_bps, double latency_s) {
  constexpr double kMin = 4u << 20, kMax = 256u << 20;
  return static_cast<std::size_t>(
      std::clamp(router_ingress_bps / 8 * latency_s * 1.5 + kMin, kMin, kMax));
}

std::string sanitize_name(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

Ipv4Net management_block(int index) {
  const auto range = *Ipv4Net::parse(kManagementRange);
  const std::uint32_t size = 1u << (32 - kManagementBlockLength);
  return {Ipv4{range.base.value + static_cast<std::uint32_t>(index) * size},
          kManagementBlockLength};
}

int preferred_management_block(const std::string& prefix) {
  std::uint32_t h = 0;
  for (unsigned char c : prefix) h = h * 31 + c;
  return static_cast<int>(h % kManagementBlocks);
}

std::optional<Ipv4> free_address_below(const Ipv4Net& net, Ipv4 below,
                                       const std::vector<Ipv4>& used) {
  const std::set<Ipv4> taken(used.begin(), used.end());
  // At most one step per used address plus one: the loop is bounded by `used`.
  for (std::uint32_t a = below.value - 1; a > net.base.value && net.contains(Ipv4{a}); --a)
    if (!taken.count(Ipv4{a})) return Ipv4{a};
  return std::nullopt;
}

std::vector<LaneSubnet> lane_subnets(const topology::Grid& grid) {
  std::map<std::pair<int, int>, LaneSubnet> groups;
  std::vector<Ipv4> all;
  for (const auto& node : grid.nodes)
    for (size_t k = 0; k < node.nics.size(); ++k) {
      const Ipv4 a = node_address(grid, node, k);
      auto& g = groups[{node.site, static_cast<int>(k)}];
      g.site = node.site;
      g.nic = static_cast<int>(k);
      g.addresses.push_back(a);
      all.push_back(a);
    }
  std::vector<LaneSubnet> out;
  for (auto& [key, g] : groups) {
    const std::string what = "site \"" + grid.sites[static_cast<size_t>(g.site)].name + "\", NIC " +
                             std::to_string(g.nic);
    int length = kLaneSubnetLength;
    for (const Ipv4 a : g.addresses)
      length = std::min(length, common_prefix_length(a.value, g.addresses.front().value));
    if (length < 16)
      throw TestbedError("the addresses of " + what + " (" + g.addresses.front().str() + " ... " +
                         g.addresses.back().str() +
                         ") do not share a /16; give each site and NIC index one subnet");
    g.subnet = Ipv4Net::of(g.addresses.front(), length);
    for (const Ipv4 a : g.addresses)
      if (a == g.subnet.base || a.value == g.subnet.last_host().value + 1)
        throw TestbedError("address " + a.str() + " of " + what +
                           " is the network or broadcast "
                           "address of its subnet " +
                           g.subnet.str());
    const auto gw = free_address_below(g.subnet, Ipv4{g.subnet.last_host().value + 1}, all);
    if (!gw)
      throw TestbedError("no free address for the router in " + g.subnet.str() + " (" + what + ")");
    g.gateway = *gw;
    out.push_back(g);
  }
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = i + 1; j < out.size(); ++j)
      if (out[i].subnet.overlaps(out[j].subnet)) {
        auto name = [&](const LaneSubnet& s) {
          return "site \"" + grid.sites[static_cast<size_t>(s.site)].name + "\" NIC " +
                 std::to_string(s.nic) + " (" + s.subnet.str() + ")";
        };
        throw TestbedError("the subnets of " + name(out[i]) + " and " + name(out[j]) +
                           " overlap; every site and NIC index needs its own subnet, e.g. its own "
                           "/24 (docs/TESTBED.md, \"Addresses and names\")");
      }
  return out;
}

Layout plan_layout(const topology::Grid& grid, const std::string& id, int mgmt_block) {
  if (grid.nodes.empty()) throw TestbedError("the topology has no nodes");
  if (mgmt_block < 0 || mgmt_block >= kManagementBlocks)
    throw TestbedError("management block " + std::to_string(mgmt_block) + " is out of range");
  Layout l;
  l.topology_name = grid.name;
  l.id = id;
  l.prefix = testbed_prefix(grid.name, id);
  l.mgmt_net = management_block(mgmt_block);
  l.mgmt_gateway = l.mgmt_net.last_host();
  l.mgmt_bridge = l.prefix + "mg";
  const std::uint32_t max_nodes = l.mgmt_gateway.value - l.mgmt_net.base.value - 1;
  if (grid.nodes.size() > max_nodes)
    throw TestbedError("the testbed emulates at most " + std::to_string(max_nodes) +
                       " nodes (one management /" + std::to_string(kManagementBlockLength) +
                       "); the topology has " + std::to_string(grid.nodes.size()));

  const auto subnets = lane_subnets(grid);
  auto subnet_of = [&](int site, int nic) -> const LaneSubnet& {
    for (const auto& s : subnets)
      if (s.site == site && s.nic == nic) return s;
    throw TestbedError("internal: no subnet for a lane");
  };

  std::map<std::string, std::string> ns_owner;
  auto claim_ns = [&](const std::string& ns, const std::string& who) {
    auto [it, fresh] = ns_owner.emplace(ns, who);
    if (!fresh)
      throw TestbedError(who + " and " + it->second + " map to the same namespace name \"" + ns +
                         "\"; rename one");
  };

  for (const auto& site : grid.sites) {
    RouterPlan r;
    r.site = static_cast<int>(l.routers.size());
    r.name = site.name;
    r.ns = l.prefix + "-r-" + sanitize_name(site.name);
    claim_ns(r.ns, "site \"" + site.name + "\"");
    for (const auto& s : subnets)
      if (s.site == r.site)
        r.lanes.push_back({s.nic, "lane" + std::to_string(s.nic), s.subnet, s.gateway});
    l.routers.push_back(std::move(r));
  }

  for (const auto& node : grid.nodes) {
    NodePlan n;
    n.rank = static_cast<int>(l.nodes.size());
    n.name = node.name;
    n.site = node.site;
    n.ns = l.prefix + "-n-" + sanitize_name(node.name);
    claim_ns(n.ns, "node \"" + node.name + "\"");
    n.mgmt_address = Ipv4{l.mgmt_net.base.value + 1 + static_cast<std::uint32_t>(n.rank)};
    n.mgmt_peer = l.prefix + "m" + std::to_string(n.rank);
    std::set<std::string> devices;
    for (size_t k = 0; k < node.nics.size(); ++k) {
      NicPlan nic;
      nic.nic = static_cast<int>(k);
      nic.device = node.nics[k].device.empty() ? "eth" + std::to_string(k) : node.nics[k].device;
      check_device_name(nic.device, node);
      if (!devices.insert(nic.device).second)
        throw TestbedError("node \"" + node.name + "\"" + where(node) + " names device \"" +
                           nic.device + "\" twice");
      nic.address = *Ipv4::parse(node.nics[k].address);
      const auto& s = subnet_of(node.site, nic.nic);
      nic.subnet = s.subnet;
      nic.gateway = s.gateway;
      nic.port = "n" + std::to_string(n.rank) + "l" + std::to_string(k);
      nic.bridge = "lane" + std::to_string(k);
      nic.bandwidth_bps = node.nics[k].bandwidth_bps;
      l.routers[static_cast<size_t>(node.site)].ingress_bps += nic.bandwidth_bps;
      n.nics.push_back(std::move(nic));
    }
    l.nodes.push_back(std::move(n));
  }

  const auto transit = *Ipv4Net::parse(kTransitRange);
  const std::uint32_t max_links = (1u << (32 - transit.length)) / 4;
  if (grid.wan.size() > max_links)
    throw TestbedError("too many WAN links for the transit range " + transit.str());
  for (size_t i = 0; i < grid.wan.size(); ++i) {
    const auto& link = grid.wan[i];
    const std::uint32_t base = transit.base.value + static_cast<std::uint32_t>(i) * 4;
    for (int side = 0; side < 2; ++side) {
      WanEndPlan w;
      w.link = static_cast<int>(i);
      const int site = side == 0 ? link.site_a : link.site_b;
      w.peer_site = side == 0 ? link.site_b : link.site_a;
      w.dev = "wan" + std::to_string(i);
      w.tun = "dly" + std::to_string(i);
      w.address = Ipv4{base + 1 + static_cast<std::uint32_t>(side)};
      w.peer_address = Ipv4{base + 2 - static_cast<std::uint32_t>(side)};
      w.latency_s = link.latency_s;
      w.bandwidth_bps = link.bandwidth_bps;
      w.loss = link.loss;
      auto& r = l.routers[static_cast<size_t>(site)];
      r.ingress_bps += link.bandwidth_bps;
      r.wan.push_back(std::move(w));
    }
  }

  for (auto& r : l.routers)
    for (size_t t = 0; t < grid.sites.size(); ++t) {
      if (static_cast<int>(t) == r.site) continue;
      const auto path = grid.wan_path(r.site, static_cast<int>(t));
      if (path.empty()) continue;  // the loader guarantees connectivity
      const int link = static_cast<int>(path.front() - grid.wan.data());
      int wan = -1;
      for (size_t w = 0; w < r.wan.size(); ++w)
        if (r.wan[w].link == link) wan = static_cast<int>(w);
      if (wan < 0) throw TestbedError("internal: WAN path does not start at its site");
      for (const auto& s : subnets)
        if (s.site == static_cast<int>(t)) r.routes.push_back({s.subnet, s.site, wan});
    }
  return l;
}

}  // namespace gridbcast::testbed
