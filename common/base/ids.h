// Strong integer ids: a SeqId cannot be passed where an ExpertId is expected.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>

namespace moe::common {

template <typename Tag, typename T = int64_t>
class StrongId {
 public:
  using ValueType = T;
  constexpr StrongId() = default;
  constexpr explicit StrongId(T v) : value_(v) {}
  constexpr T value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const StrongId& id) {
    return H::combine(std::move(h), id.value_);
  }
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.value_; }

 private:
  T value_ = T{};
};

using SeqId = StrongId<struct SeqIdTag, uint64_t>;
using ExpertId = StrongId<struct ExpertIdTag, int32_t>;
using LayerIdx = StrongId<struct LayerIdxTag, int32_t>;
using BlockId = StrongId<struct BlockIdTag, int32_t>;
using WorkerId = StrongId<struct WorkerIdTag, int32_t>;

}  // namespace moe::common

template <typename Tag, typename T>
struct std::hash<moe::common::StrongId<Tag, T>> {
  size_t operator()(const moe::common::StrongId<Tag, T>& id) const noexcept {
    return std::hash<T>{}(id.value());
  }
};
