// Runs a gRPC server for a service: binds host:port (port 0 picks one), serves the registered
// services plus the standard grpc.health.v1 health service, reports readiness as the service
// says (SetServing), and shuts down gracefully: NOT_SERVING first, then in-flight RPCs get up
// to drain_timeout to finish before the rest are cancelled.
//
//   ServerRunner runner(options.grpc);
//   runner.AddService(&echo_service, EchoService::service_full_name());
//   RETURN_IF_ERROR(runner.Start());          // NOT_SERVING until ready.
//   ... warm up ...
//   runner.SetServing(true);
//   rpc::WaitForTerminationSignal();
//   runner.Shutdown();
//
// Thread-safety: AddService and Start are for the owning thread; SetServing, Shutdown, Wait and
// port() may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/auth.h"
#include "common/grpc/tls.h"
#include "grpcpp/server.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace moe::common::rpc {

struct ServerOptions {
  // Address to bind: loopback unless configured otherwise ("0.0.0.0" all IPv4, "::" all; the
  // Helm chart binds all, behind NetworkPolicies and, when enabled, mTLS and auth).
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (read it with port(); it belongs in the "listening" line).
  int port = 0;
  // On shutdown, how long in-flight RPCs may run before they are cancelled. Longer drains lose
  // fewer requests but delay a rollout; Kubernetes' default grace period is 30 s.
  absl::Duration drain_timeout = absl::Seconds(10);
  // Largest message received or sent, bytes (RunExperts batches are the big ones).
  int max_message_bytes = 64 << 20;
  // TLS / mTLS; plaintext when tls.cert_file is empty.
  ServerTlsOptions tls;
  // Who may call which method (common/grpc/auth.h); off by default.
  AuthOptions auth;

  static void Describe(config::Schema<ServerOptions>& s) {
    s.Add("host", &ServerOptions::host, "address to bind").NonEmpty();
    s.Add("port", &ServerOptions::port, "gRPC port; 0 picks a free one").Range(0, 65535);
    s.Add("drain_timeout", &ServerOptions::drain_timeout, "grace for in-flight RPCs on shutdown")
        .Range(absl::ZeroDuration(), absl::Minutes(10));
    s.Add("max_message_bytes", &ServerOptions::max_message_bytes).Range(1 << 16, 1 << 30);
    s.Section("tls", &ServerOptions::tls);
    s.Section("auth", &ServerOptions::auth);
  }
  absl::Status Validate() const {
    if (absl::Status s = config::CheckFields(*this); !s.ok()) return s;
    if (auth.enabled) {
      bool identities = false;
      for (const RoleMembers* m : {&auth.gateway, &auth.router, &auth.admin}) {
        identities = identities || !m->identities.empty();
      }
      if (identities && !tls.require_client_cert) {
        return absl::InvalidArgumentError(
            "auth: identities name client certificates; set tls.require_client_cert (mTLS)");
      }
    }
    return absl::OkStatus();
  }
};

class ServerRunner {
 public:
  explicit ServerRunner(ServerOptions options);
  // Shuts down (with the drain deadline) if still running.
  ~ServerRunner();
  ServerRunner(const ServerRunner&) = delete;
  ServerRunner& operator=(const ServerRunner&) = delete;

  // Registers a service. `service` is not owned and must outlive the runner. `full_name`
  // ("moe.router.v1.Router", the generated `X::service_full_name()`) also gets its own health
  // status; empty = only the server-wide one (""). REQUIRES: before Start().
  void AddService(::grpc::Service* service, std::string full_name = "");

  // Binds and starts serving; health is NOT_SERVING until SetServing(true).
  // Errors: kInvalidArgument (options), kNotFound (TLS file), kUnavailable (cannot bind: port in
  // use), kFailedPrecondition (called twice, or no service added).
  absl::Status Start();

  // The bound port. REQUIRES: Start() succeeded.
  int port() const { return port_; }

  // Readiness, server-wide and for every named service. No-op once shutting down.
  void SetServing(bool serving);

  // Graceful shutdown: NOT_SERVING, stop accepting calls, let in-flight calls finish until
  // now + drain_timeout (or `deadline`), then cancel the rest. Blocks until done; idempotent
  // (a second caller waits for the first). Note: a peer process that holds an idle connection
  // and is not polling acks the GOAWAY only on gRPC's 5 s client backup poll, so such a drain
  // can take up to ~5 s (never past the deadline).
  void Shutdown();
  void Shutdown(absl::Time deadline);

  // Blocks until Shutdown has completed.
  void Wait();

  // The running server, e.g. for InProcessChannel. REQUIRES: Start() succeeded.
  ::grpc::Server* server() { return server_.get(); }

 private:
  enum class State { kNew, kRunning, kDraining, kStopped };

  // Constant after Start().
  const ServerOptions options_;
  std::vector<std::pair<::grpc::Service*, std::string>> services_;
  std::unique_ptr<::grpc::Server> server_;
  int port_ = 0;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
};

}  // namespace moe::common::rpc
