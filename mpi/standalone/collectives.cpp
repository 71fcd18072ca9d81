// Collectives of libgridbcast_mpi. MPI_Bcast is runtime::Communicator's
// broadcast (every algorithm, planned over the topology restricted to the
// communicator); the others are short point-to-point schedules on the
// communicator's collective context, so they never match the program's own
// messages: a dissemination barrier, a binomial reduce, gather straight to the
// root, and allgather as gather plus broadcast.
#include <cstring>
#include <vector>

#include "mpi/standalone/state.hpp"

namespace gridbcast::mpi {
namespace {

constexpr std::int64_t kTagBarrier = 1000;  // + round
constexpr std::int64_t kTagReduce = 2000;
constexpr std::int64_t kTagGather = 3000;
// MPI_Ibarrier number n of a communicator: kTagIbarrier + 64 n + round, so
// barriers in flight at once (and the blocking ones) never take each
// other's messages.
constexpr std::int64_t kTagIbarrier = std::int64_t{1} << 40;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void send_to(Comm& c, int to, std::int64_t tag, const void* data, std::uint64_t bytes) {
  state().world->send(c.members[static_cast<size_t>(to)], c.collective_context(), tag, data, bytes);
}

void receive_from(Comm& c, int from, std::int64_t tag, void* data, std::uint64_t bytes) {
  const auto got = state().world->receive(c.members[static_cast<size_t>(from)],
                                          c.collective_context(), tag, data, bytes);
  if (got.bytes != bytes)
    throw Error(MPI_ERR_TRUNCATE, "rank " + std::to_string(from) + " contributed " +
                                      std::to_string(got.bytes) + " bytes where " +
                                      std::to_string(bytes) +
                                      " were expected (mismatched counts?)");
}

}  // namespace

namespace {

// The algorithm of the communicator's next broadcast (nullopt: the plan's
// choice), the same on every member.
std::optional<topology::Algorithm> next_algorithm(Comm& c) {
  State& st = state();
  std::optional<topology::Algorithm> algo = st.algorithm;
  if (st.random_algorithm) {
    // The same draw on every member: it depends only on the communicator's history.
    const auto all = topology::available_algorithms(st.world->grid());
    algo = all[mix(c.context * 1000003u + c.bcasts) % all.size()];
  }
  ++c.bcasts;
  return algo;
}

}  // namespace

void bcast_bytes(Comm& c, void* buffer, std::uint64_t bytes, int root) {
  const auto algo = next_algorithm(c);
  if (c.size() == 1) return;
  if (c.is_world)
    state().world->bcast(buffer, bytes, root, algo);
  else
    state().world->bcast_group(c.context, buffer, bytes, root, algo);
}

runtime::P2pRequest ibcast_bytes(Comm& c, void* buffer, std::uint64_t bytes, int root) {
  const auto algo = next_algorithm(c);
  if (c.size() == 1) return nullptr;
  if (c.is_world) return state().world->ibcast(buffer, bytes, root, algo);
  return state().world->ibcast_group(c.context, buffer, bytes, root, algo);
}

void barrier(Comm& c) {
  const int p = c.size();
  for (int k = 1, round = 0; k < p; k <<= 1, ++round) {
    send_to(c, (c.rank + k) % p, kTagBarrier + round, nullptr, 0);
    receive_from(c, (c.rank - k + p) % p, kTagBarrier + round, nullptr, 0);
  }
}

// The dissemination barrier's rounds, run by the communicator's loop.
runtime::P2pRequest ibarrier(Comm& c) {
  const int p = c.size();
  const std::int64_t base = kTagIbarrier + static_cast<std::int64_t>(c.ibarriers++) * 64;
  if (p == 1) return nullptr;
  std::vector<std::vector<runtime::Communicator::Step>> rounds;
  for (int k = 1, round = 0; k < p; k <<= 1, ++round) {
    runtime::Communicator::Step send, receive;
    send.send = true;
    send.peer = c.members[static_cast<size_t>((c.rank + k) % p)];
    send.tag = receive.tag = base + round;
    receive.peer = c.members[static_cast<size_t>((c.rank - k + p) % p)];
    rounds.push_back({send, receive});
  }
  return state().world->exchange(c.collective_context(), std::move(rounds), "in MPI_Ibarrier");
}

void reduce(Comm& c, const void* sendbuf, void* recvbuf, std::uint64_t elements, MPI_Datatype base,
            std::uint64_t bytes, MPI_Op op, int root) {
  check_op(op, base);
  const int p = c.size();
  const int rel = (c.rank - root + p) % p;
  // Binomial tree toward the root: accumulate the children, then send up.
  std::vector<std::byte> acc(bytes), incoming;
  const void* own = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (bytes > 0) std::memcpy(acc.data(), own, bytes);
  for (int mask = 1; mask < p; mask <<= 1) {
    if (rel & mask) {
      send_to(c, (rel - mask + root) % p, kTagReduce, acc.data(), bytes);
      return;
    }
    if (rel + mask < p) {
      incoming.resize(bytes);
      receive_from(c, (rel + mask + root) % p, kTagReduce, incoming.data(), bytes);
      apply_op(op, base, acc.data(), incoming.data(), elements);
    }
  }
  if (bytes > 0) std::memcpy(recvbuf, acc.data(), bytes);
}

void allgather_bytes(Comm& c, const void* mine, std::uint64_t bytes, void* all) {
  auto* out = static_cast<std::byte*>(all);
  if (c.rank == 0) {
    if (bytes > 0) std::memcpy(out, mine, bytes);
    for (int r = 1; r < c.size(); ++r)
      receive_from(c, r, kTagGather, out + static_cast<std::uint64_t>(r) * bytes, bytes);
  } else {
    send_to(c, 0, kTagGather, mine, bytes);
  }
  bcast_bytes(c, all, bytes * static_cast<std::uint64_t>(c.size()), 0);
}

}  // namespace gridbcast::mpi
