// job/backends.cpp: what reaches ssh, and process groups, with real processes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "job/backend.hpp"
#include "support/process.hpp"

namespace gridbcast::job {
namespace {

using namespace std::chrono_literals;
using testing::slurp;
using testing::temp_dir;

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

TEST(SshBackend, ArgumentsReachTheProgramAsTheyWereGiven) {
  const std::string dir = temp_dir();
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
  const std::string dir = temp_dir();
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
  const std::string dir = temp_dir();
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

}  // namespace
}  // namespace gridbcast::job
