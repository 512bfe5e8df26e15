# `moe make-model` links the random checkpoint maker (common/model).
list(APPEND MOE_CLI_DEPS moe_model_maker nlohmann_json::nlohmann_json)
