// topology/hosts.cpp: --hosts text and host files become the site-config the
// loader reads; every mistake is an error at the item (column) or the host
// file's line and column.
#include "topology/hosts.hpp"

#include <gtest/gtest.h>

#include <functional>

#include <memory>

#include <map>

#include "topology/loader.hpp"

namespace gridbcast::topology {
namespace {

HostDefaults defaults() {
  HostDefaults d;
  d.resolve = [](const std::string& host) -> std::string {
    if (host.rfind("gone", 0) == 0) throw std::runtime_error("Name or service not known");
    // A made-up, deterministic address per host.
    unsigned h = 0;
    for (char c : host) h = h * 31 + static_cast<unsigned char>(c);
    return "10.9." + std::to_string(h % 250) + "." + std::to_string(h / 250 % 250 + 1);
  };
  return d;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(Hosts, ACommandLineListMakesSitesInOrderWithTheDefaults) {
  const auto hosts = parse_hosts("tokyo:a[01-03,07],a10,osaka:b[1-2]");
  ASSERT_EQ(hosts.size(), 7u);
  EXPECT_EQ(hosts[4].name, "a10");
  EXPECT_EQ(hosts[4].site, "tokyo") << "an item without SITE: joins the site before it";
  EXPECT_EQ(hosts[5].site, "osaka");
  const Grid g = load_grid_string(hosts_to_yaml(hosts, defaults()), "--hosts");
  ASSERT_EQ(g.sites.size(), 2u);
  EXPECT_EQ(g.sites[0].name, "tokyo");
  EXPECT_EQ(g.sites[0].ranks, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(g.nodes[3].name, "a07");
  EXPECT_EQ(g.nodes[3].host, "a07");
  ASSERT_EQ(g.nodes[3].nics.size(), 1u) << "a host name gives one address: one NIC";
  EXPECT_EQ(g.nodes[3].nics[0].address, defaults().resolve("a07"));
  EXPECT_DOUBLE_EQ(g.nodes[3].nics[0].bandwidth_bps, 10e9);
  ASSERT_EQ(g.wan.size(), 1u);
  EXPECT_DOUBLE_EQ(g.wan[0].latency_s, 0.010);
  EXPECT_DOUBLE_EQ(g.wan[0].bandwidth_bps, 10e9);
  EXPECT_EQ(g.wan[0].streams, 4);

  HostDefaults d = defaults();
  d.nic_bandwidth_bps = 25e9;
  d.streams = 8;
  d.wan_latency_s = 0.0425;
  d.congestion = "bbr";
  const Grid one = load_grid_string(hosts_to_yaml(parse_hosts("n[1-4]"), d), "--hosts");
  ASSERT_EQ(one.sites.size(), 1u);
  EXPECT_EQ(one.sites[0].name, "main");
  EXPECT_TRUE(one.wan.empty());
  EXPECT_EQ(one.nodes[0].nics.size(), 1u);
  EXPECT_DOUBLE_EQ(one.nodes[0].nics[0].bandwidth_bps, 25e9);
  EXPECT_EQ(one.congestion, "bbr");
}

TEST(Hosts, MistakesInTheListNameTheColumn) {
  EXPECT_NE(error_of([] { parse_hosts("a1,,a2"); }).find("--hosts:1:4: an empty host name"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts("a1,n[3-1]"); }).find("--hosts:1:4:"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts("bad site:a1"); }).find("site name \"bad site\""),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts("s:"); }).find("no hosts after \"s:\""), std::string::npos);
  EXPECT_NE(error_of([] {
              hosts_to_yaml(parse_hosts("a[1-2],a2"), defaults());
            }).find("--hosts:1:8: host \"a2\" is named twice"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hosts_to_yaml(parse_hosts("a1,gone1"), defaults());
            }).find("--hosts:1:4: host \"gone1\" has no address: Name or service not known"),
            std::string::npos);
}

TEST(Hosts, AHostFileSetsSitesNicsBandwidthsAndAddresses) {
  const std::string text =
      "# the grid\n"
      "a[1-2]   site=tokyo nics=3 address=10.1.[1-2].1,10.1.[3-4].1,10.1.[5-6].1 "
      "bandwidth=25Gbit   # fast nodes\n"
      "\n"
      "b1 site=osaka address=10.2.0.1,10.3.0.1 slots=1\n"
      "b[2-3] site=osaka address=10.2.0.[2-3],10.3.0.[2-3] bandwidth=1Gbit\n";
  const auto hosts = parse_hostfile(text, "hosts.txt");
  ASSERT_EQ(hosts.size(), 5u);
  const Grid g = load_grid_string(hosts_to_yaml(hosts, defaults()), "hosts.txt");
  ASSERT_EQ(g.sites.size(), 2u);
  EXPECT_EQ(g.nodes[0].nics.size(), 3u);
  EXPECT_DOUBLE_EQ(g.nodes[1].nics[2].bandwidth_bps, 25e9);
  EXPECT_EQ(g.nodes[1].nics[0].address, "10.1.2.1");
  EXPECT_EQ(g.nodes[1].nics[2].address, "10.1.6.1");
  ASSERT_EQ(g.nodes[2].nics.size(), 2u);
  EXPECT_EQ(g.nodes[2].nics[1].address, "10.3.0.1");
  EXPECT_DOUBLE_EQ(g.nodes[2].nics[0].bandwidth_bps, 10e9);
  // b[2-3] with address=10.2.0.[2-3],10.3.0.[2-3]: one item per NIC, each
  // with one address per host, as in YAML.
  EXPECT_EQ(g.nodes[3].nics[0].address, "10.2.0.2");
  EXPECT_EQ(g.nodes[3].nics[1].address, "10.3.0.2");
  EXPECT_EQ(g.nodes[4].nics[0].address, "10.2.0.3");
  EXPECT_EQ(g.nodes[4].nics[1].address, "10.3.0.3");
  EXPECT_DOUBLE_EQ(g.nodes[4].nics[1].bandwidth_bps, 1e9);
}

TEST(Hosts, MistakesInAHostFileNameLineAndColumn) {
  const auto err = [](const std::string& text) {
    return error_of([&] { parse_hostfile(text, "h.txt"); });
  };
  EXPECT_NE(err("a1\n  a2 speed=3\n").find("h.txt:2:6: unknown key \"speed\""), std::string::npos);
  EXPECT_NE(err("a1 slots=8\n").find("h.txt:1:4: slots: gridbcast runs one rank per node"),
            std::string::npos);
  EXPECT_NE(err("a1 nics=9\n").find("h.txt:1:4: nics: nics must be 1..8"), std::string::npos);
  EXPECT_NE(err("a1 nics=x\n").find("h.txt:1:4: nics:"), std::string::npos);
  EXPECT_NE(err("a1 bandwidth=10\n").find("h.txt:1:4: bandwidth:"), std::string::npos);
  EXPECT_NE(err("a1 nics=2 address=10.0.0.1\n").find("h.txt:1:11: 1 addresses (NICs) for nics=2"),
            std::string::npos);
  EXPECT_NE(err("a[1-2] address=10.0.0.1\n").find("h.txt:1:8: a NIC's addresses expand to 1 for 2"),
            std::string::npos);
  EXPECT_NE(err("a1 nics=2\n").find("h.txt:1:1: nics=2 needs address="), std::string::npos);
  EXPECT_NE(err("a1 novalue\n").find("h.txt:1:4: expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(err("n[2-1]\n").find("h.txt:1:1:"), std::string::npos);
  EXPECT_NE(err("# nothing\n\n").find("no hosts in the file"), std::string::npos);
  EXPECT_NE(error_of([] {
              hosts_to_yaml(parse_hostfile("a1\nx\na1\n", "h.txt"), defaults());
            }).find("h.txt:3:1: host \"a1\" is named twice"),
            std::string::npos);
}

// Inside a Slurm allocation: SLURM_JOB_NODELIST in its order, one site.
std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(SlurmAllocation, NodelistBecomesOneSiteInOrder) {
  auto a = slurm_allocation(env_of({{"SLURM_JOB_ID", "42"},
                                    {"SLURM_JOB_NODELIST", "node[01-03,07],gpu-a1"},
                                    {"SLURM_TASKS_PER_NODE", "1(x5)"}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->job_id, "42");
  EXPECT_EQ(a->tasks_per_node, 1);
  std::vector<std::string> names;
  for (const auto& h : a->hosts) {
    names.push_back(h.name);
    EXPECT_TRUE(h.site.empty());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu-a1"}));
  const Grid g = load_grid_string(hosts_to_yaml(a->hosts, defaults()), "SLURM_JOB_NODELIST");
  EXPECT_EQ(g.size(), 5);
  EXPECT_EQ(g.sites.size(), 1u);
}

TEST(SlurmAllocation, OutsideAnAllocationIsNothing) {
  EXPECT_FALSE(slurm_allocation(env_of({})));
  EXPECT_FALSE(slurm_allocation(env_of({{"SLURM_JOB_NODELIST", "n[1-2]"}})));
  EXPECT_FALSE(slurm_allocation(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", ""}})));
}

TEST(SlurmAllocation, TasksPerNodeIsOnlyANote) {
  auto a = slurm_allocation(env_of({{"SLURM_JOB_ID", "7"},
                                    {"SLURM_JOB_NODELIST", "n[1-3]"},
                                    {"SLURM_TASKS_PER_NODE", "2(x2),1"}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->hosts.size(), 3u);
  EXPECT_EQ(a->tasks_per_node, 2);
  EXPECT_EQ(max_tasks_per_node("1"), 1);
  EXPECT_EQ(max_tasks_per_node("4(x16)"), 4);
  EXPECT_EQ(max_tasks_per_node("1,3,2(x2)"), 3);
  for (const char* bad : {"", "x", "2(x3", "2(3)", "1,", "(x2)"})
    EXPECT_THROW(max_tasks_per_node(bad), std::invalid_argument) << bad;
}

TEST(SlurmAllocation, BadNodelistNamesTheVariable) {
  for (const char* bad : {"n[3-1]", "site:n1", "n[01-02"}) {
    try {
      slurm_allocation(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", bad}}));
      ADD_FAILURE() << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_JOB_NODELIST"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gridbcast::topology
