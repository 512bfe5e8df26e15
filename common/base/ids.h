// Strong integer ids: an id of one kind cannot be passed where another kind (or a plain integer)
// is expected. SeqId names a request's sequence across the router's scheduler, its model runner
// and the KV block manager. Index-like values (layer_idx, expert_id, worker_id, block ids) stay
// plain int32_t: they index arrays and travel in plain data-plane structs and protos.
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

}  // namespace moe::common

template <typename Tag, typename T>
struct std::hash<moe::common::StrongId<Tag, T>> {
  size_t operator()(const moe::common::StrongId<Tag, T>& id) const noexcept {
    return std::hash<T>{}(id.value());
  }
};
