// Checks a Plan against the properties every broadcast must have. Used by the
// property tests and by `gridbcast plan --check`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

struct PlanStats {
  // Per logical lane (0 .. plan.lanes-1), then rank: bytes sent and received.
  std::vector<std::vector<std::uint64_t>> out_bytes;
  std::vector<std::vector<std::uint64_t>> in_bytes;
  std::vector<std::uint64_t> received;  // per rank, counting duplicates
  std::uint64_t wan_bytes = 0;          // bytes on transfers between sites
  std::uint64_t duplicate_bytes = 0;    // bytes received by a rank that held them
  std::vector<int> depth;  // hops from the root (0 for the root); multilane: of its deepest byte
  std::vector<int> site_depth;  // per site: deepest hop count inside it
};

struct PlanCheck {
  std::vector<std::string> errors;  // empty when every property holds
  PlanStats stats;
  bool ok() const { return errors.empty(); }
};

// Coverage, causality, well-formedness (ranks, ranges, lanes, stream counts),
// and exactness unless the algorithm is the native ring. For multilane also the
// per-lane, per-rank, WAN-volume and depth properties (docs/ALGORITHMS.md).
PlanCheck verify_plan(const Grid& grid, const Plan& plan);

}  // namespace gridbcast::topology
