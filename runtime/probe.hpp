// `gridbcast probe`, the bytes: runs one phase of a probe schedule
// (topology/probe.hpp) on this rank, over the same authenticated lane
// connections a broadcast uses. Internal to runtime (Asio in the interface).
//
//   rate flow      the sender writes kProbe pieces from a zero buffer on
//                  each of the flow's streams; the receiver counts the bytes
//                  the kernel received from 30 % to 70 % of the phase after
//                  the rank began it (topology::kProbeWindowFrom/To), then
//                  closes the flow's connections, which stops the sender (a
//                  late receiver still gets a whole window; the sender gives
//                  up half the grace past twice the phase's seconds)
//   latency flow   the sender sends kPing frames one at a time and times each
//                  echo; the receiver echoes until the empty kProbe
//
// Every frame names its phase (seq) and flow (offset); anything else, a piece
// over kMaxProbeFrameBytes, or more pings than any schedule makes, fails the
// phase naming the peer. A phase that has not ended `grace` after twice its
// seconds fails too, saying what it still waits for: bounded, whatever a
// peer does.
#pragma once

#include <chrono>
#include <vector>

#include "runtime/transport.hpp"
#include "topology/probe.hpp"

namespace gridbcast::runtime {

// The most pings a receiver echoes in one flow (the schedule's limit).
inline constexpr int kMaxProbePings = 10000;

struct ProbeRunOptions {
  int pings = 12;                           // per latency flow (topology::ProbeSettings::pings)
  std::chrono::milliseconds grace{10'000};  // past the phase's seconds, before it fails
};

// This rank's samples: one per flow it measures (the receiver of a rate flow,
// the sender of a latency flow). Throws BroadcastError naming the peer.
asio::awaitable<std::vector<topology::ProbeSample>> run_probe_phase(
    Transport& transport, int phase_index, const topology::ProbePhase& phase,
    const ProbeRunOptions& options);

}  // namespace gridbcast::runtime
