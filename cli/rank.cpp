// gridbcast rank (internal): one rank, started by launch or by srun/mpiexec.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "job/rank.hpp"

namespace gridbcast::cli {

namespace {

struct Rank {
  CLI::App* rank_cmd = nullptr;

  explicit Rank(CLI::App& app) {
    rank_cmd = app.add_subcommand(
        "rank",
        "Run one rank (started by 'launch' or by srun/mpiexec with GRIDBCAST_LAUNCHER set)");
    rank_cmd->footer(
        "Environment: GRIDBCAST_LAUNCHER=host:port, GRIDBCAST_JOB_ID, GRIDBCAST_RANK (or "
        "SLURM_PROCID,\n"
        "PMIX_RANK, PMI_RANK, OMPI_COMM_WORLD_RANK), and the secret in GRIDBCAST_SECRET, "
        "through the pipe\n"
        "GRIDBCAST_SECRET_FD names, or on standard input.");
  }

  int run() { return job::run_rank(std::cin, std::cerr); }
};

}  // namespace

Command register_rank(CLI::App& app) {
  auto c = std::make_shared<Rank>(app);
  return {c->rank_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
