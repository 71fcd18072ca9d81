// libgridbcast_mpi_provider_<openmpi|mpich>.so in real MPI applications:
// programs built against Open MPI and MPICH print the same with and without
// the provider preloaded, over both transports; the benchmark runs unmodified.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "mpi_support.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
using Env = std::vector<std::pair<std::string, std::string>>;

struct Outcome {
  int status;
  std::string out, err;
};

Outcome run(const MpiFlavour& f, const Env& env, const std::vector<std::string>& argv) {
  Child c(f.command(env, argv));
  const int status = c.wait(120s);
  return {status, c.out(), c.err()};
}

Env with_provider(const MpiFlavour& f, Env env) {
  env.insert(env.begin(), {"LD_PRELOAD", f.provider});
  env.push_back({"GRIDBCAST_STATS", "1"});
  return env;
}

// What the provider's statistics line says rank 0 sent through gridbcast.
std::uint64_t gridbcast_count(const std::string& err, const MpiFlavour& f,
                              const std::string& transport) {
  const std::string head =
      "gridbcast provider (" + f.name + ", transport " + transport + ") rank 0: ";
  const auto at = err.find(head);
  if (at == std::string::npos) return 0;
  const auto colon = err.find("MPI_Bcast: ", at);
  return std::stoull(err.substr(colon + 11));
}

// How many of them went hierarchically (leaders between nodes, PMPI_Bcast within);
// -1 when the line says nothing about it.
long long hierarchical_count(const std::string& err, const MpiFlavour& f,
                             const std::string& transport) {
  const std::string head =
      "gridbcast provider (" + f.name + ", transport " + transport + ") rank 0: ";
  const auto at = err.find(head);
  if (at == std::string::npos) return -1;
  const auto end = err.find(" hierarchical)", at);
  const auto line_end = err.find('\n', at);
  if (end == std::string::npos || end > line_end) return -1;
  const auto start = err.rfind(' ', end - 1);
  return std::stoll(err.substr(start + 1, end - start - 1));
}

class Provider : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    flavour_ = GetParam() == "openmpi" ? openmpi() : mpich();
    if (!flavour_.missing().empty()) GTEST_SKIP() << flavour_.missing();
  }
  // provider_check without the provider, run once per flavour.
  const Outcome& baseline() {
    static std::map<std::string, Outcome> cache;
    auto it = cache.find(flavour_.name);
    if (it == cache.end())
      it = cache.emplace(flavour_.name, run(flavour_, {}, {flavour_.program("provider_check")}))
               .first;
    return it->second;
  }
  void same_as_without(const std::string& transport, Env env) {
    const Outcome& base = baseline();
    ASSERT_EQ(base.status, 0) << base.err;
    ASSERT_NE(base.out.find("0 mismatches"), std::string::npos) << base.out;
    env.push_back({"GRIDBCAST_TRANSPORT", transport});
    const Outcome r =
        run(flavour_, with_provider(flavour_, env), {flavour_.program("provider_check")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, base.out);
    // Most broadcasts took gridbcast's path (below the threshold they did not).
    EXPECT_GE(gridbcast_count(r.err, flavour_, transport), 60u) << r.err;
    // Every rank on one host: one node, so GRIDBCAST_HIERARCHY=auto stays flat.
    EXPECT_EQ(hierarchical_count(r.err, flavour_, transport), 0) << r.err;
  }
  MpiFlavour flavour_;
};

TEST_P(Provider, SameOutputOverMpiWithEveryAlgorithm) {
  same_as_without("mpi", {{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_ALGORITHM", "random"}});
}

TEST_P(Provider, SameOutputOverLanesWithEveryAlgorithm) {
  same_as_without("lanes", {{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_ALGORITHM", "random"}});
}

TEST_P(Provider, SameOutputWithMultilaneOnATwoSiteTopology) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string topo = write_loopback_topology(dir, {2, 2});
  same_as_without("mpi", {{"GRIDBCAST_MIN_BYTES", "1000"},
                          {"GRIDBCAST_ALGORITHM", "multilane"},
                          {"GRIDBCAST_TOPOLOGY", topo}});
  same_as_without("lanes", {{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_TOPOLOGY", topo}});
  std::filesystem::remove_all(dir);
}

// The multicast algorithm needs the lanes transport: it runs there, and the
// mpi transport refuses it with that advice rather than run the ring alone.
TEST_P(Provider, MulticastOverLanesAndRefusedOverMpi) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string topo = write_loopback_topology(dir, {2, 2});
  same_as_without("lanes", {{"GRIDBCAST_MIN_BYTES", "1000"},
                            {"GRIDBCAST_ALGORITHM", "multicast"},
                            {"GRIDBCAST_TOPOLOGY", topo}});
  const Outcome r = run(flavour_,
                        with_provider(flavour_, {{"GRIDBCAST_TRANSPORT", "mpi"},
                                                 {"GRIDBCAST_MIN_BYTES", "1000"},
                                                 {"GRIDBCAST_ALGORITHM", "multicast"},
                                                 {"GRIDBCAST_TOPOLOGY", topo}}),
                        {flavour_.program("provider_check")});
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.err.find("GRIDBCAST_TRANSPORT=lanes"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

// MPI_Ibcast through gridbcast (tests/mpi/ibcast.c: every root beside a ring
// of messages, several in flight with a blocking MPI_Bcast behind them, beside
// a rendezvous, on a communicator freed before the wait), over PMPI and over
// lanes, algorithms drawn per broadcast: every copy verifies and the
// statistics line counts the non-blocking broadcasts that went through gridbcast.
TEST_P(Provider, NonBlockingBroadcastsGoThroughGridbcastAndVerify) {
  for (const std::string transport : {"mpi", "lanes"}) {
    const Outcome r = run(flavour_,
                          with_provider(flavour_, {{"GRIDBCAST_TRANSPORT", transport},
                                                   {"GRIDBCAST_MIN_BYTES", "1000"},
                                                   {"GRIDBCAST_ALGORITHM", "random"}}),
                          {flavour_.program("ibcast"), "4"});
    ASSERT_EQ(r.status, 0) << transport << ": " << r.err;
    EXPECT_NE(r.out.find(" checks, 0 failed"), std::string::npos) << r.out;
    const auto at = r.err.find(" MPI_Ibcast: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_GE(std::stoull(r.err.substr(at + 13)), 10u) << r.err;  // the sizes above 1000 bytes
  }
}

TEST_P(Provider, EveryCallOfTheSubsetWithTheProviderInPlace) {
  // calls.c against the real MPI with every broadcast above 1 byte on lanes.
  const Outcome r =
      run(flavour_,
          with_provider(flavour_, {{"GRIDBCAST_TRANSPORT", "lanes"}, {"GRIDBCAST_MIN_BYTES", "2"}}),
          {flavour_.program("calls")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(" checks, 0 failed"), std::string::npos) << r.out;
  EXPECT_GE(gridbcast_count(r.err, flavour_, "lanes"), 50u) << r.err;
}

TEST_P(Provider, TheBroadcastBenchmarkRunsUnmodified) {
  const std::vector<std::string> bench = {flavour_.program("mpi_bcast"), "8388608", "3", "1"};
  const Outcome plain = run(flavour_, {}, bench);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out.find("\"verified\": true"), std::string::npos) << plain.out;
  for (const std::string transport : {"mpi", "lanes"}) {
    const Outcome r =
        run(flavour_, with_provider(flavour_, {{"GRIDBCAST_TRANSPORT", transport}}), bench);
    ASSERT_EQ(r.status, 0) << transport << ": " << r.err;
    EXPECT_NE(r.out.find("\"verified\": true"), std::string::npos) << r.out;
    EXPECT_EQ(gridbcast_count(r.err, flavour_, transport), 3u) << r.err;
  }
}

TEST_P(Provider, ABadSettingStopsTheJobAndSaysWhich) {
  const Outcome r = run(flavour_, with_provider(flavour_, {{"GRIDBCAST_TRANSPORT", "pigeon"}}),
                        {flavour_.program("mpi_bcast"), "1048576", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("GRIDBCAST_TRANSPORT=\"pigeon\" is neither mpi nor lanes"),
            std::string::npos)
      << r.err;
}

TEST_P(Provider, ABadHierarchyStopsTheJobAndSaysWhich) {
  const Outcome r = run(flavour_, with_provider(flavour_, {{"GRIDBCAST_HIERARCHY", "tree"}}),
                        {flavour_.program("mpi_bcast"), "1048576", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("GRIDBCAST_HIERARCHY=\"tree\" is not auto, node or flat"), std::string::npos)
      << r.err;
}

INSTANTIATE_TEST_SUITE_P(Mpi, Provider, ::testing::Values("openmpi", "mpich"),
                         [](const auto& p) { return p.param; });

// Several ranks per host, as on a cluster: every rank of one machine is given a
// host name (GRIDBCAST_HOST, set per rank by a shell from the launcher's rank
// variable) so that `ranks` ranks form hosts of `per_host` consecutive ranks
// ("h0" = ranks 0..per_host-1, ...; the last host may have fewer), or, with
// per_host < 0, -per_host hosts taking ranks in turn (rank % hosts).
struct Layout {
  int ranks;
  int per_host;
  std::string name;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class Hierarchy : public ::testing::TestWithParam<std::tuple<std::string, std::string, Layout>> {
 protected:
  void SetUp() override {
    flavour_ = std::get<0>(GetParam()) == "openmpi" ? openmpi() : mpich();
    if (!flavour_.missing().empty()) GTEST_SKIP() << flavour_.missing();
    transport_ = std::get<1>(GetParam());
    layout_ = std::get<2>(GetParam());
    flavour_.ranks = layout_.ranks;
  }
  // `program` with the provider preloaded and this rank's host name set.
  std::vector<std::string> on_hosts(const std::vector<std::string>& program) const {
    const std::string rank = "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}";
    const std::string host = layout_.per_host > 0
                                 ? "$((" + rank + " / " + std::to_string(layout_.per_host) + "))"
                                 : "$((" + rank + " % " + std::to_string(-layout_.per_host) + "))";
    return concat(
        {"/bin/sh", "-c",
         "GRIDBCAST_HOST=h" + host + " LD_PRELOAD=" + flavour_.provider + " exec \"$@\"", "sh"},
        program);
  }
  Outcome run_on_hosts(Env env, const std::vector<std::string>& program) const {
    env.push_back({"GRIDBCAST_STATS", "1"});
    env.push_back({"GRIDBCAST_TRANSPORT", transport_});
    // The fake hosts are one machine: the lanes listen on loopback.
    env.push_back({"GRIDBCAST_ADDRESS", "127.0.0.1"});
    return run(flavour_, env, on_hosts(program));
  }
  MpiFlavour flavour_;
  std::string transport_;
  Layout layout_;
};

TEST_P(Hierarchy, EveryRootEveryTypeSameOutputAsWithoutTheProvider) {
  const Outcome base = run(flavour_, {}, {flavour_.program("provider_check")});
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_NE(base.out.find("0 mismatches"), std::string::npos) << base.out;
  const Outcome r =
      run_on_hosts({{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_ALGORITHM", "random"}},
                   {flavour_.program("provider_check")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, base.out);
  const auto all = gridbcast_count(r.err, flavour_, transport_);
  EXPECT_GE(all, 60u) << r.err;
  // World, its duplicate and the reversed communicator span several hosts with
  // several ranks on some: hierarchical (world: 7 sizes x every root, 4 of
  // them at least 1000 bytes, and 4 typed cases; as many on the others).
  const long long hier = hierarchical_count(r.err, flavour_, transport_);
  EXPECT_GE(hier, 3 * 4 * layout_.ranks) << r.err;
  EXPECT_LE(hier, static_cast<long long>(all)) << r.err;
}

TEST_P(Hierarchy, FlatTakesNoHierarchicalPath) {
  const Outcome r = run_on_hosts({{"GRIDBCAST_HIERARCHY", "flat"}},
                                 {flavour_.program("mpi_bcast"), "4194304", "3", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"verified\": true"), std::string::npos) << r.out;
  EXPECT_EQ(gridbcast_count(r.err, flavour_, transport_), 3u) << r.err;
  EXPECT_EQ(hierarchical_count(r.err, flavour_, transport_), 0) << r.err;
}

TEST_P(Hierarchy, TheBenchmarkFromANonLeaderRootGoesHierarchical) {
  // bench/mpi_bcast.c SIZE ITERS ROOT: root 1 is not its host's leader when
  // hosts hold consecutive ranks, and leads a host of its own when they alternate.
  const Outcome r = run_on_hosts({}, {flavour_.program("mpi_bcast"), "4194305", "3", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"verified\": true"), std::string::npos) << r.out;
  EXPECT_EQ(gridbcast_count(r.err, flavour_, transport_), 3u) << r.err;
  EXPECT_EQ(hierarchical_count(r.err, flavour_, transport_), 3) << r.err;
}

// MPI_Ibcast on several ranks per host goes through the nodes' leaders too,
// in steps (the hand-off to the root's leader, the plan between nodes, the
// host's MPI_Ibcast within each node), moved by MPI_Wait and MPI_Test:
// tests/mpi/ibcast.c verifies every copy, and the statistics count them.
TEST_P(Hierarchy, NonBlockingBroadcastsGoThroughTheLeaders) {
  const Outcome r =
      run_on_hosts({{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_ALGORITHM", "random"}},
                   {flavour_.program("ibcast"), "4"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(" checks, 0 failed"), std::string::npos) << r.out;
  const auto at = r.err.find(" MPI_Ibcast: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const auto hier = r.err.find(" hierarchical), ", at);
  ASSERT_NE(hier, std::string::npos) << r.err;
  const auto start = r.err.rfind(' ', hier - 1);
  EXPECT_GE(std::stoll(r.err.substr(start + 1, hier - start - 1)), 10) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Mpi, Hierarchy,
    ::testing::Combine(::testing::Values("openmpi", "mpich"), ::testing::Values("mpi", "lanes"),
                       ::testing::Values(Layout{6, -2, "6RanksOn2HostsInTurn"},
                                         Layout{7, 3, "7RanksOnHostsOf3And1"})),
    [](const auto& p) {
      return std::get<0>(p.param) + "_" + std::get<1>(p.param) + "_" + std::get<2>(p.param).name;
    });

}  // namespace
}  // namespace gridbcast::testing
