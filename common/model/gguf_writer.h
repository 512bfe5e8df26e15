// GGUF (v3) files, the format llama.cpp loads
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): "GGUF", u32 version, u64 tensor
// count, u64 metadata count, the typed metadata key/values, the tensor infos (name, dims with ne[0]
// innermost, ggml type, offset into the data section), padding to `general.alignment` (32), then
// the tensor data, each tensor at an aligned offset.
//
// GgufWriter collects metadata and tensors (their bytes produced on demand, one tensor at a time,
// so a multi-GB model is never held in memory) and writes the file. ReadGgufHeader parses a file's
// header, metadata and tensor table back (for tests and checks). ExportGgufLlama maps a Mixtral
// checkpoint directory onto llama.cpp's "llama" architecture with experts, as llama.cpp's
// convert_hf_to_gguf.py does for MixtralForCausalLM.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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

// Writes the bytes of one tensor (exactly its nbytes) into `out` (already sized).
using TensorFill = std::function<absl::Status(uint8_t* out)>;

class GgufWriter {
 public:
  void AddUint32(const std::string& key, uint32_t v);
  void AddInt32(const std::string& key, int32_t v);
  void AddUint64(const std::string& key, uint64_t v);
  void AddFloat32(const std::string& key, float v);
  void AddBool(const std::string& key, bool v);
  void AddString(const std::string& key, const std::string& v);
  void AddStringArray(const std::string& key, const std::vector<std::string>& v);
  void AddFloat32Array(const std::string& key, const std::vector<float>& v);
  void AddInt32Array(const std::string& key, const std::vector<int32_t>& v);

  // `ne` innermost first; `fill` is called once, during WriteFile, in AddTensor order.
  void AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, TensorFill fill);

  // Writes everything to `path`. Duplicate keys or tensor names -> InvalidArgument.
  absl::Status WriteFile(const std::string& path) const;

  int64_t num_tensors() const { return static_cast<int64_t>(tensors_.size()); }

 private:
  std::string kvs_;  // serialised metadata
  std::vector<std::string> keys_;
  std::vector<TensorEntry> tensors_;
  std::vector<TensorFill> fills_;
};

struct FileInfo {
  uint32_t version = 0;
  std::map<std::string, Value> metadata;
  std::vector<TensorEntry> tensors;  // in file order
  uint64_t data_offset = 0;          // absolute offset of the data section
  uint64_t file_size = 0;
};

// Parses header, metadata and tensor table; checks tensor data lies within the file.
absl::StatusOr<FileInfo> ReadGgufHeader(const std::string& path);

struct ExportStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Converts the Mixtral checkpoint in `model_dir` (config.json, safetensors, tokenizer.json) to a
// GGUF at `out_path` for llama.cpp's "llama" architecture: experts stacked into 3-D
// ffn_{gate,up,down}_exps, q/k rows permuted to llama.cpp's interleaved rotary layout, weights in
// their stored dtype (F32 or BF16), norms and the router gate in F32 (exact for BF16), and a
// SentencePiece-style ("llama") vocabulary from tokenizer.json. Unimplemented for other
// architectures or F16 checkpoints.
absl::StatusOr<ExportStats> ExportGgufLlama(const std::string& model_dir,
                                            const std::string& out_path);

}  // namespace moe::model::gguf
