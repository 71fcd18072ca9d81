// Cut off: which nodes and WAN links a broadcast lost when its links stop
// moving while every rank still answers the launcher (a cut cable, a NIC or
// WAN link down, a data network apart from the control network).
//
// The ranks' progress deadlines notice such a loss, but every rank below the
// cut reports "no data from <its parent>", and its parent is alive: the
// reports name the victims as readily as the culprit. The senders' kernels
// tell them apart (job/straggler.hpp): a link that is *stalled* had data
// waiting or in flight, was not held back by its receiver's window, and had
// nothing acknowledged for seconds, or had its connections unanswered as long,
// which a live network never does; the links below a cut are idle, not
// stalled (their senders have nothing to send).
//
//        a1 ──► a3 ══╳══► b1 ──► b3        a3→b1 stalled: WAN link a–b,
//         │           └──► b2 ──► b4        unless a link across it still
//         └──► a2                           moves (then b1 alone)
//
// The rule, over the stalled and the moving links at the first failure:
//  1. A stalled link inside a site is blamed on the end with more stalled
//     links, a tie on the receiver (below a dead NIC every link of the
//     node stalls; each peer of it has one).
//  2. A stalled link between sites whose path still carries (a link that
//     moved crosses each of its WAN links) is blamed on a node, as in 1;
//     then every other one whose ends are not blamed, on the WAN link of
//     its path that carries nothing (of several, the one on the most such
//     paths, then the first in the topology).
//  3. Sites the root's site no longer reaches without the blamed WAN links
//     are cut off, every node of them. Blamed WAN links between sites it
//     still reaches are routed around when the next run's plan keeps to
//     direct links between sites (`chains_sites`: multilane and circulant
//     feed each site from the one before it in Grid::site_chain, and every
//     such pair is linked), so no packet needs the network to route around
//     the dead link; else the sites whose path from the root's site crossed
//     it are cut off too.
// With one link across a WAN, a dead NIC at its receiving gateway looks the
// same as the WAN link dead: the site (and what lies beyond) is cut off.
// Pure: the launcher calls it once, when a broadcast fails while no rank
// died or went silent (job/launcher.cpp; docs/FILES.md, "When a node is
// lost").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::job {

// What a sender's kernel said of one of its links (all lanes between the
// pair) in its latest report: stalled, or moving (something acknowledged
// since the report before). Idle links are not listed.
struct LinkState {
  int from = -1, to = -1;
  bool stalled = false;
  double seconds = 0;         // stalled: for how long
  std::uint64_t waiting = 0;  // stalled: bytes not yet sent or not yet acknowledged
  bool connecting = false;    // stalled: no stream of it up, its connections unanswered
  // Some lane of the pair had something acknowledged since the report
  // before (every listed pair that is not stalled; a stalled one too when
  // another of its lanes still moves): the WAN path between them carries.
  bool moved = false;
};

struct CutVerdict {
  struct Node {
    int rank = -1;
    std::string cause;  // "cut off from its peers: ..." / "cut off with site b: ..."
  };
  std::vector<Node> cut_off;  // ascending ranks; may include the root
  struct Wan {
    int site_a = -1, site_b = -1;  // the grid's site indices
    std::string cause;             // "WAN link a–b moved nothing for ..."
  };
  // Blamed WAN links between sites the root's site still reaches: the
  // others go on without them.
  std::vector<Wan> routed_around;
  bool empty() const { return cut_off.empty() && routed_around.empty(); }
};

// `links` come from StragglerWatch::links (ranks in range, as it checks).
// `chains_sites(next)`: whether the next run, over `next` (the grid without
// the links to route around), plans with multilane or circulant; none: it
// does.
CutVerdict explain_cut(const topology::Grid& grid, int root, const std::vector<LinkState>& links,
                       const std::function<bool(const topology::Grid&)>& chains_sites = {});

}  // namespace gridbcast::job
