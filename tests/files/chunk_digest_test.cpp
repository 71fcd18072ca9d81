// job/chunk_digest.cpp: chunk boundaries, SHA-256 against known values, and a
// root digest that changes with any byte of any chunk.
#include "files/chunk_digest.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gridbcast::files {
namespace {

const std::byte* bytes_of(const std::string& s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

TEST(ChunkDigest, Sha256MatchesKnownValues) {
  EXPECT_EQ(to_hex(sha256(nullptr, 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(to_hex(sha256(bytes_of(abc), 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ChunkDigest, LayoutCutsTheLastChunkShort) {
  const ChunkLayout l{10, 4};
  EXPECT_EQ(l.count(), 3u);
  EXPECT_EQ(l.offset(2), 8u);
  EXPECT_EQ(l.length(0), 4u);
  EXPECT_EQ(l.length(2), 2u);
  EXPECT_EQ(l.length(3), 0u);
  EXPECT_EQ((ChunkLayout{0, 4}.count()), 0u);
  EXPECT_EQ((ChunkLayout{8, 4}.count()), 2u);
}

TEST(ChunkDigest, RootDigestIsTheHashOfTheChunkDigestsInOrder) {
  const std::string a = "first chunk", b = "second chunk";
  const Digest da = sha256(bytes_of(a), a.size()), db = sha256(bytes_of(b), b.size());
  std::string cat(reinterpret_cast<const char*>(da.data()), 32);
  cat.append(reinterpret_cast<const char*>(db.data()), 32);
  EXPECT_EQ(root_digest({da, db}), sha256(bytes_of(cat), cat.size()));
  EXPECT_NE(root_digest({da, db}), root_digest({db, da}));
  EXPECT_EQ(to_hex(root_digest({})), to_hex(sha256(nullptr, 0)));
}

}  // namespace
}  // namespace gridbcast::files
