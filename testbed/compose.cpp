#include "testbed/compose.hpp"

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "testbed/layout.hpp"
#include "topology/units.hpp"

namespace gridbcast::testbed {
namespace {

// Names and paths come from the topology and the command line: yaml-cpp's
// emitter quotes whatever needs it. Strings that would read as numbers or
// booleans ("1", rank "0") are double-quoted so compose sees strings.
void key(YAML::Emitter& y, const std::string& k) {
  y << YAML::Key << k << YAML::Value;
}

void string_value(YAML::Emitter& y, const std::string& k, const std::string& v) {
  key(y, k);
  y << YAML::DoubleQuoted << v;
}

void flow_list(YAML::Emitter& y, const std::string& k, const std::vector<std::string>& items) {
  key(y, k);
  y << YAML::Flow << YAML::BeginSeq;
  for (const auto& i : items) y << YAML::DoubleQuoted << i;
  y << YAML::EndSeq;
}

// networks: {NAME: {ipv4_address: A}} entries (inside an open map).
void address_on(YAML::Emitter& y, const std::string& network, const std::string& address) {
  key(y, network);
  y << YAML::BeginMap;
  key(y, "ipv4_address");
  y << address << YAML::EndMap;
}

// The parts every router and node service share.
void service_head(YAML::Emitter& y, const std::string& name, const std::string& image) {
  key(y, name);
  y << YAML::BeginMap;
  string_value(y, "image", image);
  key(y, "init");
  y << true;
}

void sysctls(YAML::Emitter& y, bool forward) {
  key(y, "cap_add");
  y << YAML::Flow << YAML::BeginSeq << "NET_ADMIN" << YAML::EndSeq;
  key(y, "sysctls");
  y << YAML::BeginMap;
  if (forward) string_value(y, "net.ipv4.ip_forward", "1");
  string_value(y, "net.ipv4.conf.all.rp_filter", "0");
  string_value(y, "net.ipv4.conf.default.rp_filter", "0");
  y << YAML::EndMap;
}

std::string bits(double bps) {
  return std::to_string(std::llround(bps)) + "bit";
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g%%", fraction * 100);
  return buf;
}

// Finds the container interface that holds an address: docker names them in
// an order of its own, so the scripts look them up.
constexpr const char* kDevFunction = "dev() { ip -o -4 addr show to \"$$1/32\" | cut -d' ' -f2; }";

void script(YAML::Emitter& y, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  key(y, "command");
  y << YAML::BeginSeq << "sh"
    << "-c" << YAML::Literal << text << YAML::EndSeq;
}

struct WanNet {
  int link = 0;
  std::string name;
  Ipv4Net subnet;
  Ipv4 a, b, gateway;  // site_a's router, site_b's router, docker's gateway
};

}  // namespace

std::string compose_name(const std::string& name) {
  std::string s = sanitize_name(name);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s.front()))) s = "x" + s;
  return s;
}

std::string compose_file(const topology::Grid& grid, const ComposeOptions& o) {
  const auto lanes = lane_subnets(grid);
  const auto control = *Ipv4Net::parse(kComposeControlSubnet);
  const auto transit = *Ipv4Net::parse(kComposeTransitRange);
  std::vector<Ipv4> used;
  for (const auto& l : lanes) used.insert(used.end(), l.addresses.begin(), l.addresses.end());
  for (const auto& l : lanes)
    if (l.subnet.overlaps(control) || l.subnet.overlaps(transit))
      throw TestbedError("lane subnet " + l.subnet.str() +
                         " overlaps the compose control network " + control.str() +
                         " or WAN transit range " + transit.str());

  auto lane_net = [&](const LaneSubnet& l) {
    return compose_name(grid.sites[static_cast<size_t>(l.site)].name) + "-lane" +
           std::to_string(l.nic);
  };
  std::vector<WanNet> wans;
  for (size_t i = 0; i < grid.wan.size(); ++i) {
    WanNet w;
    w.link = static_cast<int>(i);
    w.name = "wan" + std::to_string(i) + "-" +
             compose_name(grid.sites[static_cast<size_t>(grid.wan[i].site_a)].name) + "-" +
             compose_name(grid.sites[static_cast<size_t>(grid.wan[i].site_b)].name);
    w.subnet = {Ipv4{transit.base.value + static_cast<std::uint32_t>(i) * 8}, 29};
    w.a = Ipv4{w.subnet.base.value + 1};
    w.b = Ipv4{w.subnet.base.value + 2};
    w.gateway = Ipv4{w.subnet.base.value + 6};
    wans.push_back(w);
  }
  const std::string launcher = std::string(kComposeLauncherAddress) + ":" + std::to_string(o.port);

  // The header is comments, not data: names lose line breaks there.
  auto one_line = [](std::string t) {
    std::replace(t.begin(), t.end(), '\n', ' ');
    std::replace(t.begin(), t.end(), '\r', ' ');
    return t;
  };
  std::ostringstream header;
  header << "# docker compose file for topology \"" << one_line(grid.name)
         << "\": " << grid.sites.size() << " sites, " << grid.nodes.size() << " nodes, "
         << grid.wan.size() << (grid.wan.size() == 1 ? " WAN link.\n" : " WAN links.\n")
         << "# Generated by `" << one_line(o.generated_by) << "`; see docker/README.md.\n"
         << "# Needs the image " << one_line(o.image) << " (docker build -t " << one_line(o.image)
         << " -f docker/Dockerfile .) and the env file " << one_line(o.env_file) << "\n"
         << "# next to this file with GRIDBCAST_SECRET and GRIDBCAST_JOB_ID (never inline).\n"
         << "# Routers delay and shape their WAN egress with tc netem; nodes shape their NIC\n"
         << "# egress with tbf and route other sites' subnets through their site router.\n";

  YAML::Emitter y;
  y << YAML::BeginMap;
  string_value(y, "name", "gridbcast-" + compose_name(grid.name));
  key(y, "services");
  y << YAML::BeginMap;

  // The launcher: the job's root process, waiting for every rank.
  std::vector<std::string> cmd = {"gridbcast",
                                  "launch",
                                  kComposeTopologyPath,
                                  "--backend",
                                  "external",
                                  "--listen",
                                  kComposeLauncherAddress,
                                  "--port",
                                  std::to_string(o.port)};
  cmd.insert(cmd.end(), o.launch_args.begin(), o.launch_args.end());
  key(y, "launcher");
  y << YAML::BeginMap;
  string_value(y, "image", o.image);
  key(y, "init");
  y << true;
  flow_list(y, "command", cmd);
  flow_list(y, "env_file", {o.env_file});
  flow_list(y, "volumes", {o.topology_mount + ":" + kComposeTopologyPath + ":ro"});
  key(y, "networks");
  y << YAML::BeginMap;
  address_on(y, "control", kComposeLauncherAddress);
  y << YAML::EndMap << YAML::EndMap;

  // One router per site.
  for (size_t s = 0; s < grid.sites.size(); ++s) {
    service_head(y, "router-" + compose_name(grid.sites[s].name), o.image);
    sysctls(y, /*forward=*/true);
    key(y, "networks");
    y << YAML::BeginMap;
    for (const auto& l : lanes)
      if (l.site == static_cast<int>(s)) address_on(y, lane_net(l), l.gateway.str());
    for (const auto& w : wans) {
      const auto& link = grid.wan[static_cast<size_t>(w.link)];
      if (link.site_a == static_cast<int>(s) || link.site_b == static_cast<int>(s))
        address_on(y, w.name, (link.site_a == static_cast<int>(s) ? w.a : w.b).str());
    }
    y << YAML::EndMap;
    key(y, "healthcheck");
    y << YAML::BeginMap;
    flow_list(y, "test", {"CMD", "test", "-f", kComposeReadyFile});
    key(y, "interval");
    y << "1s";
    key(y, "retries");
    y << 60 << YAML::EndMap;
    std::vector<std::string> lines = {"set -e", kDevFunction};
    for (const auto& w : wans) {
      const auto& link = grid.wan[static_cast<size_t>(w.link)];
      const bool is_a = link.site_a == static_cast<int>(s);
      if (!is_a && link.site_b != static_cast<int>(s)) continue;
      const int peer = is_a ? link.site_b : link.site_a;
      const double packets =
          std::max(1000.0, link.bandwidth_bps / 8 * (link.latency_s + 0.05) / 1500 * 1.5);
      lines.push_back("# WAN link " + std::to_string(w.link) + " to " +
                      grid.sites[static_cast<size_t>(peer)].name + ": " +
                      topology::format_duration(link.latency_s) + " one-way, " +
                      topology::format_bandwidth(link.bandwidth_bps) + ", loss " +
                      percent(link.loss));
      std::string tc = "tc qdisc replace dev \"$$(dev " + (is_a ? w.a : w.b).str() +
                       ")\" root netem delay " +
                       std::to_string(std::llround(link.latency_s * 1e6)) + "us rate " +
                       bits(link.bandwidth_bps);
      if (link.loss > 0) tc += " loss " + percent(link.loss);
      tc += " limit " + std::to_string(std::llround(packets));
      lines.push_back(tc);
    }
    // Other sites' subnets through the first hop of the WAN path.
    for (size_t t = 0; t < grid.sites.size(); ++t) {
      if (t == s) continue;
      const auto path = grid.wan_path(static_cast<int>(s), static_cast<int>(t));
      if (path.empty()) continue;
      const auto& w = wans[static_cast<size_t>(path.front() - grid.wan.data())];
      const Ipv4 via = path.front()->site_a == static_cast<int>(s) ? w.b : w.a;
      for (const auto& l : lanes)
        if (l.site == static_cast<int>(t))
          lines.push_back("ip route replace " + l.subnet.str() + " via " + via.str());
    }
    lines.push_back(std::string("touch ") + kComposeReadyFile);
    lines.push_back("exec sleep infinity");
    script(y, lines);
    y << YAML::EndMap;
  }

  // One service per node.
  for (size_t r = 0; r < grid.nodes.size(); ++r) {
    const auto& node = grid.nodes[r];
    const std::string site = grid.sites[static_cast<size_t>(node.site)].name;
    service_head(y, "node-" + compose_name(node.name), o.image);
    string_value(y, "hostname", node.name);
    sysctls(y, /*forward=*/false);
    key(y, "depends_on");
    y << YAML::BeginMap;
    key(y, "router-" + compose_name(site));
    y << YAML::BeginMap;
    key(y, "condition");
    y << "service_healthy" << YAML::EndMap;
    key(y, "launcher");
    y << YAML::BeginMap;
    key(y, "condition");
    y << "service_started" << YAML::EndMap << YAML::EndMap;
    flow_list(y, "env_file", {o.env_file});
    key(y, "environment");
    y << YAML::BeginMap;
    string_value(y, "GRIDBCAST_RANK", std::to_string(r));
    string_value(y, "GRIDBCAST_LAUNCHER", launcher);
    y << YAML::EndMap;
    key(y, "networks");
    y << YAML::BeginMap;
    key(y, "control");
    y << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    std::vector<const LaneSubnet*> own;
    for (size_t k = 0; k < node.nics.size(); ++k)
      for (const auto& l : lanes)
        if (l.site == node.site && l.nic == static_cast<int>(k)) {
          own.push_back(&l);
          address_on(y, lane_net(l), node.nics[k].address);
        }
    y << YAML::EndMap;
    std::vector<std::string> lines = {"set -e", kDevFunction};
    for (size_t k = 0; k < node.nics.size(); ++k) {
      const auto& nic = node.nics[k];
      const double bytes_per_s = nic.bandwidth_bps / 8;
      const std::string table = std::to_string(kLaneTableBase + static_cast<int>(k));
      const std::string dev = "\"$$(dev " + nic.address + ")\"";
      lines.push_back("# NIC " + std::to_string(k) +
                      (nic.device.empty() ? "" : " (" + nic.device + ")") + ": " +
                      topology::format_bandwidth(nic.bandwidth_bps) +
                      " egress; its lane's traffic leaves through it");
      lines.push_back(
          "tc qdisc replace dev " + dev + " root tbf rate " + bits(nic.bandwidth_bps) + " burst " +
          std::to_string(std::llround(std::max(bytes_per_s / 1000, 70000.0))) + " latency 20ms");
      lines.push_back("ip rule add from " + nic.address + " lookup " + table + " pref " + table);
      lines.push_back("ip route replace " + own[k]->subnet.str() + " dev " + dev + " src " +
                      nic.address + " table " + table);
      lines.push_back("ip route replace default via " + own[k]->gateway.str() + " dev " + dev +
                      " src " + nic.address + " table " + table);
    }
    for (const auto& l : lanes) {
      if (std::find(own.begin(), own.end(), &l) != own.end()) continue;
      const size_t k = static_cast<size_t>(l.nic) < own.size() ? static_cast<size_t>(l.nic) : 0;
      lines.push_back("ip route replace " + l.subnet.str() + " via " + own[k]->gateway.str());
    }
    lines.push_back("exec gridbcast rank");
    script(y, lines);
    y << YAML::EndMap;
  }
  y << YAML::EndMap;  // services

  // networks: NAME: {ipam: {config: [{subnet, gateway}]}}
  auto network = [&](const std::string& name, const std::string& subnet,
                     const std::string& gateway) {
    key(y, name);
    y << YAML::BeginMap;
    key(y, "ipam");
    y << YAML::BeginMap;
    key(y, "config");
    y << YAML::BeginSeq << YAML::BeginMap;
    key(y, "subnet");
    y << subnet;
    if (!gateway.empty()) {
      key(y, "gateway");
      y << gateway;
    }
    y << YAML::EndMap << YAML::EndSeq << YAML::EndMap << YAML::EndMap;
  };
  key(y, "networks");
  y << YAML::BeginMap;
  network("control", control.str(), "");
  for (const auto& l : lanes) {
    const auto gw = free_address_below(l.subnet, l.gateway, used);
    if (!gw) throw TestbedError("no free address for docker's gateway in " + l.subnet.str());
    network(lane_net(l), l.subnet.str(), gw->str());
  }
  for (const auto& w : wans) network(w.name, w.subnet.str(), w.gateway.str());
  y << YAML::EndMap << YAML::EndMap;
  if (!y.good()) throw TestbedError("compose file: " + y.GetLastError());
  return header.str() + y.c_str() + "\n";
}

}  // namespace gridbcast::testbed
