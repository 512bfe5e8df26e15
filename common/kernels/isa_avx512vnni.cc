// The VPDPBUSD q8_0 matmul (kernels.h INT8 WEIGHTS): 64 byte products per instruction. Exports
// one function (dispatch.h); the avx512 and avx512_bf16 tables take it as their matmul_q8 where
// the CPU has AVX512-VNNI. The kernel is isa_q8_avx512.inc's, with the VNNI integer dot product.
// Self-contained (no isa_common.inc: its other kernels would be unused here).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "common/kernels/dispatch.h"

namespace moe::kernels::avx512vnni {
namespace {

#define MOE_Q8_VNNI 1
#include "common/kernels/isa_q8_avx512.inc"
#undef MOE_Q8_VNNI

}  // namespace
}  // namespace moe::kernels::avx512vnni

namespace moe::kernels::internal {
void Avx512VnniMatMulQ8(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  avx512vnni::MatMulQ8Avx512(a, n_begin, n_end);
}
}  // namespace moe::kernels::internal
