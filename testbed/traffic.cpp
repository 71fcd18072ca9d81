#include "testbed/traffic.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace gridbcast::testbed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kChunk = 256 * 1024;
constexpr int kMaxStreams = 256;

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

sockaddr_storage make_address(const std::string& host, std::uint16_t port, socklen_t& len) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res)
    throw std::runtime_error("\"" + host + "\" is not an IP address");
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  if (ss.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  return ss;
}

void set_timeout(int fd, int option, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

double seconds_since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string TrafficResult::json() const {
  // The same writer and rules as the command's --json (docs/JSON.md): numbers
  // only here, a rate that is not finite as null.
  const double bps = bits_per_second();
  nlohmann::ordered_json j;
  j["streams"] = streams;
  j["bytes"] = bytes;
  j["seconds"] =
      std::isfinite(seconds) ? nlohmann::ordered_json(seconds) : nlohmann::ordered_json(nullptr);
  j["bits_per_second"] =
      std::isfinite(bps) ? nlohmann::ordered_json(bps) : nlohmann::ordered_json(nullptr);
  j["stream_bytes"] = stream_bytes;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

TrafficResult TrafficResult::parse_json(const std::string& line) {
  try {
    const auto j = nlohmann::json::parse(line);
    TrafficResult r;
    r.streams = j.at("streams").get<int>();
    r.bytes = j.at("bytes").get<std::uint64_t>();
    r.seconds = j.at("seconds").is_null() ? 0 : j.at("seconds").get<double>();
    r.stream_bytes = j.at("stream_bytes").get<std::vector<std::uint64_t>>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("not a traffic result: \"" + line + "\" (" + e.what() + ")");
  }
}

int run_traffic_server(const TrafficServerOptions& o, std::ostream& out, std::ostream& err) {
  int lfd = -1;
  try {
    if (o.streams < 1 || o.streams > kMaxStreams)
      throw std::runtime_error("--streams must be 1..256");
    socklen_t len = 0;
    const auto addr = make_address(o.listen, o.port, len);
    lfd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) throw std::runtime_error(errno_text("socket"));
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), len) != 0)
      throw std::runtime_error(errno_text("bind " + o.listen + ":" + std::to_string(o.port)));
    if (::listen(lfd, kMaxStreams) != 0) throw std::runtime_error(errno_text("listen"));
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.timeout_s));
    struct Stream {
      std::uint64_t bytes = 0;  // in the measured window
      Clock::time_point last{};
      bool eof = false;
    };
    std::vector<Stream> streams(static_cast<size_t>(o.streams));
    std::vector<std::thread> threads;
    std::atomic<bool> stop{false};
    // The window opens `warmup` after the first connection: slow start and the
    // first losses stay out of the figure.
    Clock::time_point window{};
    auto receive = [&](int fd, Stream& s) {
      auto buf = std::make_unique_for_overwrite<char[]>(kChunk);
      set_timeout(fd, SO_RCVTIMEO, 0.5);
      while (!stop && Clock::now() < deadline) {
        const ssize_t n = ::recv(fd, buf.get(), kChunk, 0);
        if (n > 0) {
          const auto now = Clock::now();
          if (now >= window) {
            s.bytes += static_cast<std::uint64_t>(n);
            s.last = now;
          }
        } else if (n == 0) {
          s.eof = true;
          break;
        } else if (errno != EAGAIN && errno != EINTR) {
          break;
        }
      }
      ::close(fd);
    };
    int accepted = 0;
    while (accepted < o.streams) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (accepted == 0)
        window = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(o.warmup_s));
      threads.emplace_back(receive, fd, std::ref(streams[static_cast<size_t>(accepted)]));
      ++accepted;
    }
    for (auto& t : threads) t.join();
    stop = true;
    ::close(lfd);
    lfd = -1;
    if (accepted < o.streams)
      throw std::runtime_error("only " + std::to_string(accepted) + " of " +
                               std::to_string(o.streams) + " streams connected within " +
                               std::to_string(o.timeout_s) + " s");
    TrafficResult r;
    r.streams = o.streams;
    Clock::time_point last{};
    bool all_eof = true;
    for (const auto& s : streams) {
      r.bytes += s.bytes;
      r.stream_bytes.push_back(s.bytes);
      all_eof &= s.eof;
      last = std::max(last, s.last);
    }
    if (!all_eof) throw std::runtime_error("the session did not finish within the timeout");
    if (r.bytes == 0)
      throw std::runtime_error("nothing arrived after the warm-up; send for longer than --warmup");
    r.seconds = seconds_since(window, last);
    out << r.json() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    if (lfd >= 0) ::close(lfd);
    err << "gridbcast testbed traffic server: " << e.what() << "\n";
    return 1;
  }
}

int run_traffic_client(const TrafficClientOptions& o, std::ostream& out, std::ostream& err) {
  try {
    if (o.streams < 1 || o.streams > kMaxStreams)
      throw std::runtime_error("--streams must be 1..256");
    if (o.seconds <= 0 || o.seconds > 600)
      throw std::runtime_error("--seconds must be in (0, 600]");
    socklen_t len = 0, blen = 0;
    const auto addr = make_address(o.connect, o.port, len);
    sockaddr_storage baddr{};
    if (!o.bind.empty()) baddr = make_address(o.bind, 0, blen);

    auto open_stream = [&]() {
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(o.connect_timeout_s));
      for (;;) {
        const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) throw std::runtime_error(errno_text("socket"));
        if (!o.congestion.empty() &&
            ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o.congestion.c_str(),
                         static_cast<socklen_t>(o.congestion.size())) != 0) {
          ::close(fd);
          throw std::runtime_error(errno_text("congestion control \"" + o.congestion + "\""));
        }
        if (o.rate_bps > 0) {
          const std::uint64_t bytes_per_s = static_cast<std::uint64_t>(o.rate_bps / 8);
          ::setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &bytes_per_s, sizeof bytes_per_s);
        }
        if (blen && ::bind(fd, reinterpret_cast<const sockaddr*>(&baddr), blen) != 0) {
          ::close(fd);
          throw std::runtime_error(errno_text("bind " + o.bind));
        }
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
        const int e = errno;
        ::close(fd);
        if ((e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH) ||
            Clock::now() >= deadline) {
          errno = e;
          throw std::runtime_error(
              errno_text("connect to " + o.connect + ":" + std::to_string(o.port)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    };

    std::vector<int> fds;
    try {
      for (int i = 0; i < o.streams; ++i) fds.push_back(open_stream());
    } catch (...) {
      for (int fd : fds) ::close(fd);
      throw;
    }
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.seconds));
    std::vector<std::uint64_t> sent(fds.size(), 0);
    std::vector<std::string> errors(fds.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < fds.size(); ++i) {
      threads.emplace_back([&, i] {
        const int fd = fds[i];
        std::vector<char> buf(kChunk);
        for (size_t k = 0; k < buf.size(); ++k) buf[k] = static_cast<char>(k * 7 + i);
        set_timeout(fd, SO_SNDTIMEO, 0.2);
        while (Clock::now() < end) {
          const ssize_t n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
          if (n > 0)
            sent[i] += static_cast<std::uint64_t>(n);
          else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            errors[i] = errno_text("send");
            break;
          }
        }
        ::shutdown(fd, SHUT_WR);
        // Wait (bounded) for the server to read everything and close.
        set_timeout(fd, SO_RCVTIMEO, 0.5);
        char c;
        for (int k = 0; k < 120 && ::recv(fd, &c, 1, 0) < 0 && (errno == EAGAIN || errno == EINTR);
             ++k) {
        }
        ::close(fd);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (!e.empty()) throw std::runtime_error(e);
    TrafficResult r;
    r.streams = o.streams;
    r.stream_bytes = sent;
    for (auto b : sent) r.bytes += b;
    r.seconds = seconds_since(start, Clock::now());
    out << r.json() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    err << "gridbcast testbed traffic client: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace gridbcast::testbed
