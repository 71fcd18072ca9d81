// A set of half-open byte ranges [begin, end), kept merged and sorted. Used by
// the plan checker (who holds what) and the executor (which bytes have arrived).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace gridbcast::topology {

class IntervalSet {
 public:
  // Adds [begin, end); returns how many of those bytes were new.
  std::uint64_t add(std::uint64_t begin, std::uint64_t end) {
    if (begin >= end) return 0;
    std::uint64_t overlap = 0;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= begin) it = prev;
    }
    std::uint64_t new_begin = begin, new_end = end;
    while (it != ranges_.end() && it->first <= end) {
      const std::uint64_t lo = it->first > begin ? it->first : begin;
      const std::uint64_t hi = it->second < end ? it->second : end;
      if (hi > lo) overlap += hi - lo;
      if (it->first < new_begin) new_begin = it->first;
      if (it->second > new_end) new_end = it->second;
      it = ranges_.erase(it);
    }
    ranges_.emplace(new_begin, new_end);
    total_ += (end - begin) - overlap;
    return (end - begin) - overlap;
  }
  // True when every byte of [begin, end) is in the set (an empty range is).
  bool contains(std::uint64_t begin, std::uint64_t end) const {
    if (begin >= end) return true;
    auto it = ranges_.upper_bound(begin);
    if (it == ranges_.begin()) return false;
    --it;
    return it->first <= begin && it->second >= end;
  }
  // Length of the run of held bytes starting at `from` (0 if `from` is not held).
  std::uint64_t run_from(std::uint64_t from) const {
    auto it = ranges_.upper_bound(from);
    if (it == ranges_.begin()) return 0;
    --it;
    return it->second > from ? it->second - from : 0;
  }
  std::uint64_t total() const { return total_; }
  size_t pieces() const { return ranges_.size(); }
  void clear() {
    ranges_.clear();
    total_ = 0;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;  // begin -> end, disjoint, not touching
  std::uint64_t total_ = 0;
};

}  // namespace gridbcast::topology
