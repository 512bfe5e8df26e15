// WriteKv + PagedAttention through random block tables against a dense reference, and the
// invariances the engine relies on: batching, prefill chunking, threads, ISA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

using testing::BitwiseEqual;
using testing::RandomFloats;
using testing::ScopedIsa;
using testing::SupportedIsas;

// A few sequences whose blocks are scattered over a shared pool in random order.
struct PagedFixture {
  PagedKvLayout layout;
  int64_t num_heads;
  std::vector<std::vector<int32_t>> tables;  // per sequence
  std::vector<int64_t> lens;                 // tokens per sequence
  std::vector<float> k_cache, v_cache;
  std::vector<std::vector<float>> k, v, q;  // per sequence: [len, heads(kv), hd]

  PagedFixture(std::mt19937& rng, int64_t block_size, int64_t kv_heads, int64_t heads, int64_t hd,
               std::vector<int64_t> seq_lens)
      : layout{0, block_size, kv_heads, hd}, num_heads(heads), lens(std::move(seq_lens)) {
    int64_t blocks = 0;
    for (int64_t len : lens) blocks += (len + block_size - 1) / block_size;
    layout.num_blocks = blocks + 3;
    std::vector<int32_t> ids(layout.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int64_t next = 0;
    for (int64_t len : lens) {
      tables.emplace_back(ids.begin() + next,
                          ids.begin() + next + (len + block_size - 1) / block_size);
      next += static_cast<int64_t>(tables.back().size());
      k.push_back(RandomFloats(rng, len * kv_heads * hd, -1.0f, 1.0f));
      v.push_back(RandomFloats(rng, len * kv_heads * hd, -1.0f, 1.0f));
      q.push_back(RandomFloats(rng, len * heads * hd, -1.0f, 1.0f));
    }
    const int64_t cache = layout.num_blocks * block_size * kv_heads * hd;
    k_cache.assign(cache, std::nanf(""));  // unwritten slots must never be read
    v_cache.assign(cache, std::nanf(""));
    for (size_t s = 0; s < lens.size(); ++s) {
      std::vector<AttentionToken> toks;
      for (int64_t p = 0; p < lens[s]; ++p)
        toks.push_back({static_cast<int32_t>(p), tables[s].data()});
      WriteKv(k[s].data(), v[s].data(), lens[s], toks.data(), layout, k_cache.data(),
              v_cache.data());
    }
  }

  // Queries of sequence s at positions [begin, end), as one batch.
  std::vector<float> Run(size_t s, int64_t begin, int64_t end, ThreadPool* pool) const {
    std::vector<AttentionToken> toks;
    for (int64_t p = begin; p < end; ++p)
      toks.push_back({static_cast<int32_t>(p), tables[s].data()});
    const int64_t row = num_heads * layout.head_dim;
    std::vector<float> out((end - begin) * row);
    PagedAttention(q[s].data() + begin * row, end - begin, num_heads, toks.data(), layout,
                   k_cache.data(), v_cache.data(), 1.0f / std::sqrt(float(layout.head_dim)),
                   out.data(), pool);
    return out;
  }
};

TEST(WriteKvTest, PlacesRowsThroughTheBlockTable) {
  std::mt19937 rng(1);
  PagedFixture f(rng, 4, 2, 4, 8, {10});
  const int64_t row = 2 * 8;
  for (int64_t p = 0; p < 10; ++p) {
    const int64_t off = (f.tables[0][p / 4] * 4 + p % 4) * row;
    EXPECT_EQ(std::memcmp(&f.k_cache[off], &f.k[0][p * row], row * 4), 0);
    EXPECT_EQ(std::memcmp(&f.v_cache[off], &f.v[0][p * row], row * 4), 0);
  }
}

TEST(PagedAttentionTest, MatchesDenseReference) {
  std::mt19937 rng(2);
  for (int64_t bs : {1, 4, 16}) {
    for (int64_t hd : {8, 20, 64}) {
      PagedFixture f(rng, bs, 2, 6, hd, {37, 5});
      for (size_t s = 0; s < f.lens.size(); ++s) {
        std::vector<AttentionToken> toks;
        for (int64_t p = 0; p < f.lens[s]; ++p) toks.push_back({int32_t(p), f.tables[s].data()});
        std::vector<float> ref(f.lens[s] * 6 * hd);
        reference::PagedAttention(f.q[s].data(), f.lens[s], 6, toks.data(), f.layout,
                                  f.k_cache.data(), f.v_cache.data(), 1.0f / std::sqrt(float(hd)),
                                  ref.data());
        std::vector<float> first;  // group of 3 heads: the one-head-at-a-time paths
        for (const char* isa : SupportedIsas()) {
          ScopedIsa force(isa);
          const auto out = f.Run(s, 0, f.lens[s], nullptr);
          if (first.empty()) first = out;
          EXPECT_TRUE(BitwiseEqual(out, first)) << isa;
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_NEAR(out[i], ref[i], 2e-6f) << isa << " bs=" << bs << " hd=" << hd << " " << i;
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTest, BitwiseInvariantAcrossChunkingBatchingThreadsAndIsa) {
  std::mt19937 rng(3);
  ThreadPool pool2(2), pool3(3);
  // 64 and 128 take the register-accumulator path on AVX-512; 24 the generic one.
  for (int64_t hd : {64, 128, 24}) {
    PagedFixture f(rng, 16, 4, 16, hd, {70, 33, 1});
    const int64_t row = 16 * hd;
    for (size_t s = 0; s < f.lens.size(); ++s) {
      std::vector<float> base;
      {
        ScopedIsa force("portable");
        base = f.Run(s, 0, f.lens[s], nullptr);
      }
      for (const char* isa : SupportedIsas()) {
        ScopedIsa force(isa);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          EXPECT_TRUE(BitwiseEqual(f.Run(s, 0, f.lens[s], pool), base)) << isa;
        }
        // Chunked prefill: chunks of 7, and each token alone (decode).
        for (int64_t chunk : {7, 1}) {
          std::vector<float> out;
          for (int64_t b = 0; b < f.lens[s]; b += chunk) {
            const auto part = f.Run(s, b, std::min(f.lens[s], b + chunk), &pool2);
            out.insert(out.end(), part.begin(), part.end());
          }
          EXPECT_TRUE(BitwiseEqual(out, base)) << isa << " chunk " << chunk;
        }
      }
      // Mixed batch: the last token of every sequence in one call, as a decode step.
      std::vector<AttentionToken> toks;
      std::vector<float> q;
      for (size_t t = 0; t < f.lens.size(); ++t) {
        toks.push_back({int32_t(f.lens[t] - 1), f.tables[t].data()});
        q.insert(q.end(), f.q[t].end() - row, f.q[t].end());
      }
      std::vector<float> out(toks.size() * row);
      PagedAttention(q.data(), int64_t(toks.size()), 16, toks.data(), f.layout, f.k_cache.data(),
                     f.v_cache.data(), 1.0f / std::sqrt(float(hd)), out.data(), &pool2);
      EXPECT_EQ(std::memcmp(out.data() + s * row, base.data() + (f.lens[s] - 1) * row, row * 4), 0);
    }
  }
}

// A prefill chunk over a long cached prefix (the warm-TTFT step): the chunk's tokens in one call
// (AVX-512: tiles of up to 16 (token, head) items per KV head, masked tail blocks) must equal each
// token alone (the decode path) and the portable path, bitwise, for every GQA group width (one
// tile of 16, 8, 5, 4 or 2 tokens), block sizes that do and do not divide the prefix, and
// chunks that start and end inside blocks.
TEST(PagedAttentionTest, PrefillChunkOverACachedPrefixMatchesOneTokenAtATime) {
  std::mt19937 rng(5);
  ThreadPool pool2(2);
  struct Case {
    int64_t heads, kv_heads, hd, bs, prefix, chunk;
  };
  for (const Case& c :
       {Case{4, 2, 64, 16, 160, 32}, Case{16, 4, 64, 16, 203, 37}, Case{16, 16, 64, 16, 64, 40},
        Case{6, 2, 64, 4, 97, 23}, Case{8, 1, 128, 16, 48, 9}, Case{16, 4, 128, 5, 61, 30},
        Case{4, 4, 24, 16, 40, 20}}) {
    PagedFixture f(rng, c.bs, c.kv_heads, c.heads, c.hd, {c.prefix + c.chunk});
    const int64_t row = c.heads * c.hd;
    std::vector<float> single;
    for (int64_t p = c.prefix; p < c.prefix + c.chunk; ++p) {
      const auto one = f.Run(0, p, p + 1, nullptr);
      single.insert(single.end(), one.begin(), one.end());
    }
    std::vector<float> portable;
    {
      ScopedIsa force("portable");
      portable = f.Run(0, c.prefix, c.prefix + c.chunk, &pool2);
    }
    EXPECT_TRUE(BitwiseEqual(single, portable)) << c.heads << "/" << c.kv_heads << " hd " << c.hd;
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        EXPECT_TRUE(BitwiseEqual(f.Run(0, c.prefix, c.prefix + c.chunk, pool), single))
            << isa << " " << c.heads << "/" << c.kv_heads << " hd " << c.hd << " bs " << c.bs;
      }
      // Every sub-chunk length up to one tile and a bit, starting anywhere in a block.
      for (int64_t len = 2; len <= 18 && len <= c.chunk; len += 3) {
        const int64_t b = c.prefix + (len * 7) % (c.chunk - len + 1);
        const auto part = f.Run(0, b, b + len, nullptr);
        EXPECT_EQ(std::memcmp(part.data(), single.data() + (b - c.prefix) * row,
                              part.size() * sizeof(float)),
                  0)
            << isa << " " << c.heads << "/" << c.kv_heads << " at " << b << " len " << len;
      }
    }
  }
}

// Tokens of different sequences interleaved in one batch: a tile never mixes block tables.
TEST(PagedAttentionTest, InterleavedSequencesMatchEachAlone) {
  std::mt19937 rng(6);
  ThreadPool pool2(2);
  PagedFixture f(rng, 16, 2, 4, 64, {90, 75, 40});
  const int64_t row = 4 * 64;
  // Runs of 3, 1, 6, 2, ... tokens of sequences 0, 1, 2, 0, ...
  std::vector<AttentionToken> toks;
  std::vector<float> q;
  std::vector<std::pair<size_t, int64_t>> who;  // (sequence, position) per batch row
  int64_t next[3] = {60, 50, 20};
  for (int run = 0; run < 12; ++run) {
    const size_t s = run % 3;
    for (int64_t r = 0; r < 1 + (run * 5) % 7 && next[s] < f.lens[s]; ++r, ++next[s]) {
      toks.push_back({int32_t(next[s]), f.tables[s].data()});
      q.insert(q.end(), f.q[s].begin() + next[s] * row, f.q[s].begin() + (next[s] + 1) * row);
      who.push_back({s, next[s]});
    }
  }
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
      std::vector<float> out(toks.size() * row);
      PagedAttention(q.data(), int64_t(toks.size()), 4, toks.data(), f.layout, f.k_cache.data(),
                     f.v_cache.data(), 1.0f / 8.0f, out.data(), pool);
      for (size_t i = 0; i < who.size(); ++i) {
        const auto alone = f.Run(who[i].first, who[i].second, who[i].second + 1, nullptr);
        EXPECT_EQ(std::memcmp(out.data() + i * row, alone.data(), row * sizeof(float)), 0)
            << isa << " row " << i;
      }
    }
  }
}

TEST(PagedAttentionTest, LaterKeysChangeTheOutput) {
  std::mt19937 rng(4);
  PagedFixture f(rng, 4, 1, 2, 16, {12});
  const auto before = f.Run(0, 11, 12, nullptr);
  f.v_cache[(f.tables[0][0] * 4 + 1) * 16 + 3] += 1.0f;  // position 1, feature 3
  const auto after = f.Run(0, 11, 12, nullptr);
  EXPECT_NE(before[3], after[3]);
  EXPECT_EQ(before[4], after[4]);
}

}  // namespace
}  // namespace moe::kernels
