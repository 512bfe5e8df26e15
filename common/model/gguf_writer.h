// GgufWriter collects GGUF metadata and tensors (their bytes produced on demand, one tensor at a
// time, so a multi-GB model is never held in memory) and writes the file (format: gguf.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/gguf.h"

namespace moe::model::gguf {

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

}  // namespace moe::model::gguf
