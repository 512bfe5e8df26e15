# `moe up` starts the router and gateway binaries: building `moe` builds them too (scripts/up
# builds only the `moe` target). Needs the model maker (default model) and gRPC (health checks).
if(TARGET moe_model_maker AND TARGET moe_grpc AND TARGET gateway AND TARGET router)
  set(MOE_UP_BINARIES gateway router)
  if(TARGET expert-worker)
    list(APPEND MOE_UP_BINARIES expert-worker)
  endif()
  list(APPEND MOE_CLI_DEPS moe_model_maker moe_model moe_grpc moe_config nlohmann_json::nlohmann_json)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cmd_up.cc PROPERTIES
    COMPILE_DEFINITIONS "MOE_SOURCE_DIR=\"${CMAKE_SOURCE_DIR}\"")
  # The moe target is defined after this file is included: defer.
  cmake_language(DEFER CALL add_dependencies moe ${MOE_UP_BINARIES})
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_up.cc)
endif()
