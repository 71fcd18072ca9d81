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

}  // namespace gridbcast::lanes
