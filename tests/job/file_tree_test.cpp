// job/file_tree.cpp over loopback (ranks as threads) and real files: a
// directory arrives whole, with modes and mtimes of files and directories,
// symlinks as links (never followed), empty files and directories; a single
// file through the same entry lands at the output path itself.
#include "job/file_tree.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "runtime/buffer.hpp"
#include "support/grids.hpp"
#include "support/process.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::job {
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

}  // namespace
}  // namespace gridbcast::job
