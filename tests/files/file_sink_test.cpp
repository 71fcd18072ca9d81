// job/file_sink.cpp on real file systems: the copy is written under a
// temporary name and renamed into place with the source's mode and mtime;
// nothing the user had is touched on failure; what could redirect the write
// (symlinks, directories of other users, world-writable directories, "..",
// the source itself) is refused before anything is created; a full or
// read-only file system fails naming the path and the errno text; a signal
// removes the temporary file.
#include "files/file_sink.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "files/chunk_digest.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/tmpfs.hpp"

namespace gridbcast::files {
namespace {

namespace fs = std::filesystem;
using testing::slurp;
using testing::TempDir;

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// Names in `dir` that are temporary files of a sink.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".gridbcast-") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

FileMeta meta_for(std::uint64_t size) {
  FileMeta m;
  m.size = size;
  m.mode = 0640;
  m.mtime = {1'600'000'000, 123'456'789};
  return m;
}

const std::byte* bytes_of(const std::string& s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

// Expects `fn` to throw a std::runtime_error whose text holds every `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one with \"" << parts.front() << "\"";
  } catch (const std::runtime_error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "\"" << p << "\" not in: " << e.what();
  }
}

TEST(FileSink, CopyAppearsOnlyAtCommitWithTheSourcesModeAndMtime) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  const std::string data = "the whole file";
  FileSink sink = FileSink::open(dest.string(), meta_for(data.size()), {});
  EXPECT_FALSE(fs::exists(dest)) << "nothing under the final name before commit";
  ASSERT_EQ(temporaries(dir.path()).size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(sink.temp_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "the temporary file is private";
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), data.size());
  sink.write(0, bytes_of(data), data.size());
  sink.commit();
  EXPECT_EQ(slurp(dest.string()), data);
  EXPECT_TRUE(temporaries(dir.path()).empty());
  ASSERT_EQ(::stat(dest.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'600'000'000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 123'456'789);
}

// Aligned writes go to the device with O_DIRECT (their pages never enter the
// page cache, as mincore shows); a tail and an unaligned buffer take the
// page cache path; the copy is exact either way.
TEST(FileSink, AlignedWritesBypassThePageCacheAndTheRestDoesNotAndTheCopyIsExact) {
  TempDir dir;
  const int probe = ::open((dir / "probe").c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (probe < 0) GTEST_SKIP() << dir.path() << " does not take O_DIRECT: " << std::strerror(errno);
  ::close(probe);
  constexpr std::uint64_t kPage = kDirectAlign;
  const std::uint64_t size = 3 * kPage + 100;
  std::string data(size, '\0');
  for (std::uint64_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + i / 4096);
  void* raw = std::aligned_alloc(kPage, 3 * kPage);
  ASSERT_NE(raw, nullptr);
  std::unique_ptr<void, decltype(&std::free)> aligned(raw, &std::free);
  std::memcpy(raw, data.data(), 2 * kPage);

  const fs::path dest = dir / "copy.bin";
  FileSink sink = FileSink::open(dest.string(), meta_for(size), {});
  ASSERT_TRUE(sink.direct_io());
  sink.write(0, static_cast<const std::byte*>(raw), 2 * kPage);  // aligned: direct
  // Page 2 from an address one byte past a malloc'd one (never aligned,
  // whatever alignment an allocator gives a string: TSan's gave it pages),
  // and the 100-byte tail: page cache.
  std::vector<char> skewed(kPage + 1);
  std::memcpy(skewed.data() + 1, data.data() + 2 * kPage, kPage);
  sink.write(2 * kPage, reinterpret_cast<const std::byte*>(skewed.data() + 1), kPage);
  sink.write(3 * kPage, bytes_of(data) + 3 * kPage, 100);

  const int fd = ::open(sink.temp_path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  unsigned char resident[4] = {};
  ASSERT_EQ(::mincore(map, size, resident), 0);
  EXPECT_EQ(resident[0] & 1, 0) << "a direct write left its page in the cache";
  EXPECT_EQ(resident[1] & 1, 0) << "a direct write left its page in the cache";
  EXPECT_EQ(resident[2] & 1, 1) << "an unaligned buffer went through the cache";
  EXPECT_EQ(resident[3] & 1, 1) << "the tail went through the cache";
  ::munmap(map, size);
  ::close(fd);
  sink.commit();
  EXPECT_EQ(slurp(dest.string()), data);
}

// A failure (destruction without commit) keeps the partial copy once it holds
// a byte, private and beside the untouched previous copy, with or without
// resume: a rerun with resume keeps its chunks (issue 27). One that never got
// a byte goes.
TEST(FileSink, WithoutCommitAPartialWithBytesStaysAndAnExistingCopyStays) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  write_text(dest, "previous version");
  { FileSink sink = FileSink::open(dest.string(), meta_for(100), {}); }  // nothing written
  EXPECT_TRUE(temporaries(dir.path()).empty());
  {
    FileSink sink = FileSink::open(dest.string(), meta_for(100), {});
    sink.write(0, bytes_of(std::string(100, 'x')), 100);
  }  // a failure: destroyed without commit
  EXPECT_EQ(slurp(dest.string()), "previous version");
  ASSERT_EQ(temporaries(dir.path()), std::vector<std::string>{partial_name("copy.bin")});
  struct stat st {};
  ASSERT_EQ(::stat((dir / partial_name("copy.bin")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // A rerun without resume starts it over (none of its bytes are read) ...
  {
    FileSink again = FileSink::open(dest.string(), meta_for(4), {});
    EXPECT_FALSE(again.reused_partial());
    std::string got(4, '\0');
    EXPECT_EQ(again.read_partial(0, reinterpret_cast<std::byte*>(got.data()), 4), 4u);
    EXPECT_EQ(got, std::string(4, '\0'));
    again.write(0, bytes_of(std::string("abcd")), 4);
    again.commit();
  }
  // ... and success leaves nothing but the copy.
  EXPECT_EQ(slurp(dest.string()), "abcd");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

// Two jobs writing one copy would mix their bytes after each verified its own:
// while one holds the partial copy, another is refused naming it; once the
// first is gone (a killed rank), the next one takes it.
TEST(FileSink, ASecondJobWritingTheSameCopyIsRefused) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  auto first = std::make_unique<FileSink>(FileSink::open(dest.string(), meta_for(8), {}));
  first->write(0, bytes_of(std::string("mine")), 4);
  for (const bool resume : {false, true}) {
    SinkOptions o;
    o.resume = resume;
    expect_error([&] { FileSink::open(dest.string(), meta_for(8), o); },
                 {partial_name("copy.bin"), "another gridbcast job is writing this copy now"});
  }
  std::string got(4, '\0');
  EXPECT_EQ(first->read_partial(0, reinterpret_cast<std::byte*>(got.data()), 4), 4u);
  EXPECT_EQ(got, "mine") << "the refused job touched nothing";
  first.reset();
  SinkOptions o;
  o.resume = true;
  FileSink next = FileSink::open(dest.string(), meta_for(8), o);
  EXPECT_TRUE(next.reused_partial());
}

// A rank that became the source of its own copy removes the copy in progress
// beside it (a lost root, healed): its partial and chunk record, and nothing
// else — not what a symlink at their names points to, not a partial with a
// second link, not one a job is writing.
TEST(FileSink, DiscardingAPartialRemovesOnlyOurOwnAndLeavesWhatItCannotVouchFor) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  {
    SinkOptions o;
    o.chunk_bytes = 4;
    FileSink s = FileSink::open(dest.string(), meta_for(8), o);
    s.write(0, bytes_of(std::string("held")), 4);
  }  // kept: it holds a byte
  write_text(dest, "the whole");
  ASSERT_EQ(temporaries(dir.path()).size(), 2u);
  EXPECT_EQ(discard_partial(dest.string()), 2);
  EXPECT_TRUE(temporaries(dir.path()).empty());
  EXPECT_EQ(slurp(dest.string()), "the whole") << "the copy itself stays";
  EXPECT_EQ(discard_partial(dest.string()), 0) << "nothing left to remove";

  // A symlink at the partial's name: neither it nor its target is touched.
  write_text(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / partial_name("copy.bin"));
  EXPECT_EQ(discard_partial(dest.string()), 0);
  EXPECT_TRUE(fs::is_symlink(dir / partial_name("copy.bin")));
  EXPECT_EQ(slurp((dir / "victim").string()), "precious");
  fs::remove(dir / partial_name("copy.bin"));

  // A partial with a second link (somebody's file under our name): left.
  fs::create_hard_link(dir / "victim", dir / partial_name("copy.bin"));
  EXPECT_EQ(discard_partial(dest.string()), 0);
  EXPECT_EQ(slurp((dir / partial_name("copy.bin")).string()), "precious");
  fs::remove(dir / partial_name("copy.bin"));

  // A partial another job is writing (it holds the lock), with its chunk
  // record: both left.
  SinkOptions chunked;
  chunked.chunk_bytes = 4;
  auto writing = std::make_unique<FileSink>(FileSink::open(dest.string(), meta_for(8), chunked));
  writing->write(0, bytes_of(std::string("mine")), 4);
  writing->record(0, sha256(bytes_of(std::string("mine")), 4));
  ASSERT_EQ(temporaries(dir.path()).size(), 2u);
  EXPECT_EQ(discard_partial(dest.string()), 0);
  EXPECT_EQ(temporaries(dir.path()).size(), 2u) << "the record of a job at work stays too";
  std::string got(4, '\0');
  EXPECT_EQ(writing->read_partial(0, reinterpret_cast<std::byte*>(got.data()), 4), 4u);
  EXPECT_EQ(got, "mine");
  writing.reset();
  EXPECT_EQ(discard_partial(dest.string()), 2) << "once the job is gone, they are ours to remove";
  // A record without its partial: left (a sink that finds it replaces it).
  write_text(dir / chunk_record_name("copy.bin"), "stale");
  EXPECT_EQ(discard_partial(dest.string()), 0);
  EXPECT_TRUE(fs::exists(dir / chunk_record_name("copy.bin")));

  // ".." on the way: refused, as a sink refuses it.
  expect_error([&] { discard_partial((dir / ".." / "x" / "copy.bin").string()); }, {"\"..\""});
}

TEST(FileSink, SetUidBitsAreNotCopied) {
  TempDir dir;
  FileMeta m = meta_for(0);
  m.mode = 04755;
  FileSink sink = FileSink::open((dir / "prog").string(), m, {});
  sink.commit();
  EXPECT_EQ(fs::status(dir / "prog").permissions(), fs::perms(0755));
}

TEST(FileSink, MissingDirectoriesAreMadePrivate) {
  TempDir dir;
  const fs::path dest = dir / "a" / "b" / "copy.bin";
  FileSink::open(dest.string(), meta_for(0), {}).commit();
  EXPECT_TRUE(fs::exists(dest));
  struct stat st {};
  ASSERT_EQ(::stat((dir / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  SinkOptions o;
  o.dir_mode = 0750;
  FileSink::open((dir / "c" / "copy.bin").string(), meta_for(0), o).commit();
  ASSERT_EQ(::stat((dir / "c").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u & ~0022u);
}

TEST(FileSink, ASymlinkPlantedAtTheDestinationIsRefusedAndItsTargetUntouched) {
  TempDir dir;
  write_text(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / "copy.bin");
  expect_error([&] { FileSink::open((dir / "copy.bin").string(), meta_for(8), {}); },
               {(dir / "copy.bin").string(), "symbolic link"});
  EXPECT_EQ(slurp((dir / "victim").string()), "precious");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

TEST(FileSink, TheSourceItselfIsRefusedWhateverTheSpelling) {
  TempDir dir;
  write_text(dir / "source.bin", "the only copy");
  fs::create_directory(dir / "sub");
  fs::create_hard_link(dir / "source.bin", dir / "sub" / "hardlink.bin");
  fs::create_directory_symlink(dir.path(), dir / "via-link");
  const FileMeta src = stat_file((dir / "source.bin").string());
  SinkOptions o;
  o.source_dev = src.dev;
  o.source_ino = src.ino;
  for (const std::string& spelling :
       {(dir / "source.bin").string(), dir.path().string() + "/./source.bin",
        dir.path().string() + "//source.bin", (dir / "via-link" / "source.bin").string(),
        (dir / "sub" / "hardlink.bin").string()}) {
    SCOPED_TRACE(spelling);
    expect_error([&] { FileSink::open(spelling, src, o); }, {"is the source file itself"});
  }
  EXPECT_EQ(slurp((dir / "source.bin").string()), "the only copy");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

TEST(FileSink, DotDotIsRefused) {
  TempDir dir;
  fs::create_directory(dir / "a");
  expect_error([&] { FileSink::open((dir / "a" / ".." / "x").string(), meta_for(0), {}); },
               {"\"..\""});
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(FileSink, NodeNamesThatCouldLeaveTheDirectoryAreRefused) {
  for (const char* ok : {"n01", "node-1.site_a", "a.b"})
    EXPECT_NO_THROW(check_node_name_for_path(ok)) << ok;
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "n 1", "n$1", "ü"})
    EXPECT_THROW(check_node_name_for_path(bad), std::runtime_error) << bad;
}

TEST(FileSink, AWorldWritableDirectoryWithoutStickyBitIsRefused) {
  TempDir dir;
  fs::create_directory(dir / "open");
  ::chmod((dir / "open").c_str(), 0777);
  expect_error([&] { FileSink::open((dir / "open" / "x").string(), meta_for(0), {}); },
               {(dir / "open").string(), "writable by every user"});
  ::chmod((dir / "open").c_str(), 01777);  // as /tmp: accepted
  EXPECT_NO_THROW(FileSink::open((dir / "open" / "x").string(), meta_for(0), {}).commit());
}

TEST(FileSink, ADirectoryOrSymlinkOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  TempDir dir;
  // As a local user would prepare the default /tmp/gridbcast for a root job.
  fs::create_directory(dir / "theirs");
  ASSERT_EQ(::chown((dir / "theirs").c_str(), 4242, 4242), 0);
  expect_error([&] { FileSink::open((dir / "theirs" / "n1" / "x").string(), meta_for(0), {}); },
               {(dir / "theirs").string(), "owned by uid 4242"});
  EXPECT_FALSE(fs::exists(dir / "theirs" / "n1"));
  // A symlink they planted among the directories, pointing somewhere of ours.
  fs::create_directory(dir / "ours");
  fs::create_directory_symlink(dir / "ours", dir / "planted");
  ASSERT_EQ(::lchown((dir / "planted").c_str(), 4242, 4242), 0);
  expect_error([&] { FileSink::open((dir / "planted" / "x").string(), meta_for(0), {}); },
               {(dir / "planted").string(), "symbolic link owned by uid 4242"});
  EXPECT_FALSE(fs::exists(dir / "ours" / "x"));
}

TEST(FileSink, AFullFileSystemFailsBeforeDataMovesNamingPathAndErrno) {
  TempDir dir;
  std::string why;
  auto mnt = testing::Tmpfs::mount(dir.path().string(), "1M", false, why);
  if (!mnt) GTEST_SKIP() << why;
  write_text(dir / "copy.bin", "previous");
  expect_error([&] { FileSink::open((dir / "copy.bin").string(), meta_for(4 << 20), {}); },
               {(dir / ".copy.bin.gridbcast-").string(), "No space left on device"});
  EXPECT_EQ(slurp((dir / "copy.bin").string()), "previous");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

TEST(FileSink, AReadOnlyFileSystemFailsNamingPathAndErrno) {
  TempDir dir;
  std::string why;
  auto mnt = testing::Tmpfs::mount(dir.path().string(), "1M", true, why);
  if (!mnt) GTEST_SKIP() << why;
  expect_error([&] { FileSink::open((dir / "copy.bin").string(), meta_for(10), {}); },
               {(dir / ".copy.bin.gridbcast-").string(), "Read-only file system"});
}

TEST(FileSink, ResumeKeepsThePartialOnFailureAndReusesIt) {
  TempDir dir;
  SinkOptions o;
  o.resume = true;
  {
    FileSink sink = FileSink::open((dir / "copy.bin").string(), meta_for(8), o);
    EXPECT_FALSE(sink.reused_partial());
    sink.write(0, bytes_of(std::string("half")), 4);
  }
  EXPECT_FALSE(fs::exists(dir / "copy.bin"));
  ASSERT_TRUE(fs::exists(dir / partial_name("copy.bin")));
  FileSink again = FileSink::open((dir / "copy.bin").string(), meta_for(8), o);
  EXPECT_TRUE(again.reused_partial());
  std::string got(4, '\0');
  EXPECT_EQ(again.read_partial(0, reinterpret_cast<std::byte*>(got.data()), 4), 4u);
  EXPECT_EQ(got, "half");
  again.write(4, bytes_of(std::string("full")), 4);
  again.commit();
  EXPECT_EQ(slurp((dir / "copy.bin").string()), "halffull");
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

// A resume reads only what an earlier run wrote: the partial is allocated
// whole, and what never landed is a hole to the file system. Reading a hole
// would fill the page cache with zeros that SEEK_DATA then calls data, so the
// ranges are what the sink reports before anything is read.
TEST(FileSink, ThePartialReportsTheRangesAnEarlierRunWrote) {
  TempDir dir;
  SinkOptions o;
  o.resume = true;
  const std::uint64_t size = 8 << 20, at = 3 << 20, len = 1 << 20;
  {
    FileSink sink = FileSink::open((dir / "copy.bin").string(), meta_for(size), o);
    const std::string block(len, 'x');
    sink.write(at, bytes_of(block), len);
  }
  FileSink again = FileSink::open((dir / "copy.bin").string(), meta_for(size), o);
  ASSERT_TRUE(again.reused_partial());
  if (again.partial_next_data(0) == 0)
    GTEST_SKIP() << "this file system does not report holes (SEEK_DATA)";
  EXPECT_EQ(again.partial_next_data(0), at);
  EXPECT_EQ(again.partial_next_hole(at), at + len);
  EXPECT_EQ(again.partial_next_data(at + len), size) << "nothing after the block";
  EXPECT_EQ(again.partial_next_data(size), size);
  EXPECT_EQ(again.partial_next_hole(size), size);
}

TEST(FileSink, ResumeRefusesAPartialThatIsASymlink) {
  TempDir dir;
  write_text(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / partial_name("copy.bin"));
  SinkOptions o;
  o.resume = true;
  expect_error([&] { FileSink::open((dir / "copy.bin").string(), meta_for(8), o); },
               {partial_name("copy.bin")});
  EXPECT_EQ(slurp((dir / "victim").string()), "precious");
}

// Another user's pipe in a sticky directory, at the destination or the
// partial's name, where --resume reads: refused at once naming the path,
// never opened for a read that would wait for a writer.
TEST(FileSink, ResumeRefusesAPipeAtTheDestinationOrThePartialWithoutWaiting) {
  for (const bool at_partial : {false, true}) {
    SCOPED_TRACE(at_partial ? "partial" : "destination");
    TempDir dir;
    const fs::path pipe = at_partial ? dir / partial_name("copy.bin") : dir / "copy.bin";
    ASSERT_EQ(::mkfifo(pipe.c_str(), 0666), 0);
    SinkOptions o;
    o.resume = true;
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { FileSink::open((dir / "copy.bin").string(), meta_for(8), o); },
                 {pipe.string()});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

// A real signal in a real process: the child opens a sink, writes and waits;
// SIGTERM (the launcher's, when another rank failed) keeps the partial copy
// for a rerun with resume and the previous copy as it was; a sink that has
// not written yet leaves nothing.
TEST(FileSink, SigtermKeepsAPartialWithBytesAndRemovesAnEmptyOne) {
  for (const bool wrote : {false, true}) {
    SCOPED_TRACE(wrote ? "wrote" : "empty");
    TempDir dir;
    const fs::path dest = dir / "copy.bin";
    write_text(dest, "previous");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      install_signal_cleanup();
      FileSink sink = FileSink::open(dest.string(), meta_for(1 << 20), {});
      if (wrote) sink.write(0, bytes_of(std::string(1 << 20, 'n')), 1 << 20);
      (void)!::write(ready[1], "r", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(temporaries(dir.path()).size(), 1u);
    ::kill(pid, SIGTERM);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
    EXPECT_EQ(temporaries(dir.path()).size(), wrote ? 1u : 0u);
    if (wrote) {
      EXPECT_EQ(slurp((dir / partial_name("copy.bin")).string()), std::string(1 << 20, 'n'));
    }
    EXPECT_EQ(slurp(dest.string()), "previous");
    std::filesystem::remove(dir / partial_name("copy.bin"));
  }
}

// The chunk record (DIR/.NAME.gridbcast-chunks): what a run verified and
// wrote, chunk by chunk, trusted by the next run with resume only while the
// partial is exactly as the run that sealed it left it.
constexpr std::uint64_t kRecChunk = 4096;

SinkOptions recorded_options(bool resume) {
  SinkOptions o;
  o.resume = resume;
  o.chunk_bytes = kRecChunk;
  return o;
}

Digest digest_of(const std::string& s) {
  return sha256(bytes_of(s), s.size());
}

// Three chunks, 4096 + 4096 + 100 bytes, each a letter of its own.
std::vector<std::string> three_chunks() {
  return {std::string(kRecChunk, 'a'), std::string(kRecChunk, 'b'), std::string(100, 'c')};
}
std::vector<Digest> digests_of(const std::vector<std::string>& chunks) {
  std::vector<Digest> d;
  for (const auto& c : chunks) d.push_back(digest_of(c));
  return d;
}
constexpr std::uint64_t kThreeChunksBytes = 2 * kRecChunk + 100;

// A sink that wrote and recorded chunks 0 and 2 of three_chunks(), then was
// destroyed without commit (a failure): the partial and its sealed record stay.
void write_chunks_0_and_2(const fs::path& dest) {
  const auto chunks = three_chunks();
  FileSink sink =
      FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(false));
  for (std::uint64_t c : {0u, 2u}) {
    sink.write(c * kRecChunk, bytes_of(chunks[c]), chunks[c].size());
    sink.record(c, digest_of(chunks[c]));
  }
}

std::vector<bool> trusted_on_reopen(const fs::path& dest, const std::vector<Digest>& want) {
  FileSink again =
      FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(true));
  EXPECT_TRUE(again.reused_partial());
  return again.recorded(want);
}

TEST(ChunkRecord, ChunksWrittenBeforeAFailureAreTrustedWhereTheirDigestsAreStillTheRoots) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  write_chunks_0_and_2(dest);
  EXPECT_TRUE(fs::exists(dir / chunk_record_name("copy.bin")));
  auto want = digests_of(three_chunks());
  EXPECT_EQ(trusted_on_reopen(dest, want), (std::vector<bool>{true, false, true}));
  // The source changed since: chunk 2's digest is no longer the root's.
  want[2] = digest_of("other");
  EXPECT_EQ(trusted_on_reopen(dest, want), (std::vector<bool>{true, false, false}));
  // A commit removes the record with the partial.
  {
    const auto chunks = three_chunks();
    FileSink sink =
        FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(true));
    sink.write(kRecChunk, bytes_of(chunks[1]), chunks[1].size());
    sink.commit();
  }
  EXPECT_TRUE(temporaries(dir.path()).empty());
  EXPECT_EQ(slurp(dest.string()), three_chunks()[0] + three_chunks()[1] + three_chunks()[2]);
}

// Anything that changed the partial after the seal (a write, a change of
// mode, a truncation, another file renamed over it) makes every chunk
// checked again: the record says nothing about bytes it did not see land.
TEST(ChunkRecord, APartialChangedAfterTheSealIsCheckedAgainNotTrusted) {
  const auto want = digests_of(three_chunks());
  const std::vector<std::function<void(const fs::path&)>> changes = {
      [](const fs::path& p) {
        const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, "x", 1, 10), 1);
        ::close(fd);
      },
      [](const fs::path& p) { ASSERT_EQ(::chmod(p.c_str(), 0640), 0); },
      [](const fs::path& p) {
        // Same size, same bytes: a copy of it renamed over it (another inode).
        const fs::path tmp = p.string() + ".tmp";
        fs::copy_file(p, tmp);
        ASSERT_EQ(::chmod(tmp.c_str(), 0600), 0);
        fs::rename(tmp, p);
      },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    SCOPED_TRACE("change " + std::to_string(i));
    TempDir dir;
    const fs::path dest = dir / "copy.bin";
    write_chunks_0_and_2(dest);
    // The kernel's timestamps have a granularity of a clock tick: a change
    // within the tick of the seal would keep its ctime.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    changes[i](dir / partial_name("copy.bin"));
    EXPECT_EQ(trusted_on_reopen(dest, want), (std::vector<bool>{false, false, false}));
  }
}

// What sits at the record's name is never followed nor trusted unless it is
// our regular file of exactly the size the file's chunks give, in our
// format, for this chunk size: a symlink to a file of the user's, a record
// cut short, one of a terabyte (read only as far as the chunks go), garbage,
// another chunk size. Each is replaced by a record of this run.
TEST(ChunkRecord, ARecordThatIsNotOursOrNotWellFormedIsNeitherFollowedNorTrusted) {
  const auto want = digests_of(three_chunks());
  const std::vector<std::pair<std::string, std::function<void(const fs::path&, const fs::path&)>>>
      attacks = {
          {"symlink",
           [](const fs::path& rec, const fs::path& victim) {
             fs::copy_file(rec, victim);  // a valid record, where the link points
             fs::remove(rec);
             fs::create_symlink(victim, rec);
           }},
          {"cut short", [](const fs::path& rec, const fs::path&) { fs::resize_file(rec, 100); }},
          {"a terabyte",
           [](const fs::path& rec, const fs::path&) { fs::resize_file(rec, 1ull << 40); }},
          {"garbage",
           [](const fs::path& rec, const fs::path&) {
             const auto n = fs::file_size(rec);
             write_text(rec, std::string(n, '\x5a'));
           }},
          {"sealed in another boot",
           [](const fs::path& rec, const fs::path&) {
             // The seal's boot id, after its 1, device, inode, size and ctime.
             const int fd = ::open(rec.c_str(), O_RDWR | O_CLOEXEC);
             ASSERT_GE(fd, 0);
             unsigned char b = 0;
             ASSERT_EQ(::pread(fd, &b, 1, 64 + 48), 1);
             b ^= 0x01;
             ASSERT_EQ(::pwrite(fd, &b, 1, 64 + 48), 1);
             ::close(fd);
           }},
          {"other chunk size",
           [](const fs::path& rec, const fs::path&) {
             // The header's chunk size field, after the magic and the file size.
             const int fd = ::open(rec.c_str(), O_WRONLY | O_CLOEXEC);
             ASSERT_GE(fd, 0);
             const unsigned char two = 2;
             ASSERT_EQ(::pwrite(fd, &two, 1, 8 + 8 + 6), 1);
             ::close(fd);
           }},
      };
  for (const auto& [what, attack] : attacks) {
    SCOPED_TRACE(what);
    TempDir dir;
    const fs::path dest = dir / "copy.bin", rec = dir / chunk_record_name("copy.bin");
    const fs::path victim = dir / "victim";
    write_chunks_0_and_2(dest);
    ASSERT_EQ(trusted_on_reopen(dest, want), (std::vector<bool>{true, false, true}))
        << "sealed before the attack";
    attack(rec, victim);
    const std::string victim_before = fs::exists(victim) ? slurp(victim.string()) : "";
    const auto start = std::chrono::steady_clock::now();
    {
      FileSink again =
          FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(true));
      EXPECT_EQ(again.recorded(want), (std::vector<bool>{false, false, false}));
      again.record(1, want[1]);  // written to a record of its own
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_FALSE(fs::is_symlink(rec));
    EXPECT_LE(fs::file_size(rec), 4096u) << "replaced";
    if (fs::exists(victim)) {
      EXPECT_EQ(slurp(victim.string()), victim_before) << "not written";
    }
  }
}

// A directory at the record's name is refused naming it, before any data.
TEST(ChunkRecord, ADirectoryAtTheRecordsNameIsRefusedNamingIt) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  write_chunks_0_and_2(dest);
  fs::remove(dir / chunk_record_name("copy.bin"));
  fs::create_directory(dir / chunk_record_name("copy.bin"));
  expect_error(
      [&] { FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(true)); },
      {chunk_record_name("copy.bin")});
}

// A real process stopped two ways while it holds chunks: SIGTERM (how the
// launcher stops the survivors of a loss) seals the record, and the next run
// trusts it; SIGKILL leaves it unsealed, and the next run checks everything.
TEST(ChunkRecord, SigtermSealsTheRecordAndSigkillLeavesItToBeCheckedAgain) {
  const auto want = digests_of(three_chunks());
  for (const int sig : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGKILL");
    TempDir dir;
    const fs::path dest = dir / "copy.bin";
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      install_signal_cleanup();
      const auto chunks = three_chunks();
      FileSink sink =
          FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(false));
      for (std::uint64_t c : {0u, 2u}) {
        sink.write(c * kRecChunk, bytes_of(chunks[c]), chunks[c].size());
        sink.record(c, digest_of(chunks[c]));
      }
      (void)!::write(ready[1], "r", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_EQ(trusted_on_reopen(dest, want),
              (sig == SIGTERM ? std::vector<bool>{true, false, true}
                              : std::vector<bool>{false, false, false}));
  }
}

// A run that rewrites a chunk its loaded record vouched for with other
// bytes (the source changed since) and fails before it records the new
// digest: the record no longer vouches for that chunk, so a run with the
// first source again checks it and does not take the new bytes for the old.
TEST(ChunkRecord, AChunkRewrittenAndNotRecordedIsNoLongerVouchedFor) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  const auto v1 = three_chunks();
  {
    FileSink sink =
        FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(false));
    for (std::uint64_t c = 0; c < 3; ++c) {
      sink.write(c * kRecChunk, bytes_of(v1[c]), v1[c].size());
      sink.record(c, digest_of(v1[c]));
    }
  }
  auto v2 = v1;
  v2[1] = std::string(kRecChunk, 'B');
  {
    FileSink sink =
        FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(true));
    ASSERT_EQ(sink.recorded(digests_of(v2)), (std::vector<bool>{true, false, true}));
    sink.write(kRecChunk, bytes_of(v2[1]), v2[1].size());
    // ... and fails here, before record(1, ...).
  }
  EXPECT_EQ(trusted_on_reopen(dest, digests_of(v1)), (std::vector<bool>{true, false, true}));
}

// Without resume a rerun starts the partial over, and its record with it:
// nothing of the earlier run is trusted by the run after.
TEST(ChunkRecord, ARunWithoutResumeStartsTheRecordOver) {
  TempDir dir;
  const fs::path dest = dir / "copy.bin";
  write_chunks_0_and_2(dest);
  {
    FileSink over =
        FileSink::open(dest.string(), meta_for(kThreeChunksBytes), recorded_options(false));
    const std::string b(kRecChunk, 'b');
    over.write(kRecChunk, bytes_of(b), b.size());
    over.record(1, digest_of(b));
  }
  EXPECT_EQ(trusted_on_reopen(dest, digests_of(three_chunks())),
            (std::vector<bool>{false, true, false}));
}

}  // namespace
}  // namespace gridbcast::files
