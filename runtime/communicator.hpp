// The rank side of gridbcast: `bcast(buf, bytes, root)` over lanes, for one
// rank of a job. No Asio in this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/endpoints.hpp"
#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::runtime {

struct CommOptions {
  std::chrono::milliseconds timeout{30'000};  // a broadcast fails after this long without progress
  std::uint64_t segment_bytes = 0;            // 0: the topology's, else automatic
  topology::SelectionThresholds thresholds;   // for algorithm selection
};

struct BcastInfo {
  topology::Algorithm algorithm;
  std::uint64_t bytes = 0;
  std::uint64_t segment_bytes = 0;
  double seconds = 0;  // on this rank, from the call to its return
};

class Communicator {
 public:
  Communicator(topology::Grid grid, int rank, JobCredentials creds, CommOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Opens this rank's listening lanes; the ports go to the rendezvous.
  std::array<std::uint16_t, kLanes> listen();
  void set_endpoints(EndpointTable table);

  // Every rank calls it with the same bytes, root and algorithm. Throws
  // std::runtime_error naming the failed peer; after a failure every later
  // call throws the same error.
  BcastInfo bcast(void* buffer, std::uint64_t bytes, int root,
                  std::optional<topology::Algorithm> algorithm = std::nullopt);

  int rank() const;
  int size() const;
  const topology::Grid& grid() const;
  std::uint64_t rejected_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridbcast::runtime
