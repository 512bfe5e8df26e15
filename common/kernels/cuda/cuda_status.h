// CUDA_RETURN_IF_ERROR for the .cu and .cc files of this folder (STYLE.md rule 15). Includes
// cuda_runtime.h: never include it from a plain header.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe::kernels::cuda::internal {

inline absl::Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

}  // namespace moe::kernels::cuda::internal

// Evaluates a cudaError_t expression; returns Internal naming the call and CUDA's error from the
// enclosing function when it is not cudaSuccess.
#define CUDA_RETURN_IF_ERROR(expr)                                                                 \
  do {                                                                                             \
    const absl::Status moe_cuda_status_ = ::moe::kernels::cuda::internal::FromCuda((expr), #expr); \
    if (!moe_cuda_status_.ok()) return moe_cuda_status_;                                           \
  } while (0)
