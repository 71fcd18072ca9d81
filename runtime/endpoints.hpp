// Rendezvous data shared by the launcher and the ranks (no Asio here).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gridbcast::runtime {

inline constexpr int kLanes = 2;  // logical lanes per rank (multilane uses two)

// Every rank's listening ports, index = rank, then lane.
using EndpointTable = std::vector<std::array<std::uint16_t, kLanes>>;

struct JobCredentials {
  std::uint64_t job_id = 0;
  std::vector<std::uint8_t> secret;
};

// 32 random bytes from OpenSSL, and their hex form (how secrets travel).
JobCredentials new_credentials();
std::string to_hex(const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> from_hex(const std::string& hex);  // throws on bad input

}  // namespace gridbcast::runtime
