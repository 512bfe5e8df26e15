// The native kBf16-mode matmul (kernels.h BF16-ACTIVATION MODE): VDPBF16PS, 32 multiply-adds
// per instruction. Exports one function (dispatch.h); the "avx512_bf16" table that uses it is
// the AVX-512 table otherwise. Same tiling as the AVX-512 f32 path: 4 x 4 register tiles (16 zmm
// accumulators, each one output's 16 lanes), x (bf16) blocked to ~256 KiB, m = 1 streams 8 rows.
// Self-contained (no isa_common.inc: its other kernels would be unused here).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "common/kernels/dispatch.h"

namespace moe::kernels::avx512bf16 {
namespace {

// The contract's 16 -> 1 tree, as avx512's Reduce16.
inline float Reduce16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Reduce16 of four vectors at once, the same additions per output (only regrouped across
// registers): out[0..3] = Reduce16(a), Reduce16(b), Reduce16(c), Reduce16(d).
inline void Reduce16x4(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
  // (l, l+8): [a lo8 + a hi8 | b lo8 + b hi8], likewise c, d.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // (l, l+4): one 128-bit block per vector, in the order a, b, c, d.
  const __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  // (0, 2), (1, 3), then (0, 1) inside each block.
  const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 1, 1, 1)));
  _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, v)));
}

inline float Bf16Bits(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline __mmask32 TailMask32(int64_t rem) { return static_cast<__mmask32>((1ull << rem) - 1u); }

inline float BiasAt(const internal::MatMulArgs& a, int64_t j) {
  if (a.bias_dtype == internal::kDtF32) return static_cast<const float*>(a.bias)[j];
  const uint16_t h = static_cast<const uint16_t*>(a.bias)[j];
  return a.bias_dtype == internal::kDtBf16 ? Bf16Bits(h) : _cvtsh_ss(h);
}

// PF: the first tile over these W rows prefetches the next tile's rows into L2 (as avx512's).
template <int MR, int NR, bool PF>
void Tile(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k;
  const uint16_t* x = a.xb + i0 * k;
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const uint16_t* src = w + (j0 + r) * k + p;
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(src + NR * k), _MM_HINT_T1);
      wv[r] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(src));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + i * k + p));
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
  if (p < k) {  // zero-padded last chunk
    const __mmask32 mask = TailMask32(k - p);
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      wv[r] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + (j0 + r) * k + p));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x + i * k + p));
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
    float v[NR];
    if constexpr (NR % 4 == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < NR; r += 4) {
        Reduce16x4(acc[i][r], acc[i][r + 1], acc[i][r + 2], acc[i][r + 3], v + r);
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) v[r] = Reduce16(acc[i][r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      if (a.bias != nullptr) v[r] = v[r] + BiasAt(a, j0 + r);
      y[r] = v[r];
    }
  }
}

constexpr int kMR = 4;
constexpr int kNR = 4;
constexpr int kNR1 = 8;

using TileFn = void (*)(const internal::MatMulArgs&, int64_t, int64_t);

template <int MR, bool PF>
TileFn PickNr(int64_t nr) {
  switch (nr) {
    case 1:
      return &Tile<MR, 1, PF>;
    case 2:
      return &Tile<MR, 2, PF>;
    case 3:
      return &Tile<MR, 3, PF>;
    default:
      return &Tile<MR, 4, PF>;
  }
}
template <bool PF>
TileFn PickTile(int64_t mr, int64_t nr) {
  switch (mr) {
    case 1:
      return PickNr<1, PF>(nr);
    case 2:
      return PickNr<2, PF>(nr);
    case 3:
      return PickNr<3, PF>(nr);
    default:
      return PickNr<4, PF>(nr);
  }
}

void MatMulImpl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m == 1) {
    int64_t j = n_begin;
    for (; j + kNR1 <= n_end; j += kNR1) Tile<1, kNR1, true>(a, 0, j);
    for (; j < n_end; ++j) Tile<1, 1, false>(a, 0, j);
    return;
  }
  int64_t mc = (256 * 1024) / (a.k * 2);
  mc = mc < kMR ? kMR : mc / kMR * kMR;
  for (int64_t mb = 0; mb < a.m; mb += mc) {
    const int64_t me = mb + mc < a.m ? mb + mc : a.m;
    for (int64_t j = n_begin; j < n_end; j += kNR) {
      const int64_t nr = n_end - j < kNR ? n_end - j : kNR;
      for (int64_t i = mb; i < me; i += kMR) {
        const int64_t mr = me - i < kMR ? me - i : kMR;
        (i == mb ? PickTile<true>(mr, nr) : PickTile<false>(mr, nr))(a, i, j);
      }
    }
  }
}

}  // namespace
}  // namespace moe::kernels::avx512bf16

namespace moe::kernels::internal {
void Avx512Bf16MatMul(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  avx512bf16::MatMulImpl(a, n_begin, n_end);
}
}  // namespace moe::kernels::internal
