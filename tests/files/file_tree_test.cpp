// job/file_tree.cpp over loopback (ranks as threads) and real files: a
// directory arrives whole, with modes and mtimes of files and directories,
// symlinks as links (never followed), empty files and directories; a single
// file through the same entry lands at the output path itself.
#include "files/file_tree.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "files/file_batch.hpp"
#include "runtime/buffer.hpp"
#include "support/file_runs.hpp"
#include "support/grids.hpp"
#include "support/process.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::files {
namespace {

namespace fs = std::filesystem;
using testing::make_grid;
using testing::Ranks;
using testing::slurp;
using testing::TempDir;

std::string pattern_bytes(std::uint64_t size, std::uint64_t seed) {
  std::string s(size, '\0');
  runtime::fill_pattern(reinterpret_cast<std::byte*>(s.data()), size, seed);
  return s;
}

void write_file(const fs::path& p, const std::string& data, mode_t mode) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  ::chmod(p.c_str(), mode);
}

void set_mtime(const fs::path& p, std::int64_t sec) {
  const struct timespec t[2] = {{sec, 0}, {sec, 0}};
  ::utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW);
}

struct Stat {
  mode_t mode;
  std::int64_t mtime;
};
Stat lstat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return {st.st_mode, st.st_mtim.tv_sec};
}

std::map<int, TreeResult> run(Ranks& ranks, int root, const std::function<FileSpec(int)>& spec_of) {
  std::map<int, TreeResult> out;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    TreeResult r = broadcast_tree(c, spec_of(c.rank()), root);
    std::lock_guard lock(m);
    out[c.rank()] = r;
  });
  return out;
}

// Every rank's error when each runs broadcast_tree with `spec`.
std::map<int, std::string> errors_of(Ranks& ranks, const FileSpec& spec) {
  std::map<int, std::string> errors;
  std::mutex m;
  ranks.run([&](runtime::Communicator& c) {
    try {
      broadcast_tree(c, spec, 0);
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors[c.rank()] = e.what();
    }
  });
  return errors;
}

TEST(FileTree, ADirectoryArrivesWithModesMtimesAndSymlinksAsLinks) {
  TempDir dir;
  const fs::path src = dir / "src";
  fs::create_directories(src / "sub" / "deeper");
  fs::create_directory(src / "empty");
  const std::string big = pattern_bytes(700'001, 3);
  write_file(src / "big.bin", big, 0640);
  write_file(src / "empty.txt", "", 0600);
  write_file(src / "sub" / "small.txt", "small", 0755);
  write_file(src / "sub" / "deeper" / "x", "x", 0444);
  fs::create_symlink("../big.bin", src / "sub" / "rel-link");
  fs::create_symlink("/etc/passwd", src / "abs-link");
  fs::create_symlink("missing", src / "dangling");
  ::chmod((src / "sub").c_str(), 0750);
  ::chmod((src / "empty").c_str(), 0705);
  for (const auto& p : {src / "big.bin", src / "sub" / "small.txt", src / "sub" / "deeper" / "x",
                        src / "sub" / "deeper", src / "sub", src / "empty", src})
    set_mtime(p, 1'500'000'000 + static_cast<std::int64_t>(p.string().size()));

  const auto grid = make_grid({2, 1});
  Ranks ranks(grid);
  const auto out = run(ranks, 1, [&](int r) {
    FileSpec s;
    s.source = src.string();
    s.output = (dir / ("copy" + std::to_string(r))).string();
    s.chunk_bytes = 64 << 10;
    s.window_bytes = 256 << 10;
    return s;
  });
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const fs::path c = dir / ("copy" + std::to_string(r));
    const TreeResult& res = out.at(r);
    EXPECT_EQ(res.root_digest, out.at(1).root_digest);
    EXPECT_EQ(res.files, 4u);
    EXPECT_EQ(res.directories, 4u);  // the top, sub, sub/deeper, empty
    EXPECT_EQ(res.symlinks, 3u);
    EXPECT_EQ(res.bytes, big.size() + 5 + 1);
    EXPECT_EQ(slurp((c / "big.bin").string()), big);
    EXPECT_EQ(slurp((c / "sub" / "small.txt").string()), "small");
    EXPECT_TRUE(fs::is_regular_file(c / "empty.txt"));
    EXPECT_TRUE(fs::is_directory(c / "empty"));
    EXPECT_EQ(fs::read_symlink(c / "sub" / "rel-link"), "../big.bin");
    EXPECT_EQ(fs::read_symlink(c / "abs-link"), "/etc/passwd");
    EXPECT_EQ(fs::read_symlink(c / "dangling"), "missing");
    for (const std::string rel : {"big.bin", "empty.txt", "sub/small.txt", "sub/deeper/x",
                                  "sub/deeper", "sub", "empty", ""}) {
      const Stat want = lstat_of(rel.empty() ? src : src / rel);
      const Stat got = lstat_of(rel.empty() ? c : c / rel);
      EXPECT_EQ(got.mode, want.mode) << rel;
      EXPECT_EQ(got.mtime, want.mtime) << rel;
    }
  }
  EXPECT_FALSE(fs::exists(dir / "copy1")) << "the root writes no copy";
}

TEST(FileTree, ASingleFileLandsAtTheOutputPath) {
  TempDir dir;
  write_file(dir / "one.bin", pattern_bytes(100'000, 9), 0604);
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  const auto out = run(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "one.bin").string();
    s.output = (dir / ("n" + std::to_string(r)) / "one.bin").string();
    return s;
  });
  for (int r : {1, 2}) {
    EXPECT_EQ(out.at(r).files, 1u);
    EXPECT_EQ(out.at(r).root_digest, out.at(0).root_digest);
    EXPECT_EQ(out.at(r).root_digest, out.at(r).per_file.at(0).root_digest);
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "one.bin").string()),
              slurp((dir / "one.bin").string()));
  }
}

// One file the launcher announced: every rank begins the connections of its
// windows as the tree starts (prepare_file), before the three headers. Each
// link a rank made that way then carries the windows (the guess is the
// broadcast's own plan), none is made twice or refused, and the copies land.
// (Each rank polls until its own links are made, then starts the tree.)
TEST(FileTree, AnAnnouncedFilesWindowsConnectBeforeItsHeaders) {
  TempDir dir;
  const std::uint64_t size = (3 << 20) + 12345;
  write_file(dir / "one.bin", pattern_bytes(size, 21), 0644);
  const auto grid = make_grid({3, 3});
  Ranks ranks(grid);
  std::mutex m;
  std::map<int, std::vector<runtime::LinkSample>> ahead, after;
  std::map<int, std::string> digests;
  ranks.run([&](runtime::Communicator& c) {
    FileSpec s;
    s.source = (dir / "one.bin").string();
    s.output = (dir / ("n" + std::to_string(c.rank())) / "one.bin").string();
    s.expected_size = size;
    s.algorithm = topology::Algorithm::kMultilane;
    prepare_file(c, s, size, 0);
    std::vector<runtime::LinkSample> made;
    for (int i = 0; i < 10000; ++i) {  // at most 10 s
      c.poll();
      made = c.link_samples();
      // A link being made is listed at once; a rank that lists none after
      // 100 ms sends on none (the last of a site's trees).
      if (made.empty() ? i >= 100 : std::none_of(made.begin(), made.end(), [](const auto& l) {
            return l.connecting;
          }))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const TreeResult r = broadcast_tree(c, s, 0);
    EXPECT_EQ(c.rejected_connections(), 0u) << "rank " << c.rank();
    std::lock_guard lock(m);
    ahead[c.rank()] = made;
    after[c.rank()] = c.link_samples();
    digests[c.rank()] = r.root_digest;
  });
  size_t links = 0;
  for (int r = 0; r < grid.size(); ++r) {
    links += ahead.at(r).size();
    for (const auto& l : ahead.at(r)) {
      EXPECT_FALSE(l.connecting) << "rank " << r << " to " << l.peer;
      const auto same = std::find_if(after.at(r).begin(), after.at(r).end(), [&](const auto& a) {
        return a.peer == l.peer && a.lane_from == l.lane_from && a.lane_to == l.lane_to;
      });
      ASSERT_NE(same, after.at(r).end()) << "rank " << r << " to " << l.peer;
      EXPECT_EQ(same->streams, l.streams) << "rank " << r << " to " << l.peer;
      EXPECT_GT(same->bytes_acked, l.bytes_acked)
          << "rank " << r << " made a link to " << l.peer << " the windows did not use";
    }
    EXPECT_EQ(digests.at(r), digests.at(0));
    if (r != 0) {
      EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "one.bin").string()),
                slurp((dir / "one.bin").string()));
    }
  }
  EXPECT_GE(links, static_cast<size_t>(grid.size()));  // the trees' and the WAN's
}

// A rank that reaches the tree late (here it answers the others' handshakes
// for 300 ms first, as a rank busy on its communicator would) opens its
// connection to the root when the root has sent all of a small file. The
// root stays until every rank's note has come, so that connection's
// handshake is answered and the late rank ends with its copy, not waiting
// for a root that is gone (it timed out "waiting for the handshake of rank
// 0" when the root left after its own sends).
TEST(FileTree, ARankReachingTheTreeLateStillEndsWithItsCopy) {
  TempDir dir;
  write_file(dir / "small.bin", pattern_bytes(10'000, 23), 0644);
  const auto grid = make_grid({3, 3});
  runtime::CommOptions options;
  options.timeout = std::chrono::seconds(5);
  Ranks ranks(grid, options);
  const int late = 4;
  std::mutex m;
  std::map<int, std::string> errors;
  ranks.run([&](runtime::Communicator& c) {
    if (c.rank() == late) {
      for (int i = 0; i < 300; ++i) {
        c.poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    FileSpec s;
    s.source = (dir / "small.bin").string();
    s.output = (dir / ("n" + std::to_string(c.rank())) / "small.bin").string();
    s.expected_size = 10'000;
    try {
      broadcast_tree(c, s, 0);
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors[c.rank()] = e.what();
    }
  });
  EXPECT_TRUE(errors.empty()) << errors.begin()->first << ": " << errors.begin()->second;
  for (int r = 1; r < grid.size(); ++r)
    EXPECT_EQ(slurp((dir / ("n" + std::to_string(r)) / "small.bin").string()),
              slurp((dir / "small.bin").string()))
        << "rank " << r;
}

// Several sources in one job: each lands under its own name in the output
// directory (a file, a directory with a symlink, a file from elsewhere), and
// each is reported with its name in the job.
TEST(FileTree, SeveralSourcesLandUnderTheirNamesAndAreReportedPerFile) {
  TempDir dir;
  fs::create_directories(dir / "a" / "set" / "sub");
  fs::create_directories(dir / "b");
  write_file(dir / "a" / "one.bin", pattern_bytes(300'001, 1), 0640);
  write_file(dir / "a" / "set" / "sub" / "two.txt", "two", 0600);
  fs::create_symlink("sub/two.txt", dir / "a" / "set" / "link");
  write_file(dir / "b" / "three.bin", pattern_bytes(5, 2), 0644);
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  const auto out = run(ranks, 1, [&](int r) {
    FileSpec s;
    s.sources = {(dir / "a" / "one.bin").string(), (dir / "a" / "set/").string(),
                 (dir / "b" / "three.bin").string()};
    s.output = (dir / ("n" + std::to_string(r))).string();
    return s;
  });
  for (int r : {0, 2}) {
    const fs::path copy = dir / ("n" + std::to_string(r));
    EXPECT_EQ(out.at(r).root_digest, out.at(1).root_digest);
    EXPECT_EQ(slurp((copy / "one.bin").string()), pattern_bytes(300'001, 1));
    EXPECT_EQ(slurp((copy / "set" / "sub" / "two.txt").string()), "two");
    EXPECT_EQ(fs::read_symlink(copy / "set" / "link"), "sub/two.txt");
    EXPECT_EQ(slurp((copy / "three.bin").string()), pattern_bytes(5, 2));
    EXPECT_EQ(lstat_of(copy / "one.bin").mode & 07777, 0640u);
  }
  EXPECT_FALSE(fs::exists(dir / "n1")) << "the root writes no copy";
  for (int r : {0, 1, 2}) {
    const auto& pf = out.at(r).per_file;
    ASSERT_EQ(pf.size(), 3u);
    EXPECT_EQ(pf[0].name, "one.bin");
    EXPECT_EQ(pf[1].name, "set/sub/two.txt");
    EXPECT_EQ(pf[2].name, "three.bin");
    EXPECT_EQ(pf[0].size, 300'001u);
    EXPECT_EQ(pf[1].root_digest, out.at(1).per_file[1].root_digest);
  }
}

TEST(FileTree, TwoSourcesWithOneNameFailEveryRankBeforeAnythingIsWritten) {
  TempDir dir;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write_file(dir / "a" / "x.bin", "a", 0644);
  write_file(dir / "b" / "x.bin", "b", 0644);
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  FileSpec s;
  s.sources = {(dir / "a" / "x.bin").string(), (dir / "b" / "x.bin").string()};
  s.output = (dir / "copy").string();
  const auto errors = errors_of(ranks, s);
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& [r, e] : errors)
    EXPECT_NE(e.find("two sources would be copied as \"x.bin\""), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "copy"));
  EXPECT_THROW(source_name("/"), std::runtime_error);
  EXPECT_EQ(source_name("/data/set/"), "set");
  EXPECT_EQ(source_name("rel/x.bin"), "x.bin");
}

TEST(FileTree, ASocketOrDeviceInTheSourceFailsEveryRankNamingIt) {
  TempDir dir;
  fs::create_directory(dir / "src");
  ASSERT_EQ(::mkfifo((dir / "src" / "pipe").c_str(), 0600), 0);
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  FileSpec s;
  s.source = (dir / "src").string();
  s.output = (dir / "copy").string();
  const auto errors = errors_of(ranks, s);
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& [r, e] : errors)
    EXPECT_NE(e.find((dir / "src" / "pipe").string() + ": not a regular file"), std::string::npos)
        << e;
  EXPECT_FALSE(fs::exists(dir / "copy"));
}

// A hostile root sends a manifest of the attacks; every other rank
// refuses it before anything is written, and what the link points to stays
// as it was (not replaced, not chmodded).
TEST(FileTree, AHostileManifestIsRefusedByEveryRankBeforeAnythingIsWritten) {
  TempDir dir;
  fs::create_directories(dir / "victim");
  write_file(dir / "victim" / ".bashrc", "mine", 0600);
  ::chmod((dir / "victim").c_str(), 0700);
  const std::string victim = (dir / "victim").string();
  const auto d = [](const std::string& p) {
    TreeEntry e;
    e.path = p;
    e.kind = TreeEntry::Kind::kDirectory;
    e.mode = 0777;
    return e;
  };
  const auto l = [](const std::string& p, const std::string& t) {
    TreeEntry e;
    e.path = p;
    e.kind = TreeEntry::Kind::kSymlink;
    e.target = t;
    return e;
  };
  TreeEntry f;
  f.path = "a/.bashrc";
  f.size = 5;
  f.mode = 0644;
  const std::vector<std::pair<std::vector<TreeEntry>, std::string>> attacks = {
      {{d(""), l("a", victim), f}, "below \"a\""},
      {{d(""), l("a", victim), d("a")}, "\"a\" twice"},
      {{d(""), l("a", victim), l("a", "/")}, "\"a\" twice"},
  };
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  for (const auto& [manifest_entries, why] : attacks) {
    SCOPED_TRACE(why);
    const std::string manifest = encode_manifest(manifest_entries);
    const auto errors = runs::tree_errors_under_root(
        ranks, [&](runtime::Communicator& c) { runs::send_tree_start(c, manifest, 0, 0, false); },
        runs::output_in(dir.path()));
    ASSERT_EQ(errors.size(), 2u);
    for (const auto& [r, e] : errors) {
      EXPECT_NE(e.find("refused before anything was written"), std::string::npos) << e;
      EXPECT_NE(e.find(why), std::string::npos) << e;
      EXPECT_FALSE(fs::exists(dir / ("n" + std::to_string(r)))) << "nothing written";
    }
    EXPECT_EQ(slurp((dir / "victim" / ".bashrc").string()), "mine");
    EXPECT_EQ(lstat_of(dir / "victim").mode & 07777, 0700u);
  }
}

// The rerun of the issue: the first run placed the source's symlink `data ->
// VICTIM` in every copy; the source then made `data` a directory with a
// file. The rerun (with and without resume) follows no link below the output:
// VICTIM stays empty and every copy has a real directory with the file.
TEST(FileTree, ARerunNeverFollowsALinkItsFirstRunPlaced) {
  for (const bool resume : {false, true}) {
    SCOPED_TRACE(resume ? "resume" : "plain");
    TempDir dir;
    fs::create_directories(dir / "src");
    fs::create_directories(dir / "victim");
    write_file(dir / "src" / "top.txt", "top", 0644);
    fs::create_directory_symlink(dir / "victim", dir / "src" / "data");
    const auto grid = make_grid({3});
    Ranks ranks(grid);
    const auto spec_of = [&](int r) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("n" + std::to_string(r)) / "src").string();
      s.resume = resume;
      return s;
    };
    run(ranks, 0, spec_of);
    ASSERT_EQ(fs::read_symlink(dir / "n1" / "src" / "data"), dir / "victim");
    fs::remove(dir / "src" / "data");
    fs::create_directory(dir / "src" / "data");
    write_file(dir / "src" / "data" / "f.txt", "into the victim?", 0644);
    const auto out = run(ranks, 0, spec_of);
    EXPECT_TRUE(fs::is_empty(dir / "victim")) << "a file was renamed through the link";
    for (int r : {1, 2}) {
      const fs::path data = dir / ("n" + std::to_string(r)) / "src" / "data";
      EXPECT_FALSE(fs::is_symlink(data)) << r;
      EXPECT_EQ(slurp((data / "f.txt").string()), "into the victim?") << r;
      EXPECT_EQ(out.at(r).root_digest, out.at(0).root_digest);
    }
  }
}

// A link below the output that the manifest does not explain (someone made
// `sub` a link to elsewhere in a copy) is replaced, never followed: the file
// lands in a real directory and the link's target is untouched.
TEST(FileTree, ALinkWhereTheSourceHasADirectoryIsReplacedNotFollowed) {
  TempDir dir;
  fs::create_directories(dir / "src" / "sub" / "deeper");
  fs::create_directories(dir / "elsewhere" / "deeper");
  write_file(dir / "src" / "sub" / "deeper" / "x", "x", 0644);
  fs::create_directories(dir / "n1" / "src");
  fs::create_directory_symlink(dir / "elsewhere", dir / "n1" / "src" / "sub");
  const auto grid = make_grid({2});
  Ranks ranks(grid);
  run(ranks, 0, [&](int r) {
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / ("n" + std::to_string(r)) / "src").string();
    return s;
  });
  EXPECT_TRUE(fs::is_empty(dir / "elsewhere" / "deeper"));
  EXPECT_FALSE(fs::is_symlink(dir / "n1" / "src" / "sub"));
  EXPECT_EQ(slurp((dir / "n1" / "src" / "sub" / "deeper" / "x").string()), "x");
}

// Between the root's walk and its reading of a file, the file becomes a link
// to something the root can read, or a pipe: the root refuses it naming the
// path (a link is never followed, a pipe never waited on) and no rank gets
// the link's target.
TEST(FileTree, ASourceFileSwappedForALinkOrAPipeAfterTheWalkIsRefused) {
  for (const bool pipe : {false, true}) {
    SCOPED_TRACE(pipe ? "pipe" : "link");
    TempDir dir;
    fs::create_directories(dir / "src" / "sub");
    // a.bin goes alone (past the batches' 1 MiB), b.bin in a batch after it.
    write_file(dir / "src" / "a.bin", pattern_bytes(2'000'000, 1), 0644);
    write_file(dir / "src" / "sub" / "b.bin", "bbbb", 0644);
    write_file(dir / "secret", "SECR", 0600);  // the same size as b.bin
    const auto grid = make_grid({3});
    Ranks ranks(grid, [](int) {
      runtime::CommOptions o;
      o.timeout = std::chrono::milliseconds(5000);
      return o;
    });
    std::atomic<bool> swapped{false};
    std::map<int, std::string> errors;
    std::mutex m;
    ranks.run([&](runtime::Communicator& c) {
      FileSpec s;
      s.source = (dir / "src").string();
      s.output = (dir / ("n" + std::to_string(c.rank())) / "src").string();
      s.after_window = [&](std::uint64_t) {
        if (c.rank() != 0 || swapped.exchange(true)) return;
        const fs::path b = dir / "src" / "sub" / "b.bin";
        fs::remove(b);
        if (pipe)
          ::mkfifo(b.c_str(), 0600);
        else
          fs::create_symlink(dir / "secret", b);
      };
      try {
        broadcast_tree(c, s, 0);
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors[c.rank()] = e.what();
      }
    });
    ASSERT_EQ(errors.size(), 3u);
    const std::string b = (dir / "src" / "sub" / "b.bin").string();
    EXPECT_NE(errors.at(0).find(pipe ? "not a regular file" : "symbolic link"), std::string::npos)
        << errors.at(0);
    for (int r : {1, 2}) {
      EXPECT_NE(errors.at(r).find("the root, rank 0"), std::string::npos) << errors.at(r);
      EXPECT_FALSE(fs::exists(dir / ("n" + std::to_string(r)) / "src" / "sub" / "b.bin"));
    }
  }
}

// A directory job compares each file with itself, not with the directory: a
// rank whose copy of the tree is the source tree (a shared file system, or
// the root's host) refuses each file as the source, which stays whole.
// Either way the rank that refused it fails once the file (or its batch) has
// passed (it relays a file alone for the others), and the launcher fails the
// job on its report.
TEST(FileTree, ACopyOfATreeOverItselfIsRefusedFileByFile) {
  for (const std::uint64_t size : {std::uint64_t{100'000}, std::uint64_t{2'000'000}}) {
    SCOPED_TRACE(size);
    TempDir dir;
    fs::create_directories(dir / "src");
    write_file(dir / "src" / "x.bin", pattern_bytes(size, 4), 0644);
    struct stat st {};
    ASSERT_EQ(::stat((dir / "src").c_str(), &st), 0);
    const auto grid = make_grid({2});
    Ranks ranks(grid);
    FileSpec s;
    s.source = (dir / "src").string();
    s.output = (dir / "src").string();  // rank 1's copy: the source itself
    s.source_dev = st.st_dev;           // as the launcher sets them: the directory's
    s.source_ino = st.st_ino;
    const auto errors = errors_of(ranks, s);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors.at(1).find("is the source file itself"), std::string::npos) << errors.at(1);
    EXPECT_EQ(slurp((dir / "src" / "x.bin").string()), pattern_bytes(size, 4));
  }
}
}  // namespace
}  // namespace gridbcast::files
