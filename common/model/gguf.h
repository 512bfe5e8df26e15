// GGUF (v3), the file format llama.cpp loads
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): "GGUF", u32 version, u64 tensor
// count, u64 metadata count, the typed metadata key/values, the tensor infos (name, dims with ne[0]
// innermost, ggml type, offset into the data section), padding to `general.alignment` (32), then
// the tensor data, each tensor at an aligned offset.
//
// This header has the format's vocabulary; gguf_writer.h writes files, gguf_reader.h reads their
// header back, gguf_export.h converts a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace moe::model::gguf {

inline constexpr uint32_t kVersion = 3;
inline constexpr uint64_t kAlignment = 32;

// Metadata value types of the GGUF spec.
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// The ggml tensor types written here.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };
int64_t GgmlTypeSize(GgmlType type);  // bytes per element

// A metadata value as read back: scalars widened, arrays of one element type.
struct Value {
  ValueType type = ValueType::kUint32;
  ValueType array_type = ValueType::kUint32;  // when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  std::vector<std::variant<uint64_t, int64_t, double, bool, std::string>> array;

  uint64_t u() const { return std::get<uint64_t>(scalar); }
  int64_t i() const { return std::get<int64_t>(scalar); }
  double f() const { return std::get<double>(scalar); }
  const std::string& s() const { return std::get<std::string>(scalar); }
};

struct TensorEntry {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ne[0] innermost (contiguous)
  uint64_t offset = 0;      // relative to the data section
  int64_t nbytes() const;
};

}  // namespace moe::model::gguf
