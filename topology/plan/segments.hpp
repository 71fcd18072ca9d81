// The per-link segment schedule: how a Plan's transfers are cut into the
// pieces that actually travel, as pure data. The runtime executor, the
// simulator and the PMPI executor all send (and expect) exactly these lists,
// so the segment size is resolved and transfers are cut in this one place.
//
//   transfer t (offset o, length L) on link A -> B, segment s, S streams:
//
//     [o, o+s) [o+s, o+2s) ... [o+ks, o+L)      the last one may be short
//      index i    i+1            i+k            index: position on the link,
//      stream i%S (i+1)%S        (i+k)%S        across the link's transfers
//
// A link is (sender, receiver, lane_from, lane_to), or (sender, receiver) when
// lanes mean nothing (MPI). Its segments are listed in plan order of their
// transfers, then by offset; sender and receiver derive the same lists.
#pragma once

#include <cstdint>
#include <vector>

#include "topology/grid.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::topology {

// The segment size for `plan`: `requested` (--segment, GRIDBCAST_SEGMENT) if
// not 0, else the topology's `segment`, else the cost model's choice for this
// plan (topology::model_segment, topology/select.hpp; circulant: its
// Plan::block_bytes, which the model chose with the plan). Every rank of one
// build derives the same from the same plan (the choices compare the model's
// times in whole microseconds, so the last bits of floating point do not
// decide them).
// `model`: the model's choice for an executor that forwards as the runtime's
// does (cut-through); CostModel::forward_bytes 0 for one that stores and
// forwards whole segments (the MPI provider over PMPI).
struct CostModel;
std::uint64_t resolve_segment_bytes(const Grid& grid, const Plan& plan, std::uint64_t requested);
std::uint64_t resolve_segment_bytes(const Grid& grid, const Plan& plan, std::uint64_t requested,
                                    const CostModel& model);

// No segment is longer: a data frame carries at most 2^30 bytes
// (lanes::kMaxFrameBytes) and an MPI count is an int.
inline constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{1} << 30;

struct SegmentOptions {
  std::uint64_t segment_bytes = 0;  // resolved (resolve_segment_bytes); 0 counts as 1
  // 0: no limit. Else no link carries more segments than this (MPI: a segment's
  // tag is its index on the link, so MPI_TAG_UB + 1): the segment size doubles,
  // up to kMaxSegmentBytes, until every link of the plan fits. Every rank sees
  // the whole plan, so all ranks grow it alike.
  std::uint64_t max_per_link = 0;
  bool lanes = true;  // false: one link per ordered pair of ranks, one stream
};

struct Segment {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  int transfer = 0;         // index in plan.transfers
  std::uint64_t index = 0;  // position on its link (the MPI tag)
  int stream = 0;           // index % the transfer's streams: round-robin over the link's streams

  bool operator==(const Segment&) const = default;
};

struct LinkSegments {
  int from = 0;
  int to = 0;
  int lane_from = 0;  // 0 when options.lanes is false
  int lane_to = 0;
  int streams = 1;                // the most streams a transfer on it asks for
  std::vector<Segment> segments;  // in send order; empty for zero-length transfers

  bool operator==(const LinkSegments&) const = default;
};

struct SegmentSchedule {
  std::uint64_t segment_bytes = 0;  // the size used (after the limits)
  std::vector<LinkSegments> links;  // in order of each link's first transfer
};

struct RankSegments {
  std::uint64_t segment_bytes = 0;
  std::vector<LinkSegments> send;     // links from this rank
  std::vector<LinkSegments> receive;  // links into this rank
};

// Every link of the plan. Throws std::runtime_error when max_per_link cannot
// be met even with kMaxSegmentBytes segments.
SegmentSchedule segment_schedule(const Plan& plan, const SegmentOptions& options);

// The links `rank` sends and receives on; the same lists segment_schedule
// gives for them.
RankSegments rank_segments(const Plan& plan, int rank, const SegmentOptions& options);

}  // namespace gridbcast::topology
