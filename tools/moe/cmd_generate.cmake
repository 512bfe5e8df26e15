# `moe generate` links the engine, the checkpoint loader, the tokenizer and (for --chat) the
# chat-template interpreter.
list(APPEND MOE_CLI_DEPS moe_engine moe_model moe_tokenizer moe_chat_template moe_generation
  nlohmann_json::nlohmann_json)
moe_add_test(moe_generate_cli_test SRCS ${CMAKE_CURRENT_LIST_DIR}/generate_cli_test.cc
  DEPS moe_model_maker moe_reference_forward moe_tokenizer moe_process moe_testing
       nlohmann_json::nlohmann_json
  LABELS integration)
add_dependencies(moe_generate_cli_test moe)
