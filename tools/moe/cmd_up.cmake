# `moe up` starts the service binaries: building `moe` builds them too (scripts/up builds only the
# `moe` target). Needs the model maker (default model) and gRPC (health checks).
list(APPEND MOE_CLI_DEPS moe_model_maker moe_model moe_grpc moe_config nlohmann_json::nlohmann_json)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cmd_up.cc PROPERTIES
  COMPILE_DEFINITIONS "MOE_SOURCE_DIR=\"${CMAKE_SOURCE_DIR}\"")
# The moe target is defined after this file is included: defer.
cmake_language(DEFER CALL add_dependencies moe gateway router expert-worker)
