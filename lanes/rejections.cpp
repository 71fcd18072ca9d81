#include "lanes/rejections.hpp"

#include <iostream>

#include "lanes/log.hpp"
#include "lanes/net.hpp"

namespace gridbcast::lanes {

RejectionLog::RejectionLog(std::string prefix, Print print)
    : prefix_(std::move(prefix)), print_(std::move(print)) {}

RejectionLog::~RejectionLog() {
  try {
    flush();
  } catch (...) {  // a destructor must not throw; the log is best effort here
  }
}

void RejectionLog::reject(const std::string& why, Clock::time_point now) {
  ++count_;
  if (sample_.size() < kSample) sample_.push_back(why);
  log(why, now);
}

void RejectionLog::note(const std::string& what, Clock::time_point now) {
  log(what, now);
}

void RejectionLog::log(const std::string& what, Clock::time_point now) {
  if (logged_ < kLogFirst) {
    ++logged_;
    emit(what);
    if (logged_ == kLogFirst)
      emit("further rejections are summarised at most every " + std::to_string(kInterval.count()) +
           " s");
    last_summary_ = now;
    return;
  }
  ++unprinted_;
  latest_ = what;
  if (now - last_summary_ >= kInterval) {
    flush();
    last_summary_ = now;
  }
}

void RejectionLog::flush() {
  if (unprinted_ == 0) return;
  emit(std::to_string(unprinted_) + " more rejected since the last line (latest: " + latest_ + ")");
  unprinted_ = 0;
  latest_.clear();
}

void RejectionLog::emit(const std::string& line) {
  ++lines_;
  if (print_)
    print_(line);
  else
    log::notice(prefix_ + ": " + line);
}

}  // namespace gridbcast::lanes
