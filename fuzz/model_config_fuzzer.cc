// config.json text into ParseModelConfig: any input is a config or an error, never a crash.
#include <cstdint>
#include <string_view>

#include "common/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config =
      moe::model::ParseModelConfig(std::string_view(reinterpret_cast<const char*>(data), size));
  if (config.ok()) (void)config->Validate();
  return 0;
}
