// A level-free wake-up for coroutines on one io_context: waiters re-check their
// condition after every notify_all(). A timer that never expires on its own,
// cancelled to wake everyone waiting on it.
#pragma once

#include "lanes/net.hpp"

namespace gridbcast::runtime {

class Event {
 public:
  explicit Event(asio::any_io_executor ex) : timer_(ex, asio::steady_timer::time_point::max()) {}
  void notify_all() { timer_.cancel(); }
  asio::awaitable<void> wait() { co_await timer_.async_wait(lanes::kAsTuple); }

 private:
  asio::steady_timer timer_;
};

}  // namespace gridbcast::runtime
