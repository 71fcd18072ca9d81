// The provider's MPI transport: runs a gridbcast Plan with the host MPI's own
// point-to-point (PMPI_Isend / PMPI_Irecv), with the runtime executor's
// segments (topology/plan/segments.hpp, one link per peer): a rank forwards a
// segment as soon as it holds it, and a link's segments go in plan order.
// Lanes and streams mean nothing to MPI and are ignored.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "topology/plan/plan.hpp"

namespace gridbcast::mpi::provider {

struct PmpiOptions {
  MPI_Comm comm = MPI_COMM_NULL;    // a private duplicate: no user message can match ours
  int tag_ub = 32767;               // the communicator's MPI_TAG_UB
  std::uint64_t segment_bytes = 0;  // set by the caller (topology::resolve_segment_bytes)
  int window = 8;                   // requests in flight per link and direction
};

// `plan` speaks of grid ranks; comm_of_grid[g] is grid rank g's rank in
// options.comm and `me` this process's grid rank. Throws std::runtime_error
// naming the MPI error and the peer when an MPI call fails.
void execute_over_pmpi(const topology::Plan& plan, int me, const std::vector<int>& comm_of_grid,
                       std::byte* buffer, const PmpiOptions& options);

// The same broadcast in steps, for MPI_Ibcast: the constructor posts what it
// can; each step() completes what MPI has finished and posts what that made
// possible (a segment received is forwarded at once). Returns true when this
// rank's part is done. With `block`, waits in PMPI_Waitsome until something
// completes (the host MPI progresses everything meanwhile). Throws like
// execute_over_pmpi.
class PmpiBroadcast {
 public:
  PmpiBroadcast(const topology::Plan& plan, int me, std::vector<int> comm_of_grid,
                std::byte* buffer, const PmpiOptions& options);
  ~PmpiBroadcast();
  PmpiBroadcast(const PmpiBroadcast&) = delete;
  PmpiBroadcast& operator=(const PmpiBroadcast&) = delete;
  bool step(bool block);
  bool done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridbcast::mpi::provider
