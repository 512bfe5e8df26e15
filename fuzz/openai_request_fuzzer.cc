// JSON request bodies of /v1/chat/completions and /v1/completions into the gateway's parser.
// The first byte picks the endpoint; the rest is the body.
#include <cstdint>
#include <string_view>

#include "services/gateway/core/api_error.h"
#include "services/gateway/core/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moe::gateway;
  if (size == 0) return 0;
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::kCompletions : Endpoint::kChatCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  CompletionRequest request;
  ApiError error;
  const bool ok = ParseCompletionRequest(endpoint, body, RequestLimits{}, &request, &error);
  if (!ok && error.message.empty()) __builtin_trap();  // every rejection says why
  return 0;
}
