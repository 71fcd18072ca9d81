// Joining a launched job, shared by `gridbcast rank` and MPI programs
// (libgridbcast_mpi's MPI_Init): find the launcher through the environment,
// prove the job secret on the control channel, receive the topology and the
// job parameters, open this rank's lanes, send their ports and receive every
// rank's. No Asio here.
//
//   GRIDBCAST_LAUNCHER   host:port of the launcher's control listener
//   GRIDBCAST_JOB_ID     the job id (hex)
//   GRIDBCAST_RANK       this rank; else SLURM_PROCID, PMIX_RANK, PMI_RANK or
//                        OMPI_COMM_WORLD_RANK
//   GRIDBCAST_SECRET     the job secret (hex, at least 128 bits), for ranks started
//                        by someone else; removed from the environment once read;
//   GRIDBCAST_SECRET_FD  else a pipe the local backends open for each rank: its
//                        first line is the secret; read, closed and unset here;
//   otherwise            the first line of the fallback stream (the ssh backend
//                        writes it to standard input).
// So the secret never appears in argv, and a program's standard input stays its own.
//
// After the rendezvous the control channel runs on a thread of its own: it
// sends a heartbeat (or, while a broadcast runs, the bytes moved so far) about
// every second, so the launcher judges a rank by its progress and notices one
// that stopped; and it notices at once when the launcher goes away, which ends
// this process (a rank never outlives its job).
#pragma once

#include <functional>
#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "job/params.hpp"
#include "job/protocol.hpp"
#include "runtime/communicator.hpp"

namespace gridbcast::job {

class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The whole rendezvous; `secret_fallback` may be null. Throws
  // std::runtime_error with a clear message (then report_error() tells the
  // launcher, when the control channel got that far).
  void join(std::istream* secret_fallback);

  int rank() const;  // -1 until known
  const topology::Grid& grid() const;
  const JobParams& params() const;
  const runtime::JobCredentials& credentials() const;
  runtime::Communicator& communicator();

  // After join(): thread-safe; returns once the message is written.
  void send(const control::ToLauncher& m);
  // The launcher's next message; throws when the launcher is gone. An Exit
  // that arrives while exit is not expected (see expect_exit) ends the process.
  control::ToRank receive();
  // The next receive() is for the launcher's final Exit.
  void expect_exit();
  // While `iteration` >= 0, the heartbeat carries Progress for it (this rank's
  // broadcast byte totals); -1: plain heartbeats.
  void report_progress(int iteration);
  // Bytes of this rank's own work while a broadcast's result is prepared
  // (hashed, checked): progress too, though nothing crosses the network.
  void note_work(std::uint64_t bytes);
  // Best effort: sends Error{what} if the control channel is open.
  void report_error(const std::string& what) noexcept;
  // Ends the heartbeat and closes the control channel (the launcher sees the
  // end of file); a later loss of the launcher no longer ends the process.
  void close();

  // What happens when the launcher goes away or ends the job while this rank
  // still works (called on the control thread). Default: print why to stderr
  // and _exit(1).
  void on_launcher_lost(std::function<void(const std::string& why)> handler);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the job secret as described above; throws when there is none or it is
// shorter than 128 bits.
std::string read_job_secret(std::istream* fallback);

// How often a rank reports to the launcher: about a second, more often when the
// progress timeout is short (a quarter of it, at least 100 ms).
std::chrono::milliseconds heartbeat_interval(std::int64_t timeout_ms);

}  // namespace gridbcast::job
