// Device discovery, buffers, streams and copies (host code; the kernels are in the .cu files).
#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/kernels/cuda/cuda_kernels.h"
#include "common/kernels/cuda/cuda_status.h"

namespace moe::kernels::cuda {

int DeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    (void)cudaGetLastError();  // clear the sticky-free error so later calls report their own
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
  return n;
}

std::string DeviceDescription() {
  std::string why;
  if (DeviceCount(&why) == 0) return absl::StrCat("no CUDA device (", why, ")");
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "device 0: properties unavailable";
  return absl::StrCat(prop.name, ", sm_", prop.major, prop.minor, ", ", prop.totalGlobalMem >> 30,
                      " GiB");
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.data_, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc(", bytes, " bytes): ", cudaGetErrorString(e)));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes, Stream stream) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

absl::Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes, Stream stream) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}

absl::Status Synchronize(Stream stream) {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::StatusOr<DeviceStream> DeviceStream::Create() {
  DeviceStream s;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
  return s;
}

DeviceStream::~DeviceStream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

DeviceStream::DeviceStream(DeviceStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

DeviceStream& DeviceStream::operator=(DeviceStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

}  // namespace moe::kernels::cuda
