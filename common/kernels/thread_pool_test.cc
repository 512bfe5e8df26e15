#include "common/kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnceInGrainMultiples) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 7, 16, 100, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          ranges.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain;
        EXPECT_LE(ranges.size(), static_cast<size_t>(threads));
        for (auto [b, e] : ranges) {
          EXPECT_EQ(b % grain, 0);
          if (e != n) {
            EXPECT_EQ((e - b) % grain, 0);
          }
        }
      }
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id()));
}

TEST(ThreadPoolTest, ManyBackToBackCallsSeeAllWritesOfThePrevious) {
  ThreadPool pool(3);
  std::vector<int64_t> data(300, 0);
  for (int iter = 0; iter < 2000; ++iter) {
    pool.ParallelFor(300, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] += 1;
    });
  }
  for (int64_t v : data) ASSERT_EQ(v, 2000);
}

TEST(ThreadPoolTest, WakesAfterWorkersSleep) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  for (int round = 0; round < 3; ++round) {
    // Long enough for the worker to stop spinning and sleep on the futex.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.ParallelFor(2, 1, [&](int64_t b, int64_t e) { count.fetch_add(static_cast<int>(e - b)); });
  }
  EXPECT_EQ(count.load(), 6);
}

TEST(ThreadPoolTest, DynamicCoversRangeExactlyOnceInGrainChunks) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 16, 100, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        pool.ParallelForDynamic(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_EQ(b % grain, 0);
          EXPECT_EQ(e, std::min(n, b + grain));
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          calls.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain;
        EXPECT_EQ(calls.load(), (n + grain - 1) / grain);
      }
    }
  }
}

TEST(ThreadPoolTest, DynamicAndStaticJobsBackToBack) {
  // Mixed job kinds in a tight loop: every job sees all writes of the previous one, none runs
  // twice, and workers that miss a dynamic job entirely never disturb the next.
  ThreadPool pool(3);
  std::vector<int64_t> data(300, 0);
  for (int iter = 0; iter < 3000; ++iter) {
    auto add = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] += 1;
    };
    if (iter % 3 == 0) {
      pool.ParallelFor(300, 8, add);
    } else {
      pool.ParallelForDynamic(300, 1 + iter % 37, add);
    }
  }
  for (int64_t v : data) ASSERT_EQ(v, 3000);
}

TEST(ThreadPoolTest, DynamicWakesSleepingWorkers) {
  // Two chunks, and the first one taken does not return until a second thread has entered the
  // other: the job can only finish if the sleeping worker wakes up and takes part (otherwise the
  // wait below times out and the test fails). Which thread takes which chunk is unspecified.
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the worker fall asleep
    std::mutex mu;
    std::condition_variable cv;
    std::set<std::thread::id> ids;
    bool timed_out = false;
    pool.ParallelForDynamic(2, 1, [&](int64_t, int64_t) {
      std::unique_lock<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      cv.notify_all();
      if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return ids.size() == 2; })) {
        timed_out = true;
      }
    });
    EXPECT_FALSE(timed_out) << "round " << round;
    EXPECT_EQ(ids.size(), 2u) << "round " << round;
  }
}

// Polls `done` every millisecond for at most 30 s (a liveness bound, not a speed one).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 30000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(ThreadPoolTest, ParkSendsSpinningWorkersToSleepUntilTheNextJob) {
  // A spin of INT_MAX pauses lasts seconds to minutes: without Park the workers would still be
  // spinning when Eventually gives up, so the first expectation fails if Park does nothing.
  ThreadPool pool(3, /*spin_iterations=*/INT_MAX);
  std::vector<int64_t> data(300, 0);
  auto add = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[i] += 1;
  };
  for (int round = 0; round < 3; ++round) {
    if (round % 2 == 0) {
      pool.ParallelFor(300, 8, add);
    } else {
      pool.ParallelForDynamic(300, 8, add);
    }
    pool.Park();
    EXPECT_TRUE(Eventually([&] { return pool.sleeping_workers() == 2; })) << "round " << round;
  }
  // The next job wakes them, and after it they spin again (the park was for one idle period):
  // a static job returns only once every worker ran its range, i.e. was awake.
  pool.ParallelFor(300, 8, add);
  EXPECT_EQ(pool.sleeping_workers(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(pool.sleeping_workers(), 0) << "still spinning: the park was not sticky";
  for (int64_t v : data) ASSERT_EQ(v, 4);
}

TEST(ThreadPoolTest, ParkIsHarmlessAnywhere) {
  // Before any job, twice in a row, on a pool without workers, between back-to-back jobs of
  // both kinds: every job still covers its range exactly once.
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    pool.Park();
    pool.Park();
    std::vector<int64_t> data(100, 0);
    for (int iter = 0; iter < 500; ++iter) {
      auto add = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) data[i] += 1;
      };
      if (iter % 2 == 0) {
        pool.ParallelFor(100, 4, add);
      } else {
        pool.ParallelForDynamic(100, 1 + iter % 7, add);
      }
      if (iter % 3 != 0) pool.Park();
    }
    for (int64_t v : data) ASSERT_EQ(v, 500) << threads;
  }
}

}  // namespace
}  // namespace moe::kernels
