// The userspace delay line: WAN latency and loss for kernels without netem.
//
// A router sends every packet bound for WAN link i into TUN device dly<i>
// (policy routing by input interface). The delay line reads it, stamps it with
// "now + one-way delay", keeps it in a ring, and writes it back to the same TUN
// when the time has come; the kernel then routes it out of the WAN veth
// (packets coming from the TUN do not match the policy rules, so they never
// loop). One process per router serves all of its TUNs: event-driven (epoll on
// the TUNs, one timerfd per TUN armed for the oldest packet, a signalfd), no
// polling, no allocation per packet, real-time scheduling. Packets are FIFO and the delay is
// constant per TUN, so the oldest packet is always the next one due.
//
// On links without loss the TUN carries offloaded (GSO) packets with a virtio
// header, up to 64 KiB each; a lossy link gets plain 1500-byte packets so that
// loss hits single segments as on a real WAN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace gridbcast::testbed {

struct DelayLinkConfig {
  std::string tun;
  double delay_s = 0;
  double loss = 0;  // fraction of packets dropped, [0, 1)
  bool offload = false;
  std::size_t buffer_bytes = 16u << 20;
};

// "dev=dly0,delay=10ms,loss=0.001,offload=on,buffer=16MiB" (units as in site-configs).
DelayLinkConfig parse_delay_link(std::string_view spec);
std::string format_delay_link(const DelayLinkConfig& c);

// Packets with their due times: a byte ring (each packet contiguous) plus a ring
// of descriptors. All memory is allocated once, up front.
class PacketRing {
 public:
  PacketRing(std::size_t bytes, std::size_t max_packets, std::size_t max_packet);
  // Room for one packet of up to max_packet bytes, or nullptr when full.
  std::byte* reserve();
  // Stores the packet just written at reserve() (len <= max_packet).
  void commit(std::size_t len, std::int64_t due_ns);

  struct Packet {
    const std::byte* data;
    std::size_t len;
    std::int64_t due_ns;
  };
  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  Packet front() const;
  void pop();
  std::size_t bytes_used() const { return bytes_; }
  std::size_t max_packet() const { return max_packet_; }

 private:
  struct Descriptor {
    std::size_t offset;
    std::size_t len;
    std::int64_t due_ns;
  };
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_;
  std::size_t max_packet_;
  std::vector<Descriptor> desc_;
  std::size_t first_ = 0, count_ = 0;  // descriptor ring
  std::size_t tail_ = 0;               // where the next packet goes
  std::size_t reserved_ = 0;           // offset handed out by reserve()
  std::size_t bytes_ = 0;              // payload bytes held
};

// Runs the delay line for these TUNs until SIGTERM, SIGINT or SIGHUP (SIGUSR1
// prints statistics). Writes "ready\n" to ready_fd (if >= 0) once every TUN is
// attached. With realtime_priority > 0 it runs SCHED_FIFO at that priority
// (falling back to nice -10), so bulk traffic on the same CPUs does not delay
// releases. Returns the exit status; errors go to `log`.
inline constexpr int kDelayLinePriority = 50;
int run_delay_line(const std::vector<DelayLinkConfig>& links, int ready_fd, int realtime_priority,
                   std::ostream& log);

}  // namespace gridbcast::testbed
