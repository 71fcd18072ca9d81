// The `gridbcast rank` entry: one rank of a launched job. It joins the job as
// runtime/bootstrap.hpp describes (GRIDBCAST_LAUNCHER, GRIDBCAST_JOB_ID,
// GRIDBCAST_RANK, and the secret from GRIDBCAST_SECRET, the GRIDBCAST_SECRET_FD
// pipe of the local backends, or the first line of standard input as the ssh
// backend sends it), then runs the launcher's iterations.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

namespace gridbcast::job {

// This process's rank from the environment, or nullopt.
std::optional<int> rank_from_environment();

// Runs the rank until the launcher says exit; returns the process exit status.
int run_rank(std::istream& secret_in, std::ostream& err);

}  // namespace gridbcast::job
