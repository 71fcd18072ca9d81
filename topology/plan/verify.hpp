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
  // Circulant only: per site, then lane, the rounds the site's transfers on
  // that lane take when, in list order, each runs in the first round in which
  // its sender holds the block (from an earlier round, or from outside the
  // site) and neither end has sent (sender) or received (receiver) a block on
  // that lane yet. n - 1 + q for a round-optimal plan (see verify_plan).
  std::vector<std::vector<std::int64_t>> circulant_rounds;
};

struct PlanCheck {
  std::vector<std::string> errors;  // empty when every property holds
  PlanStats stats;
  bool ok() const { return errors.empty(); }
};

// Coverage, causality, well-formedness (ranks, ranges, lanes, stream counts),
// and exactness unless the algorithm is the native ring. For multilane also the
// per-lane, per-rank, WAN-volume and depth properties (docs/ALGORITHMS.md).
//
// For circulant, with the parts and blocks circulant_parts(grid, size,
// plan.block_bytes) gives (topology/plan/circulant.hpp: part l on lane l, n_l
// blocks of the plan's block, grown only past the transfer cap; a plan that
// states no block fails):
// - every transfer is one block of its lane's part, on that lane at both ends;
// - per site and lane, one rank (the broadcast root in its site, elsewhere
//   the node the WAN feeds) receives nothing inside the site and every other
//   rank receives exactly n blocks there (with exactness: each block once);
// - load: no rank sends more than n - 1 + q blocks on a lane, in its site and
//   to the next one together: what the instance's root must send (n for a
//   one-node site, whose node feeds all n on);
// - rounds: the site's transfers on the lane, placed in list order into
//   one-ported rounds (stats.circulant_rounds), take at most n - 1 + q rounds,
//   q = ceil(log2 p) for the site's p nodes. No plan does better (the root
//   sends one block per round, and the last one reaches at most 2^j ranks j
//   rounds later), and a plan listed round by round never needs more than its
//   own rounds, so this holds exactly for round-optimal plans. A pipelined
//   chain of blocks (n + p - 2 rounds, too many from p = 4 on) or a binomial
//   tree per block (the root alone sends n q blocks) fails it. Send and
//   receive tables that disagree (as MPICH's refactored ones do for p = 33,
//   docs/ALGORITHMS.md) fail coverage and exactness instead: a block arrives
//   twice and another never;
// - (sites - 1) M bytes cross sites.
PlanCheck verify_plan(const Grid& grid, const Plan& plan);

}  // namespace gridbcast::topology
