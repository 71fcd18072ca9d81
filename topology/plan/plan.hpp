// A Plan is one broadcast as pure data: who sends which byte range to whom, on
// which lanes, over how many parallel streams. Builders never touch a socket; the
// runtime executes Plans, `gridbcast plan` prints them, tests check them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::topology {

enum class Algorithm {
  kMultilane,         // two binary trees per site and lane pair, leaf swap, chained sites
  kBinomial,          // latency-optimal for small messages
  kScatterRd,         // binomial scatter + recursive-doubling allgather
  kScatterRing,       // binomial scatter + native ring allgather (p-1 full steps)
  kScatterRingTuned,  // binomial scatter + ring that skips chunks the receiver owns
  kChain,             // pipelined chain
  kBinary,            // pipelined binary tree
  kMulticast,         // IP multicast inside each site, a reliable ring behind it, sites chained
  kCirculant,         // Träff's round-optimal n-block circulant schedule per site and lane
};

struct AlgorithmInfo {
  Algorithm id;
  std::string_view name;
  std::string_view description;
};

// The registry, in a stable order.
const std::vector<AlgorithmInfo>& algorithms();
std::string_view algorithm_name(Algorithm a);
// Accepts the registry names; nullopt for anything else.
std::optional<Algorithm> parse_algorithm(std::string_view name);

// "This byte range goes from this rank's lane to that rank's lane, over this
// many streams." A transfer is sent once; the executor pipelines it in segments
// (topology/plan/segments.hpp).
struct Transfer {
  int from = 0;
  int to = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  int lane_from = 0;
  int lane_to = 0;
  int streams = 1;

  bool operator==(const Transfer&) const = default;
};

// "This rank multicasts bytes [offset, offset + length) on this lane to its
// site's group, which the ranks in `to` join." Best effort: datagrams may be
// lost, so a plan's transfers alone deliver every byte (the reliable ring of
// the multicast algorithm), and a multicast only lets a rank hold, and forward,
// bytes before its transfer brings them. Only the multicast algorithm has them.
struct Multicast {
  int from = 0;
  int lane = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<int> to;  // ascending, all in the sender's site

  bool operator==(const Multicast&) const = default;
};

// Transfers are listed in a causal order: when a transfer is listed, its sender
// is the root or has received the whole range from transfers listed before it.
// No transfer has length 0.
struct Plan {
  Algorithm algorithm = Algorithm::kMultilane;
  int ranks = 0;
  int root = 0;
  std::uint64_t size = 0;
  int wan_streams = 1;
  int lanes = 2;  // lanes every rank opens (Grid::lane_count); transfers use 0..lanes-1
  // Circulant: the block its parts are cut into (each part's last block may
  // be shorter; topology/plan/circulant.hpp), which is also its segment: one
  // block, one frame. 0 for the other algorithms and for an empty message.
  std::uint64_t block_bytes = 0;
  std::vector<Transfer> transfers;
  std::vector<Multicast> multicasts;  // at most one per site; see Multicast
};

// Why `algorithm` cannot run on `grid`, empty when it can. Only multicast has
// preconditions: every site of two or more nodes carries IP multicast, and no
// rate limit applies (Grid::rate_limited).
std::string algorithm_unavailable(const Grid& grid, Algorithm algorithm);
// The registry's algorithms `grid` can run, in registry order.
std::vector<Algorithm> available_algorithms(const Grid& grid);

// Throws std::invalid_argument for a root outside [0, ranks), and with
// algorithm_unavailable's reason for an algorithm the grid cannot run.
Plan build_plan(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size);

// The builders, one file each under topology/plan/.
Plan build_multilane(const Grid& grid, int root, std::uint64_t size);
Plan build_binomial(const Grid& grid, int root, std::uint64_t size);
Plan build_scatter_allgather(const Grid& grid, Algorithm variant, int root, std::uint64_t size);
Plan build_chain(const Grid& grid, int root, std::uint64_t size);
Plan build_binary(const Grid& grid, int root, std::uint64_t size);
// Throws std::invalid_argument, naming the site, when a site of two or more
// nodes does not carry multicast (`multicast: true` in the topology).
Plan build_multicast(const Grid& grid, int root, std::uint64_t size);
// Blocks and schedule tables: topology/plan/circulant.hpp.
// Circulant's blocks: the topology's `segment` if it gives one, else the
// cost model's choice (topology::model_circulant_block, topology/select.hpp).
Plan build_circulant(const Grid& grid, int root, std::uint64_t size);
// With blocks of `block_bytes` (at least 1; grown only past the transfer cap,
// circulant_blocks).
Plan build_circulant(const Grid& grid, int root, std::uint64_t size, std::uint64_t block_bytes);

// Algorithm selection by size and shape. Thresholds are named and overridable;
// see docs/ALGORITHMS.md for the rationale.
struct SelectionThresholds {
  // Below this many bytes, latency dominates: binomial (log p hops, no halves).
  std::uint64_t small_bytes = 64 * 1024;
  // Below this many bytes, on a grid where multicast is available and some
  // site has at least multicast_min_site_nodes nodes: multicast. 0 (the
  // default): never, because in the emulated grid it has not measured faster
  // than multilane or binomial at any size (docs/PERFORMANCE.md, "Multicast").
  std::uint64_t multicast_bytes = 0;
  int multicast_min_site_nodes = 16;
  // Some threshold was given (the environment, or the provider's
  // configuration): `auto` follows the thresholds, not the cost model
  // (topology/select.hpp).
  bool given = false;
  // Reads GRIDBCAST_SMALL_BYTES, GRIDBCAST_MULTICAST_BYTES and
  // GRIDBCAST_MULTICAST_MIN_SITE_NODES from the environment when set.
  static SelectionThresholds from_environment();
};
// The thresholds' rule: multicast below multicast_bytes where a site is large
// enough, binomial below small_bytes, multilane above. `auto` uses it when
// thresholds are given; otherwise the cost model decides (select_algorithm in
// topology/select.hpp).
Algorithm threshold_algorithm(const Grid& grid, std::uint64_t size,
                              const SelectionThresholds& thresholds = SelectionThresholds{});

}  // namespace gridbcast::topology
