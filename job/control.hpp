// The control channel between the launcher and its ranks: an authenticated TCP
// connection (the lanes handshake, lane kControlLane) carrying the sealed
// frames of job/protocol.hpp. Internal to job/ (Asio in the interface).
#pragma once

#include <memory>
#include <string>

#include "job/protocol.hpp"
#include "lanes/net.hpp"

namespace gridbcast::job::control {

// One end of a control connection: the socket and its Sealer. Writes must not
// overlap (one writer per socket), nor reads.
struct Channel {
  lanes::tcp::socket socket;
  Sealer sealer;
  Direction out;     // the direction of what this end sends
  std::string peer;  // "the launcher", "rank 3 (a4)"

  Direction in() const {
    return out == Direction::kToRank ? Direction::kToLauncher : Direction::kToRank;
  }
};

asio::awaitable<void> send_body(Channel& c, const std::string& body);
// The next frame's body, its tag checked. Throws lanes::NetworkError on end of
// file or a socket error, ProtocolError on a frame over kMaxFrameBytes or a bad tag.
asio::awaitable<std::string> receive_body(Channel& c);

}  // namespace gridbcast::job::control
