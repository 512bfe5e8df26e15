// The rings under a concurrent producer and consumer: random sizes, wrap-around, a request and
// a response ring driven like the expert data plane, and the peer dying at each step of the
// protocol. Also run in CI's TSan stage (label tsan), so this file
// depends on gtest and common/shm only (no abseil: Debian's is not built for TSan).
//
// "Dying" is what SIGKILL does to a side: its thread stops wherever it is and its heartbeat
// stands still. The survivor's PeerMonitor runs on a test-driven clock (fake_now), which the
// test moves only after the dying thread has stopped, so no timing can make a live peer look
// dead; the survivor must then notice, sleep rather than spin while it waits, and never
// consume a record the dead side had not published.
#include "common/shm/ring.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/shm/futex.h"
#include "common/shm/region.h"
#include "gtest/gtest.h"

namespace moe::shm {
namespace {

// A ring and its control block in ordinary memory (the protocol does not care who maps it).
struct TestRing {
  explicit TestRing(uint32_t capacity) : capacity(capacity), data(capacity + 64) {}
  std::byte* base() {
    auto p = reinterpret_cast<uintptr_t>(data.data());
    return reinterpret_cast<std::byte*>((p + 63) / 64 * 64);
  }
  const uint32_t capacity;
  alignas(64) RingControl control;
  std::vector<std::byte> data;
};

// Payload of record `seq`: its size and bytes follow from seq alone, so the reader checks
// every byte without being told.
uint32_t SizeOf(uint64_t seq, uint32_t max_size) {
  std::mt19937_64 rng(seq * 0x9E3779B97F4A7C15ull + 1);
  // Mostly small, sometimes large: exercises both pads and full rings.
  return (rng() % 4 == 0) ? static_cast<uint32_t>(rng() % (max_size + 1))
                          : static_cast<uint32_t>(rng() % (max_size / 8 + 1));
}
std::byte ByteOf(uint64_t seq, uint32_t i) {
  return static_cast<std::byte>((seq * 131 + i * 7 + (i >> 8)) & 0xFF);
}
void Fill(std::byte* p, uint64_t seq, uint32_t size, uint32_t from = 0, uint32_t to = ~0u) {
  for (uint32_t i = from; i < std::min(size, to); ++i) p[i] = ByteOf(seq, i);
}
bool Check(const RingRecord& r, uint64_t seq, uint32_t max_size) {
  if (r.payload_bytes != SizeOf(seq, max_size)) return false;
  for (uint32_t i = 0; i < r.payload_bytes; ++i) {
    if (r.payload[i] != ByteOf(seq, i)) return false;
  }
  return true;
}

// A clock that only the test moves.
struct FakeTime {
  std::atomic<int64_t> now{0};
  int64_t operator()() const { return now.load(std::memory_order_relaxed); }
};

constexpr int64_t kPeerTimeoutNs = 1'000'000;  // of fake time
constexpr int64_t kSliceNs = 1'000'000;        // real futex timeout between liveness checks

// Once `dying` has stopped and the survivor has gone to sleep waiting for it (its `sleeping`
// flag in the ring), moves fake time forward until the survivor notices and returns.
void RunUntilSurvivorNotices(std::thread& dying, std::thread& survivor, FakeTime& time,
                             const std::atomic<uint32_t>& sleeping,
                             std::atomic<bool>& survivor_done) {
  dying.join();
  std::mutex mu;
  std::condition_variable cv;
  while (sleeping.load() == 0 && !survivor_done.load()) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  while (!survivor_done.load()) {
    time.now.fetch_add(kPeerTimeoutNs + 1);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  survivor.join();
}

TEST(RingTest, CapacityAndRecordSizes) {
  EXPECT_TRUE(ValidRingCapacity(128));
  EXPECT_TRUE(ValidRingCapacity(uint64_t{1} << 31));
  EXPECT_FALSE(ValidRingCapacity(64));
  EXPECT_FALSE(ValidRingCapacity(3000));
  EXPECT_FALSE(ValidRingCapacity(uint64_t{1} << 32));
  EXPECT_EQ(RecordBytes(0), 64u);
  EXPECT_EQ(RecordBytes(1), 128u);
  EXPECT_EQ(RecordBytes(64), 128u);
  EXPECT_EQ(RecordBytes(65), 192u);
}

TEST(RingTest, PadsToTheEndWhenARecordWouldCrossIt) {
  TestRing ring(1024);
  RingProducer p(&ring.control, ring.base(), ring.capacity);
  RingConsumer c(&ring.control, ring.base(), ring.capacity);
  RingRecord r;
  // 3 records of 256 bytes (192 payload), then one of 384: crosses the end -> pad 256, at 0.
  for (uint64_t s = 0; s < 3; ++s) {
    std::byte* at = p.TryReserve(192);
    ASSERT_NE(at, nullptr);
    EXPECT_EQ(at - ring.base(), static_cast<ptrdiff_t>(s * 256 + 64));
    Fill(at, s, 192);
    p.Publish();
  }
  EXPECT_EQ(p.TryReserve(320), nullptr);  // 256 free at the end, the record needs 384
  ASSERT_TRUE(c.TryPeek(&r));
  c.Release();  // now 512 free: 256 at the end (pad) + 256 at the start: still not 384
  EXPECT_EQ(p.TryReserve(320), nullptr);
  ASSERT_TRUE(c.TryPeek(&r));
  c.Release();
  std::byte* at = p.TryReserve(320);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at - ring.base(), 64);
  Fill(at, 3, 320);
  p.Publish();
  EXPECT_EQ(p.stats().pads, 1u);
  // A small record fits right after it.
  at = p.TryReserve(10);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at - ring.base(), 384 + 64);
  p.Publish();
  ASSERT_TRUE(c.TryPeek(&r));
  c.Release();
  ASSERT_TRUE(c.TryPeek(&r));  // skips the pad
  EXPECT_EQ(r.payload_bytes, 320u);
  EXPECT_EQ(r.payload - ring.base(), 64);
  c.Release();
  EXPECT_EQ(c.stats().pads, 1u);
  ASSERT_TRUE(c.TryPeek(&r));
  EXPECT_EQ(r.payload_bytes, 10u);
  c.Release();
  EXPECT_FALSE(c.TryPeek(&r));
  EXPECT_EQ(p.TryReserve(1024), nullptr);  // larger than the ring
  EXPECT_EQ(p.max_payload(), 960u);
}

TEST(RingTest, ACorruptPrefixBreaksTheConsumerInsteadOfReadingOutside) {
  TestRing ring(1024);
  RingProducer p(&ring.control, ring.base(), ring.capacity);
  RingConsumer c(&ring.control, ring.base(), ring.capacity);
  ASSERT_NE(p.TryReserve(100), nullptr);
  p.Publish();
  // The peer scribbles a size larger than what it published.
  uint32_t huge = 4096;
  std::memcpy(ring.base(), &huge, sizeof(huge));
  RingRecord r;
  EXPECT_FALSE(c.TryPeek(&r));
  EXPECT_TRUE(c.broken());
  // And a tail beyond the head breaks the producer.
  TestRing other(1024);
  RingProducer p2(&other.control, other.base(), other.capacity);
  other.control.tail.store(5000);
  EXPECT_EQ(p2.TryReserve(10), nullptr);
  EXPECT_TRUE(p2.broken());
}

TEST(RingTest, ConcurrentProducerAndConsumerWithRandomSizesAndWrapAround) {
  constexpr uint64_t kRecords = 20000;
  for (int64_t spin_ns : {int64_t{0}, int64_t{20'000}}) {
    TestRing ring(4096);
    const uint32_t max_size = 1500;
    std::atomic<bool> bad{false};
    RingSideStats producer_stats, consumer_stats;
    std::thread producer([&] {
      RingProducer p(&ring.control, ring.base(), ring.capacity);
      for (uint64_t s = 0; s < kRecords; ++s) {
        const uint32_t size = SizeOf(s, max_size);
        std::byte* at;
        while ((at = p.TryReserve(size)) == nullptr) p.WaitForSpace(spin_ns, 50'000'000);
        Fill(at, s, size);
        p.Publish();
      }
      producer_stats = p.stats();
    });
    std::thread consumer([&] {
      RingConsumer c(&ring.control, ring.base(), ring.capacity);
      RingRecord r;
      for (uint64_t s = 0; s < kRecords; ++s) {
        while (!c.TryPeek(&r)) c.WaitForData(spin_ns, 50'000'000);
        if (!Check(r, s, max_size)) bad = true;
        c.Release();
      }
      consumer_stats = c.stats();
    });
    producer.join();
    consumer.join();
    EXPECT_FALSE(bad.load());
    EXPECT_EQ(producer_stats.records, kRecords);
    EXPECT_EQ(consumer_stats.records, kRecords);
    EXPECT_GT(producer_stats.pads, 100u) << "wrapped around";
    EXPECT_EQ(producer_stats.pads, consumer_stats.pads);
    EXPECT_EQ(ring.control.head.load(), ring.control.tail.load());
  }
}

// The data plane's shape: requests in one ring, answers in the other, each read and written in
// place; the "worker" releases a request only after its answer is published.
TEST(RingTest, RequestAndResponseRingsInPlace) {
  constexpr uint64_t kCalls = 5000;
  TestRing requests(8192), responses(8192);
  const uint32_t max_size = 3000;
  std::atomic<bool> bad{false};
  std::thread worker([&] {
    RingConsumer in(&requests.control, requests.base(), requests.capacity);
    RingProducer out(&responses.control, responses.base(), responses.capacity);
    RingRecord r;
    for (uint64_t s = 0; s < kCalls; ++s) {
      while (!in.TryPeek(&r)) in.WaitForData(5'000, 50'000'000);
      if (!Check(r, s, max_size)) bad = true;
      std::byte* at;
      while ((at = out.TryReserve(r.payload_bytes)) == nullptr) out.WaitForSpace(0, 50'000'000);
      for (uint32_t i = 0; i < r.payload_bytes; ++i) {
        at[i] = static_cast<std::byte>(static_cast<uint8_t>(r.payload[i]) ^ 0x5A);
      }
      out.Publish();
      in.Release();
    }
  });
  RingProducer req(&requests.control, requests.base(), requests.capacity);
  RingConsumer resp(&responses.control, responses.base(), responses.capacity);
  uint64_t answered = 0;
  RingRecord r;
  for (uint64_t s = 0; s < kCalls; ++s) {
    const uint32_t size = SizeOf(s, max_size);
    std::byte* at;
    while ((at = req.TryReserve(size)) == nullptr) {
      // Full: drain an answer if one is due (the router awaits while its requests wait),
      // else the worker is about to release its last request.
      if (answered == s) {
        req.WaitForSpace(0, 50'000'000);
        continue;
      }
      while (!resp.TryPeek(&r)) resp.WaitForData(0, 50'000'000);
      ++answered;
      resp.Release();
    }
    Fill(at, s, size);
    req.Publish();
    // Up to two calls outstanding, like the engine's two micro-batches.
    if (s % 2 == 1) {
      while (answered + 1 < s) {
        while (!resp.TryPeek(&r)) resp.WaitForData(0, 50'000'000);
        const uint64_t seq = answered++;
        bool ok = r.payload_bytes == SizeOf(seq, max_size);
        for (uint32_t i = 0; ok && i < r.payload_bytes; ++i) {
          ok = static_cast<uint8_t>(r.payload[i]) == (static_cast<uint8_t>(ByteOf(seq, i)) ^ 0x5A);
        }
        if (!ok) bad = true;
        resp.Release();
      }
    }
  }
  while (answered < kCalls) {
    while (!resp.TryPeek(&r)) resp.WaitForData(0, 50'000'000);
    ++answered;
    resp.Release();
  }
  worker.join();
  EXPECT_FALSE(bad.load());
}

// Where a producer can die: before reserving, after reserving (prefix written), half-way
// through the payload, with the payload written but unpublished, just after publishing.
enum ProducerStep { kBeforeReserve, kAfterReserve, kHalfWritten, kWrittenUnpublished, kPublished };

TEST(RingTest, AProducerDyingAtEachStepNeverExposesAHalfWrittenRecord) {
  const uint32_t max_size = 700;
  for (uint64_t die_at : {0ull, 1ull, 6ull, 23ull}) {
    for (int step = kBeforeReserve; step <= kPublished; ++step) {
      SCOPED_TRACE(::testing::Message() << "record " << die_at << " step " << step);
      TestRing ring(2048);
      PeerWord producer_word;
      FakeTime time;
      std::atomic<bool> survivor_done{false}, bad{false};
      uint64_t consumed = 0;
      RingSideStats consumer_stats;
      std::thread producer([&] {
        RingProducer p(&ring.control, ring.base(), ring.capacity);
        for (uint64_t s = 0;; ++s) {
          producer_word.heartbeat.fetch_add(1, std::memory_order_relaxed);
          const uint32_t size = SizeOf(s, max_size);
          if (s == die_at && step == kBeforeReserve) return;
          std::byte* at;
          while ((at = p.TryReserve(size)) == nullptr) p.WaitForSpace(0, kSliceNs);
          if (s == die_at && step == kAfterReserve) return;
          Fill(at, s, size, 0, size / 2);
          if (s == die_at && step == kHalfWritten) return;
          Fill(at, s, size, size / 2);
          if (s == die_at && step == kWrittenUnpublished) return;
          p.Publish();
          if (s == die_at) return;  // kPublished
        }
      });
      std::thread consumer([&] {
        RingConsumer c(&ring.control, ring.base(), ring.capacity);
        PeerMonitor monitor(&producer_word, kPeerTimeoutNs, time());
        RingRecord r;
        while (true) {
          if (c.TryPeek(&r)) {
            if (!Check(r, consumed, max_size)) bad = true;
            ++consumed;
            c.Release();
            continue;
          }
          if (!monitor.Alive(time())) break;
          c.WaitForData(2'000, kSliceNs);
        }
        consumer_stats = c.stats();
        survivor_done = true;
      });
      RunUntilSurvivorNotices(producer, consumer, time, ring.control.consumer_sleeping,
                              survivor_done);
      EXPECT_FALSE(bad.load());
      EXPECT_EQ(consumed, die_at + (step == kPublished ? 1 : 0));
      EXPECT_GT(consumer_stats.futex_waits, 0u) << "the survivor slept while it waited";
    }
  }
}

// Where a consumer can die: holding a record it has not read, half-way through reading it,
// having read it but not released it, just after releasing it.
enum ConsumerStep { kPeeked, kHalfRead, kReadUnreleased, kReleased };

TEST(RingTest, AConsumerDyingAtEachStepLeavesTheProducerAsleepAndItsRecordIntact) {
  const uint32_t max_size = 700;
  for (uint64_t die_at : {0ull, 2ull, 9ull}) {
    for (int step = kPeeked; step <= kReleased; ++step) {
      SCOPED_TRACE(::testing::Message() << "record " << die_at << " step " << step);
      TestRing ring(2048);
      PeerWord consumer_word;
      FakeTime time;
      std::atomic<bool> survivor_done{false};
      uint64_t produced = 0;
      RingSideStats producer_stats;
      RingRecord held;                    // the record the consumer died holding (unreleased steps)
      std::atomic<uint64_t> read_sum{0};  // what it read (so the reads are not optimised away)
      std::thread consumer([&] {
        RingConsumer c(&ring.control, ring.base(), ring.capacity);
        for (uint64_t s = 0;; ++s) {
          consumer_word.heartbeat.fetch_add(1, std::memory_order_relaxed);
          RingRecord r;
          while (!c.TryPeek(&r)) c.WaitForData(0, kSliceNs);
          if (s == die_at) held = r;
          if (s == die_at && step == kPeeked) return;
          uint32_t sum = 0;
          for (uint32_t i = 0; i < r.payload_bytes / 2; ++i)
            sum += static_cast<uint8_t>(r.payload[i]);
          read_sum += sum;
          if (s == die_at && step == kHalfRead) return;
          for (uint32_t i = r.payload_bytes / 2; i < r.payload_bytes; ++i) {
            sum += static_cast<uint8_t>(r.payload[i]);
          }
          read_sum += sum;
          if (s == die_at && step == kReadUnreleased) return;
          c.Release();
          if (s == die_at) return;  // kReleased
        }
      });
      std::thread producer([&] {
        RingProducer p(&ring.control, ring.base(), ring.capacity);
        PeerMonitor monitor(&consumer_word, kPeerTimeoutNs, time());
        for (uint64_t s = 0;; ++s) {
          const uint32_t size = SizeOf(s, max_size);
          std::byte* at;
          bool alive = true;
          while ((at = p.TryReserve(size)) == nullptr) {
            if (!(alive = monitor.Alive(time()))) break;
            p.WaitForSpace(2'000, kSliceNs);
          }
          if (!alive) break;
          Fill(at, s, size);
          p.Publish();
          ++produced;
        }
        producer_stats = p.stats();
        survivor_done = true;
      });
      RunUntilSurvivorNotices(consumer, producer, time, ring.control.producer_sleeping,
                              survivor_done);
      EXPECT_GT(producer_stats.futex_waits, 0u) << "the survivor slept while it waited";
      // Never more in the ring than it holds; what the consumer held is untouched.
      const uint32_t used = ring.control.head.load() - ring.control.tail.load();
      EXPECT_LE(used, ring.capacity);
      EXPECT_GT(produced, die_at);
      if (step != kReleased) {
        EXPECT_TRUE(Check(held, die_at, max_size)) << "the producer overwrote a held record";
      }
    }
  }
}

TEST(PeerMonitorTest, ClosedOrSilentPeersAreGoneAndStayGone) {
  PeerWord w;
  PeerMonitor m(&w, 100, 0);
  EXPECT_TRUE(m.Alive(50));
  EXPECT_TRUE(m.Alive(100));
  w.heartbeat.fetch_add(1);
  EXPECT_TRUE(m.Alive(150));   // moved: counts from 150
  EXPECT_TRUE(m.Alive(250));   // 100 since the last move
  EXPECT_FALSE(m.Alive(251));  // silent for longer than the timeout
  w.heartbeat.fetch_add(1);
  EXPECT_FALSE(m.Alive(252));  // once gone, gone
  PeerWord closed;
  PeerMonitor m2(&closed, 1'000'000, 0);
  EXPECT_TRUE(m2.Alive(1));
  closed.state.store(kPeerClosed);
  EXPECT_FALSE(m2.Alive(2));
}

TEST(HeartbeatTest, BeatsEveryAddedWordUntilRemoved) {
  Heartbeat beat(100'000);  // 0.1 ms
  PeerWord a, b;
  beat.Add(&a);
  beat.Add(&b);
  const uint32_t a0 = a.heartbeat.load();
  // Wait (on the heartbeat itself, not a sleep) until both moved.
  while (a.heartbeat.load() == a0 || b.heartbeat.load() < 2) CpuRelax();
  beat.Remove(&a);
  const uint32_t stopped = a.heartbeat.load();
  const uint32_t b1 = b.heartbeat.load();
  while (b.heartbeat.load() < b1 + 3) CpuRelax();
  EXPECT_EQ(a.heartbeat.load(), stopped);
}

TEST(RegionTest, InitAndValidate) {
  const uint32_t ring = 4096;
  std::vector<std::byte> mem(RegionBytes(ring) + 64);
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
  const uint64_t token[2] = {1, 2};
  RegionView v = InitRegion(base, ring, token);
  EXPECT_EQ(v.request_data, static_cast<std::byte*>(base) + kRegionHeaderBytes);
  EXPECT_EQ(v.response_data, v.request_data + ring);
  RegionView w;
  ASSERT_TRUE(ValidateRegion(base, RegionBytes(ring), &w));
  EXPECT_EQ(w.ring_bytes, ring);
  EXPECT_EQ(w.header->worker_token[1].load(), 2u);
  EXPECT_FALSE(ValidateRegion(base, RegionBytes(ring) - 64, &w));  // mapped size differs
  v.header->version = 99;
  EXPECT_FALSE(ValidateRegion(base, RegionBytes(ring), &w));
}

}  // namespace
}  // namespace moe::shm
