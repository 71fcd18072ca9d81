#include "job/straggler.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include "topology/units.hpp"

namespace gridbcast::job {

StragglerWatch::StragglerWatch(const topology::Grid& grid, StragglerRule rule)
    : grid_(grid),
      rule_(rule),
      lanes_(std::max(1, grid.lane_count())),
      behind_(static_cast<size_t>(grid.size())) {}

std::string StragglerWatch::check(int sender, const std::vector<control::LinkReport>& links) const {
  std::set<std::tuple<int, int, int>> seen;
  for (const auto& l : links) {
    const std::string link = "a link to rank " + std::to_string(l.peer) + " from lane " +
                             std::to_string(l.lane_from) + " to lane " + std::to_string(l.lane_to);
    if (l.peer < 0 || l.peer >= grid_.size())
      return link + ", outside the grid of " + std::to_string(grid_.size()) + " ranks";
    if (l.peer == sender) return link + ", itself";
    if (l.lane_from >= lanes_ || l.lane_to >= lanes_)
      return link + ", but ranks open " + std::to_string(lanes_) + " lanes";
    if (!seen.emplace(l.peer, l.lane_from, l.lane_to).second) return link + " twice";
  }
  return "";
}

void StragglerWatch::report(int sender, Clock::time_point now,
                            const std::vector<control::LinkReport>& links) {
  const auto first = links_.lower_bound(Key{sender, std::numeric_limits<int>::min(), 0, 0});
  const auto last = links_.lower_bound(Key{sender + 1, std::numeric_limits<int>::min(), 0, 0});
  std::map<Key, Link> before(first, last);
  links_.erase(first, last);
  for (const auto& r : links) {
    const Key key{sender, r.peer, r.lane_from, r.lane_to};
    Link l{r.bytes_acked, r.notsent_bytes, r.rwnd_limited_us, now, now, 0, false, false};
    l.unacked = r.unacked_bytes;
    l.connecting = r.connecting;
    // A stall goes on from where the report before found it, or starts at it.
    const auto stall_from = [](const Link& b) {
      return b.stalled_since != Clock::time_point{} ? b.stalled_since : b.at;
    };
    if (auto it = before.find(key); it != before.end() && r.connecting) {
      // Still being connected: nothing answers it (a peer that listens
      // answers within a round trip).
      if (it->second.connecting) l.stalled_since = stall_from(it->second);
    } else if (it != before.end()) {
      const double dt = std::chrono::duration<double>(now - it->second.at).count();
      // A count that went back is a new connection: no rate until the next.
      if (dt > 0 && r.bytes_acked >= it->second.acked && r.rwnd_limited_us >= it->second.rwnd_us) {
        l.rate = static_cast<double>(r.bytes_acked - it->second.acked) / dt;
        l.rated = true;
        // A report after a long silence averages over the gap: it says no
        // more than `fresh` of it.
        l.from = std::max(it->second.at, now - rule_.fresh);
        const double held_s = static_cast<double>(r.rwnd_limited_us - it->second.rwnd_us) / 1e6;
        l.held = held_s >= rule_.held_fraction * dt * std::max<int>(1, r.streams);
        // Stalled: data waits or is in flight, and nothing is acknowledged.
        if (r.bytes_acked == it->second.acked &&
            (r.notsent_bytes >= rule_.backlog_bytes || r.unacked_bytes > 0) && !l.held)
          l.stalled_since = stall_from(it->second);
      }
    }
    links_[key] = l;
  }
  // A rank that fails closes its links, and its last report may come
  // without them just before its error: a link stalled in the report
  // before is kept once more, as it was, so the launcher still sees the
  // stall (job/cut.hpp). Once: at most two messages' worth a rank.
  for (const auto& [key, l] : before)
    if (l.stalled_since != Clock::time_point{} && !l.carried && links_.count(key) == 0) {
      Link kept = l;
      kept.carried = true;
      links_[key] = kept;
    }
}

double StragglerWatch::lane_rate(int rank, int lane) const {
  return grid_.nodes.at(static_cast<size_t>(rank)).lane_bandwidth_bps(lane, lanes_) / 8;
}

double StragglerWatch::wan_rate(int site_a, int site_b) const {
  double rate = std::numeric_limits<double>::infinity();
  for (const auto* w : grid_.wan_path(site_a, site_b)) rate = std::min(rate, w->rate_bps() / 8);
  return rate;
}

double StragglerWatch::can_carry(const Key& k, const Sharing& sharing) const {
  const auto [from, to, lane_from, lane_to] = k;
  double can = lane_rate(to, lane_to);
  if (const auto it = sharing.find({from, lane_from}); it != sharing.end())
    can = std::min(can, lane_rate(from, lane_from) / it->second);
  // A sender held to max_rate shares it among all its busy links.
  if (const auto it = sharing.find({from, kAllLanes}); it != sharing.end())
    can = std::min(can, grid_.send_rate_bps(from) / 8 / it->second);
  const int site_from = grid_.site_of(from), site_to = grid_.site_of(to);
  if (site_from != site_to) can = std::min(can, wan_rate(site_from, site_to));
  return can;
}

// What a set of links of `rank` (all into it, or all out of it) can carry
// together: each link its can_carry, each of the rank's lanes at most its
// rate, the links to or from each other site at most the WAN path's.
double StragglerWatch::together(int rank, bool into, const std::vector<const Entry*>& links,
                                const Sharing& sharing) const {
  std::map<int, double> per_lane, per_site;
  for (const Entry* e : links) {
    const auto [from, to, lane_from, lane_to] = e->first;
    const double can = can_carry(e->first, sharing);
    per_lane[into ? lane_to : lane_from] += can;
    const int other = into ? from : to;
    if (grid_.site_of(other) != grid_.site_of(rank)) per_site[grid_.site_of(other)] += can;
  }
  double sum = 0;
  for (const auto& [lane, can] : per_lane) sum += std::min(can, lane_rate(rank, lane));
  if (!into) sum = std::min(sum, grid_.send_rate_bps(rank) / 8);
  for (const auto& [site, can] : per_site)
    sum -= std::max(0.0, can - wan_rate(site, grid_.site_of(rank)));
  return std::max(0.0, sum);
}

std::vector<Straggler> StragglerWatch::observe(Clock::time_point now,
                                               const std::vector<bool>& done) {
  const size_t p = behind_.size();
  auto is_done = [&](int r) {
    return static_cast<size_t>(r) < done.size() && done[static_cast<size_t>(r)];
  };
  // The fresh links into and out of each rank, and each sender's backlogged
  // links per lane (they share its lane).
  std::vector<std::vector<const Entry*>> into(p), out_of(p);
  Sharing sharing;
  for (const auto& e : links_) {
    if (!fresh(e.second, now)) continue;
    const auto [from, to, lane_from, lane_to] = e.first;
    into[static_cast<size_t>(to)].push_back(&e);
    out_of[static_cast<size_t>(from)].push_back(&e);
    if (e.second.notsent >= rule_.backlog_bytes) {
      ++sharing[{from, lane_from}];
      ++sharing[{from, kAllLanes}];
    }
  }
  // A link is active when data waits on it that its receiver would take.
  // One that moved nothing at all since the report before is stalled, not
  // slow: a cut link or a dead peer, which the ranks' progress deadlines
  // name (a straggler still moves its bytes, slowly).
  auto active = [&](const Link& l) {
    return l.rated && l.notsent >= rule_.backlog_bytes && !l.held && l.rate > 0;
  };
  // Slow receivers: every link into them active, together well below what
  // they can carry. Slow senders: their active links out, the same.
  std::vector<Verdict> in(p), out(p);
  for (size_t r = 0; r < p; ++r) {
    const int rank = static_cast<int>(r);
    if (is_done(rank)) continue;
    if (!into[r].empty() && std::all_of(into[r].begin(), into[r].end(),
                                        [&](const Entry* e) { return active(e->second); })) {
      for (const Entry* e : into[r]) {
        in[r].rate += e->second.rate;
        in[r].from = std::max(in[r].from, e->second.from);
      }
      in[r].expected = together(rank, true, into[r], sharing);
      in[r].slow = in[r].expected > 0 && in[r].rate < rule_.fraction * in[r].expected;
    }
    std::vector<const Entry*> sending;
    for (const Entry* e : out_of[r])
      if (active(e->second) && !is_done(std::get<1>(e->first))) sending.push_back(e);
    if (!sending.empty()) {
      for (const Entry* e : sending) {
        out[r].rate += e->second.rate;
        out[r].from = std::max(out[r].from, e->second.from);
      }
      out[r].expected = together(rank, false, sending, sharing);
      out[r].slow = out[r].expected > 0 && out[r].rate < rule_.fraction * out[r].expected;
    }
  }
  // Each slow link with a candidate at one end or both has two ends; the
  // blame goes to the end with the most such links (below a slow node, each
  // of its children has one: the slow node has them all), a tie to the
  // receiver. Only a candidate takes the blame at once. A rank whose slow
  // links would all go to ends not shown slow (yet) is behind on notice: a
  // parent whose one busy link feeds a slow node a file window behind,
  // which holds its other links in, looks just like a slow node with one
  // child that holds its other parent's link while it waits; the first is
  // the node's victim, and the node shows itself soon, the second is the
  // straggler, and nobody else will. It is named after twice the time.
  auto candidate = [&](size_t r) { return in[r].slow || out[r].slow; };
  struct SlowPeer {
    int other;
    bool sends;  // this end sends on the link
  };
  std::vector<std::vector<SlowPeer>> slow_peers(p);
  for (size_t r = 0; r < p; ++r)
    for (const Entry* e : out_of[r]) {
      const auto to = static_cast<size_t>(std::get<1>(e->first));
      if (active(e->second) && e->second.rate < rule_.fraction * can_carry(e->first, sharing) &&
          (candidate(r) || candidate(to))) {
        slow_peers[r].push_back({static_cast<int>(to), true});
        slow_peers[to].push_back({static_cast<int>(r), false});
      }
    }
  std::vector<Straggler> found;
  for (size_t r = 0; r < p; ++r) {
    bool behind = candidate(r), on_notice = false;
    if (behind && !slow_peers[r].empty()) {
      // Whether the other end of a slow link takes its blame.
      auto blamed = [&](const SlowPeer& peer) {
        const auto o = static_cast<size_t>(peer.other);
        return slow_peers[o].size() > slow_peers[r].size() ||
               (slow_peers[o].size() == slow_peers[r].size() && peer.sends);
      };
      auto on_other = [&](const SlowPeer& peer) {
        return blamed(peer) && candidate(static_cast<size_t>(peer.other));
      };
      if (std::all_of(slow_peers[r].begin(), slow_peers[r].end(), on_other))
        behind = false;
      else
        on_notice = std::all_of(slow_peers[r].begin(), slow_peers[r].end(), blamed);
    }
    Behind& b = behind_[r];
    if (!behind) {
      b.on = false;
      continue;
    }
    const Verdict& v = in[r].slow ? in[r] : out[r];
    if (!b.on) b = Behind{true, std::min(v.from, now), 0, 0, 0, b.named};
    b.rate_sum += v.rate;
    b.expected += v.expected;
    ++b.samples;
    if (!b.named && now - b.since >= (on_notice ? 2 : 1) * rule_.sustained) {
      b.named = true;
      found.push_back({static_cast<int>(r), b.rate_sum / b.samples, b.expected / b.samples,
                       std::chrono::duration<double>(now - b.since).count(), in[r].slow});
    }
  }
  return found;
}

std::vector<LinkState> StragglerWatch::links(Clock::time_point now,
                                             Clock::duration at_least) const {
  // Per pair: stalled when one of its lanes is (the longest stall), else
  // moving when one of them moved.
  std::map<std::pair<int, int>, LinkState> by_pair;
  for (const auto& [k, l] : links_) {
    if (!fresh(l, now)) continue;
    const auto [from, to, lane_from, lane_to] = k;
    const bool stalled =
        l.stalled_since != Clock::time_point{} && l.at - l.stalled_since >= at_least;
    const bool moved = l.rated && l.rate > 0;
    if (!stalled && !moved) continue;
    LinkState s{from,
                to,
                stalled,
                stalled ? std::chrono::duration<double>(l.at - l.stalled_since).count() : 0,
                stalled ? l.notsent + l.unacked : 0,
                stalled && l.connecting,
                moved};
    auto [it, added] = by_pair.emplace(std::pair{from, to}, s);
    if (added) continue;
    const bool any_moved = it->second.moved || moved;  // another lane of the pair moves
    if (s.stalled && (!it->second.stalled || s.seconds > it->second.seconds)) it->second = s;
    it->second.moved = any_moved;
  }
  std::vector<LinkState> out;
  out.reserve(by_pair.size());
  for (const auto& [pair, s] : by_pair) out.push_back(s);
  return out;
}

std::string StragglerWatch::describe_links(int rank, Clock::time_point now) const {
  constexpr int kListed = 8;  // a log line stays short however many links a rank has
  std::string text;
  int listed = 0, more = 0;
  for (const auto& [k, l] : links_) {
    const auto [from, to, lane_from, lane_to] = k;
    if ((to != rank && from != rank) || !fresh(l, now)) continue;
    if (listed == kListed) {
      ++more;
      continue;
    }
    ++listed;
    text += (text.empty() ? "" : ", ") +
            ((to == rank ? "from rank " + std::to_string(from) : "to rank " + std::to_string(to)) +
             " lane " + std::to_string(lane_from) + "→" + std::to_string(lane_to) + " " +
             (l.rated ? topology::format_bandwidth(8 * l.rate) : std::string("(no rate yet)")) +
             ", " + topology::format_bytes(l.notsent) + " waiting" +
             (l.held ? ", held by the receiver's window" : ""));
  }
  if (more > 0) text += " and " + std::to_string(more) + " more";
  return text.empty() ? "no link of it reported" : text;
}

}  // namespace gridbcast::job
