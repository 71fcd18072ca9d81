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

std::vector<std::string> JobParams::to_fields() const {
  return {algorithm,
          std::to_string(root),
          std::to_string(size),
          std::to_string(iterations),
          random_roots ? "1" : "0",
          random_sizes ? "1" : "0",
          std::to_string(seed),
          std::to_string(segment_bytes),
          std::to_string(timeout_ms),
          file,
          output,
          verify ? "1" : "0",
          program ? "1" : "0",
          bench,
          cert_dir};
}

JobParams JobParams::from_fields(const std::vector<std::string>& f, size_t first) {
  if (f.size() < first + 12) throw std::runtime_error("job parameters incomplete");
  JobParams p;
  size_t i = first;
  p.algorithm = f[i++];
  p.root = std::stoi(f[i++]);
  p.size = std::stoull(f[i++]);
  p.iterations = std::stoi(f[i++]);
  p.random_roots = f[i++] == "1";
  p.random_sizes = f[i++] == "1";
  p.seed = std::stoull(f[i++]);
  p.segment_bytes = std::stoull(f[i++]);
  p.timeout_ms = std::stoll(f[i++]);
  p.file = f[i++];
  p.output = f[i++];
  p.verify = f[i++] == "1";
  p.program = i < f.size() && f[i] == "1";
  ++i;
  if (i < f.size()) p.bench = f[i];
  ++i;
  if (i < f.size()) p.cert_dir = f[i];
  return p;
}

Iteration iteration_at(const JobParams& p, int index, const topology::Grid& grid) {
  const std::uint64_t r = splitmix(p.seed * 1000003u + static_cast<std::uint64_t>(index));
  Iteration it{p.root, p.size, p.algorithm};
  if (p.random_roots) it.root = static_cast<int>(r % static_cast<std::uint64_t>(grid.size()));
  if (p.random_sizes) it.size = splitmix(r) % (p.size + 1);
  if (p.algorithm == "random") {
    const auto& all = topology::algorithms();
    it.algorithm = std::string(all[splitmix(r + 7) % all.size()].name);
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
