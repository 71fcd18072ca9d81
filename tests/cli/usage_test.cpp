// Exit statuses of the gridbcast command (README.md, "Exit status"): 0 success,
// 1 a failure at run time, 2 a usage error; CLI11's own codes never leak out.
#include <gtest/gtest.h>

#include <initializer_list>

#include "cli/usage.hpp"
#include "support/json.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBin = GRIDBCAST_BINARY;
const std::string kSrc = GRIDBCAST_SOURCE_DIR;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ExitStatus, UnknownCommandIsAUsageErrorWithAHint) {
  Child c({kBin, "lunch"});
  EXPECT_EQ(c.wait(30s), 2);
  EXPECT_TRUE(has(c.err(), "gridbcast: unknown command 'lunch'\n")) << c.err();
  EXPECT_TRUE(has(c.err(), "gridbcast --help")) << c.err();
  EXPECT_EQ(c.out(), "");
}

TEST(ExitStatus, UnknownSubcommandNamesItsCommand) {
  Child certs({kBin, "certs", "frob"});
  EXPECT_EQ(certs.wait(30s), 2);
  EXPECT_TRUE(has(certs.err(), "gridbcast certs: unknown command 'frob'")) << certs.err();
  EXPECT_TRUE(has(certs.err(), "gridbcast certs --help")) << certs.err();
  Child testbed({kBin, "testbed", "sideways"});
  EXPECT_EQ(testbed.wait(30s), 2);
  EXPECT_TRUE(has(testbed.err(), "gridbcast testbed: unknown command 'sideways'")) << testbed.err();
}

TEST(ExitStatus, EveryKindOfUsageErrorExitsTwo) {
  const std::string topo = kSrc + "/site-configs/default.yaml";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{}, "subcommand"},                                 // no command
      {{"certs"}, "subcommand"},                          // no subcommand
      {{"plan", "--bogus"}, "--bogus"},                   // unknown option
      {{"plan", "--size"}, "--size"},                     // missing argument
      {{"plan", "--size", "banana"}, "expected a size"},  // bad value
      {{"plan", "--format", "xml"}, "xml"},               // not one of
      {{"plan", "--root", "x"}, "--root"},                // not a number
      {{"plan", "--root", "99"}, "outside"},              // out of range
      {{"simulate", "--root", "-1"}, "outside"},          // out of range
      {{"launch", "--iterations", "0"}, "--iterations"},  // check fails
      {{"launch", "-n", "3"}, "-n"},  // -n is mpiexec's rank count, not iterations
      {{"launch", "--file", topo, "--size", "1"}, "--file"},       // conflicting options
      {{"launch", "--window", "1MiB"}, "only applies to --file"},  // conflicting options
      {{"certs", "init"}, "DIR"},                                  // required argument missing
      {{"plan", topo, "extra"}, "extra"},                          // extra argument
  };
  for (const auto& k : cases) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), k.args.begin(), k.args.end());
    Child c(argv);
    std::string joined;
    for (const auto& a : k.args) joined += " " + a;
    EXPECT_EQ(c.wait(30s), 2) << "gridbcast" << joined << ": " << c.err();
    EXPECT_TRUE(has(c.err(), k.says)) << "gridbcast" << joined << ": " << c.err();
  }
}

TEST(ExitStatus, HelpAndVersionExitZero) {
  Child help({kBin, "--help"});
  EXPECT_EQ(help.wait(30s), 0);
  EXPECT_TRUE(has(help.out(), "Exit status: 0 success; 1 a failure ")) << help.out();
  EXPECT_TRUE(has(help.out(), "2 a usage error")) << help.out();
  Child plan_help({kBin, "plan", "--help"});
  EXPECT_EQ(plan_help.wait(30s), 0);
  EXPECT_TRUE(has(plan_help.out(), "--check")) << plan_help.out();
  Child version({kBin, "--version"});
  EXPECT_EQ(version.wait(30s), 0);
  EXPECT_TRUE(has(version.out(), "gridbcast 0.1.0")) << version.out();
}

TEST(Iterations, DashIIsIterationsAndDashNIsRefused) {
  Child i({kBin, "launch", "--size", "64KiB", "-i", "3", "--json"});
  ASSERT_EQ(i.wait(120s), 0) << i.err();
  EXPECT_EQ(last_json(i.out())["iterations"], 3) << i.out();
  Child n({kBin, "launch", "--size", "64KiB", "-n", "3"});
  EXPECT_EQ(n.wait(30s), 2);
  EXPECT_TRUE(has(n.err(), "-n")) << n.err();
  Child help({kBin, "launch", "--help"});
  EXPECT_EQ(help.wait(30s), 0);
  EXPECT_TRUE(has(help.out(), "-i,--iterations")) << help.out();
  EXPECT_FALSE(has(help.out(), "-n,")) << help.out();
}

TEST(Sizes, TheCommandReadsDdLetters) {
  Child plan({kBin, "plan", "--size", "1M", "--format", "json"});
  ASSERT_EQ(plan.wait(30s), 0) << plan.err();
  Child mib({kBin, "plan", "--size", "1MiB", "--format", "json"});
  ASSERT_EQ(mib.wait(30s), 0) << mib.err();
  EXPECT_EQ(plan.out(), mib.out());
  Child bad({kBin, "plan", "--size", "1Mb"});
  EXPECT_EQ(bad.wait(30s), 2);
  EXPECT_TRUE(has(bad.err(), "--size")) << bad.err();
  EXPECT_TRUE(has(bad.err(), "unknown unit \"Mb\"")) << bad.err();
}

TEST(ExitStatus, RuntimeFailureExitsOne) {
  TempDir t;
  const std::string dir = (t / "certs").string();
  Child first({kBin, "certs", "init", dir});
  ASSERT_EQ(first.wait(30s), 0) << first.err();
  Child again({kBin, "certs", "init", dir});  // the CA exists: refused, not a usage error
  EXPECT_EQ(again.wait(30s), 1) << again.err();
  EXPECT_TRUE(has(again.err(), "gridbcast: ")) << again.err();
}

TEST(UnknownCommand, OnlyWhereACommandIsExpected) {
  CLI::App app{"test"};
  auto* certs = app.add_subcommand("certs");
  certs->add_subcommand("init")->add_option("DIR");
  app.add_subcommand("plan")->add_option("TOPOLOGY");
  EXPECT_EQ(
      cli::unknown_command(app, {"lunch"}),
      "gridbcast: unknown command 'lunch'\nRun 'gridbcast --help' for the list of commands.\n");
  EXPECT_EQ(cli::unknown_command(app, {"certs", "frob"}),
            "gridbcast certs: unknown command 'frob'\n"
            "Run 'gridbcast certs --help' for the list of commands.\n");
  EXPECT_EQ(cli::unknown_command(app, {}), "");
  EXPECT_EQ(cli::unknown_command(app, {"--help", "lunch"}), "");
  EXPECT_EQ(cli::unknown_command(app, {"plan", "grid.yaml"}), "");
  EXPECT_EQ(cli::unknown_command(app, {"certs", "init", "dir"}), "");
  EXPECT_EQ(cli::unknown_command(app, {"certs", "--help"}), "");
}

}  // namespace
}  // namespace gridbcast::testing
