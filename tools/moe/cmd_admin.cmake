# `moe admin calibrate-router | stats | coordinate` talks gRPC to routers and expert workers.
list(APPEND MOE_CLI_DEPS moe_router_recalibration_grpc moe_router_remote_experts moe_router_experts_core moe_grpc moe_proto
  nlohmann_json::nlohmann_json)
