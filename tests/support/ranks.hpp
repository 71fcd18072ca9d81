// Runs a job's ranks as threads in this process, each with its own Communicator
// and io_context, talking over real loopback sockets (rendezvous in memory).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/buffer.hpp"
#include "runtime/communicator.hpp"

namespace gridbcast::testing {

// Each Ranks is one run: as the launcher does for a launch, it draws a fresh
// run nonce and hands it to every rank with the endpoint table.
class Ranks {
 public:
  explicit Ranks(const topology::Grid& grid, runtime::CommOptions options = {})
      : Ranks(grid, [&](int) { return options; }) {}
  // Each rank with options of its own (e.g. another certificate directory).
  Ranks(const topology::Grid& grid, const std::function<runtime::CommOptions(int)>& options)
      : Ranks(grid, runtime::new_credentials(), options) {}
  // A run with given credentials (e.g. a second run reusing an earlier one's
  // secret and job id); its run nonce is fresh all the same.
  Ranks(const topology::Grid& grid, runtime::JobCredentials creds)
      : Ranks(grid, std::move(creds), [](int) { return runtime::CommOptions{}; }) {}
  Ranks(const topology::Grid& grid, runtime::JobCredentials creds,
        const std::function<runtime::CommOptions(int)>& options)
      : creds_(std::move(creds)), run_nonce_(runtime::new_run_nonce()) {
    runtime::EndpointTable table;
    for (int r = 0; r < grid.size(); ++r) {
      comms_.push_back(std::make_unique<runtime::Communicator>(grid, r, creds_, options(r)));
      table.push_back(comms_.back()->listen());
    }
    for (auto& c : comms_) c->set_endpoints(table, run_nonce_);
    table_ = table;
  }

  // Rank r's communicator, e.g. for another thread to read its progress.
  runtime::Communicator& comm(int r) { return *comms_.at(static_cast<size_t>(r)); }

  // Calls fn(rank's communicator) on one thread per rank; rethrows the first
  // exception (by rank order) after every thread has finished.
  void run(const std::function<void(runtime::Communicator&)>& fn) {
    std::vector<std::exception_ptr> errors(comms_.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms_.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          fn(*comms_[r]);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  runtime::Communicator& at(int r) { return *comms_.at(static_cast<size_t>(r)); }
  // Destroys rank r's communicator (as a process that ends would): its peers
  // see its connections close.
  void close(int r) { comms_.at(static_cast<size_t>(r)).reset(); }
  int size() const { return static_cast<int>(comms_.size()); }
  const runtime::JobCredentials& credentials() const { return creds_; }
  const runtime::RunNonce& run_nonce() const { return run_nonce_; }
  std::uint16_t port(int rank, int lane) const {
    return table_.at(static_cast<size_t>(rank))[static_cast<size_t>(lane)];
  }

 private:
  runtime::JobCredentials creds_;
  runtime::RunNonce run_nonce_{};
  std::vector<std::unique_ptr<runtime::Communicator>> comms_;
  runtime::EndpointTable table_;
};

// `size` bytes of runtime::fill_pattern's pattern for `seed`: what a copy must equal.
inline std::vector<std::byte> pattern(std::uint64_t size, std::uint64_t seed) {
  std::vector<std::byte> v(size);
  runtime::fill_pattern(v.data(), size, seed);
  return v;
}

// One broadcast on every rank; each non-root checks its copy against the pattern.
inline void bcast_and_check(runtime::Communicator& c, std::vector<std::byte>& buf,
                            std::uint64_t size, int root, std::optional<topology::Algorithm> algo,
                            std::uint64_t seed) {
  if (c.rank() == root) {
    runtime::fill_pattern(buf.data(), size, seed);
  } else if (size > 0) {
    std::memset(buf.data(), 0xA5, size);
  }
  c.bcast(buf.data(), size, root, algo);
  std::vector<std::byte> want(size);
  runtime::fill_pattern(want.data(), size, seed);
  ASSERT_TRUE(size == 0 || std::memcmp(buf.data(), want.data(), size) == 0)
      << "rank " << c.rank() << " root " << root << " size " << size;
}

}  // namespace gridbcast::testing
