// Pipelined binary tree in heap layout over ranks relative to the root:
//
//          0
//        /   \          child 2i+1 on lane 0, child 2i+2 on lane 1
//       1     2
//      / \   / \.
//     3   4 5   6
//
// Every inner node sends M on each of its two lanes: about 2M/b per hop where b
// is the node's total bandwidth, the baseline multilane halves.
#include "topology/plan/builder.hpp"

namespace gridbcast::topology {

Plan build_binary(const Grid& grid, int root, std::uint64_t size) {
  detail::PlanBuilder b(grid, Algorithm::kBinary, root, size);
  for (int rel = 1; rel < b.ranks(); ++rel)
    b.send(b.absolute((rel - 1) / 2), b.absolute(rel), 0, size, (rel - 1) % 2);
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
