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
  EXPECT_TRUE(tokyo["healthcheck"]);
  EXPECT_EQ(services["node-a1"]["depends_on"]["router-tokyo"]["condition"].as<std::string>(),
            "service_healthy");
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

// Two YAML trees with the same structure and scalars (quoting and layout aside).
void expect_same_tree(const YAML::Node& a, const YAML::Node& b, const std::string& at) {
  ASSERT_EQ(a.Type(), b.Type()) << at;
  if (a.IsScalar()) {
    EXPECT_EQ(a.Scalar(), b.Scalar()) << at;
  } else if (a.IsSequence()) {
    ASSERT_EQ(a.size(), b.size()) << at;
    for (size_t i = 0; i < a.size(); ++i)
      expect_same_tree(a[i], b[i], at + "[" + std::to_string(i) + "]");
  } else if (a.IsMap()) {
    ASSERT_EQ(a.size(), b.size()) << at;
    for (const auto& kv : a) {
      const std::string k = kv.first.as<std::string>();
      ASSERT_TRUE(b[k]) << at << "." << k << " missing";
      expect_same_tree(kv.second, b[k], at + "." + k);
    }
  }
}

// The compose file was hand-quoted text before it came from yaml-cpp's
// emitter; the shipped file of then (kept in tests/testbed/data) and the one
// written now are the same document.
TEST(TestbedCompose, TheEmitterWritesTheSameDocumentAsTheHandQuotedFileDid) {
  const YAML::Node before =
      YAML::LoadFile(kSrc + "/tests/testbed/data/compose.default.before-emitter.yaml");
  const YAML::Node now = YAML::Load(compose_of("docker-default.yaml"));
  expect_same_tree(before, now, "");
  // And a plain scalar stays a string where compose wants one.
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

TEST(TestbedCompose, CommandWritesTheFileWithARelativeTopologyMount) {
  const std::string dir = testing::temp_dir();
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
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
