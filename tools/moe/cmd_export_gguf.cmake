# `moe export-gguf` links the GGUF writer (common/model).
list(APPEND MOE_CLI_DEPS moe_gguf)
