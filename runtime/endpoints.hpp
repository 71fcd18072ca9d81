// Rendezvous data shared by the launcher and the ranks (no Asio here).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gridbcast::runtime {

// Logical lanes a rank can have (topology::kMaxLanes; Grid::lane_count says how
// many it opens). Port slots past a rank's lane count are 0.
inline constexpr int kMaxLanes = 8;

// Every rank's listening ports, index = rank, then lane.
using LanePorts = std::array<std::uint16_t, kMaxLanes>;
using EndpointTable = std::vector<LanePorts>;

struct JobCredentials {
  std::uint64_t job_id = 0;
  std::vector<std::uint8_t> secret;
};

// 32 random bytes from OpenSSL, and their hex form (how secrets travel).
JobCredentials new_credentials();
std::string to_hex(const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> from_hex(const std::string& hex);  // throws on bad input

}  // namespace gridbcast::runtime
