// files/file_batch.cpp over loopback (ranks as threads) and real files: a
// tree's small files travel many to a broadcast, land as a file alone does
// (content, mode, mtime, temporary name renamed into place), and what a
// hostile root or a changing source does fails the right ranks by name.
#include "files/file_batch.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "files/compress.hpp"
#include "files/file_tree.hpp"
#include "runtime/buffer.hpp"
#include "support/file_runs.hpp"
#include "support/grids.hpp"
#include "support/process.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::files {
namespace {

namespace fs = std::filesystem;
using runs::pattern_bytes;
using runs::write_file;
using testing::make_grid;
using testing::Ranks;
using testing::slurp;
using testing::TempDir;

// Bytes zstd packs to a fraction of their size.
std::string text_bytes(std::uint64_t size) {
  std::string s;
  while (s.size() < size)
    s += "the quick brown fox jumps over the lazy dog " + std::to_string(s.size());
  s.resize(size);
  return s;
}

TreeEntry file_entry(const std::string& path, std::uint64_t size) {
  TreeEntry e;
  e.path = path;
  e.size = size;
  e.mode = 0644;
  return e;
}

runtime::CommOptions short_timeout(int) {
  runtime::CommOptions o;
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

TEST(FileBatch, PlanKeepsManifestOrderAndEveryLimit) {
  std::vector<TreeEntry> entries;
  TreeEntry d;
  d.path = "";
  d.kind = TreeEntry::Kind::kDirectory;
  entries.push_back(d);
  entries.push_back(file_entry("a", 600));
  entries.push_back(file_entry("big", kBatchFileBytes + 1));  // alone
  entries.push_back(file_entry("b", 500));
  entries.push_back(file_entry("empty", 0));
  TreeEntry l;
  l.path = "link";
  l.kind = TreeEntry::Kind::kSymlink;
  l.target = "a";
  entries.push_back(l);
  entries.push_back(file_entry("c", 1000));
  entries.push_back(file_entry("past", 1025));  // more than a batch holds: alone
  // Batches of 1 KiB: a and b do not fit one; c fills one alone.
  EXPECT_EQ(plan_batches(entries, 1024, 16), (std::vector<std::vector<size_t>>{{1}, {3, 4}, {6}}));
  // And at most as many files as the tree header says (with batches of
  // 1 MiB, "past" is small too).
  EXPECT_EQ(plan_batches(entries, 1 << 20, 2),
            (std::vector<std::vector<size_t>>{{1, 3}, {4, 6}, {7}}));
  // A batch holds at most kMaxBatchFiles files, whatever their size.
  std::vector<TreeEntry> many(1, d);
  for (std::uint64_t i = 0; i < kMaxBatchFiles + 3; ++i)
    many.push_back(file_entry("f" + std::to_string(i), 0));
  const auto b = plan_batches(many, 1 << 20, kMaxBatchFiles);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].size(), kMaxBatchFiles);
  EXPECT_EQ(b[1].size(), 3u);
  EXPECT_EQ(batch_bytes_for_window(0), kDefaultWindowBytes / 2);
  EXPECT_EQ(batch_bytes_for_window(1), 1u);
  // 50 ms a file within the progress deadline, 16 to 512.
  EXPECT_EQ(batch_files_for_timeout(std::chrono::seconds(30)), 512u);
  EXPECT_EQ(batch_files_for_timeout(std::chrono::seconds(5)), 100u);
  EXPECT_EQ(batch_files_for_timeout(std::chrono::milliseconds(100)), 16u);
  EXPECT_EQ(batch_files_for_timeout(runtime::kNoTimeout), 512u);
}

// 300 small files in three directories, empty ones and one file too large
// for a batch: every rank's tree is the source's, byte for byte, with modes
// and mtimes; the small files went in the batches the plan says, the large
// one alone; every rank's digest over the tree is the root's.
void many_small_files_arrive(Compression compress);

TEST(FileBatch, ManySmallFilesArriveInBatchesWithModesAndMtimes) {
  for (const Compression compress : {Compression::kOff, Compression::kZstd}) {
    SCOPED_TRACE(compression_name(compress));
    many_small_files_arrive(compress);
  }
}

void many_small_files_arrive(Compression compress) {
  TempDir dir;
  std::map<std::string, std::string> want;
  for (int d = 0; d < 3; ++d) {
    fs::create_directories(dir / "src" / ("d" + std::to_string(d)));
    for (int f = 0; f < 100; ++f) {
      const std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f);
      const std::uint64_t size = f % 10 == 0 ? 0 : static_cast<std::uint64_t>(37 * f + 1000 * d);
      // Every other file text that packs, the rest bytes that do not.
      want[rel] =
          f % 2 ? text_bytes(size) : pattern_bytes(size, static_cast<std::uint64_t>(100 * d + f));
      write_file(dir / "src" / rel, want[rel], f % 2 ? 0640 : 0604);
      const struct timespec t[2] = {{1600000000 + f, 0}, {1600000000 + f, 12345}};
      ::utimensat(AT_FDCWD, (dir / "src" / rel).c_str(), t, 0);
    }
  }
  want["large.bin"] = pattern_bytes(300'000, 9);
  write_file(dir / "src" / "large.bin", want["large.bin"], 0600);
  const auto grid = make_grid({2, 2});
  Ranks ranks(grid, short_timeout);
  // Windows of 128 KiB: batches of 64 KiB, so several; large.bin goes alone.
  const runs::TreeOutcome out = runs::run_tree(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r))).string();
    s.window_bytes = 128 << 10;
    s.compress = compress;
    return s;
  });
  ASSERT_TRUE(out.errors.empty()) << out.errors.begin()->second;
  const TreeResult& root = out.results.at(0);
  EXPECT_EQ(root.files, 301u);
  EXPECT_EQ(root.files_batched, 300u);
  const bool packed = compress == Compression::kZstd;
  // Packed, the text travels as less than it stores, the rest as it is;
  // unpacked, every small file as it is.
  std::uint64_t stored = 0, wire = 0;
  for (const FileResult& f : root.per_file) {
    if (f.name == "large.bin") continue;
    stored += f.size;
    wire += f.wire_bytes;
    EXPECT_LE(f.wire_bytes, f.size) << f.name;
    EXPECT_EQ(f.compressed, packed) << f.name;
  }
  if (packed) {
    EXPECT_LT(wire, stored * 3 / 4);
  } else {
    EXPECT_EQ(wire, stored);
  }
  EXPECT_EQ(root.batches, plan_batches(scan_tree((dir / "src").string()), 64 << 10,
                                       batch_files_for_timeout(short_timeout(0).timeout))
                              .size());
  EXPECT_GT(root.batches, 3u);
  for (int r = 1; r < 4; ++r) {
    const TreeResult& got = out.results.at(r);
    EXPECT_EQ(got.root_digest, root.root_digest) << "rank " << r;
    ASSERT_EQ(got.per_file.size(), root.per_file.size());
    for (size_t i = 0; i < got.per_file.size(); ++i)
      EXPECT_EQ(got.per_file[i].name, root.per_file[i].name);  // manifest order on every rank
    for (const auto& [rel, bytes] : want) {
      const fs::path p = dir / ("n" + std::to_string(r)) / rel;
      ASSERT_EQ(slurp(p.string()), bytes) << p;
      struct stat src {
      }, dst{};
      ASSERT_EQ(::stat((dir / "src" / rel).c_str(), &src), 0);
      ASSERT_EQ(::stat(p.c_str(), &dst), 0);
      EXPECT_EQ(dst.st_mode & 07777, src.st_mode & 07777) << p;
      EXPECT_EQ(dst.st_mtim.tv_sec, src.st_mtim.tv_sec) << p;
      EXPECT_EQ(dst.st_mtim.tv_nsec, src.st_mtim.tv_nsec) << p;
    }
    // Nothing left beside the copies: every temporary name was renamed.
    for (const auto& e : fs::recursive_directory_iterator(dir / ("n" + std::to_string(r))))
      EXPECT_EQ(e.path().filename().string().find(".gridbcast-"), std::string::npos) << e.path();
  }
}

// Between the root's walk and its reading of a later batch, one file grows
// and another becomes a link to a secret of the same size: the root fails
// naming the file, every other rank stops naming the root, the earlier
// batches stay landed, and no rank gets the secret or the file.
TEST(FileBatch, ASourceChangedBetweenBatchesStopsEveryRankNamingTheRoot) {
  for (const bool link : {false, true}) {
    SCOPED_TRACE(link ? "link" : "grown");
    TempDir dir;
    fs::create_directories(dir / "src");
    // Batches of 32 KiB: f0, f1, f2 each fill one (20 000 bytes each).
    for (int f = 0; f < 3; ++f)
      write_file(dir / "src" / ("f" + std::to_string(f)), pattern_bytes(20'000, f), 0644);
    write_file(dir / "secret", pattern_bytes(20'000, 77), 0600);
    const auto grid = make_grid({3});
    Ranks ranks(grid, short_timeout);
    const runs::TreeOutcome out = runs::run_tree(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("n" + std::to_string(r))).string();
      s.window_bytes = 64 << 10;
      s.after_batch = [&, r](std::uint64_t k) {
        // After batch 0 the root reads batch 1 already; batch 2 it reads next.
        if (r != 0 || k != 0) return;
        const fs::path f2 = dir / "src" / "f2";
        if (link) {
          fs::remove(f2);
          fs::create_symlink(dir / "secret", f2);
        } else {
          std::ofstream(f2, std::ios::binary | std::ios::app) << "more";
        }
      };
      return s;
    });
    ASSERT_EQ(out.errors.size(), 3u);
    EXPECT_NE(out.errors.at(0).find(link ? "symbolic link" : "changed size"), std::string::npos)
        << out.errors.at(0);
    for (int r : {1, 2}) {
      EXPECT_NE(out.errors.at(r).find("stopped: the root, rank 0"), std::string::npos)
          << out.errors.at(r);
      const fs::path n = dir / ("n" + std::to_string(r));
      EXPECT_EQ(slurp((n / "f0").string()), pattern_bytes(20'000, 0));
      EXPECT_FALSE(fs::exists(n / "f2"));
    }
  }
}

// A file damaged on its way to rank 1: rank 1 fails naming the file and
// writes nothing of it; the others hold the root's bytes.
TEST(FileBatch, AFileDamagedInFlightFailsTheRankThatGotItNamingIt) {
  TempDir dir;
  fs::create_directories(dir / "src");
  write_file(dir / "src" / "a", pattern_bytes(5000, 1), 0644);
  write_file(dir / "src" / "b", pattern_bytes(7000, 2), 0644);
  const auto grid = make_grid({3});
  Ranks ranks(grid, short_timeout);
  const runs::TreeOutcome out = runs::run_tree(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r))).string();
    s.on_batch_arrival = [r](std::uint64_t, std::byte* data, std::uint64_t bytes) {
      if (r == 1) data[bytes - 1] ^= std::byte{1};  // b's last byte
    };
    return s;
  });
  ASSERT_EQ(out.errors.size(), 1u);
  const std::string& e = out.errors.at(1);
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("/b arrived damaged"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "n1" / "b"));
  EXPECT_FALSE(fs::exists(dir / "n1" / ".b.gridbcast-partial"));
  EXPECT_EQ(slurp((dir / "n2" / "b").string()), pattern_bytes(7000, 2));
}

// A hostile root: a valid tree header and manifest, then a batch whose head
// gives a file a mode past 07777, or whose bytes are not the digest it
// claims. Every other rank refuses it naming what, and writes nothing.
TEST(FileBatch, AHostileBatchIsRefusedByEveryRankBeforeTheFileIsWritten) {
  TempDir dir;
  std::vector<TreeEntry> entries(1);
  entries[0].kind = TreeEntry::Kind::kDirectory;
  entries[0].mode = 0755;
  entries.push_back(file_entry("x", 10));
  const std::string manifest = encode_manifest(entries);
  const auto grid = make_grid({3});
  Ranks ranks(grid, short_timeout);
  // What the root sends: a mode past 07777, bytes that are not the digest,
  // and (packed) bytes that are not a zstd frame of the file's size.
  enum class Attack { kMode, kDigest, kNotAFrame };
  for (const Attack attack : {Attack::kMode, Attack::kDigest, Attack::kNotAFrame}) {
    const bool bad_mode = attack == Attack::kMode;
    const bool packed = attack == Attack::kNotAFrame;
    SCOPED_TRACE(static_cast<int>(attack));
    const auto errors = runs::tree_errors_under_root(
        ranks,
        [&](runtime::Communicator& c) {
          runs::send_tree_start(c, manifest, 1024, 16, packed);
          BatchHead h;
          h.meta.resize(1);
          h.wire = {packed ? 5u : 10u};
          h.digests.resize(1);
          h.meta[0].mode = bad_mode ? 0100644 : 0644;  // S_IFREG in the mode
          h.digests[0] = sha256(nullptr, 0);           // not the digest of the ten bytes below
          std::vector<std::byte> batch(batch_head_bytes(1) + 10, std::byte{'z'});
          encode_batch_head(h, batch.data());
          // The same lengths as every rank plans: it broadcasts the batch
          // (packed: its head, then the 5 bytes it gives) and ends the tree.
          if (packed) {
            c.bcast(batch.data(), batch_head_bytes(1), 0, std::nullopt, batch.size());
            c.bcast(batch.data() + batch_head_bytes(1), 5, 0, std::nullopt, batch.size());
          } else {
            c.bcast(batch.data(), batch.size(), 0, std::nullopt, batch.size());
          }
        },
        runs::output_in(dir.path()));
    ASSERT_EQ(errors.size(), 2u);
    for (const auto& [r, e] : errors) {
      EXPECT_NE(e.find(bad_mode ? "refused batch 0" : "arrived damaged"), std::string::npos) << e;
      if (bad_mode) {
        EXPECT_NE(e.find("file 0 has a mode of"), std::string::npos) << e;
      }
      if (packed) {
        EXPECT_NE(e.find("not one zstd frame"), std::string::npos) << e;
      }
      EXPECT_FALSE(fs::exists(dir / ("n" + std::to_string(r)) / "x"));
      EXPECT_FALSE(fs::exists(dir / ("n" + std::to_string(r)) / ".x.gridbcast-partial"));
    }
  }
}

// A rerun over a copy whose small file an earlier run left as a partial
// with its chunk record, and a record that is a link to a victim: the batch
// starts the partial over, the record goes (the link, never its target),
// and nothing but the copy is left.
TEST(FileBatch, AnEarlierRunsPartialAndRecordAreStartedOverAndRemoved) {
  TempDir dir;
  fs::create_directories(dir / "src");
  write_file(dir / "src" / "a", pattern_bytes(3000, 1), 0644);
  write_file(dir / "src" / "b", pattern_bytes(4000, 2), 0644);
  write_file(dir / "victim", "keep", 0600);
  fs::create_directories(dir / "n1");
  write_file(dir / "n1" / ".a.gridbcast-partial", "stale bytes of an earlier run", 0600);
  write_file(dir / "n1" / ".a.gridbcast-chunks", "an earlier run's record", 0600);
  write_file(dir / "n1" / ".b.gridbcast-partial", "stale", 0600);
  fs::create_symlink(dir / "victim", dir / "n1" / ".b.gridbcast-chunks");
  const auto grid = make_grid({2});
  Ranks ranks(grid, short_timeout);
  const runs::TreeOutcome out = runs::run_tree(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r))).string();
    return s;
  });
  ASSERT_TRUE(out.errors.empty()) << out.errors.begin()->second;
  EXPECT_EQ(slurp((dir / "n1" / "a").string()), pattern_bytes(3000, 1));
  EXPECT_EQ(slurp((dir / "n1" / "b").string()), pattern_bytes(4000, 2));
  EXPECT_EQ(slurp((dir / "victim").string()), "keep");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir / "n1")) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a", "b"}));
}

// `auto` over a tree's small files: text packs when the network is slower
// than the packing (here 1 MB/s), random bytes never do, and a fast network
// (100 GB/s) takes neither packed.
TEST(FileBatch, AutoPacksTheSmallFilesWhereItPays) {
  TempDir dir;
  std::vector<TreeEntry> entries(1);
  entries[0].kind = TreeEntry::Kind::kDirectory;
  std::vector<std::string> paths;
  for (int f = 0; f < 40; ++f) {
    const std::string name = "t" + std::to_string(f);
    write_file(dir / name, text_bytes(30'000), 0644);
    entries.push_back(file_entry(name, 30'000));
    paths.push_back((dir / name).string());
  }
  const auto batches = plan_batches(entries, 1 << 20, 512);
  const auto open = [&](size_t i) { return FileSource::open(paths.at(i - 1)); };
  const CompressionChoice text = choose_batch_compression(entries, batches, open, 1e6);
  EXPECT_TRUE(text.compress) << text.why;
  EXPECT_LT(text.ratio, 0.5) << text.why;
  EXPECT_NE(text.why.find("35 files ("), std::string::npos)
      << text.why;  // 1 MiB of 30 000-byte files
  EXPECT_FALSE(choose_batch_compression(entries, batches, open, 1e11).compress);
  for (size_t i = 0; i < paths.size(); ++i) write_file(paths[i], pattern_bytes(30'000, i), 0644);
  const CompressionChoice random = choose_batch_compression(entries, batches, open, 1e6);
  EXPECT_FALSE(random.compress) << random.why;
}

}  // namespace
}  // namespace gridbcast::files
