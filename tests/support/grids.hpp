// Grids built in code for tests that need many shapes (no YAML, no network).
#pragma once

#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::testing {

// Sites of the given node counts, chained site i -- site i+1 by WAN links of
// `streams` streams. Every site carries multicast. Nodes get `nics` NICs on loopback-style
// addresses 127.<lane+1>.<site>.<node>. Ranks follow site order.
inline topology::Grid make_grid(const std::vector<int>& site_nodes, int streams = 3, int nics = 2,
                                const std::string& base = "127") {
  topology::Grid g;
  g.name = "test";
  g.source = "<test>";
  for (size_t s = 0; s < site_nodes.size(); ++s) {
    topology::Site site;
    site.name = "s" + std::to_string(s);
    site.multicast.enabled = true;  // loopback carries it inside the host
    for (int n = 0; n < site_nodes[s]; ++n) {
      topology::Node node;
      node.name = site.name + "n" + std::to_string(n);
      node.host = node.name;
      node.site = static_cast<int>(s);
      for (int l = 0; l < nics; ++l)
        node.nics.push_back(topology::Nic{base + "." + std::to_string(l + 1) + "." +
                                              std::to_string(s) + "." + std::to_string(n + 1),
                                          10e9, ""});
      site.ranks.push_back(static_cast<int>(g.nodes.size()));
      g.nodes.push_back(node);
    }
    g.sites.push_back(site);
    if (s > 0) {
      topology::WanLink link;
      link.site_a = static_cast<int>(s - 1);
      link.site_b = static_cast<int>(s);
      link.latency_s = 0.001;
      link.bandwidth_bps = 1e9;
      link.streams = streams;
      g.wan.push_back(link);
    }
  }
  return g;
}

}  // namespace gridbcast::testing
