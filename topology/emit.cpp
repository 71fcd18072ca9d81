#include "topology/emit.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace gridbcast::topology {
namespace {

// Figures a topology can hold (llround of anything else is undefined).
double checked(double v, double most, const char* what) {
  if (!std::isfinite(v) || v < 0 || v > most)
    throw std::invalid_argument(std::string("cannot write a ") + what + " of " + std::to_string(v));
  return v;
}
std::string bits(double bps) {
  return std::to_string(std::llround(checked(bps, 1e18, "bandwidth"))) + " bit";
}
std::string nanoseconds(double s) {
  return std::to_string(std::llround(checked(s, 1e6, "duration") * 1e9)) + " ns";
}

std::string ipv4(std::uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 0xff) + "." +
         std::to_string((a >> 8) & 0xff) + "." + std::to_string(a & 0xff);
}

class Writer {
 public:
  explicit Writer(const GridComments& c) : comments_(c) {}

  void comment(const std::string& key) {
    auto it = comments_.find(key);
    if (it == comments_.end()) return;
    std::string line = it->second;
    for (auto& ch : line)
      if (ch == '\n' || ch == '\r') ch = ' ';
    y << YAML::Comment(line);
  }
  YAML::Emitter y;

 private:
  const GridComments& comments_;
};

void write_multicast(YAML::Emitter& y, const SiteMulticast& m) {
  const bool plain = m.network == kDefaultMulticastNetwork && m.prefix == kDefaultMulticastPrefix &&
                     m.ttl == kDefaultMulticastTtl && m.port == 0 && m.mtu == 0;
  y << YAML::Key << "multicast" << YAML::Value;
  if (plain) {
    y << true;
    return;
  }
  y << YAML::BeginMap;
  y << YAML::Key << "group" << YAML::Value << ipv4(m.network) + "/" + std::to_string(m.prefix);
  y << YAML::Key << "ttl" << YAML::Value << m.ttl;
  if (m.port != 0) y << YAML::Key << "port" << YAML::Value << m.port;
  if (m.mtu != 0) y << YAML::Key << "mtu" << YAML::Value << m.mtu;
  y << YAML::EndMap;
}

}  // namespace

std::string grid_to_yaml(const Grid& g, const GridComments& comments) {
  Writer w(comments);
  YAML::Emitter& y = w.y;
  w.comment("top");
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << g.name;
  const bool defaults = g.segment_bytes != 0 || g.lanes != 0 || !g.congestion.empty() ||
                        g.pace_lanes || g.probe || g.segment_overhead_s > 0 ||
                        g.hop_overhead_s > 0 || g.max_rate_bps > 0;
  if (defaults) {
    y << YAML::Key << "defaults" << YAML::Value << YAML::BeginMap;
    if (g.segment_bytes != 0)
      y << YAML::Key << "segment" << YAML::Value << std::to_string(g.segment_bytes);
    if (g.lanes != 0) y << YAML::Key << "lanes" << YAML::Value << g.lanes;
    if (!g.congestion.empty()) y << YAML::Key << "congestion" << YAML::Value << g.congestion;
    if (g.pace_lanes) y << YAML::Key << "pace_lanes" << YAML::Value << true;
    if (g.probe) y << YAML::Key << "probe" << YAML::Value << true;
    if (g.max_rate_bps > 0) y << YAML::Key << "max_rate" << YAML::Value << bits(g.max_rate_bps);
    if (g.segment_overhead_s > 0)
      y << YAML::Key << "segment_overhead" << YAML::Value << nanoseconds(g.segment_overhead_s);
    if (g.hop_overhead_s > 0)
      y << YAML::Key << "hop_overhead" << YAML::Value << nanoseconds(g.hop_overhead_s);
    y << YAML::EndMap;
  }
  y << YAML::Key << "sites" << YAML::Value << YAML::BeginSeq;
  for (size_t s = 0; s < g.sites.size(); ++s) {
    const Site& site = g.sites[s];
    y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << site.name;
    if (site.multicast.enabled) write_multicast(y, site.multicast);
    if (site.latency_s > 0) {
      y << YAML::Key << "latency" << YAML::Value << nanoseconds(site.latency_s);
      w.comment("site:" + std::to_string(s));
    }
    y << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
    for (const int r : site.ranks) {
      const Node& n = g.nodes[static_cast<size_t>(r)];
      // A node name is a hostlist to the loader; a name of the grid has no
      // brackets left, so it stands for itself.
      y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << n.name;
      if (!n.host.empty() && n.host != n.name) y << YAML::Key << "host" << YAML::Value << n.host;
      y << YAML::Key << "nics" << YAML::Value << YAML::BeginSeq;
      for (size_t j = 0; j < n.nics.size(); ++j) {
        const Nic& nic = n.nics[j];
        y << YAML::BeginMap << YAML::Key << "address" << YAML::Value << nic.address;
        y << YAML::Key << "bandwidth" << YAML::Value << bits(nic.bandwidth_bps);
        w.comment("nic:" + std::to_string(r) + ":" + std::to_string(j));
        if (!nic.device.empty()) y << YAML::Key << "device" << YAML::Value << nic.device;
        y << YAML::EndMap;
      }
      y << YAML::EndSeq << YAML::EndMap;
    }
    y << YAML::EndSeq << YAML::EndMap;
  }
  y << YAML::EndSeq;
  if (!g.wan.empty()) {
    y << YAML::Key << "wan" << YAML::Value << YAML::BeginSeq;
    for (size_t i = 0; i < g.wan.size(); ++i) {
      const WanLink& l = g.wan[i];
      const std::string key = "wan:" + std::to_string(i);
      y << YAML::BeginMap << YAML::Key << "sites" << YAML::Value << YAML::Flow << YAML::BeginSeq
        << g.sites[static_cast<size_t>(l.site_a)].name
        << g.sites[static_cast<size_t>(l.site_b)].name << YAML::EndSeq;
      y << YAML::Key << "latency" << YAML::Value << nanoseconds(l.latency_s);
      w.comment(key + ":latency");
      y << YAML::Key << "bandwidth" << YAML::Value << bits(l.bandwidth_bps);
      w.comment(key + ":bandwidth");
      if (l.max_rate_bps > 0) y << YAML::Key << "max_rate" << YAML::Value << bits(l.max_rate_bps);
      if (l.loss > 0) {
        // A plain fraction (the loader's bare-number form) to 17 decimals.
        char loss[64];
        std::snprintf(loss, sizeof loss, "%.17f", l.loss);
        std::string text = loss;
        while (text.size() > 3 && text.back() == '0') text.pop_back();
        y << YAML::Key << "loss" << YAML::Value << text;
      }
      y << YAML::Key << "streams" << YAML::Value << l.streams;
      if (l.tls) y << YAML::Key << "tls" << YAML::Value << true;
      if (!l.congestion.empty()) y << YAML::Key << "congestion" << YAML::Value << l.congestion;
      y << YAML::EndMap;
    }
    y << YAML::EndSeq;
  }
  y << YAML::EndMap;
  if (!y.good())
    throw std::runtime_error(std::string("cannot write the topology: ") + y.GetLastError());
  return std::string(y.c_str()) + "\n";
}

}  // namespace gridbcast::topology
