// Template definitions for lanes/net.hpp.
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <variant>

namespace gridbcast::lanes {

template <typename T>
asio::awaitable<T> before(Clock::time_point deadline, asio::awaitable<T> op,
                          const std::string& what) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  if constexpr (std::is_void_v<T>) {
    auto result = co_await (std::move(op) || timer.async_wait(asio::use_awaitable));
    if (result.index() == 1) throw NetworkError(what);
  } else {
    auto result = co_await (std::move(op) || timer.async_wait(asio::use_awaitable));
    if (result.index() == 1) throw NetworkError(what);
    co_return std::move(std::get<0>(result));
  }
}

}  // namespace gridbcast::lanes
