#include "topology/select.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "topology/bound.hpp"
#include "topology/plan/circulant.hpp"
#include "topology/plan/pacing.hpp"
#include "topology/plan/segments.hpp"
#include "topology/units.hpp"

namespace gridbcast::topology {
namespace {

using LaneKey = std::tuple<int, int, bool>;  // (rank, lane, egress)

// Everything analytic_seconds needs that does not depend on the segment,
// worked out once per plan: each transfer's hop rate and latency, each
// lane's rate, the bound's rate.
class Pricer {
 public:
  Pricer(const Grid& grid, const Plan& plan, const CostModel& model)
      : plan_(plan), c_(segment_overhead(grid, model)), forward_(model.forward_bytes) {
    if (plan.transfers.empty() || plan.size == 0 || grid.size() < 2) return;
    const double eff = model.payload_efficiency;
    // Each lane's part of its NIC, shared among the links the plan gives it
    // (as the paces share it: topology/plan/pacing.hpp).
    const auto shares = lane_shares(grid, plan);
    std::map<std::tuple<int, int, int, int>, int> links;
    std::map<LaneKey, int> links_on_lane;
    for (const Transfer& t : plan.transfers)
      if (links.emplace(std::make_tuple(t.from, t.to, t.lane_from, t.lane_to), links_).second) {
        ++links_;
        ++links_on_lane[{t.from, t.lane_from, true}];
        ++links_on_lane[{t.to, t.lane_to, false}];
      }
    const auto hop_latency = [&](int site) {
      const double l = grid.sites[static_cast<size_t>(site)].latency_s;
      return l > 0 ? l : model.lan_latency_s;
    };
    // Under a rate limit every link runs at most at its pace (pacing.hpp),
    // which in trees is below what the lanes would give it: as simulate().
    const std::vector<LinkPace> paces =
        grid.rate_limited() ? link_paces(grid, plan) : std::vector<LinkPace>{};
    std::map<LaneKey, int> lane_index;
    for (const Transfer& t : plan.transfers) {
      const auto& src = grid.nodes[static_cast<size_t>(t.from)];
      const auto& dst = grid.nodes[static_cast<size_t>(t.to)];
      double bps = std::min(
          shares.at({t.from, t.lane_from, true}) / links_on_lane.at({t.from, t.lane_from, true}),
          shares.at({t.to, t.lane_to, false}) / links_on_lane.at({t.to, t.lane_to, false}));
      double latency = hop_latency(dst.site) + hop_overhead(grid, model);
      double stream_bps = 1e300;  // one TCP stream's limit (a WAN path's)
      if (src.site != dst.site) {
        double one_way = 0, pass = 1;
        for (const WanLink* l : grid.wan_path(src.site, dst.site)) {
          one_way += l->latency_s;
          pass *= 1 - l->loss;
          bps = std::min(bps, l->rate_bps());
        }
        latency += one_way;
        CostModel tcp = model;
        if (const std::string cc = grid.congestion_between(t.from, t.to); !cc.empty())
          tcp.congestion = parse_congestion(cc).value_or(Congestion::kLossBased);
        const double rtt = 2 * one_way + hop_latency(src.site) + hop_latency(dst.site);
        stream_bps = tcp_stream_limit(rtt, 1 - pass, tcp) * 8 / eff;
      }
      if (const double pace = pace_of(paces, t.from, t.to, t.lane_from, t.lane_to); pace > 0)
        bps = std::min(bps, pace * std::max(1, t.streams) * 8 / kPacedPayloadShare);
      Hop h;
      h.rate = bps / 8 * eff;  // payload bytes per second
      h.stream_rate = stream_bps / 8 * eff;
      h.streams = std::max(1, t.streams);
      h.latency = latency;
      // The transfers of one link share its connections (a bundle across a
      // WAN link), so they are paced by its rate together.
      h.link = links.at(std::make_tuple(t.from, t.to, t.lane_from, t.lane_to));
      for (int k = 0; k < 2; ++k) {
        const LaneKey key =
            k == 0 ? LaneKey{t.from, t.lane_from, true} : LaneKey{t.to, t.lane_to, false};
        auto [it, fresh] = lane_index.emplace(key, static_cast<int>(lane_rate_.size()));
        if (fresh) lane_rate_.push_back(shares.at(key) / 8 * eff);
        h.lanes[k] = it->second;
      }
      hops_.push_back(h);
    }
    link_bytes_.assign(static_cast<size_t>(links_), 0);
    for (size_t i = 0; i < hops_.size(); ++i)
      link_bytes_[static_cast<size_t>(hops_[i].link)] +=
          static_cast<double>(plan.transfers[i].length);
    const MaxFlowBound bound = max_flow_bound(grid, plan.root);
    rate_ = bound.rate_bps / 8 * eff;
    ranks_ = grid.size();
  }

  double seconds(std::uint64_t segment) const {
    if (hops_.empty()) return 0;
    const double s = static_cast<double>(std::max<std::uint64_t>(segment, 1));
    // What a hop holds back of a segment: its first piece (cut-through).
    const double piece = forward_ == 0 ? s : std::min(s, static_cast<double>(forward_));
    // Bytes each lane carries, and the segments they travel in.
    std::vector<std::pair<double, double>> load(lane_rate_.size(), {0, 0});
    // When the first segment of each received range reaches its rank: (rank,
    // range begin) -> arrival. A sender forwards a range from the arrival of
    // the range it received that holds its first byte.
    std::vector<std::map<std::uint64_t, double>> first(static_cast<size_t>(ranks_));
    double depth = 0;
    // Each link's bytes and frames over its hop's rate.
    std::vector<double> on_link(static_cast<size_t>(links_), 0);
    for (size_t i = 0; i < hops_.size(); ++i) {
      const Transfer& t = plan_.transfers[i];
      const Hop& h = hops_[i];
      const double hop_rate = rate(i, s);
      const double length = static_cast<double>(t.length);
      const double frames = std::ceil(length / s);
      for (const int l : h.lanes) {
        load[static_cast<size_t>(l)].first += length;
        load[static_cast<size_t>(l)].second += frames;
      }
      // A link moves no faster than its hop: across a WAN link its streams'
      // TCP limit may be below both lanes' rates (a lossy link's bundle; the
      // simulator prices it so).
      on_link[static_cast<size_t>(h.link)] += length / hop_rate + frames * c_;
      double from_at = 0;
      if (t.from != plan_.root) {
        const auto& got = first[static_cast<size_t>(t.from)];
        auto it = got.upper_bound(t.offset);
        if (it != got.begin()) from_at = std::prev(it)->second;
      }
      const double arrival = from_at + std::min(piece, length) / hop_rate + c_ + h.latency;
      auto& at = first[static_cast<size_t>(t.to)][t.offset];
      at = std::max(at, arrival);
      depth = std::max(depth, arrival);
    }
    // What the busiest lane needs to move its bytes and frames, and the
    // bound's rate: the pipeline runs at the slower of the two once full.
    double busiest = on_link.empty() ? 0 : *std::max_element(on_link.begin(), on_link.end());
    for (size_t l = 0; l < load.size(); ++l)
      busiest = std::max(busiest, load[l].first / lane_rate_[l] + load[l].second * c_);
    const double stream = rate_ > 0 ? static_cast<double>(plan_.size) / rate_ : 0;
    const double last = rate_ > 0 ? std::min(piece, static_cast<double>(plan_.size)) / rate_ : 0;
    return std::max(stream, busiest) + depth - last;
  }

  // Whether segments of `segment` bytes leave a stream of a link with
  // several idle long enough that the kernel restarts it from its initial
  // window. A link's frames go in offset order as their bytes arrive (cut-
  // through), dealt round-robin over its streams, so each stream waits for
  // the others' frames between two of its own: (S - 1) x segment / the
  // link's rate. Measured on testbed-8x8 at 64 MiB (four WAN streams at a
  // lane's 100 Mbit/s): 4 MiB segments (a 1 s gap) 1.19 x the bound,
  // 128 KiB and 1 MiB 1.08-1.13 x (docs/PERFORMANCE.md).
  bool idles_streams(std::uint64_t segment) const {
    const auto s = static_cast<double>(std::max<std::uint64_t>(segment, 1));
    for (size_t i = 0; i < hops_.size(); ++i) {
      const double used = streams_used(i, s);
      if (used > 1 && (used - 1) * s / rate(i, s) > kStreamIdleRestartSeconds) return true;
    }
    return false;
  }

 private:
  struct Hop {
    double rate = 0, latency = 0;
    // Its streams, each at most stream_rate: a link of few segments uses
    // fewer (segments are dealt round-robin).
    double stream_rate = 1e300;
    int streams = 1;
    std::array<int, 2> lanes{};  // indexes into lane_rate_: sender's, receiver's
    int link = 0;                // (from, to, lane_from, lane_to), numbered from 0
  };
  const Plan& plan_;
  double c_;
  std::uint64_t forward_;
  std::vector<Hop> hops_;
  std::vector<double> lane_rate_;
  double rate_ = 0;
  int ranks_ = 0;
  int links_ = 0;
  std::vector<double> link_bytes_;  // per link: the bytes of its transfers

  // Hop i's streams that carry a segment of s bytes (dealt round-robin).
  double streams_used(size_t i, double s) const {
    const Hop& h = hops_[i];
    return std::min<double>(h.streams, std::ceil(link_bytes_[static_cast<size_t>(h.link)] / s));
  }
  // Hop i's rate with segments of s bytes: its streams that carry one.
  double rate(size_t i, double s) const {
    return std::min(hops_[i].rate, std::max(1.0, streams_used(i, s)) * hops_[i].stream_rate);
  }
};

}  // namespace

double analytic_seconds(const Grid& grid, const Plan& plan, std::uint64_t segment,
                        const CostModel& model) {
  return Pricer(grid, plan, model).seconds(segment);
}

std::uint64_t model_segment(const Grid& grid, const Plan& plan, const CostModel& given) {
  if (plan.size <= kSmallestModelSegment) return std::max<std::uint64_t>(plan.size, 1);
  // Where the plan paces its links (pacing.hpp), the segment is chosen as
  // for store and forward. A paced link of several streams holds each to
  // the link's part over the streams that carry segments, while cut-through
  // feeds a link's frames one after another as their bytes arrive, so with
  // large segments one stream at a time carries the link, at that fraction
  // of its part (testbed-hetero-nics, paced, four WAN streams, 16 MiB:
  // 128 KiB segments 1.26-1.51 x the bound, 16 KiB 1.14-1.17 x). And under
  // a rate limit a whole segment written at once went out faster than the
  // limit (3 MiB at 40 Mbit/s on loopback in one frame a link: 0.83 of the
  // time at the limit; Launch.MaxRateHoldsEveryNodeAtOrBelowItsLimit).
  CostModel model = given;
  if (plan_is_paced(grid, plan)) model.forward_bytes = 0;
  const Pricer pricer(grid, plan, model);
  // Compared in whole microseconds, so that the last bits of a floating-point
  // sum (which another compiler or CPU may round differently) never decide
  // between two sizes: every rank must cut the same segments. Ties go to the
  // larger segment (fewer frames).
  const auto us = [&](std::uint64_t seg) { return std::llround(pricer.seconds(seg) * 1e6); };
  std::uint64_t best = kSmallestModelSegment;
  long long best_time = us(best);
  for (std::uint64_t seg = 2 * kSmallestModelSegment; seg <= kLargestModelSegment; seg *= 2) {
    if (seg / 2 >= plan.size) break;  // larger ones cut the message the same way
    // Cut-through makes a hop's delay a piece, whatever the segment, so the
    // model alone would take the largest; the streams decide where to stop.
    if (model.forward_bytes != 0 && pricer.idles_streams(seg)) break;
    const long long t = us(seg);
    if (t <= best_time) {
      best_time = t;
      best = seg;
    }
  }
  return best;
}

namespace {

// What decides a selection on `grid` besides root and size: every figure the
// plans and the model read.
// Every bit of a double (std::to_string keeps six decimals).
std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string fingerprint(const Grid& g) {
  std::string f = g.name + "|" + std::to_string(g.lanes) + "|" + std::to_string(g.pace_lanes) +
                  "|" + std::to_string(g.segment_bytes) + "|" + exact(g.segment_overhead_s) + "|" +
                  exact(g.hop_overhead_s) + "|" + g.congestion + "|" + exact(g.max_rate_bps);
  for (const Site& s : g.sites) {
    f += "|s" + std::to_string(s.ranks.size()) + "," + exact(s.latency_s) + "," +
         std::to_string(s.multicast.enabled);
  }
  for (const Node& n : g.nodes) {
    f += "|n" + std::to_string(n.site);
    for (const Nic& nic : n.nics) f += "," + exact(nic.bandwidth_bps);
  }
  for (const WanLink& l : g.wan)
    f += "|w" + std::to_string(l.site_a) + "," + std::to_string(l.site_b) + "," +
         exact(l.latency_s) + "," + exact(l.bandwidth_bps) + "," + exact(l.max_rate_bps) + "," +
         exact(l.loss) + "," + std::to_string(l.streams) + "," + l.congestion;
  return f;
}

// Every figure of a cost model its prices read.
std::string model_key(const CostModel& m) {
  return exact(m.segment_overhead_s) + "," + exact(m.hop_overhead_s) + "," +
         exact(m.lan_latency_s) + "," + exact(m.tcp_window_bytes) + "," + exact(m.mss_bytes) + "," +
         exact(m.payload_efficiency) + "," + std::to_string(m.segment_bytes) + "," +
         std::to_string(m.frame_header_bytes) + "," + std::to_string(m.forward_bytes) + "," +
         std::to_string(static_cast<int>(m.congestion));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f s", s);
  return buf;
}

}  // namespace

std::uint64_t priced_size(std::uint64_t size) {
  const int k = std::bit_width(size);
  if (k <= 4) return size;
  // The leading bit and the three after it name the class; its middle is
  // half a class step above its start.
  const int step = k - 4;
  return (size >> step << step) + (std::uint64_t{1} << (step - 1));
}

const std::vector<Algorithm>& model_candidates() {
  static const std::vector<Algorithm> kCandidates = {Algorithm::kMultilane, Algorithm::kBinomial,
                                                     Algorithm::kScatterRd, Algorithm::kChain};
  return kCandidates;
}

double model_seconds(const Grid& grid, const Plan& plan, std::uint64_t segment,
                     const CostModel& model) {
  CostModel m = model;
  m.segment_bytes = segment;
  if (grid.size() <= kMaxSimulatedRanks && plan.size <= kMaxSimulatedBytes &&
      simulated_segments(grid, plan, m) <= kMaxSimulatedSegments)
    return simulate(grid, plan, m).makespan_s;
  return analytic_seconds(grid, plan, segment, model);
}

std::uint64_t model_circulant_block(const Grid& grid, int root, std::uint64_t size,
                                    const CostModel& model) {
  const auto lanes = static_cast<std::uint64_t>(grid.lane_count());
  const std::uint64_t part = (size + lanes - 1) / lanes;
  if (part <= kSmallestModelSegment || grid.size() < 2) return std::max<std::uint64_t>(part, 1);
  // Every broadcast builds its plan, so a choice is kept for the process.
  const std::string key = fingerprint(grid) + "|r" + std::to_string(root) + "|m" +
                          std::to_string(size) + "|c" + model_key(model);
  static std::mutex mu;
  static std::map<std::string, std::uint64_t> chosen;
  {
    std::lock_guard lock(mu);
    if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  }
  std::uint64_t top = kSmallestModelSegment;
  while (top < kLargestModelSegment && top < part) top *= 2;  // the first that holds a part whole
  // (block, time in whole microseconds), largest block first.
  std::vector<std::pair<std::uint64_t, long long>> priced;
  long long best = -1;
  int worse = 0;
  for (std::uint64_t block = top; block >= kSmallestModelSegment && worse < 2; block /= 2) {
    // MPI numbers a link's segments with tags, of which it promises 32768:
    // with all lanes on one link (two ranks), the blocks of every part.
    const std::uint64_t blocks = (part + block - 1) / block;
    if (block < top && blocks * lanes > kCirculantMaxBlocksForTags) break;
    // A plan lists (ranks - 1) x lanes x blocks transfers. Past 65 536,
    // what a smaller block saves (its fill, a few rounds of one
    // block) is a sliver of the message's time, and building and pricing
    // its plan is not: no smaller block is tried.
    if (block < top &&
        blocks * lanes * static_cast<std::uint64_t>(grid.size() - 1) > kCirculantSearchTransfers)
      break;
    const long long t = std::llround(
        model_seconds(grid, build_circulant(grid, root, size, block), block, model) * 1e6);
    priced.emplace_back(block, t);
    if (best < 0 || t < best) {
      best = t;
      worse = 0;
    } else {
      ++worse;
    }
    // Past the transfer cap blocks grow (circulant_blocks): every smaller
    // candidate is cut into about as many blocks as this one.
    if (circulant_parts(grid, size, block).front().blocks.block_bytes > block) break;
  }
  // The largest block within kCirculantBlockMarginPercent of the fastest:
  // the model sees a block's cost only on the lanes it loads, not the
  // wake-ups of ranks that share cores, so where the fill matters little
  // fewer, larger blocks are the safer choice (select.hpp).
  std::uint64_t block = priced.back().first;
  for (const auto& [b, t] : priced)
    if (t <= best + best * kCirculantBlockMarginPercent / 100) {
      block = b;
      break;
    }
  std::lock_guard lock(mu);
  if (chosen.size() >= 1024) chosen.clear();  // bounded; a miss only prices again
  chosen.emplace(key, block);
  return block;
}

Prediction predict(const Grid& grid, Algorithm algorithm, int root, std::uint64_t size,
                   const CostModel& model) {
  const Plan plan = build_plan(grid, algorithm, root, size);
  Prediction p;
  p.algorithm = algorithm;
  p.segment_bytes = resolve_segment_bytes(grid, plan, model.segment_bytes);
  p.seconds = model_seconds(grid, plan, p.segment_bytes, model);
  return p;
}

Selection select_broadcast(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds, const CostModel& model) {
  Selection sel;
  sel.priced_bytes = size;
  if (grid.size() < 2 || size == 0) {
    // Nothing moves: every plan is empty.
    sel.chosen = threshold_algorithm(grid, size, thresholds);
    sel.why = "nothing to send";
    return sel;
  }
  const std::uint64_t priced = priced_size(size);
  const std::string key = fingerprint(grid) + "|r" + std::to_string(root) + "|p" +
                          std::to_string(priced) + "|c" + model_key(model);
  static std::mutex mu;
  static std::map<std::string, Selection> cache;
  bool cached = false;
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) {
      sel = it->second;
      cached = true;
    }
  }
  if (!cached) {
    for (const Algorithm a : model_candidates())
      if (algorithm_unavailable(grid, a).empty())
        sel.predictions.push_back(predict(grid, a, root, priced, model));
    // Every rank runs the same binary on the same figures, so the sums come
    // out bit for bit alike and so does the choice. Whole microseconds, ties
    // to the earlier candidate, narrow what the last bits could decide on a
    // host that rounds differently to times a rounding error from a half
    // microsecond.
    std::stable_sort(sel.predictions.begin(), sel.predictions.end(),
                     [](const Prediction& a, const Prediction& b) {
                       return std::llround(a.seconds * 1e6) < std::llround(b.seconds * 1e6);
                     });
    sel.priced_bytes = priced;
    sel.bound_seconds = max_flow_bound_seconds(grid, root, priced);
    sel.method = grid.size() <= kMaxSimulatedRanks && priced <= kMaxSimulatedBytes ? "simulated"
                                                                                   : "analytic";
    if (sel.predictions.empty())  // multilane and binomial run on every grid
      throw std::logic_error("select_broadcast: no candidate algorithm runs on " + grid.name);
    sel.chosen = sel.predictions.front().algorithm;
    sel.why = "the model's fastest";
    // A near tie goes to multilane (kMultilaneTiePercent).
    for (const Prediction& p : sel.predictions)
      if (p.algorithm == Algorithm::kMultilane && sel.chosen != Algorithm::kMultilane &&
          std::llround(p.seconds * 1e6) * 100 <=
              std::llround(sel.predictions.front().seconds * 1e6) * (100 + kMultilaneTiePercent)) {
        sel.chosen = Algorithm::kMultilane;
        sel.why = "within " + std::to_string(kMultilaneTiePercent) + " % of the model's fastest";
      }
    std::lock_guard lock(mu);
    if (cache.size() >= 1024) cache.clear();  // bounded; a miss only costs the pricing again
    cache.emplace(key, sel);
  }
  if (thresholds.given) {
    sel.chosen = threshold_algorithm(grid, size, thresholds);
    sel.why = "the thresholds given";
  }
  return sel;
}

Algorithm select_algorithm(const Grid& grid, int root, std::uint64_t size,
                           const SelectionThresholds& thresholds, const CostModel& model) {
  if (thresholds.given) return threshold_algorithm(grid, size, thresholds);
  return select_broadcast(grid, root, size, thresholds, model).chosen;
}

Algorithm AutoChoices::choose(const Grid& grid, int root, std::uint64_t bytes,
                              const SelectionThresholds& thresholds) {
  const auto key = std::make_pair(root, priced_size(bytes));
  if (auto it = by_class_.find(key); it != by_class_.end()) return it->second;
  const Algorithm a = select_algorithm(grid, root, bytes, thresholds);
  if (by_class_.size() >= 4096) by_class_.clear();
  by_class_.emplace(key, a);
  return a;
}

std::string describe(const Selection& s) {
  std::string out = "auto runs " + std::string(algorithm_name(s.chosen)) + " (" + s.why + ")";
  if (s.predictions.empty()) return out;
  out += "; the model:";
  for (size_t i = 0; i < s.predictions.size(); ++i) {
    const Prediction& p = s.predictions[i];
    out += (i ? ", " : " ") + std::string(algorithm_name(p.algorithm));
    if (p.segment_bytes > 0) out += " (segment " + format_bytes(p.segment_bytes) + ")";
    out += " " + seconds_text(p.seconds);
    if (s.bound_seconds > 0) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, " = %.2f x the bound", p.seconds / s.bound_seconds);
      out += ratio;
    }
  }
  out += " (" + s.method + " at " + format_bytes(s.priced_bytes) + ")";
  return out;
}

}  // namespace gridbcast::topology
