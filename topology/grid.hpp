// The Grid model: sites, nodes (ranks), NICs and WAN links, as validated from a
// site-config. Pure data; no sockets, no YAML types in this header.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gridbcast::topology {

// Where something was written in a site-config; line and column are 1-based.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const;  // "file:line:col" (or just "file" when line is 0)
};

// A configuration error: says where and what was expected.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(Location where, const std::string& what);
  const Location& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  Location where_;
  std::string message_;
};

// Logical lanes per rank: 1..kMaxLanes (a node with more NICs uses the first 8).
inline constexpr int kMaxLanes = 8;

// TCP payload per bit a NIC or shaper counts (Ethernet, IPv4 and TCP headers
// at a 1500-byte MTU; HTB and most NIC rates count headers): the cost model
// prices payload with it, and the probe turns measured payload into a NIC rate.
inline constexpr double kPayloadEfficiency = 1448.0 / 1514.0;

struct Nic {
  std::string address;       // IPv4 or IPv6 literal this NIC's lane binds to
  double bandwidth_bps = 0;  // bits per second, each direction
  std::string device;        // optional interface name (testbed uses it)
};

// One node runs one rank. Its logical lanes go to its NICs in proportion to
// their bandwidth (lane_nic_index), so a one-NIC node still has every lane the
// grid's plans use (k sockets, one NIC), and NICs of equal speed take lanes in
// turn: lane L on NIC L mod nics.size().
struct Node {
  std::string name;
  std::string host;  // where the ssh backend reaches it; defaults to name
  int site = 0;      // index into Grid::sites
  std::vector<Nic> nics;
  Location where;

  // Lanes 0, 1, ... are dealt one at a time, each to the NIC that would give it
  // the most bandwidth (NIC bandwidth / (lanes on it + 1); ties: the NIC with
  // fewer lanes, then the lower index). Lane L's NIC depends only on lanes
  // 0..L-1, never on the lane count.
  int lane_nic_index(int lane) const;
  const Nic& lane_nic(int lane) const { return nics[static_cast<size_t>(lane_nic_index(lane))]; }
  // The bandwidth lane L can count on at this node when `lanes` lanes are open:
  // its NIC's bandwidth over the lanes that share it.
  double lane_bandwidth_bps(int lane, int lanes) const;
  double total_bandwidth_bps() const;  // each direction
};

// Whether a site's network carries IPv4 multicast, and where its groups may
// live (the site entry's `multicast:`, docs/TOPOLOGY.md). One group per
// communicator is drawn from [network, network + 2^(32 - prefix)) (lanes/
// multicast.hpp); addresses here are IPv4 in host byte order.
inline constexpr std::uint32_t kDefaultMulticastNetwork = 0xEF000000;  // 239.0.0.0
inline constexpr int kDefaultMulticastPrefix = 8;  // administratively scoped (RFC 2365)
inline constexpr int kDefaultMulticastTtl = 1;     // never past the site's first router
// The largest IPv4 packet every member's lane takes, when the site says so
// (jumbo frames); 0 means unknown (Ethernet's 1500 off loopback).
inline constexpr int kMinMulticastMtu = 576;  // every IPv4 host takes this (RFC 791)
inline constexpr int kMaxMulticastMtu = 65535;

struct SiteMulticast {
  bool enabled = false;
  std::uint32_t network = kDefaultMulticastNetwork;
  int prefix = kDefaultMulticastPrefix;  // 4..32, inside 224.0.0.0/4, never 224.0.0.0/24
  int ttl = kDefaultMulticastTtl;        // 1..255
  std::uint16_t port = 0;                // 0: chosen per communicator with its group
  int mtu = 0;                           // 0 or kMinMulticastMtu..kMaxMulticastMtu
  Location where;                        // of the `multicast` value

  // "239.0.0.0/8"
  std::string range() const;
  // Addresses in the range: 2^(32 - prefix).
  std::uint64_t size() const { return std::uint64_t{1} << (32 - prefix); }
};

struct Site {
  std::string name;
  std::vector<int> ranks;  // ranks of this site's nodes, ascending
  Location where;
  SiteMulticast multicast{};
  // One hop between two of its nodes, one way (the site entry's `latency`,
  // e.g. what `gridbcast probe` measured); 0: unknown, the cost model's default.
  double latency_s = 0;
};

// The most parallel TCP streams a WAN link may have (`streams:`, --streams).
inline constexpr int kMaxWanStreams = 64;

struct WanLink {
  int site_a = 0;
  int site_b = 0;
  double latency_s = 0;      // one-way
  double bandwidth_bps = 0;  // each direction
  double loss = 0;           // fraction in [0, 1)
  int streams = 1;           // parallel TCP streams per hop
  bool tls = false;
  std::string congestion;  // TCP congestion control of its streams; empty: Grid's
  Location where;
  // `max_rate`: what every stream of every transfer on this link may send
  // together, each direction (a share of a link others use too); 0: none.
  // Plans, the model and the bound see rate_bps(); the executor paces the
  // link's connections to their parts of it (topology/plan/pacing.hpp).
  double max_rate_bps = 0;

  // The rate plans may use: the bandwidth, or max_rate where that is lower.
  double rate_bps() const {
    return max_rate_bps > 0 && max_rate_bps < bandwidth_bps ? max_rate_bps : bandwidth_bps;
  }
};

// Ranks are numbered 0..P-1 in the order the file lists sites, then nodes within
// a site (after hostlist expansion). Rank 0 is the first node of the first site.
struct Grid {
  std::string name;
  std::string source;  // file it came from, or "<embedded default>"
  std::vector<Site> sites;
  std::vector<Node> nodes;  // index == rank
  std::vector<WanLink> wan;
  std::uint64_t segment_bytes = 0;  // pipelining unit; 0 = automatic
  std::string congestion;  // TCP congestion control (defaults.congestion); empty: the host's
  // Logical lanes per rank (defaults.lanes, or --lanes); 0 = automatic. Read it
  // through lane_count().
  int lanes = 0;
  // defaults.pace_lanes: in multilane plans, pace each connection to its part
  // of the declared NIC and WAN bandwidths (topology/plan/pacing.hpp). Off by
  // default: it trusts the bandwidths the topology declares.
  bool pace_lanes = false;
  // defaults.max_rate (or --max-rate): what each node may send in all, over
  // all its NICs and connections together; 0: no limit. Plans, the model and
  // the bound count a node's sending at no more than send_rate_bps(); the
  // executor paces a node's connections to their parts of it
  // (topology/plan/pacing.hpp).
  double max_rate_bps = 0;
  // defaults.segment_overhead: the time one segment costs a rank beyond its
  // bytes (a write or two reads, a wake-up), as the cost model charges it
  // (CostModel::segment_overhead_s); 0: the model's default. Where many ranks
  // share a host's cores (the emulated grid), it is that many times a
  // rank's own.
  double segment_overhead_s = 0;
  // defaults.hop_overhead: the software time a hop adds to a segment's way
  // beyond the wire and the per-segment work: the receiver's wake-up before
  // it can forward (CostModel::hop_overhead_s); 0: the model's default. It
  // does not hold a lane (other segments flow meanwhile), so it decides
  // small messages, where the number of hops does, and barely large ones.
  // Where many ranks share a host's cores (the emulated grid), a wake-up
  // waits for a core: measured there, it is the topology's to say.
  double hop_overhead_s = 0;
  // defaults.probe: `gridbcast launch` measures the network first (launch
  // --probe, topology/probe.hpp) and plans from what it measured.
  bool probe = false;

  int size() const { return static_cast<int>(nodes.size()); }
  int site_of(int rank) const { return nodes.at(static_cast<size_t>(rank)).site; }
  const WanLink* link_between(int a, int b) const;     // direct link or nullptr
  int site_named(const std::string& site_name) const;  // its index, or -1

  // Sites in multilane chain order from the given site: depth-first over the WAN
  // graph, neighbours in file order. Every site appears once.
  std::vector<int> site_chain(int from_site) const;
  // The WAN links on the fewest-hops path between two sites (empty if same site).
  std::vector<const WanLink*> wan_path(int a, int b) const;
  // Parallel streams for a transfer between two ranks: 1 inside a site, otherwise
  // the smallest stream count along the WAN path.
  int streams_between(int from_rank, int to_rank) const;
  // Whether data between two ranks must travel over TLS: they are in different
  // sites and some WAN link on the path between them says `tls: true`.
  bool tls_between(int from_rank, int to_rank) const;
  // Whether any of this rank's possible peers is reached over TLS.
  bool needs_tls(int rank) const;
  // The TCP congestion control for data between two ranks: between sites the
  // first link on the WAN path that names one, otherwise (and inside a site)
  // the grid's; empty: leave the host's default.
  std::string congestion_between(int from_rank, int to_rank) const;
  // Largest stream count any WAN link asks for (1 when there are none).
  int max_wan_streams() const;
  // The lanes every rank opens and multilane plans use: `lanes` when set, else
  // automatic_lane_count().
  int lane_count() const;
  // The k in 2..kMaxLanes that gives multilane the highest rate, k x the
  // smallest lane_bandwidth_bps(l, k) over every node and lane (each lane
  // carries M/k), the smallest such k on a tie: 2 for grids of one- and two-NIC
  // nodes of equal speeds (today's multilane), 4 for four equal NICs, 3 for a
  // 100 + 50 Mbit/s pair.
  int automatic_lane_count() const;
  // The pace for a multicast from `sender` inside its site on `lane`: the
  // slowest NIC that lane uses on the site's other nodes, which each receive
  // every datagram (the NIC's whole bandwidth; the chain's TCP shares it).
  // 0 when the sender is alone in its site.
  double multicast_pace_bps(int sender, int lane) const;
  // What `rank` can send in all: its NICs' total, or max_rate where lower.
  double send_rate_bps(int rank) const;
  // Whether a rate limit applies anywhere (max_rate, a WAN link's max_rate):
  // then the executor paces every plan's connections (link_paces).
  bool rate_limited() const;
};

}  // namespace gridbcast::topology
