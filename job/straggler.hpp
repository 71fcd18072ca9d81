// Stragglers: a rank whose own links hold its part of the broadcast back,
// told apart from the ranks it slows down.
//
// In a pipelined plan a slow node delays every node below it, and a file's
// windows end together, so progress alone does not name the culprit: while
// it crawls, everybody's rate drops. Where the bytes wait does. Every rank
// reports, with its progress, what its kernel says of each outgoing
// broadcast link (control::LinkReport): the bytes its peer acknowledged and
// the bytes that wait to be sent. A link is *backlogged* when at least
// `backlog_bytes` wait: its sender has data the link does not take. A
// backlogged link whose peer's receive window held it back for at least
// `held_fraction` of the time since the last report is *held*: the peer does
// not read it (it waits on another link, e.g. in an earlier file window
// behind a straggler, or its own disk or cores are slow), which the network
// is not to blame for.
//
// A link is *active* when it is backlogged and not held, and *slow* when
// it is active and carries less than `fraction` of what the grid declares it
// can: at most its sender's lane (shared by the sender's backlogged links on
// it), its receiver's lane, the WAN path between them, and the sender's
// max_rate (defaults.max_rate, shared by all its backlogged links).
//
// A rank is a *slow receiver* when every link into it reported within
// `fresh` is active (a link idle, keeping up or held says its network takes
// what it is given) and together they carry less than `fraction` of what
// they can (each of its lanes and each WAN path at most once); a *slow
// sender* when its active links out, together, do the same. Either is a
// candidate. Each slow link with a candidate at either end is blamed on
// the end with the most such links, a tie on the receiver: below a node
// that sends slowly each child has one slow link and the slow node has them
// all; a healthy parent that feeds a slow node has one. A candidate whose
// every slow link is blamed on another candidate is not behind. One whose
// slow links are all blamed on ends not shown slow (yet) is behind on
// notice, named after twice `sustained`: a parent whose one busy link feeds
// a slow node a file window behind (which reads only that link and holds
// the others, so is not shown slow) looks just like a slow node whose one
// child holds its other parent's link while it waits. The first is the
// node's victim, and the node soon shows itself and clears it; the second
// is the straggler, and nobody else will show.
//
// A rank behind for `sustained` without a break is a straggler; one that
// catches up within it starts over, so a node that recovers is not named.
// It is behind from the start of the first interval its reports measured it
// slow over (the report before), not from when the launcher looked.
// Each rank is named once per watch (one broadcast).
//
// Victims of a straggler are not behind: a sender stuck on the slow link
// leaves its other links idle, not backlogged, and a receiver a file window
// behind holds its other links by its window. A rank that ran well below
// the declared rates only because the host's cores were busy is not behind
// as long as its links keep within `fraction` of them, nor is one whose
// disk is slow (its links are held). A node slow only on the one link it
// has is told apart from its peer only by the tie rule.
//
// Pure: the launcher feeds it the ranks' reports as they come and asks it
// about once a second (docs/FILES.md, "Slow nodes").
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "job/cut.hpp"
#include "job/protocol.hpp"
#include "topology/grid.hpp"

namespace gridbcast::job {

struct StragglerRule {
  std::uint64_t backlog_bytes = 16u << 10;
  double fraction = 1.0 / 3;
  std::chrono::milliseconds sustained{3000};
  std::chrono::milliseconds fresh{2500};
  double held_fraction = 0.5;
};

struct Straggler {
  int rank = -1;
  double rate_bytes_per_s = 0;      // what its links carried, the mean while it was behind
  double expected_bytes_per_s = 0;  // what the grid declares those links can carry
  double seconds = 0;               // how long it was behind
  bool receiving = true;            // its links in were slow (else its links out)
};

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  StragglerWatch(const topology::Grid& grid, StragglerRule rule = {});

  // What the link reports of `sender` mean, or "" when they are sound: a peer
  // outside the grid or the sender itself, a lane it does not open, a link
  // twice. The launcher refuses a report that is not.
  std::string check(int sender, const std::vector<control::LinkReport>& links) const;
  // A rank's latest link reports (checked), taken at `now`. They replace its
  // earlier ones, but for the links stalled in the report before that this
  // one leaves out (kept once, as they were): a rank is remembered for at
  // most what two messages hold.
  void report(int sender, Clock::time_point now, const std::vector<control::LinkReport>& links);
  // The ranks found to straggle at this observation, each once per watch;
  // `done[r]`: rank r has all of this broadcast, never behind.
  std::vector<Straggler> observe(Clock::time_point now, const std::vector<bool>& done);
  // "from rank 1 lane 0→0 9.66 Mbit/s, 1.2 MiB waiting, to rank 5 ...": the
  // figures behind a verdict, for the log; at most 8 links, then a count.
  std::string describe_links(int rank, Clock::time_point now) const;
  // Each pair's links as their latest fresh reports at `now` found them
  // (job/cut.hpp): stalled (data waiting or in flight, not held by the
  // receiver's window, nothing acknowledged in every report for at least `at_least`,
  // or still being connected in every report for as long: a cut cable, a
  // dead NIC or WAN link) or moving (something acknowledged
  // since the report before); idle pairs are left out.
  std::vector<LinkState> links(Clock::time_point now, Clock::duration at_least) const;
  // The links remembered: at most one message's worth a rank.
  size_t remembered() const { return links_.size(); }

 private:
  struct Link {
    std::uint64_t acked = 0;
    std::uint64_t notsent = 0;
    std::uint64_t rwnd_us = 0;
    Clock::time_point at{};
    Clock::time_point from{};  // the report before: the rate's interval is [from, at]
    double rate = 0;           // bytes/s acknowledged since the report before
    bool rated = false;
    bool held = false;  // by the peer's receive window, since the report before
    // Since when every report has found it backlogged, unheld and moving
    // nothing (the start of the first such interval); {} while it moves.
    Clock::time_point stalled_since{};
    bool connecting = false;    // no stream up yet: its connections are being made
    std::uint64_t unacked = 0;  // sent, not yet acknowledged
    bool carried = false;       // stalled, and kept from the report before (report())
  };
  using Key = std::tuple<int, int, int, int>;  // from, to, lane_from, lane_to
  struct Behind {
    bool on = false;
    Clock::time_point since{};
    double rate_sum = 0;
    double expected = 0;
    int samples = 0;
    bool named = false;
  };
  struct Verdict {
    bool slow = false;
    double rate = 0, expected = 0;
    Clock::time_point from{};  // since when its links' rates say so (the latest interval start)
  };
  bool fresh(const Link& l, Clock::time_point now) const { return now - l.at <= rule_.fresh; }
  using Entry = std::pair<const Key, Link>;
  // (sender, lane): its backlogged links on the lane; (sender, kAllLanes): on all.
  using Sharing = std::map<std::pair<int, int>, int>;
  static constexpr int kAllLanes = -1;
  double can_carry(const Key& link, const Sharing& sharing) const;
  double together(int rank, bool into, const std::vector<const Entry*>& links,
                  const Sharing& sharing) const;
  double lane_rate(int rank, int lane) const;  // bytes/s
  double wan_rate(int site_a, int site_b) const;

  const topology::Grid& grid_;
  StragglerRule rule_;
  int lanes_ = 1;
  std::map<Key, Link> links_;
  std::vector<Behind> behind_;
};

}  // namespace gridbcast::job
