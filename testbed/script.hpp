// The testbed's build step as data: every ip and tc line, every sysctl and the
// delay-line processes `gridbcast testbed up` runs, in order, computed from the
// Layout without touching the system (no root, no side effects). The runner in
// testbed.cpp executes the steps; `testbed up --dry-run` prints them; the
// golden tests (tests/testbed/script_test.cpp) compare them with
// tests/testbed/data/script/. As the Plan is to the executor.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "testbed/layout.hpp"
#include "testbed/system.hpp"
#include "topology/grid.hpp"

namespace gridbcast::testbed {

// How WAN latency and loss are emulated: no WAN links, tc netem, or the
// userspace delay line (docs/TESTBED.md).
enum class Latency { kNone, kNetem, kDelayLine };
std::string_view latency_name(Latency l);  // "none", "netem", "delayline"

struct ScriptOptions {
  Latency latency = Latency::kDelayLine;  // as decided (see ChooseLatency)
  std::string exe = "gridbcast";          // the binary the delay lines run
  std::string state_dir;                  // where the delay lines' logs go
  bool offload = true;  // delay line: GSO packets on loss-free links (else 1500-byte packets)
};

// `ip [-n NS] -batch -` (tool "ip") or `tc [-n NS] -batch -` with these lines;
// NS "" is the root namespace. A failure stops the build and names the line.
struct Batch {
  std::string tool;
  std::string ns;
  std::vector<std::string> lines;
};

// /proc/sys writes inside namespace `ns`; a failure stops the build (settings
// marked optional are skipped where the file does not exist). NS "" is the root
// namespace, where the writes are best effort and failures are ignored.
struct Sysctls {
  std::string ns;
  std::vector<Sysctl> settings;
};

// Here the runner decides how latency is emulated (with --delay auto it
// probes netem inside `probe_ns`) and records it in the state. Every step
// before this one is the same whatever the decision, every step after it may
// differ: the runner builds the script again with the decision and goes on.
// `assumed` is what this script was built with.
struct ChooseLatency {
  std::string probe_ns;  // "" when there are no WAN links
  Latency assumed = Latency::kNone;
};

// The delay line of one router: `argv` started inside namespace `ns`, output
// appended to `log`; the runner records its PID in the state, so `down` stops it.
struct StartDelayLine {
  int site = 0;
  std::string site_name;
  std::string ns;
  std::vector<std::string> argv;
  std::string log;
};

struct Step {
  std::string what;  // names the step in errors and in the printed script
  std::variant<Batch, Sysctls, ChooseLatency, StartDelayLine> action;
};

// The whole build of a testbed, in the order it runs:
//   1. namespaces, their sysctls (forwarding on routers; no IPv6, no rp_filter)
//   2. the latency decision (ChooseLatency)
//   3. routers: lane bridges (forwarding multicast) and WAN veths
//   4. nodes: one veth per NIC; 5. the management network
//   6. routers: ports, addresses, routes, the delay lines' TUNs and rules
//   7. nodes: management address, per-lane source routing, multicast routes
//   8. shaping (HTB on both ends of every NIC and every WAN end)
//   9. the delay lines
std::vector<Step> build_script(const topology::Grid& grid, const Layout& l, const ScriptOptions& o);

// One line per command, each step headed by "# <what>": `ip -n NS LINE`,
// `tc -n NS LINE`, `sysctl -n NS PATH=VALUE`, `latency MODE`,
// `delayline -n NS ARGV... >> LOG`. What the golden files hold.
std::string format_script(const std::vector<Step>& script);

// Shaping, as `tc -batch` lines.
//
// Every shaper's burst: 1 ms at its rate, at least two full Ethernet frames.
// A real NIC never sends above its line rate; HTB needs some slack for its
// timer. The floor was 70,000 bytes once, which let a flow starting on an idle
// 50-100 Mbit NIC send its first 70 KB at the veth's speed: messages of a few
// tens of KiB then ran faster than the declared NICs allow (0.92 x the
// max-flow bound; docs/TESTBED.md, "What an idle NIC lets out at once").
// HTB sends a packet when its class has tokens and charges it afterwards, so
// one GSO packet (up to 64 KiB) still leaves at once; capping the NICs' GSO
// packets too cost so much CPU that testbed-8x8 missed its rates (16 MiB
// multilane at 1.68 x the bound instead of 1.14 x).
constexpr long long kMinShapingBurst = 2 * 1514;
long long shaping_burst_bytes(double rate_bps);
// A FIFO holding `seconds` at the rate (at least 128 KiB): a switch or router buffer.
std::string bfifo(double rate_bps, double seconds);

// Peers up to which a NIC gets one class per peer address. tc slows down with
// the classes in a namespace: a class per peer on 2 x 64 nodes took minutes.
inline constexpr size_t kFairPeers = 64;
// Classes TCP traffic is spread over by source port beyond that.
inline constexpr int kFairBuckets = 32;

// Egress of `dev` at `rate_bps`, shared fairly among flows: HTB at the rate,
// split into equal child classes that borrow round-robin (HTB's deficit round
// robin), one per peer address (`key` "dst" on a node's NIC, "src" on the
// switch port towards it) when there are at most kFairPeers, otherwise
// kFairBuckets chosen by bits 1-5 of the TCP source port (Linux gives bind()
// odd ports, so bit 0 carries nothing), plus a default class 1:2 for the rest.
// Each child holds 10 ms at the NIC's rate. Hosts share their NIC so (fq_codel,
// fq), and so do switches with fair queueing; this kernel has no fair-queueing
// qdisc, only HTB, bfifo and u32. With one FIFO instead, TCP flows through a
// NIC split it unevenly for seconds, which slows every pipeline that feeds two
// children through one NIC, or a ring whose node also receives the scatter, by
// up to half (docs/TESTBED.md).
std::vector<std::string> fair_htb(const std::string& dev, double rate_bps, std::string_view key,
                                  const std::vector<Ipv4>& peers);

// One NIC of node `n` shaped at `rate_bps` (fair_htb among the other nodes'
// addresses): the lines for the node's namespace (egress from the node) and
// for its site router's (the bridge port's egress toward the node). What `up`
// runs, and what `testbed shape` runs again with another rate.
struct NicShaping {
  std::vector<std::string> node, router;
};
NicShaping nic_shaping(const Layout& l, const NodePlan& n, const NicPlan& nic, double rate_bps);

}  // namespace gridbcast::testbed
