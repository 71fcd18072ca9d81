// The `gridbcast testbed` subcommand tree, added to the main CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace gridbcast::testbed {

class TestbedCommand {
 public:
  explicit TestbedCommand(CLI::App& app);
  ~TestbedCommand();
  TestbedCommand(const TestbedCommand&) = delete;
  TestbedCommand& operator=(const TestbedCommand&) = delete;

  bool selected() const;
  // Runs the chosen sub-subcommand after app.parse(); returns the exit status.
  // Errors are thrown (TestbedError, topology::ConfigError) for main to report.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridbcast::testbed
