#include "common/model/gguf.h"

namespace moe::model::gguf {

int64_t GgmlTypeSize(GgmlType type) { return type == GgmlType::kF32 ? 4 : 2; }

int64_t TensorEntry::nbytes() const {
  int64_t n = GgmlTypeSize(type);
  for (int64_t d : ne) n *= d;
  return n;
}

}  // namespace moe::model::gguf
