// Träff's round-optimal n-block broadcast on a circulant graph, as pure data:
// the schedule of one instance (who sends which block to whom in which round)
// and how the circulant plan cuts a message into blocks. The builder is
// topology/plan/circulant.cpp; docs/ALGORITHMS.md, "Circulant (Träff)",
// explains the schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::topology {

// The schedule of one instance over p ranks, in relative ranks (the instance's
// root is 0). One-ported and bidirectional: in every round each rank sends at
// most one block and receives at most one. Round k of a phase (q rounds) joins
// r to (r + skips()[k]) mod p; n blocks take n - 1 + q rounds, the fewest any
// such schedule can (q = ceil(log2 p)).
class CirculantSchedule {
 public:
  // Throws std::invalid_argument for p < 1.
  explicit CirculantSchedule(int p);

  int ranks() const { return p_; }
  int q() const { return q_; }
  // q + 1 entries: skips[q] = p, skips[k] = ceil(skips[k+1] / 2), so skips[0] = 1.
  const std::vector<int>& skips() const { return skips_; }
  // The index of the last skip in r's greedy decomposition into skips (the
  // block r is the first to get in every phase); q for the root.
  int baseblock(int r) const { return base_[static_cast<size_t>(r)]; }
  // The phase-relative block r receives (sends) in round k of a phase; in the
  // phase starting at block offset `off` the block is this + off, nothing when
  // negative. send_block(r, k) is by definition recv_block(r + skips[k], k), so
  // sender and receiver always agree.
  int recv_block(int r, int k) const { return recv_[index(r, k)]; }
  int send_block(int r, int k) const { return send_[index(r, k)]; }

  // Rounds for n >= 1 blocks: n - 1 + q (0 for one rank: nothing moves).
  std::int64_t rounds(std::int64_t blocks) const;

  struct Step {
    int from = 0;  // relative ranks
    int to = 0;
    std::int64_t block = 0;  // 0 .. blocks - 1
    bool operator==(const Step&) const = default;
  };
  // What moves in round `round` (0 <= round < rounds(blocks)), by sender.
  // Throws std::out_of_range for a round outside that.
  std::vector<Step> round(std::int64_t round, std::int64_t blocks) const;

 private:
  size_t index(int r, int k) const {
    return static_cast<size_t>(r) * static_cast<size_t>(q_) + static_cast<size_t>(k);
  }
  void compute_recv(int r);

  int p_ = 1;
  int q_ = 0;
  std::vector<int> skips_;
  std::vector<int> base_;
  std::vector<int> recv_;  // [r * q + k]
  std::vector<int> send_;
};

// Blocks per part are capped so a plan stays a reasonable list: at most
// kCirculantMaxBlocks per part, and about kCirculantMaxTransfers transfers in
// a whole plan (ranks x lanes x blocks; a Transfer is 48 bytes, and every rank
// builds the plan). Past the cap blocks grow, in whole segments.
inline constexpr std::uint64_t kCirculantMaxBlocks = std::uint64_t{1} << 16;
inline constexpr std::uint64_t kCirculantMaxTransfers = std::uint64_t{1} << 20;

struct CirculantBlocks {
  std::uint64_t block_bytes = 0;  // every block but the last, which may be shorter
  std::uint64_t count = 0;        // n; 0 only for an empty part
};

// n = ceil(part / segment): one block is one segment, so one transfer is one
// frame of the executor. When that exceeds max_blocks (at least 1), the block
// grows to the smallest multiple of the segment that keeps n <= max_blocks.
// A segment of 0 counts as 1; a block is never longer than the part.
CirculantBlocks circulant_blocks(std::uint64_t part_bytes, std::uint64_t segment_bytes,
                                 std::uint64_t max_blocks = kCirculantMaxBlocks);

// The block cap for a grid of `ranks` ranks and `lanes` lanes:
// kCirculantMaxTransfers / (ranks x lanes), within 1 .. kCirculantMaxBlocks.
std::uint64_t circulant_max_blocks(int ranks, int lanes);

// Lane l's part of the message and its blocks.
struct CirculantPart {
  int lane = 0;
  std::uint64_t offset = 0;  // ceil(l * M / k)
  std::uint64_t length = 0;  // up to ceil((l + 1) * M / k); 0 when M < k leaves it empty
  CirculantBlocks blocks;

  std::uint64_t block_offset(std::uint64_t j) const { return offset + j * blocks.block_bytes; }
  std::uint64_t block_length(std::uint64_t j) const;
};

// The parts of a broadcast of `size` bytes on `grid`, one per lane
// (grid.lane_count()), each cut into blocks of `block_bytes` (Plan::
// block_bytes), within circulant_max_blocks(grid.size(), lanes).
std::vector<CirculantPart> circulant_parts(const Grid& grid, std::uint64_t size,
                                           std::uint64_t block_bytes);

}  // namespace gridbcast::topology
