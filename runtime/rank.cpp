#include "runtime/rank.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "runtime/buffer.hpp"
#include "runtime/communicator.hpp"
#include "runtime/control.hpp"
#include "runtime/job.hpp"
#include "runtime/run_until.hpp"
#include "topology/loader.hpp"

namespace gridbcast::runtime {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::uint64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

lanes::tcp::endpoint parse_host_port(const std::string& hp) {
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::runtime_error("GRIDBCAST_LAUNCHER must be host:port, got \"" + hp + "\"");
  std::string host = hp.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = std::stoi(hp.substr(colon + 1));
  if (port <= 0 || port > 65535) throw std::runtime_error("bad port in GRIDBCAST_LAUNCHER");
  return lanes::make_endpoint(host, static_cast<std::uint16_t>(port));
}

}  // namespace

std::optional<int> rank_from_environment() {
  for (const char* name : {"GRIDBCAST_RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"}) {
    const std::string v = env_or_empty(name);
    if (!v.empty()) {
      size_t used = 0;
      const int r = std::stoi(v, &used);
      if (used != v.size() || r < 0)
        throw std::runtime_error(std::string(name) + " is not a rank number: \"" + v + "\"");
      return r;
    }
  }
  return std::nullopt;
}

int run_rank(std::istream& secret_in, std::ostream& err) {
  int rank = -1;
  asio::io_context io{1};
  std::unique_ptr<lanes::tcp::socket> control;
  try {
    const auto r = rank_from_environment();
    if (!r) throw std::runtime_error("no rank: set GRIDBCAST_RANK (or run under srun/mpiexec)");
    rank = *r;
    const std::string launcher = env_or_empty("GRIDBCAST_LAUNCHER");
    if (launcher.empty()) throw std::runtime_error("GRIDBCAST_LAUNCHER is not set");
    JobCredentials creds;
    creds.job_id = std::stoull(env_or_empty("GRIDBCAST_JOB_ID"), nullptr, 16);
    std::string secret_hex = env_or_empty("GRIDBCAST_SECRET");
    if (secret_hex.empty()) std::getline(secret_in, secret_hex);
    if (secret_hex.empty())
      throw std::runtime_error("no job secret: set GRIDBCAST_SECRET or pass it on standard input");
    creds.secret = from_hex(secret_hex);

    lanes::Hello hello;
    hello.rank = static_cast<std::uint32_t>(rank);
    hello.lane_from = hello.lane_to = lanes::kControlLane;
    const lanes::Credentials lc{creds.job_id, creds.secret};
    const auto launcher_ep = parse_host_port(launcher);
    control = run_until(io, [&]() -> asio::awaitable<std::unique_ptr<lanes::tcp::socket>> {
      co_return std::make_unique<lanes::tcp::socket>(co_await lanes::connect_authenticated(
          "", launcher_ep, hello, lc, lanes::Clock::now() + std::chrono::seconds(60),
          "the launcher"));
    }());
    auto receive = [&](const std::string& type) {
      Message m = run_until(io, receive_message(*control, "the launcher"));
      if (m.type() == "exit" && type != "exit") std::exit(1);  // the launcher gave up
      if (m.type() != type)
        throw std::runtime_error("the launcher sent \"" + m.type() + "\", expected \"" + type + "\"");
      return m;
    };
    auto send = [&](Message m) { run_until(io, send_message(*control, m)); };

    const Message config = receive("config");
    const topology::Grid grid = topology::load_grid_string(config.at(1), config.at(2));
    const JobParams params = JobParams::from_fields(config.fields, 3);

    CommOptions options;
    options.timeout = std::chrono::milliseconds(params.timeout_ms);
    options.segment_bytes = params.segment_bytes;
    options.thresholds = topology::SelectionThresholds::from_environment();
    Communicator comm(grid, rank, creds, options);
    const auto ports = comm.listen();
    send(make_message("endpoints", std::to_string(ports[0]), std::to_string(ports[1])));

    const Message table_msg = receive("table");
    EndpointTable table(static_cast<size_t>(grid.size()));
    for (size_t i = 0; i < table.size(); ++i)
      for (size_t l = 0; l < kLanes; ++l)
        table[i][l] = static_cast<std::uint16_t>(std::stoul(table_msg.at(1 + i * kLanes + l)));
    comm.set_endpoints(std::move(table));

    const auto& node = grid.nodes[static_cast<size_t>(rank)];
    MappedBuffer buffer;
    bool file_mode = !params.file.empty();
    if (file_mode) {
      if (rank == params.root) {
        buffer = MappedBuffer::read_file(params.file);
        if (buffer.size() != params.size)
          throw std::runtime_error(params.file + " changed size since the launch began");
      } else {
        buffer = MappedBuffer::create_file(output_path(params.output, rank, node.name), params.size);
      }
    } else {
      buffer = MappedBuffer::anonymous(params.size);
    }

    for (int i = 0; i < params.iterations; ++i) {
      const Iteration it = iteration_at(params, i, grid);
      if (!file_mode && rank == it.root) fill_pattern(buffer.data(), it.size, params.seed + static_cast<std::uint64_t>(i));
      send(make_message("ready", std::to_string(i)));
      receive("go");
      const std::int64_t t0 = now_ns();
      const auto algo = it.algorithm == "auto" ? std::nullopt : topology::parse_algorithm(it.algorithm);
      const BcastInfo info = comm.bcast(buffer.data(), it.size, it.root, algo);
      const std::int64_t t1 = now_ns();
      const std::string digest = params.verify ? sha256_hex(buffer.data(), it.size) : "";
      send(make_message("done", std::to_string(i), std::to_string(t0), std::to_string(t1), digest,
                      topology::algorithm_name(info.algorithm), std::to_string(info.segment_bytes),
                      std::to_string(comm.rejected_connections()), std::to_string(peak_rss_bytes())));
    }
    if (file_mode && rank != params.root) buffer.flush();
    receive("exit");
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    err << "gridbcast rank " << rank << ": " << what << std::endl;
    if (control && control->is_open()) {
      try {
        run_until(io, send_message(*control, make_message("error", what)));
      } catch (...) {
        // The launcher is gone too; the exit status still tells.
      }
    }
    return 1;
  }
}

}  // namespace gridbcast::runtime
