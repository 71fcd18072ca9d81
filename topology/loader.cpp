#include "topology/loader.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "topology/hostlist.hpp"
#include "topology/units.hpp"

namespace gridbcast::topology {

namespace {

constexpr int kMinStreams = 1;
constexpr int kMaxStreams = kMaxWanStreams;

// One "key: value" of a YAML map. Both nodes are kept: a missing value (null) has
// no useful position of its own, so errors about it point at the key.
struct Field {
  std::string name;
  YAML::Node key;
  YAML::Node value;
};

struct WanDefaults {
  std::optional<double> latency_s;
  std::optional<double> bandwidth_bps;
  std::optional<double> loss;
  std::optional<int> streams;
  std::optional<bool> tls;
  std::optional<std::string> congestion;
  std::optional<double> max_rate_bps;
};

std::string join(std::initializer_list<std::string_view> items) {
  std::string out;
  for (const std::string_view item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

// Control characters are escaped: a message is a C string in the end (what()),
// and a NUL or a newline from the input must not cut or break it.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// What a node is, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return quoted(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string stem_of(const std::string& source) {
  std::string name = source;
  if (const size_t slash = name.find_last_of('/'); slash != std::string::npos) {
    name.erase(0, slash + 1);
  }
  for (const std::string_view ext : {".yaml", ".yml"}) {
    if (name.size() > ext.size() && name.ends_with(ext)) {
      name.resize(name.size() - ext.size());
      break;
    }
  }
  return name;
}

// An address in binary form (family byte + address bytes), so that different
// spellings of one IPv6 address count as duplicates. Empty when not an address.
std::string address_key(const std::string& address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return "4" + std::string(reinterpret_cast<const char*>(&v4), sizeof v4);
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    return "6" + std::string(reinterpret_cast<const char*>(&v6), sizeof v6);
  }
  return {};
}

class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)) {}

  Grid load(const YAML::Node& root) {
    grid_.source = source_;
    const std::vector<Field> top =
        fields(root, "the site-config", {"name", "defaults", "sites", "wan"});
    grid_.name = stem_of(source_);
    if (const Field* f = find(top, "name")) grid_.name = name_value(*f);
    if (const Field* f = find(top, "defaults"); f != nullptr && !f->value.IsNull()) {
      load_defaults(*f);
    }
    const Field* sites = find(top, "sites");
    if (sites == nullptr) {
      fail(root, "the site-config has no \"sites\" list; it is required and lists every site");
    }
    load_sites(*sites);
    if (const Field* f = find(top, "wan"); f != nullptr && !f->value.IsNull()) load_wan(*f);
    check_connected();
    return std::move(grid_);
  }

 private:
  Location loc(const YAML::Node& node) const {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return Location{source_, 0, 0};
    return Location{source_, mark.line + 1, mark.column + 1};
  }

  // Where a field's value was written, or its key when the value is missing.
  Location loc(const Field& field) const {
    return field.value.IsNull() ? loc(field.key) : loc(field.value);
  }

  [[noreturn]] void fail(const Location& where, const std::string& message) const {
    throw ConfigError(where, message);
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    fail(loc(node), message);
  }
  [[noreturn]] void fail(const Field& field, const std::string& message) const {
    fail(loc(field), message);
  }

  // The fields of a map, after checking that it is one, that every key is allowed
  // and that no key is given twice (yaml-cpp would silently keep the first).
  std::vector<Field> fields(const YAML::Node& map, std::string_view what,
                            std::initializer_list<std::string_view> allowed) const {
    if (!map.IsMap()) {
      fail(map, "expected " + std::string(what) + " to be a map with keys " + join(allowed) +
                    "; got " + describe(map));
    }
    std::vector<Field> out;
    // By value: yaml-cpp's iterators yield temporaries.
    for (const auto& entry : map) {
      const YAML::Node key = entry.first;
      if (!key.IsScalar()) {
        fail(key, "expected a key name in " + std::string(what) + ", got " + describe(key));
      }
      const std::string name = key.Scalar();
      bool known = false;
      for (const std::string_view a : allowed) known = known || a == name;
      if (!known) {
        fail(key, "unknown key " + quoted(name) + " in " + std::string(what) +
                      "; allowed keys: " + join(allowed));
      }
      for (const Field& previous : out) {
        if (previous.name == name) {
          fail(key, "duplicate key " + quoted(name) + " in " + std::string(what) +
                        " (first given at " + loc(previous.key).str() + ")");
        }
      }
      out.push_back(Field{name, key, entry.second});
    }
    return out;
  }

  static const Field* find(const std::vector<Field>& fields, std::string_view name) {
    for (const Field& f : fields) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  const Field& require(const std::vector<Field>& fields, std::string_view name,
                       const YAML::Node& map, std::string_view what,
                       std::string_view meaning) const {
    const Field* f = find(fields, name);
    if (f == nullptr) {
      fail(map, std::string(what) + " is missing the required key " + quoted(name) + " (" +
                    std::string(meaning) + ")");
    }
    return *f;
  }

  // A list, possibly required to be non-empty. Null entries are reported against
  // the list itself: yaml-cpp positions them at whatever token follows.
  const YAML::Node& list(const Field& field, std::string_view what, bool non_empty) const {
    if (!field.value.IsSequence() || (non_empty && field.value.size() == 0)) {
      fail(field, quoted(field.name) + (non_empty ? " must be a non-empty" : " must be a") +
                      " list of " + std::string(what) + "; got " +
                      (field.value.IsSequence() ? "an empty list" : describe(field.value)));
    }
    for (size_t i = 0; i < field.value.size(); ++i) {
      if (field.value[i].IsNull()) {
        fail(field, "entry " + std::to_string(i + 1) + " of " + quoted(field.name) +
                        " is empty; expected " + std::string(what));
      }
    }
    return field.value;
  }

  std::string scalar(const Field& field, std::string_view expected) const {
    if (!field.value.IsScalar()) {
      fail(field, quoted(field.name) + ": expected " + std::string(expected) + ", got " +
                      describe(field.value));
    }
    return field.value.Scalar();
  }

  std::string name_value(const Field& field) const {
    std::string name = scalar(field, "a name");
    if (name.empty()) fail(field, quoted(field.name) + " must not be empty");
    return name;
  }

  // Runs a units parser on a field, turning its message into a positioned error.
  template <typename Parse>
  auto quantity(const Field& field, std::string_view expected, Parse parse) const {
    const std::string text = scalar(field, expected);
    try {
      return parse(text);
    } catch (const std::invalid_argument& e) {
      fail(field, quoted(field.name) + ": " + e.what());
    }
  }

  double positive_bandwidth(const Field& field) const {
    const double bps = quantity(field, "a bandwidth such as \"1 Gbit\"", parse_bandwidth);
    if (bps <= 0) {
      fail(field, quoted(field.name) + ": bandwidth must be greater than 0, got " +
                      quoted(field.value.Scalar()));
    }
    return bps;
  }

  int streams_value(const Field& field) const {
    return int_value(field, kMinStreams, kMaxStreams, "");
  }

  // "auto" (0) or 1..kMaxLanes.
  int lanes_value(const Field& field) const { return int_value(field, 1, kMaxLanes, "auto"); }

  // An integer in [lo, hi], or `word` (returned as 0) when `word` is not empty.
  int int_value(const Field& field, int lo, int hi, std::string_view word) const {
    const std::string expected = "an integer from " + std::to_string(lo) + " to " +
                                 std::to_string(hi) + (word.empty() ? "" : " or " + quoted(word));
    const std::string text = scalar(field, expected);
    if (!word.empty() && text == word) return 0;
    bool digits = !text.empty() && text.size() <= 9;
    for (const char c : text) digits = digits && c >= '0' && c <= '9';
    const int value = digits ? std::stoi(text) : 0;
    if (!digits || value < lo || value > hi) {
      fail(field, quoted(field.name) + ": expected " + expected + ", got " + quoted(text));
    }
    return value;
  }

  bool bool_value(const Field& field) const {
    bool value = false;
    if (!field.value.IsScalar() || !YAML::convert<bool>::decode(field.value, value)) {
      fail(field, quoted(field.name) + ": expected true or false, got " + describe(field.value));
    }
    return value;
  }

  // A TCP congestion control name as Linux spells them (TCP_CA_NAME_MAX is 16
  // with the terminating zero). Whether a host has it is checked where a rank
  // opens its sockets, since the file may be read elsewhere.
  std::string congestion_value(const Field& field) const {
    const std::string expected =
        "a TCP congestion control name such as cubic, reno or bbr "
        "(/proc/sys/net/ipv4/tcp_available_congestion_control lists a host's)";
    const std::string text = scalar(field, expected);
    bool ok = !text.empty() && text.size() <= 15;
    for (const char c : text)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    if (!ok) fail(field, quoted(field.name) + ": expected " + expected + ", got " + quoted(text));
    return text;
  }

  std::vector<std::string> hostlist(const Field& field) const {
    const std::string text = scalar(field, "a name or hostlist such as \"n[01-16]\"");
    try {
      return expand_hostlist(text);
    } catch (const std::invalid_argument& e) {
      fail(field, quoted(field.name) + ": " + e.what());
    }
  }

  void load_defaults(const Field& defaults) {
    const std::vector<Field> fs =
        fields(defaults.value, "\"defaults\"",
               {"nic_bandwidth", "segment", "segment_overhead", "hop_overhead", "lanes",
                "congestion", "pace_lanes", "probe", "max_rate", "wan"});
    if (const Field* f = find(fs, "nic_bandwidth")) nic_bandwidth_ = positive_bandwidth(*f);
    if (const Field* f = find(fs, "segment")) {
      grid_.segment_bytes = quantity(*f, "a size such as \"256 KiB\"", parse_size);
    }
    if (const Field* f = find(fs, "lanes")) grid_.lanes = lanes_value(*f);
    if (const Field* f = find(fs, "congestion")) grid_.congestion = congestion_value(*f);
    if (const Field* f = find(fs, "pace_lanes")) grid_.pace_lanes = bool_value(*f);
    if (const Field* f = find(fs, "probe")) grid_.probe = bool_value(*f);
    if (const Field* f = find(fs, "max_rate")) grid_.max_rate_bps = positive_bandwidth(*f);
    if (const Field* f = find(fs, "segment_overhead")) {
      grid_.segment_overhead_s = quantity(*f, "a duration such as \"20 us\"", parse_duration);
      if (grid_.segment_overhead_s <= 0 || grid_.segment_overhead_s > 0.1)
        fail(*f, "\"segment_overhead\" must be above 0 and at most 100 ms");
    }
    if (const Field* f = find(fs, "hop_overhead")) {
      grid_.hop_overhead_s = quantity(*f, "a duration such as \"300 us\"", parse_duration);
      if (grid_.hop_overhead_s <= 0 || grid_.hop_overhead_s > 1)
        fail(*f, "\"hop_overhead\" must be above 0 and at most 1 s");
    }
    if (const Field* f = find(fs, "wan"); f != nullptr && !f->value.IsNull()) {
      wan_defaults_ = wan_settings(f->value, "\"defaults.wan\"");
    }
  }

  WanDefaults wan_settings(const YAML::Node& map, std::string_view what) const {
    return wan_settings(fields(
        map, what, {"latency", "bandwidth", "max_rate", "loss", "streams", "tls", "congestion"}));
  }

  WanDefaults wan_settings(const std::vector<Field>& fs) const {
    WanDefaults out;
    if (const Field* f = find(fs, "latency")) {
      out.latency_s = quantity(*f, "a duration such as \"10 ms\"", parse_duration);
    }
    if (const Field* f = find(fs, "bandwidth")) out.bandwidth_bps = positive_bandwidth(*f);
    if (const Field* f = find(fs, "max_rate")) out.max_rate_bps = positive_bandwidth(*f);
    if (const Field* f = find(fs, "loss")) {
      out.loss = quantity(*f, "a fraction such as \"0.1 %\"", parse_fraction);
    }
    if (const Field* f = find(fs, "streams")) out.streams = streams_value(*f);
    if (const Field* f = find(fs, "tls")) out.tls = bool_value(*f);
    if (const Field* f = find(fs, "congestion")) out.congestion = congestion_value(*f);
    return out;
  }

  void load_sites(const Field& sites_field) {
    const YAML::Node& sites = list(sites_field, "sites (maps with keys name, nodes)", true);
    std::map<std::string, Location> node_names;
    std::map<std::string, std::pair<std::string, Location>> addresses;
    for (const YAML::Node& site_node : sites) {
      const std::vector<Field> fs =
          fields(site_node, "a site entry", {"name", "nodes", "multicast", "latency"});
      const Field& name_field =
          require(fs, "name", site_node, "a site entry", "the site's unique name");
      Site site;
      site.name = name_value(name_field);
      site.where = loc(site_node);
      for (size_t i = 0; i < grid_.sites.size(); ++i) {
        if (grid_.sites[i].name == site.name) {
          fail(name_field, "duplicate site name " + quoted(site.name) + " (first defined at " +
                               site_name_locs_[i].str() + ")");
        }
      }
      if (const Field* f = find(fs, "multicast")) site.multicast = multicast_value(*f);
      if (const Field* f = find(fs, "latency")) {
        site.latency_s = quantity(*f, "a duration such as \"50 us\"", parse_duration);
        if (site.latency_s <= 0)
          fail(*f, "a site's latency (one hop between two of its nodes) must be greater than 0");
      }
      const int index = static_cast<int>(grid_.sites.size());
      const Field& nodes_field =
          require(fs, "nodes", site_node, "site " + quoted(site.name), "a non-empty list of nodes");
      if (!nodes_field.value.IsSequence() || nodes_field.value.size() == 0) {
        fail(nodes_field,
             "site " + quoted(site.name) +
                 " has no nodes: \"nodes\" must be a non-empty list of node "
                 "entries (maps with keys name, host, nics); got " +
                 (nodes_field.value.IsSequence() ? "an empty list" : describe(nodes_field.value)));
      }
      list(nodes_field, "node entries (maps with keys name, host, nics)", true);
      for (const YAML::Node& node_entry : nodes_field.value) {
        for (Node& node : load_node_entry(node_entry, site.name, node_names, addresses)) {
          node.site = index;
          site.ranks.push_back(grid_.size());
          grid_.nodes.push_back(std::move(node));
        }
      }
      grid_.sites.push_back(std::move(site));
      site_name_locs_.push_back(loc(name_field));
    }
  }

  // A site's `multicast:`: true/false, or a map {group, ttl, port, mtu} (which
  // enables it; absent keys keep their defaults).
  SiteMulticast multicast_value(const Field& field) const {
    SiteMulticast m;
    m.where = loc(field);
    if (!field.value.IsMap()) {
      if (!field.value.IsScalar() || !YAML::convert<bool>::decode(field.value, m.enabled)) {
        fail(field,
             "\"multicast\": expected true, false or a map with keys group, ttl, port, mtu; got " +
                 describe(field.value));
      }
      return m;
    }
    m.enabled = true;
    const std::vector<Field> fs =
        fields(field.value, "\"multicast\"", {"group", "ttl", "port", "mtu"});
    if (const Field* f = find(fs, "group")) multicast_group(*f, m);
    if (const Field* f = find(fs, "ttl")) m.ttl = int_value(*f, 1, 255, "");
    if (const Field* f = find(fs, "port")) {
      m.port = static_cast<std::uint16_t>(int_value(*f, 1, 65535, ""));
    }
    if (const Field* f = find(fs, "mtu"))
      m.mtu = int_value(*f, kMinMulticastMtu, kMaxMulticastMtu, "");
    return m;
  }

  // "239.192.0.0/14": an IPv4 multicast range (inside 224.0.0.0/4), its host
  // bits zero, not overlapping the link-local 224.0.0.0/24 (routers' own
  // protocols; never forwarded, and IGMP snooping floods it).
  void multicast_group(const Field& field, SiteMulticast& m) const {
    const std::string expected =
        "an IPv4 multicast range such as \"239.192.0.0/14\" (inside 224.0.0.0/4)";
    const std::string text = scalar(field, expected);
    const size_t slash = text.find('/');
    const std::string address = text.substr(0, slash);
    const std::string length = slash == std::string::npos ? "" : text.substr(slash + 1);
    in_addr a{};
    bool ok = slash != std::string::npos && inet_pton(AF_INET, address.c_str(), &a) == 1 &&
              !length.empty() && length.size() <= 2;
    for (const char c : length) ok = ok && c >= '0' && c <= '9';
    const int prefix = ok ? std::stoi(length) : -1;
    if (!ok || prefix > 32) {
      fail(field, "\"group\": expected " + expected + ", got " + quoted(text));
    }
    const std::uint32_t network = ntohl(a.s_addr);
    const std::uint32_t mask = prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
    if (prefix < 4 || (network & 0xF0000000u) != 0xE0000000u) {
      fail(field, "\"group\": " + quoted(text) +
                      " is not inside the IPv4 multicast range 224.0.0.0/4; use e.g. "
                      "239.192.0.0/14 (organisation-local scope)");
    }
    if ((network & ~mask) != 0) {
      fail(field, "\"group\": " + quoted(text) +
                      " has host bits set after the prefix; write the range's first address");
    }
    const bool overlaps_link_local =
        prefix <= 24 ? (0xE0000000u & mask) == network : (network & 0xFFFFFF00u) == 0xE0000000u;
    if (overlaps_link_local) {
      fail(field, "\"group\": " + quoted(text) +
                      " overlaps 224.0.0.0/24, the link-local groups of routing protocols; "
                      "use e.g. 239.192.0.0/14");
    }
    m.network = network;
    m.prefix = prefix;
  }

  // One entry of a site's node list, which a hostlist may expand to many nodes.
  std::vector<Node> load_node_entry(
      const YAML::Node& entry, const std::string& site_name,
      std::map<std::string, Location>& node_names,
      std::map<std::string, std::pair<std::string, Location>>& addresses) const {
    const std::string what = "a node entry of site " + quoted(site_name);
    const std::vector<Field> fs = fields(entry, what, {"name", "host", "nics"});
    const Field& name_field =
        require(fs, "name", entry, what, "a node name or hostlist such as \"n[01-16]\"");
    // The entry's shape first: a broken entry is refused before its hostlist expands.
    const std::string node_label = quoted(name_field.value.Scalar());
    const Field& nics_field =
        require(fs, "nics", entry, "node entry " + node_label, "a non-empty list of NICs");
    const std::vector<std::string> names = hostlist(name_field);
    const Location name_loc = loc(name_field);

    std::vector<Node> nodes(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      // Node names become parts of paths (launch --output '/data/{node}/...',
      // certificate files): a strict character set, never "." or "..".
      const std::string& n = names[i];
      const bool safe_chars =
          n.find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
          std::string::npos;
      if (!safe_chars || n == "." || n == "..") {
        fail(name_loc, "node name " + quoted(n) +
                           " may hold only letters, digits, '-', '_' and '.' (and is not \".\" "
                           "or \"..\"): it becomes part of file paths");
      }
      const auto [it, inserted] = node_names.emplace(names[i], name_loc);
      if (!inserted) {
        fail(name_loc, "duplicate node name " + quoted(names[i]) + " (first defined at " +
                           it->second.str() + ")");
      }
      nodes[i].name = names[i];
      nodes[i].host = names[i];
      nodes[i].where = name_loc;
    }

    if (const Field* host_field = find(fs, "host")) {
      const std::vector<std::string> hosts = hostlist(*host_field);
      if (hosts.size() != names.size()) {
        fail(*host_field, "\"host\" expands to " + std::to_string(hosts.size()) +
                              " host(s) but \"name\" expands to " + std::to_string(names.size()) +
                              " node(s); give exactly one host per node");
      }
      for (size_t i = 0; i < names.size(); ++i) nodes[i].host = hosts[i];
    }

    if (!nics_field.value.IsSequence() || nics_field.value.size() == 0) {
      fail(nics_field,
           "node entry " + node_label +
               " has no NICs: \"nics\" must be a non-empty list of NIC entries "
               "(maps with keys address, bandwidth, device); got " +
               (nics_field.value.IsSequence() ? "an empty list" : describe(nics_field.value)));
    }
    list(nics_field, "NIC entries (maps with keys address, bandwidth, device)", true);
    for (const YAML::Node& nic_node : nics_field.value) {
      const std::string nic_what = "a NIC entry of node entry " + node_label;
      const std::vector<Field> nf = fields(nic_node, nic_what, {"address", "bandwidth", "device"});
      const Field& address_field =
          require(nf, "address", nic_node, nic_what, "an IP address or range per node");
      const std::vector<std::string> list_of_addresses = hostlist(address_field);
      if (list_of_addresses.size() != names.size()) {
        fail(address_field, "\"address\" " + quoted(address_field.value.Scalar()) + " expands to " +
                                std::to_string(list_of_addresses.size()) +
                                " address(es) but \"name\" " + node_label + " expands to " +
                                std::to_string(names.size()) +
                                " node(s); give exactly one address per node");
      }
      Nic nic;
      if (const Field* f = find(nf, "bandwidth")) {
        nic.bandwidth_bps = positive_bandwidth(*f);
      } else if (nic_bandwidth_) {
        nic.bandwidth_bps = *nic_bandwidth_;
      } else {
        fail(nic_node, "NIC of node entry " + node_label +
                           " has no \"bandwidth\" and defaults.nic_bandwidth is not set; give "
                           "one, e.g. \"bandwidth: 10 Gbit\"");
      }
      if (const Field* f = find(nf, "device")) {
        nic.device = scalar(*f, "an interface name such as \"eth0\"");
      }
      const Location address_loc = loc(address_field);
      for (size_t i = 0; i < names.size(); ++i) {
        const std::string key = address_key(list_of_addresses[i]);
        if (key.empty()) {
          fail(address_loc, "\"address\": " + quoted(list_of_addresses[i]) + " (node " +
                                quoted(names[i]) + ") is not an IPv4 or IPv6 address");
        }
        const auto [it, inserted] = addresses.emplace(key, std::make_pair(names[i], address_loc));
        if (!inserted) {
          fail(address_loc, "duplicate address " + quoted(list_of_addresses[i]) + " of node " +
                                quoted(names[i]) + " (already used by node " +
                                quoted(it->second.first) + " at " + it->second.second.str() + ")");
        }
        nic.address = list_of_addresses[i];
        nodes[i].nics.push_back(nic);
      }
    }
    return nodes;
  }

  int site_index(const YAML::Node& name_node) const {
    const std::string name = name_node.Scalar();
    for (size_t i = 0; i < grid_.sites.size(); ++i) {
      if (grid_.sites[i].name == name) return static_cast<int>(i);
    }
    std::string known;
    for (const Site& s : grid_.sites) known += (known.empty() ? "" : ", ") + s.name;
    fail(name_node, "WAN link names unknown site " + quoted(name) + "; the sites are: " + known);
  }

  void load_wan(const Field& wan_field) {
    const YAML::Node& links = list(wan_field,
                                   "WAN links (maps with keys sites, latency, "
                                   "bandwidth, max_rate, loss, streams, tls, congestion)",
                                   false);
    for (const YAML::Node& link_node : links) {
      std::initializer_list<std::string_view> keys = {
          "sites", "latency", "bandwidth", "max_rate", "loss", "streams", "tls", "congestion"};
      const std::vector<Field> fs = fields(link_node, "a WAN link", keys);
      const Field& sites_field =
          require(fs, "sites", link_node, "a WAN link", "the two site names it connects");
      const YAML::Node& pair = sites_field.value;
      if (!pair.IsSequence() || pair.size() != 2 || !pair[0].IsScalar() || !pair[1].IsScalar()) {
        std::string got = describe(pair);
        if (pair.IsSequence()) {
          got = pair.size() == 2 ? "a list whose entries are not both names"
                                 : "a list of " + std::to_string(pair.size()) +
                                       (pair.size() == 1 ? " entry" : " entries");
        }
        fail(sites_field,
             "\"sites\" must be a list of exactly two site names such as [tokyo, osaka]; got " +
                 got);
      }
      WanLink link;
      link.site_a = site_index(pair[0]);
      link.site_b = site_index(pair[1]);
      link.where = loc(link_node);
      if (link.site_a == link.site_b) {
        fail(pair[1], "WAN link connects site " + quoted(pair[1].Scalar()) +
                          " to itself; name two different sites");
      }
      for (const WanLink& other : grid_.wan) {
        if ((other.site_a == link.site_a && other.site_b == link.site_b) ||
            (other.site_a == link.site_b && other.site_b == link.site_a)) {
          fail(sites_field, "duplicate WAN link between " + quoted(pair[0].Scalar()) + " and " +
                                quoted(pair[1].Scalar()) + " (first defined at " +
                                other.where.str() + ")");
        }
      }

      const WanDefaults given = wan_settings(fs);
      const auto missing = [&](std::string_view key, std::string_view example) {
        fail(link_node, "WAN link between " + quoted(pair[0].Scalar()) + " and " +
                            quoted(pair[1].Scalar()) + " has no " + quoted(key) +
                            " and defaults.wan gives none; add e.g. \"" + std::string(key) + ": " +
                            std::string(example) + "\"");
      };
      if (given.latency_s) {
        link.latency_s = *given.latency_s;
      } else if (wan_defaults_.latency_s) {
        link.latency_s = *wan_defaults_.latency_s;
      } else {
        missing("latency", "10 ms");
      }
      if (given.bandwidth_bps) {
        link.bandwidth_bps = *given.bandwidth_bps;
      } else if (wan_defaults_.bandwidth_bps) {
        link.bandwidth_bps = *wan_defaults_.bandwidth_bps;
      } else {
        missing("bandwidth", "1 Gbit");
      }
      link.max_rate_bps = given.max_rate_bps.value_or(wan_defaults_.max_rate_bps.value_or(0.0));
      link.loss = given.loss.value_or(wan_defaults_.loss.value_or(0.0));
      link.streams = given.streams.value_or(wan_defaults_.streams.value_or(1));
      link.tls = given.tls.value_or(wan_defaults_.tls.value_or(false));
      link.congestion = given.congestion.value_or(wan_defaults_.congestion.value_or(""));
      grid_.wan.push_back(link);
    }
  }

  // Every site must be reachable from the first: the broadcast chains sites
  // along WAN links, and an island would never receive anything.
  void check_connected() const {
    std::vector<bool> reached(grid_.sites.size(), false);
    reached[0] = true;
    std::deque<int> queue{0};
    while (!queue.empty()) {
      const int site = queue.front();
      queue.pop_front();
      for (const WanLink& link : grid_.wan) {
        int next = -1;
        if (link.site_a == site) next = link.site_b;
        if (link.site_b == site) next = link.site_a;
        if (next >= 0 && !reached[static_cast<size_t>(next)]) {
          reached[static_cast<size_t>(next)] = true;
          queue.push_back(next);
        }
      }
    }
    for (size_t i = 0; i < grid_.sites.size(); ++i) {
      if (!reached[i]) {
        fail(grid_.sites[i].where, "site " + quoted(grid_.sites[i].name) +
                                       " is not connected to site " + quoted(grid_.sites[0].name) +
                                       " (the first site) through WAN links; add a \"wan\" "
                                       "entry linking it to a connected site");
      }
    }
  }

  std::string source_;
  Grid grid_;
  std::vector<Location> site_name_locs_;
  std::optional<double> nic_bandwidth_;
  WanDefaults wan_defaults_;
};

}  // namespace

// The 1-based line of a second document's "---" marker, or 0. A text scan
// because yaml-cpp 0.7's LoadAll can loop forever on some malformed input after
// the first document (found by tests/fuzz; kept in its corpus).
static int second_document_line(const std::string& text) {
  bool content = false;
  int line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    ++line_no;
    const bool marker = line.substr(0, 3) == "---" &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    if (marker && content) return line_no;
    const auto first = line.find_first_not_of(" \t\r");
    if (!marker && first != std::string_view::npos && line[first] != '#' && line[0] != '%')
      content = true;
    pos = end + 1;
  }
  return 0;
}

Grid load_grid_string(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node document;
  try {
    document = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const Location where = e.mark.is_null()
                               ? Location{source_name, 0, 0}
                               : Location{source_name, e.mark.line + 1, e.mark.column + 1};
    throw ConfigError(where, "invalid YAML: " + e.msg);
  }
  if (const int line = second_document_line(yaml_text); line > 0) {
    throw ConfigError(Location{source_name, line, 1},
                      "a site-config holds one YAML document, this file has more");
  }
  if (!document.IsDefined() || document.IsNull()) {
    throw ConfigError(Location{source_name, 0, 0},
                      "the site-config is empty; expected a map with at least a \"sites\" list");
  }
  return Loader(source_name).load(document);
}

Grid load_grid_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    throw ConfigError(Location{path, 0, 0},
                      "cannot open site-config: " + std::string(std::strerror(error)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(Location{path, 0, 0}, "cannot read site-config");
  }
  return load_grid_string(text.str(), path);
}

Grid default_grid() {
  return load_grid_string(default_topology_yaml(), "<embedded default>");
}

}  // namespace gridbcast::topology
