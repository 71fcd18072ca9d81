// The emulated grid as data: names, addresses, routes (no root needed), and the
// delay line's packet ring.
#include "testbed/layout.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>
#include <set>

#include "testbed/delay_line.hpp"
#include "testbed/state.hpp"
#include "testbed/testbed.hpp"
#include "topology/loader.hpp"

namespace gridbcast::testbed {
namespace {

const std::string kSrc = GRIDBCAST_SOURCE_DIR;

topology::Grid grid_of(const std::string& yaml) {
  return topology::load_grid_string(yaml, "test.yaml");
}

TEST(TestbedIpv4, ParsesAndPrints) {
  EXPECT_EQ(Ipv4::parse("10.201.1.4")->str(), "10.201.1.4");
  EXPECT_FALSE(Ipv4::parse("10.201.1"));
  EXPECT_FALSE(Ipv4::parse("10.201.1.256"));
  EXPECT_FALSE(Ipv4::parse("fd00::1"));
  EXPECT_FALSE(Ipv4::parse("10.1.1.1 "));
  const auto n = *Ipv4Net::parse("10.254.7.9/22");
  EXPECT_EQ(n.str(), "10.254.4.0/22");
  EXPECT_EQ(n.last_host().str(), "10.254.7.254");
  EXPECT_TRUE(n.contains(*Ipv4::parse("10.254.5.1")));
  EXPECT_FALSE(n.contains(*Ipv4::parse("10.254.8.1")));
  EXPECT_TRUE(n.overlaps(*Ipv4Net::parse("10.254.0.0/16")));
  EXPECT_FALSE(n.overlaps(*Ipv4Net::parse("10.254.8.0/24")));
}

TEST(TestbedPrefix, IsStablePerTopologyAndIdAndShort) {
  const auto p = testbed_prefix("testbed-2x4", "");
  EXPECT_EQ(p, testbed_prefix("testbed-2x4", ""));
  EXPECT_NE(p, testbed_prefix("testbed-2x4", "run2"));
  EXPECT_NE(p, testbed_prefix("other", ""));
  EXPECT_EQ(p.size(), 8u);
  EXPECT_EQ(p.rfind("gb", 0), 0u);
}

TEST(TestbedLayout, TwoSitesByFour) {
  const auto grid = topology::load_grid_file(kSrc + "/site-configs/testbed-2x4.yaml");
  const auto l = plan_layout(grid, "x", 3);
  ASSERT_EQ(l.nodes.size(), 8u);
  ASSERT_EQ(l.routers.size(), 2u);
  EXPECT_EQ(l.mgmt_net.str(), "10.254.12.0/22");
  EXPECT_EQ(l.mgmt_gateway.str(), "10.254.15.254");
  EXPECT_EQ(l.nodes[0].mgmt_address.str(), "10.254.12.1");
  EXPECT_EQ(l.nodes[7].mgmt_address.str(), "10.254.12.8");
  const auto& a1 = l.nodes[0];
  EXPECT_EQ(a1.name, "a1");
  EXPECT_EQ(a1.ns, l.prefix + "-n-a1");
  ASSERT_EQ(a1.nics.size(), 2u);
  EXPECT_EQ(a1.nics[0].device, "eth0");
  EXPECT_EQ(a1.nics[1].device, "eth1");
  EXPECT_EQ(a1.nics[0].subnet.str(), "10.201.1.0/24");
  EXPECT_EQ(a1.nics[0].gateway.str(), "10.201.1.254");
  EXPECT_EQ(a1.nics[1].gateway.str(), "10.201.2.254");
  EXPECT_DOUBLE_EQ(a1.nics[0].bandwidth_bps, 100e6);
  const auto& ra = l.routers[0];
  EXPECT_EQ(ra.ns, l.prefix + "-r-a");
  ASSERT_EQ(ra.lanes.size(), 2u);
  ASSERT_EQ(ra.wan.size(), 1u);
  EXPECT_EQ(ra.wan[0].address.str(), "169.254.0.1");
  EXPECT_EQ(ra.wan[0].peer_address.str(), "169.254.0.2");
  EXPECT_DOUBLE_EQ(ra.wan[0].latency_s, 0.010);
  ASSERT_EQ(ra.routes.size(), 2u);  // b's two lane subnets
  EXPECT_EQ(ra.routes[0].destination.str(), "10.202.1.0/24");
  EXPECT_EQ(ra.routes[1].destination.str(), "10.202.2.0/24");
  // Every interface name in the root namespace fits Linux's 15 characters.
  EXPECT_LE(l.mgmt_bridge.size(), kMaxInterfaceName);
  for (const auto& n : l.nodes) {
    EXPECT_LE(n.mgmt_peer.size(), kMaxInterfaceName);
    for (const auto& nic : n.nics) EXPECT_LE(nic.port.size(), kMaxInterfaceName);
  }
}

TEST(TestbedLayout, MultiHopRoutesFollowTheWanPath) {
  const auto grid = topology::load_grid_file(kSrc + "/site-configs/testbed-3-sites-hetero.yaml");
  const auto l = plan_layout(grid, "", 0);
  const auto& alpha = l.routers[0];
  const auto& beta = l.routers[1];
  const auto& gamma = l.routers[2];
  ASSERT_EQ(alpha.wan.size(), 1u);
  ASSERT_EQ(beta.wan.size(), 2u);
  // alpha reaches beta's one subnet and gamma's two through its only link.
  ASSERT_EQ(alpha.routes.size(), 3u);
  for (const auto& r : alpha.routes) EXPECT_EQ(alpha.wan[static_cast<size_t>(r.wan)].link, 0);
  // gamma reaches alpha through link 1 (to beta).
  for (const auto& r : gamma.routes) EXPECT_EQ(gamma.wan[static_cast<size_t>(r.wan)].link, 1);
  // beta: alpha through link 0, gamma through link 1.
  for (const auto& r : beta.routes)
    EXPECT_EQ(beta.wan[static_cast<size_t>(r.wan)].link, r.site == 0 ? 0 : 1);
  // One-NIC beta nodes: one lane bridge; gamma's one-NIC nodes share lane 0.
  EXPECT_EQ(beta.lanes.size(), 1u);
  EXPECT_EQ(gamma.lanes.size(), 2u);
  EXPECT_EQ(l.nodes[12].nics.size(), 1u);
  EXPECT_EQ(l.nodes[12].nics[0].subnet.str(), "10.233.1.0/24");
  EXPECT_DOUBLE_EQ(gamma.wan[0].loss, 0.0001);
}

TEST(TestbedLayout, WideAddressRangesGetAShorterPrefixAndTheGatewayAvoidsNodes) {
  const auto grid = grid_of(R"(
defaults: {nic_bandwidth: 1 Gbit}
sites:
  - name: a
    nodes:
      - {name: a1, nics: [{address: 10.5.1.254}]}
      - {name: a2, nics: [{address: 10.5.2.7}]}
)");
  const auto l = plan_layout(grid, "", 0);
  EXPECT_EQ(l.nodes[0].nics[0].subnet.str(), "10.5.0.0/22");
  EXPECT_EQ(l.nodes[0].nics[0].gateway.str(), "10.5.3.254");
  const auto grid2 = grid_of(R"(
defaults: {nic_bandwidth: 1 Gbit}
sites:
  - name: a
    nodes:
      - {name: a1, nics: [{address: 10.5.1.254}]}
)");
  EXPECT_EQ(plan_layout(grid2, "", 0).nodes[0].nics[0].gateway.str(), "10.5.1.253");
}

void expect_error(const std::string& yaml, const std::string& needle) {
  try {
    plan_layout(grid_of(yaml), "", 0);
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const TestbedError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The fair NIC shaping: a class per peer, matched on the given address field;
// past kFairPeers, hashed buckets on the source port.
TEST(TestbedShaping, AClassPerPeerOrHashedBucketsBeyondTheLimit) {
  auto count = [](const std::vector<std::string>& lines, const std::string& what) {
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  const std::vector<Ipv4> three = {*Ipv4::parse("10.1.1.2"), *Ipv4::parse("10.1.1.3"),
                                   *Ipv4::parse("10.2.1.1")};
  const auto small = fair_htb("eth0", 100e6, "dst", three);
  EXPECT_EQ(small.front(), "qdisc add dev eth0 root handle 1: htb default 2");
  EXPECT_EQ(count(small, "class add dev eth0 parent 1:1 "), 4);  // default + 3 peers
  EXPECT_EQ(count(small, " bfifo limit "), 4);
  EXPECT_EQ(count(small, "match ip dst 10.2.1.1/32 flowid 1:102"), 1);
  EXPECT_EQ(count(small, "hashkey"), 0);
  // Children borrow up to the NIC's rate and guarantee an equal share of it.
  EXPECT_EQ(count(small, "htb rate 25000000bit ceil 100000000bit"), 4);
  // Bursts of 1 ms at the rate, not more: 12,500 bytes at 100 Mbit/s.
  EXPECT_EQ(count(small, " burst 12500 cburst 12500 "), 5);
  const auto by_source = fair_htb("n0l0", 100e6, "src", three);
  EXPECT_EQ(count(by_source, "match ip src 10.1.1.2/32 flowid 1:100"), 1);

  std::vector<Ipv4> many;
  for (std::uint32_t i = 0; i <= kFairPeers; ++i) many.push_back(Ipv4{0x0a000001u + i});
  const auto large = fair_htb("eth1", 1e9, "dst", many);
  EXPECT_EQ(count(large, "match ip dst"), 0);
  EXPECT_EQ(count(large, "class add dev eth1 parent 1:1 "), kFairBuckets + 1);
  EXPECT_EQ(count(large, "hashkey mask 0x003e0000 at 20 link 2:"), 1);
  EXPECT_EQ(count(large, "ht 2:1f: match u32 0 0 flowid 1:11f"), 1);
}

// What an idle NIC may let out at once: 1 ms at its rate, at least two frames.
TEST(TestbedShaping, BurstsHoldAboutAMillisecondOfTheRate) {
  EXPECT_EQ(shaping_burst_bytes(100e6), 12500);
  EXPECT_EQ(shaping_burst_bytes(50e6), 6250);
  EXPECT_EQ(shaping_burst_bytes(10e6), kMinShapingBurst);
  EXPECT_EQ(shaping_burst_bytes(1e9), 125000);
}

TEST(TestbedLayout, RejectsWhatCannotBeEmulated) {
  const std::string head = "defaults: {nic_bandwidth: 1 Gbit}\nsites:\n";
  expect_error(head + "  - {name: a, nodes: [{name: a1, nics: [{address: 127.0.1.1}]}]}\n",
               "loopback");
  expect_error(head + "  - {name: a, nodes: [{name: a1, nics: [{address: 'fd00::1'}]}]}\n", "IPv4");
  expect_error(head + "  - {name: a, nodes: [{name: a1, nics: [{address: 10.254.1.1}]}]}\n",
               "management");
  expect_error(head + "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.0}]}]}\n",
               "network or broadcast");
  expect_error(
      head +
          "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1}, {address: 10.1.1.2}]}]}\n",
      "overlap");
  expect_error(
      head + "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1, device: mgmt}]}]}\n",
      "reserved");
  expect_error(head +
                   "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1, device: "
                   "averyveryverylongname}]}]}\n",
               "15 characters");
  expect_error(head +
                   "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1}, {address: "
                   "10.2.1.1, device: eth0}]}]}\n",
               "twice");
  // The embedded default lives on loopback: the error says so and points at a testbed config.
  try {
    plan_layout(topology::default_grid(), "", 0);
    ADD_FAILURE() << "the loopback default was accepted";
  } catch (const TestbedError& e) {
    EXPECT_NE(std::string(e.what()).find("testbed-2x4.yaml"), std::string::npos) << e.what();
  }
}

// Device names go into `ip -batch` and `tc -batch` input run as root, where
// '\r', '#', quotes, a trailing '\\' and spaces mean something: only a strict
// character set passes, whatever the YAML can carry.
TEST(TestbedLayout, DeviceNamesOutsideAStrictCharacterSetAreRefused) {
  const std::string head = "defaults: {nic_bandwidth: 1 Gbit}\nsites:\n";
  for (const std::string device : {"\"e0\\r\"", "\"e0#x\"", "\"e0\\\"x\"", "\"e0'x\"", "\"e0\\\\\"",
                                   "\"-e0\"", "\"e0 x\"", "\"e0\\tx\"", "\"e0;x\""}) {
    const std::string yaml = head +
                             "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1, "
                             "device: " +
                             device + "}]}]}\n";
    try {
      plan_layout(grid_of(yaml), "", 0);
      ADD_FAILURE() << "device " << device << " was accepted";
    } catch (const TestbedError& e) {
      EXPECT_NE(std::string(e.what()).find("NIC device"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      // The loader may refuse it first; that is fine too.
      SUCCEED() << e.what();
    }
  }
  EXPECT_NO_THROW(plan_layout(
      grid_of(head + "  - {name: a, nodes: [{name: a1, nics: [{address: 10.1.1.1, device: "
                     "en_p1.2-a}]}]}\n"),
      "", 0));
}

TEST(TestbedState, RoundTripsThroughYaml) {
  const auto grid = topology::load_grid_file(kSrc + "/site-configs/testbed-2x4.yaml");
  const auto l = plan_layout(grid, "rt", 5);
  State s = state_from_layout(l, "/x/testbed-2x4.yaml");
  char tmpl[] = "/tmp/gridbcast-state-XXXXXX";
  ASSERT_TRUE(::mkdtemp(tmpl));
  s.dir = tmpl;
  s.delay_mode = "delayline";
  s.delay_lines.push_back({1, 1234, 5678, "/x/log"});
  save_state(s);
  const State r = load_state(s.dir);
  EXPECT_EQ(r.prefix, s.prefix);
  EXPECT_EQ(r.id, "rt");
  EXPECT_EQ(r.mgmt_gateway, "10.254.23.254");
  ASSERT_EQ(r.nodes.size(), 8u);
  EXPECT_EQ(r.nodes[5].name, "b2");
  EXPECT_EQ(r.nodes[5].addresses, (std::vector<std::string>{"10.202.1.2", "10.202.2.2"}));
  EXPECT_EQ(r.namespaces().size(), 10u);
  ASSERT_EQ(r.delay_lines.size(), 1u);
  EXPECT_EQ(r.delay_lines[0].pid, 1234);
  EXPECT_EQ(r.delay_lines[0].start_time, 5678u);
  EXPECT_EQ(r.root_links.size(), 9u);  // the management bridge and one veth per node
  std::filesystem::remove_all(s.dir);
}

TEST(DelayLineConfig, ParsesAndFormats) {
  const auto c = parse_delay_link("dev=dly0,delay=10ms,loss=0.1 %,offload=on,buffer=16MiB");
  EXPECT_EQ(c.tun, "dly0");
  EXPECT_DOUBLE_EQ(c.delay_s, 0.010);
  EXPECT_DOUBLE_EQ(c.loss, 0.001);
  EXPECT_TRUE(c.offload);
  EXPECT_EQ(c.buffer_bytes, 16u << 20);
  const auto back = parse_delay_link(format_delay_link(c));
  EXPECT_EQ(back.tun, c.tun);
  EXPECT_DOUBLE_EQ(back.delay_s, c.delay_s);
  EXPECT_DOUBLE_EQ(back.loss, c.loss);
  EXPECT_EQ(back.offload, c.offload);
  EXPECT_EQ(back.buffer_bytes, c.buffer_bytes);
  EXPECT_THROW(parse_delay_link("delay=10ms"), std::invalid_argument);
  EXPECT_THROW(parse_delay_link("dev=x,colour=blue"), std::invalid_argument);
  EXPECT_THROW(parse_delay_link("dev=x,offload=maybe"), std::invalid_argument);
}

TEST(DelayLineRing, KeepsPacketsInOrderAcrossWrapsAndRefusesWhenFull) {
  constexpr std::size_t kMax = 1000;
  PacketRing ring(4000, 64, kMax);
  std::mt19937 rng(7);
  std::deque<std::vector<std::byte>> model;
  std::int64_t due = 0;
  std::size_t refused = 0;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 2) {
      std::byte* slot = ring.reserve();
      if (!slot) {
        ++refused;
        ASSERT_FALSE(model.empty());
        continue;
      }
      const std::size_t len = 1 + rng() % kMax;
      std::vector<std::byte> p(len);
      for (auto& b : p) b = static_cast<std::byte>(rng());
      std::memcpy(slot, p.data(), len);
      ring.commit(len, ++due);
      model.push_back(std::move(p));
    } else if (!ring.empty()) {
      const auto f = ring.front();
      ASSERT_EQ(f.len, model.front().size());
      ASSERT_EQ(std::memcmp(f.data, model.front().data(), f.len), 0) << "step " << step;
      ring.pop();
      model.pop_front();
    }
    ASSERT_EQ(ring.size(), model.size());
    std::size_t bytes = 0;
    for (const auto& p : model) bytes += p.size();
    ASSERT_EQ(ring.bytes_used(), bytes);
  }
  EXPECT_GT(refused, 0u);  // the small ring filled up at times
  // Due times come out in order.
  std::int64_t last = 0;
  while (!ring.empty()) {
    EXPECT_GT(ring.front().due_ns, last);
    last = ring.front().due_ns;
    ring.pop();
  }
}

TEST(DelayLineRing, DescriptorLimitAlsoRefuses) {
  PacketRing ring(1 << 20, 3, 100);
  for (int i = 0; i < 3; ++i) {
    ASSERT_NE(ring.reserve(), nullptr);
    ring.commit(10, i);
  }
  EXPECT_EQ(ring.reserve(), nullptr);
  ring.pop();
  EXPECT_NE(ring.reserve(), nullptr);
}

}  // namespace
}  // namespace gridbcast::testbed
