#include "topology/plan/verify.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

#include "topology/intervals.hpp"
#include "topology/plan/circulant.hpp"

namespace gridbcast::topology {
namespace {

std::string describe(size_t index, const Transfer& t) {
  std::ostringstream o;
  o << "transfer #" << index << " (" << t.from << " lane " << t.lane_from << " -> " << t.to
    << " lane " << t.lane_to << ", bytes [" << t.offset << ", " << t.offset + t.length << "))";
  return o.str();
}

// Bytes [begin, end) reached a rank after `hops` transfers from the root.
struct ByteDepth {
  std::uint64_t begin, end;
  int hops;
};

// Multicasts are best effort, so coverage and causality rest on the transfers
// alone (checked without them); here: each multicast is well formed, its
// sender ends up holding what it sends, its receivers are other ranks of its
// site, and no rank sends or joins more than one (a communicator has one group).
void verify_multicasts(const Grid& grid, const Plan& plan, const std::vector<IntervalSet>& holds,
                       std::vector<std::string>& errors) {
  if (!plan.multicasts.empty() && plan.algorithm != Algorithm::kMulticast)
    errors.push_back(std::string(algorithm_name(plan.algorithm)) +
                     " plan has multicasts; only the multicast algorithm may");
  std::vector<int> sends(static_cast<size_t>(plan.ranks), 0);
  std::vector<int> joins(static_cast<size_t>(plan.ranks), 0);
  for (size_t i = 0; i < plan.multicasts.size(); ++i) {
    const Multicast& m = plan.multicasts[i];
    const std::string what = "multicast #" + std::to_string(i) + " (from " +
                             std::to_string(m.from) + " lane " + std::to_string(m.lane) + ")";
    if (m.from < 0 || m.from >= plan.ranks || m.lane < 0 || m.lane >= plan.lanes) {
      errors.push_back(what + ": bad rank or lane");
      continue;
    }
    if (m.length == 0 || m.offset > plan.size || m.length > plan.size - m.offset) {
      errors.push_back(what + ": empty or outside the message");
      continue;
    }
    if (m.to.empty()) errors.push_back(what + ": nobody receives it");
    const auto& site = grid.sites[static_cast<size_t>(grid.site_of(m.from))];
    if (!site.multicast.enabled)
      errors.push_back(what + ": site " + site.name + " does not carry multicast");
    if (!holds[static_cast<size_t>(m.from)].contains(m.offset, m.offset + m.length))
      errors.push_back(what + ": the sender never holds these bytes");
    if (++sends[static_cast<size_t>(m.from)] == 2)
      errors.push_back(what + ": rank " + std::to_string(m.from) + " sends a second multicast");
    for (size_t j = 0; j < m.to.size(); ++j) {
      const int r = m.to[j];
      if (r < 0 || r >= plan.ranks || r == m.from || grid.site_of(r) != grid.site_of(m.from) ||
          (j > 0 && r <= m.to[j - 1])) {
        errors.push_back(what + ": receiver " + std::to_string(r) +
                         " is not another rank of its site in ascending order");
        continue;
      }
      if (++joins[static_cast<size_t>(r)] == 2)
        errors.push_back(what + ": rank " + std::to_string(r) + " joins a second multicast");
    }
  }
}

// The circulant properties (verify.hpp): every transfer one block of its
// lane's part, one rank per site and lane receiving nothing inside the site
// and every other rank n blocks, no rank sending more than n - 1 + q blocks
// on a lane, and at most n - 1 + q one-ported rounds.
// Transfers the main pass found malformed are skipped here.
void verify_circulant(const Grid& grid, const Plan& plan, PlanStats& st,
                      std::vector<std::string>& errors) {
  const auto lanes = static_cast<size_t>(plan.lanes);
  st.circulant_rounds.assign(grid.sites.size(), std::vector<std::int64_t>(lanes, 0));
  if (plan.size == 0) return;
  if (plan.block_bytes == 0) {
    errors.push_back("circulant: no block size for a message of " + std::to_string(plan.size) +
                     " bytes");
    return;
  }
  const std::vector<CirculantPart> parts = circulant_parts(grid, plan.size, plan.block_bytes);
  const auto up = static_cast<size_t>(plan.ranks);
  const auto at = [lanes](int rank, int lane) {
    return static_cast<size_t>(rank) * lanes + static_cast<size_t>(lane);
  };
  // Per rank and lane: for each block, the first round it can be sent in
  // (0: held before the site's first round), -1 while not held.
  std::vector<std::vector<std::int64_t>> ready(up * lanes);
  const auto ready_of = [&](int rank, int lane) -> std::vector<std::int64_t>& {
    auto& v = ready[at(rank, lane)];
    if (v.empty())
      v.assign(parts[static_cast<size_t>(lane)].blocks.count, rank == plan.root ? 0 : -1);
    return v;
  };
  // The next round in which a rank may send (receive) on a lane.
  std::vector<std::int64_t> send_free(up * lanes, 0), receive_free(up * lanes, 0);
  std::vector<std::uint64_t> received(up * lanes, 0), sent(up * lanes, 0);

  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& t = plan.transfers[i];
    if (t.from < 0 || t.from >= plan.ranks || t.to < 0 || t.to >= plan.ranks || t.from == t.to ||
        t.length == 0 || t.offset > plan.size || t.length > plan.size - t.offset ||
        t.lane_from < 0 || t.lane_from >= plan.lanes || t.lane_to < 0 || t.lane_to >= plan.lanes)
      continue;
    const int lane = t.lane_from;
    if (t.lane_to != lane) {
      errors.push_back(describe(i, t) + ": circulant: changes lanes (part l stays on lane l)");
      continue;
    }
    const CirculantPart& part = parts[static_cast<size_t>(lane)];
    const std::uint64_t b = part.blocks.block_bytes;
    const std::uint64_t j = b == 0 || t.offset < part.offset ? 0 : (t.offset - part.offset) / b;
    if (b == 0 || t.offset < part.offset || (t.offset - part.offset) % b != 0 ||
        j >= part.blocks.count || t.length != part.block_length(j)) {
      errors.push_back(describe(i, t) + ": circulant: not one block of lane " +
                       std::to_string(lane) + "'s part [" + std::to_string(part.offset) + ", " +
                       std::to_string(part.offset + part.length) + ") in blocks of " +
                       std::to_string(b) + " bytes");
      continue;
    }
    ++sent[at(t.from, lane)];
    std::int64_t& to_ready = ready_of(t.to, lane)[j];
    if (grid.site_of(t.from) != grid.site_of(t.to)) {
      // Fed from another site: held before this site's rounds start.
      if (to_ready < 0) to_ready = 0;
      continue;
    }
    ++received[at(t.to, lane)];
    const std::int64_t held = std::max<std::int64_t>(ready_of(t.from, lane)[j], 0);
    std::int64_t& sender_free = send_free[at(t.from, lane)];
    std::int64_t& receiver_free = receive_free[at(t.to, lane)];
    const std::int64_t round = std::max({held, sender_free, receiver_free});
    sender_free = receiver_free = round + 1;
    if (to_ready < 0 || round + 1 < to_ready) to_ready = round + 1;
    auto& rounds =
        st.circulant_rounds[static_cast<size_t>(grid.site_of(t.from))][static_cast<size_t>(lane)];
    rounds = std::max(rounds, round + 1);
  }

  for (size_t s = 0; s < grid.sites.size(); ++s) {
    const Site& site = grid.sites[s];
    if (site.ranks.empty()) continue;
    const auto p = static_cast<unsigned>(site.ranks.size());
    const auto q = static_cast<std::int64_t>(std::bit_width(p - 1));
    for (const CirculantPart& part : parts) {
      const std::uint64_t n = part.blocks.count;
      if (n == 0) continue;
      const std::string where =
          "circulant: site " + site.name + " lane " + std::to_string(part.lane) + ": ";
      // The instance's root sends n - 1 + q blocks; a lone node feeds n.
      const std::uint64_t most = n - 1 + static_cast<std::uint64_t>(std::max<std::int64_t>(q, 1));
      int idle = 0;
      for (int r : site.ranks) {
        if (sent[at(r, part.lane)] > most)
          errors.push_back(
              where + "rank " + std::to_string(r) + " sends " +
              std::to_string(sent[at(r, part.lane)]) +
              " blocks, more than its site's root must (n - 1 + q = " + std::to_string(most) + ")");
        const std::uint64_t got = received[at(r, part.lane)];
        if (got == 0) {
          ++idle;
        } else if (got != n) {
          errors.push_back(where + "rank " + std::to_string(r) + " receives " +
                           std::to_string(got) +
                           " blocks inside the site, not n = " + std::to_string(n));
        }
      }
      if (idle != 1)
        errors.push_back(where + std::to_string(idle) +
                         " ranks receive nothing inside the site; exactly one (its root) should");
      const std::int64_t limit = p == 1 ? 0 : static_cast<std::int64_t>(n) - 1 + q;
      const std::int64_t rounds = st.circulant_rounds[s][static_cast<size_t>(part.lane)];
      if (rounds > limit)
        errors.push_back(
            where + "the transfers take " + std::to_string(rounds) +
            " one-ported rounds in list order, more than n - 1 + q = " + std::to_string(limit) +
            " (n = " + std::to_string(n) + " blocks, q = " + std::to_string(q) + ")");
    }
  }
  const std::uint64_t want_wan = (grid.sites.size() - 1) * plan.size;
  if (st.wan_bytes != want_wan)
    errors.push_back("circulant: " + std::to_string(st.wan_bytes) +
                     " bytes cross sites, expected (sites-1)*M = " + std::to_string(want_wan));
}

}  // namespace

PlanCheck verify_plan(const Grid& grid, const Plan& plan) {
  PlanCheck check;
  auto& errors = check.errors;
  auto& st = check.stats;
  const int p = plan.ranks;
  const auto up = static_cast<size_t>(p);
  if (p != grid.size()) {
    errors.push_back("plan has " + std::to_string(p) + " ranks, topology " +
                     std::to_string(grid.size()));
    return check;
  }
  if (plan.root < 0 || plan.root >= p) {
    errors.push_back("root " + std::to_string(plan.root) + " out of range");
    return check;
  }
  if (plan.lanes < 1 || plan.lanes > kMaxLanes || plan.lanes != grid.lane_count()) {
    errors.push_back("plan has " + std::to_string(plan.lanes) + " lanes, the topology " +
                     std::to_string(grid.lane_count()));
    return check;
  }
  const auto lanes = static_cast<size_t>(plan.lanes);
  st.out_bytes.assign(lanes, std::vector<std::uint64_t>(up, 0));
  st.in_bytes.assign(lanes, std::vector<std::uint64_t>(up, 0));
  st.received.assign(up, 0);
  st.depth.assign(up, 0);
  st.site_depth.assign(grid.sites.size(), 0);

  std::vector<IntervalSet> holds(up);
  holds[static_cast<size_t>(plan.root)].add(0, plan.size);
  const bool multilane = plan.algorithm == Algorithm::kMultilane;
  std::vector<std::vector<ByteDepth>> byte_depth(multilane ? up : 0);
  const bool exact = plan.algorithm != Algorithm::kScatterRing;

  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& t = plan.transfers[i];
    if (t.from < 0 || t.from >= p || t.to < 0 || t.to >= p || t.from == t.to) {
      errors.push_back(describe(i, t) + ": bad ranks");
      continue;
    }
    if (t.length == 0 || t.offset > plan.size || t.length > plan.size - t.offset) {
      errors.push_back(describe(i, t) + ": empty or outside the message of " +
                       std::to_string(plan.size) + " bytes");
      continue;
    }
    if (t.lane_from < 0 || t.lane_from >= plan.lanes || t.lane_to < 0 || t.lane_to >= plan.lanes) {
      errors.push_back(describe(i, t) + ": lanes must be 0 to " + std::to_string(plan.lanes - 1));
      continue;
    }
    const int want_streams = grid.streams_between(t.from, t.to);
    if (t.streams != want_streams)
      errors.push_back(describe(i, t) + ": " + std::to_string(t.streams) +
                       " streams, the topology asks for " + std::to_string(want_streams));
    const bool same_site = grid.site_of(t.from) == grid.site_of(t.to);
    if (same_site && t.lane_from != t.lane_to)
      errors.push_back(describe(i, t) + ": crosses lanes inside a site (one switch per lane)");

    const auto from = static_cast<size_t>(t.from), to = static_cast<size_t>(t.to);
    if (!holds[from].contains(t.offset, t.offset + t.length))
      errors.push_back(describe(i, t) + ": causality: the sender does not hold these bytes yet");
    const std::uint64_t fresh = holds[to].add(t.offset, t.offset + t.length);
    st.duplicate_bytes += t.length - fresh;
    if (exact && fresh != t.length)
      errors.push_back(describe(i, t) + ": exactness: " + std::to_string(t.length - fresh) +
                       " bytes the receiver already holds");
    st.out_bytes[static_cast<size_t>(t.lane_from)][from] += t.length;
    st.in_bytes[static_cast<size_t>(t.lane_to)][to] += t.length;
    st.received[to] += t.length;
    if (!same_site) st.wan_bytes += t.length;
    if (multilane) {
      // Hops per byte range: parts travel independently, so a transfer is one
      // hop deeper than the bytes it forwards, not than everything its sender
      // received (multilane has at most 2k ranges per rank).
      int hops = 0;
      for (const ByteDepth& d : byte_depth[from])
        if (d.begin < t.offset + t.length && t.offset < d.end) hops = std::max(hops, d.hops);
      byte_depth[to].push_back(ByteDepth{t.offset, t.offset + t.length, hops + 1});
      st.depth[to] = std::max(st.depth[to], hops + 1);
    } else {
      st.depth[to] = std::max(st.depth[to], st.depth[from] + 1);
    }
  }

  verify_multicasts(grid, plan, holds, errors);
  if (plan.algorithm == Algorithm::kCirculant) verify_circulant(grid, plan, st, errors);

  for (int r = 0; r < p; ++r) {
    const auto ur = static_cast<size_t>(r);
    if (r != plan.root && holds[ur].total() != plan.size)
      errors.push_back("coverage: rank " + std::to_string(r) + " gets " +
                       std::to_string(holds[ur].total()) + " of " + std::to_string(plan.size) +
                       " bytes");
  }

  for (size_t s = 0; s < grid.sites.size(); ++s) {
    int lo = 1 << 30, hi = 0;
    for (int r : grid.sites[s].ranks) {
      const auto ur = static_cast<size_t>(r);
      lo = std::min(lo, r == plan.root ? 0 : st.depth[ur] - 1);
      hi = std::max(hi, st.depth[ur]);
    }
    st.site_depth[s] = plan.size == 0 ? 0 : hi - lo;
  }

  if (multilane && plan.size > 0) {
    // Each lane moves one part each way: ceil(M/k) bytes for even k, two pieces
    // of ceil(M/2k) for odd k (topology/plan/multilane.cpp).
    const auto k = static_cast<std::uint64_t>(plan.lanes);
    const auto ceil_div = [](std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); };
    const std::uint64_t limit =
        k % 2 == 0 ? ceil_div(plan.size, k) : 2 * ceil_div(plan.size, 2 * k);
    for (int r = 0; r < p; ++r) {
      const auto ur = static_cast<size_t>(r);
      for (size_t ul = 0; ul < lanes; ++ul) {
        if (st.out_bytes[ul][ur] > limit || st.in_bytes[ul][ur] > limit)
          errors.push_back("multilane: rank " + std::to_string(r) + " lane " + std::to_string(ul) +
                           " moves more than its part of " + std::to_string(limit) + " bytes (M/" +
                           std::to_string(k) + "; in " + std::to_string(st.in_bytes[ul][ur]) +
                           ", out " + std::to_string(st.out_bytes[ul][ur]) + ")");
      }
      if (r != plan.root && st.received[ur] != plan.size)
        errors.push_back("multilane: rank " + std::to_string(r) + " receives " +
                         std::to_string(st.received[ur]) + " bytes, not exactly M");
    }
    const std::uint64_t want_wan = (grid.sites.size() - 1) * plan.size;
    if (st.wan_bytes != want_wan)
      errors.push_back("multilane: " + std::to_string(st.wan_bytes) +
                       " bytes cross sites, expected (sites-1)*M = " + std::to_string(want_wan));
    for (size_t s = 0; s < grid.sites.size(); ++s) {
      const double n = static_cast<double>(grid.sites[s].ranks.size());
      const int bound = 2 * static_cast<int>(std::ceil(std::log2(n + 1))) + 2;
      if (st.site_depth[s] > bound)
        errors.push_back("multilane: site " + grid.sites[s].name + " is " +
                         std::to_string(st.site_depth[s]) + " hops deep, more than " +
                         std::to_string(bound) + " = O(log p)");
    }
  }
  return check;
}

}  // namespace gridbcast::topology
