#include "job/supervisor.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace gridbcast::job {

void FailureLog::add(Cause cause, std::string what, int rank) {
  failures_.push_back({cause, std::move(what), lanes::Clock::now(), rank});
}

bool FailureLog::names(Cause cause, int rank) const {
  return std::any_of(failures_.begin(), failures_.end(),
                     [&](const Failure& f) { return f.cause == cause && f.rank == rank; });
}

FailureLog::Verdict FailureLog::verdict() const {
  if (failures_.empty()) throw std::logic_error("a verdict on a job that did not fail");
  // The most telling cause first, then the rest in the order they came.
  std::vector<Failure> sorted = failures_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Failure& a, const Failure& b) { return a.cause < b.cause; });
  Verdict v;
  v.headline = sorted.front().what;
  for (const auto& f : failures_)
    if (f.what != v.headline && v.then.size() < kMaxThen) v.then.push_back(f.what);
  // The ranks lost (died, silent or cut off), each once with its first cause, when a
  // loss is the most telling cause: what healing needs to know.
  const bool set_aside = sorted.front().cause == Cause::kStraggler;
  auto counts = [set_aside](Cause c) {
    return set_aside ? c == Cause::kStraggler
                     : c == Cause::kSilence || c == Cause::kDeath || c == Cause::kCutOff;
  };
  v.lost_first = set_aside || counts(sorted.front().cause);
  for (const auto& f : failures_) {
    if (!counts(f.cause) || f.rank < 0) continue;
    const bool known =
        std::any_of(v.lost.begin(), v.lost.end(), [&](const Lost& l) { return l.rank == f.rank; });
    if (!known) v.lost.push_back({f.rank, f.what, f.cause == Cause::kStraggler});
  }
  return v;
}

Supervisor::Supervisor(asio::io_context& io, Backend& backend, int ranks)
    : backend_(backend),
      signals_(io, SIGCHLD, SIGINT, SIGTERM),
      last_heard_(static_cast<size_t>(ranks)) {}

void Supervisor::start_all(const topology::Grid& grid, const Backend::Env& env,
                           const std::string& secret_hex,
                           const std::function<void(int rank)>& starting) {
  for (int r = 0; r < static_cast<int>(grid.nodes.size()); ++r) {
    Backend::Env e = env;
    e.push_back({"GRIDBCAST_RANK", std::to_string(r)});
    if (starting) starting(r);
    backend_.start(r, grid.nodes[static_cast<size_t>(r)], e, secret_hex);
  }
}

asio::awaitable<void> Supervisor::watch(Handlers h) {
  for (;;) {
    auto [ec, signo] = co_await signals_.async_wait(lanes::kAsTuple);
    if (ec) co_return;
    if (signo == SIGINT || signo == SIGTERM) {
      if (h.interrupted) h.interrupted(signo);
      continue;
    }
    for (const auto& e : backend_.reap())
      if (h.exited) h.exited(e);
  }
}

void Supervisor::stop_all() {
  backend_.signal_all(SIGTERM);
  for (int round = 0; round < 60 && backend_.running() > 0; ++round) {
    if (round == 30) backend_.signal_all(SIGKILL);  // after 3 s, no more waiting
    ::usleep(100'000);
    for (const auto& e : backend_.reap()) (void)e;
  }
  backend_.signal_all(SIGKILL);  // what the ranks started, if they left it behind
}

void Supervisor::heard(int rank, Clock::time_point now) {
  last_heard_.at(static_cast<size_t>(rank)) = now;
}

void Supervisor::heard_all(Clock::time_point now) {
  std::fill(last_heard_.begin(), last_heard_.end(), now);
}

Supervisor::Clock::time_point Supervisor::last_heard(int rank) const {
  return last_heard_.at(static_cast<size_t>(rank));
}

std::vector<std::pair<int, Supervisor::Clock::duration>> Supervisor::silent(
    Clock::time_point now, Clock::duration limit, const std::function<bool(int)>& watched) {
  std::vector<std::pair<int, Clock::duration>> out;
  for (int r = 0; r < static_cast<int>(last_heard_.size()); ++r) {
    auto& last = last_heard_[static_cast<size_t>(r)];
    if (!watched(r) || now - last <= limit) continue;
    out.emplace_back(r, now - last);
    last = now;  // named once per limit
  }
  return out;
}

}  // namespace gridbcast::job
