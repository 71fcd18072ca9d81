// What a rank keeps of the connections it refused: a count, a bounded sample
// and a rate-limited log. A stranger can open connections as fast as the
// kernel accepts them, so each refusal must cost a counter, never a string
// kept or a line printed each.
//
//   refusal 1 .. kLogFirst      printed as they come, kept in the sample
//   later refusals              counted; at most one summary line per interval:
//                               "N more connections rejected in the last T s (latest: ...)"
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gridbcast::lanes {

class RejectionLog {
 public:
  static constexpr size_t kLogFirst = 10;
  static constexpr size_t kSample = 16;
  static constexpr std::chrono::seconds kInterval{10};

  using Clock = std::chrono::steady_clock;
  using Print = std::function<void(const std::string& line)>;

  // `print` receives whole lines (no newline); the default writes
  // "<prefix>: <line>" to standard error.
  explicit RejectionLog(std::string prefix, Print print = {});
  ~RejectionLog();  // prints what the summaries have not reported yet
  RejectionLog(const RejectionLog&) = delete;
  RejectionLog& operator=(const RejectionLog&) = delete;

  // A refused connection: counted, sampled while the sample has room, logged
  // within the rate limit.
  void reject(const std::string& why, Clock::time_point now = Clock::now());
  // Trouble that is not a refusal (e.g. descriptors exhausted): logged within
  // the same rate limit, not counted.
  void note(const std::string& what, Clock::time_point now = Clock::now());
  // Prints a summary of what was not printed yet, if anything.
  void flush();

  std::uint64_t count() const { return count_; }
  // The first kSample refusals.
  const std::vector<std::string>& sample() const { return sample_; }
  std::uint64_t lines_printed() const { return lines_; }

 private:
  void log(const std::string& what, Clock::time_point now);
  void emit(const std::string& line);

  std::string prefix_;
  Print print_;
  std::uint64_t count_ = 0;
  std::vector<std::string> sample_;
  std::uint64_t logged_ = 0;     // events printed one by one
  std::uint64_t unprinted_ = 0;  // events since the last line
  std::string latest_;           // the newest of them
  Clock::time_point last_summary_{};
  std::uint64_t lines_ = 0;
};

}  // namespace gridbcast::lanes
