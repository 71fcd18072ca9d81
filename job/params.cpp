#include "job/params.hpp"

#include <stdexcept>

#include "topology/plan/plan.hpp"

namespace gridbcast::job {
namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::string job_kind_name(JobKind kind) {
  switch (kind) {
    case JobKind::kBroadcast:
      return "broadcast";
    case JobKind::kBench:
      return "bench";
    case JobKind::kProgram:
      return "program";
    case JobKind::kProbe:
      return "probe";
  }
  return "kind " + std::to_string(static_cast<int>(kind));
}

Iteration iteration_at(const JobParams& p, int index, const topology::Grid& grid) {
  const std::uint64_t r = splitmix(p.seed * 1000003u + static_cast<std::uint64_t>(index));
  Iteration it{p.root, p.size, p.algorithm};
  if (p.random_roots) it.root = static_cast<int>(r % static_cast<std::uint64_t>(grid.size()));
  if (p.random_sizes) it.size = splitmix(r) % (p.size + 1);
  if (p.algorithm == "random") {
    const auto all = topology::available_algorithms(grid);
    it.algorithm = std::string(topology::algorithm_name(all[splitmix(r + 7) % all.size()]));
  }
  return it;
}

std::string output_path(const std::string& pattern, int rank, const std::string& node) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 6, "{rank}") == 0) {
      out += std::to_string(rank);
      i += 6;
    } else if (pattern.compare(i, 6, "{node}") == 0) {
      out += node;
      i += 6;
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

}  // namespace gridbcast::job
