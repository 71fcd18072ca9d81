#include "mpi/provider/placement.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "runtime/subgrid.hpp"

namespace gridbcast::mpi::provider {
namespace {

std::string short_name(const std::string& host) {
  return host.substr(0, host.find('.'));
}

bool names(const topology::Node& node, const std::string& host) {
  for (const std::string& n : {node.host, node.name})
    if (!n.empty() && (n == host || n == short_name(host) || short_name(n) == short_name(host)))
      return true;
  return false;
}

}  // namespace

Placement infer_placement(const std::vector<std::string>& hosts,
                          const std::vector<std::string>& addresses) {
  if (hosts.size() != addresses.size()) throw std::invalid_argument("one address per host");
  std::vector<std::string> order;  // hosts by first appearance
  std::map<std::string, int> per_host;
  for (const auto& h : hosts) {
    if (!per_host.contains(h)) order.push_back(h);
    ++per_host[h];
  }
  Placement p;
  p.grid.name = "inferred";
  p.grid.source = "<inferred from MPI host names>";
  topology::Site site;
  site.name = "mpi";
  p.grid.sites.push_back(site);
  p.grid_of_comm.assign(hosts.size(), -1);
  for (const auto& h : order) {
    int k = 0;
    for (size_t r = 0; r < hosts.size(); ++r) {
      if (hosts[r] != h) continue;
      topology::Node node;
      node.name = per_host[h] > 1 ? h + "#" + std::to_string(k) : h;
      node.host = h;
      node.site = 0;
      node.nics.push_back(topology::Nic{addresses[r], 10e9, ""});
      ++k;
      p.grid_of_comm[r] = p.grid.size();
      p.comm_of_grid.push_back(static_cast<int>(r));
      p.grid.sites[0].ranks.push_back(p.grid.size());
      p.grid.nodes.push_back(std::move(node));
    }
  }
  return p;
}

Placement map_placement(const topology::Grid& grid, const std::vector<std::string>& hosts) {
  std::vector<int> node_of(hosts.size(), -1);
  bool any = false;
  for (const auto& h : hosts)
    for (const auto& n : grid.nodes) any = any || names(n, h);
  if (!any) {
    if (static_cast<int>(hosts.size()) > grid.size())
      throw std::runtime_error(
          "the topology " + grid.source + " has " + std::to_string(grid.size()) + " nodes for " +
          std::to_string(hosts.size()) +
          " ranks (no node is named after a rank's host, so ranks take nodes in order)");
    for (size_t r = 0; r < hosts.size(); ++r) node_of[r] = static_cast<int>(r);
  } else {
    std::map<std::string, int> taken;  // host -> nodes handed out so far
    for (size_t r = 0; r < hosts.size(); ++r) {
      int k = taken[hosts[r]]++;
      for (int n = 0; n < grid.size() && node_of[r] < 0; ++n)
        if (names(grid.nodes[static_cast<size_t>(n)], hosts[r]) && k-- == 0) node_of[r] = n;
      if (node_of[r] < 0)
        throw std::runtime_error("rank " + std::to_string(r) + " runs on host \"" + hosts[r] +
                                 "\", which has no node left in " + grid.source + " (" +
                                 std::to_string(taken[hosts[r]]) + " ranks there)");
    }
  }
  std::vector<int> chosen = node_of;
  std::sort(chosen.begin(), chosen.end());
  Placement p;
  p.grid = runtime::restrict_grid(grid, chosen);
  p.grid_of_comm.resize(hosts.size());
  p.comm_of_grid.resize(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    const int g = static_cast<int>(std::lower_bound(chosen.begin(), chosen.end(), node_of[r]) -
                                   chosen.begin());
    p.grid_of_comm[r] = g;
    p.comm_of_grid[static_cast<size_t>(g)] = static_cast<int>(r);
  }
  return p;
}

}  // namespace gridbcast::mpi::provider
