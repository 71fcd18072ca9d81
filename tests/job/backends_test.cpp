// job/backends.cpp: what reaches ssh, and process groups, with real processes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "job/backend.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "topology/loader.hpp"

namespace gridbcast::job {
namespace {

using namespace std::chrono_literals;
using testing::slurp;
using testing::TempDir;

topology::Node node(const std::string& name, const std::string& host) {
  topology::Node n;
  n.name = name;
  n.host = host;
  return n;
}

// Waits until every started rank has exited; returns their exits.
std::vector<Backend::Exit> reap_all(Backend& b) {
  std::vector<Backend::Exit> all;
  for (int i = 0; i < 200 && b.running() > 0; ++i) {
    for (auto& e : b.reap()) all.push_back(e);
    std::this_thread::sleep_for(25ms);
  }
  return all;
}

// An ssh stand-in that behaves as ssh does with its arguments: options up to
// "--", the host, then the rest joined with spaces for a remote shell.
std::string fake_ssh(const std::string& dir) {
  const std::string path = dir + "/fake-ssh";
  std::ofstream f(path);
  f << "#!/bin/sh\nwhile [ $# -gt 0 ] && [ \"$1\" != \"--\" ]; do shift; done\nshift\necho \"$1\" "
       "> "
    << dir << "/host\nshift\nexec sh -c \"$*\"\n";
  f.close();
  ::chmod(path.c_str(), 0755);
  return path;
}

// The launcher's default listen address for ranks on other hosts: where the
// route to the nodes leaves this host, not 127.0.0.1.
TEST(ListenAddress, LoopbackGridsKeep127AndOthersGetTheRoutesSource) {
  const auto never = [](const std::string& a) -> std::string {
    ADD_FAILURE() << "asked the route to " << a << " for a loopback grid";
    return "";
  };
  EXPECT_EQ(reachable_listen_address(topology::default_grid(), never), "127.0.0.1");

  const topology::Grid remote = topology::load_grid_string(
      "defaults: {nic_bandwidth: 1 Gbit, wan: {latency: 1 ms, bandwidth: 1 Gbit}}\n"
      "sites:\n"
      "  - name: a\n"
      "    nodes:\n"
      "      - name: a[1-2]\n"
      "        nics:\n"
      "          - address: 10.1.0.[1-2]\n"
      "          - address: 10.2.0.[1-2]\n"
      "  - name: b\n"
      "    nodes:\n"
      "      - name: b1\n"
      "        nics:\n"
      "          - address: 192.168.7.1\n"
      "wan:\n"
      "  - sites: [a, b]\n",
      "remote.yaml");
  std::vector<std::string> asked;
  const auto route = [&](const std::string& a) {
    asked.push_back(a);
    return a.rfind("10.", 0) == 0 ? std::string("10.0.0.254") : std::string("192.168.7.254");
  };
  std::string note;
  EXPECT_EQ(reachable_listen_address(remote, route, &note), "10.0.0.254");
  EXPECT_EQ(asked, (std::vector<std::string>{"10.1.0.1", "10.1.0.2", "192.168.7.1"}))
      << "each node's first NIC";
  EXPECT_NE(note.find("b1 (192.168.7.1, from 192.168.7.254)"), std::string::npos) << note;
  EXPECT_NE(note.find("give --listen"), std::string::npos) << note;

  // The kernel's answer for real: loopback is reached from loopback, and a
  // text that is no address is refused.
  EXPECT_EQ(route_source("127.0.0.1"), "127.0.0.1");
  EXPECT_THROW(route_source("not-an-address"), std::runtime_error);
}

TEST(SshBackend, ArgumentsReachTheProgramAsTheyWereGiven) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string out = dir + "/args";
  auto b = make_ssh_backend(
      fake_ssh(dir), std::vector<std::string>{"/bin/sh", "-c", "printf '%s\\n' \"$@\" > " + out,
                                              "sh", "two words", "it's", "$HOME", "a;b|c", "`x`"});
  b->start(0, node("n1", "host-1"), {{"GRIDBCAST_RANK", "0"}}, std::string(64, 'a'));
  const auto exits = reap_all(*b);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].success) << exits[0].status;
  EXPECT_EQ(slurp(out), "two words\nit's\n$HOME\na;b|c\n`x`\n");
  EXPECT_EQ(slurp(dir + "/host"), "host-1\n");
  std::filesystem::remove_all(dir);
}

TEST(SshBackend, AHostThatSshWouldReadAsAnOptionIsRefused) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  auto b = make_ssh_backend(fake_ssh(dir), std::string("/bin/true"));
  for (const char* host : {"-oProxyCommand=touch /tmp/pwned", "a b", "x;y", "-"}) {
    try {
      b->start(0, node("n1", host), {}, std::string(64, 'a'));
      ADD_FAILURE() << "started a rank on host \"" << host << "\"";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("is not a host name ssh can be given"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(b->running(), 0);
  std::filesystem::remove_all(dir);
}

TEST(LocalBackend, StoppingARankStopsEverythingItStarted) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  auto b = make_local_backend(
      std::vector<std::string>{"/bin/sh", "-c", "sleep 1000 & echo $! > " + dir + "/child; wait"});
  b->start(0, node("n1", ""), {}, std::string(64, 'a'));
  std::string child;
  for (int i = 0; i < 200 && child.empty(); ++i) {
    std::this_thread::sleep_for(25ms);
    child = slurp(dir + "/child");
  }
  ASSERT_FALSE(child.empty());
  const pid_t sleeper = std::stoi(child);
  b->signal_all(SIGTERM);
  reap_all(*b);
  for (int i = 0; i < 100 && testing::alive(sleeper); ++i) std::this_thread::sleep_for(25ms);
  EXPECT_FALSE(testing::alive(sleeper)) << "the rank's child outlived it";
  std::filesystem::remove_all(dir);
}

// The srun backend's command line: one step on the rank's node, GRIDBCAST_*
// through env(1), never the secret (that goes to srun's standard input).
TEST(SrunBackend, OneStepPerRankOnItsNode) {
  const Backend::Env env = {{"GRIDBCAST_LAUNCHER", "10.0.0.1:7000"},
                            {"GRIDBCAST_JOB_ID", "abc"},
                            {"GRIDBCAST_RANK", "3"}};
  const auto argv =
      srun_argv({"srun", "--quiet"}, 3, node("n3", "node03"), env, {"/opt/gridbcast", "rank"});
  const std::vector<std::string> want = {"srun",
                                         "--quiet",
                                         "--nodes=1",
                                         "--ntasks=1",
                                         "--kill-on-bad-exit=1",
                                         "--nodelist=node03",
                                         "--job-name=gridbcast-rank-3",
                                         "/usr/bin/env",
                                         "GRIDBCAST_LAUNCHER=10.0.0.1:7000",
                                         "GRIDBCAST_JOB_ID=abc",
                                         "GRIDBCAST_RANK=3",
                                         "/opt/gridbcast",
                                         "rank"};
  EXPECT_EQ(argv, want);
  EXPECT_EQ(srun_argv({"srun"}, 0, node("n1", ""), {}, {"x"}).at(4), "--nodelist=n1");
  for (const char* bad : {"-w", "a,b", "n[1-2]", ""})
    EXPECT_THROW(srun_argv({"srun"}, 0, node(bad, bad), {}, {"x"}), std::runtime_error) << bad;
}

// With a stand-in srun: the secret arrives on standard input, not in the
// arguments or the environment.
TEST(SrunBackend, SecretOnStandardInputOnly) {
  const TempDir scratch;
  const std::string dir = scratch.path().string();
  const std::string srun = dir + "/fake-srun";
  {
    std::ofstream f(srun);
    f << "#!/bin/sh\necho \"$@\" > " << dir << "/args\nenv > " << dir << "/env\ncat > " << dir
      << "/stdin\n";
  }
  ::chmod(srun.c_str(), 0755);
  ::setenv("GRIDBCAST_SECRET", std::string(64, 'b').c_str(), 1);
  auto b = make_srun_backend(srun, {"/bin/true", "rank"});
  EXPECT_EQ(b->name(), "srun");
  b->start(0, node("n1", "node01"), {{"GRIDBCAST_RANK", "0"}}, std::string(64, 'a'));
  auto exits = reap_all(*b);
  ::unsetenv("GRIDBCAST_SECRET");
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].success) << exits[0].status;
  EXPECT_EQ(slurp(dir + "/stdin"), std::string(64, 'a') + "\n");
  const std::string args = slurp(dir + "/args");
  EXPECT_NE(args.find("--nodelist=node01"), std::string::npos) << args;
  EXPECT_NE(args.find("GRIDBCAST_RANK=0"), std::string::npos) << args;
  EXPECT_EQ(args.find("aaaa"), std::string::npos) << args;
  const std::string env = slurp(dir + "/env");
  EXPECT_EQ(env.find("aaaa"), std::string::npos);
  EXPECT_EQ(env.find("bbbb"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gridbcast::job
