#include "topology/bound.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

namespace gridbcast::topology {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Dinic's max-flow on doubles. Augmenting stops at a residual of kEpsilon
// times the largest finite capacity, so rounding cannot loop it forever.
class FlowGraph {
 public:
  explicit FlowGraph(int vertices) : first_(static_cast<size_t>(vertices), -1) {}

  void add_edge(int from, int to, double capacity) {
    if (capacity != kInfinity) largest_ = std::max(largest_, capacity);
    edges_.push_back({to, first_[static_cast<size_t>(from)], capacity, capacity});
    first_[static_cast<size_t>(from)] = static_cast<int>(edges_.size() - 1);
    edges_.push_back({from, first_[static_cast<size_t>(to)], 0, 0});
    first_[static_cast<size_t>(to)] = static_cast<int>(edges_.size() - 1);
  }

  // The max-flow from source to sink; the graph is reset first, so it can be
  // called again with other terminals.
  double max_flow(int source, int sink) {
    for (auto& e : edges_) e.residual = e.capacity;
    const double epsilon = 1e-12 * std::max(largest_, 1.0);
    double total = 0;
    while (levels(source, sink)) {
      next_ = first_;
      while (true) {
        const double pushed = augment(source, sink, kInfinity, epsilon);
        if (pushed <= epsilon) break;
        total += pushed;
        if (total == kInfinity) return total;
      }
    }
    return total;
  }

 private:
  struct Edge {
    int to;
    int next;  // next edge out of the same vertex, -1 at the end
    double capacity;
    double residual;
  };

  bool levels(int source, int sink) {
    level_.assign(first_.size(), -1);
    std::vector<int> queue{source};
    level_[static_cast<size_t>(source)] = 0;
    for (size_t head = 0; head < queue.size(); ++head) {
      const int u = queue[head];
      for (int e = first_[static_cast<size_t>(u)]; e >= 0;
           e = edges_[static_cast<size_t>(e)].next) {
        const Edge& edge = edges_[static_cast<size_t>(e)];
        if (edge.residual > 0 && level_[static_cast<size_t>(edge.to)] < 0) {
          level_[static_cast<size_t>(edge.to)] = level_[static_cast<size_t>(u)] + 1;
          queue.push_back(edge.to);
        }
      }
    }
    return level_[static_cast<size_t>(sink)] >= 0;
  }

  // One blocking-flow step: depth-first along increasing levels, remembering
  // per vertex the first edge not yet saturated (next_).
  double augment(int u, int sink, double limit, double epsilon) {
    if (u == sink) return limit;
    for (int& e = next_[static_cast<size_t>(u)]; e >= 0; e = edges_[static_cast<size_t>(e)].next) {
      Edge& edge = edges_[static_cast<size_t>(e)];
      if (edge.residual <= epsilon ||
          level_[static_cast<size_t>(edge.to)] != level_[static_cast<size_t>(u)] + 1)
        continue;
      const double pushed = augment(edge.to, sink, std::min(limit, edge.residual), epsilon);
      if (pushed > epsilon) {
        edge.residual -= pushed;
        edges_[static_cast<size_t>(e ^ 1)].residual += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<int> first_;   // per vertex: its first edge, -1 if none
  std::vector<Edge> edges_;  // edge e and its reverse e ^ 1
  std::vector<int> level_;
  std::vector<int> next_;
  double largest_ = 0;
};

// Least one-way WAN latency from one site to every site (Dijkstra). The data
// of a multi-hop route takes Grid::wan_path, which is never faster.
std::vector<double> site_latencies(const Grid& grid, int from_site) {
  std::vector<double> best(grid.sites.size(), kInfinity);
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  best[static_cast<size_t>(from_site)] = 0;
  queue.emplace(0.0, from_site);
  while (!queue.empty()) {
    const auto [d, s] = queue.top();
    queue.pop();
    if (d > best[static_cast<size_t>(s)]) continue;
    for (const auto& l : grid.wan) {
      const int other = l.site_a == s ? l.site_b : (l.site_b == s ? l.site_a : -1);
      if (other < 0 || d + l.latency_s >= best[static_cast<size_t>(other)]) continue;
      best[static_cast<size_t>(other)] = d + l.latency_s;
      queue.emplace(d + l.latency_s, other);
    }
  }
  return best;
}

}  // namespace

// Why latency + bytes / rate, per receiver: take the minimum cut between the
// root and v, of capacity c. A byte crosses a cut edge e no earlier than the
// least latency from the root to e, and still needs the least latency from e to
// v after it, so every byte v holds at time t crossed some cut edge inside a
// window of length at most t - L_v, where L_v is v's least path latency. The cut
// carries at most c (t - L_v) bytes in such windows, so v holds all B bytes no
// earlier than L_v + B / c. The broadcast ends with its slowest receiver: the
// max over receivers, taken per class. (max L_v + B / min c, the simple bound's
// form, is not a bound when the nearest receiver has the smallest cut.)
double MaxFlowBound::seconds(std::uint64_t bytes) const {
  double worst = 0;
  for (const auto& c : classes)
    worst = std::max(worst, c.latency_s + static_cast<double>(bytes) * 8.0 / c.rate_bps);
  return worst;
}

MaxFlowBound max_flow_bound(const Grid& grid, int root) {
  if (root < 0 || root >= grid.size())
    throw std::out_of_range("max_flow_bound: root " + std::to_string(root) + " is outside 0.." +
                            std::to_string(grid.size() - 1));
  MaxFlowBound bound;
  if (grid.size() <= 1) return bound;

  // Vertices: in_u = 2u, out_u = 2u + 1, then one switch per site. Every node
  // reaches every other of its site through the switch (non-blocking), and the
  // WAN links join switches, so a node of either end site can use them.
  const int p = grid.size();
  const auto switch_of = [p](int site) { return 2 * p + site; };
  FlowGraph graph(2 * p + static_cast<int>(grid.sites.size()));
  for (int u = 0; u < p; ++u) {
    const auto& node = grid.nodes[static_cast<size_t>(u)];
    const double nic = node.total_bandwidth_bps();     // each direction (full duplex)
    graph.add_edge(switch_of(node.site), 2 * u, nic);  // what it can receive
    graph.add_edge(2 * u, 2 * u + 1, kInfinity);       // it forwards what it holds
    graph.add_edge(2 * u + 1, switch_of(node.site), grid.send_rate_bps(u));  // what it may send
  }
  // A WAN link carries its bandwidth in each direction. TCP's per-stream limits
  // (simulate.hpp) cap one transfer's bundle, not the link: a plan may spread a
  // crossing over as many node pairs as it likes, so they are left out.
  for (const auto& l : grid.wan) {
    graph.add_edge(switch_of(l.site_a), switch_of(l.site_b), l.rate_bps());
    graph.add_edge(switch_of(l.site_b), switch_of(l.site_a), l.rate_bps());
  }

  const std::vector<double> latency = site_latencies(grid, grid.site_of(root));
  // One max-flow per class (site, NIC total) instead of one per receiver: a
  // 10 x 1000 grid has 10 classes, not 9999 receivers.
  std::map<std::pair<int, double>, size_t> class_of;
  for (int v = 0; v < p; ++v) {
    if (v == root) continue;
    const auto key =
        std::make_pair(grid.site_of(v), grid.nodes[static_cast<size_t>(v)].total_bandwidth_bps());
    const auto [it, added] = class_of.emplace(key, bound.classes.size());
    if (!added) {
      ++bound.classes[it->second].members;
      continue;
    }
    ReceiverClass c;
    c.rank = v;
    c.members = 1;
    c.rate_bps = graph.max_flow(2 * root + 1, 2 * v);
    c.latency_s = latency[static_cast<size_t>(grid.site_of(v))];
    if (!(c.rate_bps > 0) || c.latency_s == kInfinity)
      throw std::invalid_argument("max_flow_bound: rank " + std::to_string(v) + " (" +
                                  grid.nodes[static_cast<size_t>(v)].name +
                                  ") cannot be reached from root " + std::to_string(root) +
                                  ": the max-flow to it is 0");
    bound.classes.push_back(c);
  }
  bound.rate_bps = kInfinity;
  for (const auto& c : bound.classes) {
    if (c.rate_bps < bound.rate_bps) {
      bound.rate_bps = c.rate_bps;
      bound.bottleneck_rank = c.rank;
    }
    bound.latency_s = std::max(bound.latency_s, c.latency_s);
  }
  return bound;
}

double max_flow_bound_seconds(const Grid& grid, int root, std::uint64_t bytes) {
  return max_flow_bound(grid, root).seconds(bytes);
}

}  // namespace gridbcast::topology
