// A single-threaded poll() HTTP/1.1 load client for the benchmarks (`moe bench gateway`, `moe
// bench serve`): one connection per request, sent on a schedule (a start time, an optional
// request it waits for, a concurrency cap), reading every Server-Sent-Event stream to its end
// and timing each content chunk and token (tokens per event from the completions logprobs when
// asked, so merged text deltas still count right; usage from a final usage chunk).
//
// An event loop, not common/http's blocking HttpClient: a thousand streams on a thread each
// would measure the client's scheduling instead of the server. It shares the client's request
// bytes (FormatRequest) and response parser (common/http/response_parser.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::bench {

struct StreamStats {
  int status = 0;
  bool done = false;   // saw "data: [DONE]", or the stream ended cleanly after a finish_reason
  bool error = false;  // an SSE error event, a non-200 status or a broken connection
  std::string error_text;
  double sent_s = -1;                // when it was sent, seconds after RunStreams began; -1: never
  std::vector<double> token_s;       // arrival of each token, seconds after the request was sent
  std::vector<double> chunk_s;       // arrival of each event with content, seconds after sending
  double end_s = -1;                 // end of the stream, seconds after sending
  int64_t usage_prompt_tokens = -1;  // from a "usage" object, when the server sent one
  int64_t usage_completion_tokens = -1;
};

struct LoadResult {
  std::vector<StreamStats> streams;
  int peak_open = 0;  // streams whose headers arrived and that had not ended, at most at once
  double wall_s = 0;
};

struct StreamRequest {
  std::string body;          // POSTed as application/json
  double start_s = 0;        // not sent before this, seconds after RunStreams began
  int32_t after = -1;        // >= 0: not sent before request `after` has ended (ok or not)...
  double after_delay_s = 0;  // ...plus this
};

struct LoadOptions {
  int max_concurrency = 0;  // > 0: at most this many requests in flight (closed loop)
  double timeout_s = 300;   // the whole run; what is still open then ends with "timeout"
};

// POSTs each request to 127.0.0.1:port `path` on its own connection, when its schedule allows,
// in index order among those ready. A request whose `after` is not an earlier index is an error
// ("bad schedule"), never a hang.
LoadResult RunStreams(int port, const std::string& path, const std::vector<StreamRequest>& requests,
                      const LoadOptions& options);
// Every body at once, no cap.
LoadResult RunStreams(int port, const std::string& path, const std::vector<std::string>& bodies,
                      double timeout_s);

}  // namespace moe::bench
