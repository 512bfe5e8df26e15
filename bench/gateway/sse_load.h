// A single-threaded poll() HTTP/1.1 load client for `moe bench gateway`: opens one connection per
// request, all at once, and reads every Server-Sent-Event stream to its end, timing each token
// (tokens per event from the completions logprobs, so merged text deltas still count right).
//
// An event loop, not common/http's blocking HttpClient: a thousand streams on a thread each
// would measure the client's scheduling instead of the gateway. It shares the client's request
// bytes (FormatRequest) and response parser (common/http/response_parser.h).
#pragma once

#include <string>
#include <vector>

namespace moe::bench {

struct StreamStats {
  int status = 0;
  bool done = false;   // saw "data: [DONE]"
  bool error = false;  // an SSE error event, a non-200 status or a broken connection
  std::string error_text;
  std::vector<double> token_s;  // arrival of each token, seconds after the request was sent
  double end_s = -1;
};

struct LoadResult {
  std::vector<StreamStats> streams;
  int peak_open = 0;  // streams whose headers arrived and that had not ended, at most at once
  double wall_s = 0;
};

// POSTs each body to 127.0.0.1:port `path` on its own connection, concurrently.
LoadResult RunStreams(int port, const std::string& path, const std::vector<std::string>& bodies,
                      double timeout_s);

}  // namespace moe::bench
