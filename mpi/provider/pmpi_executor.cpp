#include "mpi/provider/pmpi_executor.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "topology/intervals.hpp"

namespace gridbcast::mpi::provider {
namespace {

struct Segment {
  std::uint64_t offset;
  std::uint64_t length;
};

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

// Segments per link for a given segment size; returns the longest link.
size_t cut(const topology::Plan& plan, int me, std::uint64_t seg, std::map<int, Link>& in,
           std::map<int, Link>& out) {
  in.clear();
  out.clear();
  size_t longest = 0;
  for (const auto& t : plan.transfers) {
    if (t.from != me && t.to != me) continue;
    Link& link = t.from == me ? out[t.to] : in[t.from];
    link.peer = t.from == me ? t.to : t.from;
    for (std::uint64_t off = t.offset; off < t.offset + t.length; off += seg)
      link.segments.push_back(Segment{off, std::min(seg, t.offset + t.length - off)});
    longest = std::max(longest, link.segments.size());
  }
  return longest;
}

}  // namespace

void execute_over_pmpi(const topology::Plan& plan, int me, const std::vector<int>& comm_of_grid,
                       std::byte* buffer, const PmpiOptions& options) {
  // MPI counts are ints: segments stay below 1 GiB. A segment's tag is its
  // index on its link, so a link may not have more segments than tags.
  constexpr std::uint64_t kMaxSegment = std::uint64_t{1} << 30;
  // The caller fills segment_bytes (topology::automatic_segment needs the grid).
  std::uint64_t seg = std::min(options.segment_bytes, kMaxSegment);
  seg = std::max<std::uint64_t>(seg, 1);
  std::map<int, Link> in, out;
  const auto tags = static_cast<size_t>(options.tag_ub) + 1;
  while (cut(plan, me, seg, in, out) > tags && seg < kMaxSegment)
    seg = std::min(seg * 2, kMaxSegment);
  if (cut(plan, me, seg, in, out) > tags)
    throw std::runtime_error("a broadcast of " + std::to_string(plan.size) +
                             " bytes needs more tags than MPI_TAG_UB allows");

  topology::IntervalSet have;
  if (me == plan.root) have.add(0, plan.size);

  struct Pending {
    Link* link;
    size_t index;
    bool receive;
  };
  std::vector<MPI_Request> requests;
  std::vector<Pending> pending;
  const int window = std::max(1, options.window);

  auto post = [&]() {
    for (auto& [peer, link] : in) {
      while (link.in_flight < window && link.next < link.segments.size()) {
        const Segment& s = link.segments[link.next];
        MPI_Request r;
        const int rc = PMPI_Irecv(buffer + s.offset, static_cast<int>(s.length), MPI_BYTE,
                                  comm_of_grid.at(static_cast<size_t>(peer)),
                                  static_cast<int>(link.next), options.comm, &r);
        if (rc != MPI_SUCCESS)
          throw std::runtime_error("PMPI_Irecv from rank " +
                                   std::to_string(comm_of_grid[static_cast<size_t>(peer)]) +
                                   " failed: " + mpi_error(rc));
        requests.push_back(r);
        pending.push_back(Pending{&link, link.next, true});
        ++link.next;
        ++link.in_flight;
      }
    }
    for (auto& [peer, link] : out) {
      while (link.in_flight < window && link.next < link.segments.size()) {
        const Segment& s = link.segments[link.next];
        if (!have.contains(s.offset, s.offset + s.length)) break;  // in order: wait for it
        MPI_Request r;
        const int rc = PMPI_Isend(buffer + s.offset, static_cast<int>(s.length), MPI_BYTE,
                                  comm_of_grid.at(static_cast<size_t>(peer)),
                                  static_cast<int>(link.next), options.comm, &r);
        if (rc != MPI_SUCCESS)
          throw std::runtime_error("PMPI_Isend to rank " +
                                   std::to_string(comm_of_grid[static_cast<size_t>(peer)]) +
                                   " failed: " + mpi_error(rc));
        requests.push_back(r);
        pending.push_back(Pending{&link, link.next, false});
        ++link.next;
        ++link.in_flight;
      }
    }
  };

  auto finished = [&]() {
    for (const auto& [p, l] : in)
      if (l.done < l.segments.size()) return false;
    for (const auto& [p, l] : out)
      if (l.done < l.segments.size()) return false;
    return true;
  };

  std::vector<int> indices;
  std::vector<MPI_Status> statuses;
  for (;;) {
    post();
    if (requests.empty()) {
      if (finished()) break;
      throw std::logic_error(
          "gridbcast MPI transport: nothing in flight but the broadcast is not done");
    }
    indices.resize(requests.size());
    statuses.resize(requests.size());
    int completed = 0;
    const int rc = PMPI_Waitsome(static_cast<int>(requests.size()), requests.data(), &completed,
                                 indices.data(), statuses.data());
    if (rc != MPI_SUCCESS) {
      std::string why = mpi_error(rc);
      if (rc == MPI_ERR_IN_STATUS)
        for (int k = 0; k < completed; ++k)
          if (statuses[static_cast<size_t>(k)].MPI_ERROR != MPI_SUCCESS)
            why = mpi_error(statuses[static_cast<size_t>(k)].MPI_ERROR);
      throw std::runtime_error("PMPI_Waitsome failed: " + why);
    }
    if (completed == MPI_UNDEFINED) continue;
    for (int k = 0; k < completed; ++k) {
      const Pending& p = pending[static_cast<size_t>(indices[static_cast<size_t>(k)])];
      --p.link->in_flight;
      ++p.link->done;
      if (p.receive) {
        const Segment& s = p.link->segments[p.index];
        have.add(s.offset, s.offset + s.length);
      }
    }
    // Drop the completed requests (Waitsome set them to MPI_REQUEST_NULL).
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
}

}  // namespace gridbcast::mpi::provider
