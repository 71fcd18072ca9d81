#include "job/heal.hpp"

#include <algorithm>
#include <utility>

#include "runtime/subgrid.hpp"
#include "topology/emit.hpp"

namespace gridbcast::job {

namespace {
constexpr size_t kNamed = 4;  // ranks a loss line names before a count
}  // namespace

Healer::Healer(topology::Grid grid, int root, HealSettings settings,
               std::function<void(const std::string&)> say)
    : full_grid_(grid),
      grid_(std::move(grid)),
      settings_(settings),
      say_(std::move(say)),
      source_(root),
      sources_{root} {
  labels_.resize(static_cast<size_t>(grid_.size()));
  for (size_t r = 0; r < labels_.size(); ++r) labels_[r] = static_cast<std::int32_t>(r);
}

int Healer::exit_status() const {
  if (final_.status != 0) return final_.status;
  return missing_.empty() ? 0 : kExitCompletedOnSurvivors;
}

const std::string& Healer::node_of(int r) const {
  return grid_.nodes.at(static_cast<size_t>(r)).name;
}

std::string Healer::without_name(std::string cause, int rank, const std::string& node) {
  const std::string named = "rank " + std::to_string(rank) + " (" + node + ") ";
  if (cause.rfind(named, 0) == 0) cause.erase(0, named.size());
  return cause;
}

void Healer::take_over(int label, int lost_label, const std::string& cause,
                       const std::string& digest) {
  const std::string& node = full_grid_.nodes.at(static_cast<size_t>(label)).name;
  const std::string& lost_node = full_grid_.nodes.at(static_cast<size_t>(lost_label)).name;
  say_("rank " + std::to_string(label) + " (" + node +
       ") holds a verified copy: it is the source now, after rank " + std::to_string(lost_label) +
       " (" + lost_node + ") " + cause);
  took_over_.push_back({label, node, lost_label, lost_node, cause});
  source_ = label;
  source_digest_ = digest;
  source_is_copy_ = true;
  sources_.push_back(label);
}

NextRun Healer::rerun_over(std::vector<std::int32_t> labels, bool watch_stragglers) {
  NextRun next;
  next.root = static_cast<int>(std::find(labels.begin(), labels.end(), source_) - labels.begin());
  next.grid = runtime::restrict_grid(full_grid_, std::vector<int>(labels.begin(), labels.end()));
  next.labels = labels;
  next.resume = settings_.files;
  next.source_is_copy = source_is_copy_;
  next.watch_stragglers = watch_stragglers;
  if (yaml_changed_) next.topology_yaml = topology::grid_to_yaml(full_grid_);
  grid_ = next.grid;
  labels_ = std::move(labels);
  return next;
}

std::optional<NextRun> Healer::end(LaunchResult result) {
  phase_ = Phase::kDone;
  final_ = std::move(result);
  if (final_.status == 0 && final_.broadcast) {
    BroadcastSummary& b = *final_.broadcast;
    b.missing = missing_;
    b.routed_around = routed_around_;
    b.took_over = took_over_;
  }
  return std::nullopt;
}

std::optional<NextRun> Healer::run_ended(LaunchResult result) {
  switch (phase_) {
    case Phase::kMain:
      return main_run_ended(std::move(result));
    case Phase::kStragglers:
      return stragglers_run_ended(std::move(result));
    case Phase::kDone:
      break;
  }
  return std::nullopt;
}

std::optional<NextRun> Healer::main_run_ended(LaunchResult result) {
  if (result.status == 0) {
    if (healed_ && result.broadcast) {
      // The survivors' ranks as the first run numbered them.
      BroadcastSummary& b = *result.broadcast;
      auto label = [&](int r) { return labels_.at(static_cast<size_t>(r)); };
      b.root = label(b.root);
      for (auto& c : b.copies) c.rank = label(c.rank);
      for (auto& sl : b.slowest_per_site) sl.rank = label(sl.rank);
      for (auto& it : b.iterations) it.root = label(it.root);
    }
    if (!source_digest_.empty() && result.broadcast && result.broadcast->sha256 != source_digest_) {
      // What it sent is not what it had verified: nobody is told they hold
      // the root's file.
      LaunchResult failed;
      failed.status = 1;
      failed.failure = "rank " + std::to_string(source_) + " sent a copy whose root digest " +
                       result.broadcast->sha256 + " differs from the " + source_digest_ +
                       " it had verified its chunks against: its copy changed after it landed";
      return end(std::move(failed));
    }
    if (!result.broadcast || set_aside_.empty()) return end(std::move(result));
    // The others are done: now each straggler gets its copy from the
    // source, at its own pace, nobody waiting on it.
    std::string names;
    std::vector<std::int32_t> next{source_};
    for (const auto& st : set_aside_) {
      next.push_back(st.rank);
      names +=
          (names.empty() ? "" : ", ") + ("rank " + std::to_string(st.rank) + " (" + st.node + ")");
    }
    std::sort(next.begin(), next.end());
    say_("the others are done; now the straggler" +
         std::string(set_aside_.size() > 1 ? "s " : " ") + names +
         " from the root, at its own pace");
    main_ = std::move(result);
    phase_ = Phase::kStragglers;
    return rerun_over(std::move(next), false);
  }
  // Healing: while the first cause of a failure is ranks lost (died,
  // silent, cut off, set aside) or WAN links cut, the survivors run the job
  // again from what they hold (--file: the partial copies, with --resume,
  // so only what some survivor lacks moves; --size: the broadcast starts
  // over), numbered anew.
  if (!settings_.heal || !result.lost_first ||
      (result.lost.empty() && result.routed_around.empty()))
    return end(std::move(result));
  std::vector<bool> gone(static_cast<size_t>(grid_.size()), false);
  for (const auto& lost : result.lost) gone.at(static_cast<size_t>(lost.rank)) = true;
  std::vector<int> survivors;
  for (int r = 0; r < grid_.size(); ++r)
    if (!gone[static_cast<size_t>(r)]) survivors.push_back(r);
  const int root =
      static_cast<int>(std::find(labels_.begin(), labels_.end(), source_) - labels_.begin());
  std::string lost_text, root_cause;
  bool all_stragglers = true;
  for (size_t at = 0; at < result.lost.size(); ++at) {
    const auto& lost = result.lost[at];
    // The cause names the rank as this run numbered it: said with its first-run number.
    const int label = labels_.at(static_cast<size_t>(lost.rank));
    const std::string cause = without_name(lost.cause, lost.rank, node_of(lost.rank));
    if (lost.rank == root) root_cause = cause;
    if (lost.straggler)
      set_aside_.push_back({label, node_of(lost.rank), cause, lost.rate_bytes_per_s, 0});
    else
      missing_.push_back({label, node_of(lost.rank), cause});
    all_stragglers = all_stragglers && lost.straggler;
    // One line however many were lost (a site cut off loses all its
    // nodes): the first few, then a count; the summary lists each.
    if (at < kNamed)
      lost_text += (lost_text.empty() ? "" : "; ") +
                   ("rank " + std::to_string(label) + " (" + node_of(lost.rank) + "): " + cause);
    else if (at + 1 == result.lost.size())
      lost_text +=
          "; and " + std::to_string(result.lost.size() - kNamed) + " more (the summary lists each)";
  }
  // The root lost: a survivor whose copy of an iteration was committed and
  // verified can send instead (one file: a tree's copy is not sent from
  // yet), one in the root's site first.
  const LaunchResult::Held* from = nullptr;
  const bool root_straggles =
      std::any_of(result.lost.begin(), result.lost.end(),
                  [&](const auto& l) { return l.rank == root && l.straggler; });
  if (gone[static_cast<size_t>(root)]) {
    // A root set aside as a straggler still holds the source, and a copy
    // sent to it could land on it: the job ends, as for any lost root.
    if (settings_.one_file && !root_straggles)
      for (const auto& h : result.held)
        if (!gone.at(static_cast<size_t>(h.rank)) &&
            (from == nullptr || (grid_.site_of(h.rank) == grid_.site_of(root) &&
                                 grid_.site_of(from->rank) != grid_.site_of(root))))
          from = &h;
    if (from == nullptr) {
      say_("the root (rank " + std::to_string(source_) + ") was lost: nothing to heal from (" +
           (root_straggles        ? "it was set aside as a straggler, and it holds the source"
            : !settings_.files    ? "a --size broadcast's bytes were in its memory only"
            : !settings_.one_file ? "a copy of a directory or of several files is not sent from"
                                  : "no survivor holds a whole verified copy yet") +
           ")");
      return end(std::move(result));
    }
  }
  // Stragglers set aside are to get their copies after the others.
  const int holding = static_cast<int>(survivors.size() + set_aside_.size());
  if (survivors.size() < 2 || holding < settings_.required) {
    say_(std::to_string(holding) + " nodes remain, --require asks for " +
         std::to_string(settings_.required) + ": not healing");
    return end(std::move(result));
  }
  if (!result.lost.empty())
    say_(std::string(all_stragglers ? "set aside " : "lost ") + lost_text + "; healing: the " +
         std::to_string(survivors.size()) + " others go on from what they hold" +
         (settings_.files ? "" : " (the broadcast starts over)"));
  if (from != nullptr)
    take_over(labels_.at(static_cast<size_t>(from->rank)), source_, root_cause, from->sha256);
  for (const auto& w : result.routed_around) {
    // The others go on without it: every rank plans over the topology
    // without the link (the sites chained over the links that remain).
    const int a = full_grid_.site_named(w.site_a), b = full_grid_.site_named(w.site_b);
    std::erase_if(full_grid_.wan, [&](const topology::WanLink& link) {
      return (link.site_a == a && link.site_b == b) || (link.site_a == b && link.site_b == a);
    });
    routed_around_.push_back(w);
    yaml_changed_ = true;
    say_(w.cause + "; healing: the others go on around it");
  }
  healed_ = true;
  std::vector<std::int32_t> next;
  for (int r : survivors) next.push_back(labels_[static_cast<size_t>(r)]);
  return rerun_over(std::move(next), true);
}

std::optional<NextRun> Healer::stragglers_run_ended(LaunchResult after) {
  BroadcastSummary& b = *main_.broadcast;
  if (after.status != 0 && after.lost_first && settings_.one_file) {
    // The source lost while the stragglers took their copies: every other
    // node holds a verified copy now, and the first not tried yet sends.
    const auto lost = std::find_if(after.lost.begin(), after.lost.end(), [&](const auto& l) {
      return labels_.at(static_cast<size_t>(l.rank)) == source_;
    });
    const auto from = std::find_if(b.copies.begin(), b.copies.end(), [&](const auto& c) {
      return std::find(sources_.begin(), sources_.end(), c.rank) == sources_.end();
    });
    if (lost != after.lost.end() && from != b.copies.end()) {
      take_over(from->rank, source_, without_name(lost->cause, lost->rank, node_of(lost->rank)),
                b.sha256);
      std::vector<std::int32_t> next{source_};
      for (const auto& st : set_aside_) next.push_back(st.rank);
      std::sort(next.begin(), next.end());
      return rerun_over(std::move(next), false);
    }
  }
  // Sent by the root or by a copy of it: the same file, or no copy.
  if (after.status == 0 && after.broadcast && after.broadcast->sha256 == b.sha256) {
    const BroadcastSummary& a = *after.broadcast;
    for (auto c : a.copies) {
      c.rank = labels_.at(static_cast<size_t>(c.rank));
      if (std::find(sources_.begin(), sources_.end(), c.rank) == sources_.end())
        b.copies.push_back(std::move(c));
    }
    std::sort(b.copies.begin(), b.copies.end(),
              [](const auto& x, const auto& y) { return x.rank < y.rank; });
    b.verified = b.verified && a.verified;
    b.ranks += static_cast<int>(set_aside_.size());
    const double took = a.iterations.empty() ? 0 : a.iterations.back().seconds;
    for (auto& st : set_aside_) st.seconds = took;
    b.stragglers = set_aside_;
  } else {
    const std::string then =
        after.status != 0
            ? after.failure
            : "its copy's root digest " +
                  (after.broadcast ? after.broadcast->sha256 : std::string("(none)")) +
                  " is not the others' " + b.sha256 + " (the source changed)";
    for (const auto& st : set_aside_)
      missing_.push_back(
          {st.rank, st.node, st.cause + "; set aside as a straggler, then: " + then});
  }
  return end(std::move(main_));
}

}  // namespace gridbcast::job
