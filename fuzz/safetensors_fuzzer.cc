// A .safetensors file (8-byte header length, JSON header, data) into SafetensorsFile::Open.
#include <cstdint>

#include "common/model/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      moe::model::SafetensorsFile::Open(moe::fuzz::WriteScratch(data, size, ".safetensors"));
  if (file.ok()) {
    for (const auto& t : (*file)->tensors()) (void)(*file)->Find(t.name);
  }
  return 0;
}
