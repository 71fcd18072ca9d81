#include "runtime/communicator.hpp"

#include <openssl/rand.h>

#include "runtime/executor.hpp"
#include "runtime/run_until.hpp"
#include "runtime/transport.hpp"

namespace gridbcast::runtime {

JobCredentials new_credentials() {
  JobCredentials c;
  c.secret.resize(32);
  std::uint64_t id = 0;
  if (RAND_bytes(c.secret.data(), static_cast<int>(c.secret.size())) != 1 ||
      RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof id) != 1)
    throw std::runtime_error("OpenSSL could not produce random bytes for the job secret");
  c.job_id = id;
  return c;
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (auto b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument("not a hexadecimal string");
  };
  if (hex.size() % 2 != 0) throw std::invalid_argument("hexadecimal string of odd length");
  std::vector<std::uint8_t> out;
  for (size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<std::uint8_t>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  return out;
}

struct Communicator::Impl {
  topology::Grid grid;
  int rank;
  CommOptions options;
  asio::io_context io{1};
  Transport transport;
  std::uint64_t seq = 0;
  std::exception_ptr failed;

  Impl(topology::Grid g, int r, JobCredentials creds, CommOptions o)
      : grid(std::move(g)),
        rank(r),
        options(o),
        transport(io, grid, r, lanes::Credentials{creds.job_id, std::move(creds.secret)}) {}
};

Communicator::Communicator(topology::Grid grid, int rank, JobCredentials creds,
                           CommOptions options) {
  if (rank < 0 || rank >= grid.size())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the topology's " +
                                std::to_string(grid.size()) + " ranks");
  impl_ = std::make_unique<Impl>(std::move(grid), rank, std::move(creds), options);
}

Communicator::~Communicator() = default;

std::array<std::uint16_t, kLanes> Communicator::listen() { return impl_->transport.listen(); }

void Communicator::set_endpoints(EndpointTable table) {
  if (static_cast<int>(table.size()) != impl_->grid.size())
    throw std::invalid_argument("endpoint table has " + std::to_string(table.size()) +
                                " ranks, the topology " + std::to_string(impl_->grid.size()));
  impl_->transport.set_table(std::move(table));
}

BcastInfo Communicator::bcast(void* buffer, std::uint64_t bytes, int root,
                              std::optional<topology::Algorithm> algorithm) {
  auto& im = *impl_;
  if (im.failed) std::rethrow_exception(im.failed);
  const auto start = std::chrono::steady_clock::now();
  const auto algo = algorithm.value_or(topology::select_algorithm(im.grid, bytes, im.options.thresholds));
  const topology::Plan plan = topology::build_plan(im.grid, algo, root, bytes);
  ExecOptions eo;
  eo.timeout = im.options.timeout;
  eo.segment_bytes = im.options.segment_bytes ? im.options.segment_bytes : im.grid.segment_bytes;
  BcastInfo info{algo, bytes, eo.segment_bytes ? eo.segment_bytes : automatic_segment(bytes), 0};
  try {
    run_until(im.io, execute(im.transport, plan, im.seq++, static_cast<std::byte*>(buffer), eo));
  } catch (...) {
    im.failed = std::current_exception();
    im.transport.close_all();
    throw;
  }
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return info;
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->grid.size(); }
const topology::Grid& Communicator::grid() const { return impl_->grid; }
std::uint64_t Communicator::rejected_connections() const {
  return impl_->transport.rejected_connections();
}

}  // namespace gridbcast::runtime
