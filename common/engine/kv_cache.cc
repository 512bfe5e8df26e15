#include "common/engine/kv_cache.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::engine {

int64_t KvCacheOptions::BytesPerBlock() const {
  return 2 * num_layers * block_size * num_kv_heads * head_dim *
         static_cast<int64_t>(sizeof(float));
}

absl::Status KvCacheOptions::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: num_layers, num_kv_heads, head_dim and block_size must be "
                     "positive (got ",
                     num_layers, ", ", num_kv_heads, ", ", head_dim, ", ", block_size, ")"));
  }
  if (num_blocks <= 0 && budget_bytes < BytesPerBlock()) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: budget of ", budget_bytes,
                                                   " bytes is less than one block (",
                                                   BytesPerBlock(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  kernels::PagedKvLayout layout;
  layout.block_size = options.block_size;
  layout.num_kv_heads = options.num_kv_heads;
  layout.head_dim = options.head_dim;
  layout.num_blocks =
      options.num_blocks > 0 ? options.num_blocks : options.budget_bytes / options.BytesPerBlock();
  // Block ids travel as int32 in block tables.
  if (layout.num_blocks > INT32_MAX) layout.num_blocks = INT32_MAX;
  const int64_t floats =
      layout.num_blocks * layout.block_size * layout.num_kv_heads * layout.head_dim;
  std::vector<Buffer> k, v;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    Buffer kb = Allocate(static_cast<size_t>(floats) * sizeof(float));
    Buffer vb = Allocate(static_cast<size_t>(floats) * sizeof(float));
    if (kb == nullptr || vb == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kv cache: cannot allocate ", 2 * floats * sizeof(float), " bytes"));
    }
    k.push_back(std::move(kb));
    v.push_back(std::move(vb));
  }
  return std::unique_ptr<KvCache>(new KvCache(layout, std::move(k), std::move(v)));
}

void KvCache::UnmapDeleter::operator()(float* p) const { munmap(p, bytes); }

KvCache::Buffer KvCache::Allocate(size_t bytes) {
  constexpr size_t kHuge = 2 << 20;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-map by one huge page, then trim the ends so the mapping starts on a 2 MiB boundary.
  void* raw = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return Buffer(nullptr, UnmapDeleter{});
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + size + kHuge;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  void* p = reinterpret_cast<void*>(aligned);
  // Advice only: without THP ("never") the memory is plain 4 KiB pages, as before.
  (void)madvise(p, size, MADV_HUGEPAGE);
  return Buffer(static_cast<float*>(p), UnmapDeleter{size});
}

KvCache::KvCache(const kernels::PagedKvLayout& layout, std::vector<Buffer> k, std::vector<Buffer> v)
    : layout_(layout),
      floats_per_block_(layout.block_size * layout.num_kv_heads * layout.head_dim),
      k_(std::move(k)),
      v_(std::move(v)) {}

int64_t KvCache::total_bytes() const {
  return 2 * num_layers() * num_blocks() * floats_per_block_ * static_cast<int64_t>(sizeof(float));
}

absl::Status KvCache::CopyBlock(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_blocks() || dst < 0 || dst >= num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: CopyBlock(", src, ", ", dst,
                                                   ") out of range [0, ", num_blocks(), ")"));
  }
  if (src == dst) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(floats_per_block_) * sizeof(float);
  for (int64_t l = 0; l < num_layers(); ++l) {
    std::memcpy(k_[l].get() + dst * floats_per_block_, k_[l].get() + src * floats_per_block_,
                bytes);
    std::memcpy(v_[l].get() + dst * floats_per_block_, v_[l].get() + src * floats_per_block_,
                bytes);
  }
  return absl::OkStatus();
}

absl::Span<float> KvCache::BlockForTesting(int64_t layer_idx, int32_t block_id, bool value) {
  float* base = value ? v_[layer_idx].get() : k_[layer_idx].get();
  return absl::Span<float>(base + block_id * floats_per_block_,
                           static_cast<size_t>(floats_per_block_));
}

}  // namespace moe::engine
