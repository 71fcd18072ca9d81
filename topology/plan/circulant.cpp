// Round-optimal n-block broadcast on a circulant graph (J. L. Träff,
// "Round-optimal n-Block Broadcast Schedules in Logarithmic Time", ACM TOPC
// 2025, doi 10.1145/3735139, arXiv 2312.11236), one instance per lane and
// site, sites chained over the WAN.
//
// One instance (CirculantSchedule), p ranks relative to its root, q =
// ceil(log2 p): skips[q] = p, skips[k] = ceil(skips[k+1] / 2). Rounds come in
// phases of q; in round k of a phase rank r sends one block to
// (r + skips[k]) mod p and receives one from (r - skips[k]) mod p. Every rank
// computes, without communication, the block it receives in each round of a
// phase (recv_block, a depth-first search over sums of skips, O(log p)) and
// sends what its target expects (send_block(r, k) = recv_block(r + skips[k],
// k)). n blocks take n - 1 + q rounds: the root injects one block per round and
// the last one needs q doubling rounds (docs/ALGORITHMS.md has the tables).
//
// The plan. The message is cut into k parts as multilane cuts them, part l =
// [ceil(lM/k), ceil((l+1)M/k)) on lane l, each part into n blocks of one
// segment (circulant_parts). In every site every lane runs one instance over
// the site's nodes, in site order rotated so that the lane's entry is relative
// rank 0: the broadcast root in its own site, elsewhere the site's node
// l mod (nodes), so the WAN receives of k lanes land on k nodes. Inside a site
// every lane is a switch of its own: lane_from = lane_to = l.
//
// Chaining. Sites follow Grid::site_chain (depth-first over the WAN from the
// root's site) and each one feeds the next, as multilane chains them (a hop
// between sites that are not neighbours is routed over the WAN path). Every
// block crosses each hop once, one block per transfer: (sites - 1) M over the
// WAN. The feeds take the instance's idle send slots: a rank whose target is
// the root, or that holds nothing to send yet, sends nothing in that round,
// and an instance has n + p (q - 1) such slots for its n blocks. In every
// round each idle rank feeds the lowest block it holds that has not crossed
// yet; what is left after the last round (mostly block n - 1, which only the
// last rounds spread) goes from the rank that has sent the fewest blocks. So
// no rank sends more blocks on a lane than the instance's root must, n - 1 +
// q (n for a one-node site, whose node feeds every block), which verify_plan
// checks. For p = 8, n = 4 (the round table in docs/ALGORITHMS.md):
//
//     site A, lane l                                          site B, lane l
//     rounds 0-2  the idle ranks hold nothing yet
//     round 3     rank 7 idle (its target is the root) ══ block 0 ══╗
//     round 4     rank 6 idle                          ══ block 1 ══╬══► e = B's node
//     round 5     rank 4 idle                          ══ block 2 ══╣    l mod |B|, the
//     then        rank 7 (the fewest blocks sent)      ══ block 3 ══╝    root of B's lane l
//
// Order. Transfers are listed round by round, lanes interleaved, each round's
// feeds after its transfers, the rest of a lane's feeds after its last round.
// A rank only sends a block a round after the one that brought it, so the
// list is causal, and the WAN hop runs block by block behind the site instead
// of waiting for whole parts (the executor sends a link's transfers in list
// order, so a whole-part feed would also hold back every block that arrived
// early behind one that had not).
#include "topology/plan/circulant.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "topology/plan/builder.hpp"
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"

namespace gridbcast::topology {
namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// The receive search of one rank (the paper's depth-first search over sums of
// skips). Candidates are sums v = skips[e1] + skips[e2] + ... with strictly
// decreasing indices taken from a list of unused indices (q .. 0 less the
// baseblock); round k wants one in (top - skips[k+1], top - skips[k]] with top
// = r + p, so nothing wraps. The windows move down as k grows and accepted
// sums strictly decrease, so the search never restarts.
class ReceiveSearch {
 public:
  ReceiveSearch(const std::vector<int>& skips, int q, int r, int baseblock)
      : skips_(skips), q_(q), top_(static_cast<std::int64_t>(r) + skips[static_cast<size_t>(q)]) {
    for (int e = 0; e <= q; ++e) {
      next_[static_cast<size_t>(e)] = e - 1;
      prev_[static_cast<size_t>(e)] = e == q ? -1 : e + 1;
    }
    unlink(baseblock);
  }

  // The skip index accepted in each round k = 0 .. q-1 (q: the root's, that
  // is this phase's new block).
  const std::array<int, 32>& run() {
    search(0, 2 * top_, q_);
    if (k_ != q_) throw std::logic_error("circulant: the receive search ended early");
    return picks_;
  }

 private:
  std::int64_t skip(int e) const { return skips_[static_cast<size_t>(e)]; }
  void unlink(int e) {
    const auto ue = static_cast<size_t>(e);
    if (prev_[ue] != -1) next_[static_cast<size_t>(prev_[ue])] = next_[ue];
    if (next_[ue] != -1) prev_[static_cast<size_t>(next_[ue])] = prev_[ue];
  }

  void search(std::int64_t base, std::int64_t bound, int e) {
    while (e != -1 && k_ < q_) {
      const std::int64_t v = base + skip(e);
      if (v <= top_ - skip(k_) && v < bound) {
        if (v <= top_ - skip(k_ + 1)) {  // not yet in the window: extend the sum
          search(v, bound, next_[static_cast<size_t>(e)]);
          if (k_ >= q_) return;
        }
        if (base > top_ - skip(k_ + 1)) return;  // the parent sum left the window
        picks_[static_cast<size_t>(k_)] = e;
        bound = v;
        ++k_;
        unlink(e);
      }
      e = next_[static_cast<size_t>(e)];
    }
  }

  const std::vector<int>& skips_;
  const int q_;
  const std::int64_t top_;
  int k_ = 0;
  std::array<int, 33> next_{};  // q <= 31: p is an int
  std::array<int, 33> prev_{};
  std::array<int, 32> picks_{};
};

}  // namespace

CirculantSchedule::CirculantSchedule(int p) : p_(p) {
  if (p < 1) throw std::invalid_argument("circulant schedule of " + std::to_string(p) + " ranks");
  q_ = static_cast<int>(std::bit_width(static_cast<unsigned>(p - 1)));
  skips_.assign(static_cast<size_t>(q_) + 1, 0);
  skips_[static_cast<size_t>(q_)] = p;
  for (int k = q_ - 1; k >= 0; --k)
    skips_[static_cast<size_t>(k)] = (skips_[static_cast<size_t>(k) + 1] + 1) / 2;

  base_.assign(static_cast<size_t>(p), q_);
  for (int r = 1; r < p; ++r) {
    int rest = r;
    for (int k = q_ - 1; k >= 0; --k) {
      if (rest < skips_[static_cast<size_t>(k)]) continue;
      rest -= skips_[static_cast<size_t>(k)];
      if (rest == 0) {
        base_[static_cast<size_t>(r)] = k;
        break;
      }
    }
  }

  recv_.assign(static_cast<size_t>(p) * static_cast<size_t>(q_), 0);
  send_.assign(recv_.size(), 0);
  for (int r = 0; r < p; ++r) compute_recv(r);
  // Sends are what the target expects, so both ends agree by construction.
  // The root sends block k in round k; sends to the root are never executed.
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < q_; ++k)
      send_[index(r, k)] = r == 0 ? k : recv_[index((r + skips_[static_cast<size_t>(k)]) % p, k)];
}

void CirculantSchedule::compute_recv(int r) {
  const int b = base_[static_cast<size_t>(r)];
  ReceiveSearch search(skips_, q_, r, b);
  const auto& picks = search.run();
  // Pick q (the root) is this phase's new block, the baseblock b; any other
  // pick e is block e of the previous phase, e - q.
  for (int k = 0; k < q_; ++k) {
    const int e = picks[static_cast<size_t>(k)];
    recv_[index(r, k)] = e == q_ ? b : e - q_;
  }
}

std::int64_t CirculantSchedule::rounds(std::int64_t blocks) const {
  if (p_ == 1 || blocks < 1) return 0;
  return blocks - 1 + q_;
}

std::vector<CirculantSchedule::Step> CirculantSchedule::round(std::int64_t round,
                                                              std::int64_t blocks) const {
  if (round < 0 || round >= rounds(blocks))
    throw std::out_of_range("circulant round " + std::to_string(round) + " of " +
                            std::to_string(rounds(blocks)));
  // Rounds are aligned so that the last one is round q-1 of a phase: x virtual
  // blocks -x .. -1, held by everyone, fill the first phase, and its first x
  // rounds are skipped. In the last phase (offset n-1) every block past n-1 is
  // n-1, which every rank then receives exactly once.
  const std::int64_t q = q_;
  const std::int64_t x = (q - (blocks - 1) % q) % q;
  const std::int64_t i = round + x;
  const int k = static_cast<int>(i % q);
  const std::int64_t off = (i / q) * q - x;
  const int skip = skips_[static_cast<size_t>(k)];
  std::vector<Step> steps;
  for (int r = 0; r < p_; ++r) {
    const int to = (r + skip) % p_;
    const std::int64_t block = send_block(r, k) + off;
    if (block < 0 || to == 0) continue;
    steps.push_back(Step{r, to, std::min(block, blocks - 1)});
  }
  return steps;
}

CirculantBlocks circulant_blocks(std::uint64_t part_bytes, std::uint64_t segment_bytes,
                                 std::uint64_t max_blocks) {
  if (part_bytes == 0) return {};
  const std::uint64_t segment = std::max<std::uint64_t>(segment_bytes, 1);
  max_blocks = std::max<std::uint64_t>(max_blocks, 1);
  std::uint64_t block = segment;
  if (ceil_div(part_bytes, segment) > max_blocks) {
    // Whole segments per block, so the executor's frames still tile each one.
    const std::uint64_t least = ceil_div(part_bytes, max_blocks);
    const std::uint64_t segments = ceil_div(least, segment);
    block = segments > part_bytes / segment ? part_bytes : segments * segment;
  }
  block = std::min(block, part_bytes);
  return CirculantBlocks{block, ceil_div(part_bytes, block)};
}

std::uint64_t circulant_max_blocks(int ranks, int lanes) {
  const auto per_block = static_cast<std::uint64_t>(std::max(ranks, 1)) *
                         static_cast<std::uint64_t>(std::max(lanes, 1));
  return std::clamp<std::uint64_t>(kCirculantMaxTransfers / per_block, 1, kCirculantMaxBlocks);
}

std::uint64_t CirculantPart::block_length(std::uint64_t j) const {
  const std::uint64_t begin = j * blocks.block_bytes;
  if (j >= blocks.count || begin >= length) return 0;
  return std::min(blocks.block_bytes, length - begin);
}

std::vector<CirculantPart> circulant_parts(const Grid& grid, std::uint64_t size,
                                           std::uint64_t block_bytes) {
  const int k = grid.lane_count();
  const std::uint64_t segment = std::max<std::uint64_t>(block_bytes, 1);
  const std::uint64_t max_blocks = circulant_max_blocks(grid.size(), k);
  std::vector<CirculantPart> parts;
  for (int l = 0; l < k; ++l) {
    const std::uint64_t begin = detail::part_begin(size, k, l);
    const std::uint64_t end = detail::part_begin(size, k, l + 1);
    parts.push_back(
        CirculantPart{l, begin, end - begin, circulant_blocks(end - begin, segment, max_blocks)});
  }
  return parts;
}

namespace {

// One lane's instance in one site.
struct Instance {
  const CirculantPart* part = nullptr;
  std::vector<int> members;  // absolute rank of each relative rank
  int next_entry = -1;       // the next site's entry for this lane, -1: the last site
};

// The site's nodes in site order rotated so `entry` comes first.
std::vector<int> rotated(const std::vector<int>& ranks, int entry) {
  const auto at = std::find(ranks.begin(), ranks.end(), entry);
  if (at == ranks.end())
    throw std::logic_error("circulant: entry rank " + std::to_string(entry) + " not in its site");
  std::vector<int> out(at, ranks.end());
  out.insert(out.end(), ranks.begin(), at);
  return out;
}

// One lane's rounds in one site, and its feeds to the next site.
class LaneEmitter {
 public:
  LaneEmitter(detail::PlanBuilder& b, const CirculantSchedule& schedule, const Instance& lane)
      : b_(b),
        schedule_(schedule),
        lane_(lane),
        blocks_(static_cast<std::int64_t>(lane.part->blocks.count)),
        rounds_(schedule.rounds(blocks_)),
        sends_(lane.members.size(), 0) {
    if (lane.next_entry < 0 || blocks_ == 0) return;
    if (lane.members.size() == 1) {
      // Alone in its site, the node holds the part before any round.
      for (std::int64_t j = 0; j < blocks_; ++j) feed(0, j);
      return;
    }
    for (size_t r = 0; r < lane.members.size(); ++r)
      held_.emplace_back(static_cast<size_t>(blocks_), r == 0 ? 1 : 0);
    for (std::int64_t j = 0; j < blocks_; ++j) unfed_.insert(unfed_.end(), j);
  }

  std::int64_t rounds() const { return rounds_; }

  void round(std::int64_t i) {
    if (i >= rounds_) return;
    const std::vector<CirculantSchedule::Step> steps = schedule_.round(i, blocks_);
    std::vector<char> busy(lane_.members.size(), 0);
    for (const auto& step : steps) {
      send(lane_.members[static_cast<size_t>(step.to)], step.from, step.block);
      busy[static_cast<size_t>(step.from)] = 1;
    }
    if (!unfed_.empty()) {
      // Idle ranks feed what they held before this round. No rank but the
      // root holds a block >= i yet (the root sends block i in round i).
      for (size_t r = lane_.members.size(); r-- > 0;) {
        if (busy[r] || unfed_.empty()) continue;
        for (auto it = unfed_.begin(); it != unfed_.end() && (r == 0 || *it < i); ++it) {
          if (!held_[r][static_cast<size_t>(*it)]) continue;
          feed(r, *it);
          unfed_.erase(it);
          break;
        }
      }
      for (const auto& step : steps)
        held_[static_cast<size_t>(step.to)][static_cast<size_t>(step.block)] = 1;
    }
    if (i + 1 == rounds_) {
      // Every rank holds every block now: the rest goes from the least loaded.
      for (std::int64_t j : unfed_) {
        size_t least = sends_.size() - 1;
        for (size_t r = sends_.size(); r-- > 0;)
          if (sends_[r] < sends_[least]) least = r;
        feed(least, j);
      }
      unfed_.clear();
    }
  }

 private:
  void send(int to, int from_relative, std::int64_t block) {
    const auto j = static_cast<std::uint64_t>(block);
    const int l = lane_.part->lane;
    b_.send(lane_.members[static_cast<size_t>(from_relative)], to, lane_.part->block_offset(j),
            lane_.part->block_length(j), l);
    ++sends_[static_cast<size_t>(from_relative)];
  }
  void feed(size_t from_relative, std::int64_t block) {
    send(lane_.next_entry, static_cast<int>(from_relative), block);
  }

  detail::PlanBuilder& b_;
  const CirculantSchedule& schedule_;
  const Instance& lane_;
  const std::int64_t blocks_;
  const std::int64_t rounds_;
  std::vector<std::int64_t> sends_;      // per relative rank: blocks sent, inside and out
  std::vector<std::vector<char>> held_;  // [relative rank][block], while feeding
  std::set<std::int64_t> unfed_;         // blocks not yet sent to the next site
};

}  // namespace

Plan build_circulant(const Grid& grid, int root, std::uint64_t size) {
  if (size == 0) return build_circulant(grid, root, 0, 1);
  return build_circulant(
      grid, root, size,
      grid.segment_bytes != 0 ? grid.segment_bytes : model_circulant_block(grid, root, size));
}

Plan build_circulant(const Grid& grid, int root, std::uint64_t size, std::uint64_t block_bytes) {
  detail::PlanBuilder b(grid, Algorithm::kCirculant, root, size);
  if (size == 0) return std::move(b).finish();
  block_bytes = std::max<std::uint64_t>(block_bytes, 1);
  b.set_block_bytes(block_bytes);
  const std::vector<CirculantPart> parts = circulant_parts(grid, size, block_bytes);
  const int k = static_cast<int>(parts.size());

  std::vector<int> chain;
  for (int site : grid.site_chain(grid.site_of(root)))
    if (!grid.sites[static_cast<size_t>(site)].ranks.empty()) chain.push_back(site);

  std::map<int, CirculantSchedule> schedules;  // by site size
  std::vector<int> entry(static_cast<size_t>(k), root);
  for (size_t c = 0; c < chain.size(); ++c) {
    const auto& ranks = grid.sites[static_cast<size_t>(chain[c])].ranks;
    const int p = static_cast<int>(ranks.size());
    const CirculantSchedule& schedule = schedules.try_emplace(p, p).first->second;
    const std::vector<int>* next =
        c + 1 < chain.size() ? &grid.sites[static_cast<size_t>(chain[c + 1])].ranks : nullptr;
    std::vector<Instance> lanes;
    for (int l = 0; l < k; ++l) {
      Instance lane;
      lane.part = &parts[static_cast<size_t>(l)];
      lane.members = rotated(ranks, entry[static_cast<size_t>(l)]);
      if (next != nullptr) lane.next_entry = (*next)[static_cast<size_t>(l) % next->size()];
      lanes.push_back(std::move(lane));
    }
    std::vector<LaneEmitter> emitters;
    emitters.reserve(lanes.size());
    std::int64_t rounds = 0;
    for (const Instance& lane : lanes) {
      emitters.emplace_back(b, schedule, lane);
      rounds = std::max(rounds, emitters.back().rounds());
    }
    for (std::int64_t i = 0; i < rounds; ++i)
      for (LaneEmitter& e : emitters) e.round(i);
    for (int l = 0; l < k; ++l)
      entry[static_cast<size_t>(l)] = lanes[static_cast<size_t>(l)].next_entry;
  }
  return std::move(b).finish();
}

}  // namespace gridbcast::topology
