// <linux/tcp.h> for the whole struct tcp_info; it must not meet
// <netinet/tcp.h> (which Asio includes) in one translation unit.
#include "lanes/tcp_info.hpp"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>

namespace gridbcast::lanes {

std::optional<std::uint64_t> tcp_bytes_received(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  // An older kernel fills a shorter struct: the field is not there.
  if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    return std::nullopt;
  return info.tcpi_bytes_received;
}

std::optional<TcpSendState> tcp_send_state(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len < offsetof(tcp_info, tcpi_notsent_bytes) + sizeof info.tcpi_notsent_bytes ||
      len < offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked ||
      len < offsetof(tcp_info, tcpi_rwnd_limited) + sizeof info.tcpi_rwnd_limited)
    return std::nullopt;
  int queued = 0;  // unacknowledged and unsent together
  if (::ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0) queued = 0;
  const auto q = static_cast<std::uint64_t>(queued);
  return TcpSendState{info.tcpi_bytes_acked, info.tcpi_notsent_bytes, info.tcpi_rwnd_limited,
                      q > info.tcpi_notsent_bytes ? q - info.tcpi_notsent_bytes : 0};
}

}  // namespace gridbcast::lanes
