#include "topology/hosts.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "topology/hostlist.hpp"
#include "topology/units.hpp"

namespace gridbcast::topology {
namespace {

constexpr int kMaxNics = 8;
const char* const kDefaultSite = "main";

// Splits at commas outside [..]; each piece with its 0-based offset.
std::vector<std::pair<std::string, size_t>> split_items(std::string_view text) {
  std::vector<std::pair<std::string, size_t>> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth <= 0) {
      out.emplace_back(std::string(text.substr(start, i - start)), start);
      start = i + 1;
    }
  }
  return out;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// A site name as the loader takes it, checked here to point at the item.
void check_site(const std::string& site, const Location& where) {
  bool ok = !site.empty();
  for (char c : site)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  if (!ok)
    throw ConfigError(
        where, "site name \"" + site + "\" must be letters, digits, '-', '_' or '.', not empty");
}

std::vector<std::string> expand(const std::string& list, const Location& where) {
  try {
    return expand_hostlist(list);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(where, e.what());
  }
}

}  // namespace

std::vector<HostEntry> parse_hosts(std::string_view text) {
  std::vector<HostEntry> out;
  std::string site;
  for (const auto& [raw, offset] : split_items(text)) {
    const Location where{"--hosts", 1, static_cast<int>(offset) + 1};
    std::string item = trim(raw);
    if (item.empty()) throw ConfigError(where, "an empty host name");
    const auto colon = item.find(':');
    // "SITE:hosts"; an IPv6 literal is not a host name here (use a host file
    // with address=).
    if (colon != std::string::npos && item.find('[') > colon) {
      site = item.substr(0, colon);
      check_site(site, where);
      item = item.substr(colon + 1);
      if (item.empty()) throw ConfigError(where, "no hosts after \"" + site + ":\"");
    }
    for (auto& name : expand(item, where)) {
      HostEntry h;
      h.name = std::move(name);
      h.site = site;
      h.where = where;
      out.push_back(std::move(h));
    }
  }
  if (out.empty()) throw ConfigError({"--hosts", 1, 1}, "no hosts");
  return out;
}

std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& file) {
  std::vector<HostEntry> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::pair<std::string, int>> words;  // with 1-based columns
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
        ++i;
        continue;
      }
      const size_t end = line.find_first_of(" \t\r", i);
      words.emplace_back(line.substr(i, end == std::string::npos ? std::string::npos : end - i),
                         static_cast<int>(i) + 1);
      i = end == std::string::npos ? line.size() : end;
    }
    if (words.empty()) continue;
    HostEntry proto;
    proto.where = {file, number, words[0].second};
    std::vector<std::vector<std::string>> addresses;  // per NIC: one per host of the line
    Location addresses_at;
    for (size_t w = 1; w < words.size(); ++w) {
      const auto& [word, col] = words[w];
      const Location at{file, number, col};
      const auto eq = word.find('=');
      if (eq == std::string::npos || eq == 0)
        throw ConfigError(
            at, "expected KEY=VALUE (site, nics, bandwidth, address, slots), got \"" + word + "\"");
      const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
      try {
        if (key == "site") {
          check_site(value, at);
          proto.site = value;
        } else if (key == "nics") {
          size_t used = 0;
          const int n = std::stoi(value, &used);
          if (used != value.size() || n < 1 || n > kMaxNics)
            throw std::invalid_argument("nics must be 1.." + std::to_string(kMaxNics));
          proto.nics = n;
        } else if (key == "bandwidth") {
          proto.bandwidth_bps = parse_bandwidth(value);
          if (!(proto.bandwidth_bps > 0)) throw std::invalid_argument("bandwidth must be above 0");
        } else if (key == "address") {
          addresses_at = at;
          addresses.clear();
          for (const auto& [a, off] : split_items(value)) addresses.push_back(expand(trim(a), at));
        } else if (key == "slots") {
          if (value != "1")
            throw std::invalid_argument("gridbcast runs one rank per node; slots must be 1, not " +
                                        value);
        } else {
          throw ConfigError(at,
                            "unknown key \"" + key + "\" (site, nics, bandwidth, address, slots)");
        }
      } catch (const ConfigError&) {
        throw;
      } catch (const std::exception& e) {
        throw ConfigError(at, key + ": " + e.what());
      }
    }
    const auto names = expand(words[0].first, proto.where);
    // address= has one item per NIC, as a NIC's address in YAML: a hostlist
    // with one address per host of the line, in order.
    const size_t nics = static_cast<size_t>(proto.nics > 0 ? proto.nics : 0);
    if (addresses.empty() && nics > 1)
      throw ConfigError(proto.where, "nics=" + std::to_string(nics) +
                                         " needs address= with one address per NIC (a host "
                                         "name gives one)");
    if (!addresses.empty()) {
      if (nics != 0 && addresses.size() != nics)
        throw ConfigError(addresses_at, std::to_string(addresses.size()) +
                                            " addresses (NICs) for nics=" + std::to_string(nics));
      if (addresses.size() > static_cast<size_t>(kMaxNics))
        throw ConfigError(addresses_at, "more than " + std::to_string(kMaxNics) + " NICs per host");
      for (const auto& nic : addresses)
        if (nic.size() != names.size())
          throw ConfigError(addresses_at,
                            "a NIC's addresses expand to " + std::to_string(nic.size()) + " for " +
                                std::to_string(names.size()) + " host(s): give one per host");
    }
    for (size_t i = 0; i < names.size(); ++i) {
      HostEntry h = proto;
      h.name = names[i];
      for (const auto& nic : addresses) h.addresses.push_back(nic[i]);
      if (!addresses.empty()) h.nics = static_cast<int>(addresses.size());
      out.push_back(std::move(h));
    }
  }
  if (out.empty()) throw ConfigError({file, 0, 0}, "no hosts in the file");
  return out;
}

std::string hosts_to_yaml(const std::vector<HostEntry>& hosts, const HostDefaults& d) {
  std::vector<std::string> site_order;
  std::map<std::string, std::vector<const HostEntry*>> by_site;
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h.name).second)
      throw ConfigError(h.where, "host \"" + h.name + "\" is named twice (one rank per node)");
    const std::string site = h.site.empty() ? kDefaultSite : h.site;
    if (!by_site.count(site)) site_order.push_back(site);
    by_site[site].push_back(&h);
  }
  const auto bits = [](double bps) { return std::to_string(std::llround(bps)) + " bit"; };
  YAML::Emitter y;
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << d.name;
  y << YAML::Key << "defaults" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "nic_bandwidth" << YAML::Value << bits(d.nic_bandwidth_bps);
  if (!d.congestion.empty()) y << YAML::Key << "congestion" << YAML::Value << d.congestion;
  y << YAML::Key << "wan" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "latency" << YAML::Value
    << std::to_string(std::llround(d.wan_latency_s * 1e9)) + " ns";
  y << YAML::Key << "bandwidth" << YAML::Value << bits(d.wan_bandwidth_bps);
  y << YAML::Key << "streams" << YAML::Value << d.streams;
  y << YAML::EndMap << YAML::EndMap;
  y << YAML::Key << "sites" << YAML::Value << YAML::BeginSeq;
  for (const auto& site : site_order) {
    y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << site;
    y << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
    for (const HostEntry* h : by_site[site]) {
      // A node name is a hostlist to the loader: a plain name has no brackets
      // (expand_hostlist made it), so it stands for itself.
      y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << h->name;
      y << YAML::Key << "nics" << YAML::Value << YAML::BeginSeq;
      const int nics = h->addresses.empty() ? 1 : static_cast<int>(h->addresses.size());
      std::string resolved;
      if (h->addresses.empty()) {
        try {
          if (!d.resolve) throw std::runtime_error("no resolver");
          resolved = d.resolve(h->name);
        } catch (const std::exception& e) {
          throw ConfigError(h->where, "host \"" + h->name + "\" has no address: " + e.what() +
                                          " (give address= in a host file)");
        }
      }
      for (int n = 0; n < nics; ++n) {
        y << YAML::BeginMap << YAML::Key << "address" << YAML::Value
          << (h->addresses.empty() ? resolved : h->addresses[static_cast<size_t>(n)]);
        if (h->bandwidth_bps > 0)
          y << YAML::Key << "bandwidth" << YAML::Value << bits(h->bandwidth_bps);
        y << YAML::EndMap;
      }
      y << YAML::EndSeq << YAML::EndMap;
    }
    y << YAML::EndSeq << YAML::EndMap;
  }
  y << YAML::EndSeq;
  if (site_order.size() > 1) {
    y << YAML::Key << "wan" << YAML::Value << YAML::BeginSeq;
    for (size_t i = 0; i + 1 < site_order.size(); ++i)
      y << YAML::BeginMap << YAML::Key << "sites" << YAML::Value << YAML::Flow << YAML::BeginSeq
        << site_order[i] << site_order[i + 1] << YAML::EndSeq << YAML::EndMap;
    y << YAML::EndSeq;
  }
  y << YAML::EndMap;
  if (!y.good())
    throw std::runtime_error(std::string("cannot write the topology: ") + y.GetLastError());
  return std::string(y.c_str()) + "\n";
}

std::string apply_overrides(const std::string& yaml, const Overrides& o) {
  YAML::Node root = YAML::Load(yaml);
  const auto bits = [](double bps) { return std::to_string(std::llround(bps)) + " bit"; };
  const auto ns = [](double s) { return std::to_string(std::llround(s * 1e9)) + " ns"; };
  YAML::Node defaults = root["defaults"];
  if (!defaults.IsMap()) defaults = YAML::Node(YAML::NodeType::Map);
  YAML::Node wan_defaults = defaults["wan"];
  if (!wan_defaults.IsMap()) wan_defaults = YAML::Node(YAML::NodeType::Map);
  if (o.nic_bandwidth_bps) {
    defaults["nic_bandwidth"] = bits(*o.nic_bandwidth_bps);
    for (auto site : root["sites"])
      for (auto node : site["nodes"])
        for (auto nic : node["nics"]) nic["bandwidth"] = bits(*o.nic_bandwidth_bps);
  }
  if (o.congestion) defaults["congestion"] = *o.congestion;
  if (o.lanes) defaults["lanes"] = std::to_string(*o.lanes);
  if (o.pace_lanes) defaults["pace_lanes"] = *o.pace_lanes ? "true" : "false";
  if (o.max_rate_bps) defaults["max_rate"] = bits(*o.max_rate_bps);
  auto each_link = [&](const char* key, const std::string& value) {
    wan_defaults[key] = value;
    if (root["wan"].IsSequence())
      for (auto link : root["wan"]) link[key] = value;
  };
  if (o.wan_latency_s) each_link("latency", ns(*o.wan_latency_s));
  if (o.wan_bandwidth_bps) each_link("bandwidth", bits(*o.wan_bandwidth_bps));
  if (o.streams) each_link("streams", std::to_string(*o.streams));
  if (o.congestion) each_link("congestion", *o.congestion);
  if (wan_defaults.size() > 0) defaults["wan"] = wan_defaults;
  if (defaults.size() > 0) root["defaults"] = defaults;
  YAML::Emitter y;
  y << root;
  return std::string(y.c_str()) + "\n";
}

int max_tasks_per_node(std::string_view text) {
  int best = 0;
  size_t i = 0;
  auto number = [&](size_t& at) {
    const size_t start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == start || at - start > 6)
      throw std::invalid_argument("SLURM_TASKS_PER_NODE \"" + std::string(text) +
                                  "\" is not like 2(x3),1");
    return std::stoi(std::string(text.substr(start, at - start)));
  };
  for (;;) {
    best = std::max(best, number(i));
    if (i < text.size() && text.substr(i, 2) == "(x") {
      i += 2;
      (void)number(i);
      if (i >= text.size() || text[i] != ')')
        throw std::invalid_argument("SLURM_TASKS_PER_NODE \"" + std::string(text) +
                                    "\" is not like 2(x3),1");
      ++i;
    }
    if (i == text.size()) return best;
    if (text[i] != ',')
      throw std::invalid_argument("SLURM_TASKS_PER_NODE \"" + std::string(text) +
                                  "\" is not like 2(x3),1");
    ++i;
  }
}

std::optional<SlurmAllocation> slurm_allocation(
    const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) {
    const char* v = getenv(name);
    return std::string(v ? v : "");
  };
  SlurmAllocation a;
  a.job_id = get("SLURM_JOB_ID");
  const std::string nodes = get("SLURM_JOB_NODELIST");
  if (a.job_id.empty() || nodes.empty()) return std::nullopt;
  // Slurm node names have no ':', so no item is read as SITE:hosts.
  if (nodes.find(':') != std::string::npos)
    throw std::runtime_error("SLURM_JOB_NODELIST \"" + nodes + "\" is not a Slurm hostlist");
  try {
    a.hosts = parse_hosts(nodes);
  } catch (const ConfigError& e) {
    throw std::runtime_error("SLURM_JOB_NODELIST \"" + nodes + "\": " + e.message());
  }
  if (const std::string t = get("SLURM_TASKS_PER_NODE"); !t.empty()) {
    try {
      a.tasks_per_node = max_tasks_per_node(t);
    } catch (const std::invalid_argument&) {
      a.tasks_per_node = 1;  // only ever a note; the node list is what counts
    }
  }
  return a;
}

}  // namespace gridbcast::topology
