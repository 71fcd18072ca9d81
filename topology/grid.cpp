#include "topology/grid.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <set>
#include <stdexcept>

namespace gridbcast::topology {

namespace {

// The other end of a link at `site`, or -1 when the link does not touch it.
int other_end(const WanLink& link, int site) {
  if (link.site_a == site) return link.site_b;
  if (link.site_b == site) return link.site_a;
  return -1;
}

void check_site(const Grid& grid, int site, const char* what) {
  if (site < 0 || site >= static_cast<int>(grid.sites.size())) {
    throw std::out_of_range(std::string(what) + ": site index " + std::to_string(site) +
                            " is outside [0, " + std::to_string(grid.sites.size()) + ")");
  }
}

void chain_from(const Grid& grid, int site, std::vector<bool>& visited, std::vector<int>& chain) {
  visited[static_cast<size_t>(site)] = true;
  chain.push_back(site);
  for (const WanLink& link : grid.wan) {
    const int next = other_end(link, site);
    if (next >= 0 && !visited[static_cast<size_t>(next)]) chain_from(grid, next, visited, chain);
  }
}

}  // namespace

std::string SiteMulticast::range() const {
  return std::to_string(network >> 24) + "." + std::to_string((network >> 16) & 0xff) + "." +
         std::to_string((network >> 8) & 0xff) + "." + std::to_string(network & 0xff) + "/" +
         std::to_string(prefix);
}

std::string Location::str() const {
  if (line <= 0) return file;
  if (column <= 0) return file + ":" + std::to_string(line);
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

ConfigError::ConfigError(Location where, const std::string& what)
    : std::runtime_error(where.str() + ": " + what), where_(std::move(where)), message_(what) {}

double Node::total_bandwidth_bps() const {
  double total = 0;
  for (const Nic& nic : nics) total += nic.bandwidth_bps;
  return total;
}

double Grid::send_rate_bps(int rank) const {
  const double nics = nodes.at(static_cast<size_t>(rank)).total_bandwidth_bps();
  return max_rate_bps > 0 && max_rate_bps < nics ? max_rate_bps : nics;
}

bool Grid::rate_limited() const {
  if (max_rate_bps > 0) return true;
  for (const WanLink& l : wan)
    if (l.max_rate_bps > 0) return true;
  return false;
}

double Grid::multicast_pace_bps(int sender, int lane) const {
  double slowest = 0;
  for (const int r : sites.at(static_cast<size_t>(site_of(sender))).ranks) {
    if (r == sender) continue;
    const double bps = nodes[static_cast<size_t>(r)].lane_nic(lane).bandwidth_bps;
    if (slowest == 0 || bps < slowest) slowest = bps;
  }
  return slowest;
}

int Grid::site_named(const std::string& site_name) const {
  for (size_t i = 0; i < sites.size(); ++i)
    if (sites[i].name == site_name) return static_cast<int>(i);
  return -1;
}

const WanLink* Grid::link_between(int a, int b) const {
  for (const WanLink& link : wan) {
    if ((link.site_a == a && link.site_b == b) || (link.site_a == b && link.site_b == a)) {
      return &link;
    }
  }
  return nullptr;
}

std::vector<int> Grid::site_chain(int from_site) const {
  check_site(*this, from_site, "site_chain");
  std::vector<bool> visited(sites.size(), false);
  std::vector<int> chain;
  chain.reserve(sites.size());
  chain_from(*this, from_site, visited, chain);
  // A loaded grid is connected; a hand-built one may not be, and every site must
  // still appear once, so continue from the first site not reached yet.
  for (int s = 0; s < static_cast<int>(sites.size()); ++s) {
    if (!visited[static_cast<size_t>(s)]) chain_from(*this, s, visited, chain);
  }
  return chain;
}

std::vector<const WanLink*> Grid::wan_path(int a, int b) const {
  check_site(*this, a, "wan_path");
  check_site(*this, b, "wan_path");
  if (a == b) return {};
  // Breadth-first from a, neighbours in file order: the first path found is the
  // fewest-hops one, and ties always break the same way.
  std::vector<const WanLink*> via(sites.size(), nullptr);
  std::vector<bool> seen(sites.size(), false);
  seen[static_cast<size_t>(a)] = true;
  std::deque<int> queue{a};
  while (!queue.empty() && !seen[static_cast<size_t>(b)]) {
    const int site = queue.front();
    queue.pop_front();
    for (const WanLink& link : wan) {
      const int next = other_end(link, site);
      if (next < 0 || seen[static_cast<size_t>(next)]) continue;
      seen[static_cast<size_t>(next)] = true;
      via[static_cast<size_t>(next)] = &link;
      queue.push_back(next);
    }
  }
  if (!seen[static_cast<size_t>(b)]) {
    throw std::invalid_argument("wan_path: no WAN path between site \"" +
                                sites[static_cast<size_t>(a)].name + "\" and site \"" +
                                sites[static_cast<size_t>(b)].name + "\"");
  }
  std::vector<const WanLink*> path;
  for (int site = b; site != a;) {
    const WanLink* link = via[static_cast<size_t>(site)];
    path.push_back(link);
    site = other_end(*link, site);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

bool Grid::tls_between(int from_rank, int to_rank) const {
  const int a = site_of(from_rank);
  const int b = site_of(to_rank);
  if (a == b) return false;
  for (const WanLink* link : wan_path(a, b))
    if (link->tls) return true;
  return false;
}

bool Grid::needs_tls(int rank) const {
  for (int peer = 0; peer < size(); ++peer)
    if (tls_between(rank, peer)) return true;
  return false;
}

int Grid::streams_between(int from_rank, int to_rank) const {
  const int a = site_of(from_rank);
  const int b = site_of(to_rank);
  if (a == b) return 1;
  int streams = 0;
  for (const WanLink* link : wan_path(a, b)) {
    streams = streams == 0 ? link->streams : std::min(streams, link->streams);
  }
  return streams;
}

std::string Grid::congestion_between(int from_rank, int to_rank) const {
  const int a = site_of(from_rank);
  const int b = site_of(to_rank);
  if (a != b)
    for (const WanLink* link : wan_path(a, b))
      if (!link->congestion.empty()) return link->congestion;
  return congestion;
}

int Node::lane_nic_index(int lane) const {
  std::array<int, kMaxLanes> on{};  // lanes dealt to each NIC so far (a node uses its first 8)
  const size_t n = std::min(nics.size(), on.size());
  int last = 0;
  for (int l = 0; l <= lane; ++l) {
    size_t best = 0;
    for (size_t j = 1; j < n; ++j) {
      // Compare bandwidth / (lanes + 1) without dividing; on a tie the NIC
      // with fewer lanes, then the lower index.
      const double mine = nics[j].bandwidth_bps * (on[best] + 1);
      const double theirs = nics[best].bandwidth_bps * (on[j] + 1);
      if (mine > theirs || (mine == theirs && on[j] < on[best])) best = j;
    }
    ++on[best];
    last = static_cast<int>(best);
  }
  return last;
}

double Node::lane_bandwidth_bps(int lane, int lanes) const {
  const int nic = lane_nic_index(lane);
  int sharing = 0;
  for (int l = 0; l < lanes; ++l) sharing += lane_nic_index(l) == nic ? 1 : 0;
  return nics[static_cast<size_t>(nic)].bandwidth_bps / std::max(sharing, 1);
}

int Grid::lane_count() const {
  if (lanes > 0) return std::min(lanes, kMaxLanes);
  return automatic_lane_count();
}

int Grid::automatic_lane_count() const {
  // Nodes with the same NIC bandwidths have the same lanes: price each once.
  std::set<std::vector<double>> shapes;
  for (const Node& n : nodes) {
    std::vector<double> bw;
    for (const Nic& nic : n.nics) bw.push_back(nic.bandwidth_bps);
    shapes.insert(std::move(bw));
  }
  int best_k = 2;
  double best_rate = -1;
  for (int k = 2; k <= kMaxLanes; ++k) {
    double slowest = std::numeric_limits<double>::infinity();
    for (const auto& bw : shapes) {
      Node n;
      for (const double b : bw) n.nics.push_back(Nic{"", b, ""});
      for (int l = 0; l < k; ++l) slowest = std::min(slowest, n.lane_bandwidth_bps(l, k));
    }
    const double rate = nodes.empty() ? 0 : k * slowest;
    if (rate > best_rate * (1 + 1e-9)) {  // strictly better: ties keep the smaller k
      best_rate = rate;
      best_k = k;
    }
  }
  return best_k;
}

int Grid::max_wan_streams() const {
  int streams = 1;
  for (const WanLink& link : wan) streams = std::max(streams, link.streams);
  return streams;
}

}  // namespace gridbcast::topology
