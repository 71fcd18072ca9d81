// Rendezvous data shared by the launcher and the ranks (no Asio here).
#pragma once

#include <array>
#include <cstddef>
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

// What the kernel says of a rank's broadcast connections to one peer from
// one lane to another, its streams together (lanes::tcp_send_state): the
// bytes the peer acknowledged so far, and the bytes written that wait to be
// sent now (a backlog: the link does not take what the rank has for it),
// and the microseconds in which the peer's receive window held the streams
// back (the peer not reading), summed over its `streams`.
struct LinkSample {
  int peer = -1;
  int lane_from = 0;
  int lane_to = 0;
  int streams = 0;
  std::uint64_t bytes_acked = 0;
  std::uint64_t notsent_bytes = 0;
  std::uint64_t rwnd_limited_us = 0;
  std::uint64_t unacked_bytes = 0;  // sent, not yet acknowledged
  // No stream of the link is up yet: `streams` connections are being made
  // (a peer that never answers them is cut off, job/cut.hpp); the figures are 0.
  bool connecting = false;
};

struct JobCredentials {
  std::uint64_t job_id = 0;
  std::vector<std::uint8_t> secret;
};

// Drawn for every launch by whoever hands out the endpoint table (the
// launcher; the MPI provider's first member; tests' rendezvous) and given to
// every rank with it: it binds multicast datagram keys to this one run, since
// secret and job id may repeat (lanes/datagram.hpp). Never from the
// environment. All zero means none was drawn, and is refused.
inline constexpr size_t kRunNonceBytes = 16;
using RunNonce = std::array<std::uint8_t, kRunNonceBytes>;

// 32 random bytes from OpenSSL, and their hex form (how secrets travel).
JobCredentials new_credentials();
// 16 random bytes from OpenSSL's RAND_bytes, never all zero.
RunNonce new_run_nonce();
std::string to_hex(const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> from_hex(const std::string& hex);  // throws on bad input

}  // namespace gridbcast::runtime
