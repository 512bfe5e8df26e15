#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/check.h"
#include "common/base/file.h"
#include "common/base/hash.h"
#include "common/base/ids.h"
#include "common/base/listening_line.h"
#include "common/base/memory.h"
#include "common/base/secret.h"
#include "common/base/status_macros.h"
#include "common/base/thread.h"
#include "common/testing/fake_clock.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<int> ParsePositive(int v) {
  if (v <= 0) return absl::InvalidArgumentError("not positive: " + std::to_string(v));
  return v;
}

absl::StatusOr<int> DoubleIt(int v) {
  ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

absl::Status Validate(int v) {
  RETURN_IF_ERROR(ParsePositive(v));
  RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

// Freed buffers come back without new page faults (with glibc's defaults the heap top is
// trimmed past 128 KiB and the second round faults every page in again).
TEST(MemoryTest, FreedBuffersAreReusedWithoutNewPageFaults) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc malloc";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc malloc";
#endif
#endif
  RetainFreedMemory();
  auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  };
  long second_round = 0;
  for (int round = 0; round < 2; ++round) {
    const long before = faults();
    std::vector<std::string> blocks;
    for (int i = 0; i < 128; ++i) blocks.emplace_back(64 << 10, static_cast<char>('a' + i % 26));
    if (round == 1) second_round = faults() - before;
  }
  EXPECT_LT(second_round, 100) << "128 x 64 KiB = 2048 pages";
}

TEST(ThreadTest, NameAndNiceApplyToTheCallingThreadOnly) {
  const int main_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  std::string comm;
  int nice = -100;
  std::thread t([&] {
    BecomeBackgroundThread("moe-thread-test-long-name");  // SetCurrentThread{Name,Nice}
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::getline(in, comm);
    nice = getpriority(PRIO_PROCESS, tid);
  });
  t.join();
  EXPECT_EQ(comm, "moe-thread-test");  // the first 15 bytes
  EXPECT_EQ(nice, kBackgroundNice);
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))), main_nice);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesValueAndError) {
  EXPECT_THAT(DoubleIt(21), IsOkAndHolds(42));
  EXPECT_THAT(DoubleIt(-1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstError) {
  EXPECT_THAT(Validate(3), IsOk());
  EXPECT_THAT(Validate(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMatchersTest, MatchersRejectTheWrongThing) {
  EXPECT_THAT(absl::NotFoundError("x"), ::testing::Not(IsOk()));
  EXPECT_THAT(absl::NotFoundError("x"), ::testing::Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(absl::StatusOr<int>(5), ::testing::Not(IsOkAndHolds(6)));
}

TEST(CheckTest, CheckAbortsWithConditionText) {
  EXPECT_DEATH(MOE_CHECK(1 + 1 == 3), "CHECK failed: 1 \\+ 1 == 3");
  EXPECT_DEATH(MOE_CHECK_OK(absl::InternalError("boom")), "boom");
}

TEST(FakeClockTest, AdvancesOnlyWhenTold) {
  testing::FakeClock clock;
  absl::Time t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now() - t0, absl::Seconds(3));
  clock.SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(clock.Now() - t0, absl::Milliseconds(3005));
}

TEST(StrongIdTest, ComparesAndHashesByValue) {
  SeqId a(1), b(2), c(1);
  EXPECT_LT(a, b);
  EXPECT_EQ(a, c);
  std::unordered_set<SeqId> set{a, b, c};
  EXPECT_EQ(set.size(), 2u);
  using OtherId = StrongId<struct OtherIdTag, uint64_t>;  // another kind, same representation
  static_assert(!std::is_convertible_v<OtherId, SeqId>);
}

TEST(HashTest, SplitMix64IsTheReferenceSequence) {
  // splitmix64 seeded with 0 (Steele, Lea, Flood 2014; Vigna's reference C code): first outputs.
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(SplitMix64(kGoldenGamma), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(SplitMix64(2 * kGoldenGamma), 0x06c45d188009454full);
  EXPECT_EQ(Mix64(0), 0u);  // the finaliser alone fixes zero
  static_assert(SplitMix64(1) != SplitMix64(2));
}

TEST(FileTest, ReadFileReturnsTheBytesOrNamesThePath) {
  const std::string dir = testing::MakeTempDir();
  const std::string path = dir + "/bytes.bin";
  const std::string bytes("a\0b\r\nc", 6);
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(bytes));
  EXPECT_THAT(ReadFile(dir + "/missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir + "/missing")));
  EXPECT_THAT(ReadFile(dir), StatusIs(absl::StatusCode::kNotFound, HasSubstr("directory")));
}

TEST(ListeningLineTest, HasOnlyThePortsTheProcessHas) {
  EXPECT_EQ(ListeningLine({.grpc = 5001, .metrics = 9100}),
            R"({"event":"listening","grpc":5001,"metrics":9100})");
  EXPECT_EQ(ListeningLine({.grpc = 1, .http = 2, .metrics = 3}),
            R"({"event":"listening","grpc":1,"http":2,"metrics":3})");
  EXPECT_EQ(ListeningLine({}), R"({"event":"listening"})");
}

TEST(FreePortTest, ReturnsUsablePortAndTempDir) {
  int port = testing::PickFreePort();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  std::string dir = testing::MakeTempDir();
  EXPECT_THAT(dir, HasSubstr("moe_test."));
}

}  // namespace
}  // namespace moe::common

namespace moe::common {
namespace {

TEST(SecretTest, DigestIsSha256AndRoundTripsThroughItsTextForm) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  const SecretDigest abc = DigestOf("abc");
  EXPECT_EQ(FormatDigest(abc),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  absl::StatusOr<SecretDigest> parsed = ParseDigest(FormatDigest(abc));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(DigestEquals(*parsed, abc));
  EXPECT_FALSE(DigestEquals(DigestOf("abd"), abc));
  absl::StatusOr<SecretDigest> upper =
      ParseDigest("sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD");
  ASSERT_TRUE(upper.ok());
  EXPECT_TRUE(DigestEquals(*upper, abc));
}

TEST(SecretTest, ParseRejectsPlaintextWithoutEchoingIt) {
  for (std::string_view bad :
       {"sk-my-secret-key", "sha256:abc",
        "sha256:", "sha256:zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}) {
    absl::StatusOr<SecretDigest> d = ParseDigest(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message().find("secret"), std::string_view::npos);
  }
}

}  // namespace
}  // namespace moe::common
