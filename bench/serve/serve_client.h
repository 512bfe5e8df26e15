// Between the workload (workload.h) and the wire (bench/common/sse_load.h): the OpenAI
// /v1/completions request bodies for a workload, and each stream's outcome as serve_stats.h
// reads it. Pure functions; RunWorkload is the one call that uses the network.
#pragma once

#include <string>
#include <vector>

#include "bench/common/sse_load.h"
#include "bench/serve/serve_stats.h"
#include "bench/serve/workload.h"

namespace moe::bench::serve {

// A streamed greedy completion of exactly max_tokens tokens (ignore_eos), with a usage chunk:
//   {"model":M,"prompt":[ids],"max_tokens":N,"temperature":0,"ignore_eos":true,"stream":true,
//    "stream_options":{"include_usage":true}}
// The same body works for the gateway and for llama-server (which ignores "model").
std::string CompletionBody(const std::string& model, const ServeRequest& request);

std::vector<StreamRequest> ToStreamRequests(const std::string& model,
                                            const std::vector<ServeRequest>& requests);

// One outcome per stream: ok when it ended cleanly; output tokens from usage when the server
// sent it, else the tokens counted in the stream; prompt tokens from usage, else the prompt.
std::vector<RequestOutcome> ToOutcomes(const LoadResult& load,
                                       const std::vector<ServeRequest>& requests);

// Sends `requests` to 127.0.0.1:port /v1/completions and returns their outcomes.
std::vector<RequestOutcome> RunWorkload(int port, const std::string& model,
                                        const std::vector<ServeRequest>& requests,
                                        const LoadOptions& options);

}  // namespace moe::bench::serve
