# `moe export-gguf` links the GGUF writer (common/model).
if(TARGET moe_gguf)
  list(APPEND MOE_CLI_DEPS moe_gguf)
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_export_gguf.cc)
endif()
