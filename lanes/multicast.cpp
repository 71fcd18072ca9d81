#include "lanes/multicast.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <vector>

#include "lanes/net.hpp"

namespace gridbcast::lanes {
namespace {

using udp = asio::ip::udp;

std::uint32_t random_u32() {
  std::uint32_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1)
    throw std::runtime_error("OpenSSL RAND_bytes failed");
  return v;
}

asio::ip::address_v4 v4(const std::string& text, const char* what) {
  std::error_code ec;
  const auto a = asio::ip::make_address_v4(text, ec);
  if (ec) throw NetworkError(std::string(what) + " \"" + text + "\" is not an IPv4 address");
  return a;
}

std::string where(const udp::endpoint& e) {
  return e.address().to_string() + ":" + std::to_string(e.port());
}

bool hostile(Rejection r) {
  return r != Rejection::kDuplicate && r != Rejection::kOtherBroadcast &&
         r != Rejection::kTooFarAhead && r != Rejection::kNone;
}

// Broadcast ids in modular order (a group's start is a hash, so its ids may
// wrap past 2^64): `a` comes after `b` when the step from b to a is below 2^63.
bool after(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t step = a - b;
  return step != 0 && step < (std::uint64_t{1} << 63);
}
std::uint64_t later(std::uint64_t a, std::uint64_t b) {
  return after(a, b) ? a : b;
}

}  // namespace

std::string MulticastGroup::address_string() const {
  return asio::ip::address_v4(address).to_string();
}

std::string MulticastGroup::str() const {
  return address_string() + ":" + std::to_string(port);
}

namespace {

// Checks the range and returns its host mask.
std::uint32_t group_range_mask(std::uint32_t network, int prefix) {
  const std::uint32_t mask = prefix <= 0 ? 0 : ~std::uint32_t{0} << (32 - std::min(prefix, 32));
  if (prefix < 4 || prefix > 32 || (network & 0xF0000000u) != 0xE0000000u || (network & ~mask) != 0)
    throw std::invalid_argument(
        "not an IPv4 multicast range: " + asio::ip::address_v4(network).to_string() + "/" +
        std::to_string(prefix));
  const bool link_local =
      prefix <= 24 ? (0xE0000000u & mask) == network : (network & 0xFFFFFF00u) == 0xE0000000u;
  if (link_local)
    throw std::invalid_argument("multicast range " + asio::ip::address_v4(network).to_string() +
                                "/" + std::to_string(prefix) + " overlaps 224.0.0.0/24");
  return mask;
}

// The range's size is a power of two, and so is the dynamic port range's:
// masking uniform words keeps them uniform.
MulticastGroup pick_group(std::uint32_t network, std::uint32_t mask, std::uint16_t port,
                          std::uint32_t address_word, std::uint32_t port_word) {
  MulticastGroup g;
  g.address = network | (address_word & ~mask);
  g.port = port != 0 ? port : static_cast<std::uint16_t>(kFirstDynamicPort + (port_word & 0x3fff));
  return g;
}

}  // namespace

MulticastGroup choose_group(std::uint32_t network, int prefix, std::uint16_t port) {
  const std::uint32_t mask = group_range_mask(network, prefix);
  return pick_group(network, mask, port, random_u32(), random_u32());
}

MulticastGroup derive_group(const DatagramKey& key, std::uint32_t network, int prefix,
                            std::uint16_t port, std::uint32_t site) {
  const std::uint32_t mask = group_range_mask(network, prefix);
  static constexpr std::string_view kLabel = "gridbcast multicast group v1";
  std::vector<unsigned char> input(kLabel.begin(), kLabel.end());
  for (int shift = 24; shift >= 0; shift -= 8)
    input.push_back(static_cast<unsigned char>(site >> shift));
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), input.data(), input.size(),
           out.data(), &len) == nullptr ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  auto word = [&](size_t at) {
    return std::uint32_t{out[at]} << 24 | std::uint32_t{out[at + 1]} << 16 |
           std::uint32_t{out[at + 2]} << 8 | std::uint32_t{out[at + 3]};
  };
  return pick_group(network, mask, port, word(0), word(4));
}

size_t interface_mtu(const std::string& address) {
  in_addr want{};
  if (::inet_pton(AF_INET, address.c_str(), &want) != 1) return 0;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return 0;
  // The interface with exactly this address, else the one whose subnet holds
  // it (127.0.1.1 is loopback's without being configured on it).
  std::string name, subnet;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr_t a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    if (a == want.s_addr) {
      name = i->ifa_name;
      break;
    }
    if (i->ifa_netmask != nullptr && subnet.empty()) {
      const in_addr_t m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
      if (m != 0 && (a & m) == (want.s_addr & m)) subnet = i->ifa_name;
    }
  }
  if (name.empty()) name = subnet;
  ::freeifaddrs(list);
  if (name.empty() || name.size() >= IFNAMSIZ) return 0;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq req{};
  std::memcpy(req.ifr_name, name.c_str(), name.size() + 1);
  const int rc = ::ioctl(fd, SIOCGIFMTU, &req);
  ::close(fd);
  return rc == 0 && req.ifr_mtu > 0 ? static_cast<size_t>(req.ifr_mtu) : 0;
}

// ---------------------------------------------------------------------------
// Receiver

struct MulticastReceiver::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, ReceiverOptions o)
      : socket(io),
        options(std::move(o)),
        log("multicast " + (options.group.empty() ? options.interface_address : options.group),
            options.print),
        floor(options.first_broadcast_id) {}

  void open() {
    const auto iface = v4(options.interface_address, "interface address");
    socket.open(udp::v4());
    // Several communicators (or ranks sharing a host) may bind one port; the
    // group address they bind to keeps their traffic apart.
    socket.set_option(udp::socket::reuse_address(true));
    socket.set_option(asio::socket_base::receive_buffer_size(options.receive_buffer_bytes));
    if (options.group.empty()) {
      socket.bind(udp::endpoint(iface, options.port));
    } else {
      const auto group = v4(options.group, "multicast group");
      if (!group.is_multicast())
        throw NetworkError("\"" + options.group + "\" is not a multicast group");
      socket.bind(udp::endpoint(group, options.port));
      // Only the groups this socket joined, never another socket's on the host.
      const int off = 0;
      if (::setsockopt(socket.native_handle(), IPPROTO_IP, IP_MULTICAST_ALL, &off, sizeof off) != 0)
        throw NetworkError("IP_MULTICAST_ALL: " +
                           std::error_code(errno, std::system_category()).message());
      socket.set_option(asio::ip::multicast::join_group(group, iface));
    }
    asio::socket_base::receive_buffer_size granted;
    socket.get_option(granted);
    receive_buffer = granted.value();
    port = socket.local_endpoint().port();
    buffer.resize(kMaxDatagramBytes + 1);
  }

  void post_receive() {
    socket.async_receive_from(
        asio::buffer(buffer), from,
        [self = shared_from_this()](std::error_code ec, size_t n) { self->on_datagram(ec, n); });
  }

  void on_datagram(std::error_code ec, size_t n) {
    if (ec == asio::error::operation_aborted || !socket.is_open()) return;
    if (ec) {
      // A UDP receive error (e.g. an ICMP report on a unicast socket) ends
      // nothing: note it within the rate limit and keep receiving; one that
      // repeats without a datagram between is not transient, and would spin.
      log.note("receive failed: " + ec.message());
      if (++errors_in_a_row >= kMaxErrorsInARow) {
        log.note("receiving stopped after " + std::to_string(errors_in_a_row) +
                 " failures in a row; the chain must bring every fragment");
        return;
      }
    } else {
      errors_in_a_row = 0;
      ++received;
      handle(std::span<const std::uint8_t>(buffer.data(), n));
    }
    post_receive();
  }

  void count(Rejection r, const std::string& why) {
    ++counts[static_cast<size_t>(r)];
    if (hostile(r))
      log.reject(std::string(rejection_name(r)) + " datagram from " + where(from) + ": " + why);
  }

  void handle(std::span<const std::uint8_t> datagram) {
    const DecodedFragment d =
        decode_fragment(datagram, options.key, options.job_id, options.max_message_bytes);
    if (!d.ok()) return count(d.rejection, d.why);
    const std::uint64_t id = d.header.broadcast_id;
    if (assembler && id == assembler->broadcast_id()) return apply(d);
    // Past the expected one (or, between broadcasts, from the next on): keep,
    // within the window. Beyond it the datagram is dropped rather than held
    // for a broadcast that may never come here; the ring brings its bytes.
    if (after(id, floor) || (!assembler && id == floor)) {
      if (id - floor > options.window)
        return count(Rejection::kTooFarAhead,
                     "broadcast id " + std::to_string(id) + " is " + std::to_string(id - floor) +
                         " past the expected " + std::to_string(floor) + ", the window is " +
                         std::to_string(options.window));
      if (early_bytes + datagram.size() <= options.early_bytes) {
        early.emplace_back(datagram.begin(), datagram.end());
        early_bytes += datagram.size();
        return;
      }
      return count(Rejection::kOtherBroadcast,
                   "broadcast id " + std::to_string(id) + " before its turn, and " +
                       std::to_string(early_bytes) + " bytes are kept already");
    }
    count(Rejection::kOtherBroadcast, "broadcast id " + std::to_string(id) + " is over here");
  }

  void apply(const DecodedFragment& d) {
    const bool was_complete = assembler->complete();
    const FragmentAssembler::Outcome out = assembler->accept(d);
    if (!out.ok()) return count(out.rejection, out.why);
    ++delivered;
    if (on_fragment) on_fragment(d.header.offset(), d.header.payload_bytes);
    if (!was_complete && assembler->complete() && on_complete) {
      auto done = std::move(on_complete);
      on_complete = nullptr;
      done();
    }
  }

  void expect(std::uint64_t id, std::span<std::uint8_t> buf, std::function<void()> done,
              OnFragment each) {
    assembler.emplace(options.key, options.job_id, id, buf);
    on_complete = std::move(done);
    on_fragment = std::move(each);
    floor = later(id, floor);
    // Kept datagrams: this broadcast's are applied, older ones are stale now.
    std::deque<std::vector<std::uint8_t>> keep;
    size_t keep_bytes = 0;
    std::deque<std::vector<std::uint8_t>> mine;
    for (auto& d : early) {
      const DecodedFragment f =
          decode_fragment(d, options.key, options.job_id, options.max_message_bytes);
      if (f.header.broadcast_id == id) {
        mine.push_back(std::move(d));
      } else if (after(f.header.broadcast_id, id)) {
        keep_bytes += d.size();
        keep.push_back(std::move(d));
      } else {
        count(Rejection::kOtherBroadcast,
              "kept broadcast id " + std::to_string(f.header.broadcast_id) + " went stale");
      }
    }
    early = std::move(keep);
    early_bytes = keep_bytes;
    for (const auto& d : mine) {
      if (!assembler || assembler->broadcast_id() != id) break;  // on_complete replaced it
      apply(decode_fragment(d, options.key, options.job_id, options.max_message_bytes));
    }
  }

  void finish() {
    if (assembler) floor = later(assembler->broadcast_id() + 1, floor);
    assembler.reset();
    on_complete = nullptr;
    on_fragment = nullptr;
  }

  void pass(std::uint64_t id) {
    if (assembler) return;
    floor = later(id + 1, floor);
    std::deque<std::vector<std::uint8_t>> keep;
    size_t keep_bytes = 0;
    for (auto& d : early) {
      const DecodedFragment f =
          decode_fragment(d, options.key, options.job_id, options.max_message_bytes);
      if (f.header.broadcast_id == floor || after(f.header.broadcast_id, floor)) {
        keep_bytes += d.size();
        keep.push_back(std::move(d));
      } else {
        ++counts[static_cast<size_t>(Rejection::kOtherBroadcast)];
      }
    }
    early = std::move(keep);
    early_bytes = keep_bytes;
  }

  void close() {
    std::error_code ignored;
    socket.close(ignored);
  }

  udp::socket socket;
  ReceiverOptions options;
  RejectionLog log;
  std::vector<std::uint8_t> buffer;
  udp::endpoint from;
  std::uint16_t port = 0;
  int receive_buffer = 0;
  std::optional<FragmentAssembler> assembler;
  std::function<void()> on_complete;
  OnFragment on_fragment;
  std::uint64_t floor = 0;  // broadcast ids before it are over (modular order)
  std::deque<std::vector<std::uint8_t>> early;
  size_t early_bytes = 0;
  std::uint64_t received = 0;
  std::uint64_t delivered = 0;
  RejectionCounts counts{};
  static constexpr int kMaxErrorsInARow = 64;
  int errors_in_a_row = 0;
};

std::unique_ptr<MulticastReceiver> MulticastReceiver::open(asio::io_context& io,
                                                           ReceiverOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  try {
    impl->open();
  } catch (const std::system_error& e) {
    throw NetworkError("multicast receiver on " +
                       (impl->options.group.empty()
                            ? impl->options.interface_address
                            : impl->options.group + " via " + impl->options.interface_address) +
                       ":" + std::to_string(impl->options.port) + ": " + e.what());
  }
  impl->post_receive();
  return std::unique_ptr<MulticastReceiver>(new MulticastReceiver(std::move(impl)));
}

MulticastReceiver::~MulticastReceiver() {
  close();
}
std::uint16_t MulticastReceiver::port() const {
  return impl_->port;
}
int MulticastReceiver::receive_buffer_bytes() const {
  return impl_->receive_buffer;
}
void MulticastReceiver::expect(std::uint64_t broadcast_id, std::span<std::uint8_t> buffer,
                               std::function<void()> on_complete, OnFragment on_fragment) {
  impl_->expect(broadcast_id, buffer, std::move(on_complete), std::move(on_fragment));
}
void MulticastReceiver::finish() {
  impl_->finish();
}
void MulticastReceiver::pass(std::uint64_t broadcast_id) {
  impl_->pass(broadcast_id);
}
const FragmentAssembler* MulticastReceiver::current() const {
  return impl_->assembler ? &*impl_->assembler : nullptr;
}
std::uint64_t MulticastReceiver::received() const {
  return impl_->received;
}
std::uint64_t MulticastReceiver::delivered() const {
  return impl_->delivered;
}
std::uint64_t MulticastReceiver::rejected(Rejection reason) const {
  return impl_->counts[static_cast<size_t>(reason)];
}
std::uint64_t MulticastReceiver::rejected_total() const {
  std::uint64_t n = 0;
  for (const auto c : impl_->counts) n += c;
  return n;
}
size_t MulticastReceiver::early_held() const {
  return impl_->early.size();
}
const RejectionLog& MulticastReceiver::log() const {
  return impl_->log;
}
void MulticastReceiver::close() {
  impl_->close();
}

// ---------------------------------------------------------------------------
// Sender

struct MulticastSender::Impl : std::enable_shared_from_this<Impl> {
  using Clock = std::chrono::steady_clock;

  Impl(asio::io_context& io, SenderOptions o) : socket(io), timer(io), options(std::move(o)) {}

  void open() {
    const auto iface = v4(options.interface_address, "interface address");
    const auto to = v4(options.destination, "destination");
    if (options.ttl < 1 || options.ttl > 255)
      throw std::invalid_argument("multicast TTL " + std::to_string(options.ttl) +
                                  " is not in 1..255");
    if (options.rate_bps < 0) throw std::invalid_argument("negative pace");
    if (options.path_mtu == 0) {
      options.path_mtu = interface_mtu(options.interface_address);
      if (options.path_mtu == 0) options.path_mtu = kDefaultPathMtu;
    }
    fragment = fragment_bytes_for_mtu(options.path_mtu);
    socket.open(udp::v4());
    socket.bind(udp::endpoint(iface, 0));  // the NIC's address is the source
    if (to.is_multicast()) {
      socket.set_option(asio::ip::multicast::outbound_interface(iface));
      socket.set_option(asio::ip::multicast::hops(options.ttl));
      socket.set_option(asio::ip::multicast::enable_loopback(options.loopback));
    }
    destination = udp::endpoint(to, options.port);
    const size_t full = (kDatagramOverhead + fragment + kIpv4UdpHeaderBytes) * 8;
    capacity = static_cast<double>(options.burst_bytes != 0 ? options.burst_bytes * 8 : 2 * full);
    capacity = std::max(capacity, static_cast<double>(full));  // one datagram always fits
    tokens = capacity;
    last = Clock::now();
  }

  void send(std::uint64_t id, std::span<const std::uint8_t> msg,
            std::function<void(const std::string&)> done, std::function<bool(std::uint32_t)> inc,
            Ready gate) {
    if (busy) throw std::logic_error("MulticastSender::send while a send is running");
    layout = fragment_layout(msg.size(), fragment);  // may throw: before anything changes
    busy = true;
    ++generation;
    broadcast_id = id;
    message = msg;
    next = 0;
    on_done = std::move(done);
    include = std::move(inc);
    ready = std::move(gate);
    step();
  }

  // Sends the next fragment the bucket allows, or arms the timer for it, or
  // parks until resume() when the fragment is not ready yet.
  void step() {
    waiting = false;
    while (next < layout.count && include && !include(next)) ++next;
    if (next >= layout.count) return finish_send({});
    const std::uint32_t payload = layout.payload(next);
    if (ready && !ready(layout.offset(next), payload)) {
      waiting = true;
      return;
    }
    const double bits =
        static_cast<double>((kDatagramOverhead + payload + kIpv4UdpHeaderBytes) * 8);
    const std::uint64_t gen = generation;
    if (options.rate_bps > 0) {
      const auto now = Clock::now();
      tokens = std::min(
          capacity, tokens + options.rate_bps * std::chrono::duration<double>(now - last).count());
      last = now;
      if (tokens < bits) {
        const auto wait = std::chrono::duration<double>((bits - tokens) / options.rate_bps);
        timer.expires_after(std::chrono::duration_cast<Clock::duration>(wait) +
                            std::chrono::microseconds(1));
        timer.async_wait([self = shared_from_this(), gen](std::error_code ec) {
          if (gen != self->generation) return;  // cancelled, maybe a new send since
          if (ec)
            return self->finish_send(ec == asio::error::operation_aborted
                                         ? "multicast send cancelled"
                                         : "pacing timer: " + ec.message());
          self->step();
        });
        return;
      }
      tokens -= bits;
    }
    const FragmentHeader h = fragment_header(options.job_id, broadcast_id, layout, next);
    // Each datagram in flight owns its bytes: a cancel() and a new send may
    // come before the kernel took this one.
    auto bytes = std::make_shared<std::vector<std::uint8_t>>(kDatagramOverhead + payload);
    const size_t n = encode_fragment(
        h, message.subspan(static_cast<size_t>(layout.offset(next)), payload), options.key, *bytes);
    socket.async_send_to(asio::buffer(bytes->data(), n), destination,
                         [self = shared_from_this(), gen, bytes](std::error_code ec, size_t sent) {
                           if (gen != self->generation) return;
                           // A full device queue loses this datagram only
                           // (the chain brings it); anything else ends the send.
                           if (ec == asio::error::no_buffer_space) {
                             ++self->dropped;
                             ++self->next;
                             return self->step();
                           }
                           if (ec)
                             return self->finish_send("multicast send to " +
                                                      where(self->destination) + ": " +
                                                      ec.message());
                           ++self->datagrams;
                           if (self->sent_callback) self->sent_callback();
                           self->wire_bytes += sent + kIpv4UdpHeaderBytes;
                           ++self->next;
                           self->step();
                         });
  }

  void resume() {
    if (busy && waiting) step();
  }

  void cancel() {
    if (!busy) return;
    ++generation;  // completions of this send do nothing from here on
    timer.cancel();
    busy = false;
    waiting = false;
    on_done = nullptr;
    include = nullptr;
    ready = nullptr;
    message = {};
  }

  void finish_send(const std::string& error) {
    busy = false;
    waiting = false;
    auto done = std::move(on_done);
    on_done = nullptr;
    include = nullptr;
    ready = nullptr;
    message = {};
    if (done) done(error);
  }

  void close() {
    std::error_code ignored;
    timer.cancel();
    socket.close(ignored);
  }

  udp::socket socket;
  asio::steady_timer timer;
  SenderOptions options;
  udp::endpoint destination;
  std::uint32_t fragment = 0;
  double capacity = 0;  // bits
  double tokens = 0;
  Clock::time_point last;
  bool busy = false;
  std::uint64_t broadcast_id = 0;
  std::span<const std::uint8_t> message;
  FragmentLayout layout;
  std::uint32_t next = 0;
  std::function<void(const std::string&)> on_done;
  std::function<bool(std::uint32_t)> include;
  Ready ready;
  std::function<void()> sent_callback;
  bool waiting = false;          // parked until resume(): the next fragment is not ready
  std::uint64_t generation = 0;  // of the current send; completions of older ones do nothing
  std::uint64_t datagrams = 0;
  std::uint64_t wire_bytes = 0;
  std::uint64_t dropped = 0;
};

std::unique_ptr<MulticastSender> MulticastSender::open(asio::io_context& io,
                                                       SenderOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  try {
    impl->open();
  } catch (const std::system_error& e) {
    throw NetworkError("multicast sender to " + impl->options.destination + ":" +
                       std::to_string(impl->options.port) + " from " +
                       impl->options.interface_address + ": " + e.what());
  }
  return std::unique_ptr<MulticastSender>(new MulticastSender(std::move(impl)));
}

MulticastSender::~MulticastSender() {
  close();
}
std::uint32_t MulticastSender::fragment_bytes() const {
  return impl_->fragment;
}
void MulticastSender::send(std::uint64_t broadcast_id, std::span<const std::uint8_t> message,
                           std::function<void(const std::string&)> on_done,
                           std::function<bool(std::uint32_t)> include, Ready ready) {
  impl_->send(broadcast_id, message, std::move(on_done), std::move(include), std::move(ready));
}
void MulticastSender::resume() {
  impl_->resume();
}
void MulticastSender::cancel() {
  impl_->cancel();
}
void MulticastSender::on_sent(std::function<void()> callback) {
  impl_->sent_callback = std::move(callback);
}
std::uint64_t MulticastSender::datagrams_sent() const {
  return impl_->datagrams;
}
std::uint64_t MulticastSender::wire_bytes_sent() const {
  return impl_->wire_bytes;
}
void MulticastSender::close() {
  impl_->close();
}

}  // namespace gridbcast::lanes
