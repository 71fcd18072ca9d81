#include "topology/simulate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "topology/plan/pacing.hpp"
#include "topology/plan/segments.hpp"
#include "topology/units.hpp"

namespace gridbcast::topology {
namespace {

struct SimSegment {
  int from, to;
  std::uint64_t offset, length;
  // Resources it occupies, each for length / its capacity: sender lane egress,
  // receiver lane ingress, the stream bundle, and the WAN link (or -1).
  int res[4];
  double latency;
  int ordinal = 0;          // position within its transfer
  bool frame_start = true;  // the first chunk of its frame (sim_chunk)
  int pending = 0;          // dependencies not yet arrived
  double ready = 0;         // its first piece is at the sender (cut-through)
  double complete = 0;      // all of its bytes are at the sender
  double arrival = 0;
  std::vector<int> dependents;  // segments that need these bytes
  int next_on_stream = -1;      // sent after this one on the same TCP stream
};

// One link (sender, receiver, lanes): its bundle resource, and the last
// segment given to each of its streams. The executor sends each stream's
// segments (topology/plan/segments.hpp) in order.
struct Link {
  int bundle = -1;
  std::vector<int> last_on_stream;
};

// When a resource is taken: disjoint [begin, end) intervals in time order,
// adjacent ones merged. Segments are placed in order of readiness, so time
// before the current segment's ready time is never offered again.
class Busy {
 public:
  void forget_before(double t) {
    size_t n = 0;
    while (n < taken_.size() && taken_[n].second <= t) ++n;
    if (n > 0) taken_.erase(taken_.begin(), taken_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // The earliest time >= t at which the resource is free for `duration`.
  double free_from(double t, double duration) const {
    for (const auto& [b, e] : taken_) {
      if (e <= t) continue;
      if (b >= t + duration) break;
      t = e;
    }
    return t;
  }
  void take(double b, double e) {
    auto it = std::lower_bound(taken_.begin(), taken_.end(), std::make_pair(b, e));
    if (it != taken_.begin() && std::prev(it)->second >= b) {
      auto prev = std::prev(it);
      prev->second = std::max(prev->second, e);
      it = prev;
    } else {
      it = taken_.insert(it, {b, e});
    }
    while (std::next(it) != taken_.end() && std::next(it)->first <= it->second) {
      it->second = std::max(it->second, std::next(it)->second);
      taken_.erase(std::next(it));
    }
  }

 private:
  std::vector<std::pair<double, double>> taken_;
};

// Received pieces of one rank: (offset, end, segment index), by offset, so a
// segment finds the pieces its bytes depend on in O(log n + k), not by
// scanning every piece its sender received (which was quadratic in the
// segments per rank: 8x8 at 16 KiB took 200 x as long for 16 x the bytes).
struct Piece {
  std::uint64_t begin, end;
  int segment;
};
class Pieces {
 public:
  void add(const Piece& p) {
    by_begin_.emplace(p.begin, p);
    longest_ = std::max(longest_, p.end - p.begin);
  }
  // Calls f(piece) for every piece that overlaps [begin, end).
  template <typename F>
  void overlapping(std::uint64_t begin, std::uint64_t end, F f) const {
    const std::uint64_t from = begin > longest_ ? begin - longest_ : 0;
    for (auto it = by_begin_.lower_bound(from); it != by_begin_.end() && it->first < end; ++it)
      if (it->second.end > begin) f(it->second);
  }

 private:
  std::multimap<std::uint64_t, Piece> by_begin_;
  std::uint64_t longest_ = 0;
};

// What the simulator moves as one piece of a frame. Cut-through: a frame
// goes out as its bytes land and shares its lane with the frames beside it
// (each link its own TCP connection), which the simulator, placing whole
// pieces on its resources, sees only in pieces this small: a frame of 1 MiB
// placed whole would hold its lane for the whole frame while the executor
// sends another link's beside it (binomial on testbed-8x8 at 64 KiB, whose
// root sends to a child across the WAN beside one at home: 31.8 ms in
// chunks of 64 KiB, 27.7 ms in chunks of 16 KiB, 26.3 ms measured). Store
// and forward: the frame.
constexpr std::uint64_t kSimChunkBytes = kForwardBytes;
std::uint64_t sim_chunk(const CostModel& model, std::uint64_t segment) {
  const std::uint64_t seg = std::max<std::uint64_t>(segment, 1);
  return model.forward_bytes == 0 ? seg : std::min(seg, kSimChunkBytes);
}

}  // namespace

std::optional<Congestion> parse_congestion(std::string_view name) {
  if (name == "reno" || name == "cubic") return Congestion::kLossBased;
  if (name == "bbr") return Congestion::kBbr;
  return std::nullopt;
}

double segment_overhead(const Grid& grid, const CostModel& model) {
  return grid.segment_overhead_s > 0 ? grid.segment_overhead_s : model.segment_overhead_s;
}

double hop_overhead(const Grid& grid, const CostModel& model) {
  return grid.hop_overhead_s > 0 ? grid.hop_overhead_s : model.hop_overhead_s;
}

double tcp_stream_limit(double rtt_s, double loss, const CostModel& m) {
  double limit = rtt_s > 0 ? m.tcp_window_bytes / rtt_s : 1e300;
  if (loss > 0 && rtt_s > 0) {
    if (m.congestion == Congestion::kLossBased)
      limit = std::min(limit, m.mss_bytes * 1.22 / (rtt_s * std::sqrt(loss)));
    else
      limit *= 1 - loss;
  }
  return limit;
}

std::vector<StreamShortfall> stream_shortfalls(const Grid& grid, Congestion hosts,
                                               double broadcast_bps) {
  std::vector<StreamShortfall> out;
  for (const WanLink& l : grid.wan) {
    if (l.loss <= 0 || l.latency_s <= 0 || l.streams < 1) continue;
    CostModel tcp;
    tcp.congestion = hosts;
    const std::string cc = !l.congestion.empty() ? l.congestion : grid.congestion;
    if (!cc.empty()) tcp.congestion = parse_congestion(cc).value_or(Congestion::kLossBased);
    // Payload bytes per second of one stream, as wire bits like the link's rate.
    const double stream =
        tcp_stream_limit(2 * l.latency_s, l.loss, tcp) * 8 / tcp.payload_efficiency;
    const double rate = broadcast_bps > 0 ? std::min(l.rate_bps(), broadcast_bps) : l.rate_bps();
    if (!(stream > 0) || l.streams * stream >= 0.95 * rate) continue;
    StreamShortfall s;
    s.link = &l;
    s.streams = l.streams;
    s.stream_bps = stream;
    s.carried_bps = l.streams * stream;
    s.wanted_bps = rate;
    // At most one more than a link may have: "more than 64" (a loss and
    // latency from the topology can ask for any number).
    s.needed = static_cast<int>(std::min<double>(std::ceil(rate / stream), kMaxWanStreams + 1));
    s.congestion = cc;
    out.push_back(s);
  }
  return out;
}

std::string describe(const Grid& grid, const StreamShortfall& s) {
  const WanLink& l = *s.link;
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.3g %%", l.loss * 100);
  const std::string cc =
      s.congestion.empty() ? "the hosts' loss-based congestion control" : s.congestion;
  return "WAN link " + grid.sites.at(static_cast<size_t>(l.site_a)).name + "-" +
         grid.sites.at(static_cast<size_t>(l.site_b)).name + ": its " + std::to_string(s.streams) +
         (s.streams == 1 ? " stream carries" : " streams carry") + " at most " +
         format_bandwidth(s.carried_bps) + " at " + loss + " loss and a " +
         format_duration(2 * l.latency_s) + " round trip (" + format_bandwidth(s.stream_bps) +
         " a stream under " + cc + "); " +
         (s.needed > kMaxWanStreams
              ? "even " + std::to_string(kMaxWanStreams) +
                    ", the most a link takes, would not carry the " +
                    format_bandwidth(s.wanted_bps) + " a broadcast needs across it: bbr would"
              : std::to_string(s.needed) + " would carry the " + format_bandwidth(s.wanted_bps) +
                    " a broadcast needs across it (`streams:` in the topology, or --streams; or "
                    "bbr)");
}

std::uint64_t simulated_segments(const Grid& grid, const Plan& plan, const CostModel& model) {
  const std::uint64_t seg =
      std::max<std::uint64_t>(resolve_segment_bytes(grid, plan, model.segment_bytes), 1);
  const std::uint64_t chunk = sim_chunk(model, seg);
  const auto chunks = [chunk](std::uint64_t len) {
    return len / chunk + (len % chunk != 0 ? 1 : 0);
  };
  std::uint64_t n = 0;
  for (const Transfer& t : plan.transfers)
    n += t.length / seg * chunks(seg) + (t.length % seg != 0 ? chunks(t.length % seg) : 0);
  return n;
}

SimResult simulate(const Grid& grid, const Plan& plan, const CostModel& model) {
  if (const std::uint64_t n = simulated_segments(grid, plan, model); n > kMaxSimulatedSegments)
    throw std::length_error(
        "the plan cuts into " + std::to_string(n) + " segments, more than the simulator holds (" +
        std::to_string(kMaxSimulatedSegments) + ", about 300 bytes each); price it analytically");
  const int p = grid.size();
  // The executor's segments: every link's, grouped by transfer in offset order.
  SegmentOptions so;
  so.segment_bytes = resolve_segment_bytes(grid, plan, model.segment_bytes);
  const SegmentSchedule schedule = segment_schedule(plan, so);
  const std::uint64_t chunk = sim_chunk(model, schedule.segment_bytes);
  std::vector<std::vector<const topology::Segment*>> of_transfer(plan.transfers.size());
  for (const LinkSegments& l : schedule.links)
    for (const topology::Segment& piece : l.segments)
      of_transfer[static_cast<size_t>(piece.transfer)].push_back(&piece);
  std::vector<Busy> busy;        // per resource: when it is taken
  std::vector<double> capacity;  // per resource: bytes/s
  auto add_resource = [&](double bytes_per_s) {
    busy.emplace_back();
    capacity.push_back(bytes_per_s);
    return static_cast<int>(busy.size() - 1);
  };
  // Resources: per node, lane and direction one, its part of the lane's NIC
  // (lane_shares): lanes that share a NIC each get an equal part, as TCP
  // shares a NIC between connections that all have data; a lane alone on its
  // NIC, or the only one the plan uses there (lane 0 of a tree algorithm),
  // gets all of it.
  std::map<std::tuple<int, int, bool>, int> lane_res;  // (rank, lane, egress)
  for (const auto& [key, bps] : lane_shares(grid, plan))
    lane_res[key] = add_resource(bps / 8 * model.payload_efficiency);
  std::vector<int> wan_res;
  for (const auto& l : grid.wan) {
    wan_res.push_back(add_resource(l.rate_bps() / 8 * model.payload_efficiency));  // a -> b
    wan_res.push_back(add_resource(l.rate_bps() / 8 * model.payload_efficiency));  // b -> a
  }
  // Where rate limits are paced in any plan, a link runs no faster than its
  // pace (pacing.hpp), which in trees is below what the lanes would allow.
  // Without a segment, pace x streams is the link's part.
  const std::vector<LinkPace> paces =
      grid.rate_limited() ? link_paces(grid, plan) : std::vector<LinkPace>{};
  std::map<std::tuple<int, int, int, int>, Link> links;
  std::unordered_map<const WanLink*, int> link_index;
  for (size_t i = 0; i < grid.wan.size(); ++i) link_index[&grid.wan[i]] = static_cast<int>(i);

  std::vector<SimSegment> segs;
  std::vector<Pieces> received(static_cast<size_t>(p));
  for (size_t ti = 0; ti < plan.transfers.size(); ++ti) {
    const Transfer& t = plan.transfers[ti];
    const auto& src = grid.nodes[static_cast<size_t>(t.from)];
    const auto& dst = grid.nodes[static_cast<size_t>(t.to)];
    const int out_res = lane_res.at({t.from, t.lane_from, true});
    const int in_res = lane_res.at({t.to, t.lane_to, false});
    double bundle_rate = 1e300;  // unlimited inside a site: the NICs decide
    // A hop inside a site: the site's measured or declared latency, else the model's.
    const auto hop = [&](int site) {
      const double l = grid.sites[static_cast<size_t>(site)].latency_s;
      return l > 0 ? l : model.lan_latency_s;
    };
    double latency = hop(dst.site) + hop_overhead(grid, model);
    int wan = -1;
    if (src.site != dst.site) {
      const auto path = grid.wan_path(src.site, dst.site);
      double one_way = 0, loss_pass = 1;
      for (const WanLink* l : path) {
        one_way += l->latency_s;
        loss_pass *= 1 - l->loss;
      }
      latency += one_way;
      const double rtt = 2 * one_way + hop(src.site) + hop(dst.site);
      // The topology's congestion control for this path, else the hosts' default;
      // names other than reno, cubic and bbr count as loss-based.
      CostModel tcp = model;
      if (const std::string cc = grid.congestion_between(t.from, t.to); !cc.empty())
        tcp.congestion = parse_congestion(cc).value_or(Congestion::kLossBased);
      bundle_rate = t.streams * tcp_stream_limit(rtt, 1 - loss_pass, tcp);
      // The first link on the path is the shared resource (per direction); the
      // narrowest link's bandwidth bounds the bundle too.
      for (const WanLink* l : path)
        bundle_rate = std::min(bundle_rate, l->rate_bps() / 8 * model.payload_efficiency);
      const WanLink* first = path.front();
      wan = wan_res[static_cast<size_t>(2 * link_index.at(first) +
                                        (first->site_a == src.site ? 0 : 1))];
    }
    if (const double pace = pace_of(paces, t.from, t.to, t.lane_from, t.lane_to); pace > 0)
      bundle_rate = std::min(bundle_rate, pace * std::max(1, t.streams) / kPacedPayloadShare *
                                              model.payload_efficiency);
    const auto key = std::make_tuple(t.from, t.to, t.lane_from, t.lane_to);
    Link& link = links[key];
    if (link.bundle < 0) link.bundle = add_resource(bundle_rate);
    link.last_on_stream.resize(static_cast<size_t>(std::max(1, t.streams)), -1);
    const int bundle = link.bundle;
    const auto& pieces = of_transfer[ti];  // in offset order
    int ordinal = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const topology::Segment& cut = *pieces[k];
      const std::uint64_t cut_end = cut.offset + cut.length;
      // Cut-through: a frame goes as chunks (sim_chunk), each forwarded as
      // it lands; the first carries the frame's header and work.
      for (std::uint64_t off = cut.offset;;) {
        SimSegment s{};
        s.from = t.from;
        s.to = t.to;
        s.offset = off;
        s.length = std::min(chunk, cut_end - off);
        s.frame_start = off == cut.offset;
        s.res[0] = out_res;
        s.res[1] = in_res;
        s.res[2] = bundle;
        s.res[3] = wan;
        s.latency = latency;
        s.ordinal = ordinal++;
        const int index = static_cast<int>(segs.size());
        // Dependencies: what the sender received of these bytes, listed earlier.
        if (t.from != plan.root)
          received[static_cast<size_t>(t.from)].overlapping(
              s.offset, s.offset + s.length, [&](const Piece& piece) {
                ++s.pending;
                segs[static_cast<size_t>(piece.segment)].dependents.push_back(index);
              });
        if (link.last_on_stream.size() <= static_cast<size_t>(cut.stream))
          link.last_on_stream.resize(static_cast<size_t>(cut.stream) + 1, -1);
        int& previous = link.last_on_stream[static_cast<size_t>(cut.stream)];
        if (previous >= 0) {
          ++s.pending;
          segs[static_cast<size_t>(previous)].next_on_stream = index;
        }
        previous = index;
        off += s.length;
        received[static_cast<size_t>(t.to)].add({s.offset, off, index});
        segs.push_back(std::move(s));
        if (off >= cut_end) break;
      }
    }
  }

  // Served by ready time; ties go round-robin across transfers (by position in
  // the transfer, then list order), as the executor's concurrent writers share.
  using Item = std::tuple<double, int, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  for (size_t i = 0; i < segs.size(); ++i)
    if (segs[i].pending == 0) queue.emplace(0.0, segs[i].ordinal, static_cast<int>(i));
  size_t done = 0;
  SimResult result;
  result.finish_s.assign(static_cast<size_t>(p), 0.0);
  const double overhead = segment_overhead(grid, model);
  while (!queue.empty()) {
    const auto [ready, ordinal, i] = queue.top();
    queue.pop();
    SimSegment& s = segs[static_cast<size_t>(i)];
    // Its frame header travels too; each end's lane pays the per-segment
    // work once, on its first chunk (the header's write and read, wake-ups).
    const auto bytes = static_cast<double>(s.length) +
                       (s.frame_start ? static_cast<double>(model.frame_header_bytes) : 0.0);
    const auto hold = [&](int k) {
      const int r = s.res[k];
      return bytes / capacity[static_cast<size_t>(r)] + (k < 2 && s.frame_start ? overhead : 0.0);
    };
    double longest = 0;
    for (int k = 0; k < 4; ++k) {
      const int r = s.res[k];
      if (r < 0) continue;
      longest = std::max(longest, hold(k));
      busy[static_cast<size_t>(r)].forget_before(ready);
    }
    // Cut-through: the frame leaves with its first piece; its last cannot
    // leave before the sender holds it.
    const double piece = model.forward_bytes == 0
                             ? 1.0
                             : std::min(1.0, static_cast<double>(model.forward_bytes) / bytes);
    const double input_end = s.complete + piece * longest;
    // The frame flows from `start` until `end`: at the pace of its slowest
    // resource, or of its input when that is behind (cut-through). Each
    // resource's share of it goes in that window wherever it is free, so a
    // frame that a 100 Mbit/s lane paces holds a 1 Gbit/s WAN link for a
    // tenth of its time, not all of it at once (two such frames across one
    // link share it, as TCP shares it). The earliest `start` from `ready`
    // at which every share fits: a later-ready segment may fill a gap an
    // earlier one left, as TCP fills a link whenever it has data.
    std::array<double, 4> at{};
    double start = ready, end = 0;
    for (bool moved = true; moved;) {
      moved = false;
      end = std::max(start + longest, input_end);
      for (int k = 0; k < 4; ++k)
        if (s.res[k] >= 0) {
          const double t = busy[static_cast<size_t>(s.res[k])].free_from(start, hold(k));
          at[static_cast<size_t>(k)] = t;
          if (t + hold(k) > end) {
            // The earliest start whose window holds this share (t > start
            // here, so either moves it on).
            const double need = t + hold(k) - longest;
            start = need > start ? need : t;
            moved = true;
            break;
          }
        }
    }
    for (int k = 0; k < 4; ++k)
      if (s.res[k] >= 0)
        busy[static_cast<size_t>(s.res[k])].take(at[static_cast<size_t>(k)],
                                                 at[static_cast<size_t>(k)] + hold(k));
    s.arrival = end + s.latency;
    auto& fin = result.finish_s[static_cast<size_t>(s.to)];
    fin = std::max(fin, s.arrival);
    ++done;
    auto release = [&](int d, double when, double complete) {
      SimSegment& dep = segs[static_cast<size_t>(d)];
      dep.ready = std::max(dep.ready, when);
      dep.complete = std::max(dep.complete, complete);
      if (--dep.pending == 0) queue.emplace(dep.ready, dep.ordinal, d);
    };
    // Who forwards these bytes starts once their first piece has landed.
    for (int d : s.dependents) release(d, start + piece * longest + s.latency, s.arrival);
    // The stream's next segment goes out once this one is written.
    if (s.next_on_stream >= 0) release(s.next_on_stream, end, end);
  }
  if (done != segs.size()) throw std::logic_error("simulate: the plan has a dependency cycle");
  result.segments = segs.size();
  for (int r = 0; r < p; ++r)
    if (result.finish_s[static_cast<size_t>(r)] > result.makespan_s) {
      result.makespan_s = result.finish_s[static_cast<size_t>(r)];
      result.slowest_rank = r;
    }
  return result;
}

double lower_bound_seconds(const Grid& grid, int root, std::uint64_t bytes) {
  const auto& nodes = grid.nodes;
  double bw = grid.send_rate_bps(root);
  for (int r = 0; r < grid.size(); ++r)
    if (r != root) bw = std::min(bw, nodes[static_cast<size_t>(r)].total_bandwidth_bps());
  if (grid.sites.size() > 1)
    for (const auto& l : grid.wan) bw = std::min(bw, l.rate_bps());
  double latency = 0;
  const int root_site = grid.site_of(root);
  for (size_t s = 0; s < grid.sites.size(); ++s) {
    double path = 0;
    for (const auto* l : grid.wan_path(root_site, static_cast<int>(s))) path += l->latency_s;
    latency = std::max(latency, path);
  }
  return grid.size() <= 1 ? 0.0 : static_cast<double>(bytes) * 8.0 / bw + latency;
}

Grid synthetic_grid(int sites, int nodes, bool mixed_nics) {
  if (sites < 1 || nodes < 1) throw std::invalid_argument("--scale needs at least 1x1");
  Grid g;
  g.name = "synthetic-" + std::to_string(sites) + "x" + std::to_string(nodes);
  g.source = "<synthetic>";
  for (int s = 0; s < sites; ++s) {
    Site site;
    site.name = "site" + std::to_string(s);
    for (int n = 0; n < nodes; ++n) {
      Node node;
      node.name = "s" + std::to_string(s) + "n" + std::to_string(n);
      node.host = node.name;
      node.site = s;
      static const std::vector<std::vector<double>> kShapes = {
          {10e9, 10e9}, {25e9, 10e9}, {10e9, 10e9, 10e9, 10e9}, {40e9}};
      const auto& shape =
          mixed_nics ? kShapes[static_cast<size_t>(n) % kShapes.size()] : kShapes[0];
      for (size_t l = 0; l < shape.size(); ++l)
        node.nics.push_back(Nic{"10." + std::to_string(s) + "." +
                                    std::to_string(n / 250 + 4 * static_cast<int>(l)) + "." +
                                    std::to_string(n % 250 + 1),
                                shape[l], ""});
      site.ranks.push_back(static_cast<int>(g.nodes.size()));
      g.nodes.push_back(std::move(node));
    }
    g.sites.push_back(std::move(site));
    if (s > 0) g.wan.push_back(WanLink{s - 1, s, 0.010, 10e9, 0, 4, false, "", {}});
  }
  return g;
}

}  // namespace gridbcast::topology
