// What healing costs, predicted: a node lost or slowed at some point of a
// file broadcast, priced the way `gridbcast launch` heals (docs/FILES.md,
// "When a node is lost" and "Slow nodes"): the launcher notices, the others
// run again over the survivors with --resume (the root digests what some
// survivor may hold, each survivor takes it on its chunk record's word, then
// the chunks some survivor lacks move),
// and a straggler then gets the rest of its copy from the root alone at its
// own rate. Pure arithmetic over the cost model's predictions; `gridbcast
// simulate --lose/--slow` prints it (docs/PERFORMANCE.md).
#pragma once

#include <cstdint>

#include "files/file_broadcast.hpp"

namespace gridbcast::cli {

struct HealCosts {
  double notice_loss_s = 0.3;  // a killed rank: its exit, and the launcher's grace for it
  // A straggler: 3 s behind from the start of the first slow report
  // interval, and the report that shows it (3.5-3.7 s on testbed-8x8).
  double notice_slow_s = 3.5;
  double restart_s = 0.5;           // the others' processes, rendezvous and plan, again
  double digest_bytes_per_s = 1e9;  // SHA-256 of the root's core (the resume check)
  std::uint64_t window_bytes = std::uint64_t{64}
                               << 20;  // what every survivor holds is whole windows
  // Above it the root digests only what some survivor may hold
  // (files::FileSpec::digests_on_demand_above).
  std::uint64_t digests_on_demand_above = files::FileSpec{}.digests_on_demand_above;
};

struct HealScenario {
  std::uint64_t bytes = 0;
  double undisturbed_s = 0;     // the prediction over every rank
  double survivors_s = 0;       // the prediction over the others (the lost or slow rank left out)
  double at_fraction = 0;       // when it happens, as a fraction of undisturbed_s
  bool slow = false;            // slowed (a straggler) rather than lost
  double slow_bytes_per_s = 0;  // a straggler's rate from then on
};

struct HealPrediction {
  double happens_s = 0;          // the loss or slowdown
  double noticed_s = 0;          // the launcher acts
  std::uint64_t held_bytes = 0;  // what every survivor holds then (whole windows)
  double check_s = 0;            // the resume check of the others' run
  double others_s = 0;           // the others done, from the start
  double straggler_s = 0;        // a straggler's own copy done, from the start (slow only)
};

HealPrediction predict_heal(const HealScenario& s, const HealCosts& c = {});

}  // namespace gridbcast::cli
