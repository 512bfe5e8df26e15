# `moe make-model` links the random checkpoint maker (common/model).
if(TARGET moe_model_maker)
  list(APPEND MOE_CLI_DEPS moe_model_maker nlohmann_json::nlohmann_json)
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_make_model.cc)
endif()
