// How rank processes get started and stopped (job/backends.cpp). The launcher
// only needs these calls, so a backend for network namespaces or a batch
// system slots in beside these. No Asio here.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::job {

class Backend {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Starts `rank` on `node` with `env` (GRIDBCAST_* without the secret); the
  // secret goes through a pipe named by GRIDBCAST_SECRET_FD (local processes)
  // or standard input (ssh). Each rank is the leader of a process group of its
  // own, so everything it starts is stopped with it. Throws if it cannot start.
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
  // Signals every running rank's process group (the rank and all it started).
  virtual void signal_all(int signo) = 0;
  // True when ranks are started by someone else (external backend).
  virtual bool external() const { return false; }

  // How ranks' standard output and error reach ours. Plain: inherited (lines
  // of different ranks may mix). Tagged: each rank writes into pipes the
  // launcher reads, and every whole line is written to ours in one write(),
  // prefixed "[rank R] " (with `tag`) and an ISO 8601 UTC time (with
  // `timestamps`; either makes lines whole); a line longer than
  // kMaxOutputLine is cut into lines of that length. Set before
  // the first start(); the external backend's ranks are not the launcher's to
  // tag (std::invalid_argument).
  struct OutputOptions {
    bool tag = false;
    bool timestamps = false;
  };
  virtual void set_output(OutputOptions options);
  // Waits up to `limit` for the tagged output of exited ranks to be written
  // (what a rank's leftover children keep open is cut off there).
  virtual void drain_output(std::chrono::milliseconds limit) { (void)limit; }
};

inline constexpr std::size_t kMaxOutputLine = 64 * 1024;

// Local fork/exec of `exe rank` (loopback topologies), or of `command` (a
// program under `gridbcast launch TOPOLOGY -- PROGRAM ARGS`; found on PATH).
std::unique_ptr<Backend> make_local_backend(std::string exe);
std::unique_ptr<Backend> make_local_backend(std::vector<std::string> command);
// `ssh [options] -- HOST 'env GRIDBCAST_...=... exe rank'` (or `command`) per
// node, every word quoted for the remote shell; `ssh_command` is split on
// spaces. A host that starts with '-' is refused (ssh would read it as an option).
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command, std::string exe);
std::unique_ptr<Backend> make_ssh_backend(std::string ssh_command,
                                          std::vector<std::string> command);
// Starts nothing: ranks come from srun, mpiexec, docker compose or by hand.
std::unique_ptr<Backend> make_external_backend();
// Inside a Slurm allocation: one job step per rank, `srun --nodes=1
// --ntasks=1 --nodelist=NODE --kill-on-bad-exit=1 env GRIDBCAST_...=...
// exe rank` (`srun_command` split on spaces). The job secret goes to srun's
// standard input, which srun forwards to its one task; GRIDBCAST_RANK is in
// the command, so every step's SLURM_PROCID of 0 does not count.
std::unique_ptr<Backend> make_srun_backend(std::string srun_command,
                                           std::vector<std::string> command);
// That srun command line for `rank` (what make_srun_backend runs; it holds no
// secret). Throws for a node name srun would read as an option or a list.
std::vector<std::string> srun_argv(const std::vector<std::string>& srun, int rank,
                                   const topology::Node& node, const Backend::Env& env,
                                   const std::vector<std::string>& command);
// Starts `prefix(rank, node)... exe rank` locally, e.g. `ip netns exec NS` for
// the emulated grid; `name` is what reports call it.
using CommandPrefix = std::function<std::vector<std::string>(int rank, const topology::Node&)>;
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::string exe);
std::unique_ptr<Backend> make_prefixed_backend(std::string name, CommandPrefix prefix,
                                               std::vector<std::string> command);

// One word for a POSIX shell: 'it''s' style quoting, safe for any bytes.
std::string shell_quote(const std::string& word);

// The local address this host sends from to reach `destination` (an IPv4 or
// IPv6 literal), as the routing table picks it; throws when there is no route.
std::string route_source(const std::string& destination);

// Where the launcher's control listener should be for ranks started on other
// hosts (ssh, external): 127.0.0.1 when every NIC of every node is a loopback
// address; otherwise the source address `route` gives for the first node's
// first NIC that is not loopback. Nodes that `route` reaches from another
// address are named in `note` (one listener address cannot suit them all;
// --listen chooses).
std::string reachable_listen_address(const topology::Grid& grid,
                                     const std::function<std::string(const std::string&)>& route,
                                     std::string* note = nullptr);

}  // namespace gridbcast::job
