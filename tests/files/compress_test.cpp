// --compress (files/compress.hpp): chunks packed by zstd at the root, stored
// as they were. The attacks first: what a peer sends as a packed chunk or a
// compressed window's head (a frame that expands past its chunk or short of
// it, garbage, lengths of 0 or above the chunk, chunks that do not fill the
// window, a next window past the buffer) is refused before it is used, and a
// window damaged in flight fails the rank that got it, naming the chunk.
// Then: copies byte-exact over loopback for several shapes and sizes,
// compressible data travelling in fewer bytes, incompressible data as it is,
// resume moving only a damaged chunk, and `auto`'s rule.
#include "files/compress.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "files/file_broadcast.hpp"
#include "files/file_wire.hpp"
#include "runtime/buffer.hpp"
#include "support/file_runs.hpp"
#include "support/grids.hpp"
#include "support/process.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"

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
constexpr std::uint64_t kWindow = 384 << 10;  // two chunks in each of three buffers

// Text that zstd packs to a fraction of its size, different in every line.
std::string text_bytes(std::uint64_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  static const char* words[] = {"grid ",   "broadcast ", "lane ", "site ", "chunk ",
                                "window ", "root ",      "rank ", "tree ", "segment "};
  std::string s;
  while (s.size() < size) {
    s += std::to_string(rng() % 100000) + ": ";
    for (int w = 0; w < 8; ++w) s += words[rng() % 10];
    s += '\n';
  }
  s.resize(size);
  return s;
}

std::string random_bytes(std::uint64_t size, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(size, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

const std::byte* as_bytes(const std::string& s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

// --- The packer and the unpacker -------------------------------------------

TEST(ChunkCompression, TextShrinksAndComesBackExactly) {
  const std::string in = text_bytes(200000, 1);
  std::vector<std::byte> packed(in.size()), out(in.size());
  ChunkCompressor z;
  const std::uint64_t n = z.pack(as_bytes(in), in.size(), packed.data());
  EXPECT_LT(n, in.size() / 2);
  ChunkDecompressor d;
  d.unpack(packed.data(), n, out.data(), in.size());
  EXPECT_EQ(std::memcmp(out.data(), in.data(), in.size()), 0);
}

TEST(ChunkCompression, RandomBytesTravelAsTheyAre) {
  const std::string in = random_bytes(100000, 2);
  std::vector<std::byte> packed(in.size()), out(in.size());
  ChunkCompressor z;
  EXPECT_EQ(z.pack(as_bytes(in), in.size(), packed.data()), in.size());
  EXPECT_EQ(std::memcmp(packed.data(), in.data(), in.size()), 0);
  ChunkDecompressor d;
  d.unpack(packed.data(), in.size(), out.data(), in.size());
  EXPECT_EQ(std::memcmp(out.data(), in.data(), in.size()), 0);
  // One byte goes as it is (nothing is smaller).
  std::byte one{7}, got{};
  EXPECT_EQ(z.pack(&one, 1, &got), 1u);
  EXPECT_EQ(got, one);
}

// A peer's frame that would expand past the chunk: zstd stops at the chunk's
// end (ASan would see a write past it) and the chunk is refused.
TEST(ChunkCompression, AFrameThatExpandsPastItsChunkIsRefusedWithoutWritingPastIt) {
  const std::string big(1 << 20, 'a');  // packs to a few dozen bytes
  std::vector<std::byte> packed(big.size());
  ChunkCompressor z;
  const std::uint64_t n = z.pack(as_bytes(big), big.size(), packed.data());
  ASSERT_LT(n, 4096u);
  ChunkDecompressor d;
  // The chunk is said to be 4096 bytes: exactly that much room, on the heap.
  std::vector<std::byte> out(4096);
  try {
    d.unpack(packed.data(), n, out.data(), out.size());
    FAIL() << "a 1 MiB frame was taken for a 4096-byte chunk";
  } catch (const FileWireError& e) {
    EXPECT_NE(std::string(e.what()).find("says it holds 1048576"), std::string::npos) << e.what();
  }
}

TEST(ChunkCompression, AFrameThatExpandsShortOfItsChunkIsRefused) {
  const std::string small(1000, 'b');
  std::vector<std::byte> packed(small.size());
  ChunkCompressor z;
  const std::uint64_t n = z.pack(as_bytes(small), small.size(), packed.data());
  ASSERT_LT(n, small.size());
  ChunkDecompressor d;
  std::vector<std::byte> out(5000);
  try {
    d.unpack(packed.data(), n, out.data(), out.size());
    FAIL() << "a 1000-byte frame was taken for a 5000-byte chunk";
  } catch (const FileWireError& e) {
    EXPECT_NE(std::string(e.what()).find("says it holds 1000"), std::string::npos) << e.what();
  }
}

TEST(ChunkCompression, GarbageAndImpossibleLengthsAreRefused) {
  ChunkDecompressor d;
  const std::string junk = random_bytes(500, 3);
  std::vector<std::byte> out(1000);
  EXPECT_THROW(d.unpack(as_bytes(junk), junk.size(), out.data(), out.size()), FileWireError);
  EXPECT_THROW(d.unpack(as_bytes(junk), 0, out.data(), out.size()), FileWireError);
  EXPECT_THROW(d.unpack(as_bytes(junk), 501, out.data(), 500), FileWireError);
  // A frame cut short.
  const std::string text = text_bytes(20000, 4);
  std::vector<std::byte> packed(text.size());
  ChunkCompressor z;
  const std::uint64_t n = z.pack(as_bytes(text), text.size(), packed.data());
  std::vector<std::byte> back(text.size());
  EXPECT_THROW(d.unpack(packed.data(), n / 2, back.data(), back.size()), FileWireError);
  // Two frames back to back, each of half the chunk: one frame only.
  {
    std::vector<std::byte> two(text.size());
    const std::uint64_t a = z.pack(as_bytes(text), text.size() / 2, two.data());
    const std::uint64_t b =
        z.pack(as_bytes(text) + text.size() / 2, text.size() / 2, two.data() + a);
    try {
      d.unpack(two.data(), a + b, back.data(), text.size());
      ADD_FAILURE() << "two frames were taken for one";
    } catch (const FileWireError& e) {
      EXPECT_NE(std::string(e.what()).find("is not one zstd frame"), std::string::npos) << e.what();
    }
  }
  // And the decompressor still works after each refusal.
  d.unpack(packed.data(), n, back.data(), back.size());
  EXPECT_EQ(std::memcmp(back.data(), text.data(), text.size()), 0);
}

// --- A compressed window's head --------------------------------------------

// A head for chunks that travel as `wire` bytes, followed by that many bytes.
std::vector<std::byte> window_of(std::uint64_t next, const std::vector<std::uint64_t>& wire) {
  std::uint64_t total = window_head_bytes(wire.size());
  for (auto w : wire) total += w;
  std::vector<std::byte> b(total);
  WireWriter hw(b.data());
  hw.u64(next);
  for (auto w : wire) hw.u64(w);
  return b;
}

TEST(WindowHead, AWellFormedHeadIsRead) {
  const auto b = window_of(9000, {10, 20, 30});
  const std::vector<std::uint64_t> stored{10, 100, 30};
  const WindowHead h = decode_window_head(b, stored, 5000, 10000);
  EXPECT_EQ(h.next, 9000u);
  EXPECT_EQ(h.wire, (std::vector<std::uint64_t>{10, 20, 30}));
}

TEST(WindowHead, EveryLengthAPeerSendsIsCheckedBeforeUse) {
  const std::vector<std::uint64_t> stored{100, 100};
  auto refused = [&](const std::vector<std::byte>& b, const std::string& part,
                     std::uint64_t least = 0, std::uint64_t most = 1 << 20) {
    try {
      decode_window_head(b, stored, least, most);
      ADD_FAILURE() << "accepted; wanted \"" << part << "\"";
    } catch (const FileWireError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // A chunk of 0 bytes, or more than it stores.
  refused(window_of(0, {0, 100}), "chunk 0 of 100 bytes is said to travel as 0 bytes");
  refused(window_of(0, {101, 99}), "travel as 101 bytes");
  // Lengths that wrap: 2^64 - 50 + 100 would be 50.
  {
    auto b = window_of(0, {50, 50});
    WireWriter(b.data() + 16).u64(0ull - 50);
    refused(b, "chunk 1 of 100 bytes is said to travel as 18446744073709551566");
  }
  // More than the window holds, and less than it holds.
  {
    auto b = window_of(0, {100, 100});
    b.resize(b.size() - 1);
    refused(b, "chunk 1 of 100 bytes");
  }
  {
    auto b = window_of(0, {100, 100});
    b.resize(b.size() + 7);
    refused(b, "7 bytes past its last chunk");
  }
  // A window shorter than its head.
  refused(std::vector<std::byte>(100), "shorter than its head");
  // The next window outside what the plan allows (past the buffer).
  refused(window_of(5000, {100, 100}), "the next is 5000 bytes long (0 to 4096)", 0, 4096);
  refused(window_of(0, {100, 100}), "the next is 0 bytes long (10 to 4096)", 10, 4096);
}

// --- Over loopback ---------------------------------------------------------

FileSpec packed_spec(const fs::path& dir, const fs::path& src, int r, const std::string& name) {
  FileSpec s;
  s.source = src.string();
  s.output = (dir / ("n" + std::to_string(r)) / name).string();
  s.chunk_bytes = kChunk;
  s.window_bytes = kWindow;
  s.compress = Compression::kZstd;
  return s;
}

class PackedShapes : public ::testing::TestWithParam<std::tuple<std::vector<int>, int>> {};

TEST_P(PackedShapes, EveryCopyIsExactAndTextTravelsInFewerBytes) {
  const auto& [sites, root] = GetParam();
  const auto grid = make_grid(sites);
  Ranks ranks(grid);
  TempDir dir;
  // Empty, one byte, a chunk less one, one buffer exactly, several windows
  // with a short last chunk; text and random bytes.
  for (const bool text : {true, false}) {
    for (const std::uint64_t size :
         std::vector<std::uint64_t>{0, 1, kChunk - 1, kWindow / 3, 5 * kWindow + 12345}) {
      SCOPED_TRACE((text ? "text, size " : "random, size ") + std::to_string(size));
      const std::string name = (text ? "t" : "r") + std::to_string(size);
      const fs::path src = dir / ("src-" + name);
      const std::string data = text ? text_bytes(size, 5) : random_bytes(size, 6);
      write_file(src, data);
      const Outcome o =
          run(ranks, root, [&](int r) { return packed_spec(dir.path(), src, r, name); });
      ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
      for (int r = 0; r < ranks.size(); ++r) {
        const FileResult& res = o.results.at(r);
        EXPECT_TRUE(res.compressed);
        EXPECT_EQ(res.root_digest, o.results.at(root).root_digest);
        EXPECT_EQ(res.wire_bytes, o.results.at(root).wire_bytes) << "rank " << r;
        // Three buffers share the window (each with its head), and one
        // chunk is unpacked (or read) aside.
        EXPECT_LE(res.buffer_bytes, kWindow + kChunk + 3 * kWindowAlign);
        if (r != root) {
          EXPECT_EQ(slurp(res.path), data) << "rank " << r;
        }
      }
      const FileResult& sent = o.results.at(root);
      if (text && size >= kChunk) {
        EXPECT_LT(sent.wire_bytes, size / 2) << "text went as " << sent.wire_bytes;
      }
      if (!text && size > 0) {
        EXPECT_GE(sent.wire_bytes, size);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, PackedShapes,
                         ::testing::Values(std::make_tuple(std::vector<int>{2}, 1),
                                           std::make_tuple(std::vector<int>{3, 2}, 0),
                                           std::make_tuple(std::vector<int>{3, 2}, 4)),
                         [](const auto& p) {
                           std::string n;
                           for (int s : std::get<0>(p.param)) n += std::to_string(s) + "x";
                           return n + "root" + std::to_string(std::get<1>(p.param));
                         });

// What a hostile root (or the network) could put in a compressed window, as
// rank 2 receives it: each is refused by rank 2, naming the window or the
// chunk, and rank 2 keeps no copy.
TEST(PackedWindows, DamageToAHeadOrAPackedChunkFailsTheRankThatGotIt) {
  struct Case {
    const char* what;
    std::function<void(std::byte*, std::uint64_t)> damage;
    const char* message;
  };
  const std::vector<Case> cases{
      {"the next window's length", [](std::byte* b, std::uint64_t) { b[1] ^= std::byte{0x10}; },
       "refused window 1: file broadcast: the root's window says the next is"},
      {"a chunk's length", [](std::byte* b, std::uint64_t) { b[8] = std::byte{0x01}; },
       "refused window 1: file broadcast: the root's window's chunk 0 of 65536 bytes is "
       "said to travel as"},
      {"a packed chunk's bytes", [](std::byte* b, std::uint64_t n) { b[n - 3] ^= std::byte{0x40}; },
       "arrived damaged"},
  };
  const auto grid = make_grid({4});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Ranks ranks(grid, quick_timeout());
    TempDir dir;
    const fs::path src = dir / "src";
    write_file(src, text_bytes(4 * kWindow, 7));
    const Outcome o = run(ranks, 0, [&](int r) {
      FileSpec s = packed_spec(dir.path(), src, r, "copy");
      if (r == 2)
        s.on_arrival = [&c](std::uint64_t window, std::byte* data, std::uint64_t bytes) {
          if (window == 1) c.damage(data, bytes);
        };
      return s;
    });
    ASSERT_EQ(o.errors.count(2), 1u) << "the damage went unnoticed";
    EXPECT_NE(o.errors.at(2).find(c.message), std::string::npos) << o.errors.at(2);
    EXPECT_EQ(o.errors.at(2).rfind("rank 2 (node ", 0), 0u) << o.errors.at(2);
    EXPECT_FALSE(fs::exists(dir / "n2" / "copy"));
  }
}

// The root packs the first window before the plan, while every other rank
// waits for it: packing that takes longer than the timeout (a third of a
// large window, a slow disk) does not fail them, since the root says it
// still works.
TEST(PackedWindows, PackingTheFirstWindowLongerThanTheTimeoutFailsNobody) {
  const auto grid = make_grid({3});
  runtime::CommOptions o;
  o.timeout = std::chrono::milliseconds(1000);
  Ranks ranks(grid, o);
  TempDir dir;
  const fs::path src = dir / "src";
  // 16 chunks: two per window (a third of kWindow), at least eight windows.
  const std::string data = text_bytes(16 * kChunk, 12);
  write_file(src, data);
  std::atomic<int> calls{0};
  const Outcome out = run(ranks, 0, [&](int r) {
    FileSpec s = packed_spec(dir.path(), src, r, "copy");
    if (r == 0)  // the first window's two chunks take 1.4 s to read
      s.on_work = [&calls](std::uint64_t) {
        if (calls++ < 2) std::this_thread::sleep_for(std::chrono::milliseconds(700));
      };
    return s;
  });
  ASSERT_TRUE(out.errors.empty()) << out.errors.begin()->second;
  EXPECT_EQ(slurp((dir / "n1" / "copy").string()), data);
  EXPECT_EQ(slurp((dir / "n2" / "copy").string()), data);
}

// Resume with compression: a copy with one chunk damaged gets that chunk
// alone, packed, and ends exact.
TEST(PackedWindows, ResumeMovesOnlyTheDamagedChunk) {
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  const fs::path src = dir / "src";
  const std::string data = text_bytes(10 * kChunk + 99, 8);
  write_file(src, data);
  auto spec = [&](int r) {
    FileSpec s = packed_spec(dir.path(), src, r, "copy");
    s.resume = true;
    return s;
  };
  ASSERT_TRUE(run(ranks, 0, spec).errors.empty());
  {
    std::fstream f(dir / "n1" / "copy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3 * kChunk + 5);
    f.put('#');
  }
  const Outcome o = run(ranks, 0, spec);
  ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
  EXPECT_EQ(o.results.at(0).chunks_sent, 1u);
  EXPECT_LT(o.results.at(0).wire_bytes, kChunk);
  EXPECT_EQ(slurp((dir / "n1" / "copy").string()), data);
  EXPECT_EQ(slurp((dir / "n2" / "copy").string()), data);
}

// --- auto ------------------------------------------------------------------

TEST(AutoCompression, PaysOnlyWhenPackingBeatsTheNetworkByATenth) {
  // Half the bytes, compression far faster than the network: pays.
  EXPECT_TRUE(compression_pays(0.5, 200e6, 12.5e6));
  // Nothing saved, or 5 % saved: does not.
  EXPECT_FALSE(compression_pays(1.0, 200e6, 12.5e6));
  EXPECT_FALSE(compression_pays(0.95, 200e6, 12.5e6));
  // Compression slower than the network: the root could not keep up.
  EXPECT_FALSE(compression_pays(0.3, 100e6, 1.25e9));
  // Unknown rates never compress.
  EXPECT_FALSE(compression_pays(0.5, 200e6, 0));
  EXPECT_FALSE(compression_pays(0.5, 0, 12.5e6));
}

TEST(AutoCompression, SamplesTellTextFromRandomBytes) {
  TempDir dir;
  write_file(dir / "text", text_bytes(8 << 20, 9));
  write_file(dir / "random", random_bytes(8 << 20, 10));
  write_file(dir / "empty", "");
  FileSource text = FileSource::open((dir / "text").string());
  const CompressionChoice t = choose_compression(text, 8 << 20, 12.5e6);
  EXPECT_TRUE(t.compress) << t.why;
  EXPECT_LT(t.ratio, 0.5);
  EXPECT_NE(t.why.find("network at most 12 MB/s"), std::string::npos) << t.why;
  FileSource random = FileSource::open((dir / "random").string());
  const CompressionChoice r = choose_compression(random, 8 << 20, 12.5e6);
  EXPECT_FALSE(r.compress) << r.why;
  EXPECT_GE(r.ratio, 0.99);
  FileSource empty = FileSource::open((dir / "empty").string());
  EXPECT_FALSE(choose_compression(empty, 0, 12.5e6).compress);
}

TEST(AutoCompression, TheRootsChoiceReachesEveryRank) {
  // make_grid's nodes have 10 Gbit NICs: faster than zstd on one core, so
  // auto sends even text as it is, and every rank knows.
  const auto grid = make_grid({3});
  Ranks ranks(grid);
  TempDir dir;
  const fs::path src = dir / "src";
  write_file(src, text_bytes(4 * kChunk, 11));
  const Outcome o = run(ranks, 0, [&](int r) {
    FileSpec s = packed_spec(dir.path(), src, r, "copy");
    s.compress = Compression::kAuto;
    return s;
  });
  ASSERT_TRUE(o.errors.empty()) << o.errors.begin()->second;
  for (const auto& [r, res] : o.results) EXPECT_FALSE(res.compressed) << "rank " << r;
  EXPECT_NE(o.results.at(0).compression_why.find("auto chose off"), std::string::npos)
      << o.results.at(0).compression_why;
}

}  // namespace
}  // namespace gridbcast::files
