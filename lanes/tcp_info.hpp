// What the kernel counts on a TCP socket (TCP_INFO), for measurements that
// must not depend on when the process happened to read: no Asio here.
#pragma once

#include <cstdint>
#include <optional>

namespace gridbcast::lanes {

// Payload bytes this socket has received so far (tcpi_bytes_received, Linux
// 4.1 and later), whether or not the process has read them yet; nullopt when
// the kernel does not say.
std::optional<std::uint64_t> tcp_bytes_received(int fd);

// A sending socket's state: payload bytes the peer acknowledged so far
// (tcpi_bytes_acked, Linux 4.1) and bytes the process wrote that the kernel
// has not yet sent (tcpi_notsent_bytes, Linux 4.6): a backlog, the link not
// taking what the sender has for it; and the microseconds so far in which
// the peer's receive window held the sending back (tcpi_rwnd_limited, Linux
// 4.10): the peer not reading, as opposed to the network not carrying;
// and the bytes sent but not yet acknowledged (SIOCOUTQ less the unsent):
// in flight, which a live network acknowledges within a round trip or a
// retransmission timeout. nullopt when the kernel does not say.
struct TcpSendState {
  std::uint64_t bytes_acked = 0;
  std::uint64_t notsent_bytes = 0;
  std::uint64_t rwnd_limited_us = 0;
  std::uint64_t unacked_bytes = 0;
};
std::optional<TcpSendState> tcp_send_state(int fd);

}  // namespace gridbcast::lanes
