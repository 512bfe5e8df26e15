// PlacementTable <-> moe.router.v1.PlacementTable (the server layer's conversion; core/ stays
// free of protos).
#pragma once

#include "absl/status/statusor.h"
#include "moe/router/v1/router.pb.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

void PlacementToProto(const PlacementTable& table, moe::router::v1::PlacementTable* out);
// InvalidArgument for out-of-range ids or a (layer, expert) listed twice. Shape and replica
// checks against a model are PlacementTable::Validate's.
absl::StatusOr<PlacementTable> PlacementFromProto(const moe::router::v1::PlacementTable& proto);

}  // namespace moe::router
