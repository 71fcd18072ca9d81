#include "topology/probe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "topology/units.hpp"

namespace gridbcast::topology {
namespace {

// The NICs the probe grid gives a node a lane each.
int probed_nics(const Node& n) {
  return std::min(static_cast<int>(n.nics.size()), kMaxLanes);
}

// Per site and NIC index: the site's nodes that have that NIC, in rank order.
std::vector<std::vector<std::vector<int>>> rings(const Grid& g, int most) {
  std::vector<std::vector<std::vector<int>>> out(g.sites.size());
  for (size_t s = 0; s < g.sites.size(); ++s) {
    out[s].resize(static_cast<size_t>(most));
    for (int j = 0; j < most; ++j)
      for (const int r : g.sites[s].ranks)
        if (probed_nics(g.nodes[static_cast<size_t>(r)]) > j)
          out[s][static_cast<size_t>(j)].push_back(r);
  }
  return out;
}

// Every member of `ring` to the one `step` ahead (1) or behind (-1), on NIC
// j. Behind is the same pairs as ahead on a ring of two: none then.
void ring_flows(const std::vector<int>& ring, int j, int step, ProbeKind kind,
                std::vector<ProbeFlow>& flows) {
  const int n = static_cast<int>(ring.size());
  if (n < 2 || (step < 0 && n < 3)) return;
  for (int i = 0; i < n; ++i) {
    ProbeFlow f;
    f.kind = kind;
    f.from = ring[static_cast<size_t>(i)];
    f.to = ring[static_cast<size_t>((i + step + n) % n)];
    f.nic_from = f.nic_to = j;
    flows.push_back(f);
  }
}

struct WanPair {
  int a, b;  // ranks in site_a, site_b
};

// Up to `most` node pairs per WAN link; each site deals its nodes to its
// links in turn, so links that share a site use different nodes where it has
// enough of them.
std::vector<std::vector<WanPair>> wan_pairs(const Grid& g, int most) {
  std::vector<size_t> cursor(g.sites.size(), 0);
  std::vector<std::vector<WanPair>> out;
  for (const WanLink& l : g.wan) {
    const auto& a = g.sites[static_cast<size_t>(l.site_a)].ranks;
    const auto& b = g.sites[static_cast<size_t>(l.site_b)].ranks;
    const size_t m = std::min({static_cast<size_t>(most), a.size(), b.size()});
    std::vector<WanPair> pairs;
    for (size_t i = 0; i < m; ++i)
      pairs.push_back({a[(cursor[static_cast<size_t>(l.site_a)] + i) % a.size()],
                       b[(cursor[static_cast<size_t>(l.site_b)] + i) % b.size()]});
    cursor[static_cast<size_t>(l.site_a)] += m;
    cursor[static_cast<size_t>(l.site_b)] += m;
    out.push_back(std::move(pairs));
  }
  return out;
}

int most_nics(const Grid& g) {
  int most = 1;
  for (const Node& n : g.nodes) most = std::max(most, probed_nics(n));
  return most;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string nic_name(const Grid& g, int rank, int j) {
  const Node& n = g.nodes[static_cast<size_t>(rank)];
  return n.name + " nic " + std::to_string(j) + " (" + n.nics[static_cast<size_t>(j)].address + ")";
}

}  // namespace

Grid probe_grid(const Grid& declared) {
  Grid g = declared;
  for (Node& n : g.nodes)
    for (Nic& nic : n.nics) nic.bandwidth_bps = 1e9;
  // Equal NICs take lanes in turn (Node::lane_nic_index): lane j is NIC j.
  g.lanes = std::clamp(most_nics(declared), 2, kMaxLanes);
  g.pace_lanes = false;
  return g;
}

std::vector<ProbePhase> probe_schedule(const Grid& g, const ProbeSettings& s) {
  const auto bad = [](const std::string& what) { throw std::invalid_argument("probe: " + what); };
  if (!(s.lan_seconds >= 0.05 && s.lan_seconds <= 600)) bad("the LAN phases last 0.05..600 s");
  if (!(s.wan_seconds >= 0.05 && s.wan_seconds <= 600)) bad("the WAN phase lasts 0.05..600 s");
  if (!(s.latency_seconds >= 0.01 && s.latency_seconds <= 600))
    bad("the latency phase lasts 0.01..600 s");
  if (s.pings < 2 || s.pings > 10000) bad("2..10000 pings per flow");
  if (s.wan_pairs < 1 || s.wan_pairs > 64) bad("1..64 node pairs per WAN link");
  const int most = most_nics(g);
  const auto by_nic = rings(g, most);
  const auto pairs = wan_pairs(g, s.wan_pairs);
  std::vector<ProbePhase> phases;

  ProbePhase latency{"latency", s.latency_seconds, {}, ProbePhaseKind::kLatency};
  for (const auto& site : by_nic)
    for (int j = 0; j < most; ++j)
      ring_flows(site[static_cast<size_t>(j)], j, 1, ProbeKind::kLatency, latency.flows);
  for (size_t i = 0; i < g.wan.size(); ++i) {
    if (pairs[i].empty()) continue;
    ProbeFlow f;
    f.kind = ProbeKind::kLatency;
    f.from = pairs[i].front().a;
    f.to = pairs[i].front().b;
    f.wan = static_cast<int>(i);
    latency.flows.push_back(f);
  }
  if (!latency.flows.empty()) phases.push_back(std::move(latency));

  // Under a rate limit a rate phase, which sends as fast as the links allow,
  // would break it: only latencies are probed (estimate says so).
  const bool rates = !g.rate_limited();
  // NIC j alone for all but the last index: a NIC that shares with another
  // shows as one of the two running faster alone than all together.
  if (rates && most >= 2)
    for (int j = 0; j + 1 < most; ++j) {
      ProbePhase alone{
          "nic " + std::to_string(j) + " alone", s.lan_seconds, {}, ProbePhaseKind::kAlone};
      for (const auto& site : by_nic)
        ring_flows(site[static_cast<size_t>(j)], j, 1, ProbeKind::kRate, alone.flows);
      if (!alone.flows.empty()) phases.push_back(std::move(alone));
    }
  for (const int step : {1, -1}) {
    if (!rates) break;
    ProbePhase all{step > 0 ? "all nics, ring ahead" : "all nics, ring behind",
                   s.lan_seconds,
                   {},
                   ProbePhaseKind::kRing};
    for (const auto& site : by_nic)
      for (int j = 0; j < most; ++j)
        ring_flows(site[static_cast<size_t>(j)], j, step, ProbeKind::kRate, all.flows);
    if (!all.flows.empty()) phases.push_back(std::move(all));
  }

  // One direction at a time, as a broadcast's chain uses a link; long enough
  // for TCP to open its window over the slowest link (60 one-way latencies).
  double wan_seconds = s.wan_seconds;
  for (const WanLink& l : g.wan) wan_seconds = std::max(wan_seconds, 60 * l.latency_s);
  for (const bool forward : {true, false}) {
    if (!rates) break;
    ProbePhase wan{forward ? "wan, each link's first site to its second"
                           : "wan, each link's second site to its first",
                   wan_seconds,
                   {},
                   ProbePhaseKind::kWan};
    for (size_t i = 0; i < g.wan.size(); ++i)
      for (const WanPair& p : pairs[i]) {
        const int common = std::min(probed_nics(g.nodes[static_cast<size_t>(p.a)]),
                                    probed_nics(g.nodes[static_cast<size_t>(p.b)]));
        for (int j = 0; j < common; ++j) {
          ProbeFlow f;
          f.from = forward ? p.a : p.b;
          f.to = forward ? p.b : p.a;
          f.nic_from = f.nic_to = j;
          f.streams = g.wan[i].streams;
          f.wan = static_cast<int>(i);
          wan.flows.push_back(f);
        }
      }
    if (!wan.flows.empty()) phases.push_back(std::move(wan));
  }
  // Stream ids (ProbeFlow::stream): a connection of its own for every flow.
  int lan_phases = 0;
  for (const ProbePhase& ph : phases)
    if (ph.kind != ProbePhaseKind::kWan) ++lan_phases;
  for (size_t i = 0; i < phases.size(); ++i)
    for (ProbeFlow& f : phases[i].flows) {
      if (f.kind == ProbeKind::kRate && f.wan >= 0) {
        f.stream = 0;
        f.streams = std::min(f.streams, kProbeTopStream + 1 - lan_phases - kMaxConfirmPhases);
      } else {
        f.stream = kProbeTopStream - static_cast<int>(i);
      }
    }
  return phases;
}

std::vector<int> flows_of(const ProbePhase& phase, int rank) {
  std::vector<int> out;
  for (size_t i = 0; i < phase.flows.size(); ++i)
    if (phase.flows[i].from == rank || phase.flows[i].to == rank)
      out.push_back(static_cast<int>(i));
  return out;
}

bool ProbeRow::flagged() const {
  if (!declared || !measured || *declared <= 0) return false;
  const double d = *declared, m = *measured;
  if (lower_bound) return m > 1.25 * d;
  return std::abs(m - d) > 0.25 * d;
}

ProbeEstimate estimate(const Grid& declared, const std::vector<ProbePhase>& phases,
                       const std::vector<std::vector<ProbeSample>>& samples) {
  if (samples.size() != phases.size())
    throw std::invalid_argument("probe: " + std::to_string(samples.size()) +
                                " phases of samples for a schedule of " +
                                std::to_string(phases.size()));
  const Grid& g = declared;
  const int p = g.size();
  const int most = most_nics(g);
  // Per (rank, nic): the best rate out and in over the "all nics" phases, and
  // out over the "alone" phase of that NIC; wire bits per second.
  std::vector<std::vector<double>> send(static_cast<size_t>(p),
                                        std::vector<double>(static_cast<size_t>(most), -1));
  auto recv = send, alone = send;
  std::vector<std::vector<double>> site_hops(g.sites.size());
  std::vector<double> wan_latency(g.wan.size(), -1);
  // Per WAN link and direction (0: a -> b): the sum of its flows, and whether
  // every flow ran at its NICs' rate (then the link may be faster).
  std::vector<std::array<double, 2>> wan_rate(g.wan.size(), {0, 0});
  std::vector<std::array<int, 2>> wan_flows(g.wan.size(), {0, 0});
  struct WanFlow {
    int link, dir, from, to, nic;
    double bps;
  };
  std::vector<WanFlow> wan_measured;
  std::map<std::pair<int, int>, double> fan_out, fan_in;  // confirmations, by (rank, nic)
  std::set<std::pair<int, int>> ringed;                   // NICs some ring flow measured

  for (size_t ph = 0; ph < phases.size(); ++ph) {
    const ProbePhase& phase = phases[ph];
    std::set<int> seen;
    for (const ProbeSample& smp : samples[ph]) {
      if (smp.flow < 0 || smp.flow >= static_cast<int>(phase.flows.size()))
        throw std::invalid_argument("probe: a sample of flow " + std::to_string(smp.flow) +
                                    " in phase \"" + phase.name + "\", which has " +
                                    std::to_string(phase.flows.size()));
      if (!seen.insert(smp.flow).second)
        throw std::invalid_argument("probe: flow " + std::to_string(smp.flow) + " of phase \"" +
                                    phase.name + "\" measured twice");
      const ProbeFlow& f = phase.flows[static_cast<size_t>(smp.flow)];
      if (f.kind == ProbeKind::kLatency) {
        if (smp.pings < 1 || smp.rtt_min_s <= 0) continue;
        const double one_way = smp.rtt_min_s / 2;
        if (f.wan >= 0) {
          auto& l = wan_latency[static_cast<size_t>(f.wan)];
          l = l < 0 ? one_way : std::min(l, one_way);
        } else {
          site_hops[static_cast<size_t>(g.site_of(f.from))].push_back(one_way);
        }
        continue;
      }
      if (phase.kind == ProbePhaseKind::kRing) {
        ringed.insert({f.from, f.nic_from});
        ringed.insert({f.to, f.nic_to});
      }
      if (smp.seconds <= 0) continue;
      const double bps = smp.rate_bps() / kPayloadEfficiency;
      const auto fr = static_cast<size_t>(f.from), to = static_cast<size_t>(f.to);
      const auto jf = static_cast<size_t>(f.nic_from), jt = static_cast<size_t>(f.nic_to);
      if (f.wan >= 0) {
        const WanLink& l = g.wan[static_cast<size_t>(f.wan)];
        const int dir = g.site_of(f.from) == l.site_a ? 0 : 1;
        wan_rate[static_cast<size_t>(f.wan)][static_cast<size_t>(dir)] += bps;
        ++wan_flows[static_cast<size_t>(f.wan)][static_cast<size_t>(dir)];
        wan_measured.push_back({f.wan, dir, f.from, f.to, f.nic_from, bps});
      } else if (phase.kind == ProbePhaseKind::kRing) {
        send[fr][jf] = std::max(send[fr][jf], bps);
        recv[to][jt] = std::max(recv[to][jt], bps);
      } else if (phase.kind == ProbePhaseKind::kConfirm) {
        fan_out[{f.from, f.nic_from}] += bps;
        fan_in[{f.to, f.nic_to}] += bps;
      } else {
        alone[fr][jf] = std::max(alone[fr][jf], bps);
      }
    }
  }

  // A confirmation's fans: each NIC's flows together (a target's are several).
  for (const auto& [key, bps] : fan_out) {
    auto& v = send[static_cast<size_t>(key.first)][static_cast<size_t>(key.second)];
    v = std::max(v, bps);
  }
  for (const auto& [key, bps] : fan_in) {
    auto& v = recv[static_cast<size_t>(key.first)][static_cast<size_t>(key.second)];
    v = std::max(v, bps);
  }

  ProbeEstimate out;
  out.measured = declared;
  Grid& m = out.measured;
  const bool rates = !g.rate_limited();  // probe_schedule probed none under a limit
  if (!rates)
    out.notes.push_back(
        "rate limits are set (defaults.max_rate, --max-rate or a WAN link's max_rate): NIC and "
        "WAN rates were not probed, since a probe sends as fast as the links allow; the declared "
        "figures stand");
  for (int r = 0; r < p; ++r) {
    const Node& node = g.nodes[static_cast<size_t>(r)];
    for (int j = 0; j < probed_nics(node); ++j) {
      const auto rj = static_cast<size_t>(r);
      const auto jj = static_cast<size_t>(j);
      const double d = node.nics[jj].bandwidth_bps;
      for (const bool out_dir : {true, false}) {
        ProbeRow row;
        row.what = nic_name(g, r, j) + (out_dir ? " send" : " receive");
        row.unit = "bit/s";
        row.declared = d;
        const double v = out_dir ? send[rj][jj] : recv[rj][jj];
        if (v > 0) row.measured = v;
        out.rows.push_back(std::move(row));
      }
      // A flow runs at min(send of one end, receive of the other): each
      // figure is a floor, exact when some partner was at least as fast. A
      // NIC takes one figure both ways (Grid, full duplex), the higher: the
      // lower one most likely met slower partners only.
      const double s = send[rj][jj], rv = recv[rj][jj];
      // Within 25 % of each other both are the NIC's own rate: their mean
      // halves a shaper's burst in either; further apart, the higher.
      const double nic = s > 0 && rv > 0 && std::max(s, rv) <= 1.25 * std::min(s, rv)
                             ? (s + rv) / 2
                             : std::max(s, rv);
      if (s > 0 && rv > 0 && std::max(s, rv) > 1.25 * std::min(s, rv))
        out.notes.push_back(nic_name(g, r, j) + " sent at " + format_bandwidth(s) +
                            " and received at " + format_bandwidth(rv) +
                            ": the lower figure most likely met only slower partners; the "
                            "topology gets the higher");
      if (nic > 0)
        m.nodes[rj].nics[jj].bandwidth_bps = nic;
      else if (!rates)
        continue;  // said once, above
      else if (ringed.count({r, j}))
        out.notes.push_back(nic_name(g, r, j) +
                            ": its flows brought nothing countable in their windows: its declared "
                            "bandwidth stays");
      else
        out.notes.push_back(nic_name(g, r, j) +
                            " was not measured (no other node of its site has a NIC " +
                            std::to_string(j) + "): its declared bandwidth stays");
    }
    // NICs that do not keep their rate when all run: they share something.
    if (probed_nics(node) >= 2) {
      std::string alone_text, together_text;
      bool shared = false;
      for (int j = 0; j < probed_nics(node); ++j) {
        const double a = alone[static_cast<size_t>(r)][static_cast<size_t>(j)];
        const double t = send[static_cast<size_t>(r)][static_cast<size_t>(j)];
        if (a <= 0 || t <= 0) continue;
        shared = shared || t < 0.75 * a;
        alone_text += (alone_text.empty() ? "" : ", ") + format_bandwidth(a);
        together_text += (together_text.empty() ? "" : ", ") + format_bandwidth(t);
      }
      if (shared)
        out.notes.push_back(node.name + ": its NICs do not keep their rates when all send (alone " +
                            alone_text + "; together " + together_text +
                            "): they share a link, a queue or a bus; the measured figures are "
                            "those of all together, what a broadcast gets");
    }
  }
  for (size_t s = 0; s < g.sites.size(); ++s) {
    ProbeRow row;
    row.what = "site " + g.sites[s].name + " one hop (one way)";
    row.unit = "s";
    if (g.sites[s].latency_s > 0) row.declared = g.sites[s].latency_s;
    if (!site_hops[s].empty()) {
      row.measured = median(site_hops[s]);
      m.sites[s].latency_s = *row.measured;
    }
    out.rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < g.wan.size(); ++i) {
    const WanLink& l = g.wan[i];
    const std::string name = "wan " + g.sites[static_cast<size_t>(l.site_a)].name + "-" +
                             g.sites[static_cast<size_t>(l.site_b)].name;
    ProbeRow lat{name + " latency (one way)", "s", l.latency_s, std::nullopt, false, ""};
    if (wan_latency[i] > 0) {
      lat.measured = wan_latency[i];
      m.wan[i].latency_s = wan_latency[i];
    }
    out.rows.push_back(std::move(lat));
    double least = -1;
    bool floor_only = true;
    for (const int dir : {0, 1}) {
      const auto& from_site = g.sites[static_cast<size_t>(dir == 0 ? l.site_a : l.site_b)].name;
      const auto& to_site = g.sites[static_cast<size_t>(dir == 0 ? l.site_b : l.site_a)].name;
      ProbeRow row{name + " bandwidth " + from_site + "->" + to_site,
                   "bit/s",
                   l.bandwidth_bps,
                   std::nullopt,
                   false,
                   ""};
      if (wan_flows[i][static_cast<size_t>(dir)] > 0) {
        const double rate = wan_rate[i][static_cast<size_t>(dir)];
        row.measured = rate;
        // The flows together ran at (nearly) what their NICs allow: the
        // nodes, not the link, set the figure; the link is at least this fast.
        double caps = 0;
        bool known = true;
        for (const WanFlow& w : wan_measured) {
          if (static_cast<size_t>(w.link) != i || w.dir != dir) continue;
          const double cap = std::min(
              m.nodes[static_cast<size_t>(w.from)].nics[static_cast<size_t>(w.nic)].bandwidth_bps,
              m.nodes[static_cast<size_t>(w.to)].nics[static_cast<size_t>(w.nic)].bandwidth_bps);
          known = known && cap > 0;
          caps += cap;
        }
        const bool nic_bound = known && rate >= 0.85 * caps;
        row.lower_bound = nic_bound;
        if (nic_bound) row.note = "at least: the nodes' NICs, not the link, limited it";
        floor_only = floor_only && nic_bound;
        least = least < 0 ? rate : std::min(least, rate);
      }
      out.rows.push_back(std::move(row));
    }
    if (least > 0) m.wan[i].bandwidth_bps = floor_only ? std::max(least, l.bandwidth_bps) : least;
  }
  // Lanes that share a NIC are paced to their part of it, now that the NIC's
  // rate is measured rather than trusted (docs/TOPOLOGY.md, "pace_lanes").
  const int k = m.lane_count();
  for (const Node& n : m.nodes) {
    std::set<int> used;
    for (int l = 0; l < k; ++l) used.insert(n.lane_nic_index(l));
    if (rates && static_cast<int>(used.size()) < k) m.pace_lanes = true;
  }
  for (const ProbeRow& row : out.rows) out.flagged += row.flagged() ? 1 : 0;
  return out;
}

std::vector<ProbePhase> confirm_phases(const Grid& declared, const std::vector<ProbePhase>& phases,
                                       const std::vector<std::vector<ProbeSample>>& samples,
                                       const ProbeSettings& settings) {
  const ProbeEstimate e = estimate(declared, phases, samples);
  const auto figure = [&](int r, int j) {
    return e.measured.nodes[static_cast<size_t>(r)].nics[static_cast<size_t>(j)].bandwidth_bps;
  };
  // Per NIC: the fastest partner it met on the rings.
  std::map<std::pair<int, int>, double> fastest_partner;
  for (const ProbePhase& ph : phases) {
    if (ph.kind != ProbePhaseKind::kRing) continue;
    for (const ProbeFlow& f : ph.flows) {
      auto& a = fastest_partner[{f.from, f.nic_from}];
      a = std::max(a, figure(f.to, f.nic_to));
      auto& b = fastest_partner[{f.to, f.nic_to}];
      b = std::max(b, figure(f.from, f.nic_from));
    }
  }
  struct Target {
    int rank, nic;
    double claim;
  };
  std::vector<Target> targets;
  std::set<std::pair<int, int>> suspect;
  for (const auto& [key, partner] : fastest_partner) {
    const auto [r, j] = key;
    const double f = figure(r, j);
    const double d =
        declared.nodes[static_cast<size_t>(r)].nics[static_cast<size_t>(j)].bandwidth_bps;
    if (f < 0.75 * d && partner < 1.15 * f) {
      targets.push_back({r, j, d});
      suspect.insert(key);
    }
  }
  std::vector<ProbePhase> out;
  // Stream ids: below the schedule's phases inside the sites, one per
  // confirmation, after those that ran already.
  int lan_phases = 0, confirmed = 0;
  for (const ProbePhase& ph : phases) {
    if (ph.kind != ProbePhaseKind::kWan && ph.kind != ProbePhaseKind::kConfirm) ++lan_phases;
    if (ph.kind == ProbePhaseKind::kConfirm) ++confirmed;
  }
  for (int c = confirmed; c < kMaxConfirmPhases && !targets.empty(); ++c) {
    ProbePhase phase{
        "confirm " + std::to_string(c + 1) + ": fans for NICs that met only slower partners",
        settings.lan_seconds,
        {},
        ProbePhaseKind::kConfirm};
    std::set<std::pair<int, int>> busy;  // NICs already in a fan of this phase
    std::vector<Target> later;
    for (const Target& t : targets) {
      if (busy.count({t.rank, t.nic})) {
        later.push_back(t);
        continue;
      }
      // Partners: the site's other NICs of this index, fastest first, until
      // together they could carry the claim (at most four).
      std::vector<std::pair<double, int>> candidates;
      for (const int o : declared.sites[static_cast<size_t>(declared.site_of(t.rank))].ranks) {
        if (o == t.rank || probed_nics(declared.nodes[static_cast<size_t>(o)]) <= t.nic) continue;
        if (busy.count({o, t.nic}) || suspect.count({o, t.nic})) continue;
        candidates.push_back({figure(o, t.nic), o});
      }
      std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      std::vector<int> partners;
      double carry = 0;
      for (const auto& [fig, o] : candidates) {
        if (carry >= 1.2 * t.claim || partners.size() == 4) break;
        partners.push_back(o);
        carry += fig;
      }
      if (partners.size() < 2) continue;  // no fan to be had: the figure stays a floor
      busy.insert({t.rank, t.nic});
      for (const int o : partners) {
        busy.insert({o, t.nic});
        for (const bool in : {true, false}) {
          ProbeFlow f;
          f.from = in ? o : t.rank;
          f.to = in ? t.rank : o;
          f.nic_from = f.nic_to = t.nic;
          f.stream = kProbeTopStream - lan_phases - c;
          phase.flows.push_back(f);
        }
      }
    }
    if (!phase.flows.empty()) out.push_back(std::move(phase));
    targets = std::move(later);
  }
  return out;
}

}  // namespace gridbcast::topology
