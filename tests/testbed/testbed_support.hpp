// Shared by the testbed tests: skipping without root or namespaces, a unique
// testbed id per run, an RAII guard that always runs `gridbcast testbed down`,
// and running commands inside a node's namespace.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "support/process.hpp"
#include "testbed/state.hpp"
#include "testbed/system.hpp"
#include "testbed/testbed.hpp"
#include "topology/loader.hpp"

namespace gridbcast::testing {

using namespace std::chrono_literals;
inline const std::string kBin = GRIDBCAST_BINARY;
inline const std::string kSrc = GRIDBCAST_SOURCE_DIR;
inline constexpr const char* kTestIdPrefix = "gtest-";

// Empty when the namespace tests can run here, else why not. Being root is
// not enough (a container may forbid namespaces): a scratch namespace is
// created and removed once per process.
inline std::string why_no_namespaces() {
  static const std::string why = [] {
    if (::geteuid() != 0)
      return std::string("needs root (creates network namespaces, veths, bridges and qdiscs)");
    const std::string ip = testbed::ip_path();
    if (ip.empty()) return std::string("needs the ip command (iproute2)");
    if (testbed::tc_path().empty()) return std::string("needs the tc command (iproute2)");
    const std::string probe = "gbprobe-" + std::to_string(::getpid());
    const auto r = testbed::run_command({ip, "netns", "add", probe});
    testbed::run_command({ip, "netns", "del", probe});
    if (!r.ok()) return "`ip netns add` does not work here: " + r.err;
    return std::string();
  }();
  return why;
}

// The same, plus /dev/net/tun for tests that force the userspace delay line.
inline std::string why_no_delay_line() {
  const std::string why = why_no_namespaces();
  if (!why.empty()) return why;
  const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) return "the delay line needs /dev/net/tun";
  ::close(fd);
  return "";
}

#define GRIDBCAST_REQUIRE_NAMESPACES()                                             \
  do {                                                                             \
    const std::string why_ = ::gridbcast::testing::why_no_namespaces();            \
    if (!why_.empty()) GTEST_SKIP() << "namespace testbed test skipped: " << why_; \
  } while (0)

#define GRIDBCAST_REQUIRE_DELAY_LINE()                                      \
  do {                                                                      \
    const std::string why_ = ::gridbcast::testing::why_no_delay_line();     \
    if (!why_.empty()) GTEST_SKIP() << "delay-line test skipped: " << why_; \
  } while (0)

// "gtest-<pid>-<n>-<random>": unique per run; the PID lets a later run find
// the leftovers of a crashed one (see RemoveStaleTestbeds).
inline std::string unique_test_id() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  std::ostringstream s;
  s << kTestIdPrefix << ::getpid() << "-" << counter++ << "-" << std::hex << (rd() & 0xffffff);
  return s.str();
}

// Removes testbeds of earlier test runs whose process is gone (a crash that
// skipped the guards). Only testbeds with our id prefix are touched.
inline void remove_stale_test_testbeds() {
  for (const auto& prefix : testbed::list_testbeds()) {
    try {
      const auto s = testbed::load_state(testbed::state_dir(prefix));
      if (s.id.rfind(kTestIdPrefix, 0) != 0) continue;
      const pid_t owner =
          static_cast<pid_t>(std::atoi(s.id.c_str() + std::string(kTestIdPrefix).size()));
      if (owner > 0 && owner != ::getpid() && ::kill(owner, 0) == 0) continue;
      if (owner == ::getpid()) continue;
      std::ostringstream log;
      testbed::down(prefix, log);
    } catch (const std::exception&) {
    }
  }
}

// This process's scratch directory, removed when the process exits.
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path = temp_dir();
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// A Child whose captured output lives in the scratch directory.
class TbChild : public Child {
 public:
  explicit TbChild(std::vector<std::string> argv) : Child(std::move(argv), fresh_dir()) {}

 private:
  static std::string fresh_dir() {
    static std::atomic<int> counter{0};
    const std::string d = scratch_dir() + "/child-" + std::to_string(counter++);
    std::filesystem::create_directories(d);
    return d;
  }
};

// Writes a topology to a temporary file; the files go when the process exits.
inline std::string write_topology(const std::string& yaml) {
  static std::atomic<int> counter{0};
  const std::string path = scratch_dir() + "/topology-" + std::to_string(counter++) + ".yaml";
  std::ofstream(path) << yaml;
  return path;
}

// A testbed for the lifetime of the object: `up` in the constructor, `down`
// in the destructor (also when the test fails).
class TestbedGuard {
 public:
  TestbedGuard(std::string topology_file, std::vector<std::string> up_args = {})
      : file_(std::move(topology_file)), id_(unique_test_id()) {
    const auto grid = topology::load_grid_file(file_);
    prefix_ = testbed::testbed_prefix(grid.name, id_);
    std::vector<std::string> argv = {kBin, "testbed", "up", file_, "--id", id_};
    argv.insert(argv.end(), up_args.begin(), up_args.end());
    TbChild c(argv);
    status_ = c.wait(120s);
    log_ = c.err();
    if (status_ == 0) state_ = testbed::load_state(testbed::state_dir(prefix_));
  }
  ~TestbedGuard() { down(); }
  TestbedGuard(const TestbedGuard&) = delete;
  TestbedGuard& operator=(const TestbedGuard&) = delete;

  bool ok() const { return status_ == 0 && state_.has_value(); }
  const std::string& log() const { return log_; }
  const std::string& id() const { return id_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& file() const { return file_; }
  const testbed::State& state() const { return *state_; }
  std::string ns(const std::string& node) const {
    for (const auto& n : state_->nodes)
      if (n.name == node) return n.ns;
    ADD_FAILURE() << "no node " << node;
    return "";
  }
  // argv run inside node's namespace.
  std::vector<std::string> in(const std::string& node, std::vector<std::string> argv) const {
    std::vector<std::string> full = {testbed::ip_path(), "netns", "exec", ns(node)};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }
  // Runs `gridbcast testbed down`; returns its stderr. Safe to call twice.
  std::string down() {
    if (down_done_) return "";
    down_done_ = true;
    TbChild c({kBin, "testbed", "down", file_, "--id", id_});
    const int s = c.wait(60s);
    if (s != 0) {
      std::ostringstream log;
      try {
        testbed::down(prefix_, log);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "cannot remove testbed " << prefix_ << ": " << e.what();
      }
    }
    return c.err();
  }

 private:
  std::string file_, id_, prefix_, log_;
  int status_ = -1;
  bool down_done_ = false;
  std::optional<testbed::State> state_;
};

// A suite whose tests share one testbed of a shipped topology, up for the
// whole suite and down after its last test (also when one fails); each test
// skips without namespaces and runs with GRIDBCAST_TESTBED naming it, so
// `launch --backend netns` finds it. `Topology::kFile`: below the sources.
template <typename Topology>
class OneTestbed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!why_no_namespaces().empty()) return;
    guard_ = new TestbedGuard(kSrc + Topology::kFile);
  }
  static void TearDownTestSuite() {
    delete guard_;
    guard_ = nullptr;
  }
  void SetUp() override {
    GRIDBCAST_REQUIRE_NAMESPACES();
    ASSERT_NE(guard_, nullptr);
    ASSERT_TRUE(guard_->ok()) << guard_->log();
    ::setenv("GRIDBCAST_TESTBED", guard_->state().dir.c_str(), 1);
  }
  void TearDown() override { ::unsetenv("GRIDBCAST_TESTBED"); }
  static inline TestbedGuard* guard_ = nullptr;
};
struct TwoByFour {
  static constexpr const char* kFile = "/site-configs/testbed-2x4.yaml";
};
struct Triangle {
  static constexpr const char* kFile = "/site-configs/testbed-triangle.yaml";
};

// RTTs in milliseconds from `ping` output lines ("... time=20.3 ms").
inline std::vector<double> ping_times(const std::string& out) {
  std::vector<double> t;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("time=");
    if (at != std::string::npos) t.push_back(std::stod(line.substr(at + 5)));
  }
  return t;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace gridbcast::testing
