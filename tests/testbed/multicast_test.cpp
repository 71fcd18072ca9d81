// IP multicast on the emulated grid (root and network namespaces; skipped
// otherwise): a datagram to a group, sent on one lane of a node, reaches the
// nodes of the same site that joined the group on that lane, and never a node
// of another site (the site routers do not route multicast). Real UDP sockets
// in forked children that enter the node namespaces.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "testbed_support.hpp"

namespace gridbcast::testing {
namespace {

// Site a: three nodes with two NICs; site b: one node; 1 ms WAN between them.
constexpr const char* kTopology = R"(
name: multicast-test
defaults:
  nic_bandwidth: 100 Mbit
  wan:
    latency: 1 ms
    bandwidth: 1 Gbit
sites:
  - name: a
    nodes:
      - name: a[1-3]
        nics:
          - address: 10.236.1.[1-3]
          - address: 10.236.2.[1-3]
  - name: b
    nodes:
      - name: b1
        nics:
          - address: 10.237.1.1
          - address: 10.237.2.1
wan:
  - sites: [a, b]
)";

constexpr int kReceiveTimeoutMs = 2000;  // the other site's receiver waits this long in vain
constexpr auto kChildLimit = 10s;

in_addr addr_of(const std::string& text) {
  in_addr a{};
  EXPECT_EQ(::inet_pton(AF_INET, text.c_str(), &a), 1) << text;
  return a;
}

void say(int fd, const char* text) {
  [[maybe_unused]] auto n = ::write(fd, text, std::strlen(text));
}

// The child's side: only system calls on data prepared before fork().
struct Datagram {
  in_addr group{};
  std::uint16_t port = 0;
  in_addr lane{};  // the NIC address to join on / send from
  char payload[32] = {};
};

// Joins the group on the lane, says "ready", then writes "got <source>
// <payload>" for the first datagram, or "timeout".
int receive(const Datagram& d, int out) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(d.port);
  a.sin_addr = d.group;  // bound to the group: nothing else arrives here
  ip_mreq m{};
  m.imr_multiaddr = d.group;
  m.imr_interface = d.lane;
  if (s < 0 || ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::setsockopt(s, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
    say(out, "error: ");
    say(out, std::strerror(errno));
    say(out, "\n");
    return 1;
  }
  say(out, "ready\n");
  pollfd p{s, POLLIN, 0};
  if (::poll(&p, 1, kReceiveTimeoutMs) <= 0) {
    say(out, "timeout\n");
    return 0;
  }
  char buf[64] = {};
  sockaddr_in from{};
  socklen_t len = sizeof from;
  const ssize_t n = ::recvfrom(s, buf, sizeof buf - 1, 0, reinterpret_cast<sockaddr*>(&from), &len);
  if (n < 0) return 1;
  char src[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &from.sin_addr, src, sizeof src);
  say(out, "got ");
  say(out, src);
  say(out, " ");
  say(out, buf);
  say(out, "\n");
  return 0;
}

// Sends one datagram to the group out of the lane, with a TTL that would let a
// multicast router forward it: only the absence of multicast routing keeps it
// in the site.
int send_one(const Datagram& d, int out) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const unsigned char ttl = 16, loop = 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(d.port);
  a.sin_addr = d.group;
  if (s < 0 || ::setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &d.lane, sizeof d.lane) != 0 ||
      ::setsockopt(s, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0 ||
      ::setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop) != 0 ||
      ::sendto(s, d.payload, std::strlen(d.payload), 0, reinterpret_cast<const sockaddr*>(&a),
               sizeof a) < 0) {
    say(out, "error: ");
    say(out, std::strerror(errno));
    say(out, "\n");
    return 1;
  }
  say(out, "sent\n");
  return 0;
}

// A forked child inside a node's namespace running `body`, its report read
// through a pipe. Killed and reaped on destruction if still running.
class NsChild {
 public:
  NsChild(const std::string& ns, int (*body)(const Datagram&, int), const Datagram& d) {
    const std::string path = "/run/netns/" + ns;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      const int nsfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) {
        say(fds[1], "error: cannot enter the namespace\n");
        ::_exit(126);
      }
      ::_exit(body(d, fds[1]));
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~NsChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  NsChild(const NsChild&) = delete;
  NsChild& operator=(const NsChild&) = delete;

  // The report so far, once it holds a whole line (or at the deadline / EOF).
  std::string next_line(std::chrono::milliseconds limit = kChildLimit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "(no answer within the time limit) " + buf_;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char b[256];
      const ssize_t n = ::read(fd_, b, sizeof b);
      if (n <= 0) return "(exited) " + buf_;
      buf_.append(b, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
};

TEST(TestbedMulticast, ADatagramReachesTheSiteOnItsLaneButNotTheOtherSite) {
  GRIDBCAST_REQUIRE_DELAY_LINE();  // the WAN link needs netem or the delay line
  remove_stale_test_testbeds();
  TestbedGuard tb(write_topology(kTopology));
  ASSERT_TRUE(tb.ok()) << tb.log();
  const auto& s = tb.state();
  const std::string ip = testbed::ip_path();

  // The lane switches forward multicast to every port (no IGMP snooping), and
  // the nodes' NICs carry it.
  for (const std::string lane : {"lane0", "lane1"}) {
    const auto r = testbed::run_command({ip, "-n", s.routers.at(0), "-d", "link", "show", lane});
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_NE(r.out.find("mcast_snooping 0"), std::string::npos) << r.out;
  }
  for (const std::string dev : {"eth0", "eth1"}) {
    const auto r = testbed::run_command({ip, "-n", tb.ns("a2"), "link", "show", dev});
    EXPECT_NE(r.out.find("MULTICAST"), std::string::npos) << r.out;
  }

  auto node = [&](const std::string& name) -> const testbed::NodeState& {
    for (const auto& n : s.nodes)
      if (n.name == name) return n;
    throw std::runtime_error("no node " + name);
  };
  for (size_t lane = 0; lane < 2; ++lane) {
    SCOPED_TRACE("lane " + std::to_string(lane));
    Datagram d;
    d.group = addr_of("239.23.1." + std::to_string(10 + lane));
    d.port = static_cast<std::uint16_t>(41000 + lane);
    std::snprintf(d.payload, sizeof d.payload, "hello lane %zu", lane);

    std::vector<std::string> names = {"a2", "a3", "b1"};
    std::vector<std::unique_ptr<NsChild>> receivers;
    for (const auto& name : names) {
      Datagram r = d;
      r.lane = addr_of(node(name).addresses.at(lane));
      receivers.push_back(std::make_unique<NsChild>(node(name).ns, receive, r));
    }
    for (size_t i = 0; i < receivers.size(); ++i)
      ASSERT_EQ(receivers[i]->next_line(), "ready") << names[i];

    const std::string from = node("a1").addresses.at(lane);
    Datagram out = d;
    out.lane = addr_of(from);
    NsChild sender(node("a1").ns, send_one, out);
    ASSERT_EQ(sender.next_line(), "sent");

    const std::string want = "got " + from + " " + d.payload;
    EXPECT_EQ(receivers[0]->next_line(), want) << "a2, same site";
    EXPECT_EQ(receivers[1]->next_line(), want) << "a3, same site";
    EXPECT_EQ(receivers[2]->next_line(), "timeout") << "b1, the other site";
  }
}

}  // namespace
}  // namespace gridbcast::testing
