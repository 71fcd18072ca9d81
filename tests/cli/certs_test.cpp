// `gridbcast certs` and a launch over a tls: true WAN link, as a user runs them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;
const std::string kTopo = kSrc + "/site-configs/two-sites-tls.yaml";

unsigned mode_of(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}

TEST(Certs, InitAndIssueWriteKeysWithMode0600AndALaunchOverTlsVerifies) {
  ::unsetenv("GRIDBCAST_CERT_DIR");
  TempDir t;
  const std::string dir = (t / "certs").string();
  Child init({kBin, "certs", "init", dir});
  ASSERT_EQ(init.wait(30s), 0) << init.err();
  EXPECT_EQ(mode_of(dir + "/ca.key"), 0600u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ca.crt"));
  Child issue({kBin, "certs", "issue", kTopo, "--dir", dir});
  ASSERT_EQ(issue.wait(30s), 0) << issue.err();
  for (const char* node : {"e1", "w1"}) {
    EXPECT_EQ(mode_of(dir + "/" + node + ".key"), 0600u) << node;
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + node + ".crt")) << node;
  }
  Child launch(
      {kBin, "launch", kTopo, "--cert-dir", dir, "--size", "3MiB", "--iterations", "2", "--json"});
  ASSERT_EQ(launch.wait(120s), 0) << launch.err();
  EXPECT_EQ(last_json(launch.out())["verified"], true) << launch.out();
}

TEST(Certs, LaunchWithoutCertificatesFailsSayingHowToMakeThem) {
  ::unsetenv("GRIDBCAST_CERT_DIR");
  Child launch({kBin, "launch", kTopo, "--size", "1MiB"});
  EXPECT_NE(launch.wait(60s), 0);
  EXPECT_NE(launch.err().find("--cert-dir"), std::string::npos) << launch.err();
  EXPECT_NE(launch.err().find("gridbcast certs init"), std::string::npos) << launch.err();
  TempDir t;
  Child issue({kBin, "certs", "issue", kTopo, "--dir", t.path().string()});
  EXPECT_NE(issue.wait(30s), 0);
  EXPECT_NE(issue.err().find("gridbcast certs init"), std::string::npos) << issue.err();
}

TEST(Certs, EverySubcommandHasHelpWithAnExample) {
  for (std::vector<std::string> args : {std::vector<std::string>{"certs", "--help"},
                                        {"certs", "init", "--help"},
                                        {"certs", "issue", "--help"}}) {
    args.insert(args.begin(), kBin);
    Child c(args);
    ASSERT_EQ(c.wait(10s), 0) << c.err();
    EXPECT_NE(c.out().find("Example"), std::string::npos) << c.out();
  }
}

}  // namespace
}  // namespace gridbcast::testing
