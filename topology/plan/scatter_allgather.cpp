// Scatter-allgather broadcast (van de Geijn): the message is cut into p chunks of
// ceil(M/p) bytes; a binomial scatter leaves rank rel (relative to the root) with
// chunks [rel, rel + subtree(rel)); an allgather then completes every rank.
//
// Allgather variants:
//  - recursive doubling: at mask m, each rank trades its aligned group of m
//    chunks with rel ^ m. When p is not a power of two and rel ^ m does not
//    exist, a rank of the other half sends instead, so every rank holds its
//    group of 2m after each step. Chunks the receiver holds are never re-sent.
//  - native ring: p-1 steps; at step s rank rel sends chunk rel-s to rel+1,
//    whether or not rel+1 already holds it (MPICH's and Open MPI's ring).
//  - tuned ring (Zhou et al. 2015, non-enclosed): the same ring, but a chunk
//    the receiver got during the scatter is not sent. With 8 ranks that saves
//    12 of the native ring's 56 chunk transfers; with 10 ranks, 15 of 90.
// All of it on lane 0, as the MPI libraries do on one NIC.
#include <algorithm>
#include <vector>

#include "topology/plan/builder.hpp"

namespace gridbcast::topology {
namespace {

class Holdings {
 public:
  explicit Holdings(int p) : p_(p), bits_(static_cast<size_t>(p) * static_cast<size_t>(p)) {}
  bool has(int rel, int chunk) const { return bits_[index(rel, chunk)]; }
  void add(int rel, int chunk) { bits_[index(rel, chunk)] = true; }

 private:
  size_t index(int rel, int chunk) const {
    return static_cast<size_t>(rel) * static_cast<size_t>(p_) + static_cast<size_t>(chunk);
  }
  int p_;
  std::vector<bool> bits_;
};

struct ChunkSend {
  int from;
  int to;
  int chunk;
};

}  // namespace

Plan build_scatter_allgather(const Grid& grid, Algorithm variant, int root, std::uint64_t size) {
  detail::PlanBuilder b(grid, variant, root, size);
  const int p = b.ranks();
  const detail::Chunks chunks{
      size, p,
      p == 0 ? 0 : (size + static_cast<std::uint64_t>(p) - 1) / static_cast<std::uint64_t>(p)};
  Holdings holds(p);
  for (int c = 0; c < p; ++c) holds.add(0, c);

  // Binomial scatter: parent = rel with its lowest bit cleared.
  for (int rel = 1; rel < p; ++rel) {
    const int sub = std::min(rel & -rel, p - rel);
    b.send(b.absolute(rel & (rel - 1)), b.absolute(rel), chunks.begin(rel),
           chunks.end(rel + sub - 1) - chunks.begin(rel), 0);
    for (int c = rel; c < rel + sub; ++c) holds.add(rel, c);
  }

  // Sends chunk runs [first, last] from one rank to another as contiguous ranges.
  auto send_chunks = [&](const std::vector<ChunkSend>& sends) {
    size_t i = 0;
    while (i < sends.size()) {
      size_t j = i;
      while (j + 1 < sends.size() && sends[j + 1].from == sends[i].from &&
             sends[j + 1].to == sends[i].to && sends[j + 1].chunk == sends[j].chunk + 1)
        ++j;
      const auto begin = chunks.begin(sends[i].chunk);
      b.send(b.absolute(sends[i].from), b.absolute(sends[i].to), begin,
             chunks.end(sends[j].chunk) - begin, 0);
      i = j + 1;
    }
    for (const auto& s : sends) holds.add(s.to, s.chunk);
  };

  if (variant == Algorithm::kScatterRd) {
    for (int m = 1; m < p; m <<= 1) {
      std::vector<ChunkSend> step;
      for (int rel = 0; rel < p; ++rel) {
        const int own_start = rel & ~(m - 1);
        const int other_start = own_start ^ m;
        if (other_start >= p) continue;  // the other half is empty
        const int other_count = std::min(m, p - other_start);
        int sender = rel ^ m;
        if (sender >= p) sender = other_start + (rel - own_start) % other_count;
        for (int c = other_start; c < other_start + other_count; ++c)
          if (!holds.has(rel, c)) step.push_back({sender, rel, c});
      }
      send_chunks(step);
    }
  } else {
    const bool tuned = variant == Algorithm::kScatterRingTuned;
    for (int s = 0; s + 1 < p; ++s) {
      std::vector<ChunkSend> step;
      for (int rel = 0; rel < p; ++rel) {
        const int to = (rel + 1) % p;
        const int chunk = ((rel - s) % p + p) % p;
        if (tuned && holds.has(to, chunk)) continue;
        step.push_back({rel, to, chunk});
      }
      send_chunks(step);
    }
  }
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
