// Supervision apart from the launcher: the failure record's verdict (which
// cause heads the report, which ranks were lost), liveness, and real rank
// processes (forked shells, each its own process group) whose exits and the
// launcher's SIGTERM arrive as events, and that stop_all() ends, a process
// that ignores SIGTERM and the children it started included.
#include "job/supervisor.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <stdexcept>

namespace gridbcast::job {
namespace {

using namespace std::chrono_literals;

TEST(FailureLog, ALostRankHeadsTheVerdictAndEachLostRankIsListedOnce) {
  FailureLog log;
  log.add(Cause::kReported, "rank 1: no data from rank 2 for 5 s");
  log.add(Cause::kOther, "what followed");
  log.add(Cause::kDeath, "rank 2 (a3) was killed by signal 9", 2);
  log.add(Cause::kDeath, "rank 2 (a3) closed its control connection", 2);
  log.add(Cause::kSilence, "rank 5 (b2) sent nothing for 30 s", 5);
  log.add(Cause::kOther, "more that followed");
  log.add(Cause::kOther, "and more");
  EXPECT_TRUE(log.names(Cause::kDeath, 2));
  EXPECT_FALSE(log.names(Cause::kSilence, 2));
  const auto v = log.verdict();
  // A silence is the most telling cause, though it came last.
  EXPECT_EQ(v.headline, "rank 5 (b2) sent nothing for 30 s");
  EXPECT_TRUE(v.lost_first);
  ASSERT_EQ(v.lost.size(), 2u);
  EXPECT_EQ(v.lost[0].rank, 2);
  EXPECT_EQ(v.lost[0].cause, "rank 2 (a3) was killed by signal 9");  // its first cause
  EXPECT_EQ(v.lost[1].rank, 5);
  // The others in the order they came, at most kMaxThen.
  ASSERT_EQ(v.then.size(), FailureLog::kMaxThen);
  EXPECT_EQ(v.then[0], "rank 1: no data from rank 2 for 5 s");
}

TEST(FailureLog, ARanksOwnReportHeadsWhenNothingWasLost) {
  FailureLog log;
  log.add(Cause::kOther, "interrupted by SIGINT");
  log.add(Cause::kReported, "rank 3: cannot write /out/x");
  log.add(Cause::kReported, "rank 4: cannot write /out/y");
  const auto v = log.verdict();
  EXPECT_EQ(v.headline, "rank 3: cannot write /out/x");  // the earliest of the best kind
  EXPECT_FALSE(v.lost_first);
  EXPECT_TRUE(v.lost.empty());
  EXPECT_EQ(v.then,
            (std::vector<std::string>{"interrupted by SIGINT", "rank 4: cannot write /out/y"}));
  EXPECT_THROW(FailureLog{}.verdict(), std::logic_error);
}

TEST(FailureLog, RanksCutOffFromTheirPeersAreLostAndHeadTheirPeersReports) {
  // The ranks below a cut report their parents first; the launcher then
  // finds who was cut off (job/cut.hpp). A WAN link routed around (rank -1)
  // heads too, and loses nobody.
  FailureLog log;
  log.add(Cause::kReported, "rank 6 (b3) failed: no data from rank 4 (b1) for 4 s");
  log.add(Cause::kCutOff, "rank 4 (b1) is cut off with site b: WAN link a–b moved nothing", 4);
  log.add(Cause::kCutOff, "rank 6 (b3) is cut off with site b: WAN link a–b moved nothing", 6);
  auto v = log.verdict();
  EXPECT_EQ(v.headline, "rank 4 (b1) is cut off with site b: WAN link a–b moved nothing");
  EXPECT_TRUE(v.lost_first);
  ASSERT_EQ(v.lost.size(), 2u);
  EXPECT_EQ(v.lost[0].rank, 4);
  EXPECT_EQ(v.lost[1].rank, 6);
  EXPECT_FALSE(v.lost[0].straggler);

  FailureLog around;
  around.add(Cause::kReported, "rank 2 (a3) failed: no data from rank 0 (a1) for 4 s");
  around.add(Cause::kCutOff, "WAN link a–b moved nothing: the others route around it");
  v = around.verdict();
  EXPECT_TRUE(v.lost_first);
  EXPECT_TRUE(v.lost.empty());

  // A death is more telling than a cut: a dead rank's links stall too.
  FailureLog both;
  both.add(Cause::kCutOff, "rank 4 (b1) is cut off from its peers", 4);
  both.add(Cause::kDeath, "rank 5 (b2) was killed by signal 9", 5);
  EXPECT_EQ(both.verdict().headline, "rank 5 (b2) was killed by signal 9");
}

// Real processes: rank r runs /bin/sh -c scripts[r] as the leader of a
// process group of its own, as the launcher's backends start ranks.
class ShellBackend : public Backend {
 public:
  explicit ShellBackend(std::vector<std::string> scripts) : scripts_(std::move(scripts)) {}
  ~ShellBackend() override {
    signal_all(SIGKILL);
    for (auto& [pid, r] : pids_) ::waitpid(pid, nullptr, 0);
  }
  std::string name() const override { return "shell"; }
  void start(int rank, const topology::Node&, const Env&, const std::string&) override {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", scripts_[static_cast<size_t>(rank)].c_str(), nullptr);
      ::_exit(127);
    }
    ASSERT_GT(pid, 0);
    ::setpgid(pid, pid);
    pids_[pid] = rank;
  }
  std::vector<Exit> reap() override {
    std::vector<Exit> out;
    for (auto it = pids_.begin(); it != pids_.end();) {
      int status = 0;
      if (::waitpid(it->first, &status, WNOHANG) != it->first) {
        ++it;
        continue;
      }
      Exit e{it->second, "", false};
      if (WIFEXITED(status)) {
        e.code = WEXITSTATUS(status);
        e.success = e.code == 0;
        e.status = "exited with status " + std::to_string(e.code);
      } else {
        e.status = "was killed by signal " + std::to_string(WTERMSIG(status));
      }
      out.push_back(e);
      ::kill(-it->first, SIGKILL);  // what it left behind
      it = pids_.erase(it);
    }
    return out;
  }
  int running() const override { return static_cast<int>(pids_.size()); }
  void signal_all(int signo) override {
    for (const auto& [pid, r] : pids_) ::kill(-pid, signo);
  }

 private:
  std::vector<std::string> scripts_;
  std::map<pid_t, int> pids_;
};

topology::Grid grid_of(int n) {
  topology::Grid g;
  for (int i = 0; i < n; ++i) {
    topology::Node node;
    node.name = "n" + std::to_string(i);
    g.nodes.push_back(node);
  }
  return g;
}

TEST(Supervisor, ExitsAndTheLaunchersSigtermArriveAsEvents) {
  asio::io_context io(1);
  ShellBackend backend({"exit 0", "exit 3", "kill -9 $$"});
  Supervisor sup(io, backend, 3);
  std::vector<int> starting;
  sup.start_all(grid_of(3), {}, "", [&](int r) { starting.push_back(r); });
  EXPECT_EQ(starting, (std::vector<int>{0, 1, 2}));
  std::map<int, Backend::Exit> exits;
  int interrupts = 0;
  asio::co_spawn(io,
                 sup.watch({[&](const Backend::Exit& e) { exits.emplace(e.rank, e); },
                            [&](int signo) { interrupts += signo == SIGTERM; }}),
                 asio::detached);
  for (int i = 0; i < 100 && exits.size() < 3; ++i) io.run_for(100ms);
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits.at(0).success);
  EXPECT_EQ(exits.at(1).code, 3);
  EXPECT_FALSE(exits.at(1).success);
  EXPECT_EQ(exits.at(2).status, "was killed by signal 9");
  EXPECT_EQ(sup.running(), 0);
  ::kill(::getpid(), SIGTERM);  // taken by the supervisor's signal set, not fatal
  for (int i = 0; i < 50 && interrupts == 0; ++i) io.run_for(100ms);
  EXPECT_EQ(interrupts, 1);
}

TEST(Supervisor, StopAllEndsARankThatIgnoresSigtermAndWhatItStarted) {
  asio::io_context io(1);
  // Rank 0 ignores SIGTERM and keeps a child; rank 1 ends on SIGTERM.
  ShellBackend backend({"trap '' TERM; sleep 300 & while :; do sleep 1; done", "sleep 300"});
  Supervisor sup(io, backend, 2);
  sup.start_all(grid_of(2), {}, "", {});
  ::usleep(200'000);
  const auto t0 = std::chrono::steady_clock::now();
  sup.stop_all();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(sup.running(), 0);
  EXPECT_GE(took, 2500ms);  // rank 0 held out until SIGKILL, after 3 s
  EXPECT_LT(took, 10s);
}

TEST(Supervisor, ASilentRankIsNamedOncePerLimitAndOnlyWhileWatched) {
  asio::io_context io(1);
  ShellBackend backend({});
  Supervisor sup(io, backend, 3);
  const auto t0 = Supervisor::Clock::now();
  sup.heard_all(t0);
  sup.heard(1, t0 + 1500ms);
  const auto all = [](int) { return true; };
  auto silent = sup.silent(t0 + 2s, 1s, all);
  ASSERT_EQ(silent.size(), 2u);  // 0 and 2; 1 spoke 0.5 s ago
  EXPECT_EQ(silent[0].first, 0);
  EXPECT_EQ(silent[0].second, 2s);
  EXPECT_EQ(silent[1].first, 2);
  EXPECT_TRUE(sup.silent(t0 + 2500ms, 1s, all).empty());  // named at 2 s: not again yet
  silent = sup.silent(t0 + 3100ms, 1s, [](int r) { return r != 0; });
  ASSERT_EQ(silent.size(), 2u);  // 1 (silent 1.6 s) and 2 again; 0 is not watched
  EXPECT_EQ(silent[0].first, 1);
  EXPECT_EQ(silent[1].first, 2);
  EXPECT_EQ(sup.last_heard(1), t0 + 3100ms);
}

}  // namespace
}  // namespace gridbcast::job
