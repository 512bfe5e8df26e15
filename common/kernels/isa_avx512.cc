// The AVX-512 path (F/BW/VL/DQ + FMA): one zmm holds the contract's 16 lanes.
#define MOE_ISA_NS avx512
#include "common/kernels/isa_common.inc"

namespace moe::kernels::avx512 {
namespace {

using internal::kDtBf16;
using internal::kDtF16;
using internal::kDtF32;

// 16 weights from element `idx` of W, converted exactly to f32 (masked: zeros past the mask).
template <int DT>
inline __m512 LoadW(const void* w, int64_t idx) {
  if constexpr (DT == kDtF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + idx);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + idx));
    if constexpr (DT == kDtBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}
template <int DT>
inline __m512 LoadWMasked(const void* w, int64_t idx, __mmask16 mask) {
  if constexpr (DT == kDtF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + idx);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + idx);
    if constexpr (DT == kDtBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
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

// One MR x NR tile of y: rows i0.. of x against rows j0.. of W, each output one 16-lane chain
// (k order, fma, zero-padded tail) reduced by the contract's tree. PF: this tile is the first
// to read its W rows (from memory), so it prefetches the next tile's rows into L2 as it goes.
template <int DT, int MR, int NR, bool PF>
void Tile(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  constexpr int64_t kElem = DT == kDtF32 ? 4 : 2;
  const int64_t k = a.k;
  const float* x = a.x + i0 * k;
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const int64_t idx = (j0 + r) * k + p;
      if constexpr (PF) {
        // The same offset in the rows of the next tile (W rows are contiguous, so this runs
        // one tile ahead of the stream and warms the next tile's start as well).
        _mm_prefetch(static_cast<const char*>(a.w) + (idx + NR * k) * kElem, _MM_HINT_T1);
      }
      wv[r] = LoadW<DT>(a.w, idx);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + p);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (p < k) {
    const __mmask16 mask = TailMask(k - p);
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = LoadWMasked<DT>(a.w, (j0 + r) * k + p, mask);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * k + p);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  float bias[NR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
    bias[r] = a.bias != nullptr ? LoadElem(a.bias, a.bias_dtype, j0 + r) : 0.0f;
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      float v = Reduce16(acc[i][r]);
      if (a.bias != nullptr) v = v + bias[r];
      y[r] = v;
    }
  }
}

// Register tile sizes: kMR x rows share each W load; m = 1 streams kNR1 rows at once.
constexpr int kMR = 4;
constexpr int kNR = 4;
constexpr int kNR1 = 8;

using TileFn = void (*)(const internal::MatMulArgs&, int64_t, int64_t);

// Tile<DT, mr, nr, PF> for 1 <= mr <= kMR, 1 <= nr <= kNR (plain switches: no shared templates).
template <int DT, int MR, bool PF>
TileFn PickNr(int64_t nr) {
  static_assert(kNR == 4);
  switch (nr) {
    case 1:
      return &Tile<DT, MR, 1, PF>;
    case 2:
      return &Tile<DT, MR, 2, PF>;
    case 3:
      return &Tile<DT, MR, 3, PF>;
    default:
      return &Tile<DT, MR, 4, PF>;
  }
}
template <int DT, bool PF>
TileFn PickTile(int64_t mr, int64_t nr) {
  static_assert(kMR == 4);
  switch (mr) {
    case 1:
      return PickNr<DT, 1, PF>(nr);
    case 2:
      return PickNr<DT, 2, PF>(nr);
    case 3:
      return PickNr<DT, 3, PF>(nr);
    default:
      return PickNr<DT, 4, PF>(nr);
  }
}

template <int DT>
void MatMulTyped(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m == 1) {
    int64_t j = n_begin;
    for (; j + kNR1 <= n_end; j += kNR1) Tile<DT, 1, kNR1, true>(a, 0, j);
    for (; j < n_end; ++j) Tile<DT, 1, 1, false>(a, 0, j);
    return;
  }
  // Rows of x per block: about 256 KiB (stays in L2 while the thread's W rows stream past).
  int64_t mc = (256 * 1024) / (a.k * 4);
  mc = mc < kMR ? kMR : mc / kMR * kMR;
  for (int64_t mb = 0; mb < a.m; mb += mc) {
    const int64_t me = mb + mc < a.m ? mb + mc : a.m;
    for (int64_t j = n_begin; j < n_end; j += kNR) {
      const int64_t nr = n_end - j < kNR ? n_end - j : kNR;
      for (int64_t i = mb; i < me; i += kMR) {
        const int64_t mr = me - i < kMR ? me - i : kMR;
        (i == mb ? PickTile<DT, true>(mr, nr) : PickTile<DT, false>(mr, nr))(a, i, j);
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

// ------------------------------------------------ kBf16 mode: VDPBF16PS emulated with AVX-512F
// (kernels.h BF16-ACTIVATION MODE). One zmm of 32 bf16 = 16 dwords: the even element of lane l
// is the dword's low half, the odd one its high half.

// Denormal lanes -> zeros of their sign (exponent field zero).
inline __m512 Ftz(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x00800000));
  return _mm512_castsi512_ps(
      _mm512_mask_and_epi32(bits, tiny, bits, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}
inline __m512 EvenHalf(__m512i d) { return _mm512_castsi512_ps(_mm512_slli_epi32(d, 16)); }
inline __m512 OddHalf(__m512i d) {
  return _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline __mmask32 TailMask32(int64_t rem) { return static_cast<__mmask32>((1ull << rem) - 1u); }

template <int MR, int NR>
void TileBf16(const internal::MatMulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k;
  const uint16_t* x = a.xb + i0 * k;
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; p += 32) {
    const bool full = p + 32 <= k;
    const __mmask32 mask = full ? ~__mmask32{0} : TailMask32(k - p);
    __m512 we[NR], wo[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m512i d = _mm512_maskz_loadu_epi16(mask, w + (j0 + r) * k + p);
      we[r] = Ftz(EvenHalf(d));
      wo[r] = Ftz(OddHalf(d));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i d = _mm512_maskz_loadu_epi16(mask, x + i * k + p);
      const __m512 xe = EvenHalf(d), xo = OddHalf(d);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        acc[i][r] = Ftz(_mm512_fmadd_ps(xo, wo[r], acc[i][r]));
        acc[i][r] = Ftz(_mm512_fmadd_ps(xe, we[r], acc[i][r]));
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + (i0 + i) * a.n + j0;
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      float v = Reduce16(acc[i][r]);
      if (a.bias != nullptr) v = v + LoadElem(a.bias, a.bias_dtype, j0 + r);
      y[r] = v;
    }
  }
}

template <int MR>
TileFn PickBf16Nr(int64_t nr) {
  switch (nr) {
    case 1:
      return &TileBf16<MR, 1>;
    case 2:
      return &TileBf16<MR, 2>;
    case 3:
      return &TileBf16<MR, 3>;
    default:
      return &TileBf16<MR, 4>;
  }
}
TileFn PickBf16Tile(int64_t mr, int64_t nr) {
  switch (mr) {
    case 1:
      return PickBf16Nr<1>(nr);
    case 2:
      return PickBf16Nr<2>(nr);
    case 3:
      return PickBf16Nr<3>(nr);
    default:
      return PickBf16Nr<4>(nr);
  }
}

inline __m512i RoundBf16x16(__m512i b) {
  const __m512i abs = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __mmask16 den = _mm512_cmplt_epu32_mask(abs, _mm512_set1_epi32(0x00800000));
  const __m512i f =
      _mm512_mask_and_epi32(b, den, b, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(f, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(f, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(r, nan, q);
}

void RoundBf16Impl(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtepi32_epi16(RoundBf16x16(_mm512_loadu_si512(src + i))));
  }
  if (i < n) {
    const __mmask16 mask = TailMask(n - i);
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, mask,
                                      RoundBf16x16(_mm512_maskz_loadu_epi32(mask, src + i)));
  }
}

void MatMulBf16Impl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  int64_t mc = (256 * 1024) / (a.k * 2);
  mc = mc < kMR ? kMR : mc / kMR * kMR;
  for (int64_t mb = 0; mb < a.m; mb += mc) {
    const int64_t me = mb + mc < a.m ? mb + mc : a.m;
    for (int64_t j = n_begin; j < n_end; j += kNR) {
      const int64_t nr = n_end - j < kNR ? n_end - j : kNR;
      for (int64_t i = mb; i < me; i += kMR) {
        const int64_t mr = me - i < kMR ? me - i : kMR;
        PickBf16Tile(mr, nr)(a, i, j);
      }
    }
  }
}

void ConvertImpl(const void* src, int dtype, int64_t n, float* dst) {
  int64_t i = 0;
  if (dtype == kDtBf16) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, LoadW<kDtBf16>(src, i));
  } else if (dtype == kDtF16) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, LoadW<kDtF16>(src, i));
  }
  for (; i < n; ++i) dst[i] = LoadElem(src, dtype, i);
}

// ------------------------------------------------ q8_0 weights (kernels.h INT8 WEIGHTS)
#define MOE_Q8_VNNI 0
#include "common/kernels/isa_q8_avx512.inc"
#undef MOE_Q8_VNNI

// QuantizeActivationsQ8, bitwise the scalar definition (isa_common.inc): maxps/minps take the
// second operand for a NaN, as the scalar comparisons; vcvtps2dq rounds to nearest even.
void QuantizeQ8Impl(const float* x, int64_t m, int64_t k, int8_t* q, float* d) {
  const int64_t blocks = m * (k / 32);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b);
    const __m512 v1 = _mm512_loadu_ps(x + 32 * b + 16);
    __m512 mx = _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_setzero_ps());
    mx = _mm512_max_ps(_mm512_and_ps(v1, abs_mask), mx);
    const float db = _mm512_reduce_max_ps(mx) / 127.0f;  // mx has no NaN: any order is exact
    d[b] = db;
    if (db == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm256_setzero_si256());
      continue;
    }
    const __m512 dv = _mm512_set1_ps(db);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512 r0 = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(v0, dv), lo), hi);
    const __m512 r1 = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(v1, dv), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r1)));
  }
}

}  // namespace
}  // namespace moe::kernels::avx512

namespace moe::kernels::internal {
const IsaKernels kAvx512Kernels = {
    "avx512",
    &avx512::MatMulImpl,
    &avx512::RmsNormImpl,
    &avx512::SoftmaxImpl,
    &avx512::SiluMulImpl,
    &avx512::AttentionImpl,
    &avx512::ExpArray,
    &avx512::ConvertImpl,
    &avx512::MatMulBf16Impl,
    &avx512::RoundBf16Impl,
    &avx512::MatMulQ8Avx512,
    &avx512::QuantizeQ8Impl,
};
}  // namespace moe::kernels::internal
