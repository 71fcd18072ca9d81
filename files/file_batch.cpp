#include "files/file_batch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>

#include "runtime/buffer.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::files {

std::uint64_t batch_bytes_for_window(std::uint64_t window_bytes) {
  const std::uint64_t w = window_bytes ? window_bytes : kDefaultWindowBytes;
  return std::clamp<std::uint64_t>(w / 2, 1, kMaxWindowBytes / 2);
}

std::uint64_t batch_files_for_timeout(std::chrono::milliseconds timeout) {
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(timeout.count() / 50, 16, 512));
}

std::vector<std::vector<size_t>> plan_batches(const std::vector<TreeEntry>& entries,
                                              std::uint64_t batch_bytes,
                                              std::uint64_t batch_files) {
  std::vector<std::vector<size_t>> out;
  const std::uint64_t small = std::min(kBatchFileBytes, batch_bytes);
  std::uint64_t held = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const TreeEntry& e = entries[i];
    if (e.kind != TreeEntry::Kind::kFile || e.size > small) continue;
    if (out.empty() || out.back().size() >= batch_files || held + e.size > batch_bytes) {
      out.emplace_back();
      held = 0;
    }
    out.back().push_back(i);
    held += e.size;
  }
  return out;
}

CompressionChoice choose_batch_compression(const std::vector<TreeEntry>& entries,
                                           const std::vector<std::vector<size_t>>& batches,
                                           const std::function<FileSource(size_t)>& open_source,
                                           double network_bps, std::uint64_t sample_bytes) {
  CompressionChoice c;
  c.network_bps = network_bps;
  if (!(network_bps > 0)) {
    c.why = "no network rate to compare with";
    return c;
  }
  ChunkCompressor z;
  std::vector<std::byte> in, out;
  std::uint64_t raw = 0, packed = 0, files = 0;
  double seconds = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto sample = [&] {
    for (const auto& b : batches)
      for (size_t i : b) {
        const std::uint64_t n = entries[i].size;
        if (n == 0) continue;
        in.resize(n);
        out.resize(n);
        open_source(i).read(0, in.data(), n);
        const auto t0 = std::chrono::steady_clock::now();
        packed += z.pack(in.data(), n, out.data());
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        raw += n;
        ++files;
        if (raw >= sample_bytes) return;
      }
  };
  try {
    sample();
  } catch (const std::exception&) {
    // The batch that holds it fails the job naming it.
  }
  if (raw == 0) {
    c.why = "no bytes to sample";
    return c;
  }
  c = judge_samples(raw, packed, seconds, network_bps);
  c.sample_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char b[160];
  std::snprintf(b, sizeof b,
                "%llu files (%.0f KiB) to %.2f of their size in %.1f ms, at %.0f MB/s; network at "
                "most %.0f MB/s",
                static_cast<unsigned long long>(files), static_cast<double>(raw) / 1024, c.ratio,
                c.sample_seconds * 1e3, c.compress_bps / 1e6, network_bps / 1e6);
  c.why = b;
  return c;
}

namespace {

struct BatchRun {
  BatchRun(runtime::Communicator& c, const FileSpec& s, int r, const std::vector<TreeEntry>& e,
           const BatchPlan& b, const BatchIo& i)
      : comm(c),
        spec(s),
        root(r),
        entries(e),
        batches(b.batches),
        packed(b.packed),
        chunk_bytes(std::clamp<std::uint64_t>(b.bytes, 1, kDefaultChunkBytes)),
        io(i) {}

  runtime::Communicator& comm;
  const FileSpec& spec;
  const int root;
  const std::vector<TreeEntry>& entries;
  const std::vector<std::vector<size_t>>& batches;
  const bool packed;  // each file packed by zstd: the head, then the bytes as long as it says
  // The chunk a file alone would be cut into (files/file_broadcast.cpp: at
  // most half the root's window, as the batch is), for the reports: a
  // batched file is one such chunk.
  const std::uint64_t chunk_bytes;
  const BatchIo& io;
  const bool is_root = comm.rank() == root;
  const std::string me = rank_name(comm, comm.rank());
  std::vector<std::pair<size_t, FileResult>> results;
  std::string algorithm;  // what the batches' broadcasts ran
  // Packed: the root's compressor and the file it reads into; every other
  // rank's decompressor and the file it unpacks into (each used by one batch
  // at a time: a batch is filled or drained only once the one before is).
  std::unique_ptr<ChunkCompressor> packer;
  std::unique_ptr<ChunkDecompressor> unpacker;
  std::vector<std::byte> stage;

  std::uint64_t data_bytes(size_t k) const {
    std::uint64_t n = 0;
    for (size_t i : batches[k]) n += entries[i].size;
    return n;
  }
  std::uint64_t head_bytes(size_t k) const { return batch_head_bytes(batches[k].size()); }
  std::uint64_t bytes(size_t k) const { return head_bytes(k) + data_bytes(k); }
  std::vector<std::uint64_t> sizes(size_t k) const {
    std::vector<std::uint64_t> out;
    for (size_t i : batches[k]) out.push_back(entries[i].size);
    return out;
  }

  FileResult result_of(size_t i, const FileMeta& m, std::uint64_t wire, const Digest& d,
                       const std::string& path, double seconds) const {
    FileResult r;
    r.path = path;
    r.size = entries[i].size;
    r.mode = m.mode;
    r.mtime = m.mtime;
    r.chunk_bytes = chunk_bytes;
    r.chunks = r.chunks_sent = r.size > 0 ? 1 : 0;
    r.root_digest =
        to_hex(root_digest(r.size > 0 ? std::vector<Digest>{d} : std::vector<Digest>{}));
    r.bytes_sent = r.size;
    r.wire_bytes = wire;
    r.compressed = packed;
    r.seconds = seconds;
    return r;
  }

  // The root's batch k in its buffer: the head it encoded there (or an error
  // head) and the bytes of the files as they travel after it.
  struct Filled {
    BatchHead head;
    std::uint64_t body = 0;
  };

  // The root: reads batch k into `buf` with its head, or an error head.
  Filled fill(size_t k, std::byte* buf) {
    const auto& idx = batches[k];
    BatchHead h;
    h.meta.resize(idx.size());
    h.wire.resize(idx.size());
    h.digests.resize(idx.size());
    std::uint64_t body = 0;
    try {
      std::byte* data = buf + head_bytes(k);
      for (size_t j = 0; j < idx.size(); ++j) {
        const TreeEntry& e = entries[idx[j]];
        const FileSource src = io.open_source(idx[j]);
        h.meta[j] = src.meta();
        if (h.meta[j].size != e.size)
          throw std::runtime_error(src.path() + ": changed size since the launch began (" +
                                   std::to_string(h.meta[j].size) + " bytes, " +
                                   std::to_string(e.size) + " announced)");
        std::byte* raw = packed ? stage.data() : data;
        src.read(0, raw, e.size);
        h.digests[j] = sha256(raw, e.size);
        h.wire[j] = packed && e.size > 0 ? packer->pack(raw, e.size, data) : e.size;
        if (spec.on_work) spec.on_work(e.size);
        data += h.wire[j];
        body += h.wire[j];
      }
    } catch (const std::exception& e) {
      h = BatchHead{};
      h.ok = false;
      h.error = e.what();
    }
    encode_batch_head(h, buf);
    return {std::move(h), body};
  }

  // Every other rank: batch k's head, checked as soon as it arrived (the
  // root's error stops this rank before the next batch, which the root will
  // not send).
  BatchHead head(size_t k, const std::byte* buf) const {
    const auto& idx = batches[k];
    BatchHead h;
    try {
      h = decode_batch_head({buf, batch_head_bytes(idx.size())}, sizes(k), packed);
    } catch (const FileWireError& e) {
      throw std::runtime_error(me + ": refused batch " + std::to_string(k) + ": " + e.what());
    }
    if (!h.ok)
      throw std::runtime_error(me + ": stopped: the root, " + rank_name(comm, root) +
                               ", cannot send: " + h.error);
    return h;
  }

  // Every other rank: checks batch k's files and writes each.
  void drain(size_t k, const std::byte* buf, const BatchHead& h) {
    const auto& idx = batches[k];
    const std::byte* data = buf + batch_head_bytes(idx.size());
    for (size_t j = 0; j < idx.size(); ++j) {
      const auto start = std::chrono::steady_clock::now();
      const std::uint64_t len = entries[idx[j]].size;
      const std::string path = io.path(idx[j]);
      const std::byte* bytes = data;
      if (packed && len > 0) {
        try {
          unpacker->unpack(data, h.wire[j], stage.data(), len);
        } catch (const FileWireError& e) {
          throw std::runtime_error(me + ": " + path + " arrived damaged: " + e.what());
        }
        bytes = stage.data();
      }
      const Digest got = sha256(bytes, len);
      if (got != h.digests[j])
        throw std::runtime_error(me + ": " + path + " arrived damaged: SHA-256 " + to_hex(got) +
                                 ", the root's " + to_hex(h.digests[j]));
      FileMeta meta = h.meta[j];
      meta.size = len;
      // Written whole at once and renamed into place: no chunk record (a
      // partial left by a failure is started over, as every batch moves
      // whole), and no O_DIRECT descriptor beside it for a file this small.
      SinkOptions so;
      so.dir_mode = spec.dir_mode;
      so.direct_io = false;
      so.source_dev = meta.dev;
      so.source_ino = meta.ino;
      FileSink sink = io.open_sink(idx[j], meta, so);
      if (len > 0) sink.write(0, bytes, len);
      sink.commit(false);
      if (spec.on_work) spec.on_work(len);
      data += h.wire[j];
      results.emplace_back(
          idx[j],
          result_of(
              idx[j], meta, h.wire[j], got, sink.final_path(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
    // The renames are on disk before the batch counts as landed.
    io.sync_dirs(idx);
  }

  void run() {
    if (batches.empty()) return;
    std::uint64_t most = 0, stream = 0, largest_file = 0;
    for (size_t k = 0; k < batches.size(); ++k) {
      most = std::max(most, bytes(k));
      stream += bytes(k);
      for (size_t i : batches[k]) largest_file = std::max(largest_file, entries[i].size);
    }
    if (packed) {
      stage.resize(largest_file);
      if (is_root)
        packer = std::make_unique<ChunkCompressor>();
      else
        unpacker = std::make_unique<ChunkDecompressor>();
    }
    // Two buffers: the network fills one while the disk drains (or the root
    // reads into) the other.
    runtime::MappedBuffer bufs[2] = {runtime::MappedBuffer::anonymous(most),
                                     runtime::MappedBuffer::anonymous(most)};
    // Back to back, as a file's windows: the algorithm and segment chosen for
    // all of them (from the bytes as stored, which every rank knows alike).
    auto bcast = [&](std::byte* at, std::uint64_t n) {
      algorithm = std::string(
          topology::algorithm_name(comm.bcast(at, n, root, spec.algorithm, stream).algorithm));
    };
    if (is_root) {
      auto start = std::chrono::steady_clock::now();  // of the batch being sent
      std::future<Filled> next =
          std::async(std::launch::async, [this, &bufs] { return fill(0, bufs[0].data()); });
      for (size_t k = 0; k < batches.size(); ++k) {
        std::byte* buf = bufs[k % 2].data();
        const Filled f = next.get();
        const BatchHead& h = f.head;
        if (h.ok && k + 1 < batches.size())
          next = std::async(std::launch::async,
                            [this, &bufs, k] { return fill(k + 1, bufs[(k + 1) % 2].data()); });
        // An error head too: it stops every rank naming this one.
        if (packed) {
          bcast(buf, head_bytes(k));
          if (h.ok) bcast(buf + head_bytes(k), f.body);
        } else {
          bcast(buf, bytes(k));  // the length every rank knows, whatever was read
        }
        if (io.after_batch) io.after_batch(k);
        if (!h.ok) throw std::runtime_error(me + ": " + h.error);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (size_t j = 0; j < batches[k].size(); ++j) {
          const size_t i = batches[k][j];
          results.emplace_back(
              i, result_of(i, h.meta[j], h.wire[j], h.digests[j], io.path(i), seconds));
        }
        start = std::chrono::steady_clock::now();
      }
      return;
    }
    std::future<void> writing;  // declared after the buffers: joined first
    for (size_t k = 0; k < batches.size(); ++k) {
      // Batch k's buffer is the one batch k-2 was written from.
      std::byte* buf = bufs[k % 2].data();
      BatchHead h;
      std::uint64_t n = bytes(k);
      if (packed) {
        bcast(buf, head_bytes(k));
        h = head(k, buf);
        n = head_bytes(k);
        for (std::uint64_t w : h.wire) n += w;  // each at most its file's size: within the buffer
        bcast(buf + head_bytes(k), n - head_bytes(k));
      } else {
        bcast(buf, n);
      }
      if (io.after_batch) io.after_batch(k);
      if (io.on_arrival) io.on_arrival(k, buf, n);
      if (!packed) h = head(k, buf);
      if (writing.valid()) writing.get();
      writing =
          std::async(std::launch::async, [this, buf, k, h = std::move(h)] { drain(k, buf, h); });
    }
    writing.get();
  }
};

}  // namespace

std::vector<std::pair<size_t, FileResult>> broadcast_batches(runtime::Communicator& comm,
                                                             const FileSpec& spec, int root,
                                                             const std::vector<TreeEntry>& entries,
                                                             const BatchPlan& plan,
                                                             const BatchIo& io) {
  BatchRun run(comm, spec, root, entries, plan, io);
  run.run();
  for (auto& [i, r] : run.results) r.algorithm = run.algorithm;
  return std::move(run.results);
}

}  // namespace gridbcast::files
