// The CUDA kernels against the CPU reference (kernels/reference/) under the tolerances that
// cuda_kernels.h states, and bitwise batch invariance on the device. Without a device (this
// project's CI) every device test skips; the argument checks, which run before any CUDA call,
// are tested everywhere.
#include "common/kernels/cuda/cuda_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "common/tensor/dtype.h"
#include "gtest/gtest.h"

namespace moe::kernels::cuda {
namespace {

using kernels::testing::RandomFloats;

// ---- without a device --------------------------------------------------------------------------

TEST(CudaKernelsNoDeviceTest, DeviceCountExplainsZero) {
  std::string why;
  const int n = DeviceCount(&why);
  if (n > 0) GTEST_SKIP() << "a device is present: " << DeviceDescription();
  EXPECT_FALSE(why.empty());
  EXPECT_NE(DeviceDescription().find("no CUDA device"), std::string::npos);
}

TEST(CudaKernelsNoDeviceTest, LaunchersRejectBadShapesBeforeTouchingTheDevice) {
  GroupedFfnParams p{.hidden = 24, .inter = 32, .num_groups = 1, .total_rows = 1};
  EXPECT_EQ(LaunchGroupedGateUp(p, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  p.hidden = 32;  // now the null weights are the error
  EXPECT_EQ(LaunchGroupedDown(p, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRope(nullptr, 1, 1, 64, 63, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchTopKGating(nullptr, 1, 8, 33, true, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRmsNorm(nullptr, 1, 0, nullptr, 1e-6f, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  PagedAttentionParams a{.num_blocks = 1,
                         .block_size = 16,
                         .num_kv_heads = 2,
                         .head_dim = 48,
                         .num_heads = 4,
                         .max_blocks_per_seq = 1};
  EXPECT_EQ(LaunchPagedAttention(a, nullptr, 1, nullptr, nullptr, 1.0f, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Empty launches are no-ops: they succeed without a device.
  EXPECT_TRUE(LaunchCombine(nullptr, nullptr, nullptr, 0, 2, 64, nullptr, nullptr).ok());
}

TEST(CudaKernelsNoDeviceTest, RopeInvFreqIsTheCpuKernelsTable) {
  const std::vector<float> inv = RopeInvFreq(1e4f, 64);
  ASSERT_EQ(inv.size(), 32u);
  for (size_t j = 0; j < inv.size(); ++j) {
    EXPECT_EQ(inv[j], 1.0f / std::pow(1e4f, static_cast<float>(2 * j) / 64.0f)) << j;
  }
}

TEST(CudaKernelsNoDeviceTest, AllocationWithoutDeviceIsResourceExhausted) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a device is present";
  const absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(1024);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
}

// ---- on a device -------------------------------------------------------------------------------

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }

  template <typename T>
  DeviceBuffer Upload(const std::vector<T>& host) {
    absl::StatusOr<DeviceBuffer> b =
        DeviceBuffer::Allocate(std::max<size_t>(1, host.size() * sizeof(T)));
    EXPECT_TRUE(b.ok()) << b.status();
    if (!host.empty()) {
      EXPECT_TRUE(CopyToDevice(b->data(), host.data(), host.size() * sizeof(T)).ok());
    }
    return std::move(*b);
  }
  DeviceBuffer Zeros(size_t bytes) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(std::max<size_t>(1, bytes));
    EXPECT_TRUE(b.ok()) << b.status();
    return std::move(*b);
  }
  template <typename T>
  std::vector<T> Download(const DeviceBuffer& b, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(Synchronize(nullptr).ok());
    if (n > 0) {
      EXPECT_TRUE(CopyToHost(host.data(), b.data(), n * sizeof(T)).ok());
    }
    return host;
  }
};

double Nmse(const float* got, const float* want, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return ref == 0 ? err : err / ref;
}

// Experts of one layer as bf16 slot-major arrays, plus their views for the CPU reference.
struct ExpertSet {
  int64_t hidden, inter, num_slots;
  std::vector<uint16_t> gate, up, down;  // [slots, inter, hidden], same, [slots, hidden, inter]
  WeightView view(const std::vector<uint16_t>& w, int64_t slot, int64_t rows, int64_t cols) const {
    return WeightView{w.data() + slot * rows * cols, common::DType::kBF16, rows, cols};
  }
};

ExpertSet MakeExperts(std::mt19937& rng, int64_t hidden, int64_t inter, int64_t slots) {
  ExpertSet s{hidden, inter, slots, {}, {}, {}};
  auto fill = [&](std::vector<uint16_t>& w, int64_t n, float scale) {
    for (float f : RandomFloats(rng, n, -scale, scale)) w.push_back(common::F32ToBf16(f));
  };
  fill(s.gate, slots * inter * hidden, 1.0f / std::sqrt(float(hidden)));
  fill(s.up, slots * inter * hidden, 1.0f / std::sqrt(float(hidden)));
  fill(s.down, slots * hidden * inter, 1.0f / std::sqrt(float(inter)));
  return s;
}

// The grouped FFN of `rows` packed by group, on the device.
struct FfnRun {
  std::vector<float> y;
};

class GroupedFfnTest : public CudaKernelsTest {
 protected:
  std::vector<float> Run(const ExpertSet& e, const std::vector<int32_t>& offsets,
                         const std::vector<int32_t>& slots, const std::vector<float>& x) {
    const int64_t total = offsets.back();
    DeviceBuffer d_gate = Upload(e.gate), d_up = Upload(e.up), d_down = Upload(e.down);
    DeviceBuffer d_off = Upload(offsets), d_slot = Upload(slots), d_x = Upload(x);
    DeviceBuffer d_act = Zeros(total * e.inter * 4), d_y = Zeros(total * e.hidden * 4);
    const GroupedFfnParams p{.hidden = e.hidden,
                             .inter = e.inter,
                             .num_groups = static_cast<int32_t>(slots.size()),
                             .total_rows = total,
                             .offsets = d_off.as<int32_t>(),
                             .group_slot = d_slot.as<int32_t>(),
                             .gate = d_gate.as<uint16_t>(),
                             .up = d_up.as<uint16_t>(),
                             .down = d_down.as<uint16_t>()};
    EXPECT_TRUE(
        LaunchGroupedExpertFfn(p, d_x.as<float>(), d_act.as<float>(), d_y.as<float>(), nullptr)
            .ok());
    return Download<float>(d_y, total * e.hidden);
  }
};

TEST_F(GroupedFfnTest, MatchesCpuOracleWithinNmse) {
  std::mt19937 rng(7);
  // hidden 80: a k tail of 16 past the 32-wide k step; inter 96: a partial 64-column tile.
  for (auto [hidden, inter] : {std::pair<int64_t, int64_t>{128, 96}, {80, 176}}) {
    const ExpertSet e = MakeExperts(rng, hidden, inter, 4);
    const std::vector<int32_t> offsets = {0, 1, 18, 18, 23};  // 1, 17, 0 and 5 rows
    const std::vector<int32_t> slots = {2, 0, 3, 1};
    const std::vector<float> x = RandomFloats(rng, offsets.back() * hidden);
    const std::vector<float> y = Run(e, offsets, slots, x);
    for (size_t g = 0; g < slots.size(); ++g) {
      const int64_t m = offsets[g + 1] - offsets[g];
      if (m == 0) continue;
      const float* xg = x.data() + offsets[g] * hidden;
      std::vector<float> gate(m * inter), up(m * inter), want(m * hidden);
      reference::MatMul(xg, m, e.view(e.gate, slots[g], inter, hidden), gate.data());
      reference::MatMul(xg, m, e.view(e.up, slots[g], inter, hidden), up.data());
      reference::SiluMul(gate.data(), up.data(), m * inter);
      reference::MatMul(gate.data(), m, e.view(e.down, slots[g], hidden, inter), want.data());
      EXPECT_LE(Nmse(y.data() + offsets[g] * hidden, want.data(), m * hidden), 1e-4)
          << "hidden " << hidden << " group " << g;
    }
  }
}

TEST_F(GroupedFfnTest, RowIsBitwiseIndependentOfItsBatch) {
  std::mt19937 rng(11);
  const ExpertSet e = MakeExperts(rng, 128, 96, 3);
  const std::vector<float> row = RandomFloats(rng, 128);
  const std::vector<float> alone = Run(e, {0, 1}, {1}, row);
  // The same row at positions 0, 5, 16 and 36 of a 37-row group, with other groups around it.
  for (int pos : {0, 5, 16, 36}) {
    std::vector<float> x = RandomFloats(rng, (3 + 37 + 9) * 128);
    std::copy(row.begin(), row.end(), x.begin() + (3 + pos) * 128);
    const std::vector<float> y = Run(e, {0, 3, 40, 49}, {0, 1, 2}, x);
    EXPECT_EQ(std::memcmp(y.data() + (3 + pos) * 128, alone.data(), 128 * sizeof(float)), 0)
        << "position " << pos;
  }
}

TEST_F(CudaKernelsTest, CombineIsTheCpuEnginesOrderBitForBit) {
  std::mt19937 rng(3);
  const int64_t m = 9, k = 2, hidden = 64, rows = 20;
  const std::vector<float> expert_rows = RandomFloats(rng, rows * hidden);
  std::vector<int32_t> idx(m * k);
  for (auto& i : idx) i = static_cast<int32_t>(rng() % rows);
  const std::vector<float> w = RandomFloats(rng, m * k, 0.0f, 1.0f);
  DeviceBuffer d_rows = Upload(expert_rows), d_idx = Upload(idx), d_w = Upload(w);
  DeviceBuffer d_out = Zeros(m * hidden * 4);
  ASSERT_TRUE(LaunchCombine(d_rows.as<float>(), d_idx.as<int32_t>(), d_w.as<float>(), m, k, hidden,
                            d_out.as<float>(), nullptr)
                  .ok());
  const std::vector<float> got = Download<float>(d_out, m * hidden);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t d = 0; d < hidden; ++d) {
      volatile float acc = w[t * k] * expert_rows[idx[t * k] * hidden + d];
      for (int64_t j = 1; j < k; ++j) {
        volatile float prod = w[t * k + j] * expert_rows[idx[t * k + j] * hidden + d];
        acc = acc + prod;
      }
      ASSERT_EQ(got[t * hidden + d], acc) << t << "," << d;
    }
  }
}

TEST_F(CudaKernelsTest, RmsNormMatchesReferenceAndIsBatchInvariant) {
  std::mt19937 rng(5);
  const int64_t m = 33, d = 1000;
  const std::vector<float> x = RandomFloats(rng, m * d, -3.0f, 3.0f);
  const std::vector<float> w = RandomFloats(rng, d, 0.5f, 1.5f);
  DeviceBuffer d_x = Upload(x), d_w = Upload(w), d_out = Zeros(m * d * 4);
  ASSERT_TRUE(
      LaunchRmsNorm(d_x.as<float>(), m, d, d_w.as<float>(), 1e-6f, d_out.as<float>(), nullptr)
          .ok());
  const std::vector<float> got = Download<float>(d_out, m * d);
  std::vector<float> want(m * d);
  reference::RmsNorm(x.data(), m, d, WeightView{w.data(), common::DType::kF32, d, 1}, 1e-6f,
                     want.data());
  for (int64_t i = 0; i < m * d; ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), 1e-5f * std::max(1.0f, std::fabs(want[i]))) << i;
  }
  // Row 17 alone: the same bits.
  DeviceBuffer d_row = Upload(std::vector<float>(x.begin() + 17 * d, x.begin() + 18 * d));
  DeviceBuffer d_row_out = Zeros(d * 4);
  ASSERT_TRUE(
      LaunchRmsNorm(d_row.as<float>(), 1, d, d_w.as<float>(), 1e-6f, d_row_out.as<float>(), nullptr)
          .ok());
  const std::vector<float> alone = Download<float>(d_row_out, d);
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + 17 * d, d * 4), 0);
}

TEST_F(CudaKernelsTest, RopeMatchesReference) {
  std::mt19937 rng(9);
  const int64_t m = 7, heads = 4, hd = 64, rot = 48;
  const std::vector<int32_t> pos = {0, 1, 2, 100, 1000, 4095, 8191};
  std::vector<float> x = RandomFloats(rng, m * heads * hd);
  DeviceBuffer d_x = Upload(x), d_pos = Upload(pos), d_inv = Upload(RopeInvFreq(1e6f, rot));
  ASSERT_TRUE(LaunchRope(d_x.as<float>(), m, heads, hd, rot, d_pos.as<int32_t>(), d_inv.as<float>(),
                         nullptr)
                  .ok());
  const std::vector<float> got = Download<float>(d_x, x.size());
  reference::ApplyRope(x.data(), m, heads, hd, rot, pos.data(), 1e6f);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - x[i]), 2e-5f * (1.0f + std::fabs(x[i]))) << i;
  }
}

TEST_F(CudaKernelsTest, TopKGatingMatchesReference) {
  std::mt19937 rng(13);
  const int64_t m = 50, e = 64, k = 6;
  std::vector<float> logits = RandomFloats(rng, m * e, -4.0f, 4.0f);
  logits[3 * e + 5] = logits[3 * e + 9] = 10.0f;  // a tie: the lower id first
  DeviceBuffer d_l = Upload(logits), d_ids = Zeros(m * k * 4), d_w = Zeros(m * k * 4);
  ASSERT_TRUE(LaunchTopKGating(d_l.as<float>(), m, e, k, true, d_ids.as<int32_t>(), d_w.as<float>(),
                               nullptr)
                  .ok());
  const std::vector<int32_t> ids = Download<int32_t>(d_ids, m * k);
  const std::vector<float> w = Download<float>(d_w, m * k);
  std::vector<int32_t> want_ids(m * k);
  std::vector<float> want_w(m * k);
  reference::TopKGating(logits.data(), m, e, k, true, TopK{want_ids.data(), want_w.data()});
  EXPECT_EQ(ids, want_ids);
  for (int64_t i = 0; i < m * k; ++i) EXPECT_NEAR(w[i], want_w[i], 1e-6f) << i;
}

// Paged attention over scattered blocks: decode and prefill tokens against the reference, and
// the same token's output bitwise equal however its sequence's prefill is chunked or batched.
class PagedAttentionTest : public CudaKernelsTest {
 protected:
  static constexpr int64_t kBlock = 16, kKvHeads = 2, kHeads = 8, kHd = 64;
  void Build(std::mt19937& rng, std::vector<int64_t> lens) {
    lens_ = lens;
    int64_t blocks = 0;
    for (int64_t len : lens) blocks += (len + kBlock - 1) / kBlock;
    num_blocks_ = blocks + 2;
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    max_blocks_ = 0;
    for (int64_t len : lens) max_blocks_ = std::max(max_blocks_, (len + kBlock - 1) / kBlock);
    tables_.assign(lens.size() * max_blocks_, 0);
    int64_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int64_t b = 0; b < (lens[s] + kBlock - 1) / kBlock; ++b)
        tables_[s * max_blocks_ + b] = ids[next++];
    }
    const int64_t cache = num_blocks_ * kBlock * kKvHeads * kHd;
    k_cache_ = RandomFloats(rng, cache);
    v_cache_ = RandomFloats(rng, cache);
    for (int64_t len : lens) q_.push_back(RandomFloats(rng, len * kHeads * kHd));
  }
  // Attention of the listed (seq, position) tokens in one launch.
  std::vector<float> Run(const std::vector<std::pair<int32_t, int32_t>>& toks) {
    std::vector<int32_t> seq, pos;
    std::vector<float> q;
    for (auto [s, p] : toks) {
      seq.push_back(s);
      pos.push_back(p);
      q.insert(q.end(), q_[s].begin() + p * kHeads * kHd, q_[s].begin() + (p + 1) * kHeads * kHd);
    }
    DeviceBuffer d_seq = Upload(seq), d_pos = Upload(pos), d_tab = Upload(tables_);
    DeviceBuffer d_k = Upload(k_cache_), d_v = Upload(v_cache_), d_q = Upload(q);
    DeviceBuffer d_out = Zeros(q.size() * 4);
    const PagedAttentionParams p{.num_blocks = num_blocks_,
                                 .block_size = kBlock,
                                 .num_kv_heads = kKvHeads,
                                 .head_dim = kHd,
                                 .num_heads = kHeads,
                                 .max_blocks_per_seq = max_blocks_,
                                 .positions = d_pos.as<int32_t>(),
                                 .seq_of_token = d_seq.as<int32_t>(),
                                 .block_tables = d_tab.as<int32_t>()};
    EXPECT_TRUE(LaunchPagedAttention(p, d_q.as<float>(), static_cast<int64_t>(toks.size()),
                                     d_k.as<float>(), d_v.as<float>(), 0.125f, d_out.as<float>(),
                                     nullptr)
                    .ok());
    return Download<float>(d_out, q.size());
  }
  std::vector<int64_t> lens_;
  int64_t num_blocks_ = 0, max_blocks_ = 0;
  std::vector<int32_t> tables_;
  std::vector<float> k_cache_, v_cache_;
  std::vector<std::vector<float>> q_;
};

TEST_F(PagedAttentionTest, PrefillAndDecodeMatchReference) {
  std::mt19937 rng(17);
  Build(rng, {45, 3, 130});
  std::vector<std::pair<int32_t, int32_t>> toks;
  for (int32_t p = 0; p < 45; ++p) toks.push_back({0, p});  // a prefill
  toks.push_back({1, 2});                                   // decodes
  toks.push_back({2, 129});
  const std::vector<float> got = Run(toks);
  const PagedKvLayout layout{num_blocks_, kBlock, kKvHeads, kHd};
  for (size_t i = 0; i < toks.size(); ++i) {
    const auto [s, p] = toks[i];
    const AttentionToken t{p, tables_.data() + s * max_blocks_};
    std::vector<float> want(kHeads * kHd);
    reference::PagedAttention(q_[s].data() + p * kHeads * kHd, 1, kHeads, &t, layout,
                              k_cache_.data(), v_cache_.data(), 0.125f, want.data());
    for (int64_t j = 0; j < kHeads * kHd; ++j) {
      ASSERT_LE(std::fabs(got[i * kHeads * kHd + j] - want[j]), 1e-5f) << i << "," << j;
    }
  }
}

TEST_F(PagedAttentionTest, WriteKvFillsTheCpuLayoutsSlots) {
  std::mt19937 rng(23);
  Build(rng, {20, 5});
  std::vector<int32_t> seq, pos;
  for (int32_t p = 0; p < 20; ++p) seq.push_back(0), pos.push_back(p);
  for (int32_t p = 0; p < 5; ++p) seq.push_back(1), pos.push_back(p);
  const int64_t m = static_cast<int64_t>(seq.size()), per = kKvHeads * kHd;
  const std::vector<float> k = RandomFloats(rng, m * per), v = RandomFloats(rng, m * per);
  DeviceBuffer d_seq = Upload(seq), d_pos = Upload(pos), d_tab = Upload(tables_);
  DeviceBuffer d_k = Upload(k), d_v = Upload(v);
  DeviceBuffer d_kc = Upload(k_cache_), d_vc = Upload(v_cache_);
  const PagedAttentionParams p{.num_blocks = num_blocks_,
                               .block_size = kBlock,
                               .num_kv_heads = kKvHeads,
                               .head_dim = kHd,
                               .num_heads = kHeads,
                               .max_blocks_per_seq = max_blocks_,
                               .positions = d_pos.as<int32_t>(),
                               .seq_of_token = d_seq.as<int32_t>(),
                               .block_tables = d_tab.as<int32_t>()};
  ASSERT_TRUE(LaunchWriteKv(p, d_k.as<float>(), d_v.as<float>(), m, d_kc.as<float>(),
                            d_vc.as<float>(), nullptr)
                  .ok());
  const std::vector<float> got_k = Download<float>(d_kc, k_cache_.size());
  const std::vector<float> got_v = Download<float>(d_vc, v_cache_.size());
  std::vector<AttentionToken> toks;
  for (int64_t t = 0; t < m; ++t) toks.push_back({pos[t], tables_.data() + seq[t] * max_blocks_});
  reference::WriteKv(k.data(), v.data(), m, toks.data(), {num_blocks_, kBlock, kKvHeads, kHd},
                     k_cache_.data(), v_cache_.data());
  EXPECT_TRUE(kernels::testing::BitwiseEqual(got_k, k_cache_));
  EXPECT_TRUE(kernels::testing::BitwiseEqual(got_v, v_cache_));
}

TEST_F(PagedAttentionTest, TokenIsBitwiseIndependentOfChunkingAndBatch) {
  std::mt19937 rng(19);
  Build(rng, {40, 70});
  std::vector<std::pair<int32_t, int32_t>> whole;
  for (int32_t p = 0; p < 40; ++p) whole.push_back({0, p});
  const std::vector<float> one_launch = Run(whole);
  const int64_t row = kHeads * kHd;
  // Chunks of 7, 13 and 20 tokens, each batched with a decode of sequence 1.
  int32_t start = 0;
  for (int32_t len : {7, 13, 20}) {
    std::vector<std::pair<int32_t, int32_t>> chunk = {{1, 69}};
    for (int32_t p = start; p < start + len; ++p) chunk.push_back({0, p});
    const std::vector<float> got = Run(chunk);
    EXPECT_EQ(std::memcmp(got.data() + row, one_launch.data() + start * row, len * row * 4), 0)
        << "chunk at " << start;
    start += len;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
