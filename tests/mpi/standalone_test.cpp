// libgridbcast_mpi: C programs built against gridbcast's mpi.h, run under
// `gridbcast launch TOPOLOGY -- PROGRAM` as a user runs them.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "mpi_support.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

TEST(MpiStandalone, EveryCallOnTheDefaultTopology) {
  Child c({kBin, "launch", "--", kMpiBin + "/calls_gridbcast"});
  ASSERT_EQ(c.wait(120s), 0) << c.err();
  EXPECT_NE(c.out().find("calls: 8 ranks, "), std::string::npos) << c.out();
  EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos) << c.out();
}

TEST(MpiStandalone, EveryCallOnThreeSitesWithAlgorithmsDrawnPerBroadcast) {
  // GRIDBCAST_ALGORITHM=random: every algorithm on the world and on the split
  // and duplicated communicators, planned over their restricted topologies.
  Child c({"/usr/bin/env", "GRIDBCAST_ALGORITHM=random", kBin, "launch",
           kSrc + "/site-configs/three-sites-hetero.yaml", "--", kMpiBin + "/calls_gridbcast"});
  ASSERT_EQ(c.wait(180s), 0) << c.err();
  EXPECT_NE(c.out().find("calls: 15 ranks, "), std::string::npos) << c.out();
  EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos) << c.out();
}

TEST(MpiStandalone, EveryCallWithMulticastOnTheDefaultTopology) {
  // The embedded default's sites carry multicast (loopback): the world's and
  // the split and duplicated communicators' broadcasts all use it.
  Child c({"/usr/bin/env", "GRIDBCAST_ALGORITHM=multicast", kBin, "launch", "--",
           kMpiBin + "/calls_gridbcast"});
  ASSERT_EQ(c.wait(180s), 0) << c.err();
  EXPECT_NE(c.out().find("calls: 8 ranks, "), std::string::npos) << c.out();
  EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos) << c.out();
}

TEST(MpiStandalone, PrintsWhatOpenMpiPrintsForTheSameProgram) {
  auto f = openmpi();
  if (!f.missing().empty()) GTEST_SKIP() << f.missing();
  f.ranks = 8;
  Child ours({kBin, "launch", "--", kMpiBin + "/calls_gridbcast"});
  Child theirs(f.command({}, {f.program("calls")}));
  ASSERT_EQ(ours.wait(120s), 0) << ours.err();
  ASSERT_EQ(theirs.wait(120s), 0) << theirs.err();
  EXPECT_EQ(ours.out(), theirs.out());
}

TEST(MpiStandalone, PrintsWhatMpichPrintsForTheSameProgram) {
  const auto f = mpich();
  if (!f.missing().empty()) GTEST_SKIP() << f.missing();
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child theirs(f.command({}, {f.program("calls")}));
  ASSERT_EQ(theirs.wait(120s), 0) << theirs.err();
  // Three ranks on two sites.
  Child ours(
      {kBin, "launch", write_loopback_topology(dir, {2, 1}), "--", kMpiBin + "/calls_gridbcast"});
  ASSERT_EQ(ours.wait(120s), 0) << ours.err();
  EXPECT_EQ(ours.out(), theirs.out());
  EXPECT_EQ(last_line(ours.out()).rfind("calls: 3 ranks", 0), 0u) << ours.out();
  std::filesystem::remove_all(dir);
}

TEST(MpiStandalone, AProgramStartedWithoutLauncherIsASingleton) {
  Child c({kMpiBin + "/calls_gridbcast"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  EXPECT_NE(c.out().find("calls: 1 ranks, "), std::string::npos) << c.out();
}

TEST(MpiStandalone, BroadcastsBeyondTwoGibibytesBetweenTwoRanks) {
  // 2.25 GiB as MPI_DOUBLEs (count * 8 > 2^31), then as 2304 elements of a
  // 1 MiB contiguous type from the other rank.
  Child c({kBin, "launch", kSrc + "/site-configs/loopback-pair.yaml", "--",
           kMpiBin + "/big_bcast_gridbcast"});
  ASSERT_EQ(c.wait(240s), 0) << c.err();
  EXPECT_NE(c.out().find("big_bcast: 2 ranks, 2415919104 bytes twice, verified"), std::string::npos)
      << c.out();
}

TEST(MpiStandalone, MpiAbortEndsTheJobWithItsCodeAndNamesTheRank) {
  Child c({kBin, "launch", "--", kMpiBin + "/failures_gridbcast", "abort"});
  EXPECT_EQ(c.wait(60s), 7) << c.err();
  EXPECT_NE(c.err().find("FAILED: rank 2 (a3) called MPI_Abort with error code 7"),
            std::string::npos)
      << c.err();
  EXPECT_TRUE(children_of(c.pid(), "GRIDBCAST_RANK").empty());
}

TEST(MpiStandalone, ARankThatExitsEarlyFailsTheJobWithItsStatus) {
  Child exit3({kBin, "launch", "--", kMpiBin + "/failures_gridbcast", "exit"});
  EXPECT_EQ(exit3.wait(60s), 3) << exit3.err();
  EXPECT_NE(exit3.err().find("FAILED: rank 1 (a2) exited with status 3"), std::string::npos)
      << exit3.err();
  Child quiet({kBin, "launch", "--", kMpiBin + "/failures_gridbcast", "nofinalize"});
  EXPECT_EQ(quiet.wait(60s), 1) << quiet.err();
  EXPECT_NE(quiet.err().find("rank 1 (a2) exited with status 0 without calling MPI_Finalize"),
            std::string::npos)
      << quiet.err();
}

TEST(MpiStandalone, AFatalErrorNamesTheCallAndTheRank) {
  Child c({kBin, "launch", "--", kMpiBin + "/failures_gridbcast", "fatal"});
  EXPECT_EQ(c.wait(60s), 6) << c.err();  // MPI_ERR_RANK
  EXPECT_NE(c.err().find("FAILED: rank 0 (a1) called MPI_Abort with error code 6: MPI_Send: "
                         "MPI_ERR_RANK: invalid rank: destination 13"),
            std::string::npos)
      << c.err();
}

TEST(MpiStandalone, StandardInputStaysTheProgramsOnRankZero) {
  // The secret goes through GRIDBCAST_SECRET_FD, so stdin is the user's.
  Child c({"/bin/sh", "-c",
           "echo 'a line for rank 0' | " + kBin + " launch -- " + kMpiBin +
               "/failures_gridbcast stdin"});
  ASSERT_EQ(c.wait(60s), 0) << c.err();
  EXPECT_EQ(c.out(), "rank 0 read: a line for rank 0\n");
}

TEST(MpiStandalone, WrapperAndPkgConfigBuildTheBenchmarkUnmodified) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child cc({kMpiLibDir + "/gridbcast-cc", "-O2", "-Wall", kSrc + "/bench/mpi_bcast.c", "-o",
            dir + "/mpi_bcast"});
  ASSERT_EQ(cc.wait(120s), 0) << cc.err();
  Child run({kBin, "launch", "--", dir + "/mpi_bcast", "4194304", "3", "5"});
  ASSERT_EQ(run.wait(120s), 0) << run.err();
  EXPECT_NE(run.out().find("\"ranks\": 8, \"bytes\": 4194304"), std::string::npos) << run.out();
  EXPECT_NE(run.out().find("\"verified\": true"), std::string::npos) << run.out();
  if (!on_path("pkg-config").empty()) {
    Child pc({"/bin/sh", "-c",
              "PKG_CONFIG_PATH=" + kMpiLibDir + " cc -O2 " + kSrc + "/bench/mpi_bcast.c -o " + dir +
                  "/mpi_bcast_pc $(PKG_CONFIG_PATH=" + kMpiLibDir +
                  " pkg-config --cflags --libs gridbcast-mpi)"});
    ASSERT_EQ(pc.wait(120s), 0) << pc.err();
    Child again({kBin, "launch", kSrc + "/site-configs/loopback-pair.yaml", "--",
                 dir + "/mpi_bcast_pc", "1000000", "2"});
    ASSERT_EQ(again.wait(60s), 0) << again.err();
    EXPECT_NE(again.out().find("\"verified\": true"), std::string::npos) << again.out();
  }
  std::filesystem::remove_all(dir);
}

TEST(MpiStandalone, NonBlockingPointToPointOnTheDefaultTopology) {
  // Ring exchanges (1 B, 64 KiB, 16 MiB; sends first, some receives late), a
  // 72 MiB exchange beyond the unexpected-message budget, MPI_ANY_SOURCE with
  // Waitany, Test polling, probes, Sendrecv, ordering, truncation.
  Child c({kBin, "launch", "--", kMpiBin + "/nonblocking_gridbcast"});
  ASSERT_EQ(c.wait(180s), 0) << c.err();
  EXPECT_NE(c.out().find("nonblocking: 8 ranks, "), std::string::npos) << c.out();
  EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos) << c.out();
}

TEST(MpiStandalone, NonBlockingPointToPointOnTwoRanksAndAlone) {
  Child pair({kBin, "launch", kSrc + "/site-configs/loopback-pair.yaml", "--",
              kMpiBin + "/nonblocking_gridbcast"});
  ASSERT_EQ(pair.wait(180s), 0) << pair.err();
  EXPECT_NE(pair.out().find("nonblocking: 2 ranks, "), std::string::npos) << pair.out();
  EXPECT_NE(pair.out().find(" checks, 0 failed"), std::string::npos) << pair.out();
  Child alone({kMpiBin + "/nonblocking_gridbcast"});
  ASSERT_EQ(alone.wait(60s), 0) << alone.err();
  EXPECT_NE(alone.out().find("nonblocking: 1 ranks, "), std::string::npos) << alone.out();
}

// Runs `program` under `launch` on 8 ranks (the embedded default, with
// `default_args`), on 2 (loopback-pair) and on 4 (one site): each run exits 0
// and its rank 0 reports no failed check.
void passes_on_every_job_size(const std::string& program,
                              const std::vector<std::string>& default_args) {
  TempDir dir;
  const std::string four = dir.path().string() + "/four.yaml";
  std::ofstream(four) << "name: four\ndefaults:\n  nic_bandwidth: 10 Gbit\nsites:\n  - name: s\n   "
                         " nodes:\n      - name: q[1-4]\n"
                         "        nics:\n          - address: 127.0.9.[11-14]\n";
  for (const std::vector<std::string>& where :
       {default_args, {kSrc + "/site-configs/loopback-pair.yaml"}, {four}}) {
    std::vector<std::string> cmd = {kBin, "launch"};
    cmd.insert(cmd.end(), where.begin(), where.end());
    for (const auto& a : {std::string("--"), program}) cmd.push_back(a);
    Child c(cmd);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(c.wait(300s), 0) << c.err();
    EXPECT_NE(c.out().find(" checks, 0 failed"), std::string::npos)
        << "after "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
        << " s; out:\n"
        << c.out() << "\nerr:\n"
        << c.err();
  }
}

// Issue 26's program and its variants (tests/mpi/progress.c: a 100 MiB Isend
// before a Barrier, 4,097 small Isends across one, a big Isend before
// broadcasts, both directions, MPI_ANY_SOURCE) on 8, 2 and 4 ranks. Each hung
// forever when every message went eagerly.
TEST(MpiStandalone, ALargeIsendBeforeABarrierCompletesOnEveryJobSize) {
  passes_on_every_job_size(kMpiBin + "/progress_gridbcast", {});
}

// MPI_Ibcast and MPI_Ibarrier (tests/mpi/ibcast.c: every root and several
// sizes beside a ring of messages, several in flight behind one another and
// a blocking Bcast, beside a rendezvous, on a freed subcommunicator, and the
// barrier's semantics) on 8 ranks with algorithms drawn per broadcast, on 2
// and 4 ranks, and alone.
TEST(MpiStandalone, NonBlockingCollectivesOnEveryJobSize) {
  passes_on_every_job_size(kMpiBin + "/ibcast_gridbcast", {"--algorithm", "random"});
  Child alone({kMpiBin + "/ibcast_gridbcast"});
  ASSERT_EQ(alone.wait(60s), 0) << alone.err();
  EXPECT_NE(alone.out().find("ibcast: 1 ranks, "), std::string::npos) << alone.out();
}

// A stuck program without --timeout is named, not silent: when every rank has
// waited in MPI with no byte moving for GRIDBCAST_STUCK_HINT_SECONDS (here 2;
// 60 by default), the launcher says so once, with what each rank waits for,
// and the job goes on (a hint, not a failure) until it is stopped.
TEST(MpiStandalone, AStuckProgramIsNamedOnceAndNotFailed) {
  Child c({"/usr/bin/env", "GRIDBCAST_STUCK_HINT_SECONDS=2", kBin, "launch", "--",
           kMpiBin + "/progress_gridbcast", "deadlock"});
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (c.err().find("every rank has waited in MPI") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(200ms);
  std::this_thread::sleep_for(3s);  // once: no second hint
  ::kill(c.pid(), SIGTERM);
  c.wait(60s);
  const std::string err = c.err();
  const auto at = err.find("every rank has waited in MPI for 2 s with no byte moving");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find("every rank has waited in MPI", at + 1), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 (a1): waiting for a message from rank 1 (a2"), std::string::npos)
      << err;
  EXPECT_NE(err.find("rank 7 (b4): waiting for a message from rank 0 (a1"), std::string::npos)
      << err;
}

TEST(MpiStandalone, AWaitWithoutProgressFailsAtTheTimeoutNamingThePeer) {
  // Rank 0 waits on an MPI_Irecv from rank 1, which sleeps 30 s.
  const auto start = std::chrono::steady_clock::now();
  Child c({kBin, "launch", "--timeout", "2", "--", kMpiBin + "/nonblocking_gridbcast", "stall"});
  EXPECT_NE(c.wait(60s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_NE(c.err().find("FAILED: rank 0 (a1) called MPI_Abort with error code 15: MPI_Wait: "
                         "MPI_ERR_OTHER: other error: waiting for a message from rank 1 (a2"),
            std::string::npos)
      << c.err();
  EXPECT_NE(c.err().find("nothing moved for 2000 ms (--timeout)"), std::string::npos) << c.err();
}

TEST(MpiStandalone, OsuBenchmarkIdiomsCompileWithTheWrapperAndRun) {
  // MPI_Request arrays with MPI_Waitall, MPI_Wait, MPI_Test: what the OSU
  // Micro-Benchmarks' collective suite needs besides the collectives.
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  Child cc({kMpiLibDir + "/gridbcast-cc", "-O2", "-Wall", "-Wextra", "-Werror",
            kSrc + "/tests/mpi/osu_idioms.c", "-o", dir + "/osu_idioms"});
  ASSERT_EQ(cc.wait(120s), 0) << cc.err();
  Child run({kBin, "launch", "--", dir + "/osu_idioms"});
  ASSERT_EQ(run.wait(120s), 0) << run.err();
  EXPECT_EQ(run.out(), "osu_idioms: 8 ranks, ok\n");
  std::filesystem::remove_all(dir);
}

TEST(MpiStandalone, MistakesAreNamedBeforeAnyRankStarts) {
  Child missing({kBin, "launch", "--", "/no/such/program"});
  EXPECT_EQ(missing.wait(30s), 1);
  EXPECT_NE(missing.err().find("cannot run /no/such/program"), std::string::npos) << missing.err();
  Child empty({kBin, "launch", "--"});
  EXPECT_NE(empty.wait(30s), 0);
  EXPECT_NE(empty.err().find("name the program"), std::string::npos) << empty.err();
  Child algo({"/usr/bin/env", "GRIDBCAST_ALGORITHM=fastest", kBin, "launch", "--",
              kMpiBin + "/failures_gridbcast"});
  EXPECT_EQ(algo.wait(60s), 1);
  EXPECT_NE(algo.err().find("GRIDBCAST_ALGORITHM=\"fastest\" is not auto, random or one of"),
            std::string::npos)
      << algo.err();
}

}  // namespace
}  // namespace gridbcast::testing
