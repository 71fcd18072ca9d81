#include "topology/plan/plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "topology/plan/builder.hpp"

namespace gridbcast::topology {

namespace detail {

PlanBuilder::PlanBuilder(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size)
    : grid_(grid) {
  plan_.algorithm = algorithm;
  plan_.ranks = grid.size();
  plan_.root = root;
  plan_.size = size;
  plan_.wan_streams = grid.max_wan_streams();
  plan_.lanes = grid.lane_count();
}

void PlanBuilder::send(int from, int to, std::uint64_t offset, std::uint64_t length, int lane_from,
                       int lane_to) {
  if (length == 0) return;
  plan_.transfers.push_back(
      Transfer{from, to, offset, length, lane_from, lane_to, grid_.streams_between(from, to)});
}

std::uint64_t Chunks::begin(int k) const {
  return std::min(size, chunk * static_cast<std::uint64_t>(k));
}
std::uint64_t Chunks::end(int k) const {
  return std::min(size, chunk * static_cast<std::uint64_t>(k + 1));
}

}  // namespace detail

const std::vector<AlgorithmInfo>& algorithms() {
  static const std::vector<AlgorithmInfo> kRegistry = {
      {Algorithm::kMultilane, "multilane",
       "two binary trees per site carry the two halves on two lanes, leaves swap halves, "
       "sites chained over multi-stream WAN hops"},
      {Algorithm::kBinomial, "binomial", "binomial tree of whole messages; latency-optimal"},
      {Algorithm::kScatterRd, "scatter_rd",
       "binomial scatter, then recursive-doubling allgather (van de Geijn)"},
      {Algorithm::kScatterRing, "scatter_ring",
       "binomial scatter, then native ring allgather: p-1 full steps, as MPICH and Open MPI"},
      {Algorithm::kScatterRingTuned, "scatter_ring_tuned",
       "binomial scatter, then a ring that never re-sends a chunk its receiver owns "
       "(Zhou et al. 2015)"},
      {Algorithm::kChain, "chain", "pipelined chain in rank order from the root"},
      {Algorithm::kBinary, "binary", "pipelined binary tree, one lane per child"},
      {Algorithm::kMulticast, "multicast",
       "IP multicast inside each site with a reliable ring behind it (Hoefler, Siebert, Rehm), "
       "sites chained; needs multicast: true on every site of two or more nodes"},
      {Algorithm::kCirculant, "circulant",
       "round-optimal n-block broadcast on a circulant graph (Traeff), one instance per site "
       "and lane, sites chained block by block"},
  };
  return kRegistry;
}

std::string_view algorithm_name(Algorithm a) {
  for (const auto& info : algorithms())
    if (info.id == a) return info.name;
  return "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (const auto& info : algorithms())
    if (info.name == name) return info.id;
  return std::nullopt;
}

std::string algorithm_unavailable(const Grid& grid, Algorithm algorithm) {
  if (algorithm != Algorithm::kMulticast) return {};
  // Its datagrams are paced to the receivers' NICs by the sender alone, not
  // within a limit the node's TCP links share.
  if (grid.rate_limited())
    return "the multicast algorithm does not keep to a rate limit (defaults.max_rate, "
           "--max-rate or a WAN link's max_rate); choose another algorithm or drop the limit";
  for (const Site& site : grid.sites) {
    if (site.ranks.size() < 2 || site.multicast.enabled) continue;
    const std::string where = site.where.file.empty() ? "" : " (" + site.where.str() + ")";
    return "the multicast algorithm needs IP multicast inside every site of two or more nodes, "
           "and site '" +
           site.name + "'" + where +
           " does not say it carries it: add `multicast: true` to the site if its network "
           "forwards IPv4 multicast, or choose another algorithm";
  }
  return {};
}

std::vector<Algorithm> available_algorithms(const Grid& grid) {
  std::vector<Algorithm> out;
  for (const auto& info : algorithms())
    if (algorithm_unavailable(grid, info.id).empty()) out.push_back(info.id);
  return out;
}

Plan build_plan(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size) {
  if (grid.size() == 0) throw std::invalid_argument("the topology has no nodes");
  if (root < 0 || root >= grid.size())
    throw std::invalid_argument("root " + std::to_string(root) + " is outside 0.." +
                                std::to_string(grid.size() - 1));
  switch (algorithm) {
    case Algorithm::kMultilane:
      return build_multilane(grid, root, size);
    case Algorithm::kBinomial:
      return build_binomial(grid, root, size);
    case Algorithm::kScatterRd:
    case Algorithm::kScatterRing:
    case Algorithm::kScatterRingTuned:
      return build_scatter_allgather(grid, algorithm, root, size);
    case Algorithm::kChain:
      return build_chain(grid, root, size);
    case Algorithm::kBinary:
      return build_binary(grid, root, size);
    case Algorithm::kMulticast:
      return build_multicast(grid, root, size);
    case Algorithm::kCirculant:
      return build_circulant(grid, root, size);
  }
  throw std::invalid_argument("unknown algorithm");
}

namespace {

// A count from the environment, when the variable is set and not empty.
template <typename T>
bool count_from_environment(const char* name, T& out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || *v == '-' || errno == ERANGE ||
      parsed > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
    throw std::invalid_argument(std::string(name) + " must be a count, got \"" + v + "\"");
  out = static_cast<T>(parsed);
  return true;
}

}  // namespace

SelectionThresholds SelectionThresholds::from_environment() {
  SelectionThresholds t;
  t.given |= count_from_environment("GRIDBCAST_SMALL_BYTES", t.small_bytes);
  t.given |= count_from_environment("GRIDBCAST_MULTICAST_BYTES", t.multicast_bytes);
  t.given |=
      count_from_environment("GRIDBCAST_MULTICAST_MIN_SITE_NODES", t.multicast_min_site_nodes);
  return t;
}

Algorithm threshold_algorithm(const Grid& grid, std::uint64_t size,
                              const SelectionThresholds& thresholds) {
  if (size < thresholds.multicast_bytes &&
      algorithm_unavailable(grid, Algorithm::kMulticast).empty()) {
    size_t largest = 0;
    for (const Site& s : grid.sites) largest = std::max(largest, s.ranks.size());
    if (largest >= static_cast<size_t>(std::max(thresholds.multicast_min_site_nodes, 2)))
      return Algorithm::kMulticast;
  }
  // A small message is latency-bound: halving it buys nothing and costs a hop.
  if (size < thresholds.small_bytes) return Algorithm::kBinomial;
  return Algorithm::kMultilane;
}

}  // namespace gridbcast::topology
