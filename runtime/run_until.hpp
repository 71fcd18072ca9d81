// Drives one io_context until a coroutine completes: the bridge from blocking
// API calls to the event loop. Other work on the loop (listeners accepting,
// the control channel) progresses meanwhile. Internal to runtime.
#pragma once

#include <asio.hpp>
#include <exception>
#include <optional>

namespace gridbcast::runtime {

template <typename T>
T run_until(asio::io_context& io, asio::awaitable<T> op) {
  std::exception_ptr error;
  std::optional<T> result;
  bool done = false;
  asio::co_spawn(io, std::move(op), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) result.emplace(std::move(value));
    done = true;
  });
  if (io.stopped()) io.restart();
  while (!done) io.run_one();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

inline void run_until(asio::io_context& io, asio::awaitable<void> op) {
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(io, std::move(op), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  if (io.stopped()) io.restart();
  while (!done) io.run_one();
  if (error) std::rethrow_exception(error);
}

}  // namespace gridbcast::runtime
