#include "job/rank.hpp"

#include <openssl/evp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "files/file_tree.hpp"
#include "job/bench.hpp"
#include "job/params.hpp"
#include "job/protocol.hpp"
#include "job/session.hpp"
#include "lanes/log.hpp"
#include "lanes/net.hpp"
#include "runtime/buffer.hpp"
#include "runtime/communicator.hpp"
#include "runtime/endpoints.hpp"
#include "topology/units.hpp"

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
  for (const char* name :
       {"GRIDBCAST_RANK", "SLURM_PROCID", "PMIX_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"}) {
    const std::string v = env_or_empty(name);
    if (!v.empty()) {
      if (v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        throw std::runtime_error(std::string(name) + " is not a rank number: \"" + v + "\"");
      return std::stoi(v);
    }
  }
  return std::nullopt;
}

namespace {

// SHA-256 of the copy, telling the session as it goes: hashing gigabytes is
// progress the launcher must see, though no byte crosses the network.
std::string sha256_reporting(Session& session, const std::byte* data, std::uint64_t bytes) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  constexpr std::uint64_t kPiece = 64u << 20;
  for (std::uint64_t off = 0; ok && off < bytes; off += kPiece) {
    const std::uint64_t n = std::min(kPiece, bytes - off);
    ok = EVP_DigestUpdate(ctx, data + off, n) == 1;
    session.note_work(n);
  }
  std::vector<std::uint8_t> md(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, md.data(), &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("SHA-256 failed in OpenSSL");
  md.resize(len);
  return runtime::to_hex(md);
}

// The launcher's next message, which must be a T.
template <typename T>
T expect(Session& session) {
  control::ToRank m = session.receive();
  if (auto* t = std::get_if<T>(&m)) return std::move(*t);
  throw std::runtime_error("the launcher sent " + control::name_of(m) + " where " +
                           control::name_of(control::ToRank{T{}}) + " was expected");
}

// Ready, then the launcher's Go for the same iteration; from then on the
// heartbeat carries this iteration's progress. Returns Done with its start.
control::Done begin_iteration(Session& session, int i) {
  session.send(control::Ready{i});
  const auto go = expect<control::Go>(session);
  if (go.iteration != i)
    throw std::runtime_error("the launcher started iteration " + std::to_string(go.iteration) +
                             " while this rank is at " + std::to_string(i));
  control::Done done;
  done.iteration = i;
  done.t0_ns = now_ns();
  session.report_progress(i);
  return done;
}

int run_bench_rank(Session& session) {
  const JobParams& params = session.params();
  const BenchSpec spec = BenchSpec::decode(params.bench);
  runtime::MappedBuffer buffer = runtime::MappedBuffer::anonymous(spec.largest_size());
  run_bench(session.communicator(), spec, params.root, buffer.data(),
            [&](const BenchPoint& p) { session.send(control::Point{p.encode()}); });
  session.expect_exit();  // the launcher may answer the last report at once
  session.send(control::BenchDone{session.communicator().rejected_connections(), peak_rss_bytes()});
  (void)expect<control::Exit>(session);
  return 0;
}

// --file: each iteration streams the file (or every file of a directory) from
// the root to every other rank's copy (job/file_tree.hpp, job/file_broadcast.hpp);
// the root digest over the chunk digests stands for the SHA-256 the launcher
// compares.
int run_file_rank(Session& session) {
  const int rank = session.rank();
  const topology::Grid& grid = session.grid();
  const JobParams& params = session.params();
  runtime::Communicator& comm = session.communicator();
  const auto& node = grid.nodes[static_cast<size_t>(rank)];
  files::install_signal_cleanup();
  files::FileSpec spec;
  if (params.files.size() == 1) {
    spec.source = params.files.front();
    if (params.file_count == 1) spec.expected_size = params.size;
  } else {
    spec.sources = params.files;
  }
  if (params.output.find("{node}") != std::string::npos) files::check_node_name_for_path(node.name);
  spec.output = output_path(params.output, params.label(rank), node.name);
  spec.window_bytes = params.window_bytes;
  spec.resume = params.resume;
  spec.compress = files::parse_compression(params.compress).value_or(files::Compression::kOff);
  spec.source_dev = params.source_dev;
  spec.source_ino = params.source_ino;
  spec.on_work = [&session](std::uint64_t bytes) { session.note_work(bytes); };
  for (int i = 0; i < params.iterations; ++i) {
    const Iteration it = iteration_at(params, i, grid);
    // The first root was lost and this rank's copy is whole: it sends that.
    const bool own_copy = params.source_is_copy && rank == it.root;
    if (own_copy) {
      struct stat st {};
      if (::lstat(spec.output.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw std::runtime_error(spec.output +
                                 ": cannot be sent as the source: not a regular file of its own");
      spec.source = spec.output;
    }
    control::Done done = begin_iteration(session, i);
    spec.algorithm =
        it.algorithm == "auto" ? std::nullopt : topology::parse_algorithm(it.algorithm);
    const files::TreeResult r = files::broadcast_tree(comm, spec, it.root);
    if (own_copy) {
      // Its copy is whole and was the source: the partial of the run that
      // lost the root is of no use. The broadcast stands if it stays.
      try {
        if (files::discard_partial(spec.output) > 0)
          lanes::log::info("gridbcast rank " + std::to_string(rank) +
                           ": removed the copy in progress beside " + spec.output);
      } catch (const std::exception& e) {
        lanes::log::notice("gridbcast rank " + std::to_string(rank) + ": " + e.what());
      }
    }
    done.t1_ns = now_ns();
    if (rank == it.root) {
      if (params.file_count != 0 && r.files != params.file_count)
        throw std::runtime_error("rank " + std::to_string(rank) +
                                 ": the source changed since "
                                 "the launch began: " +
                                 std::to_string(r.files) + " files sent, " +
                                 std::to_string(params.file_count) + " announced");
      // What was sent of each file, for the launcher's summary, in lists of
      // at most kMaxFileRecordsPerList.
      control::FileList list{i, {}};
      for (size_t f = 0; f < r.per_file.size(); ++f) {
        const files::FileResult& fr = r.per_file[f];
        list.files.push_back({fr.name, fr.size, fr.chunks, fr.chunks_sent, fr.root_digest,
                              fr.wire_bytes, fr.compressed});
        if (list.files.size() == control::kMaxFileRecordsPerList || f + 1 == r.per_file.size()) {
          session.send(list);
          list.files.clear();
        }
      }
    }
    // Its heartbeats go on reporting this iteration, as above.
    done.sha256 = r.root_digest;
    done.algorithm = r.algorithm;
    done.segment_bytes = r.per_file.empty() ? 0 : r.per_file.front().chunk_bytes;
    done.rejected = comm.rejected_connections();
    done.peak_rss = peak_rss_bytes();
    done.rss = current_rss_bytes();
    if (rank != it.root) done.path = r.path;
    if (rank == it.root && params.resume)
      lanes::log::notice("gridbcast rank " + std::to_string(rank) + ": resume: sent " +
                         std::to_string(r.chunks_sent) + " of " + std::to_string(r.chunks) +
                         " chunks; every copy held the others intact (checked in " +
                         topology::format_duration(r.check_seconds) + "; the root digested " +
                         std::to_string(r.chunks_digested) + " of the source's chunks)");
    if (rank == it.root && (r.files_compressed > 0 || !r.compression_why.empty()))
      lanes::log::notice("gridbcast rank " + std::to_string(rank) + ": compression: " +
                         std::to_string(r.files_compressed) + " of " + std::to_string(r.files) +
                         (r.files == 1 ? " file" : " files") + " packed with zstd; " +
                         topology::format_bytes(r.bytes_sent) + " of chunks went as " +
                         topology::format_bytes(r.wire_bytes) + " of windows" +
                         (r.compression_why.empty() ? "" : " (" + r.compression_why + ")"));
    if (rank == it.root && r.files + r.symlinks + r.directories > 1)
      lanes::log::notice("gridbcast rank " + std::to_string(rank) + ": " + std::to_string(r.files) +
                         " files (" + std::to_string(r.bytes) + " bytes), " +
                         std::to_string(r.directories) + " directories, " +
                         std::to_string(r.symlinks) + " symbolic links" +
                         (r.batches == 0 ? std::string()
                                         : "; " + std::to_string(r.files_batched) +
                                               " small files went in " + std::to_string(r.batches) +
                                               (r.batches == 1 ? " batch" : " batches")));
    if (i + 1 == params.iterations) session.expect_exit();  // the answer may come at once
    session.send(done);
  }
  (void)expect<control::Exit>(session);
  return 0;
}

int run_broadcast_rank(Session& session) {
  const int rank = session.rank();
  const topology::Grid& grid = session.grid();
  const JobParams& params = session.params();
  runtime::Communicator& comm = session.communicator();
  if (!params.files.empty()) return run_file_rank(session);
  runtime::MappedBuffer buffer = runtime::MappedBuffer::anonymous(params.size);

  for (int i = 0; i < params.iterations; ++i) {
    const Iteration it = iteration_at(params, i, grid);
    if (rank == it.root)
      runtime::fill_pattern(buffer.data(), it.size, params.seed + static_cast<std::uint64_t>(i));
    const auto algo =
        it.algorithm == "auto" ? std::nullopt : topology::parse_algorithm(it.algorithm);
    // `auto` prices its candidates on a size class's first broadcast: before
    // the clock starts, so the time is the broadcast's alone.
    if (!algo) (void)comm.auto_algorithm(it.size, it.root);
    control::Done done = begin_iteration(session, i);
    const runtime::BcastInfo info = comm.bcast(buffer.data(), it.size, it.root, algo);
    done.t1_ns = now_ns();
    if (params.verify) done.sha256 = sha256_reporting(session, buffer.data(), it.size);
    // Its heartbeats go on reporting this iteration (its links) until the
    // next: the bytes it sent may still be in flight (job/cut.hpp).
    done.algorithm = topology::algorithm_name(info.algorithm);
    done.segment_bytes = info.segment_bytes;
    done.rejected = comm.rejected_connections();
    done.peak_rss = peak_rss_bytes();
    done.rss = current_rss_bytes();
    if (i + 1 == params.iterations) session.expect_exit();  // the answer may come at once
    session.send(done);
  }
  (void)expect<control::Exit>(session);
  return 0;
}

// `gridbcast probe`: each phase of the schedule every rank derives from the
// topology, started by the launcher's Go, reported as it ends.
int run_probe_rank(Session& session) {
  const auto phases = topology::probe_schedule(session.grid(), session.params().probe);
  const int n = static_cast<int>(phases.size());
  if (n == 0) session.expect_exit();  // nothing to measure: the launcher ends the job at once
  for (int i = 0; i < n; ++i) {
    (void)begin_iteration(session, i);
    control::ProbeReport report{i, session.communicator().probe(i, phases[static_cast<size_t>(i)],
                                                                session.params().probe.pings)};
    session.report_progress(-1);
    if (i + 1 == n) session.expect_exit();  // the answer may come at once
    session.send(report);
  }
  // Then the confirmations the launcher decides on (topology::confirm_phases),
  // each started by its ProbePhaseSpec, until Exit.
  for (int next = n;; ++next) {
    control::ToRank m = session.receive();
    if (std::holds_alternative<control::Exit>(m)) return 0;
    auto* spec = std::get_if<control::ProbePhaseSpec>(&m);
    if (spec == nullptr)
      throw std::runtime_error("the launcher sent " + control::name_of(m) +
                               " where a probe phase or Exit was expected");
    if (spec->index != next)
      throw std::runtime_error("the launcher started probe phase " + std::to_string(spec->index) +
                               " where phase " + std::to_string(next) + " was due");
    session.report_progress(next);
    control::ProbeReport report{
        next, session.communicator().probe(next, spec->phase, session.params().probe.pings)};
    session.report_progress(-1);
    session.send(report);
  }
}

}  // namespace

int run_rank(std::istream& secret_in, std::ostream& err) {
  Session session;
  try {
    session.join(&secret_in);
    switch (session.params().kind) {
      case JobKind::kBench:
        return run_bench_rank(session);
      case JobKind::kBroadcast:
        return run_broadcast_rank(session);
      case JobKind::kProbe:
        return run_probe_rank(session);
      case JobKind::kProgram:
        break;
    }
    throw std::runtime_error(
        "this job runs a program (gridbcast launch TOPOLOGY -- PROGRAM); 'gridbcast rank' has "
        "no part in it");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    // One write for the whole line: ranks share the launcher's terminal, and
    // a line written in pieces tore against the others' ("gridbcast rank
    // gridbcast rank 6: 7rank 6 ...").
    err << ("gridbcast rank " + std::to_string(session.rank()) + ": " + what + "\n") << std::flush;
    session.report_error(what);
    return 1;
  }
}

}  // namespace gridbcast::job
