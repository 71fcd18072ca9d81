// job/file_broadcast.cpp over real loopback sockets (ranks as threads) and real
// files: every copy byte-exact with the source's mode and mtime for several
// shapes, roots and sizes around the chunk and window boundaries; each bad case
// of issue 12 fails the rank whose copy it is, naming the rank, the path and
// the errno text, while the others (past which it relays the windows) keep
// verified copies, or with resume fails every rank before data moves; and
// leaves the source, any previous copy and the planted symlink's target as
// they were; a signal mid-transfer leaves no
// partial file under the final name; a rerun with resume after a rank stopped
// moves only the chunks some rank lacked; a file far larger than the window is
// sent with bounded memory.
#include "files/file_broadcast.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "files/file_wire.hpp"
#include "runtime/buffer.hpp"
#include "support/file_runs.hpp"
#include "support/grids.hpp"
#include "support/process.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"
#include "support/tmpfs.hpp"

namespace gridbcast::files {
namespace {

namespace fs = std::filesystem;
using runs::Outcome;
using runs::quick_timeout;
using runs::run;
using runs::write_file;
using testing::make_grid;
using testing::Ranks;
using testing::slurp;
using testing::TempDir;

constexpr std::uint64_t kChunk = 64 << 10;
constexpr std::uint64_t kWindow = 256 << 10;  // two chunks per half window

std::string pattern_bytes(std::uint64_t size, std::uint64_t seed) {
  std::string s(size, '\0');
  runtime::fill_pattern(reinterpret_cast<std::byte*>(s.data()), size, seed);
  return s;
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".gridbcast-") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

class FileShapes : public ::testing::TestWithParam<std::tuple<std::vector<int>, int>> {};

TEST_P(FileShapes, EveryCopyIsExactWithModeAndMtime) {
  const auto& [sites, root] = GetParam();
  const auto grid = make_grid(sites);
  Ranks ranks(grid);
  TempDir dir;
  // Sizes: empty, one byte, a chunk less one, one window-half exactly, and
  // several windows with a short last chunk.
  for (const std::uint64_t size :
       std::vector<std::uint64_t>{0, 1, kChunk - 1, kWindow / 2, 5 * kWindow + 12345}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const fs::path src = dir / ("src-" + std::to_string(size));
    const std::string data = pattern_bytes(size, size + 1);
    write_file(src, data, 0750);
    const FileMeta meta = stat_file(src.string());
    const Outcome o = run(ranks, root, [&](int r) {
      FileSpec s;
      s.source = src.string();
      s.output = (dir / ("n" + std::to_string(r)) / ("copy-" + std::to_string(size))).string();
      s.chunk_bytes = kChunk;
      s.window_bytes = kWindow;
      return s;
    });
    ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
    const std::string want = o.results.at(root).root_digest;
    for (int r = 0; r < ranks.size(); ++r) {
      const FileResult& res = o.results.at(r);
      EXPECT_EQ(res.root_digest, want) << "rank " << r;
      EXPECT_EQ(res.chunks, (size + kChunk - 1) / kChunk);
      EXPECT_EQ(res.chunks_sent, res.chunks);
      // The window, plus each half's chunk digests padded to kDirectAlign.
      EXPECT_LE(res.buffer_bytes, kWindow + 2 * kDirectAlign);
      if (r == root) continue;
      EXPECT_EQ(res.path, o.results.at(r).path);
      EXPECT_EQ(slurp(res.path), data) << "rank " << r;
      struct stat st {};
      ASSERT_EQ(::stat(res.path.c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0750u);
      EXPECT_EQ(FileTime::of(st.st_mtim), meta.mtime);
    }
    EXPECT_TRUE(temporaries(dir.path()).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, FileShapes,
                         ::testing::Values(std::make_tuple(std::vector<int>{1}, 0),
                                           std::make_tuple(std::vector<int>{2}, 1),
                                           std::make_tuple(std::vector<int>{3, 2}, 0),
                                           std::make_tuple(std::vector<int>{3, 2}, 4)),
                         [](const auto& p) {
                           std::string n;
                           for (int s : std::get<0>(p.param)) n += std::to_string(s) + "x";
                           return n + "root" + std::to_string(std::get<1>(p.param));
                         });

// Every rank failed, the failing ones with their own error and the others
// naming a failing rank; returns the failing ranks' messages.
void expect_all_failed(const Outcome& o, int ranks, const std::vector<std::string>& parts) {
  EXPECT_TRUE(o.results.empty());
  ASSERT_EQ(o.errors.size(), static_cast<size_t>(ranks));
  for (const auto& [r, e] : o.errors) {
    EXPECT_EQ(e.rfind("rank " + std::to_string(r) + " (node ", 0), 0u) << e;
    for (const auto& p : parts)
      EXPECT_NE(e.find(p), std::string::npos) << "\"" << p << "\" in " << e;
  }
}

// Without resume or compression the windows follow the header: the ranks in
// `failing` failed alone, each with its own error holding every one of
// `parts` and saying it relayed the file; every other rank but `root` holds
// an exact copy of `data`, all with the root's digest.
void expect_failed_alone(const Outcome& o, int ranks, int root, const std::set<int>& failing,
                         const std::vector<std::string>& parts, const std::string& data) {
  ASSERT_EQ(o.errors.size(), failing.size());
  for (const auto& [r, e] : o.errors) {
    EXPECT_TRUE(failing.count(r)) << "rank " << r << ": " << e;
    EXPECT_EQ(e.rfind("rank " + std::to_string(r) + " (node ", 0), 0u) << e;
    EXPECT_NE(e.find("relayed the file for the others"), std::string::npos) << e;
    for (const auto& p : parts)
      EXPECT_NE(e.find(p), std::string::npos) << "\"" << p << "\" in " << e;
  }
  ASSERT_EQ(o.results.size(), static_cast<size_t>(ranks) - failing.size());
  ASSERT_TRUE(o.results.count(root));
  for (const auto& [r, res] : o.results) {
    EXPECT_EQ(res.root_digest, o.results.at(root).root_digest) << "rank " << r;
    if (r != root) {
      EXPECT_EQ(slurp(res.path), data) << "rank " << r;
    }
  }
}

// `gridbcast launch --file X --output X` made every copy and the source zeros.
// Without resume the root sends, the ranks refuse; with resume every rank
// stops before data moves.
TEST(FileBroadcast, OutputThatIsTheSourceIsRefusedAndTheSourceSurvives) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  const fs::path src = dir / "data.bin";
  const std::string data = pattern_bytes(300'000, 7);
  write_file(src, data);
  fs::create_hard_link(src, dir / "hardlink.bin");
  // Two spellings of the path, and a hard link.
  const std::vector<std::string> spellings = {src.string(), dir.path().string() + "/./data.bin",
                                              (dir / "hardlink.bin").string()};
  for (const bool resume : {false, true}) {
    for (const auto& out : spellings) {
      SCOPED_TRACE(out + (resume ? " with resume" : ""));
      const Outcome o = run(ranks, 0, [&](int) {
        FileSpec s;
        s.source = src.string();
        s.output = out;
        s.chunk_bytes = kChunk;
        s.window_bytes = kWindow;
        s.resume = resume;
        return s;
      });
      if (resume) {
        expect_all_failed(o, 3, {"is the source file itself"});
      } else {
        EXPECT_EQ(o.errors.size(), 2u);
        for (const auto& [r, e] : o.errors) {
          EXPECT_NE(r, 0);
          EXPECT_NE(e.find("is the source file itself"), std::string::npos) << e;
        }
        EXPECT_TRUE(o.results.count(0)) << "the root sent";
      }
      EXPECT_EQ(slurp(src.string()), data);
      EXPECT_TRUE(temporaries(dir.path()).empty());
    }
  }
}

// Without resume rank 2 refuses the link and relays the file past it, so
// rank 1 gets its copy; with resume nobody writes.
TEST(FileBroadcast, ASymlinkPlantedAtTheDestinationFailsTheJobAndItsTargetIsUntouched) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  const std::string data = pattern_bytes(100'000, 3);
  write_file(dir / "src", data);
  write_file(dir / "victim", "precious");
  fs::create_directory(dir / "n2");
  fs::create_symlink(dir / "victim", dir / "n2" / "copy");
  for (const bool resume : {false, true}) {
    SCOPED_TRACE(resume ? "with resume" : "without resume");
    fs::remove_all(dir / "n1");
    const Outcome o = run(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
      s.resume = resume;
      return s;
    });
    if (resume) {
      expect_all_failed(o, 3, {(dir / "n2" / "copy").string(), "symbolic link"});
      EXPECT_NE(o.errors.at(1).find("rank 2 (node s0n2) failed"), std::string::npos)
          << o.errors.at(1);
      EXPECT_FALSE(fs::exists(dir / "n1" / "copy")) << "with resume no rank writes when one cannot";
    } else {
      expect_failed_alone(o, 3, 0, {2}, {(dir / "n2" / "copy").string(), "symbolic link"}, data);
    }
    EXPECT_EQ(slurp((dir / "victim").string()), "precious");
    EXPECT_TRUE(fs::is_symlink(dir / "n2" / "copy"));
    EXPECT_TRUE(temporaries(dir.path()).empty());
  }
}

TEST(FileBroadcast, OutputWithDotDotIsRefused) {
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  TempDir dir;
  write_file(dir / "src", "x");
  fs::create_directory(dir / "a");
  const Outcome o = run(ranks, 0, [&](int) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / "a" / ".." / "escaped").string();  // as a node name "../escaped" would
    return s;
  });
  expect_failed_alone(o, 2, 0, {1}, {"\"..\""}, "");
  EXPECT_FALSE(fs::exists(dir / "escaped"));
}

TEST(FileBroadcast, AMissingSourceFailsEveryRankNamingIt) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  const Outcome o = run(ranks, 1, [&](int) {
    FileSpec s;
    s.source = (dir / "absent").string();
    s.output = (dir / "copy").string();
    return s;
  });
  expect_all_failed(o, 3, {(dir / "absent").string(), "No such file or directory"});
}

// Rank 2's copy does not fit; without resume it relays the file to rank 1,
// with resume every rank fails before data moves.
TEST(FileBroadcast, AFullDestinationFailsItsRankAndWithResumeEveryRankBeforeDataMoves) {
  TempDir dir;
  fs::create_directory(dir / "small");
  std::string why;
  auto mnt = testing::Tmpfs::mount((dir / "small").string(), "1M", false, why);
  if (!mnt) GTEST_SKIP() << why;
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  const std::string data = pattern_bytes(3 << 20, 5);
  write_file(dir / "src", data);
  for (const bool resume : {false, true}) {
    SCOPED_TRACE(resume ? "with resume" : "without resume");
    fs::remove_all(dir / "copy1");
    const Outcome o = run(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      // Rank 2 writes to the 1 MiB tmpfs, rank 1 to the ordinary directory.
      s.output = (r == 2 ? dir / "small" / "copy" : dir / "copy1").string();
      s.resume = resume;
      return s;
    });
    if (resume) {
      expect_all_failed(o, 3, {"rank 2 (node s0n2)", "No space left on device"});
      EXPECT_FALSE(fs::exists(dir / "copy1"));
    } else {
      expect_failed_alone(o, 3, 0, {2}, {"rank 2 (node s0n2)", "No space left on device"}, data);
    }
    EXPECT_NE(o.errors.at(2).find((dir / "small" / ".copy.gridbcast-").string()), std::string::npos)
        << o.errors.at(2);
    EXPECT_TRUE(fs::is_empty(dir / "small"));
    EXPECT_TRUE(temporaries(dir.path()).empty());
  }
}

TEST(FileBroadcast, AReadOnlyDestinationFailsItsRankNamingPathAndErrno) {
  TempDir dir;
  fs::create_directory(dir / "ro");
  std::string why;
  auto mnt = testing::Tmpfs::mount((dir / "ro").string(), "1M", true, why);
  if (!mnt) GTEST_SKIP() << why;
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  write_file(dir / "src", "data");
  const Outcome o = run(ranks, 0, [&](int) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / "ro" / "copy").string();
    return s;
  });
  expect_failed_alone(o, 2, 0, {1},
                      {(dir / "ro" / ".copy.gridbcast-").string(), "Read-only file system"}, "");
}

// A rank inside the trees whose copy cannot be written (a link planted where
// it goes) is still a relay: the ranks below it get every window, and their
// copies verify; it writes nothing and fails naming its path, the others
// succeed. Sites of 3 and 4 nodes, the failing rank the first site's gateway
// and another rank that forwards inside the second site.
TEST(FileBroadcast, ARankThatCannotWriteItsCopyStillRelaysTheFileToTheOthers) {
  const auto grid = make_grid({3, 4});
  Ranks ranks(grid);
  TempDir dir;
  const std::string data = pattern_bytes(5 * kWindow + 999, 11);
  write_file(dir / "src", data);
  write_file(dir / "victim", "precious");
  const std::set<int> failing = {1, 2, 4};
  for (int r : failing) {
    fs::create_directory(dir / ("n" + std::to_string(r)));
    fs::create_symlink(dir / "victim", dir / ("n" + std::to_string(r)) / "copy");
  }
  const Outcome o = run(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
    s.chunk_bytes = kChunk;
    s.window_bytes = kWindow;
    return s;
  });
  expect_failed_alone(o, ranks.size(), 0, failing, {"symbolic link"}, data);
  for (int r : failing)
    EXPECT_NE(o.errors.at(r).find((dir / ("n" + std::to_string(r)) / "copy").string()),
              std::string::npos)
        << o.errors.at(r);
  EXPECT_EQ(slurp((dir / "victim").string()), "precious");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

// Rank r copies DIR/src to DIR/nR/copy with --resume, in small chunks.
FileSpec resume_spec(const fs::path& dir, int r) {
  FileSpec s;
  s.source = (dir / "src").string();
  s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
  s.chunk_bytes = kChunk;
  s.window_bytes = kWindow;
  s.resume = true;
  return s;
}

// A first run with resume in which rank 2 stops after window `last` (the
// others then fail on their deadline), leaving partial copies for a rerun.
void run_with_ranks_stopping(const topology::Grid& grid, const fs::path& dir, std::uint64_t last,
                             const std::set<int>& stopping) {
  Ranks ranks(grid, quick_timeout());
  const Outcome first = run(ranks, 0, [&](int r) {
    FileSpec s = resume_spec(dir, r);
    if (stopping.count(r))
      s.after_window = [last](std::uint64_t w) {
        if (w == last) throw std::runtime_error("stopped by the test");
      };
    return s;
  });
  for (int r : stopping) ASSERT_TRUE(first.errors.count(r)) << "rank " << r << " stops";
}
void run_with_rank_2_stopping(const topology::Grid& grid, const fs::path& dir, std::uint64_t last) {
  run_with_ranks_stopping(grid, dir, last, {2});
}

// Drops what the page cache holds of `path`: reading a partial's holes
// fills the cache with zeros that SEEK_DATA then calls data.
void drop_cached_pages(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Whether the file system of the temporary directories reports holes
// (SEEK_DATA): where it cannot, every chunk of a partial reads as data.
bool file_system_reports_holes() {
  TempDir probe;
  SinkOptions o;
  o.resume = true;
  FileMeta meta;
  meta.size = 1 << 20;
  return FileSink::open((probe / "f").string(), meta, o).partial_next_data(0) != 0;
}

// Resume: a first run in which rank 2 stops after its 4th window (the others
// then fail on their deadline); a rerun keeps what each destination holds,
// checked against the digests, and moves only the chunks some rank lacks.
TEST(FileBroadcast, ResumeAfterAStoppedRankMovesOnlyTheMissingChunks) {
  const auto grid = make_grid({4});
  TempDir dir;
  const std::uint64_t chunks = 40;
  const std::string data = pattern_bytes(chunks * kChunk - 100, 11);
  write_file(dir / "src", data);
  ASSERT_NO_FATAL_FAILURE(run_with_rank_2_stopping(grid, dir.path(), 3));
  // What the rerun must move: every chunk that some rank's partial (or, for a
  // rank that finished, its copy) does not hold intact.
  std::set<std::uint64_t> missing;
  std::map<int, std::uint64_t> good;
  std::map<int, bool> partial_left;
  for (int r = 1; r < 4; ++r) {
    const fs::path d = dir / ("n" + std::to_string(r));
    const fs::path partial = d / partial_name("copy");
    partial_left[r] = fs::exists(partial);
    const std::string held = slurp((fs::exists(partial) ? partial : d / "copy").string());
    for (std::uint64_t c = 0; c < chunks; ++c) {
      const std::uint64_t off = c * kChunk,
                          len = std::min<std::uint64_t>(kChunk, data.size() - off);
      if (held.size() >= off + len && held.compare(off, len, data, off, len) == 0) {
        ++good[r];
      } else {
        missing.insert(c);
      }
    }
  }
  ASSERT_FALSE(missing.empty());
  ASSERT_LT(missing.size(), chunks) << "the first run moved something";
  EXPECT_FALSE(fs::exists(dir / "n2" / "copy")) << "no copy of rank 2 under the final name";
  Ranks ranks(grid);
  const Outcome second = run(ranks, 0, [&](int r) { return resume_spec(dir.path(), r); });
  ASSERT_TRUE(second.errors.empty()) << second.errors.begin()->second;
  std::cout << "resume: " << missing.size() << " of " << chunks
            << " chunks moved on the rerun; kept per rank:";
  for (const auto& [r, n] : good) std::cout << " " << r << ":" << n;
  std::cout << "\n";
  EXPECT_EQ(second.results.at(0).chunks_sent, missing.size());
  EXPECT_EQ(second.results.at(0).bytes_sent,
            missing.size() * kChunk - (missing.count(chunks - 1) ? 100 : 0));
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(second.results.at(r).chunks_kept, good[r]) << "rank " << r;
    // Each partial's sealed record vouched for all it held: nothing was read
    // back. A rank that finished checked its copy chunk by chunk.
    EXPECT_EQ(second.results.at(r).chunks_trusted, partial_left[r] ? good[r] : 0) << "rank " << r;
    EXPECT_EQ(second.results.at(r).root_digest, second.results.at(0).root_digest);
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data) << "rank " << r;
  }
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

// A partial changed after its run ended (a byte of its first chunk
// overwritten) is not taken on its chunk record's word: the rerun checks it
// chunk by chunk as before, keeps the rest, moves the damaged chunk again, and
// every copy is whole. (Untouched, the record vouches for every chunk the
// partial holds: ResumeAfterAStoppedRankMovesOnlyTheMissingChunks.)
TEST(FileBroadcast, ResumeChecksAPartialChangedSinceItsRecordWasSealed) {
  const auto grid = make_grid({4});
  TempDir dir;
  const std::uint64_t chunks = 40;
  const std::string data = pattern_bytes(chunks * kChunk - 100, 13);
  write_file(dir / "src", data);
  ASSERT_NO_FATAL_FAILURE(run_with_rank_2_stopping(grid, dir.path(), 3));
  const fs::path tampered = dir / "n2" / partial_name("copy");
  ASSERT_TRUE(fs::exists(tampered));
  const std::string held = slurp(tampered.string());
  std::uint64_t intact = 0;
  for (std::uint64_t c = 0; c < chunks; ++c) {
    const std::uint64_t off = c * kChunk, len = std::min<std::uint64_t>(kChunk, data.size() - off);
    if (held.compare(off, len, data, off, len) == 0) ++intact;
  }
  ASSERT_EQ(held.compare(0, kChunk, data, 0, kChunk), 0) << "it held chunk 0";
  ASSERT_GT(intact, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the seal's clock tick
  {
    const int fd = ::open(tampered.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const char flipped = static_cast<char>(data[5] ^ 0x01);
    ASSERT_EQ(::pwrite(fd, &flipped, 1, 5), 1);
    ::close(fd);
  }
  Ranks ranks(grid);
  const Outcome second = run(ranks, 0, [&](int r) { return resume_spec(dir.path(), r); });
  ASSERT_TRUE(second.errors.empty()) << second.errors.begin()->second;
  EXPECT_EQ(second.results.at(2).chunks_trusted, 0u) << "changed after its seal";
  EXPECT_EQ(second.results.at(2).chunks_kept, intact - 1) << "all but the damaged chunk";
  EXPECT_EQ(second.results.at(0).chunks_sent, chunks - intact + 1);
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data) << "rank " << r;
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

// Digests on demand: after every other rank stopped two windows in, a resume
// of a file above FileSpec::digests_on_demand_above has the root digest only
// the chunks some partial has data for (what was sent before the stop), not
// the whole source; the rest moves, checked against the digests sent with it,
// and every copy is whole.
TEST(FileBroadcast, AResumeOfALargeFileDigestsOnlyTheChunksSomeRankMayHold) {
  if (!file_system_reports_holes())
    GTEST_SKIP() << "this file system does not report holes (SEEK_DATA)";
  const auto grid = make_grid({4});
  TempDir dir;
  const std::uint64_t chunks = 40;
  const std::string data = pattern_bytes(chunks * kChunk - 100, 17);
  write_file(dir / "src", data);
  ASSERT_NO_FATAL_FAILURE(run_with_ranks_stopping(grid, dir.path(), 1, {1, 2, 3}));
  std::set<std::uint64_t> held_by_some;
  std::map<std::uint64_t, int> holders;
  for (int r = 1; r < 4; ++r) {
    const fs::path partial = dir / ("n" + std::to_string(r)) / partial_name("copy");
    ASSERT_TRUE(fs::exists(partial)) << "rank " << r;
    const std::string held = slurp(partial.string());
    for (std::uint64_t c = 0; c < chunks; ++c) {
      const std::uint64_t off = c * kChunk,
                          len = std::min<std::uint64_t>(kChunk, data.size() - off);
      if (held.compare(off, len, data, off, len) == 0) {
        held_by_some.insert(c);
        ++holders[c];
      }
    }
    // The read put pages of zeros where nothing landed in the cache, which
    // SEEK_DATA calls data: dropped, as for a partial nobody read.
    ASSERT_NO_FATAL_FAILURE(drop_cached_pages(partial));
  }
  ASSERT_FALSE(held_by_some.empty());
  ASSERT_LT(held_by_some.size(), chunks / 2) << "two windows of many";
  std::uint64_t held_by_all = 0;
  for (const auto& [c, n] : holders) held_by_all += n == 3 ? 1 : 0;
  Ranks ranks(grid);
  const Outcome second = run(ranks, 0, [&](int r) {
    FileSpec s = resume_spec(dir.path(), r);
    s.digests_on_demand_above = 0;
    return s;
  });
  ASSERT_TRUE(second.errors.empty()) << second.errors.begin()->second;
  EXPECT_EQ(second.results.at(0).chunks_digested, held_by_some.size())
      << "the root digested what some rank may hold, not the " << chunks << " chunks";
  EXPECT_EQ(second.results.at(0).chunks_sent, chunks - held_by_all);
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data) << "rank " << r;
  // A file at or below the threshold is digested whole, as before.
  write_file(dir / "src", data + "x");
  Ranks again(grid);
  const Outcome small = run(again, 0, [&](int r) { return resume_spec(dir.path(), r); });
  ASSERT_TRUE(small.errors.empty()) << small.errors.begin()->second;
  EXPECT_EQ(small.results.at(0).chunks_digested, chunks);
}

// A hostile rank in the digests-on-demand exchange: a bitmap with chunks
// past the file's, one byte short, or one byte long. The root refuses it
// naming the rank and what is wrong, before it reads or sends anything.
TEST(FileBroadcast, AHostileMayHoldBitmapFailsTheRootNamingTheRank) {
  const auto grid = make_grid({3});
  TempDir dir;
  const std::uint64_t chunks = 13;  // not a multiple of 8: a last byte with spare bits
  write_file(dir / "src", pattern_bytes(chunks * kChunk, 19));
  constexpr std::int64_t kMayHoldTag = 4;  // files/file_broadcast.cpp
  const std::uint64_t bitmap = (chunks + 7) / 8;
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> attacks = {
      {"said it may hold chunks past the file's 13", {0xff, 0xff}},
      {"in 1 bytes, where 13 chunks take 2", {0xff}},
      {"in more than 2 bytes", std::vector<std::uint8_t>(bitmap + 1, 0)},
  };
  for (const auto& [want, bits] : attacks) {
    SCOPED_TRACE(want);
    Ranks ranks(grid, quick_timeout());
    std::string root_error;
    std::mutex m;
    ranks.run([&](runtime::Communicator& c) {
      if (c.rank() == 2) {
        std::byte b{};
        while (c.receive(0, kFileContext, std::nullopt, &b, 1).tag != kGoTag) {
        }
        std::vector<std::byte> header(kFileHeaderBytes);
        c.bcast(header.data(), header.size(), 0);
        c.send(0, kFileContext, kMayHoldTag, bits.data(), bits.size());
        return;
      }
      try {
        FileSpec s = resume_spec(dir.path(), c.rank());
        s.digests_on_demand_above = 0;
        broadcast_file(c, s, 0);
      } catch (const std::exception& e) {
        if (c.rank() == 0) {
          std::lock_guard lock(m);
          root_error = e.what();
        }
      }
    });
    EXPECT_NE(root_error.find("rank 2"), std::string::npos) << root_error;
    EXPECT_NE(root_error.find(want), std::string::npos) << root_error;
  }
}

// Resume reads back only the chunks a partial holds data for: a chunk that
// never landed is a hole, told from the file system's map and not by reading
// it. The source's tail is zeros, so a check that read the holes (zeros, and
// the zero chunk's digest) would keep them: what each rank keeps is exactly
// what its first run wrote, and every copy is whole.
TEST(FileBroadcast, ResumeKeepsOnlyWhatLandedAlthoughTheRestReadsAsTheSourcesZeros) {
  if (!file_system_reports_holes())
    GTEST_SKIP() << "this file system does not report holes (SEEK_DATA)";
  const auto grid = make_grid({3});
  TempDir dir;
  const std::uint64_t chunks = 24;
  std::string data = pattern_bytes(8 * kChunk, 21);
  data.resize(chunks * kChunk, '\0');  // chunks 8..23 are zeros
  write_file(dir / "src", data);
  ASSERT_NO_FATAL_FAILURE(run_with_rank_2_stopping(grid, dir.path(), 1));
  const fs::path partial = dir / "n2" / partial_name("copy");
  ASSERT_TRUE(fs::exists(partial));
  // What rank 2's partial holds intact, and what it wrote at all (nonzero
  // bytes: the source's first 8 chunks are a pattern without a zero chunk).
  const std::string held = slurp(partial.string());
  std::uint64_t written = 0;
  for (std::uint64_t c = 0; c < 8; ++c)
    if (held.compare(c * kChunk, kChunk, data, c * kChunk, kChunk) == 0) ++written;
  ASSERT_GT(written, 0u);
  ASSERT_LT(written, 8u) << "rank 2 stopped before the zeros";
  {
    // Reading the holes just now put pages of zeros in the cache, which
    // SEEK_DATA calls data: dropped, as for a partial nobody read.
    ASSERT_NO_FATAL_FAILURE(drop_cached_pages(partial));
  }
  Ranks ranks(grid);
  const Outcome second = run(ranks, 0, [&](int r) { return resume_spec(dir.path(), r); });
  ASSERT_TRUE(second.errors.empty()) << second.errors.begin()->second;
  EXPECT_EQ(second.results.at(2).chunks_kept, written)
      << "the zero chunks that never landed are sent, not taken from the holes";
  EXPECT_EQ(second.results.at(0).chunks_sent, chunks - written);
  for (int r = 1; r < 3; ++r)
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data) << "rank " << r;
}

// Resume's digests (on the root) and checks (on every other rank) take as long
// as the disk does, with nothing on the wire: ranks tell the ones waiting for
// them that they still work, so a check longer than the timeout is not a
// failure. Here the root's digests and rank 2's check each take about three
// timeouts; every other rank waits meanwhile.
TEST(FileBroadcast, ResumeChecksLongerThanTheTimeoutDoNotFailTheRanksWaitingForThem) {
  const auto grid = make_grid({4});
  TempDir dir;
  const std::uint64_t chunks = 30;
  const std::string data = pattern_bytes(chunks * kChunk - 7, 12);
  write_file(dir / "src", data);
  runtime::CommOptions o;
  o.timeout = std::chrono::milliseconds(400);
  const auto slow = [](std::uint64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  };
  Ranks ranks(grid, o);
  const auto start = std::chrono::steady_clock::now();
  const Outcome out = run(ranks, 0, [&](int r) {
    FileSpec s = resume_spec(dir.path(), r);
    if (r == 0 || r == 2) s.on_work = slow;  // 30 chunks x 40 ms each
    return s;
  });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(out.errors.empty()) << out.errors.begin()->first << ": "
                                  << out.errors.begin()->second;
  EXPECT_GT(took, 2 * 30 * 0.040) << "the slow digests and check did run";
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data) << "rank " << r;
}

// A rank whose check stops (no note, no status) still fails the others within
// the timeout, naming it.
TEST(FileBroadcast, AResumeCheckThatStopsFailsTheRootNamingTheRankStillChecking) {
  const auto grid = make_grid({3});
  TempDir dir;
  const std::string data = pattern_bytes(8 * kChunk, 13);
  write_file(dir / "src", data);
  runtime::CommOptions o;
  o.timeout = std::chrono::milliseconds(400);
  std::atomic<bool> release{false};
  Ranks ranks(grid, o);
  const Outcome out = run(ranks, 0, [&](int r) {
    FileSpec s = resume_spec(dir.path(), r);
    if (r == 2)
      s.on_work = [&](std::uint64_t) {
        // Stuck (bounded, so the test ends): far past the timeout.
        for (int i = 0; i < 60 && !release; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        release = true;
      };
    return s;
  });
  ASSERT_TRUE(out.errors.count(0)) << "the root waited for rank 2 past the timeout";
  EXPECT_NE(out.errors.at(0).find("still checking: rank 2"), std::string::npos) << out.errors.at(0);
}

// Resume also keeps what an existing copy holds: an old version of the file
// with a few chunks changed gets only those chunks.
TEST(FileBroadcast, ResumeOverAnOlderCopyMovesOnlyTheChangedChunks) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  std::string data = pattern_bytes(20 * kChunk, 13);
  for (int r = 1; r < 3; ++r) {
    fs::create_directory(dir / ("n" + std::to_string(r)));
    write_file(dir / ("n" + std::to_string(r)) / "copy", data);
  }
  data[3 * kChunk + 5] ^= 1;
  data[17 * kChunk] ^= 1;
  write_file(dir / "src", data);
  const Outcome o = run(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
    s.chunk_bytes = kChunk;
    s.window_bytes = kWindow;
    s.resume = true;
    return s;
  });
  ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
  EXPECT_EQ(o.results.at(0).chunks_sent, 2u);
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(o.results.at(r).chunks_kept, 18u);
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "copy").string()), data);
  }
}

// A real SIGTERM in a real process while the broadcast runs: the child runs
// three ranks (threads) with a pause after every window; the parent waits
// until the temporary files exist and signals it. Nothing partial under the
// final name, the previous copies as they were, and the partial copies kept
// (private) for a rerun with resume.
TEST(FileBroadcast, SigtermMidTransferKeepsThePartialCopiesBesideThePreviousOnes) {
  TempDir dir;
  const std::string data = pattern_bytes(4 << 20, 17);
  write_file(dir / "src", data);
  for (int r = 1; r < 3; ++r) {
    fs::create_directory(dir / ("n" + std::to_string(r)));
    write_file(dir / ("n" + std::to_string(r)) / "copy", "previous version");
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    install_signal_cleanup();
    const auto grid = make_grid({3});
    Ranks ranks(grid);
    (void)run(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
      s.chunk_bytes = kChunk;
      s.window_bytes = kWindow;
      s.after_window = [](std::uint64_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      };
      return s;
    });
    ::_exit(0);  // too fast: the parent reports it
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (temporaries(dir.path()).size() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few windows in
  EXPECT_EQ(temporaries(dir.path()).size(), 4u) << "a partial and its chunk record per rank";
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << "the child was not stopped mid-transfer (status " << status << ")";
  // The partial copies stay for a rerun with resume (issue 27), private, and
  // hold the source's bytes so far; the previous copies are untouched.
  for (int r = 1; r < 3; ++r) {
    const fs::path n = dir / ("n" + std::to_string(r));
    EXPECT_EQ(slurp((n / "copy").string()), "previous version");
    const fs::path partial = n / partial_name("copy");
    ASSERT_TRUE(fs::exists(partial)) << partial;
    EXPECT_EQ(fs::status(partial).permissions(), fs::perms(0600));
    const std::string held = slurp(partial.string());
    EXPECT_EQ(held.compare(0, kChunk, data, 0, kChunk), 0) << "its first chunk";
    EXPECT_EQ(fs::status(n / chunk_record_name("copy")).permissions(), fs::perms(0600));
  }
  EXPECT_EQ(temporaries(dir.path()).size(), 4u);
}

// A hostile root (or a stream injected into a job without TLS) sends the header
// of the issue: size 4095 and a chunk of 2^64 - 4095, so that 4096 + chunk
// wraps to 1 and the window would be written past a one-page mapping. Every
// other rank refuses it naming the field before it opens or maps anything
// (run under ASan by scripts/test.sh).
TEST(FileBroadcast, AHostileRootsWrappingHeaderIsRefusedByEveryRankNamingTheField) {
  const auto grid = make_grid({4});
  Ranks ranks(grid, quick_timeout());
  TempDir dir;
  std::map<int, std::string> errors;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    if (c.rank() == 0) {
      FileHeader h;
      h.meta.size = 4095;
      h.meta.mode = 0644;
      h.chunk_bytes = 0ull - 4095;
      h.window_bytes = 8191;
      std::vector<std::byte> header(kFileHeaderBytes);
      encode_file_header(h, header.data());
      const std::byte go{1};
      for (int r = 1; r < c.size(); ++r) c.send(r, kFileContext, kGoTag, &go, 1);
      c.bcast(header.data(), header.size(), 0);
      return;
    }
    try {
      FileSpec s;
      s.output = (dir / ("n" + std::to_string(c.rank())) / "copy.bin").string();
      broadcast_file(c, s, 0);
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors[c.rank()] = e.what();
    }
  });
  ASSERT_EQ(errors.size(), 3u);
  for (const auto& [r, e] : errors) {
    EXPECT_NE(e.find("refused before anything was written"), std::string::npos) << e;
    EXPECT_NE(e.find("header has a chunk of 18446744073709547521 bytes"), std::string::npos) << e;
  }
  EXPECT_TRUE(fs::is_empty(dir.path())) << "nothing opened, nothing made";
}

// Times the kernel keeps that one count of nanoseconds cannot: half a second
// before 1970 (a negative tv_nsec once failed every copy) and after 2262
// (once an overflow). Every copy has the source's time exactly.
TEST(FileBroadcast, ModificationTimesBefore1970AndAfter2262ArriveExactly) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  for (const struct timespec t : {timespec{-1, 500'000'000}, timespec{-86'400 * 365, 1},
                                  timespec{10'413'792'000, 999'999'999}}) {
    SCOPED_TRACE(std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec));
    const fs::path src = dir / "src.bin";
    write_file(src, pattern_bytes(70'000, 3));
    const struct timespec times[2] = {t, t};
    ASSERT_EQ(::utimensat(AT_FDCWD, src.c_str(), times, 0), 0) << std::strerror(errno);
    struct stat st {};
    ASSERT_EQ(::stat(src.c_str(), &st), 0);
    if (st.st_mtim.tv_sec != t.tv_sec) GTEST_SKIP() << "this file system cannot keep the time";
    const Outcome o = run(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = src.string();
      s.output = (dir / ("n" + std::to_string(r)) / "copy.bin").string();
      return s;
    });
    ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
    for (int r : {1, 2}) {
      ASSERT_EQ(::stat(o.results.at(r).path.c_str(), &st), 0);
      EXPECT_EQ(st.st_mtim.tv_sec, t.tv_sec) << r;
      EXPECT_EQ(st.st_mtim.tv_nsec, t.tv_nsec) << r;
      EXPECT_EQ(o.results.at(r).mtime, FileTime::of(t));
    }
  }
}
}  // namespace
}  // namespace gridbcast::files

namespace gridbcast::files {
namespace {

// LONG (about 30 s): a 2 GiB file through a 64 MiB window. The child process
// runs two ranks (threads); its peak resident set, from wait4, must stay under
// two windows plus 32 MiB, i.e. under window + 32 MiB per rank, while the file
// is 32 windows long. GRIDBCAST_LARGE_FILE_BYTES sets another size (the docs'
// figures).
TEST(FileBroadcastLarge, TwoGiBThroughA64MiBWindowInBoundedMemory) {
  std::uint64_t size = 2ull << 30;
  if (const char* v = std::getenv("GRIDBCAST_LARGE_FILE_BYTES")) size = std::stoull(v);
  const std::uint64_t window = 64ull << 20;
  TempDir dir;
  {
    // Written in windows from a pattern, so this process never holds the file.
    const int fd = ::open((dir / "src").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0);
    std::vector<std::byte> block(window);
    for (std::uint64_t off = 0; off < size; off += window) {
      runtime::fill_pattern(block.data(), window, off / window + 1);
      const std::uint64_t n = std::min(window, size - off);
      ASSERT_EQ(::pwrite(fd, block.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    }
    ::close(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const auto grid = make_grid({2});
    Ranks ranks(grid);
    const Outcome o = run(ranks, 0, [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("copy" + std::to_string(r))).string();
      s.window_bytes = window;
      return s;
    });
    const bool ok = o.errors.empty() && o.results.at(0).root_digest == o.results.at(1).root_digest;
    if (!ok && !o.errors.empty()) std::cerr << o.errors.begin()->second << "\n";
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  struct rusage ru {};
  ASSERT_EQ(::wait4(pid, &status, 0, &ru), pid);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(fs::file_size(dir / "copy1"), size);
  const std::uint64_t peak = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
  std::cout << "large file: " << (size >> 20) << " MiB, window " << (window >> 20)
            << " MiB, 2 ranks in one process: peak RSS " << (peak >> 20) << " MiB, " << seconds
            << " s (" << (static_cast<double>(size) / seconds / 1e6) << " MB/s)\n";
  EXPECT_LT(peak, 2 * window + (32ull << 20));
}

// A chunk damaged between the network and the disk (here: one byte flipped in
// the window rank 2 received) is caught by its digest as it lands: rank 2
// fails naming the chunk, its byte range and both digests, its copy never
// appears under the final name, and no temporary file is left.
TEST(FileBroadcast, AChunkDamagedInFlightIsCaughtAsItLands) {
  const auto grid = make_grid({4});
  Ranks ranks(grid, quick_timeout());
  TempDir dir;
  const fs::path src = dir / "src";
  write_file(src, pattern_bytes(3 * kWindow + 100, 5));
  const Outcome o = run(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = src.string();
    s.output = (dir / ("n" + std::to_string(r)) / "copy").string();
    s.chunk_bytes = kChunk;
    s.window_bytes = kWindow;
    if (r == 2)
      s.on_arrival = [](std::uint64_t window, std::byte* data, std::uint64_t bytes) {
        if (window == 1 && bytes > 0) data[bytes - 1] ^= std::byte{0x40};
      };
    return s;
  });
  ASSERT_EQ(o.errors.count(2), 1u) << "the damage went unnoticed";
  const std::string& e = o.errors.at(2);
  EXPECT_NE(e.find("arrived damaged"), std::string::npos) << e;
  EXPECT_NE(e.find("chunk "), std::string::npos) << e;
  EXPECT_NE(e.find("the root's "), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "n2" / "copy"));
  // What is left for a rerun is partial copies and their chunk records only
  // (a rerun with resume checks against the root's digests each chunk a
  // record does not vouch for; the damaged one never reached the record).
  for (const auto& t : temporaries(dir.path())) {
    const std::string name = fs::path(t).filename().string();
    EXPECT_TRUE(name == partial_name("copy") || name == chunk_record_name("copy")) << t;
  }
  // Whatever the others did, none holds a copy that differs from the source.
  for (int r = 1; r < 4; ++r) {
    const fs::path copy = dir / ("n" + std::to_string(r)) / "copy";
    if (fs::exists(copy)) {
      EXPECT_EQ(slurp(copy.string()), slurp(src.string())) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace gridbcast::files
