// The job layer's liveness in program mode (`launch -- PROGRAM`): a rank that
// stops, exits before joining, or leaves processes behind, as a user meets it.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "mpi_support.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Waits for DIR/NAME.R for every rank and returns the pids they hold.
std::vector<pid_t> wait_for_pids(const std::string& dir, const std::string& name, int ranks,
                                 std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  std::vector<pid_t> pids(static_cast<size_t>(ranks), 0);
  while (Clock::now() < end) {
    int found = 0;
    for (int r = 0; r < ranks; ++r) {
      const std::string text = slurp(dir + "/" + name + "." + std::to_string(r));
      if (!text.empty() && text.back() == '\n') {
        pids[static_cast<size_t>(r)] = static_cast<pid_t>(std::stoi(text));
        ++found;
      }
    }
    if (found == ranks) return pids;
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

// A rank stopped with SIGSTOP sends nothing, not even its heartbeat: the job
// fails naming it, within the limit and a few seconds, with --timeout and,
// through --silence-timeout, without.
void stopped_rank_fails_the_job(const std::vector<std::string>& limit_args, double limit_s) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  std::vector<std::string> argv = {kBin, "launch"};
  argv.insert(argv.end(), limit_args.begin(), limit_args.end());
  argv.insert(argv.end(), {"--", kMpiBin + "/loop_gridbcast", dir, "120"});
  Child c(argv);
  const auto pids = wait_for_pids(dir, "pid", 8, 60s);
  ASSERT_EQ(pids.size(), 8u) << c.err();
  ASSERT_EQ(::kill(pids[3], SIGSTOP), 0);
  const auto stopped = Clock::now();
  const int status = c.wait(60s);
  const double took = std::chrono::duration<double>(Clock::now() - stopped).count();
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the job did not fail within 60 s of a rank stopping";
  EXPECT_LT(took, limit_s + 6) << c.err();
  const std::string err = c.err();
  const auto headline = err.find("FAILED: ");
  ASSERT_NE(headline, std::string::npos) << err;
  EXPECT_EQ(err.find("rank 3 (a4) sent nothing", headline), headline + 8) << err;
  // Stopped or not, every rank is gone.
  for (const pid_t p : pids) {
    for (int i = 0; i < 100 && alive(p); ++i) std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(alive(p)) << "pid " << p << " outlived the job";
  }
  std::filesystem::remove_all(dir);
}

TEST(JobLiveness, AStoppedRankFailsTheJobWithinTheTimeoutNamingIt) {
  stopped_rank_fails_the_job({"--timeout", "2"}, 2);
}

TEST(JobLiveness, AStoppedRankFailsTheJobWithoutATimeoutToo) {
  stopped_rank_fails_the_job({"--silence-timeout", "3"}, 3);
}

TEST(JobLiveness, TheTimeoutAppliesToBlockingMpiCalls) {
  // Rank 1 is alive (its heartbeats go on) but 30 s late to a barrier: with
  // --timeout 2 the others' MPI_Barrier fails with MPI_ERR_OTHER naming whom
  // it waited for, and the job ends long before rank 1 would have come.
  const auto start = Clock::now();
  Child c({kBin, "launch", "--timeout", "2", "--", kMpiBin + "/late_gridbcast", "30"});
  EXPECT_NE(c.wait(60s), 0);
  EXPECT_LT(Clock::now() - start, 20s);
  const std::string err = c.err();
  EXPECT_NE(err.find("FAILED: rank "), std::string::npos) << err;
  EXPECT_NE(err.find("MPI_Barrier: MPI_ERR_OTHER"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1 (a2"), std::string::npos) << err;
}

TEST(JobLiveness, RanksWaitingForALateOneToJoinAreNotCalledSilent) {
  // Rank 3 starts 5 s late; the others joined at once and wait without
  // heartbeats until the table comes. With a 2 s silence limit the job still
  // completes: the limit counts from the table on.
  Child c({kBin, "launch", "--silence-timeout", "2", "--", "/bin/sh", "-c",
           "[ \"$GRIDBCAST_RANK\" = 3 ] && sleep 5; exec " + kMpiBin + "/late_gridbcast 0"});
  EXPECT_EQ(c.wait(60s), 0) << c.err();
}

// A program may work on after MPI_Finalize (mpiexec waits for it, and so does
// the launcher), but a rank process that lingers is named once on the
// launcher's terminal, so a hang at exit is never silent.
TEST(JobLiveness, ARankThatLingersAfterFinalizeIsWaitedForAndNamed) {
  ::setenv("GRIDBCAST_STUCK_HINT_SECONDS", "1", 1);
  const auto start = Clock::now();
  Child c({kBin, "launch", "--", "/bin/sh", "-c",
           kMpiBin + "/late_gridbcast 0 && { [ \"$GRIDBCAST_RANK\" != 2 ] || sleep 4; }"});
  ::unsetenv("GRIDBCAST_STUCK_HINT_SECONDS");
  EXPECT_EQ(c.wait(60s), 0) << c.err();
  EXPECT_GE(Clock::now() - start, 4s) << "did not wait for the lingering rank";
  const std::string err = c.err();
  EXPECT_NE(err.find("rank process(es) have not exited after 1 s: rank 2 ("), std::string::npos)
      << err;
  EXPECT_EQ(err.find("rank 1 ("), std::string::npos) << "named a rank that had exited: " << err;
}

TEST(JobLiveness, ARankThatExitsBeforeJoiningFailsTheJobAtOnce) {
  // mpiexec's smoke test: a program that never calls MPI_Init.
  const auto start = Clock::now();
  Child c({kBin, "launch", "--", "/bin/true"});
  EXPECT_EQ(c.wait(30s), 1) << c.err();
  EXPECT_LT(Clock::now() - start, 10s) << "waited for the start-up timeout";
  EXPECT_NE(c.err().find("exited with status 0 before joining the job"), std::string::npos)
      << c.err();
}

TEST(JobLiveness, NothingARankStartedOutlivesAFailedJob) {
  // The rank is a shell with a child of its own that never joins: the job
  // fails at the start-up timeout and the whole process group goes.
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child c({kBin, "launch", "--startup-timeout", "3", "--", "/bin/sh", "-c",
           "sleep 1000 & echo $! > " + dir + "/sleep.$GRIDBCAST_RANK; wait"});
  const auto pids = wait_for_pids(dir, "sleep", 8, 30s);
  ASSERT_EQ(pids.size(), 8u) << c.err();
  EXPECT_EQ(c.wait(60s), 1) << c.err();
  EXPECT_NE(c.err().find("did not connect within 3 s"), std::string::npos) << c.err();
  for (const pid_t p : pids) {
    for (int i = 0; i < 100 && alive(p); ++i) std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(alive(p)) << "sleep " << p << " outlived the job";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gridbcast::testing
