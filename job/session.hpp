// Joining a launched job, shared by `gridbcast rank` and MPI programs
// (libgridbcast_mpi's MPI_Init): find the launcher through the environment,
// prove the job secret on the control channel, receive the topology and the
// job parameters, open this rank's lanes, send their ports and receive every
// rank's. No Asio here.
//
//   GRIDBCAST_LAUNCHER   host:port of the launcher's control listener
//   GRIDBCAST_JOB_ID     the job id (hex)
//   GRIDBCAST_RANK       this rank; else SLURM_PROCID, PMI_RANK or OMPI_COMM_WORLD_RANK
//   GRIDBCAST_SECRET     the job secret (hex), for ranks started by someone else;
//   GRIDBCAST_SECRET_FD  else a pipe the local backends open for each rank: its
//                        first line is the secret; read, closed and unset here;
//   otherwise            the first line of the fallback stream (the ssh backend
//                        writes it to standard input).
// So the secret never appears in argv, and a program's standard input stays its own.
#pragma once

#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.hpp"
#include "job/params.hpp"

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

  // The control channel after the rendezvous: a message is its fields, the type first.
  void send(const std::vector<std::string>& fields);
  std::vector<std::string> receive();
  // Best effort: sends "error" with `what` if the control channel is open.
  void report_error(const std::string& what) noexcept;
  // Closes the control channel (the launcher sees the end of file).
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the job secret as described above; throws when there is none.
std::string read_job_secret(std::istream* fallback);

}  // namespace gridbcast::job
