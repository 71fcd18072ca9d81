// job/file_wire.cpp: every field a root sends is checked as a whole before
// anything is sized from it. Each attack here was accepted by the decoders of
// 2026-11-24: a header whose chunk makes the window's size wrap (4096 + chunk
// = 1, then an 8191-byte window written past a one-page mapping), a chunk
// count that sized a 32 TB digest list, and manifests that put a file below
// a symlink, listed one path twice or declared an entry per byte.
#include "files/file_wire.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace gridbcast::files {
namespace {

FileHeader good_header() {
  FileHeader h;
  h.meta.size = 10'000'000;
  h.meta.mode = 0644;
  h.meta.mtime = {-1, 500'000'000};
  h.chunk_bytes = 4 << 20;
  h.window_bytes = 64 << 20;
  return h;
}

std::vector<std::byte> bytes_of(const FileHeader& h) {
  std::vector<std::byte> b(kFileHeaderBytes);
  encode_file_header(h, b.data());
  return b;
}

// Decoding `h` fails, and the message names every one of `parts`.
void expect_refused(const FileHeader& h, std::initializer_list<const char*> parts) {
  try {
    decode_file_header(bytes_of(h));
    ADD_FAILURE() << "accepted; expected a refusal naming " << *parts.begin();
  } catch (const FileWireError& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(FileWire, AHeaderRoundTripsWithTimesBefore1970AndAfter2262) {
  for (const FileTime t : {FileTime{-1, 500'000'000}, FileTime{10'413'792'000, 999'999'999},
                           FileTime{std::numeric_limits<std::int64_t>::min(), 0}}) {
    FileHeader h = good_header();
    h.meta.mtime = t;
    const FileHeader back = decode_file_header(bytes_of(h));
    EXPECT_EQ(back.meta.mtime, t);
    EXPECT_EQ(back.meta.size, h.meta.size);
    EXPECT_EQ(back.chunk_bytes, h.chunk_bytes);
  }
}

TEST(FileWire, AChunkThatWrapsTheWindowIsRefusedNamingIt) {
  FileHeader h = good_header();
  h.meta.size = 4095;
  h.chunk_bytes = std::numeric_limits<std::uint64_t>::max() - 4095 + 1;
  h.window_bytes = 8191;
  expect_refused(h, {"chunk", "18446744073709547521"});
}

TEST(FileWire, EveryOutOfRangeFieldIsRefusedNamingIt) {
  FileHeader h = good_header();
  h.window_bytes = kMaxWindowBytes + 1;
  expect_refused(h, {"window"});
  h = good_header();
  h.window_bytes = 1;
  expect_refused(h, {"window"});
  h = good_header();
  h.chunk_bytes = 0;
  expect_refused(h, {"chunk"});
  h = good_header();
  h.chunk_bytes = h.window_bytes / 2 + 1;
  expect_refused(h, {"chunk", "half"});
  h = good_header();
  h.meta.size = kMaxFileBytes + 1;
  expect_refused(h, {"size"});
  h = good_header();
  h.meta.size = std::numeric_limits<std::uint64_t>::max();  // (size + chunk - 1) would wrap
  expect_refused(h, {"size"});
  h = good_header();
  h.meta.size = (kMaxChunks + 1) * 1;
  h.chunk_bytes = 1;
  expect_refused(h, {"chunks"});
  h = good_header();
  h.meta.mtime.nsec = 1'000'000'000;
  expect_refused(h, {"nanoseconds"});
  h = good_header();
  h.meta.mode = 010000;
  expect_refused(h, {"mode"});
  std::vector<std::byte> b = bytes_of(good_header());
  b[7] = std::byte{'1'};  // GBFILE01: the version before this one
  EXPECT_THROW(decode_file_header(b), FileWireError);
  EXPECT_THROW(decode_file_header(std::span(b).first(20)), FileWireError);
}

TEST(FileWire, AFailedRootsHeaderCarriesOnlyItsError) {
  FileHeader h;
  h.ok = false;
  h.error = std::string(5000, 'x');  // cut to what a message carries
  const FileHeader back = decode_file_header(bytes_of(h));
  EXPECT_FALSE(back.ok);
  EXPECT_EQ(back.error.size(), kFileErrorBytes);
}

TEST(FileWire, ATreeHeaderRoundTripsAndRefusesWhatIsOutOfRange) {
  const TreeHeader back =
      decode_tree_header(encode_tree_header({false, 12345, 4096, 300, true, ""}));
  EXPECT_FALSE(back.failed);
  EXPECT_EQ(back.manifest_bytes, 12345u);
  EXPECT_EQ(back.batch_bytes, 4096u);
  EXPECT_EQ(back.batch_files, 300u);
  EXPECT_TRUE(back.batch_packed);
  const TreeHeader failed =
      decode_tree_header(encode_tree_header({true, 0, 0, 0, false, "cannot open"}));
  EXPECT_TRUE(failed.failed);
  EXPECT_EQ(failed.error, "cannot open");
  EXPECT_EQ(encode_tree_header({true, 0, 0, 0, false, std::string(5000, 'x')}).size(),
            kTreeHeaderBytes);
  const auto refused = [](const TreeHeader& h, const std::string& why) {
    try {
      decode_tree_header(encode_tree_header(h));
      ADD_FAILURE() << "accepted: " << why;
    } catch (const FileWireError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({false, kMaxManifestBytes + 1, 0, 0, false, ""}, "manifest would be");
  // A hostile root's batch would make every rank map two of its size, or
  // hold a head of more records than kMaxBatchFiles.
  refused({false, 1, kMaxWindowBytes / 2 + 1, 16, false, ""}, "batches of");
  refused({false, 1, 4096, kMaxBatchFiles + 1, false, ""}, "batches of 4097 files");
  refused({false, 1, 4096, 0, false, ""}, "batches of 0 files");
  const TreeHeader edge = decode_tree_header(
      encode_tree_header({false, 1, kMaxWindowBytes / 2, kMaxBatchFiles, false, ""}));
  EXPECT_EQ(edge.batch_bytes, kMaxWindowBytes / 2);
  EXPECT_EQ(edge.batch_files, kMaxBatchFiles);
  EXPECT_NO_THROW(
      decode_tree_header(encode_tree_header({false, 1, 0, 0, false, ""})));  // no batches
  std::string bad = encode_tree_header({false, 1, 0, 0, false, ""});
  bad[7] = 2;  // a status of 2
  EXPECT_THROW(decode_tree_header(bad), FileWireError);
  bad = encode_tree_header({false, 1, 0, 0, false, ""});
  bad[39] = 2;  // a packing of 2
  EXPECT_THROW(decode_tree_header(bad), FileWireError);
  bad = encode_tree_header({false, 1, 0, 0, false, ""});
  bad[46] = 0x7f;  // an error text of 32,512 bytes, longer than the header
  EXPECT_THROW(decode_tree_header(bad), FileWireError);
}

// A batch head (files/file_batch.hpp) round-trips, and a hostile root's
// fields out of range are refused naming the file's place in the batch.
TEST(FileWire, ABatchHeadRoundTripsAndRefusesWhatIsOutOfRange) {
  BatchHead h;
  h.meta.resize(3);
  h.wire = {100, 50, 0};
  h.digests.resize(3);
  const std::vector<std::uint64_t> sizes = {100, 200, 0};
  for (size_t i = 0; i < 3; ++i) {
    h.meta[i].mode = 0640 + static_cast<std::uint32_t>(i);
    h.meta[i].mtime = {1700000000 + static_cast<std::int64_t>(i), 999'999'999};
    h.meta[i].dev = 7;
    h.meta[i].ino = 100 + i;
    h.digests[i].fill(std::byte{static_cast<unsigned char>(i + 1)});
  }
  std::vector<std::byte> buf(batch_head_bytes(3));
  encode_batch_head(h, buf.data());
  const BatchHead back = decode_batch_head(buf, sizes, true);
  ASSERT_TRUE(back.ok);
  ASSERT_EQ(back.meta.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.meta[i].mode, h.meta[i].mode);
    EXPECT_EQ(back.meta[i].mtime, h.meta[i].mtime);
    EXPECT_EQ(back.meta[i].ino, h.meta[i].ino);
    EXPECT_EQ(back.meta[i].size, sizes[i]);
    EXPECT_EQ(back.wire[i], h.wire[i]);
    EXPECT_EQ(back.digests[i], h.digests[i]);
  }
  BatchHead failed;
  failed.ok = false;
  failed.error = std::string(5000, 'x');
  std::vector<std::byte> fbuf(batch_head_bytes(2));
  encode_batch_head(failed, fbuf.data());
  const BatchHead fback = decode_batch_head(fbuf, std::vector<std::uint64_t>{1, 2}, false);
  EXPECT_FALSE(fback.ok);
  EXPECT_EQ(fback.error.size(), kFileErrorBytes);

  const auto refused = [](std::vector<std::byte> b, std::vector<std::uint64_t> of, bool packed,
                          const std::string& why) {
    try {
      decode_batch_head(b, of, packed);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const FileWireError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::vector<std::byte> bad = buf;
  bad[kBatchRecordsAt + kBatchRecordBytes + 2] = std::byte{0x10};  // file 1's mode 010xxx
  refused(bad, sizes, true, "file 1 has a mode of");
  bad = buf;
  bad[kBatchRecordsAt + 2 * kBatchRecordBytes + 4] = std::byte{0xff};  // file 2's nanoseconds
  refused(bad, sizes, true, "file 2 has a modification time of");
  bad = buf;
  bad[0] = std::byte{0};
  refused(bad, sizes, true, "not one");
  bad = buf;
  bad[11] = std::byte{2};
  refused(bad, sizes, true, "status of 2");
  refused(buf, {100, 200, 0, 1}, true, "shorter than its 4 files");
  refused(std::vector<std::byte>(batch_head_bytes(kMaxBatchFiles + 1)),
          std::vector<std::uint64_t>(kMaxBatchFiles + 1), true, "shorter than its");
  // Bytes on the wire: packed, 1 to the size (0 only when empty); unpacked,
  // the size. Anything else would make a rank read past the file's bytes or
  // expand what was never sent.
  refused(buf, sizes, false,
          "file 1 travels as 50 bytes; it stores 200 and the batch is not packed");
  refused(buf, {100, 49, 0}, true, "file 1 travels as 50 bytes; it stores 49");
  refused(buf, {100, 200, 1}, true, "file 2 travels as 0 bytes; it stores 1");
  EXPECT_NO_THROW(decode_batch_head(buf, std::vector<std::uint64_t>{100, 200, 0}, true));
}

TEST(FileWire, ChunkCountNeverWraps) {
  EXPECT_EQ(chunk_count(0, 1), 0u);
  EXPECT_EQ(chunk_count(1, 4), 1u);
  EXPECT_EQ(chunk_count(8, 4), 2u);
  EXPECT_EQ(chunk_count(std::numeric_limits<std::uint64_t>::max(), 1ull << 63), 2u);
}

TreeEntry dir(const std::string& p) {
  TreeEntry e;
  e.path = p;
  e.kind = TreeEntry::Kind::kDirectory;
  e.mode = 0755;
  return e;
}
TreeEntry file(const std::string& p, std::uint64_t size = 3) {
  TreeEntry e;
  e.path = p;
  e.mode = 0644;
  e.size = size;
  return e;
}
TreeEntry link(const std::string& p, const std::string& target) {
  TreeEntry e;
  e.path = p;
  e.kind = TreeEntry::Kind::kSymlink;
  e.mode = 0777;
  e.target = target;
  return e;
}

void expect_manifest_refused(const std::vector<TreeEntry>& entries, const char* part) {
  try {
    decode_manifest(encode_manifest(entries));
    ADD_FAILURE() << "accepted; expected a refusal naming " << part;
  } catch (const FileWireError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(FileWire, AManifestRoundTrips) {
  TreeEntry t = file("sub/x");
  t.mtime = {-1, 500'000'000};
  const std::vector<TreeEntry> tree = {dir(""), dir("sub"), t, link("sub/l", "../x"), file("y")};
  EXPECT_EQ(decode_manifest(encode_manifest(tree)), tree);
  const std::vector<TreeEntry> single = {file("")};
  EXPECT_EQ(decode_manifest(encode_manifest(single)), single);
  // Several sources: no entry for the output itself, each under its name.
  const std::vector<TreeEntry> several = {file("a.bin"), dir("set"), file("set/b")};
  EXPECT_EQ(decode_manifest(encode_manifest(several)), several);
}

// The attacks of the issue: a hostile root (or an injected stream) replacing
// ~/.bashrc through a link, or chmodding what a link points to.
TEST(FileWire, APathBelowASymlinkOrAFileIsRefused) {
  expect_manifest_refused({dir(""), link("a", "/home/u"), file("a/.bashrc")}, "\"a/.bashrc\"");
  expect_manifest_refused({dir(""), link("a", "/home/u"), dir("a/x")}, "below \"a\"");
  expect_manifest_refused({dir(""), file("a"), file("a/b")}, "below \"a\"");
  expect_manifest_refused({dir(""), file("a/b")}, "below \"a\"");  // parent not listed
  expect_manifest_refused({file(""), file("b")}, "below the output itself");
}

TEST(FileWire, ADuplicatePathIsRefused) {
  expect_manifest_refused({dir(""), link("a", "/home/u"), dir("a")}, "twice");
  expect_manifest_refused({dir(""), file("a"), file("a")}, "twice");
  expect_manifest_refused({dir(""), dir(""), file("a")}, "after other entries");
}

TEST(FileWire, PathsThatLeaveTheOutputAreRefused) {
  for (const std::string bad : {"/etc/passwd", "..", "../x", "a/../../x", "./a", "a//b", "a/"}) {
    SCOPED_TRACE(bad);
    expect_manifest_refused({dir(""), dir("a"), file(bad)}, "not a path under the output");
  }
  expect_manifest_refused({dir(""), file(std::string("a\0b", 3))}, "not a path under the output");
  expect_manifest_refused({dir(""), file(std::string(256, 'n'))}, "not a path under the output");
  expect_manifest_refused({dir(""), file(std::string(4096, 'n'))}, "path of 4096 bytes");
}

// A tree whose files are named as a copy in progress is (.X.gridbcast-partial,
// .X.gridbcast-chunks) would have the copy of X remove or overwrite the copy
// of that file: refused naming it, also as a directory on the way.
TEST(FileWire, NamesOfCopiesInProgressAreRefused) {
  for (const std::string bad :
       {".x.gridbcast-partial", "a/.x.gridbcast-chunks", ".d.gridbcast-chunks/x"}) {
    SCOPED_TRACE(bad);
    expect_manifest_refused({dir(""), dir("a"), dir(".d.gridbcast-chunks"), file(bad)},
                            "the name of a copy in progress");
  }
  expect_manifest_refused({dir(""), file(".x.gridbcast-partial")}, ".x.gridbcast-partial");
}

TEST(FileWire, FieldsOfTheWrongKindAreRefused) {
  expect_manifest_refused({link("", "/etc")}, "output itself a symbolic link");
  expect_manifest_refused({dir(""), link("l", "")}, "without a target");
  TreeEntry d = dir("d");
  d.target = "/x";
  expect_manifest_refused({dir(""), d}, "target on no link");
  d = dir("d");
  d.size = 5;
  expect_manifest_refused({dir(""), d}, "size");
  TreeEntry f = file("f");
  f.mode = 070000;
  expect_manifest_refused({dir(""), f}, "mode");
  f = file("f");
  f.mtime.nsec = 1'000'000'000;
  expect_manifest_refused({dir(""), f}, "nanoseconds");
}

TEST(FileWire, EntriesAreBoundedByTheBytesTheyTake) {
  // A count of entries the bytes cannot hold is refused before anything is
  // allocated for them (an entry takes at least 56 bytes).
  std::string m = encode_manifest({dir(""), file("a")});
  for (int i = 0; i < 8; ++i) m[static_cast<size_t>(i)] = '\x7f';
  expect_manifest_refused({}, "empty");
  try {
    decode_manifest(m);
    ADD_FAILURE();
  } catch (const FileWireError& e) {
    EXPECT_NE(std::string(e.what()).find("entries in"), std::string::npos) << e.what();
  }
  m = encode_manifest({dir(""), file("a")});
  m[7] = 3;  // three entries, two encoded
  EXPECT_THROW(decode_manifest(m), FileWireError);
  m = encode_manifest({dir(""), file("a")}) + "x";
  EXPECT_THROW(decode_manifest(m), FileWireError);
}

}  // namespace
}  // namespace gridbcast::files
