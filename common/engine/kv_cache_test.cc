#include "common/engine/kv_cache.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;

KvCacheOptions SmallOptions() {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  o.block_size = 3;
  o.budget_bytes = 5 * o.BytesPerBlock() + 7;  // rounds down to 5 blocks
  return o;
}

TEST(KvCacheTest, SizesFromTheByteBudget) {
  ASSERT_OK_AND_ASSIGN(auto kv, KvCache::Create(SmallOptions()));
  EXPECT_EQ(kv->num_blocks(), 5);
  EXPECT_EQ(kv->floats_per_block(), 3 * 2 * 4);
  EXPECT_EQ(kv->total_bytes(), 5 * SmallOptions().BytesPerBlock());
  EXPECT_EQ(kv->layout().block_size, 3);
  EXPECT_EQ(kv->layout().num_kv_heads, 2);
}

// The VmFlags line of the mapping of /proc/self/smaps that holds `p` ("" when none does).
std::string VmFlagsOf(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(KvCacheTest, BuffersAreZeroedOnHugePageBoundariesAndAdvisedHuge) {
  KvCacheOptions o = SmallOptions();
  o.budget_bytes = 8ll << 20;
  ASSERT_OK_AND_ASSIGN(auto kv, KvCache::Create(o));
  for (int64_t l = 0; l < kv->num_layers(); ++l) {
    for (float* p : {kv->k(l), kv->v(l)}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 << 20), 0u);
      const int64_t n = kv->num_blocks() * kv->floats_per_block();
      EXPECT_EQ(p[0], 0.0f);
      EXPECT_EQ(p[n - 1], 0.0f);
      p[n - 1] = 1.0f;  // the whole range is writable
    }
  }
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here: " << mode;
  }
  EXPECT_NE(VmFlagsOf(kv->k(0)).find(" hg"), std::string::npos) << VmFlagsOf(kv->k(0));
}

TEST(KvCacheTest, RejectsBudgetBelowOneBlockAndBadDims) {
  KvCacheOptions o = SmallOptions();
  o.budget_bytes = o.BytesPerBlock() - 1;
  EXPECT_THAT(KvCache::Create(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = SmallOptions();
  o.head_dim = 0;
  EXPECT_THAT(KvCache::Create(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KvCacheTest, CopyBlockCopiesEveryLayerKAndVAndNothingElse) {
  ASSERT_OK_AND_ASSIGN(auto kv, KvCache::Create(SmallOptions()));
  for (int64_t l = 0; l < 2; ++l) {
    for (bool value : {false, true}) {
      auto src = kv->BlockForTesting(l, 1, value);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(100 * l + i + value);
    }
  }
  ASSERT_THAT(kv->CopyBlock(1, 3), IsOk());
  for (int64_t l = 0; l < 2; ++l) {
    for (bool value : {false, true}) {
      auto dst = kv->BlockForTesting(l, 3, value);
      for (size_t i = 0; i < dst.size(); ++i) {
        EXPECT_EQ(dst[i], static_cast<float>(100 * l + i + value));
      }
      for (float f : kv->BlockForTesting(l, 2, value)) EXPECT_EQ(f, 0.0f);
      for (float f : kv->BlockForTesting(l, 4, value)) EXPECT_EQ(f, 0.0f);
    }
  }
  EXPECT_THAT(kv->CopyBlock(1, 5), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(kv->CopyBlock(-1, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::engine
