// A small TCP traffic tool for measuring the emulation (`gridbcast testbed
// traffic server|client`, hidden): N parallel streams for a few seconds; the
// server measures what arrived and prints one JSON line. Blocking sockets, one
// thread per stream, every wait bounded.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace gridbcast::testbed {

struct TrafficServerOptions {
  std::string listen = "0.0.0.0";
  std::uint16_t port = 5201;
  int streams = 1;        // connections to accept
  double timeout_s = 60;  // the whole session
  double warmup_s = 0;    // measure only from this long after the first connection
};

struct TrafficClientOptions {
  std::string connect;  // server address
  std::uint16_t port = 5201;
  std::string bind;  // local address (a lane's NIC), optional
  int streams = 1;
  double seconds = 3;
  double rate_bps = 0;     // per-stream pacing (SO_MAX_PACING_RATE), 0 = none
  std::string congestion;  // TCP congestion control, e.g. "cubic"; "" = system default
  double connect_timeout_s = 10;
};

struct TrafficResult {
  int streams = 0;
  std::uint64_t bytes = 0;  // what arrived in the measured window
  double seconds = 0;       // the measured window
  std::vector<std::uint64_t> stream_bytes;
  double bits_per_second() const {
    return seconds > 0 ? static_cast<double>(bytes) * 8 / seconds : 0;
  }
  std::string json() const;
  static TrafficResult parse_json(const std::string& line);  // throws on malformed input
};

// Both print the result as one JSON line on `out`; errors go to `err`.
int run_traffic_server(const TrafficServerOptions& o, std::ostream& out, std::ostream& err);
int run_traffic_client(const TrafficClientOptions& o, std::ostream& out, std::ostream& err);

}  // namespace gridbcast::testbed
