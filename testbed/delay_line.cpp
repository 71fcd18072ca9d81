#include "testbed/delay_line.hpp"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "testbed/layout.hpp"
#include "topology/units.hpp"

namespace gridbcast::testbed {
namespace {

// A GSO packet is at most 64 KiB, plus the virtio header; round up.
constexpr std::size_t kMaxPacket = 65536 + 256;
// Reads per TUN before giving the others (and the timers) a turn.
constexpr int kReadBatch = 64;
// Writes per timer expiry before re-arming, for the same reason.
constexpr int kWriteBatch = 256;

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

struct Stats {
  std::uint64_t packets = 0, bytes = 0, lost = 0, overflow = 0, write_errors = 0;
  std::int64_t late_sum_ns = 0, late_max_ns = 0;
};

struct Link {
  DelayLinkConfig cfg;
  int fd = -1;
  int timer = -1;
  std::int64_t delay_ns = 0;
  std::uint64_t loss_threshold = 0;  // drop when a 64-bit random draw is below
  bool armed = false;
  PacketRing ring;
  std::unique_ptr<std::byte[]> scratch;
  Stats stats;
  Link(const DelayLinkConfig& c)
      : cfg(c),
        ring(std::max<std::size_t>(c.buffer_bytes, 4 * kMaxPacket),
             std::clamp<std::size_t>(c.buffer_bytes / 128, 16384, 4u << 20), kMaxPacket),
        scratch(std::make_unique_for_overwrite<std::byte[]>(kMaxPacket)) {}
};

std::uint64_t next_random(std::uint64_t& s) {  // splitmix64
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void print_stats(const std::vector<std::unique_ptr<Link>>& links, std::ostream& log) {
  for (const auto& l : links) {
    const auto& s = l->stats;
    const double avg_us = s.packets ? static_cast<double>(s.late_sum_ns) / s.packets / 1000.0 : 0.0;
    std::ostringstream line;  // one write per line: logs shared with others do not tear
    line << "delayline: " << l->cfg.tun << ": " << s.packets << " packets ("
         << topology::format_bytes(s.bytes) << ") delayed, " << s.lost << " lost, " << s.overflow
         << " dropped (ring full), " << s.write_errors << " write errors; released late by "
         << std::fixed << std::setprecision(1) << avg_us << " us on average, "
         << static_cast<double>(s.late_max_ns) / 1000.0 << " us at most; " << l->ring.size()
         << " packets held\n";
    log << line.str();
  }
  log.flush();
}

int open_tun(const DelayLinkConfig& c) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(errno_text("cannot open /dev/net/tun"));
  ifreq ifr{};
  ifr.ifr_flags = static_cast<short>(IFF_TUN | IFF_NO_PI | (c.offload ? IFF_VNET_HDR : 0));
  if (c.tun.size() >= IFNAMSIZ) throw std::runtime_error("TUN name too long: " + c.tun);
  std::memcpy(ifr.ifr_name, c.tun.c_str(), c.tun.size() + 1);
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0)
    throw std::runtime_error(errno_text("cannot attach to TUN device " + c.tun));
  if (c.offload) {
    const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    if (::ioctl(fd, TUNSETOFFLOAD, offloads) != 0)
      throw std::runtime_error(errno_text("cannot enable offloads on " + c.tun));
  }
  return fd;
}

void arm(Link& l) {
  if (l.ring.empty()) {
    l.armed = false;
    return;
  }
  const std::int64_t due = l.ring.front().due_ns;
  itimerspec t{};
  t.it_value.tv_sec = due / 1'000'000'000;
  t.it_value.tv_nsec = due % 1'000'000'000;
  if (t.it_value.tv_sec == 0 && t.it_value.tv_nsec == 0) t.it_value.tv_nsec = 1;  // 0 disarms
  if (::timerfd_settime(l.timer, TFD_TIMER_ABSTIME, &t, nullptr) != 0)
    throw std::runtime_error(errno_text("timerfd_settime"));
  l.armed = true;
}

// Reads what the TUN has (up to a batch) into the ring.
void drain(Link& l, std::uint64_t& rng) {
  for (int i = 0; i < kReadBatch; ++i) {
    std::byte* slot = l.ring.reserve();
    std::byte* target = slot ? slot : l.scratch.get();
    const ssize_t n = ::read(l.fd, target, kMaxPacket);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      throw std::runtime_error(errno_text("reading " + l.cfg.tun));
    }
    if (!slot) {
      ++l.stats.overflow;
      continue;
    }
    if (l.loss_threshold && next_random(rng) < l.loss_threshold) {
      ++l.stats.lost;
      continue;
    }
    l.ring.commit(static_cast<std::size_t>(n), now_ns() + l.delay_ns);
  }
  if (!l.armed) arm(l);
}

// Writes every packet that is due back into the TUN.
void release(Link& l) {
  std::uint64_t expirations = 0;
  [[maybe_unused]] auto r = ::read(l.timer, &expirations, sizeof expirations);
  const std::int64_t now = now_ns();
  for (int i = 0; i < kWriteBatch && !l.ring.empty(); ++i) {
    const auto p = l.ring.front();
    if (p.due_ns > now) break;
    const ssize_t n = ::write(l.fd, p.data, p.len);
    if (n < 0) {
      ++l.stats.write_errors;
    } else {
      ++l.stats.packets;
      l.stats.bytes += p.len;
      const std::int64_t late = now - p.due_ns;
      l.stats.late_sum_ns += late;
      l.stats.late_max_ns = std::max(l.stats.late_max_ns, late);
    }
    l.ring.pop();
  }
  arm(l);
}

}  // namespace

DelayLinkConfig parse_delay_link(std::string_view spec) {
  DelayLinkConfig c;
  bool have_dev = false;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw std::invalid_argument("delay link \"" + std::string(item) + "\": expected key=value");
    const std::string key(item.substr(0, eq));
    const std::string value(item.substr(eq + 1));
    if (key == "dev") {
      c.tun = value;
      have_dev = !value.empty();
    } else if (key == "delay") {
      c.delay_s = topology::parse_duration(value);
    } else if (key == "loss") {
      c.loss = topology::parse_fraction(value);
    } else if (key == "offload") {
      if (value != "on" && value != "off")
        throw std::invalid_argument("delay link: offload must be on or off, got \"" + value + "\"");
      c.offload = value == "on";
    } else if (key == "buffer") {
      c.buffer_bytes = topology::parse_size(value);
    } else {
      throw std::invalid_argument("delay link: unknown key \"" + key +
                                  "\"; expected dev, delay, loss, offload, buffer");
    }
  }
  if (!have_dev) throw std::invalid_argument("delay link: dev=TUN is required");
  return c;
}

std::string format_delay_link(const DelayLinkConfig& c) {
  std::ostringstream s;
  s << "dev=" << c.tun << ",delay=" << std::llround(c.delay_s * 1e9)
    << "ns,loss=" << std::setprecision(10) << c.loss << ",offload=" << (c.offload ? "on" : "off")
    << ",buffer=" << c.buffer_bytes;
  return s.str();
}

PacketRing::PacketRing(std::size_t bytes, std::size_t max_packets, std::size_t max_packet)
    : data_(std::make_unique_for_overwrite<std::byte[]>(bytes)),
      capacity_(bytes),
      max_packet_(max_packet),
      desc_(max_packets) {
  if (bytes < 2 * max_packet || max_packets == 0)
    throw std::invalid_argument("packet ring too small");
}

std::byte* PacketRing::reserve() {
  if (count_ == desc_.size()) return nullptr;
  if (count_ == 0) {
    tail_ = 0;
    reserved_ = 0;
    return data_.get();
  }
  const std::size_t head = desc_[first_].offset;
  if (tail_ > head) {  // held bytes are [head, tail): free space at the end, then at the start
    if (capacity_ - tail_ >= max_packet_) {
      reserved_ = tail_;
      return data_.get() + tail_;
    }
    if (head > max_packet_) {
      reserved_ = 0;
      return data_.get();
    }
    return nullptr;
  }
  // Wrapped: held bytes are [head, capacity) and [0, tail); free space is [tail, head).
  if (head - tail_ > max_packet_) {
    reserved_ = tail_;
    return data_.get() + tail_;
  }
  return nullptr;
}

void PacketRing::commit(std::size_t len, std::int64_t due_ns) {
  const std::size_t slot = (first_ + count_) % desc_.size();
  desc_[slot] = {reserved_, len, due_ns};
  ++count_;
  tail_ = reserved_ + len;
  bytes_ += len;
}

PacketRing::Packet PacketRing::front() const {
  const auto& d = desc_[first_];
  return {data_.get() + d.offset, d.len, d.due_ns};
}

void PacketRing::pop() {
  bytes_ -= desc_[first_].len;
  first_ = (first_ + 1) % desc_.size();
  --count_;
}

int run_delay_line(const std::vector<DelayLinkConfig>& configs, int ready_fd, int realtime_priority,
                   std::ostream& log) {
  std::vector<std::unique_ptr<Link>> links;
  int ep = -1, sigfd = -1;
  try {
    if (configs.empty()) throw std::runtime_error("no links given (--link dev=TUN,delay=...)");
    ::prctl(PR_SET_TIMERSLACK, 1UL);
    // A wire does not wait for the CPU: run real-time (the loop sleeps in
    // epoll_wait whenever nothing is due, so it takes only what the traffic needs).
    if (realtime_priority > 0) {
      sched_param sp{};
      sp.sched_priority = realtime_priority;
      if (::sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) == 0) {
        log << "delayline: scheduling SCHED_FIFO, priority " + std::to_string(realtime_priority) +
                   "\n";
      } else {
        const std::string why = std::strerror(errno);
        ::setpriority(PRIO_PROCESS, 0, -10);
        log << "delayline: cannot use SCHED_FIFO (" + why + "); running at nice -10\n";
      }
    }
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&mask, s);
    if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0)
      throw std::runtime_error(errno_text("sigprocmask"));
    sigfd = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (sigfd < 0 || ep < 0) throw std::runtime_error(errno_text("epoll/signalfd"));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = ~std::uint64_t{0};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, sigfd, &ev);
    for (const auto& c : configs) {
      auto l = std::make_unique<Link>(c);
      l->delay_ns = std::llround(c.delay_s * 1e9);
      l->loss_threshold = c.loss <= 0 ? 0 : static_cast<std::uint64_t>(std::ldexp(c.loss, 64));
      l->fd = open_tun(c);
      l->timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      if (l->timer < 0) throw std::runtime_error(errno_text("timerfd_create"));
      const std::uint64_t index = links.size();
      ev.data.u64 = index * 2;
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, l->fd, &ev) != 0)
        throw std::runtime_error(errno_text("epoll_ctl"));
      ev.data.u64 = index * 2 + 1;
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, l->timer, &ev) != 0)
        throw std::runtime_error(errno_text("epoll_ctl"));
      std::ostringstream line;  // one write per line (see print_stats)
      line << "delayline: " << c.tun << ": delay " << topology::format_duration(c.delay_s)
           << ", loss " << c.loss * 100 << " %, "
           << (c.offload ? "offloaded (GSO) packets" : "single packets") << ", ring "
           << topology::format_bytes(c.buffer_bytes) << "\n";
      log << line.str();
      links.push_back(std::move(l));
    }
    log.flush();
    if (ready_fd >= 0) {
      [[maybe_unused]] auto n = ::write(ready_fd, "ready\n", 6);
      ::close(ready_fd);
      ready_fd = -1;
    }
    std::uint64_t rng =
        static_cast<std::uint64_t>(now_ns()) ^ (static_cast<std::uint64_t>(::getpid()) << 32);
    epoll_event events[32];
    for (bool running = true; running;) {
      const int n = ::epoll_wait(ep, events, 32, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(errno_text("epoll_wait"));
      }
      for (int i = 0; i < n; ++i) {
        const std::uint64_t key = events[i].data.u64;
        if (key == ~std::uint64_t{0}) {
          signalfd_siginfo si{};
          while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            if (si.ssi_signo == SIGUSR1)
              print_stats(links, log);
            else
              running = false;
          }
          continue;
        }
        Link& l = *links[key / 2];
        if (key % 2 == 0)
          drain(l, rng);
        else
          release(l);
      }
    }
    log << "delayline: stopping\n";
    print_stats(links, log);
  } catch (const std::exception& e) {
    log << std::string("delayline: ") + e.what() + "\n";
    log.flush();
    if (ready_fd >= 0) {
      const std::string msg = std::string("error: ") + e.what() + "\n";
      [[maybe_unused]] auto n = ::write(ready_fd, msg.data(), msg.size());
      ::close(ready_fd);
    }
    for (auto& l : links) {
      if (l->fd >= 0) ::close(l->fd);
      if (l->timer >= 0) ::close(l->timer);
    }
    if (ep >= 0) ::close(ep);
    if (sigfd >= 0) ::close(sigfd);
    return 1;
  }
  for (auto& l : links) {
    ::close(l->fd);
    ::close(l->timer);
  }
  if (ep >= 0) ::close(ep);
  if (sigfd >= 0) ::close(sigfd);
  return 0;
}

}  // namespace gridbcast::testbed
