// The `gridbcast rank` entry: one rank of a launched job. It finds the launcher
// through its environment:
//   GRIDBCAST_LAUNCHER  host:port of the launcher's control listener
//   GRIDBCAST_JOB_ID    the job id (hex)
//   GRIDBCAST_RANK      this rank; else SLURM_PROCID, PMI_RANK or OMPI_COMM_WORLD_RANK
//   GRIDBCAST_SECRET    the job secret (hex); when unset, read as the first line
//                       of standard input (how the local and ssh backends pass it,
//                       so it never appears in argv or the environment)
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

namespace gridbcast::runtime {

// This process's rank from the environment, or nullopt.
std::optional<int> rank_from_environment();

// Runs the rank until the launcher says exit; returns the process exit status.
int run_rank(std::istream& secret_in, std::ostream& err);

}  // namespace gridbcast::runtime
