// Shared by the MPI tests: where the built programs are, and how to find and
// run the MPI launchers of Open MPI and MPICH.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/process.hpp"

namespace gridbcast::testing {

inline const std::string kBin = GRIDBCAST_BINARY;
inline const std::string kSrc = GRIDBCAST_SOURCE_DIR;
inline const std::string kMpiBin = GRIDBCAST_MPI_TEST_BIN;
inline const std::string kMpiLibDir = GRIDBCAST_MPI_LIB_DIR;

// A program on PATH, or "" when there is none.
inline std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

inline std::vector<std::string> concat(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A loopback site-config with sites of the given node counts (lanes on
// 127.0.5.x and 127.0.6.x; no node is named after this host, so MPI ranks map
// onto it in rank order), two-stream WAN links between consecutive sites.
inline std::string write_loopback_topology(const std::string& dir, const std::vector<int>& sites) {
  const std::string path = dir + "/loopback-" + std::to_string(sites.size()) + "-sites.yaml";
  std::ofstream f(path);
  f << "name: mpi-test\ndefaults:\n  nic_bandwidth: 10 Gbit\nsites:\n";
  int host = 1;
  for (size_t s = 0; s < sites.size(); ++s) {
    // Loopback carries multicast inside the host (the multicast algorithm).
    f << "  - name: site" << s << "\n    multicast: true\n    nodes:\n";
    for (int n = 0; n < sites[s]; ++n, ++host)
      f << "      - name: s" << s << "n" << n << "\n        nics:\n          - address: 127.0.5."
        << host << "\n          - address: 127.0.6." << host << "\n";
  }
  if (sites.size() > 1) f << "wan:\n";
  for (size_t s = 1; s < sites.size(); ++s)
    f << "  - sites: [site" << s - 1 << ", site" << s
      << "]\n    latency: 0 ms\n    bandwidth: 10 Gbit\n    streams: 2\n";
  return path;
}

// One MPI implementation: how to start `ranks` processes of a program with
// some environment variables set in every rank.
struct MpiFlavour {
  std::string name;      // "openmpi" or "mpich"
  bool built = false;    // its programs and provider were built
  std::string launcher;  // mpirun.openmpi / mpiexec.mpich, found on PATH
  std::string provider;  // libgridbcast_mpi_provider_<name>.so
  int ranks = 0;

  std::string missing() const {
    if (!built)
      return name +
             " was not found when the build was configured (bash scripts/setup.sh installs " +
             (name == "openmpi" ? "openmpi-bin libopenmpi-dev" : "mpich libmpich-dev") + ")";
    if (launcher.empty()) return name + "'s launcher is not on PATH";
    return "";
  }
  std::string program(const std::string& prog) const { return kMpiBin + "/" + prog + "_" + name; }

  std::vector<std::string> command(const std::vector<std::pair<std::string, std::string>>& env,
                                   const std::vector<std::string>& argv) const {
    std::vector<std::string> c;
    if (name == "openmpi") {
      // Loopback only: the testbed may be adding and removing interfaces.
      c = {"/usr/bin/env",
           "OMPI_ALLOW_RUN_AS_ROOT=1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
           launcher,
           "--oversubscribe",
           "--mca",
           "btl",
           "tcp,self",
           "--mca",
           "btl_tcp_if_include",
           "lo",
           "--mca",
           "oob_tcp_if_include",
           "lo",
           "-np",
           std::to_string(ranks)};
      for (const auto& [k, v] : env) c.insert(c.end(), {"-x", k + "=" + v});
    } else {
      // UCX's shared memory: with UCX_TLS=tcp,self, UCX 1.13 hangs in MPI_Finalize
      // now and then (1 run in 5 at 3 ranks here; PEERS.md).
      c = {launcher, "-n", std::to_string(ranks), "-genv", "UCX_TLS", "sm,self"};
      for (const auto& [k, v] : env) c.insert(c.end(), {"-genv", k, v});
    }
    return concat(c, argv);
  }
};

inline MpiFlavour openmpi() {
  MpiFlavour f{"openmpi", GRIDBCAST_HAVE_OPENMPI != 0, on_path("mpirun.openmpi"), "", 4};
#if GRIDBCAST_HAVE_OPENMPI
  f.provider = GRIDBCAST_OPENMPI_PROVIDER;
#endif
  return f;
}

inline MpiFlavour mpich() {
  MpiFlavour f{"mpich", GRIDBCAST_HAVE_MPICH != 0, on_path("mpiexec.mpich"), "", 3};
#if GRIDBCAST_HAVE_MPICH
  f.provider = GRIDBCAST_MPICH_PROVIDER;
#endif
  return f;
}

}  // namespace gridbcast::testing
