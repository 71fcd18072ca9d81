// job/rank.cpp: a rank started by srun, an MPI launcher or by hand finds its
// number in the environment: GRIDBCAST_RANK first, then SLURM_PROCID,
// PMIX_RANK, PMI_RANK, OMPI_COMM_WORLD_RANK.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <stdexcept>

#include "job/rank.hpp"

namespace gridbcast::job {
namespace {

const char* const kVars[] = {"GRIDBCAST_RANK", "SLURM_PROCID", "PMIX_RANK", "PMI_RANK",
                             "OMPI_COMM_WORLD_RANK"};

struct CleanRankEnvironment : ::testing::Test {
  void SetUp() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(CleanRankEnvironment, EachVariableAlone) {
  EXPECT_FALSE(rank_from_environment());
  int n = 3;
  for (const char* v : kVars) {
    SetUp();
    ::setenv(v, std::to_string(n).c_str(), 1);
    EXPECT_EQ(rank_from_environment(), n) << v;
    ++n;
  }
}

TEST_F(CleanRankEnvironment, GridbcastRankThenSlurmThenPmix) {
  ::setenv("PMI_RANK", "9", 1);
  ::setenv("PMIX_RANK", "5", 1);
  EXPECT_EQ(rank_from_environment(), 5);
  ::setenv("SLURM_PROCID", "0", 1);  // every per-rank srun step's only task
  EXPECT_EQ(rank_from_environment(), 0);
  ::setenv("GRIDBCAST_RANK", "2", 1);  // what the srun backend passes
  EXPECT_EQ(rank_from_environment(), 2);
}

TEST_F(CleanRankEnvironment, NotANumberIsAnError) {
  ::setenv("PMIX_RANK", "1a", 1);
  EXPECT_THROW(rank_from_environment(), std::runtime_error);
}

}  // namespace
}  // namespace gridbcast::job
