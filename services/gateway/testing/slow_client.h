// A raw loopback HTTP client that does not read: the gateway tests' slow or stopped reader.
#pragma once

#include <string>

namespace moe::gateway::testing {

// Opens a connection to 127.0.0.1:`port` with a small receive buffer (so that the server's
// writes stall once the kernel buffers are full), sends `body` as a POST to /v1/completions and
// returns the socket without reading anything (-1 on failure; the caller closes it).
//
// 64 KiB, not 1 KiB as the tests had: with a window far under one loopback MSS (64 KiB) the
// receiver may send no window update when the client reads again, leaving the sender to its
// zero-window probes, whose backoff grows with the stall (seconds on a loaded machine) to a
// minute or more. That matches the rare hang http_server_test had under ctest -j2 (recv waiting
// for the last chunk until ctest's timeout); not proven, since it did not reproduce on demand.
int SendCompletionWithoutReading(int port, const std::string& body);

}  // namespace moe::gateway::testing
