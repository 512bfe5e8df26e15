#include "common/kernels/bandwidth.h"

#include "common/kernels/thread_pool.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

TEST(BandwidthTest, MeasuresAPlausibleRate) {
  ThreadPool pool(2);
  // Small buffer to keep the test fast: the figure is a cache-assisted rate, but it must still be
  // a positive, finite bytes-per-second number in a plausible range (0.1 GB/s .. 10 TB/s).
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const double bw = MeasureStreamReadBandwidth(p, int64_t{16} << 20);
    EXPECT_GT(bw, 1e8);
    EXPECT_LT(bw, 1e13);
  }
}

// Every size asked for gets its own figure, in order (sizes not a multiple of the 256 KiB chunk
// are rounded down; the figure is still that buffer's).
TEST(BandwidthTest, OneFigurePerSizeAndTheDefaultSizesExceedCaches) {
  ThreadPool pool(2);
  const std::vector<int64_t> sizes = {int64_t{4} << 20, (int64_t{8} << 20) + 12345};
  const std::vector<ReadBandwidth> r = MeasureReadBandwidth(&pool, sizes);
  ASSERT_EQ(r.size(), 2u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].bytes, sizes[i]);
    EXPECT_GT(r[i].bytes_per_s, 1e8);
    EXPECT_LT(r[i].bytes_per_s, 1e13);
  }
  for (int64_t s : DefaultReadProbeSizes()) EXPECT_GE(s, int64_t{512} << 20);
}

}  // namespace
}  // namespace moe::kernels
