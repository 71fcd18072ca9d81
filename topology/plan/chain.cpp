// Pipelined chain: root ──► root+1 ──► root+2 ──► ... (ranks relative to the
// root, one lane). Bandwidth-optimal per node but p-1 hops of latency.
#include "topology/plan/builder.hpp"

namespace gridbcast::topology {

Plan build_chain(const Grid& grid, int root, std::uint64_t size) {
  detail::PlanBuilder b(grid, Algorithm::kChain, root, size);
  for (int rel = 1; rel < b.ranks(); ++rel)
    b.send(b.absolute(rel - 1), b.absolute(rel), 0, size, 0);
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
