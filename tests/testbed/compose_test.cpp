// The docker testbed without docker: the generated compose file is valid YAML
// with the expected services, networks, addresses and tc commands; the shipped
// compose file is what the generator makes; the Dockerfile installs only
// packages Debian 12 has (checked with apt-cache).
#include "testbed/compose.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "testbed/layout.hpp"
#include "testbed/system.hpp"
#include "topology/loader.hpp"

namespace gridbcast::testbed {
namespace {

using namespace std::chrono_literals;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;
const std::string kBin = GRIDBCAST_BINARY;

std::string compose_of(const std::string& config) {
  ComposeOptions o;
  o.topology_mount = "../site-configs/" + config;
  o.generated_by = "gridbcast testbed compose site-configs/" + config;
  return compose_file(topology::load_grid_file(kSrc + "/site-configs/" + config), o);
}

std::string script_of(const YAML::Node& service) {
  const auto cmd = service["command"];
  EXPECT_TRUE(cmd.IsSequence());
  EXPECT_EQ(cmd[0].as<std::string>(), "sh");
  return cmd[2].as<std::string>();
}

TEST(TestbedCompose, DefaultTopologyHasEveryServiceNetworkAndAddress) {
  const YAML::Node y = YAML::Load(compose_of("docker-default.yaml"));
  const auto services = y["services"];
  ASSERT_TRUE(services.IsMap());
  EXPECT_EQ(services.size(), 1u + 2u + 8u);  // launcher, two routers, eight nodes
  for (const char* s :
       {"launcher", "router-tokyo", "router-osaka", "node-a1", "node-a4", "node-b1", "node-b4"})
    EXPECT_TRUE(services[s]) << s;
  const auto networks = y["networks"];
  for (const char* n :
       {"control", "tokyo-lane0", "tokyo-lane1", "osaka-lane0", "osaka-lane1", "wan0-tokyo-osaka"})
    EXPECT_TRUE(networks[n]) << n;
  EXPECT_EQ(networks["tokyo-lane0"]["ipam"]["config"][0]["subnet"].as<std::string>(),
            "10.101.1.0/24");
  EXPECT_EQ(networks["tokyo-lane0"]["ipam"]["config"][0]["gateway"].as<std::string>(),
            "10.101.1.253");
  EXPECT_EQ(networks["wan0-tokyo-osaka"]["ipam"]["config"][0]["subnet"].as<std::string>(),
            "10.253.0.0/29");

  // The launcher: the root process of the job, external backend.
  const auto launcher = services["launcher"];
  std::vector<std::string> cmd;
  for (const auto& a : launcher["command"]) cmd.push_back(a.as<std::string>());
  ASSERT_GE(cmd.size(), 5u);
  EXPECT_EQ(cmd[0], "gridbcast");
  EXPECT_EQ(cmd[1], "launch");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "external"), cmd.end());
  EXPECT_EQ(launcher["networks"]["control"]["ipv4_address"].as<std::string>(),
            kComposeLauncherAddress);
  EXPECT_EQ(launcher["env_file"][0].as<std::string>(), "gridbcast.env");

  // Node b2 is rank 5, on both osaka lanes, runs `gridbcast rank`, gets the
  // secret only from the env file.
  const auto b2 = services["node-b2"];
  EXPECT_EQ(b2["environment"]["GRIDBCAST_RANK"].as<std::string>(), "5");
  EXPECT_EQ(b2["environment"]["GRIDBCAST_LAUNCHER"].as<std::string>(), "10.254.0.2:7000");
  EXPECT_FALSE(b2["environment"]["GRIDBCAST_SECRET"]);
  EXPECT_EQ(b2["env_file"][0].as<std::string>(), "gridbcast.env");
  EXPECT_EQ(b2["networks"]["osaka-lane0"]["ipv4_address"].as<std::string>(), "10.102.1.12");
  EXPECT_EQ(b2["networks"]["osaka-lane1"]["ipv4_address"].as<std::string>(), "10.102.2.12");
  const std::string node_script = script_of(b2);
  EXPECT_NE(node_script.find("exec gridbcast rank"), std::string::npos) << node_script;
  EXPECT_NE(node_script.find("ip route replace 10.101.1.0/24 via 10.102.1.254"), std::string::npos)
      << node_script;
  EXPECT_NE(node_script.find("ip route replace 10.101.2.0/24 via 10.102.2.254"), std::string::npos)
      << node_script;
  EXPECT_NE(node_script.find("tbf rate 10000000000bit"), std::string::npos) << node_script;

  // Routers: NET_ADMIN, gateway addresses, netem on the WAN link, routes.
  const auto tokyo = services["router-tokyo"];
  EXPECT_EQ(tokyo["cap_add"][0].as<std::string>(), "NET_ADMIN");
  EXPECT_EQ(tokyo["networks"]["tokyo-lane0"]["ipv4_address"].as<std::string>(), "10.101.1.254");
  EXPECT_EQ(tokyo["networks"]["wan0-tokyo-osaka"]["ipv4_address"].as<std::string>(), "10.253.0.1");
  const std::string router_script = script_of(tokyo);
  EXPECT_NE(
      router_script.find(
          "tc qdisc replace dev \"$$(dev 10.253.0.1)\" root netem delay 0us rate 10000000000bit"),
      std::string::npos)
      << router_script;
  EXPECT_NE(router_script.find("ip route replace 10.102.1.0/24 via 10.253.0.2"), std::string::npos)
      << router_script;
  // netem first; where it fails, tbf and the delay line (the same rules as the
  // namespace testbed's routers), with the TUN device passed in.
  EXPECT_EQ(tokyo["devices"][0].as<std::string>(), "/dev/net/tun:/dev/net/tun");
  for (const char* want :
       {"if tc qdisc replace dev \"$$(dev 10.253.0.1)\" root netem", "2>/run/gridbcast-netem.err",
        "tc netem does not work here", "root tbf rate 10000000000bit", "ip tuntap add dev dly0",
        "ip route replace 10.102.1.0/24 dev dly0 table 200",
        "ip rule add iif \"$$(dev 10.101.1.254)\" lookup 200 pref 1000",
        "ip rule add iif \"$$(dev 10.101.2.254)\" lookup 200 pref 1001",
        "ip rule add iif \"$$(dev 10.253.0.1)\" lookup 200 pref 2000",
        "gridbcast testbed delayline --link dev=dly0,delay=0ns,loss=0,offload=on",
        "--ready-fd 3 3>/run/gridbcast-delayline &", "wait $$dl"})
    EXPECT_NE(router_script.find(want), std::string::npos) << want << "\n" << router_script;

  // What podman lacks is not needed: no top-level name (docker-compose 1.29
  // refuses it), no healthcheck to wait for (podman without systemd runs
  // none): nodes start after their router and wait for the other sites.
  EXPECT_FALSE(y["name"]);
  for (const auto& kv : services) {
    const std::string name = kv.first.as<std::string>();
    EXPECT_FALSE(kv.second["healthcheck"]) << name;
    // Limits no higher than a host's usual hard limits, for every service.
    EXPECT_EQ(kv.second["ulimits"]["nofile"]["soft"].as<long>(), 8192) << name;
    EXPECT_EQ(kv.second["ulimits"]["nofile"]["hard"].as<long>(), 8192) << name;
    EXPECT_EQ(kv.second["ulimits"]["nproc"]["hard"].as<long>(), 4096) << name;
  }
  const auto depends = services["node-a1"]["depends_on"];
  ASSERT_TRUE(depends.IsSequence());
  EXPECT_EQ(depends[0].as<std::string>(), "router-tokyo");
  EXPECT_EQ(depends[1].as<std::string>(), "launcher");
  const std::string a1 = script_of(services["node-a1"]);
  EXPECT_NE(a1.find("end=$$(($$(date +%s) + " + std::to_string(kComposeRouteWait) +
                    "))\nsite='osaka'; gw=10.102.1.254\nuntil ping -c 1 -W 1 -I 10.101.1.1 "
                    "\"$$gw\""),
            std::string::npos)
      << a1;
  EXPECT_NE(a1.find("after " + std::to_string(kComposeRouteWait) + " s"), std::string::npos) << a1;
  EXPECT_LT(a1.find("until ping"), a1.find("exec gridbcast rank")) << a1;
  // Docker's networks are plain bridges (docker masquerades nothing bridged).
  for (const auto& kv : networks) EXPECT_FALSE(kv.second["internal"]) << kv.first.as<std::string>();
}

// For podman every network is internal: netavark masquerades bridged traffic
// from a lane subnet to another site's address where the host has
// bridge-nf-call-iptables=1, which breaks every path between sites.
TEST(TestbedCompose, PodmanNetworksAreInternalAndTheLimitsAreTheGivenOnes) {
  ComposeOptions o;
  o.engine = ComposeEngine::kPodman;
  o.nofile = 1000;
  o.nproc = 300;
  const YAML::Node y = YAML::Load(
      compose_file(topology::load_grid_file(kSrc + "/site-configs/testbed-2x2.yaml"), o));
  ASSERT_EQ(y["networks"].size(), 6u);  // control, 2 x 2 lanes, 1 WAN
  for (const auto& kv : y["networks"])
    EXPECT_TRUE(kv.second["internal"].as<bool>()) << kv.first.as<std::string>();
  for (const auto& kv : y["services"]) {
    EXPECT_EQ(kv.second["ulimits"]["nofile"]["hard"].as<long>(), 1000);
    EXPECT_EQ(kv.second["ulimits"]["nproc"]["soft"].as<long>(), 300);
  }
}

TEST(TestbedCompose, ThreeSitesGetLossAndMultiHopRoutes) {
  const YAML::Node y = YAML::Load(compose_of("testbed-3-sites-hetero.yaml"));
  const auto services = y["services"];
  EXPECT_EQ(services.size(), 1u + 3u + 15u);
  const std::string beta = script_of(services["router-beta"]);
  EXPECT_NE(beta.find("netem delay 5000us rate 1000000000bit limit"), std::string::npos) << beta;
  EXPECT_NE(beta.find("netem delay 20000us rate 2000000000bit loss 0.01% limit"), std::string::npos)
      << beta;
  // alpha reaches gamma's subnets through beta's end of link 0.
  const std::string alpha = script_of(services["router-alpha"]);
  EXPECT_NE(alpha.find("ip route replace 10.233.2.0/24 via 10.253.0.2"), std::string::npos)
      << alpha;
  // Without netem, what comes into beta from one WAN link and leaves over the
  // other goes through the second link's delay line too (multi-hop).
  EXPECT_NE(beta.find("ip rule add iif \"$$(dev 10.253.0.2)\" lookup 200 pref 2000"),
            std::string::npos)
      << beta;
  EXPECT_NE(beta.find("ip rule add iif \"$$(dev 10.253.0.9)\" lookup 200 pref 2001"),
            std::string::npos)
      << beta;
  EXPECT_NE(beta.find("--link dev=dly1,delay=20000000ns,loss=0.0001,offload=off"),
            std::string::npos)
      << beta;
  // alpha's packets for gamma enter the delay line of its only link.
  EXPECT_NE(alpha.find("ip route replace 10.233.2.0/24 dev dly0 table 200"), std::string::npos)
      << alpha;
  // Nodes wait for both other sites.
  const std::string gamma1 = script_of(services["node-gamma1"]);
  EXPECT_NE(gamma1.find("site='alpha'"), std::string::npos) << gamma1;
  EXPECT_NE(gamma1.find("site='beta'"), std::string::npos) << gamma1;
  // A one-NIC beta node routes other sites' lane-1 subnets through its lane 0.
  const std::string beta1 = script_of(services["node-beta1"]);
  EXPECT_NE(beta1.find("ip route replace 10.231.2.0/24 via 10.232.1.254"), std::string::npos)
      << beta1;
}

TEST(TestbedCompose, LoopbackTopologiesAreRejectedWithAHint) {
  ComposeOptions o;
  try {
    compose_file(topology::default_grid(), o);
    ADD_FAILURE() << "loopback default accepted";
  } catch (const TestbedError& e) {
    EXPECT_NE(std::string(e.what()).find("loopback"), std::string::npos) << e.what();
  }
}

TEST(TestbedCompose, ShippedComposeFileIsWhatTheGeneratorWrites) {
  // docker/compose.default.yaml mounts the topology relative to docker/.
  const std::string fresh = compose_of("docker-default.yaml");
  const std::string shipped = testing::slurp(kSrc + "/docker/compose.default.yaml");
  // Only the "Generated by" comment may differ (how the path was spelled).
  auto drop_generated_line = [](const std::string& s) {
    return std::regex_replace(s, std::regex("# Generated by [^\n]*\n"), "");
  };
  EXPECT_EQ(drop_generated_line(fresh), drop_generated_line(shipped))
      << "regenerate: gridbcast testbed compose site-configs/docker-default.yaml -o "
         "docker/compose.default.yaml";
  EXPECT_NO_THROW(YAML::Load(shipped));
}

// Scalars that would read as numbers or booleans stay strings where compose
// wants one.
TEST(TestbedCompose, StringsThatLookLikeNumbersStayStrings) {
  const YAML::Node now = YAML::Load(compose_of("docker-default.yaml"));
  EXPECT_EQ(now["services"]["node-a1"]["environment"]["GRIDBCAST_RANK"].Tag(), "!");
  EXPECT_EQ(now["services"]["router-tokyo"]["sysctls"]["net.ipv4.ip_forward"].Tag(), "!");
}

// Values that YAML would misread unquoted (": ", " #", quotes, a leading "-",
// "yes", a number) come back exactly as given.
TEST(TestbedCompose, ValuesThatNeedQuotingReadBackExactly) {
  ComposeOptions o;
  o.image = "registry:5000/grid: bcast #1";
  o.env_file = "my \"env\": 'x'.env";
  o.topology_mount = "- dir with #/yes";
  o.generated_by = "gridbcast testbed compose\nname: injected";
  o.launch_args = {"--size", "64 MiB", "yes", "0x10", "it's: # not a comment", "{a: b}"};
  const std::string text =
      compose_file(topology::load_grid_file(kSrc + "/site-configs/docker-default.yaml"), o);
  const YAML::Node y = YAML::Load(text);
  EXPECT_FALSE(y["injected"]) << "the header is comments only: " << text;
  const auto launcher = y["services"]["launcher"];
  EXPECT_EQ(launcher["image"].as<std::string>(), o.image);
  EXPECT_EQ(launcher["env_file"][0].as<std::string>(), o.env_file);
  EXPECT_EQ(launcher["volumes"][0].as<std::string>(),
            o.topology_mount + ":" + kComposeTopologyPath + ":ro");
  const auto cmd = launcher["command"];
  ASSERT_EQ(cmd.size(), 9 + o.launch_args.size());
  for (size_t i = 0; i < o.launch_args.size(); ++i) {
    EXPECT_EQ(cmd[9 + i].as<std::string>(), o.launch_args[i]) << i;
    EXPECT_TRUE(cmd[9 + i].IsScalar()) << i;
  }
  EXPECT_EQ(y["services"]["node-b4"]["image"].as<std::string>(), o.image);
  EXPECT_EQ(y["services"]["node-b4"]["hostname"].as<std::string>(), "b4");
}

// Names come from a topology someone else may have written: in the services'
// shell scripts a site name is data, never code. Names with quotes,
// command substitutions, backquotes, compose's own "$" and a line break get
// into the scripts only as single-quoted words or comments; run through sh
// (after compose's "$$" -> "$"), each reads back exactly and runs nothing.
TEST(TestbedCompose, HostileNamesInTheTopologyRunNothingInTheScripts) {
  const testing::TempDir temp;  // removed with everything in it, also on failure
  const std::string dir = temp.path().string();
  // Line breaks that PyYAML and go-yaml (what compose parses with) see and
  // yaml-cpp does not: NEL (U+0085) and U+2028, here trying to make a
  // service privileged.
  const std::string site_a =
      "a'\n$(touch PWNED-A) `touch PWNED-B` ${HOME}\"\xC2\x85    privileged: true\xE2\x80\xA8#";
  std::string site_a_read = site_a;  // what the scripts may say of it: printable ASCII
  for (char& c : site_a_read)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  const std::string node_a = "n1";  // node names are checked by the loader: [A-Za-z0-9._-]
  {
    std::ofstream t(dir + "/t.yaml");
    YAML::Emitter e;
    e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted
      << "hostile\xC2\x85x-evil: {privileged: true}\xE2\x80\xA8#";
    e << YAML::Key << "defaults" << YAML::Value << YAML::BeginMap << YAML::Key << "nic_bandwidth"
      << YAML::Value << "1 Gbit" << YAML::EndMap;
    e << YAML::Key << "sites" << YAML::Value << YAML::BeginSeq;
    for (int s = 0; s < 2; ++s) {
      e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted
        << (s == 0 ? site_a : std::string("b"));
      e << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
      e << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted
        << (s == 0 ? node_a : std::string("m1"));
      e << YAML::Key << "nics" << YAML::Value << YAML::BeginSeq << YAML::BeginMap << YAML::Key
        << "address" << YAML::Value << (s == 0 ? "10.241.1.1" : "10.242.1.1") << YAML::EndMap
        << YAML::EndSeq;
      e << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
    }
    e << YAML::EndSeq;
    e << YAML::Key << "wan" << YAML::Value << YAML::BeginSeq << YAML::BeginMap << YAML::Key
      << "sites" << YAML::Value << YAML::Flow << YAML::BeginSeq << site_a << "b" << YAML::EndSeq
      << YAML::Key << "latency" << YAML::Value << "5 ms" << YAML::Key << "bandwidth" << YAML::Value
      << "1 Gbit" << YAML::EndMap << YAML::EndSeq;
    e << YAML::EndMap;
    t << e.c_str() << "\n";
  }
  ComposeOptions o;
  o.image = "img\xC2\x85    privileged: true";
  const std::string text = compose_file(topology::load_grid_file(dir + "/t.yaml"), o);
  // The file is printable ASCII and line feeds: no parser finds another break.
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c <= 0x7e)) << "byte " << i << ": " << int{c};
  }
  const YAML::Node y = YAML::Load(text);
  EXPECT_EQ(y["services"]["launcher"]["image"].as<std::string>(), o.image);  // escaped, intact
  // What compose's own parser makes of it (docker-compose 1.29 is PyYAML):
  // the same top-level keys and nothing privileged.
  {
    std::ofstream(dir + "/c.yaml") << text;
    testing::Child py({"/usr/bin/python3", "-c",
                       "import sys, yaml\n"
                       "d = yaml.safe_load(open(sys.argv[1]))\n"
                       "print(sorted(d), any('privileged' in s for s in d['services'].values()))\n",
                       dir + "/c.yaml"},
                      dir);
    const int status = py.wait(30s);
    if (status == 0)
      EXPECT_EQ(py.out(), "['networks', 'services'] False\n");
    else
      EXPECT_NE(py.err().find("No module named 'yaml'"), std::string::npos) << py.err();
  }
  int assignments = 0;
  for (const auto& kv : y["services"]) {
    if (!kv.second["command"].IsSequence() || kv.second["command"][0].as<std::string>() != "sh")
      continue;
    // What compose hands to sh: "$$" is its escape for "$".
    const std::string script =
        std::regex_replace(script_of(kv.second), std::regex("\\$\\$"), std::string("$"));
    // Every single-quoted assignment (a word may span lines: a line break
    // inside quotes is data): run it, and blank it out of what is left.
    std::string rest = script;
    const std::regex assignment("(^|[;\\s])([a-z]+)='");
    for (std::smatch m; std::regex_search(rest, m, assignment);) {
      const size_t begin = static_cast<size_t>(m.position(2));
      size_t close = static_cast<size_t>(m.position(0) + m.length(0));
      for (;;) {  // the closing quote; '\'' continues the word
        close = rest.find('\'', close);
        ASSERT_NE(close, std::string::npos) << kv.first << ": unterminated quote\n" << script;
        if (rest.compare(close, 4, "'\\''") != 0) break;
        close += 4;
      }
      const std::string word = rest.substr(begin, close + 1 - begin);
      if (word.find("PWNED") != std::string::npos) {
        const std::string var = m.str(2);
        testing::Child c(
            {"/bin/sh", "-c", "cd " + dir + "\n" + word + "\nprintf '%s' \"$" + var + "\""}, dir);
        ASSERT_EQ(c.wait(10s), 0) << word << c.err();
        EXPECT_EQ(c.out(), site_a_read);
        ++assignments;
      }
      rest.replace(begin, word.size(), std::string(word.size(), 'X'));
    }
    // Outside them the names appear only in comments, each on its one line.
    std::istringstream lines(rest);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("PWNED") == std::string::npos) continue;
      const auto first = line.find_first_not_of(' ');
      EXPECT_EQ(line[first], '#') << kv.first << ": " << line;
    }
    // The whole script parses as sh.
    testing::Child n({"/bin/sh", "-n", "-c", script}, dir);
    EXPECT_EQ(n.wait(10s), 0) << kv.first << ": " << n.err() << "\n" << script;
  }
  EXPECT_GE(assignments, 1);  // the far site's name in m1's wait
  for (const char* f : {"PWNED-A", "PWNED-B"})
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + f)) << f;
}

TEST(TestbedCompose, CommandWritesTheFileWithARelativeTopologyMount) {
  const testing::TempDir temp;  // removed with everything in it, also on failure
  const std::string dir = temp.path().string();
  testing::Child c({kBin, "testbed", "compose", kSrc + "/site-configs/docker-default.yaml", "-o",
                    dir + "/c.yaml"},
                   dir);
  ASSERT_EQ(c.wait(30s), 0) << c.err();
  const YAML::Node y = YAML::LoadFile(dir + "/c.yaml");
  const std::string mount = y["services"]["launcher"]["volumes"][0].as<std::string>();
  EXPECT_NE(mount.find("site-configs/docker-default.yaml:/etc/gridbcast/topology.yaml:ro"),
            std::string::npos)
      << mount;
  EXPECT_EQ(mount.front(), '.') << mount;
}

TEST(TestbedCompose, CommandRefusesAnUnknownEngineAndLimitsOutOfRange) {
  const testing::TempDir temp;  // removed with everything in it, also on failure
  const std::string dir = temp.path().string();
  const std::string topo = kSrc + "/site-configs/testbed-2x2.yaml";
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--engine", "kubernetes"}, "--engine"},
           {{"--nofile", "10"}, "--nofile"},
           {{"--nproc", "-1"}, "--nproc"}}) {
    std::vector<std::string> argv = {kBin, "testbed", "compose", topo, "-o", dir + "/c.yaml"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::Child c(argv, dir);
    EXPECT_NE(c.wait(30s), 0) << args[0];
    EXPECT_NE(c.err().find(want), std::string::npos) << c.err();
    EXPECT_FALSE(std::filesystem::exists(dir + "/c.yaml")) << args[0];
  }
  testing::Child ok({kBin, "testbed", "compose", topo, "-o", dir + "/c.yaml", "--engine", "Podman"},
                    dir);
  ASSERT_EQ(ok.wait(30s), 0) << ok.err();
  EXPECT_TRUE(YAML::LoadFile(dir + "/c.yaml")["networks"]["control"]["internal"].as<bool>());
}

// Package names from every `apt-get install` in the Dockerfile (continuation
// lines included; options and shell words skipped).
std::vector<std::vector<std::string>> dockerfile_installs() {
  std::ifstream in(kSrc + "/docker/Dockerfile");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = std::regex_replace(ss.str(), std::regex("\\\\\n"), " ");
  std::vector<std::vector<std::string>> installs;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("apt-get install");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at + 15));
    std::vector<std::string> pkgs;
    for (std::string w; words >> w;) {
      if (w == "&&" || w == ";" || w == "|" || w == "||") break;
      if (w[0] == '-' || w.find('=') != std::string::npos) continue;
      pkgs.push_back(w);
    }
    installs.push_back(pkgs);
  }
  return installs;
}

TEST(TestbedDockerfile, InstallsWhatSetupInstallsAndOnlyPackagesDebian12Has) {
  const auto installs = dockerfile_installs();
  ASSERT_GE(installs.size(), 2u) << "expected a build stage and a runtime stage";
  // The build stage installs everything scripts/setup.sh installs for the build
  // (its first list; the second, MPI for the providers and peers, is not in the image).
  const std::string setup = testing::slurp(kSrc + "/scripts/setup.sh");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(setup, m, std::regex("(?:^|\n)packages=\\(([^)]*)\\)")));
  std::istringstream words(m[1].str());
  const std::set<std::string> build(installs[0].begin(), installs[0].end());
  for (std::string p; words >> p;)
    EXPECT_TRUE(build.count(p))
        << p << " is in scripts/setup.sh but not in the Dockerfile's build stage";

  const std::string apt_cache = "/usr/bin/apt-cache";
  if (::access(apt_cache.c_str(), X_OK) != 0)
    GTEST_SKIP() << "apt-cache is not available to check package names";
  if (!run_command({apt_cache, "show", "bash"}).ok())
    GTEST_SKIP() << "apt lists are not available (apt-get update has not run)";
  // One call for all (apt-cache prints one stanza per package it knows and
  // says nothing about the others); one call per package only to name a missing one.
  std::set<std::string> unique;
  for (const auto& stage : installs) unique.insert(stage.begin(), stage.end());
  std::vector<std::string> all = {apt_cache, "show", "--no-all-versions"};
  all.insert(all.end(), unique.begin(), unique.end());
  const auto r = run_command(all);
  std::size_t stanzas = 0;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) stanzas += line.rfind("Package: ", 0) == 0;
  if (r.ok() && stanzas == unique.size()) return;
  for (const auto& stage : installs)
    for (const auto& p : stage) {
      const auto one = run_command({apt_cache, "show", "--no-all-versions", p});
      EXPECT_TRUE(one.ok() && !one.out.empty())
          << "package \"" << p << "\" is not in the apt lists: " << one.err;
    }
}

}  // namespace
}  // namespace gridbcast::testbed
