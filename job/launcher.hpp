// `gridbcast launch`: starts one rank per node through a backend, runs the
// rendezvous, drives the iterations, verifies every copy and reports. If any
// rank fails, it stops the others and names the rank. No Asio here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "job/bench.hpp"
#include "job/params.hpp"
#include "topology/grid.hpp"

namespace gridbcast::job {

// How rank processes get started. The launcher only needs these calls, so a
// backend for network namespaces or a batch system slots in beside these.
class Backend {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Starts `rank` on `node` with `env` (GRIDBCAST_* without the secret); the
  // secret goes through a pipe named by GRIDBCAST_SECRET_FD (local processes)
  // or standard input (ssh). Throws if it cannot start.
  virtual void start(int rank, const topology::Node& node, const Env& env,
                     const std::string& secret_hex) = 0;
  // Children that exited since the last call: (rank, human-readable status, ok).
  struct Exit {
    int rank;
    std::string status;
    bool success;
    int code = -1;  // the exit status, or -1 when a signal ended it
  };
  virtual std::vector<Exit> reap() = 0;
  virtual int running() const = 0;
  virtual void signal_all(int signo) = 0;
  // True when ranks are started by someone else (external backend).
  virtual bool external() const { return false; }
};

// Local fork/exec of `exe rank` (loopback topologies), or of `command` (a
// program under `gridbcast launch TOPOLOGY -- PROGRAM ARGS`; found on PATH).
std::unique_ptr<Backend> make_local_backend(std::string exe);
std::unique_ptr<Backend> make_local_backend(std::vector<std::string> command);
// `ssh HOST env GRIDBCAST_...=... exe rank` (or `command`) per node;
// `ssh_command` is split on spaces.
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command, std::string exe);
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command,
                                          std::vector<std::string> command);
// Starts nothing: ranks come from srun, mpiexec, docker compose or by hand.
std::unique_ptr<Backend> make_external_backend();
// Starts `prefix(rank, node)... exe rank` locally, e.g. `ip netns exec NS` for
// the emulated grid; `name` is what reports call it.
using CommandPrefix = std::function<std::vector<std::string>(int rank, const topology::Node&)>;
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::string exe);
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::vector<std::string> command);

struct LaunchOptions {
  topology::Grid grid;
  std::string yaml_text;  // the topology as given, sent to every rank
  JobParams params;
  std::string listen_address = "127.0.0.1";  // the control listener
  std::uint16_t listen_port = 0;
  std::int64_t startup_timeout_ms = 60'000;
  bool json = false;
  bool progress = false;  // a progress line on a terminal
  // Program mode (params.program): the command every rank runs, for messages.
  // The launcher then only runs the rendezvous and waits for each rank's
  // "finished" (sent by MPI_Finalize) and its exit; "abort" (MPI_Abort), an
  // "error", a non-zero exit or an exit before "finished" ends the job.
  std::vector<std::string> program;
  // Bench mode (params.bench): each point as the root reports it, then what
  // the whole run saw. The launcher prints no summary of its own then.
  std::function<void(const BenchPoint&)> on_bench_point;
  struct BenchOutcome {
    std::vector<BenchPoint> points;
    std::uint64_t rejected_connections = 0;
    std::uint64_t peak_rss_bytes = 0;  // the largest rank's
  };
  BenchOutcome* bench_outcome = nullptr;
};

// Runs the job; returns the process exit status (0 on success). In program
// mode a failed job exits with the failing rank's status or MPI_Abort code
// (1 when there is none).
int launch(const LaunchOptions& options, Backend& backend, std::ostream& out, std::ostream& err);


}  // namespace gridbcast::job
