# `moe generate` links the engine, the checkpoint loader and the tokenizer; until those targets
# exist in this tree the subcommand is left out of the CLI. --chat uses the gateway's
# chat-template interpreter when the build has it.
if(TARGET moe_engine AND TARGET moe_model AND TARGET moe_tokenizer)
  list(APPEND MOE_CLI_DEPS moe_engine moe_model moe_tokenizer nlohmann_json::nlohmann_json)
  if(TARGET moe_chat_template)
    list(APPEND MOE_CLI_DEPS moe_chat_template)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cmd_generate.cc PROPERTIES
      COMPILE_DEFINITIONS MOE_HAVE_CHAT_TEMPLATE)
  endif()
  if(TARGET moe_model_maker AND TARGET moe_reference_forward)
    moe_add_test(moe_generate_cli_test SRCS ${CMAKE_CURRENT_LIST_DIR}/generate_cli_test.cc
      DEPS moe_model_maker moe_reference_forward moe_tokenizer moe_testing
           nlohmann_json::nlohmann_json
      LABELS integration)
    add_dependencies(moe_generate_cli_test moe)
  endif()
else()
  list(REMOVE_ITEM MOE_CMD_SRCS ${CMAKE_CURRENT_LIST_DIR}/cmd_generate.cc)
endif()
