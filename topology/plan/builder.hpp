// Shared by the plan builders (internal to topology/plan).
#pragma once

#include <cstdint>

#include "topology/plan/plan.hpp"

namespace gridbcast::topology::detail {

// Collects transfers, skipping empty ones and filling in the stream count.
class PlanBuilder {
 public:
  PlanBuilder(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size);

  void send(int from, int to, std::uint64_t offset, std::uint64_t length, int lane_from,
            int lane_to);
  void send(int from, int to, std::uint64_t offset, std::uint64_t length, int lane) {
    send(from, to, offset, length, lane, lane);
  }
  int ranks() const { return plan_.ranks; }
  int root() const { return plan_.root; }
  std::uint64_t size() const { return plan_.size; }
  int plan_lanes() const { return plan_.lanes; }
  const Grid& grid() const { return grid_; }
  void set_block_bytes(std::uint64_t b) { plan_.block_bytes = b; }
  // Rank at a position relative to the root: (root + rel) mod p.
  int absolute(int rel) const { return (plan_.root + rel) % plan_.ranks; }

  Plan finish() && { return std::move(plan_); }

 private:
  const Grid& grid_;
  Plan plan_;
};

// Start of part i of k equal parts of `size` bytes: ceil(i * size / k), without
// overflow. Multilane and circulant cut the message into their lanes' parts so.
inline std::uint64_t part_begin(std::uint64_t size, int k, int i) {
  const auto uk = static_cast<std::uint64_t>(k), ui = static_cast<std::uint64_t>(i);
  const std::uint64_t q = size / uk, r = size % uk;
  return ui * q + (ui * r + uk - 1) / uk;
}

// Chunking used by the scatter-allgather family: p chunks of ceil(M/p) bytes,
// the last ones possibly short or empty.
struct Chunks {
  std::uint64_t size;
  int count;
  std::uint64_t chunk;
  std::uint64_t begin(int k) const;
  std::uint64_t end(int k) const;
};

}  // namespace gridbcast::topology::detail
