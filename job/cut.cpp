#include "job/cut.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace gridbcast::job {
namespace {

std::string who(const topology::Grid& g, int r) {
  return "rank " + std::to_string(r) + " (" + g.nodes.at(static_cast<size_t>(r)).name + ")";
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string wan_name(const topology::Grid& g, const topology::WanLink& w) {
  return g.sites.at(static_cast<size_t>(w.site_a)).name + "–" +
         g.sites.at(static_cast<size_t>(w.site_b)).name;
}

// "rank 2 (a3) to rank 5 (b1)" for up to four links, then a count.
std::string evidence(const topology::Grid& g, const std::vector<const LinkState*>& links) {
  constexpr size_t kListed = 4;
  std::string text;
  for (size_t i = 0; i < links.size() && i < kListed; ++i)
    text += (i ? ", " : "") + who(g, links[i]->from) + " to " + who(g, links[i]->to) +
            (links[i]->connecting ? " connecting" : "");
  if (links.size() > kListed) text += " and " + std::to_string(links.size() - kListed) + " more";
  return text;
}

// How the links stalled: "with data waiting", "with its connections
// unanswered", or both.
std::string how(const std::vector<const LinkState*>& links) {
  bool waiting = false, connecting = false;
  for (const auto* l : links) (l->connecting ? connecting : waiting) = true;
  return waiting && connecting ? "with data waiting or connections unanswered"
         : connecting          ? "with its connections unanswered"
                               : "with data waiting";
}

double longest(const std::vector<const LinkState*>& links) {
  double s = 0;
  for (const auto* l : links) s = std::max(s, l->seconds);
  return s;
}

}  // namespace

CutVerdict explain_cut(const topology::Grid& grid, int root, const std::vector<LinkState>& links,
                       const std::function<bool(const topology::Grid&)>& chains_sites) {
  const size_t p = static_cast<size_t>(grid.size());
  std::vector<const LinkState*> stalled;
  std::vector<int> count(p, 0);  // stalled links touching each rank
  auto in_grid = [&](const LinkState& l) {
    return l.from >= 0 && l.to >= 0 && l.from < grid.size() && l.to < grid.size() && l.from != l.to;
  };
  for (const auto& l : links)
    if (l.stalled && in_grid(l)) {
      stalled.push_back(&l);
      ++count[static_cast<size_t>(l.from)];
      ++count[static_cast<size_t>(l.to)];
    }
  CutVerdict v;
  if (stalled.empty()) return v;
  auto same_site = [&](const LinkState* l) { return grid.site_of(l->from) == grid.site_of(l->to); };
  auto path_of = [&](const LinkState* l) {
    return grid.wan_path(grid.site_of(l->from), grid.site_of(l->to));
  };
  // The end a link's stall is blamed on: the one with more stalled links, a tie the receiver.
  auto end_of = [&](const LinkState* l) {
    return count[static_cast<size_t>(l->from)] > count[static_cast<size_t>(l->to)] ? l->from
                                                                                   : l->to;
  };
  // The WAN links something still moved across.
  std::set<const topology::WanLink*> alive;
  for (const auto& l : links)
    if (l.moved && in_grid(l))
      for (const auto* w : grid.wan_path(grid.site_of(l.from), grid.site_of(l.to))) alive.insert(w);
  auto carries = [&](const LinkState* l) {
    const auto path = path_of(l);
    return std::all_of(path.begin(), path.end(), [&](const auto* w) { return alive.count(w) > 0; });
  };

  // 1. Inside sites, and between sites over a path that carries: nodes.
  std::map<int, std::vector<const LinkState*>> blamed_nodes;
  for (const auto* l : stalled)
    if (same_site(l) || carries(l)) blamed_nodes[end_of(l)].push_back(l);
  auto explained = [&](const LinkState* l) {
    return blamed_nodes.count(l->from) > 0 || blamed_nodes.count(l->to) > 0;
  };

  // 2. The others between sites: the WAN links that carry nothing.
  std::vector<const LinkState*> across;
  for (const auto* l : stalled)
    if (!same_site(l) && !carries(l) && !explained(l)) across.push_back(l);
  std::map<const topology::WanLink*, std::vector<const LinkState*>> blamed_wan;
  while (!across.empty()) {
    // The suspect link on the most paths, the first in the topology on a tie.
    std::map<const topology::WanLink*, int> on_paths;
    for (const auto* l : across)
      for (const auto* w : path_of(l))
        if (alive.count(w) == 0) ++on_paths[w];
    const topology::WanLink* pick = nullptr;
    for (const auto& w : grid.wan)
      if (const auto it = on_paths.find(&w);
          it != on_paths.end() && (pick == nullptr || it->second > on_paths[pick]))
        pick = &w;
    if (pick == nullptr) break;  // cannot be: every link here has a suspect on its path
    std::vector<const LinkState*> rest;
    for (const auto* l : across) {
      const auto path = path_of(l);
      if (std::find(path.begin(), path.end(), pick) != path.end())
        blamed_wan[pick].push_back(l);
      else
        rest.push_back(l);
    }
    across = std::move(rest);
  }

  // 3. The sites the root's site still reaches without the blamed links.
  const int root_site = grid.site_of(root);
  auto reach = [&](const auto& dead) {
    std::vector<bool> reached(grid.sites.size(), false);
    std::vector<int> queue{root_site};
    reached[static_cast<size_t>(root_site)] = true;
    while (!queue.empty()) {
      const int s = queue.back();
      queue.pop_back();
      for (const auto& w : grid.wan) {
        if (dead(&w) || (w.site_a != s && w.site_b != s)) continue;
        const int other = w.site_a == s ? w.site_b : w.site_a;
        if (!reached[static_cast<size_t>(other)]) {
          reached[static_cast<size_t>(other)] = true;
          queue.push_back(other);
        }
      }
    }
    return reached;
  };
  std::vector<bool> reached =
      reach([&](const topology::WanLink* w) { return blamed_wan.count(w) > 0; });
  auto between_reached = [&](const topology::WanLink& w) {
    return reached[static_cast<size_t>(w.site_a)] && reached[static_cast<size_t>(w.site_b)];
  };
  // Routed around only where the next plan keeps to direct links: else
  // the sites whose way from the root's site crossed a blamed link are lost.
  bool around = false;
  for (const auto& w : grid.wan)
    around = around || (blamed_wan.count(&w) > 0 && between_reached(w));
  if (around) {
    topology::Grid next = grid;
    std::erase_if(next.wan, [&](const topology::WanLink& w) {
      for (const auto& [dead, why] : blamed_wan)
        if (dead->site_a == w.site_a && dead->site_b == w.site_b) return true;
      return false;
    });
    bool direct = !chains_sites || chains_sites(next);
    const auto chain = next.site_chain(root_site);
    for (size_t i = 1; direct && i < chain.size(); ++i)
      direct = next.link_between(chain[i - 1], chain[i]) != nullptr;
    if (!direct)
      for (int s = 0; s < static_cast<int>(grid.sites.size()); ++s)
        for (const auto* w : grid.wan_path(root_site, s))
          if (blamed_wan.count(w) > 0) reached[static_cast<size_t>(s)] = false;
  }
  std::string dead_links;  // what cut the unreached sites off: two links, then a count
  int dead_count = 0;
  for (const auto& w : grid.wan) {
    const auto it = blamed_wan.find(&w);
    if (it == blamed_wan.end()) continue;
    const std::string what = "WAN link " + wan_name(grid, w) + " moved nothing for " +
                             seconds_text(longest(it->second)) + " " + how(it->second) + " (" +
                             evidence(grid, it->second) + ")";
    if (between_reached(w)) {
      v.routed_around.push_back({w.site_a, w.site_b, what});
    } else if (++dead_count <= 2) {
      dead_links += (dead_links.empty() ? "" : "; ") + what;
    }
  }
  if (dead_count > 2) dead_links += "; and " + std::to_string(dead_count - 2) + " more WAN links";
  for (int r = 0; r < grid.size(); ++r) {
    const int site = grid.site_of(r);
    if (!reached[static_cast<size_t>(site)]) {
      v.cut_off.push_back({r, "cut off with site " + grid.sites[static_cast<size_t>(site)].name +
                                  ": " + dead_links});
    } else if (const auto it = blamed_nodes.find(r); it != blamed_nodes.end()) {
      v.cut_off.push_back({r, "cut off from its peers: its links (" + evidence(grid, it->second) +
                                  ") moved nothing for " + seconds_text(longest(it->second)) + " " +
                                  how(it->second)});
    }
  }
  return v;
}

}  // namespace gridbcast::job
