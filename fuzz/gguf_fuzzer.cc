// A GGUF file (header, metadata, tensor table) into ReadGgufHeader.
#include <cstdint>

#include "common/model/gguf_reader.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)moe::model::gguf::ReadGgufHeader(moe::fuzz::WriteScratch(data, size, ".gguf"));
  return 0;
}
