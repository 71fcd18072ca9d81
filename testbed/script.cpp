#include "testbed/script.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "testbed/delay_line.hpp"

namespace gridbcast::testbed {
namespace {

constexpr std::string_view kMulticastNet = "224.0.0.0/4";

std::string num(double v) {
  return std::to_string(std::llround(v));
}

// One HTB class line, with a burst of shaping_burst_bytes(ceil).
std::string htb_class(const std::string& dev, const std::string& parent, const std::string& id,
                      double rate_bps, double ceil_bps, long long quantum) {
  const long long burst = shaping_burst_bytes(ceil_bps);
  return "class add dev " + dev + " parent " + parent + " classid " + id + " htb rate " +
         num(rate_bps) + "bit ceil " + num(ceil_bps) + "bit burst " + std::to_string(burst) +
         " cburst " + std::to_string(burst) + " quantum " + std::to_string(quantum);
}

// " mtu M" for the links of a site that declares jumbo frames (its
// `multicast: {mtu: M}`, docs/TOPOLOGY.md): the lane's bridge and both ends of
// every NIC's veth, so the emulated switch takes what the site says it takes.
std::string mtu_option(const topology::Grid& grid, int site) {
  const int mtu = grid.sites[static_cast<size_t>(site)].multicast.mtu;
  return mtu > 0 ? " mtu " + std::to_string(mtu) : std::string();
}

// HTB with one class at `rate_bps` and `leaf` below it: shapes egress of `dev`.
std::vector<std::string> htb(const std::string& dev, double rate_bps, const std::string& leaf) {
  const long long quantum = std::clamp<long long>(std::llround(rate_bps / 80), 1514, 200000);
  return {"qdisc add dev " + dev + " root handle 1: htb default 1",
          htb_class(dev, "1:", "1:1", rate_bps, rate_bps, quantum),
          "qdisc add dev " + dev + " parent 1:1 handle 10: " + leaf};
}

std::string loss_percent(double loss) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g%%", loss * 100);
  return buf;
}

std::string netem_leaf(const WanEndPlan& w) {
  const double packets = w.bandwidth_bps / 8 * (w.latency_s + 0.05) / 1500 * 1.5;
  std::string leaf = "netem delay " + num(w.latency_s * 1e6) + "us";
  if (w.loss > 0) leaf += " loss " + loss_percent(w.loss);
  return leaf + " limit " + num(std::max(1000.0, packets));
}

std::string quoted(const std::string& name) {
  return "\"" + name + "\"";
}

// Collects the steps; batches without lines are left out (there is nothing to run).
class Script {
 public:
  void batch(std::string tool, std::string ns, std::vector<std::string> lines, std::string what) {
    if (lines.empty()) return;
    steps_.push_back({std::move(what), Batch{std::move(tool), std::move(ns), std::move(lines)}});
  }
  void ip(const std::string& ns, std::vector<std::string> lines, std::string what) {
    batch("ip", ns, std::move(lines), std::move(what));
  }
  void tc(const std::string& ns, std::vector<std::string> lines, std::string what) {
    batch("tc", ns, std::move(lines), std::move(what));
  }
  void add(std::string what, decltype(Step::action) action) {
    steps_.push_back({std::move(what), std::move(action)});
  }
  std::vector<Step> take() { return std::move(steps_); }

 private:
  std::vector<Step> steps_;
};

void append(std::vector<std::string>& to, const std::vector<std::string>& lines) {
  to.insert(to.end(), lines.begin(), lines.end());
}

StartDelayLine delay_line_step(const RouterPlan& r, const ScriptOptions& o) {
  StartDelayLine d;
  d.site = r.site;
  d.site_name = r.name;
  d.ns = r.ns;
  d.argv = {o.exe, "testbed", "delayline", "--ready-fd", "3"};
  for (const auto& w : r.wan) {
    DelayLinkConfig c;
    c.tun = w.tun;
    c.delay_s = w.latency_s;
    c.loss = w.loss;
    c.offload = o.offload && w.loss == 0;  // loss must hit single segments, not 64 KiB bursts
    c.buffer_bytes = delay_buffer_bytes(r.ingress_bps, w.latency_s);
    d.argv.push_back("--link");
    d.argv.push_back(format_delay_link(c));
  }
  d.log = o.state_dir + "/delayline-" + sanitize_name(r.name) + ".log";
  return d;
}

}  // namespace

long long shaping_burst_bytes(double rate_bps) {
  return std::max<long long>(std::llround(rate_bps / 8 / 1000), kMinShapingBurst);
}

std::string_view latency_name(Latency l) {
  switch (l) {
    case Latency::kNone:
      return "none";
    case Latency::kNetem:
      return "netem";
    case Latency::kDelayLine:
      return "delayline";
  }
  return "?";
}

std::string bfifo(double rate_bps, double seconds) {
  return "bfifo limit " + num(std::max(rate_bps / 8 * seconds, 131072.0));
}

NicShaping nic_shaping(const Layout& l, const NodePlan& n, const NicPlan& nic, double rate_bps) {
  // The NIC addresses of every node but this one: the peers whose flows it shares.
  std::vector<Ipv4> peers;
  for (const auto& m : l.nodes)
    if (m.rank != n.rank)
      for (const auto& other : m.nics) peers.push_back(other.address);
  return {fair_htb(nic.device, rate_bps, "dst", peers), fair_htb(nic.port, rate_bps, "src", peers)};
}

std::vector<std::string> fair_htb(const std::string& dev, double rate_bps, std::string_view key,
                                  const std::vector<Ipv4>& peers) {
  const bool per_peer = peers.size() <= kFairPeers;
  const size_t children = 1 + (per_peer ? peers.size() : kFairBuckets);
  const double child_rate = std::max(rate_bps / static_cast<double>(children), 8000.0);
  std::vector<std::string> lines = {"qdisc add dev " + dev + " root handle 1: htb default 2",
                                    htb_class(dev, "1:", "1:1", rate_bps, rate_bps, 200000)};
  auto child = [&](unsigned minor) {
    char id[16];
    std::snprintf(id, sizeof id, "1:%x", minor);
    lines.push_back(htb_class(dev, "1:1", id, child_rate, rate_bps, 65536));
    lines.push_back("qdisc add dev " + dev + " parent " + id + " " + bfifo(rate_bps, 0.01));
    return std::string(id);
  };
  child(2);
  const std::string filter_prio = "filter add dev " + dev + " parent 1: protocol ip prio 1 ";
  const std::string filter = filter_prio + "u32 ";
  if (per_peer) {
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string id = child(0x100 + static_cast<unsigned>(i));
      lines.push_back(filter + "match ip " + std::string(key) + " " + peers[i].str() +
                      "/32 flowid " + id);
    }
  } else {
    lines.push_back(filter_prio + "handle 2: u32 divisor " + std::to_string(kFairBuckets));
    lines.push_back(filter +
                    "ht 800:: match ip protocol 6 0xff hashkey mask 0x003e0000 at 20 link 2:");
    for (int b = 0; b < kFairBuckets; ++b) {
      const std::string id = child(0x100 + static_cast<unsigned>(b));
      char bucket[16];
      std::snprintf(bucket, sizeof bucket, "2:%x:", b);
      lines.push_back(filter + "ht " + bucket + " match u32 0 0 flowid " + id);
    }
  }
  return lines;
}

std::vector<Step> build_script(const topology::Grid& grid, const Layout& l,
                               const ScriptOptions& o) {
  Script script;
  const Latency latency = grid.wan.empty() ? Latency::kNone : o.latency;
  const bool delay_line = latency == Latency::kDelayLine;

  // 1. Namespaces, with sysctls set before any interface exists.
  std::vector<std::string> lines;
  for (const auto& r : l.routers) lines.push_back("netns add " + r.ns);
  for (const auto& n : l.nodes) lines.push_back("netns add " + n.ns);
  script.ip("", lines, "creating the namespaces");
  const std::vector<Sysctl> common = {{"net/ipv6/conf/all/disable_ipv6", "1", true},
                                      {"net/ipv6/conf/default/disable_ipv6", "1", true},
                                      {"net/ipv4/conf/all/rp_filter", "0"},
                                      {"net/ipv4/conf/default/rp_filter", "0"}};
  std::vector<Sysctl> router = common;
  router.insert(router.end(), {{"net/ipv4/ip_forward", "1"},
                               {"net/ipv4/conf/all/send_redirects", "0"},
                               {"net/ipv4/conf/default/send_redirects", "0"}});
  for (const auto& r : l.routers) script.add("sysctls of namespace " + r.ns, Sysctls{r.ns, router});
  for (const auto& n : l.nodes) script.add("sysctls of namespace " + n.ns, Sysctls{n.ns, common});

  // 2. How latency is emulated: the runner decides here.
  if (grid.wan.empty())
    script.add("choosing how WAN latency is emulated (no WAN links)", ChooseLatency{"", latency});
  else
    script.add(
        "choosing how WAN latency is emulated (auto: netem if it works in " + l.routers[0].ns + ")",
        ChooseLatency{l.routers[0].ns, latency});

  // 3. Routers: bridges (one per lane) and the WAN veth pairs.
  for (const auto& r : l.routers) {
    lines = {"link set lo up"};
    // A lane is a switch that forwards IP multicast (issue 15's multicast
    // broadcast), so its bridge does no IGMP snooping: with snooping on, a
    // port that has not joined gets a group's traffic only while no querier
    // is around, and a querier would make delivery depend on IGMP timing
    // (reports, 260 s membership timeouts). Flooding a group to every port
    // of a lane costs nothing here: every node of a site receives the
    // broadcast anyway. The router does not route multicast (no multicast
    // routing daemon, no mroute table), so groups stay inside the site.
    for (const auto& lane : r.lanes)
      lines.push_back("link add " + lane.bridge + mtu_option(grid, r.site) +
                      " type bridge mcast_snooping 0");
    for (const auto& w : r.wan)
      if (r.site < w.peer_site)
        lines.push_back("link add " + w.dev + " type veth peer name " + w.dev + " netns " +
                        l.routers[static_cast<size_t>(w.peer_site)].ns);
    script.ip(r.ns, lines, "setting up the router of site " + quoted(r.name));
  }
  // 4. Nodes: one veth per NIC, its peer in the router namespace.
  for (const auto& n : l.nodes) {
    lines = {"link set lo up"};
    for (const auto& nic : n.nics) {
      lines.push_back("link add " + nic.device + mtu_option(grid, n.site) +
                      " type veth peer name " + nic.port + mtu_option(grid, n.site) + " netns " +
                      l.routers[static_cast<size_t>(n.site)].ns);
      lines.push_back("addr add " + nic.address.str() + "/" + std::to_string(nic.subnet.length) +
                      " dev " + nic.device);
      lines.push_back("link set " + nic.device + " up");
    }
    script.ip(n.ns, lines, "setting up node " + quoted(n.name));
  }
  // 5. Management: a bridge in the root namespace, one veth per node.
  lines = {"link add " + l.mgmt_bridge + " type bridge"};
  for (const auto& n : l.nodes) {
    lines.push_back("link add " + n.mgmt_peer + " type veth peer name " +
                    std::string(kManagementDevice) + " netns " + n.ns);
    lines.push_back("link set " + n.mgmt_peer + " master " + l.mgmt_bridge);
  }
  script.ip("", lines, "creating the management network");
  // Quiet links: no IPv6 link-local traffic on the root-namespace interfaces.
  Sysctls quiet;
  quiet.settings.push_back({"net/ipv6/conf/" + l.mgmt_bridge + "/disable_ipv6", "1", true});
  for (const auto& n : l.nodes)
    quiet.settings.push_back({"net/ipv6/conf/" + n.mgmt_peer + "/disable_ipv6", "1", true});
  script.add("no IPv6 on the root-namespace interfaces", std::move(quiet));
  lines = {"addr add " + l.mgmt_gateway.str() + "/" + std::to_string(l.mgmt_net.length) + " dev " +
               l.mgmt_bridge,
           "link set " + l.mgmt_bridge + " up"};
  for (const auto& n : l.nodes) lines.push_back("link set " + n.mgmt_peer + " up");
  script.ip("", lines, "configuring the management network");

  // 6. Routers: ports, gateway addresses, WAN addresses and routes, delay lines' TUNs.
  for (const auto& r : l.routers) {
    lines.clear();
    for (const auto& n : l.nodes)
      if (n.site == r.site)
        for (const auto& nic : n.nics) {
          lines.push_back("link set " + nic.port + " master " + nic.bridge);
          lines.push_back("link set " + nic.port + " up");
        }
    for (const auto& lane : r.lanes) {
      lines.push_back("addr add " + lane.gateway.str() + "/" + std::to_string(lane.subnet.length) +
                      " dev " + lane.bridge);
      lines.push_back("link set " + lane.bridge + " up");
    }
    for (const auto& w : r.wan) {
      lines.push_back("addr add " + w.address.str() + "/30 dev " + w.dev);
      lines.push_back("link set " + w.dev + " up");
    }
    for (const auto& rt : r.routes) {
      const auto& w = r.wan[static_cast<size_t>(rt.wan)];
      lines.push_back("route add " + rt.destination.str() + " via " + w.peer_address.str() +
                      " dev " + w.dev);
    }
    if (delay_line && !r.wan.empty()) {
      const std::string table = std::to_string(kDelayTable);
      for (const auto& w : r.wan) {
        lines.push_back("tuntap add dev " + w.tun + " mode tun");
        lines.push_back("link set dev " + w.tun + " txqueuelen 10000");
        lines.push_back("link set " + w.tun + " up");
      }
      for (const auto& rt : r.routes)
        lines.push_back("route add " + rt.destination.str() + " dev " +
                        r.wan[static_cast<size_t>(rt.wan)].tun + " table " + table);
      // Packets from the lanes and from other WAN links go through the delay
      // line; packets coming out of it (iif dly*) use the main table: no loop.
      for (size_t i = 0; i < r.lanes.size(); ++i)
        lines.push_back("rule add iif " + r.lanes[i].bridge + " lookup " + table + " pref " +
                        std::to_string(kLaneRulePref + static_cast<int>(i)));
      for (size_t i = 0; i < r.wan.size(); ++i)
        lines.push_back("rule add iif " + r.wan[i].dev + " lookup " + table + " pref " +
                        std::to_string(kWanRulePref + static_cast<int>(i)));
    }
    script.ip(r.ns, lines, "configuring the router of site " + quoted(r.name));
  }
  // 7. Nodes: management address, per-lane source routing, routes to every lane subnet.
  std::vector<LanePlan> all_lanes;
  for (const auto& r : l.routers) all_lanes.insert(all_lanes.end(), r.lanes.begin(), r.lanes.end());
  for (const auto& n : l.nodes) {
    lines = {"addr add " + n.mgmt_address.str() + "/" + std::to_string(l.mgmt_net.length) +
                 " dev " + std::string(kManagementDevice),
             "link set " + std::string(kManagementDevice) + " up"};
    for (const auto& nic : n.nics) {
      const std::string table = std::to_string(kLaneTableBase + nic.nic);
      lines.push_back("rule add from " + nic.address.str() + " lookup " + table + " pref " + table);
      lines.push_back("route add " + nic.subnet.str() + " dev " + nic.device + " src " +
                      nic.address.str() + " table " + table);
      lines.push_back("route add default via " + nic.gateway.str() + " dev " + nic.device +
                      " src " + nic.address.str() + " table " + table);
      // Multicast from a lane's address leaves on that lane, straight onto
      // its switch (no gateway).
      lines.push_back("route add " + std::string(kMulticastNet) + " dev " + nic.device + " src " +
                      nic.address.str() + " table " + table);
    }
    const auto& first = n.nics.front();
    lines.push_back("route add default via " + first.gateway.str() + " dev " + first.device);
    // Unbound multicast (and joins without an interface) use NIC 0, as unicast does.
    lines.push_back("route add " + std::string(kMulticastNet) + " dev " + first.device);
    for (const auto& lane : all_lanes) {
      const bool own = std::any_of(n.nics.begin(), n.nics.end(),
                                   [&](const NicPlan& nic) { return nic.subnet == lane.subnet; });
      if (own || lane.nic >= static_cast<int>(n.nics.size())) continue;
      const auto& nic = n.nics[static_cast<size_t>(lane.nic)];
      lines.push_back("route add " + lane.subnet.str() + " via " + nic.gateway.str() + " dev " +
                      nic.device);
    }
    script.ip(n.ns, lines, "configuring node " + quoted(n.name));
  }
  // 8. Shaping: HTB on both ends of every NIC, fair among its flows, and on
  // every WAN end (a router's FIFO).
  for (const auto& n : l.nodes) {
    lines.clear();
    for (const auto& nic : n.nics) append(lines, nic_shaping(l, n, nic, nic.bandwidth_bps).node);
    script.tc(n.ns, lines, "shaping the NICs of node " + quoted(n.name));
  }
  for (const auto& r : l.routers) {
    lines.clear();
    for (const auto& n : l.nodes)
      if (n.site == r.site)
        for (const auto& nic : n.nics)
          append(lines, nic_shaping(l, n, nic, nic.bandwidth_bps).router);
    for (const auto& w : r.wan) {
      const std::string leaf = latency == Latency::kNetem
                                   ? netem_leaf(w)
                                   : bfifo(w.bandwidth_bps, std::max(2 * w.latency_s, 0.01));
      append(lines, htb(w.dev, w.bandwidth_bps, leaf));
    }
    script.tc(r.ns, lines, "shaping the links of site " + quoted(r.name));
  }
  // 9. The delay lines, one process per router with WAN links.
  if (delay_line)
    for (const auto& r : l.routers)
      if (!r.wan.empty())
        script.add("starting the delay line of site " + quoted(r.name), delay_line_step(r, o));
  return script.take();
}

std::string format_script(const std::vector<Step>& script) {
  std::string out;
  for (const auto& step : script) {
    out += "# " + step.what + "\n";
    if (const auto* b = std::get_if<Batch>(&step.action)) {
      const std::string head = b->tool + (b->ns.empty() ? "" : " -n " + b->ns) + " ";
      for (const auto& line : b->lines) out += head + line + "\n";
    } else if (const auto* s = std::get_if<Sysctls>(&step.action)) {
      for (const auto& x : s->settings)
        out += "sysctl " + (s->ns.empty() ? "" : "-n " + s->ns + " ") + x.path + "=" + x.value +
               (s->ns.empty() ? " (best effort)"
                : x.optional  ? " (if present)"
                              : "") +
               "\n";
    } else if (const auto* c = std::get_if<ChooseLatency>(&step.action)) {
      out += "latency " + std::string(latency_name(c->assumed)) + "\n";
    } else if (const auto* d = std::get_if<StartDelayLine>(&step.action)) {
      out += "delayline -n " + d->ns;
      for (const auto& a : d->argv) out += " " + a;
      out += " >> " + d->log + "\n";
    }
  }
  return out;
}

}  // namespace gridbcast::testbed
