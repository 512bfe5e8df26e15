// The AVX2 + FMA + F16C path: the contract's 16 lanes live in two ymm registers (lo = lanes 0-7,
// hi = lanes 8-15).
#define MOE_ISA_NS avx2
#include "common/kernels/isa_common.inc"

namespace moe::kernels::avx2 {
namespace {

using internal::kDtBf16;
using internal::kDtF16;
using internal::kDtF32;

// 8 weights from element `idx` of W as f32 (exact).
template <int DT>
inline __m256 LoadW8(const void* w, int64_t idx) {
  if constexpr (DT == kDtF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + idx);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + idx));
    if constexpr (DT == kDtBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

inline float LoadElem(const void* p, int dtype, int64_t i) {
  if (dtype == kDtF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (dtype == kDtBf16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  return _cvtsh_ss(h);
}

template <int DT, int MR, int NR>
void Tile(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  constexpr int64_t kElem = DT == kDtF32 ? 4 : 2;
  const int64_t k = a.k;
  const float* x = a.x + i0 * k;
  __m256 lo[MR][NR], hi[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) lo[i][r] = hi[i][r] = _mm256_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    if constexpr (MR == 1) {
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        // Same offset in the next tile's rows (rows are contiguous): one tile ahead, into L2.
        _mm_prefetch(static_cast<const char*>(a.w) + ((j0 + r + NR) * k + p) * kElem, _MM_HINT_T1);
      }
    }
    // One half (8 lanes) at a time keeps 2 * MR * NR accumulators + NR + 1 registers live.
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = LoadW8<DT>(a.w, (j0 + r) * k + p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + p);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) lo[i][r] = _mm256_fmadd_ps(xv, wv[r], lo[i][r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = LoadW8<DT>(a.w, (j0 + r) * k + p + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + p + 8);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) hi[i][r] = _mm256_fmadd_ps(xv, wv[r], hi[i][r]);
    }
  }
  if (p < k) {  // zero-padded tail, as the masked loads of the AVX-512 path
    const int64_t rem = k - p;
    alignas(32) float wt[NR][16] = {};
    alignas(32) float xt[16] = {};
    for (int r = 0; r < NR; ++r) {
      for (int64_t l = 0; l < rem; ++l) wt[r][l] = LoadElem(a.w, DT, (j0 + r) * k + p + l);
    }
    for (int i = 0; i < MR; ++i) {
      std::memcpy(xt, x + i * k + p, rem * sizeof(float));
      const __m256 xl = _mm256_load_ps(xt);
      const __m256 xh = _mm256_load_ps(xt + 8);
      for (int r = 0; r < NR; ++r) {
        lo[i][r] = _mm256_fmadd_ps(xl, _mm256_load_ps(wt[r]), lo[i][r]);
        hi[i][r] = _mm256_fmadd_ps(xh, _mm256_load_ps(wt[r] + 8), hi[i][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      float v = Reduce8x2(lo[i][r], hi[i][r]);
      if (a.bias != nullptr) v = v + LoadElem(a.bias, a.bias_dtype, j0 + r);
      y[r] = v;
    }
  }
}

// 3 x 2 outputs = 12 accumulators + 2 W + 1 x registers of the 16 ymm.
constexpr int kMR = 3;
constexpr int kNR = 2;
constexpr int kNR1 = 4;

using TileFn = void (*)(const internal::MatMulArgs&, int64_t, int64_t);

template <int DT>
TileFn PickTile(int64_t mr, int64_t nr) {
  static_assert(kMR == 3 && kNR == 2);
  switch (mr) {
    case 1:
      return nr == 1 ? &Tile<DT, 1, 1> : &Tile<DT, 1, 2>;
    case 2:
      return nr == 1 ? &Tile<DT, 2, 1> : &Tile<DT, 2, 2>;
    default:
      return nr == 1 ? &Tile<DT, 3, 1> : &Tile<DT, 3, 2>;
  }
}

template <int DT>
void MatMulTyped(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m == 1) {
    int64_t j = n_begin;
    for (; j + kNR1 <= n_end; j += kNR1) Tile<DT, 1, kNR1>(a, 0, j);
    for (; j < n_end; ++j) Tile<DT, 1, 1>(a, 0, j);
    return;
  }
  int64_t mc = (256 * 1024) / (a.k * 4);
  mc = mc < kMR ? kMR : mc / kMR * kMR;
  for (int64_t mb = 0; mb < a.m; mb += mc) {
    const int64_t me = mb + mc < a.m ? mb + mc : a.m;
    for (int64_t j = n_begin; j < n_end; j += kNR) {
      const int64_t nr = n_end - j < kNR ? n_end - j : kNR;
      for (int64_t i = mb; i < me; i += kMR) {
        const int64_t mr = me - i < kMR ? me - i : kMR;
        PickTile<DT>(mr, nr)(a, i, j);
      }
    }
  }
}

void MatMulImpl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case kDtBf16:
      return MatMulTyped<kDtBf16>(a, n_begin, n_end);
    case kDtF16:
      return MatMulTyped<kDtF16>(a, n_begin, n_end);
    default:
      return MatMulTyped<kDtF32>(a, n_begin, n_end);
  }
}

// ------------------------------------------------ kBf16 mode: VDPBF16PS emulated with AVX2+FMA
// (kernels.h BF16-ACTIVATION MODE). Lanes 0-7 (lo) take elements 0-15 of each 32-element chunk,
// lanes 8-15 (hi) elements 16-31; in a dword the even element is the low half.

inline __m256 Ftz8(__m256 v) {  // denormal lanes -> zeros of their sign
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), abs);
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(tiny, abs), bits));
}
inline __m256 Even8(__m256i d) { return _mm256_castsi256_ps(_mm256_slli_epi32(d, 16)); }
inline __m256 Odd8(__m256i d) {
  return _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// 2 x 2 outputs: 8 accumulators, one 16-element half of the chunk at a time.
template <int MR, int NR>
void TileBf16(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k;
  const uint16_t* x = a.xb + i0 * k;
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  __m256 acc[2][MR][NR];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < MR; ++i) {
      for (int r = 0; r < NR; ++r) acc[h][i][r] = _mm256_setzero_ps();
    }
  }
  alignas(32) uint16_t xt[MR][32], wt[NR][32];
  for (int64_t p = 0; p < k; p += 32) {
    const uint16_t* xs[MR];
    const uint16_t* ws[NR];
    if (p + 32 <= k) {
      for (int i = 0; i < MR; ++i) xs[i] = x + i * k + p;
      for (int r = 0; r < NR; ++r) ws[r] = w + (j0 + r) * k + p;
    } else {  // zero-padded last chunk
      const int64_t rem = k - p;
      for (int i = 0; i < MR; ++i) {
        std::memset(xt[i], 0, sizeof(xt[i]));
        std::memcpy(xt[i], x + i * k + p, rem * 2);
        xs[i] = xt[i];
      }
      for (int r = 0; r < NR; ++r) {
        std::memset(wt[r], 0, sizeof(wt[r]));
        std::memcpy(wt[r], w + (j0 + r) * k + p, rem * 2);
        ws[r] = wt[r];
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256 we[NR], wo[NR];
      for (int r = 0; r < NR; ++r) {
        const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws[r] + 16 * h));
        we[r] = Ftz8(Even8(d));
        wo[r] = Ftz8(Odd8(d));
      }
      for (int i = 0; i < MR; ++i) {
        const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[i] + 16 * h));
        const __m256 xe = Even8(d), xo = Odd8(d);
        for (int r = 0; r < NR; ++r) {
          acc[h][i][r] = Ftz8(_mm256_fmadd_ps(xo, wo[r], acc[h][i][r]));
          acc[h][i][r] = Ftz8(_mm256_fmadd_ps(xe, we[r], acc[h][i][r]));
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
    for (int r = 0; r < NR; ++r) {
      float v = Reduce8x2(acc[0][i][r], acc[1][i][r]);
      if (a.bias != nullptr) v = v + LoadElem(a.bias, a.bias_dtype, j0 + r);
      y[r] = v;
    }
  }
}

void RoundBf16Impl(const float* src, int64_t n, uint16_t* dst) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i abs = _mm256_and_si256(b, abs_mask);  // < 2^31: signed compares are exact
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i den = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), abs);
    const __m256i f = _mm256_andnot_si256(_mm256_and_si256(den, abs_mask), b);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(f, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256i v = _mm256_blendv_epi8(r, q, nan);  // 0..0xffff per dword
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) dst[i] = RoundBf16Scalar(src[i]);
}

void MatMulBf16Impl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  for (int64_t j = n_begin; j < n_end; j += 2) {
    const bool two_cols = j + 2 <= n_end;
    for (int64_t i = 0; i < a.m; i += 2) {
      const bool two_rows = i + 2 <= a.m;
      if (two_rows && two_cols) {
        TileBf16<2, 2>(a, i, j);
      } else if (two_rows) {
        TileBf16<2, 1>(a, i, j);
      } else if (two_cols) {
        TileBf16<1, 2>(a, i, j);
      } else {
        TileBf16<1, 1>(a, i, j);
      }
    }
  }
}

void ConvertImpl(const void* src, int dtype, int64_t n, float* dst) {
  int64_t i = 0;
  if (dtype == kDtBf16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadW8<kDtBf16>(src, i));
  } else if (dtype == kDtF16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadW8<kDtF16>(src, i));
  }
  for (; i < n; ++i) dst[i] = LoadElem(src, dtype, i);
}

// ------------------------------------------------ q8_0 weights (kernels.h INT8 WEIGHTS)
// Lanes 0-7 (lo) hold block 2c of chunk c (bytes 0-31), lanes 8-15 (hi) block 2c + 1: each block
// is one ymm of 32 bytes. A lane's 4-byte dot product: vpmaddubsw of |w| (u8) and x with w's sign
// (s8), pairs of products <= 2 * 127 * 127 (no saturation), then vpmaddwd with ones.

inline void QuantizeQ8Impl(const float* x, int64_t m, int64_t k, int8_t* q, float* d) {
  const int64_t blocks = m * (k / 32);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int t = 0; t < 4; ++t) {
      v[t] = _mm256_loadu_ps(xb + 8 * t);
      mx = _mm256_max_ps(_mm256_and_ps(v[t], abs_mask), mx);  // NaN |x| -> mx (second operand)
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float db = _mm_cvtss_f32(m4) / 127.0f;
    d[b] = db;
    if (db == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm256_setzero_si256());
      continue;
    }
    const __m256 dv = _mm256_set1_ps(db);
    __m256i iv[4];
    for (int t = 0; t < 4; ++t) {
      __m256 r = _mm256_div_ps(v[t], dv);
      r = _mm256_max_ps(r, _mm256_set1_ps(-127.0f));  // NaN -> -127
      r = _mm256_min_ps(r, _mm256_set1_ps(127.0f));
      iv[t] = _mm256_cvtps_epi32(r);  // round to nearest even
    }
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(p, order));
  }
}

inline __m256 Q8Scale(const char* row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + k + 2 * b, 2);
  return _mm256_set1_ps(_cvtsh_ss(h));
}

template <int MR, int NR>
void TileQ8(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k;
  const int64_t nb = k / 32;
  const int64_t rb = Q8RowBytes(k);
  const char* w = static_cast<const char*>(a.w) + j0 * rb;
  __m256 acc[2][MR][NR];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[h][i][r] = _mm256_setzero_ps();
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (MR == 1) {
      if (b % 2 == 0) {  // the same offsets (and the scales) in the next tile's rows, into L2
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
          _mm_prefetch(w + (r + NR) * rb + 32 * b, _MM_HINT_T1);
          if (32 * b < 2 * nb) _mm_prefetch(w + (r + NR) * rb + k + 32 * b, _MM_HINT_T1);
        }
      }
    }
    const int h = static_cast<int>(b & 1);
    __m256i wv[NR], wa[NR];
    __m256 dw[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * rb + 32 * b));
      wa[r] = _mm256_sign_epi8(wv[r], wv[r]);
      dw[r] = Q8Scale(w + r * rb, k, b);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + (i0 + i) * k + 32 * b));
      const __m256 xd = _mm256_set1_ps(a.xd[(i0 + i) * nb + b]);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        const __m256i s =
            _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(xv, wv[r])), ones);
        const __m256 sd = _mm256_mul_ps(dw[r], xd);
        acc[h][i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sd, acc[h][i][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      float v = Reduce8x2(acc[0][i][r], acc[1][i][r]);
      if (a.bias != nullptr) v = v + LoadElem(a.bias, a.bias_dtype, j0 + r);
      y[r] = v;
    }
  }
}

void MatMulQ8Impl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m == 1) {
    int64_t j = n_begin;
    for (; j + 4 <= n_end; j += 4) TileQ8<1, 4>(a, 0, j);
    for (; j < n_end; ++j) TileQ8<1, 1>(a, 0, j);
    return;
  }
  int64_t mc = (256 * 1024) / a.k;
  mc = mc < 2 ? 2 : mc / 2 * 2;
  for (int64_t mb = 0; mb < a.m; mb += mc) {
    const int64_t me = mb + mc < a.m ? mb + mc : a.m;
    for (int64_t j = n_begin; j < n_end; j += 2) {
      const bool two_cols = j + 2 <= n_end;
      for (int64_t i = mb; i < me; i += 2) {
        const bool two_rows = i + 2 <= me;
        if (two_rows && two_cols) {
          TileQ8<2, 2>(a, i, j);
        } else if (two_rows) {
          TileQ8<2, 1>(a, i, j);
        } else if (two_cols) {
          TileQ8<1, 2>(a, i, j);
        } else {
          TileQ8<1, 1>(a, i, j);
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe::kernels::avx2

namespace moe::kernels::internal {
const IsaKernels kAvx2Kernels = {
    "avx2",
    &avx2::MatMulImpl,
    &avx2::RmsNormImpl,
    &avx2::SoftmaxImpl,
    &avx2::SiluMulImpl,
    &avx2::AttentionImpl,
    &avx2::ExpArray,
    &avx2::ConvertImpl,
    &avx2::MatMulBf16Impl,
    &avx2::RoundBf16Impl,
    &avx2::MatMulQ8Impl,
    &avx2::QuantizeQ8Impl,
};
}  // namespace moe::kernels::internal
