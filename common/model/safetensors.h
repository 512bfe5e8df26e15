// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {str: str}}, then the data section (offsets are relative to its start).
//
// SafetensorsFile memory-maps one file read-only and validates the whole header on Open; tensor
// data is then used in place (never copied). SafetensorsWriter streams a file out: the header
// first (from the declared tensors), then the data in declaration order, in chunks of any size.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/dtype.h"

namespace moe::model {

// safetensors dtype names: "F32", "BF16", "F16" <-> DType.
std::string_view SafetensorsDtypeName(common::DType dtype);

struct TensorInfo {
  std::string name;
  std::string dtype_name;        // as in the header: "F32", "BF16", "I8", ...
  bool dtype_supported = false;  // F32 / BF16 / F16 (then `dtype` is set)
  common::DType dtype = common::DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  int64_t file_offset = 0;        // absolute offset of the first byte in the file
  int64_t nbytes = 0;

  int64_t numel() const;
  std::string ShapeString() const;  // "[64, 128]"
};

// One memory-mapped .safetensors file. Thread-safe (immutable after Open).
class SafetensorsFile {
 public:
  // Maps `path` and validates its header: header length within the file, JSON well formed,
  // known dtypes, byte sizes matching dtype x shape, offsets within the data section (a short
  // file is reported as truncated), no two tensors overlapping. Errors name the file and the
  // tensor: NotFound when the file cannot be opened, InvalidArgument for a malformed file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_size() const { return size_; }
  // Tensors in increasing data offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Hints the kernel to read [data, data + nbytes) ahead (madvise WILLNEED).
  void Prefetch(const TensorInfo& t) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  int64_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

struct TensorSpec {
  std::string name;
  common::DType dtype = common::DType::kF32;
  std::vector<int64_t> shape;
  int64_t nbytes() const;
};

// Streams one safetensors file. Not thread-safe.
class SafetensorsWriter {
 public:
  // Creates `path` and writes the header for `tensors` (laid out contiguously in this order;
  // the header is space-padded so the data section starts 8-byte aligned, as safetensors does).
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<TensorSpec> tensors,
      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsWriter();

  // Appends the next `nbytes` of tensor data (the tensors' bytes in declaration order).
  absl::Status Append(const void* data, int64_t nbytes);
  // Checks that exactly all declared bytes were written, then flushes and closes.
  absl::Status Finish();

  int64_t data_bytes() const { return total_; }
  int64_t written() const { return written_; }

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t total_ = 0;
  int64_t written_ = 0;
};

// The header JSON SafetensorsWriter would write for `tensors` (contiguous in order), unpadded.
std::string SafetensorsHeaderJson(const std::vector<TensorSpec>& tensors,
                                  const std::map<std::string, std::string>& metadata);

// Convenience: writes `tensors` with their data (data[i] holds tensors[i].nbytes() bytes).
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                              const std::vector<const void*>& data,
                              const std::map<std::string, std::string>& metadata = {
                                  {"format", "pt"}});

}  // namespace moe::model
