#include "common/nccl/communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe::nccl {

std::string UniqueIdToBytes(const UniqueId& id) {
  return std::string(reinterpret_cast<const char*>(id.data()), id.size());
}

absl::StatusOr<UniqueId> UniqueIdFromBytes(std::string_view bytes) {
  if (bytes.size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl unique id: ", bytes.size(), " bytes, want ", kUniqueIdBytes));
  }
  UniqueId id;
  std::memcpy(id.data(), bytes.data(), kUniqueIdBytes);
  return id;
}

}  // namespace moe::nccl
