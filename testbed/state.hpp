// The state of a testbed on this machine: what `up` created (so `down` removes
// exactly that) and what `run` and the netns launcher backend need. Kept as
// YAML in <state root>/<prefix>/state.yaml; the root is /run/gridbcast (gone
// after a reboot, like the namespaces) or $GRIDBCAST_TESTBED_STATE_ROOT.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "testbed/layout.hpp"

namespace gridbcast::testbed {

struct DelayLineProcess {
  int site = 0;
  pid_t pid = 0;
  unsigned long long start_time = 0;  // guards against PID reuse
  std::string log;
};

struct NodeState {
  int rank = 0;
  std::string name;
  std::string ns;
  std::string mgmt_address;
  std::vector<std::string> addresses;  // NIC addresses, NIC order
};

struct State {
  std::string dir;  // not stored: where it was loaded from
  std::string prefix, id, topology_name, topology_source;
  std::string status;      // "creating", "up"
  std::string delay_mode;  // "netem" or "delayline"
  std::string mgmt_bridge, mgmt_gateway, mgmt_net;
  std::vector<NodeState> nodes;         // index == rank
  std::vector<std::string> routers;     // router namespaces, index == site
  std::vector<std::string> root_links;  // interfaces in the root namespace
  std::vector<DelayLineProcess> delay_lines;

  std::vector<std::string> namespaces() const;  // routers then nodes
};

std::string state_root();
std::string state_dir(const std::string& prefix);
bool state_exists(const std::string& dir);
State load_state(const std::string& dir);  // throws TestbedError
void save_state(const State& s);           // atomically (write + rename)
State state_from_layout(const Layout& l, const std::string& topology_source);

}  // namespace gridbcast::testbed
