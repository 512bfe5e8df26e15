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

}  // namespace
}  // namespace moe::kernels
