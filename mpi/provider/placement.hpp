// Where an MPI communicator's ranks sit in a gridbcast topology: inferred from
// host names, or mapped onto a site-config (GRIDBCAST_TOPOLOGY). Pure data, no
// MPI here.
#pragma once

#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::mpi::provider {

struct Placement {
  topology::Grid grid;            // one node per communicator rank
  std::vector<int> comm_of_grid;  // grid rank -> communicator rank
  std::vector<int> grid_of_comm;  // communicator rank -> grid rank
};

// No site-config: one site "mpi"; one node per rank, named after its host
// ("host", or "host#k" for the k-th rank on a host with several), grouped by
// host in the order hosts first appear, each with one NIC at addresses[rank]
// (10 Gbit/s nominal: it only feeds the lower bound).
Placement infer_placement(const std::vector<std::string>& hosts,
                          const std::vector<std::string>& addresses);

// A site-config: a rank goes to a node whose `host` or `name` is its host name
// (or that name up to the first dot); the k-th rank on a host takes the k-th
// such node. When no rank's host names any node (a loopback topology such as
// site-configs/default.yaml), rank i takes node i. The grid is then restricted
// to the chosen nodes (runtime/subgrid.hpp). Throws std::runtime_error naming
// the host that has no node left.
Placement map_placement(const topology::Grid& grid, const std::vector<std::string>& hosts);

}  // namespace gridbcast::mpi::provider
