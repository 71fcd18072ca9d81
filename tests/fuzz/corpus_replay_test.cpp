// Replays the kept fuzz corpus through both targets in every ordinary build, so
// inputs that once crashed stay fixed without needing clang.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

TEST(FuzzCorpus, EveryKeptInputIsHandled) {
  size_t files = 0;
  {
    const auto path =
        std::filesystem::path(GRIDBCAST_SOURCE_DIR) / "tests/fuzz/corpus" / GRIDBCAST_FUZZ_TARGET;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
      EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0) << entry.path();
      ++files;
    }
  }
  EXPECT_GE(files, 5u);
}

}  // namespace
