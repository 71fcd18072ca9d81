#include "topology/plan/segments.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "topology/select.hpp"

namespace gridbcast::topology {
namespace {

using Key = std::tuple<int, int, int, int>;  // from, to, lane_from, lane_to

Key key_of(const Transfer& t, bool lanes) {
  return lanes ? Key{t.from, t.to, t.lane_from, t.lane_to} : Key{t.from, t.to, 0, 0};
}

std::uint64_t pieces(std::uint64_t length, std::uint64_t seg) {
  return length / seg + (length % seg != 0 ? 1 : 0);
}

// The most segments any link of the plan carries with segments of `seg` bytes.
std::uint64_t longest_link(const Plan& plan, std::uint64_t seg, bool lanes) {
  std::map<Key, std::uint64_t> count;
  std::uint64_t longest = 0;
  for (const Transfer& t : plan.transfers) {
    std::uint64_t& n = count[key_of(t, lanes)];
    n += pieces(t.length, seg);
    longest = std::max(longest, n);
  }
  return longest;
}

std::uint64_t effective_segment(const Plan& plan, const SegmentOptions& options) {
  std::uint64_t seg = std::clamp<std::uint64_t>(options.segment_bytes, 1, kMaxSegmentBytes);
  if (options.max_per_link == 0) return seg;
  while (longest_link(plan, seg, options.lanes) > options.max_per_link && seg < kMaxSegmentBytes)
    seg = std::min(seg * 2, kMaxSegmentBytes);
  if (longest_link(plan, seg, options.lanes) > options.max_per_link)
    throw std::runtime_error("a broadcast of " + std::to_string(plan.size) +
                             " bytes needs more than " + std::to_string(options.max_per_link) +
                             " segments on one link even with segments of " +
                             std::to_string(kMaxSegmentBytes) + " bytes");
  return seg;
}

// Cuts the transfers `wanted` selects into the links they travel on.
template <typename Wanted>
std::vector<LinkSegments> cut(const Plan& plan, std::uint64_t seg, bool lanes, Wanted wanted) {
  std::vector<LinkSegments> links;
  std::map<Key, size_t> where;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& t = plan.transfers[i];
    if (!wanted(t)) continue;
    const Key key = key_of(t, lanes);
    auto [it, fresh] = where.emplace(key, links.size());
    if (fresh) {
      LinkSegments link;
      link.from = t.from;
      link.to = t.to;
      link.lane_from = std::get<2>(key);
      link.lane_to = std::get<3>(key);
      link.streams = 0;
      links.push_back(std::move(link));
    }
    LinkSegments& link = links[it->second];
    const int streams = lanes ? std::max(1, t.streams) : 1;
    link.streams = std::max(link.streams, streams);
    for (std::uint64_t off = t.offset; off < t.offset + t.length; off += seg) {
      const std::uint64_t index = link.segments.size();
      link.segments.push_back(
          Segment{off, std::min(seg, t.offset + t.length - off), static_cast<int>(i), index,
                  static_cast<int>(index % static_cast<std::uint64_t>(streams))});
    }
  }
  return links;
}

}  // namespace

std::uint64_t resolve_segment_bytes(const Grid& grid, const Plan& plan, std::uint64_t requested) {
  return resolve_segment_bytes(grid, plan, requested, CostModel{});
}

std::uint64_t resolve_segment_bytes(const Grid& grid, const Plan& plan, std::uint64_t requested,
                                    const CostModel& model) {
  if (requested != 0) return requested;
  // Circulant's blocks are its segments, chosen with the plan (the
  // topology's `segment` if it gives one): one block, one frame.
  if (plan.algorithm == Algorithm::kCirculant && plan.block_bytes != 0) return plan.block_bytes;
  if (grid.segment_bytes != 0) return grid.segment_bytes;
  return model_segment(grid, plan, model);
}

SegmentSchedule segment_schedule(const Plan& plan, const SegmentOptions& options) {
  SegmentSchedule s;
  s.segment_bytes = effective_segment(plan, options);
  s.links = cut(plan, s.segment_bytes, options.lanes, [](const Transfer&) { return true; });
  return s;
}

RankSegments rank_segments(const Plan& plan, int rank, const SegmentOptions& options) {
  RankSegments r;
  r.segment_bytes = effective_segment(plan, options);
  r.send = cut(plan, r.segment_bytes, options.lanes,
               [rank](const Transfer& t) { return t.from == rank; });
  r.receive =
      cut(plan, r.segment_bytes, options.lanes, [rank](const Transfer& t) { return t.to == rank; });
  return r;
}

}  // namespace gridbcast::topology
