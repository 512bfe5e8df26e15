// Request ids for following one request through the cluster (deploy/RUNBOOK.md): the gateway
// takes the client's `x-request-id` header when it is a sane token, or makes one; every answer
// carries it back (the `x-request-id` response header, and `error.request_id` in every error
// body, streamed error events included), the gateway logs one line per request with it, and the
// gRPC backend sends it to the router as `x-request-id` metadata, whose log lines carry it too.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "services/gateway/core/http_types.h"

namespace moe::gateway {

// The header (HTTP and gRPC metadata; lower case, as gRPC requires).
inline constexpr char kRequestIdHeader[] = "x-request-id";

// True for 1..128 characters of [A-Za-z0-9._:/+=-]: safe in a header, a gRPC metadata value, a
// log line and JSON. Other values from clients are replaced by a made id.
bool IsValidRequestId(std::string_view id);

// Wraps `writer` so that the answer carries `request_id` as described above, and logs one line
// when the answer is complete: "gateway: <id> <what> -> <status>" (info; warn for 5xx). `what`
// names the request ("POST /v1/completions"). Thread-safety: as ResponseWriter.
std::shared_ptr<ResponseWriter> WithRequestId(std::shared_ptr<ResponseWriter> writer,
                                              std::string request_id, std::string what);

}  // namespace moe::gateway
