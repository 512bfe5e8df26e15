# `moe generate` links the engine, the checkpoint loader and the tokenizer; until those targets
# exist in this tree the subcommand is left out of the CLI.
if(TARGET moe_engine AND TARGET moe_model AND TARGET moe_tokenizer)
  list(APPEND MOE_CLI_DEPS moe_engine moe_model moe_tokenizer nlohmann_json::nlohmann_json)
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_generate.cc)
endif()
