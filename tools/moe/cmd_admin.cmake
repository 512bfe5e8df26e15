# `moe admin calibrate-router | stats | coordinate` talks gRPC to routers and expert workers.
if(TARGET moe_router_remote_experts AND TARGET moe_router_experts_core)
  list(APPEND MOE_CLI_DEPS moe_router_remote_experts moe_router_experts_core moe_grpc moe_proto
    nlohmann_json::nlohmann_json)
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_admin.cc)
endif()
