// `gridbcast testbed compose`: the same emulated grid as a docker compose file
// (docker/README.md). One service per node running `gridbcast rank` (external
// backend: GRIDBCAST_LAUNCHER and GRIDBCAST_RANK inline, the secret and the job
// id from an env file), one network per site and lane with the topology's
// addresses, one network per WAN link, a router service per site that applies
// tc netem (delay, rate, loss) to its WAN interfaces and routes between sites,
// and a `launcher` service running `gridbcast launch --backend external`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::testbed {

// Container-side addresses the compose file uses besides the topology's own.
inline constexpr const char* kComposeControlSubnet = "10.254.0.0/24";
inline constexpr const char* kComposeLauncherAddress = "10.254.0.2";
inline constexpr const char* kComposeTransitRange = "10.253.0.0/16";  // a /29 per WAN link
inline constexpr const char* kComposeTopologyPath = "/etc/gridbcast/topology.yaml";
inline constexpr int kComposeRouteWait = 120;  // seconds a node waits for the other sites

// The engine the file is for: where docker and podman differ (networks), the
// file says what that engine needs; everything else is the same.
enum class ComposeEngine { kDocker, kPodman };

struct ComposeOptions {
  ComposeEngine engine = ComposeEngine::kDocker;
  std::string image = "gridbcast:latest";
  std::string topology_mount;  // the topology file, relative to the compose file's folder
  std::string generated_by;    // the command line, for the header comment
  std::string env_file = "gridbcast.env";
  std::uint16_t port = 7000;
  std::vector<std::string> launch_args;  // appended to `gridbcast launch`
  long nofile = 8192;                    // every service's open-file limit (soft = hard)
  long nproc = 4096;                     // and process limit
};

// The compose file as text. Throws TestbedError if the topology cannot run in
// containers (the same address rules as the namespace testbed).
std::string compose_file(const topology::Grid& grid, const ComposeOptions& o);

// A compose-safe name: [a-z0-9_.-], starting with a letter or digit.
std::string compose_name(const std::string& name);

}  // namespace gridbcast::testbed
