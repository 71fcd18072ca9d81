// Healing a broadcast (`launch --size`, `launch --file`; not `-- PROGRAM`,
// where MPI's semantics stay): after each run of the job, which run comes
// next, and what the job then says it did. docs/FILES.md, "When a node is
// lost" and "Slow nodes".
//
// The one loop that runs the job (cli/launch.cpp) owns a Healer and tells it
// one event at a time: a run ended, with its LaunchResult. The Healer's
// state changes only there, and the answer is the next run or the end:
//
//   run ended, failed, first cause a loss  ->  the survivors again (a lost
//     (died, silent, cut off, straggler)       root: a survivor with a whole
//                                               verified copy sends, else end)
//   run ended, failed, a WAN link cut with  ->  the same ranks again, over
//     another path between its sites           the topology without the link
//   run ended, complete, stragglers set     ->  the stragglers alone from the
//     aside                                    source, at their own pace
//   the stragglers' run ended, its source   ->  again, from the next node that
//     lost (one file)                          holds a verified copy
//   anything else                           ->  the end (outcome())
//
// Ranks are numbered anew in each run; the Healer keeps the first run's
// number of each (its label, which {rank} in --output keeps meaning) and
// gives every rank in what it reports by that number. Pure: no processes,
// no clocks; it says what happened through `say`, a line at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "job/launcher.hpp"
#include "topology/grid.hpp"

namespace gridbcast::job {

// The exit status of a job completed on its survivors, some nodes missing
// (cli::kExitCompletedOnSurvivors, documented with the others).
inline constexpr int kExitCompletedOnSurvivors = 3;

struct HealSettings {
  // How many nodes, the root included, must end with a copy (--require);
  // below it a loss fails the job instead of healing.
  int required = 1;
  bool heal = true;       // false: every failure ends the job (programs, random roots)
  bool files = false;     // --file: a healed run resumes from the partial copies
  bool one_file = false;  // --file, one file: a verified copy can become the source
};

// The run to start next.
struct NextRun {
  std::vector<std::int32_t> labels;  // its ranks by first-run number, ascending
  topology::Grid grid;               // the topology restricted to them
  int root = 0;                      // its root, numbered as in this run
  bool resume = false;               // --file: keep what each copy holds
  // The root sends its own copy (JobParams::source_is_copy): the first
  // root, or a source after it, was lost.
  bool source_is_copy = false;
  bool watch_stragglers = true;  // false: the stragglers' own run
  // The topology every rank loads, when WAN links were routed around.
  std::optional<std::string> topology_yaml;
};

class Healer {
 public:
  // `grid`: the first run's; `root`: its root; `say`: one line a call.
  Healer(topology::Grid grid, int root, HealSettings settings,
         std::function<void(const std::string&)> say);

  // The event: the run started last (at first, the first run) ended with
  // `result`, its ranks numbered as in that run. Returns the run to start
  // next, or nothing when the job is over.
  std::optional<NextRun> run_ended(LaunchResult result);

  // Once run_ended returned nothing: the job's result, every rank by its
  // first-run number; a completed broadcast lists the nodes missing, the
  // stragglers, the WAN links routed around and the sources that took over.
  const LaunchResult& outcome() const { return final_; }
  // The nodes lost on the way without a verified copy (also on failure).
  const std::vector<BroadcastSummary::Missing>& missing() const { return missing_; }
  // 0 complete, kExitCompletedOnSurvivors completed on survivors, else the
  // last run's failure status.
  int exit_status() const;

 private:
  enum class Phase { kMain, kStragglers, kDone };
  std::optional<NextRun> main_run_ended(LaunchResult result);
  std::optional<NextRun> stragglers_run_ended(LaunchResult result);
  std::optional<NextRun> end(LaunchResult result);
  NextRun rerun_over(std::vector<std::int32_t> labels, bool watch_stragglers);
  // The node of rank r of the run that just ended.
  const std::string& node_of(int r) const;
  // `cause` without a leading "rank R (NODE) " that names the rank again.
  static std::string without_name(std::string cause, int rank, const std::string& node);
  void take_over(int label, int lost_label, const std::string& cause, const std::string& digest);

  topology::Grid full_grid_;  // the first run's, without the WAN links routed around
  topology::Grid grid_;       // the run under way's
  std::vector<std::int32_t> labels_;
  HealSettings settings_;
  std::function<void(const std::string&)> say_;
  Phase phase_ = Phase::kMain;
  bool healed_ = false;
  bool yaml_changed_ = false;
  int source_ = 0;  // the source by first-run number
  bool source_is_copy_ = false;
  // The root digest the copy now sent was verified against ("": the root's own).
  std::string source_digest_;
  std::vector<int> sources_;  // every source so far, in order
  std::vector<BroadcastSummary::Missing> missing_;
  std::vector<BroadcastSummary::Straggler> set_aside_;
  std::vector<BroadcastSummary::RoutedAround> routed_around_;
  std::vector<BroadcastSummary::TookOver> took_over_;
  LaunchResult main_;   // the others' completed run, while the stragglers take theirs
  LaunchResult final_;  // outcome()
};

}  // namespace gridbcast::job
