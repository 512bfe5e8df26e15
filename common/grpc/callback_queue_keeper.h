// Keeps gRPC's callback-API completion queue polled while the process is idle.
//
// Debian's gRPC (1.51) runs the callback API (client reactors, CallbackService servers) on one
// process-wide fallback completion queue ("CallbackAlternativeCQ", src/cpp/common/
// completion_queue_cc.cc): a few threads wait on it with a 1 s deadline and, each time that passes
// without an event, sleep 100 ms before waiting again. Their waits line up (an event wakes them
// together), so after a second of quiet every one of them is asleep for the same 100 ms, and a
// response or a new call arriving then waits for them: measured, the gateway's first token of a
// request sent 1.0 s after the previous one came 88-98 ms late while the router had sent it in
// 6 ms. Newer gRPC drives that queue from its EventEngine instead.
//
// The keeper gives the queue an event every kInterval (250 ms): a callback-API call that fails at
// once without leaving the process (its deadline has passed; its channel names a Unix socket that
// does not exist), so one of those threads always waited less than a second and none sleeps.
// About four local wake-ups a second; nothing is sent anywhere.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace moe::common::rpc {

inline constexpr absl::Duration kCallbackQueueKeeperInterval = absl::Milliseconds(250);

// Starts the keeper for the life of the process (idempotent, thread-safe). Services that use the
// callback API call it once at start-up (the gateway, the router, the expert worker).
void KeepCallbackQueueAwake();

// Calls the keeper has completed (tests: it runs).
int64_t CallbackQueueKeeperTicks();

}  // namespace moe::common::rpc
