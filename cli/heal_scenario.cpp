#include "cli/heal_scenario.hpp"

#include <algorithm>
#include <cmath>

namespace gridbcast::cli {

HealPrediction predict_heal(const HealScenario& s, const HealCosts& c) {
  HealPrediction p;
  const double bytes = static_cast<double>(s.bytes);
  const double rate = s.undisturbed_s > 0 ? bytes / s.undisturbed_s : 0;  // undisturbed progress
  p.happens_s = s.at_fraction * s.undisturbed_s;
  p.noticed_s = p.happens_s + (s.slow ? c.notice_slow_s : c.notice_loss_s);
  // Until then the pipeline moved at its rate; after a slowdown, at the
  // straggler's (every window waits for it).
  double moved = rate * p.happens_s;
  if (s.slow) moved += std::min(rate, s.slow_bytes_per_s) * (p.noticed_s - p.happens_s);
  moved = std::min(moved, bytes);
  const auto window = static_cast<double>(std::max<std::uint64_t>(c.window_bytes, 1));
  p.held_bytes = static_cast<std::uint64_t>(std::floor(moved / window) * window);
  const double held = static_cast<double>(p.held_bytes);
  // The root digests what some survivor may hold (a file over the on-demand
  // threshold; a smaller one whole); each survivor takes what it holds on
  // its sealed chunk record's word (the launcher stopped it with SIGTERM),
  // so reads back nothing.
  const double digested = s.bytes > c.digests_on_demand_above ? held : bytes;
  p.check_s = c.digest_bytes_per_s > 0 ? digested / c.digest_bytes_per_s : 0;
  const double rest = bytes > 0 ? (bytes - held) / bytes : 0;
  p.others_s = p.noticed_s + c.restart_s + p.check_s + s.survivors_s * rest;
  if (s.slow)
    p.straggler_s = p.others_s + c.restart_s + p.check_s +
                    (s.slow_bytes_per_s > 0 ? (bytes - held) / s.slow_bytes_per_s : 0);
  return p;
}

}  // namespace gridbcast::cli
