// libgridbcast_mpi_provider_<openmpi|mpich>.so in real MPI applications:
// programs built against Open MPI and MPICH print the same with and without
// the provider preloaded, over both transports; the benchmark runs unmodified.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "mpi_support.hpp"

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
  const std::string dir = temp_dir();
  const std::string topo = write_loopback_topology(dir, {2, 2});
  same_as_without("mpi", {{"GRIDBCAST_MIN_BYTES", "1000"},
                          {"GRIDBCAST_ALGORITHM", "multilane"},
                          {"GRIDBCAST_TOPOLOGY", topo}});
  same_as_without("lanes", {{"GRIDBCAST_MIN_BYTES", "1000"}, {"GRIDBCAST_TOPOLOGY", topo}});
  std::filesystem::remove_all(dir);
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

INSTANTIATE_TEST_SUITE_P(Mpi, Provider, ::testing::Values("openmpi", "mpich"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace gridbcast::testing
