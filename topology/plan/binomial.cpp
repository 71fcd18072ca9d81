// Binomial tree over ranks relative to the root. Rank rel receives the whole
// message from rel with its lowest set bit cleared:
//
//   0 ──► 1        (mask 1)
//   0 ──► 2 ──► 3  (mask 2, then 1)
//   0 ──► 4 ──► 5, 4 ──► 6 ──► 7
//
// log2(p) hops; every edge carries M. A parent's k-th child gets lane k mod 2
// so that a parent with several children spreads them over its lanes.
#include "topology/plan/builder.hpp"

namespace gridbcast::topology {

Plan build_binomial(const Grid& grid, int root, std::uint64_t size) {
  detail::PlanBuilder b(grid, Algorithm::kBinomial, root, size);
  const int p = b.ranks();
  for (int rel = 1; rel < p; ++rel) {
    const int parent = rel & (rel - 1);
    const int low = rel & -rel;
    // Children of `parent` are parent + 1, parent + 2, parent + 4, ...; this is
    // child number log2(low).
    int index = 0;
    for (int m = 1; m < low; m <<= 1) ++index;
    b.send(b.absolute(parent), b.absolute(rel), 0, size, index % 2);
  }
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
