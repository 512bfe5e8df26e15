# `moe up` starts the service binaries: building `moe` builds them too (scripts/up builds only the
# `moe` target). Its parts, one concept each: options (up_options), the topology table
# (up_topology), the secure cluster's credentials (up_security), the default model (ensure_model); cmd_up.cc wires them to the process
# supervisor (common/process) and the HTTP client (common/http, the readiness probe).
moe_add_library(moe_cli_up
  SRCS ${CMAKE_CURRENT_LIST_DIR}/up_options.cc ${CMAKE_CURRENT_LIST_DIR}/up_topology.cc
       ${CMAKE_CURRENT_LIST_DIR}/ensure_model.cc ${CMAKE_CURRENT_LIST_DIR}/up_security.cc
  DEPS moe_config moe_process moe_http moe_grpc moe_grpc_pki moe_base moe_model_maker absl::strings
       absl::time)
moe_add_test(moe_cli_up_test SRCS ${CMAKE_CURRENT_LIST_DIR}/up_topology_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/up_security_test.cc DEPS moe_cli_up moe_testing)
list(APPEND MOE_CLI_DEPS moe_cli_up moe_process moe_grpc moe_config nlohmann_json::nlohmann_json)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cmd_up.cc PROPERTIES
  COMPILE_DEFINITIONS "MOE_SOURCE_DIR=\"${CMAKE_SOURCE_DIR}\"")
# The moe target is defined after this file is included: defer.
cmake_language(DEFER CALL add_dependencies moe gateway router expert-worker kv-store asr tts)
