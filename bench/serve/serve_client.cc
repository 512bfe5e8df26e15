#include "bench/serve/serve_client.h"

#include "nlohmann/json.hpp"

namespace moe::bench::serve {

std::string CompletionBody(const std::string& model, const ServeRequest& r) {
  nlohmann::ordered_json body;
  body["model"] = model;
  body["prompt"] = r.prompt;
  body["max_tokens"] = r.max_tokens;
  body["temperature"] = 0;
  body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return body.dump();
}

std::vector<StreamRequest> ToStreamRequests(const std::string& model,
                                            const std::vector<ServeRequest>& requests) {
  std::vector<StreamRequest> out;
  out.reserve(requests.size());
  for (const ServeRequest& r : requests) {
    out.push_back({.body = CompletionBody(model, r),
                   .start_s = r.arrival_s,
                   .after = r.after,
                   .after_delay_s = r.after_delay_s});
  }
  return out;
}

std::vector<RequestOutcome> ToOutcomes(const LoadResult& load,
                                       const std::vector<ServeRequest>& requests) {
  std::vector<RequestOutcome> out;
  out.reserve(load.streams.size());
  for (size_t i = 0; i < load.streams.size(); ++i) {
    const StreamStats& s = load.streams[i];
    RequestOutcome o;
    o.ok = s.done && !s.error;
    o.error = o.ok ? "" : (s.error_text.empty() ? "stream did not finish" : s.error_text);
    o.send_s = s.sent_s < 0 ? 0 : s.sent_s;
    o.chunk_s = s.chunk_s;
    o.e2e_s = s.end_s < 0 ? 0 : s.end_s;
    o.output_tokens = s.usage_completion_tokens >= 0 ? s.usage_completion_tokens
                                                     : static_cast<int64_t>(s.token_s.size());
    o.prompt_tokens =
        s.usage_prompt_tokens >= 0
            ? s.usage_prompt_tokens
            : (i < requests.size() ? static_cast<int64_t>(requests[i].prompt.size()) : 0);
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<RequestOutcome> RunWorkload(int port, const std::string& model,
                                        const std::vector<ServeRequest>& requests,
                                        const LoadOptions& options) {
  return ToOutcomes(RunStreams(port, "/v1/completions", ToStreamRequests(model, requests), options),
                    requests);
}

}  // namespace moe::bench::serve
