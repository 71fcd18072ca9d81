#include "mpi/provider/pmpi_executor.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "topology/intervals.hpp"
#include "topology/plan/segments.hpp"

namespace gridbcast::mpi::provider {
namespace {

using topology::Segment;

// One direction of one link (a peer): its segments in plan order, how far
// posting and completion have come, and what is in flight.
struct Link {
  int peer = 0;  // grid rank
  std::vector<Segment> segments;
  size_t next = 0;  // first segment not posted yet
  int in_flight = 0;
  size_t done = 0;
};

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (PMPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

}  // namespace

struct PmpiBroadcast::Impl {
  std::vector<int> comm_of_grid;
  std::byte* buffer;
  PmpiOptions options;
  std::map<int, Link> in, out;
  topology::IntervalSet have;
  struct Pending {
    Link* link;
    size_t index;
    bool receive;
  };
  std::vector<MPI_Request> requests;
  std::vector<Pending> pending;
  std::vector<int> indices;
  std::vector<MPI_Status> statuses;
  int window = 8;

  MPI_Request post_one(Link& link, bool receive) {
    const Segment& s = link.segments[link.next];
    const int peer = comm_of_grid.at(static_cast<size_t>(link.peer));
    MPI_Request r;
    const int rc = receive ? PMPI_Irecv(buffer + s.offset, static_cast<int>(s.length), MPI_BYTE,
                                        peer, static_cast<int>(s.index), options.comm, &r)
                           : PMPI_Isend(buffer + s.offset, static_cast<int>(s.length), MPI_BYTE,
                                        peer, static_cast<int>(s.index), options.comm, &r);
    if (rc != MPI_SUCCESS)
      throw std::runtime_error(std::string(receive ? "PMPI_Irecv from" : "PMPI_Isend to") +
                               " rank " + std::to_string(peer) + " failed: " + mpi_error(rc));
    return r;
  }

  void post() {
    for (auto& [peer, link] : in) {
      while (link.in_flight < window && link.next < link.segments.size()) {
        requests.push_back(post_one(link, true));
        pending.push_back(Pending{&link, link.next, true});
        ++link.next;
        ++link.in_flight;
      }
    }
    for (auto& [peer, link] : out) {
      while (link.in_flight < window && link.next < link.segments.size()) {
        const Segment& s = link.segments[link.next];
        if (!have.contains(s.offset, s.offset + s.length)) break;  // in order: wait for it
        requests.push_back(post_one(link, false));
        pending.push_back(Pending{&link, link.next, false});
        ++link.next;
        ++link.in_flight;
      }
    }
  }

  bool finished() const {
    for (const auto& [p, l] : in)
      if (l.done < l.segments.size()) return false;
    for (const auto& [p, l] : out)
      if (l.done < l.segments.size()) return false;
    return true;
  }

  // Completes what MPI finished (waiting for some with `block`); false if nothing was in flight.
  void complete(bool block) {
    indices.resize(requests.size());
    statuses.resize(requests.size());
    int completed = 0;
    const int n = static_cast<int>(requests.size());
    const int rc =
        block ? PMPI_Waitsome(n, requests.data(), &completed, indices.data(), statuses.data())
              : PMPI_Testsome(n, requests.data(), &completed, indices.data(), statuses.data());
    if (rc != MPI_SUCCESS) {
      std::string why = mpi_error(rc);
      if (rc == MPI_ERR_IN_STATUS)
        for (int k = 0; k < completed; ++k)
          if (statuses[static_cast<size_t>(k)].MPI_ERROR != MPI_SUCCESS)
            why = mpi_error(statuses[static_cast<size_t>(k)].MPI_ERROR);
      throw std::runtime_error(std::string(block ? "PMPI_Waitsome" : "PMPI_Testsome") +
                               " failed: " + why);
    }
    if (completed == MPI_UNDEFINED) return;
    for (int k = 0; k < completed; ++k) {
      const Pending& p = pending[static_cast<size_t>(indices[static_cast<size_t>(k)])];
      --p.link->in_flight;
      ++p.link->done;
      if (p.receive) {
        const Segment& s = p.link->segments[p.index];
        have.add(s.offset, s.offset + s.length);
      }
    }
    // Drop the completed requests (MPI set them to MPI_REQUEST_NULL).
    size_t w = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      if (requests[r] == MPI_REQUEST_NULL) continue;
      requests[w] = requests[r];
      pending[w] = pending[r];
      ++w;
    }
    requests.resize(w);
    pending.resize(w);
  }
};

PmpiBroadcast::PmpiBroadcast(const topology::Plan& plan, int me, std::vector<int> comm_of_grid,
                             std::byte* buffer, const PmpiOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!plan.multicasts.empty())
    throw std::runtime_error(
        "the multicast algorithm sends IP multicast datagrams, which MPI point-to-point cannot "
        "carry: run it with GRIDBCAST_TRANSPORT=lanes");
  auto& im = *impl_;
  im.comm_of_grid = std::move(comm_of_grid);
  im.buffer = buffer;
  im.options = options;
  im.window = std::max(1, options.window);
  // The plan's segments on this rank's links (topology/plan/segments.hpp). A
  // link is a peer (lanes mean nothing to MPI); a segment's tag is its index
  // on the link, so the segment grows until no link needs more tags than
  // MPI_TAG_UB allows. Segments stay at most 1 GiB: MPI counts are ints.
  topology::SegmentOptions so;
  so.segment_bytes = options.segment_bytes;  // resolved by the caller
  so.max_per_link = static_cast<std::uint64_t>(options.tag_ub) + 1;
  so.lanes = false;
  topology::RankSegments mine;
  try {
    mine = topology::rank_segments(plan, me, so);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + " (MPI_TAG_UB is " +
                             std::to_string(options.tag_ub) + ")");
  }
  for (auto& l : mine.send) {
    im.out[l.to].peer = l.to;
    im.out[l.to].segments = std::move(l.segments);
  }
  for (auto& l : mine.receive) {
    im.in[l.from].peer = l.from;
    im.in[l.from].segments = std::move(l.segments);
  }
  if (me == plan.root) im.have.add(0, plan.size);
  im.post();
}

PmpiBroadcast::~PmpiBroadcast() = default;

bool PmpiBroadcast::done() const {
  return impl_->requests.empty() && impl_->finished();
}

bool PmpiBroadcast::step(bool block) {
  auto& im = *impl_;
  if (done()) return true;
  if (im.requests.empty())
    throw std::logic_error(
        "gridbcast MPI transport: nothing in flight but the broadcast is not done");
  im.complete(block);
  im.post();
  return done();
}

void execute_over_pmpi(const topology::Plan& plan, int me, const std::vector<int>& comm_of_grid,
                       std::byte* buffer, const PmpiOptions& options) {
  PmpiBroadcast b(plan, me, comm_of_grid, buffer, options);
  while (!b.step(true)) {
  }
}

}  // namespace gridbcast::mpi::provider
