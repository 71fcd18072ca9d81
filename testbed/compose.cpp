#include "testbed/compose.hpp"

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "testbed/delay_line.hpp"
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

// Fixed limits, no higher than the host's hard limits: engines otherwise give
// containers their own defaults (podman: nofile 1048576), which runc cannot
// set where the host's hard limit is lower.
void ulimits(YAML::Emitter& y, const ComposeOptions& o) {
  key(y, "ulimits");
  y << YAML::BeginMap;
  for (const auto& [name, value] : {std::pair{"nofile", o.nofile}, std::pair{"nproc", o.nproc}}) {
    key(y, name);
    y << YAML::Flow << YAML::BeginMap;
    key(y, "soft");
    y << value;
    key(y, "hard");
    y << value << YAML::EndMap;
  }
  y << YAML::EndMap;
}

// The parts every service shares.
void service_head(YAML::Emitter& y, const std::string& name, const ComposeOptions& o) {
  key(y, name);
  y << YAML::BeginMap;
  string_value(y, "image", o.image);
  key(y, "init");
  y << true;
  ulimits(y, o);
}

void sysctls(YAML::Emitter& y, bool forward) {
  key(y, "cap_add");
  y << YAML::Flow << YAML::BeginSeq << "NET_ADMIN"
    << "NET_RAW" << YAML::EndSeq;  // tc, ip; ping
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

// A name from the topology, for the file's comments and the scripts' log
// lines only: printable ASCII, everything else '?'. Line breaks are more
// than \n and \r to the YAML parsers compose uses (PyYAML and go-yaml also
// break lines at NEL, U+2028 and U+2029, which yaml-cpp reads as text), so
// no byte outside printable ASCII reaches the file from a name.
std::string printable(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return out;
}

// A topology's names in the services' sh scripts, which compose reads first
// ("$$" is its escape for "$"): as one single-quoted sh word, so that quotes,
// "$(...)" and backquotes stay data ...
std::string sh_word(const std::string& text) {
  std::string out = "'";
  for (const char c : printable(text)) {
    if (c == '\'')
      out += "'\\''";
    else if (c == '$')
      out += "$$";
    else
      out += c;
  }
  return out + "'";
}

// ... or inside a comment.
std::string comment_text(const std::string& text) {
  std::string out;
  for (const char c : printable(text)) {
    if (c == '$')
      out += "$$";
    else
      out += c;
  }
  return out;
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
  auto one_line = [](const std::string& t) { return printable(t); };
  std::ostringstream header;
  header << "# docker compose file for topology \"" << one_line(grid.name)
         << "\": " << grid.sites.size() << " sites, " << grid.nodes.size() << " nodes, "
         << grid.wan.size() << (grid.wan.size() == 1 ? " WAN link.\n" : " WAN links.\n")
         << "# Generated by `" << one_line(o.generated_by) << "`; see docker/README.md.\n"
         << "# Needs the image " << one_line(o.image) << " (docker build -t " << one_line(o.image)
         << " -f docker/Dockerfile .) and the env file " << one_line(o.env_file) << "\n"
         << "# next to this file with GRIDBCAST_SECRET and GRIDBCAST_JOB_ID (never inline).\n"
         << "# Routers delay and shape their WAN egress with tc netem, or where the kernel\n"
         << "# has no netem with tbf and gridbcast's userspace delay line; nodes shape their\n"
         << "# NIC egress with tbf, route other sites' subnets through their site router and\n"
         << "# wait until every other site's router answers.\n"
         << (o.engine == ComposeEngine::kPodman
                 ? "# For podman (--engine podman): docker-compose 1.29 with `podman system "
                   "service`;\n# every network is internal, so podman masquerades nothing.\n"
                 : "# For docker compose (--engine docker); `--engine podman` writes the file "
                   "for podman.\n");

  YAML::Emitter y;
  y.SetOutputCharset(YAML::EscapeNonAscii);  // the whole file is ASCII (see printable)
  y << YAML::BeginMap;
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
  service_head(y, "launcher", o);
  flow_list(y, "command", cmd);
  flow_list(y, "env_file", {o.env_file});
  flow_list(y, "volumes", {o.topology_mount + ":" + kComposeTopologyPath + ":ro"});
  key(y, "networks");
  y << YAML::BeginMap;
  address_on(y, "control", kComposeLauncherAddress);
  y << YAML::EndMap << YAML::EndMap;

  // One router per site.
  for (size_t s = 0; s < grid.sites.size(); ++s) {
    service_head(y, "router-" + compose_name(grid.sites[s].name), o);
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
    flow_list(y, "devices", {"/dev/net/tun:/dev/net/tun"});  // for the delay line
    const std::string router = "router-" + compose_name(grid.sites[s].name);
    // WAN ends of this router, its routes, and the netem / delay-line forms of each.
    struct End {
      const WanNet* net;
      const topology::WanLink* link;
      Ipv4 own;
      std::string tun;
    };
    std::vector<End> ends;
    for (const auto& w : wans) {
      const auto& link = grid.wan[static_cast<size_t>(w.link)];
      const bool is_a = link.site_a == static_cast<int>(s);
      if (!is_a && link.site_b != static_cast<int>(s)) continue;
      ends.push_back({&w, &link, is_a ? w.a : w.b, "dly" + std::to_string(ends.size())});
    }
    double ingress_bps = 0;  // what can come into this router: its site's NICs and its WAN links
    for (const auto& n : grid.nodes)
      if (n.site == static_cast<int>(s))
        for (const auto& nic : n.nics) ingress_bps += nic.bandwidth_bps;
    for (const auto& e : ends) ingress_bps += e.link->bandwidth_bps;
    // Other sites' subnets through the first hop of the WAN path: {subnet, end}.
    std::vector<std::pair<Ipv4Net, size_t>> routes;
    for (size_t t = 0; t < grid.sites.size(); ++t) {
      if (t == s) continue;
      const auto path = grid.wan_path(static_cast<int>(s), static_cast<int>(t));
      if (path.empty()) continue;
      const auto first = std::find_if(ends.begin(), ends.end(),
                                      [&](const End& e) { return e.link == path.front(); });
      for (const auto& l : lanes)
        if (l.site == static_cast<int>(t))
          routes.emplace_back(l.subnet, static_cast<size_t>(first - ends.begin()));
    }
    auto dev = [](Ipv4 a) { return "\"$$(dev " + a.str() + ")\""; };
    auto peer = [](const End& e) { return e.own == e.net->a ? e.net->b : e.net->a; };

    std::vector<std::string> lines = {"set -e", kDevFunction};
    auto main_routes = [&](const std::string& indent) {
      for (const auto& [subnet, e] : routes)
        lines.push_back(indent + "ip route replace " + subnet.str() + " via " +
                        peer(ends[e]).str());
    };
    if (ends.empty()) {
      lines.push_back("# no WAN links");
      main_routes("");
      lines.push_back("exec sleep infinity");
    } else {
      // netem where the kernel has it: delay, rate and loss in one qdisc.
      for (size_t i = 0; i < ends.size(); ++i) {
        const auto& e = ends[i];
        const auto& link = *e.link;
        const double packets =
            std::max(1000.0, link.bandwidth_bps / 8 * (link.latency_s + 0.05) / 1500 * 1.5);
        lines.push_back(
            "# WAN link " + std::to_string(e.net->link) + " to " +
            comment_text(
                grid.sites[static_cast<size_t>(e.own == e.net->a ? link.site_b : link.site_a)]
                    .name) +
            ": " + topology::format_duration(link.latency_s) + " one-way, " +
            topology::format_bandwidth(link.bandwidth_bps) + ", loss " + percent(link.loss));
        std::string tc = "tc qdisc replace dev " + dev(e.own) + " root netem delay " +
                         std::to_string(std::llround(link.latency_s * 1e6)) + "us rate " +
                         bits(link.bandwidth_bps);
        if (link.loss > 0) tc += " loss " + percent(link.loss);
        tc += " limit " + std::to_string(std::llround(packets));
        if (i == 0)
          lines.push_back("if " + tc + " 2>/run/gridbcast-netem.err; then");
        else
          lines.push_back("  " + tc);
      }
      lines.push_back("  echo \"" + router + ": WAN delay, rate and loss by tc netem\"");
      main_routes("  ");
      lines.push_back("  exec sleep infinity");
      lines.push_back("fi");
      // Without netem (kernels built without sch_netem): tbf for the rate, and
      // gridbcast's userspace delay line for delay and loss (docs/TESTBED.md):
      // what comes in from a lane or another WAN link and leaves over WAN link
      // I goes through TUN dlyI first; what comes out of a TUN uses the main
      // table, so it never loops.
      lines.push_back("echo \"" + router +
                      ": tc netem does not work here ($$(cat /run/gridbcast-netem.err)); WAN "
                      "delay and loss by gridbcast's userspace delay line, rate by tbf\" >&2");
      std::string delayline = "gridbcast testbed delayline";
      const std::string table = std::to_string(kDelayTable);
      for (const auto& e : ends) {
        const auto& link = *e.link;
        const double bytes_per_s = link.bandwidth_bps / 8;
        lines.push_back("tc qdisc replace dev " + dev(e.own) + " root tbf rate " +
                        bits(link.bandwidth_bps) + " burst " +
                        std::to_string(std::llround(std::max(bytes_per_s / 1000, 70000.0))) +
                        " limit " +
                        std::to_string(std::llround(
                            std::max(bytes_per_s * std::max(2 * link.latency_s, 0.01), 131072.0))));
        lines.push_back("ip tuntap add dev " + e.tun + " mode tun");
        lines.push_back("ip link set dev " + e.tun + " txqueuelen 10000 up");
        DelayLinkConfig c;
        c.tun = e.tun;
        c.delay_s = link.latency_s;
        c.loss = link.loss;
        c.offload = link.loss == 0;  // loss must hit single segments, not 64 KiB bursts
        c.buffer_bytes = delay_buffer_bytes(ingress_bps, link.latency_s);
        delayline += " --link " + format_delay_link(c);
      }
      main_routes("");
      for (const auto& [subnet, e] : routes)
        lines.push_back("ip route replace " + subnet.str() + " dev " + ends[e].tun + " table " +
                        table);
      int pref = kLaneRulePref;
      for (const auto& l : lanes)
        if (l.site == static_cast<int>(s))
          lines.push_back("ip rule add iif " + dev(l.gateway) + " lookup " + table + " pref " +
                          std::to_string(pref++));
      pref = kWanRulePref;
      for (const auto& e : ends)
        lines.push_back("ip rule add iif " + dev(e.own) + " lookup " + table + " pref " +
                        std::to_string(pref++));
      lines.push_back("rm -f /run/gridbcast-delayline; mkfifo /run/gridbcast-delayline");
      lines.push_back(delayline + " --ready-fd 3 3>/run/gridbcast-delayline &");
      lines.push_back("dl=$$!");
      // Ready within 30 s, or the router fails (a delay line that hangs
      // before it is ready must not hang the router).
      lines.push_back("state=$$(timeout 30 head -n 1 /run/gridbcast-delayline || true)");
      lines.push_back("[ \"$$state\" = ready ] || { echo \"" + router +
                      ": the delay line did not start\" >&2; exit 1; }");
      lines.push_back("echo \"" + router + ": delay line running\"");
      // On SIGTERM (compose down) the first wait ends; the second lets the
      // delay line write its statistics and exit before the router does.
      lines.push_back("trap 'kill $$dl' TERM INT");
      lines.push_back("wait $$dl || wait $$dl");
    }
    script(y, lines);
    y << YAML::EndMap;
  }

  // One service per node.
  for (size_t r = 0; r < grid.nodes.size(); ++r) {
    const auto& node = grid.nodes[r];
    const std::string site = grid.sites[static_cast<size_t>(node.site)].name;
    service_head(y, "node-" + compose_name(node.name), o);
    string_value(y, "hostname", node.name);
    sysctls(y, /*forward=*/false);
    // Started after its router and the launcher; it waits for the routes
    // itself (below): engines without systemd (podman) run no healthchecks.
    flow_list(y, "depends_on", {"router-" + compose_name(site), "launcher"});
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
    std::vector<std::string> lines = {"set -e", kDevFunction, "name=" + sh_word(node.name)};
    for (size_t k = 0; k < node.nics.size(); ++k) {
      const auto& nic = node.nics[k];
      const double bytes_per_s = nic.bandwidth_bps / 8;
      const std::string table = std::to_string(kLaneTableBase + static_cast<int>(k));
      const std::string dev = "\"$$(dev " + nic.address + ")\"";
      lines.push_back("# NIC " + std::to_string(k) +
                      (nic.device.empty() ? "" : " (" + comment_text(nic.device) + ")") + ": " +
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
    // Wait until every other site's router answers over the WAN (routes,
    // forwarding and delay lines in place on the whole path), at most
    // kComposeRouteWait seconds.
    bool waiting = false;
    for (size_t t = 0; t < grid.sites.size(); ++t) {
      if (static_cast<int>(t) == node.site || grid.wan_path(node.site, static_cast<int>(t)).empty())
        continue;
      const auto far = std::find_if(lanes.begin(), lanes.end(), [&](const LaneSubnet& l) {
        return l.site == static_cast<int>(t);
      });
      if (far == lanes.end()) continue;
      const std::string wait = std::to_string(kComposeRouteWait);
      if (!waiting) {  // one deadline for all the sites
        lines.push_back("end=$$(($$(date +%s) + " + wait + "))");
        waiting = true;
      }
      lines.push_back("site=" + sh_word(grid.sites[t].name) + "; gw=" + far->gateway.str());
      lines.push_back("until ping -c 1 -W 1 -I " + node.nics[0].address +
                      " \"$$gw\" >/dev/null 2>&1; do");
      lines.push_back(
          "  [ $$(date +%s) -lt $$end ] || { echo \"node $$name: no answer from site $$site's "
          "router $$gw after " +
          wait + " s\" >&2; exit 1; }");
      lines.push_back("  sleep 1");
      lines.push_back("done");
      // What the path's delay is now, in the log (round trip; the far router
      // answers from itself, so its own delay line may not be on the way back).
      lines.push_back(
          "echo \"node $$name: site $$site's router $$gw answers: $$(ping -c 3 -i 0.2 -w 3 -q -I " +
          node.nics[0].address + " \"$$gw\" | tail -n 1)\"");
    }
    lines.push_back("exec gridbcast rank");
    script(y, lines);
    y << YAML::EndMap;
  }
  y << YAML::EndMap;  // services

  // networks: NAME: {ipam: {config: [{subnet, gateway}]}}. Traffic between
  // sites crosses a site's lane network with a source address of another
  // subnet; docker masquerades only what leaves a network's bridge, but
  // podman's netavark masquerades anything from the subnet to elsewhere,
  // bridged packets too where the host has br_netfilter with
  // bridge-nf-call-iptables=1: its networks are internal (no NAT rules; this
  // grid needs nothing outside). Docker's internal networks would drop the
  // routed traffic instead, so they stay plain there.
  auto network = [&](const std::string& name, const std::string& subnet,
                     const std::string& gateway) {
    key(y, name);
    y << YAML::BeginMap;
    if (o.engine == ComposeEngine::kPodman) {
      key(y, "internal");
      y << true;
    }
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
