#include "job/rank.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "job/bench.hpp"
#include "job/session.hpp"
#include "runtime/buffer.hpp"
#include "runtime/communicator.hpp"
#include "job/control.hpp"
#include "job/params.hpp"

namespace gridbcast::job {
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

// What is resident now (not the high-water mark), for soak runs that check
// memory stays flat.
std::uint64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
  Session session;
  try {
    session.join(&secret_in);
    const int rank = session.rank();
    const topology::Grid& grid = session.grid();
    const JobParams& params = session.params();
    runtime::Communicator& comm = session.communicator();
    if (params.program)
      throw std::runtime_error(
          "this job runs a program (gridbcast launch TOPOLOGY -- PROGRAM); 'gridbcast rank' has "
          "no part in it");
    auto receive = [&](const std::string& type) {
      Message m;
      m.fields = session.receive();
      if (m.type() == "exit" && type != "exit") std::exit(1);  // the launcher gave up
      if (m.type() != type)
        throw std::runtime_error("the launcher sent \"" + m.type() + "\", expected \"" + type + "\"");
      return m;
    };
    auto send = [&](const Message& m) { session.send(m.fields); };

    if (!params.bench.empty()) {
      // `gridbcast bench`: the sweep; the root reports each point as it completes.
      const BenchSpec spec = BenchSpec::decode(params.bench);
      runtime::MappedBuffer buffer = runtime::MappedBuffer::anonymous(spec.largest_size());
      run_bench(
          comm, spec, params.root, buffer.data(),
          [&](const BenchPoint& p) { send(make_message("point", p.encode())); },
          [&] { send(make_message("alive")); });
      send(make_message("bench_done", std::to_string(comm.rejected_connections()),
                        std::to_string(peak_rss_bytes())));
      receive("exit");
      return 0;
    }

    const auto& node = grid.nodes[static_cast<size_t>(rank)];
    runtime::MappedBuffer buffer;
    bool file_mode = !params.file.empty();
    if (file_mode) {
      if (rank == params.root) {
        buffer = runtime::MappedBuffer::read_file(params.file);
        if (buffer.size() != params.size)
          throw std::runtime_error(params.file + " changed size since the launch began");
      } else {
        buffer = runtime::MappedBuffer::create_file(output_path(params.output, rank, node.name), params.size);
      }
    } else {
      buffer = runtime::MappedBuffer::anonymous(params.size);
    }

    for (int i = 0; i < params.iterations; ++i) {
      const Iteration it = iteration_at(params, i, grid);
      if (!file_mode && rank == it.root) runtime::fill_pattern(buffer.data(), it.size, params.seed + static_cast<std::uint64_t>(i));
      send(make_message("ready", std::to_string(i)));
      receive("go");
      const std::int64_t t0 = now_ns();
      const auto algo = it.algorithm == "auto" ? std::nullopt : topology::parse_algorithm(it.algorithm);
      const runtime::BcastInfo info = comm.bcast(buffer.data(), it.size, it.root, algo);
      const std::int64_t t1 = now_ns();
      const std::string digest = params.verify ? runtime::sha256_hex(buffer.data(), it.size) : "";
      send(make_message("done", std::to_string(i), std::to_string(t0), std::to_string(t1), digest,
                      topology::algorithm_name(info.algorithm), std::to_string(info.segment_bytes),
                      std::to_string(comm.rejected_connections()), std::to_string(peak_rss_bytes()),
                      std::to_string(current_rss_bytes())));
    }
    if (file_mode && rank != params.root) buffer.flush();
    receive("exit");
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    err << "gridbcast rank " << session.rank() << ": " << what << std::endl;
    session.report_error(what);
    return 1;
  }
}

}  // namespace gridbcast::job
