// A topology without YAML: hosts from the command line (`--hosts`), a host
// file (`--hostfile`) or a scheduler's node list, turned into the site-config
// YAML the loader reads (so ranks get the same text, and every check of
// docs/TOPOLOGY.md applies).
//
//   --hosts 'n[01-16]'                     one site "main" of 16 nodes
//   --hosts 'tokyo:a[01-08],osaka:b[01-08]' two sites; an item without SITE:
//                                          joins the site named before it
//   host file, one host (or hostlist) per line, '#' starts a comment:
//     a[01-08]  site=tokyo  bandwidth=25Gbit
//     b01       site=osaka  address=10.2.0.1,10.3.0.1   (two NICs: two lanes)
//     b02       site=osaka  slots=1
//
// A host without address= has one NIC, at the address its name resolves to;
// more NICs (lanes) need their addresses.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/grid.hpp"

namespace gridbcast::topology {

struct HostEntry {
  std::string name;
  std::string site;                    // empty: the default site ("main")
  int nics = 0;                        // 0: as many as addresses (1 without)
  double bandwidth_bps = 0;            // 0: HostDefaults::nic_bandwidth_bps
  std::vector<std::string> addresses;  // one per NIC; empty: the host's address, on every NIC
  Location where;
};

// "--hosts" text: comma-separated hostlists (commas inside [..] belong to the
// range), each optionally prefixed "SITE:". Throws ConfigError (source
// "--hosts", column of the bad item).
std::vector<HostEntry> parse_hosts(std::string_view text);

// A host file: "HOST [site=S] [nics=N] [bandwidth=B] [address=A,...]
// [slots=1]" per line. Unknown keys, slots other than 1 (one rank per node),
// nics outside 1..8, and addresses that do not match nics (one per NIC of
// each host; nics above 1 needs them) are errors at file:line:col.
std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& file);

struct HostDefaults {
  double nic_bandwidth_bps = 10e9;
  double wan_latency_s = 0.010;
  double wan_bandwidth_bps = 10e9;
  int streams = 4;
  std::string congestion;  // empty: the hosts' default
  std::string name = "hosts";
  // A host name to the IPv4 or IPv6 literal its lanes bind to; throws when it
  // has none. Called once per host without address=.
  std::function<std::string(const std::string& host)> resolve;
};

// The site-config YAML for `hosts`: sites in order of first appearance, ranks
// in the order given, the sites chained by WAN links with the defaults.
// Throws ConfigError at the entry for a host named twice or one that does not
// resolve.
std::string hosts_to_yaml(const std::vector<HostEntry>& hosts, const HostDefaults& defaults);

// Inside a Slurm allocation: its nodes as hosts, one site "main", in the order
// of SLURM_JOB_NODELIST (a hostlist such as "node[01-04,07],gpu1"). `getenv`
// is how the environment is read (std::getenv outside tests). nullopt outside
// an allocation (SLURM_JOB_ID or SLURM_JOB_NODELIST unset or empty); throws
// std::runtime_error naming SLURM_JOB_NODELIST when it does not parse.
// gridbcast runs one rank per node whatever SLURM_TASKS_PER_NODE says;
// `tasks_per_node` is the largest count there (1 when unset) so a caller can
// say it runs fewer ranks than the allocation has tasks.
struct SlurmAllocation {
  std::string job_id;
  std::vector<HostEntry> hosts;
  int tasks_per_node = 1;
};
std::optional<SlurmAllocation> slurm_allocation(
    const std::function<const char*(const char*)>& getenv);

// The largest count in a SLURM_TASKS_PER_NODE value: "2(x3),1" -> 2; throws
// std::invalid_argument on anything else.
int max_tasks_per_node(std::string_view text);

// Command-line overrides of a topology (`--nic-bandwidth`, `--wan-latency`,
// `--wan-bandwidth`, `--streams`, `--congestion`): each set one replaces the
// value on every NIC or WAN link and in `defaults`.
struct Overrides {
  std::optional<double> nic_bandwidth_bps;
  std::optional<double> wan_latency_s;
  std::optional<double> wan_bandwidth_bps;
  std::optional<int> streams;
  std::optional<std::string> congestion;
  std::optional<int> lanes;            // defaults.lanes: 1..kMaxLanes
  std::optional<bool> pace_lanes;      // defaults.pace_lanes
  std::optional<double> max_rate_bps;  // defaults.max_rate: what each node sends in all
  bool any() const {
    return nic_bandwidth_bps || wan_latency_s || wan_bandwidth_bps || streams || congestion ||
           lanes || pace_lanes || max_rate_bps;
  }
};

// The site-config `yaml` with `overrides` applied (comments are not kept).
// The text must have loaded already: this only rewrites values.
std::string apply_overrides(const std::string& yaml, const Overrides& overrides);

}  // namespace gridbcast::topology
