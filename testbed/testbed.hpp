// `gridbcast testbed up|down|status|run|exec`: builds the emulated grid of a
// topology out of network namespaces on this machine (docs/TESTBED.md), tears
// it down, reports on it, and runs commands in it.
#pragma once

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "job/launcher.hpp"
#include "testbed/layout.hpp"
#include "testbed/script.hpp"
#include "testbed/state.hpp"
#include "topology/grid.hpp"

namespace gridbcast::testbed {

enum class DelayMode { kAuto, kNetem, kDelayLine };
DelayMode parse_delay_mode(const std::string& text);  // auto, netem, delayline

struct UpOptions {
  std::string id;  // tells testbeds of the same topology apart
  DelayMode delay = DelayMode::kAuto;
  std::string topology_source;  // the file, recorded in the state
  std::string exe;              // gridbcast binary for the delay lines; "" = this program
  bool offload = true;  // delay line: GSO packets on loss-free links (else 1500-byte packets)
};

// True if tc netem works on this kernel (tried on a scratch veth in `ns`).
bool netem_available(const std::string& ns, std::string* why_not = nullptr);

// Builds the testbed; first removes leftovers of the same one (same prefix).
// On failure removes what it created and throws TestbedError.
State up(const topology::Grid& grid, const UpOptions& o, std::ostream& log);
// `up --dry-run`: the script `up` would run (format_script), without root and
// without touching the system. Two decisions `up` takes on the machine are
// assumed: the management block is the preferred one (`up` moves to the next
// free one if it is taken), and --delay auto is shown as the delay line (`up`
// uses netem where the kernel has it; --delay netem shows that variant).
std::string dry_run(const topology::Grid& grid, const UpOptions& o);
// Removes every namespace, interface and delay-line process of the testbed
// with this prefix. Returns false if there was nothing to remove.
bool down(const std::string& prefix, std::ostream& log);
// Prints the testbed's state; returns 0 when up and healthy, 1 when not up,
// 3 when parts are missing.
int status(const std::string& prefix, std::ostream& out);
// Prefixes of every testbed with a state directory on this machine.
std::vector<std::string> list_testbeds();

// Runs `command` with GRIDBCAST_BACKEND=netns and GRIDBCAST_TESTBED=<state
// dir> in its environment; brings the testbed up first if it is not (and then
// down afterwards unless `keep`). A first word "gridbcast" means this program.
// Returns the command's exit status.
int run(const topology::Grid& grid, const UpOptions& o, bool keep,
        const std::vector<std::string>& command, std::ostream& log);
// `testbed shape`: changes one node's links in a running testbed while jobs
// run (fault injection). `bandwidth_bps` > 0: every NIC of the node shaped at
// that rate both ways (as `up` shapes at the declared one; in-flight queues
// are dropped once); `down`: the switch ports of its NICs go down, so its
// packets vanish silently, as with a cut cable; `up`: they come back;
// `reset`: the declared rates and the ports up. Returns a line saying what
// was done. Throws TestbedError when the testbed is not up or the node unknown.
struct ShapeOptions {
  double bandwidth_bps = 0;
  bool down = false;
  bool up = false;
  bool reset = false;
};
std::string shape(const topology::Grid& grid, const std::string& id, const std::string& node,
                  const ShapeOptions& o);

// `testbed shape --wan A-B`: WAN link `link` (an index into grid.wan) of a
// running testbed cut (`down`: every packet across it dropped at both
// routers, silently, as with a cut fibre, while the management network and
// everything else stay up) or back. Needs nft. Returns a line saying what
// was done; throws TestbedError when the testbed is not up.
std::string shape_wan(const topology::Grid& grid, const std::string& id, int link, bool down);

// Replaces this process by `command` inside the namespace of node `node`.
int exec_in_node(const topology::Grid& grid, const std::string& id, const std::string& node,
                 const std::vector<std::string>& command);

// The launcher side of `gridbcast launch --backend netns`: ranks (`command`:
// `gridbcast rank`, or an MPI program) start through `ip netns exec <node
// namespace>`, the control listener goes on the management
// bridge. The testbed is found through GRIDBCAST_TESTBED (a state directory),
// else by the topology's name and GRIDBCAST_TESTBED_ID.
struct NetnsLaunch {
  std::unique_ptr<job::Backend> backend;
  std::string listen_address;
  std::string state_dir;
};
NetnsLaunch make_netns_launch(const topology::Grid& grid, std::vector<std::string> command);

}  // namespace gridbcast::testbed
