#include "tests/integration/experts_cluster.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/grpc/channel_factory.h"
#include "common/http/http_client.h"
#include "common/process/listening.h"
#include "grpcpp/client_context.h"
#include "nlohmann/json.hpp"

namespace moe::testing {
std::string BinPath(const std::string& name) {
  const char* dir = std::getenv("MOE_BUILD_DIR");
  return absl::StrCat(dir != nullptr ? dir : ".", "/bin/", name);
}

absl::StatusOr<Proc> LaunchService(std::vector<std::string> argv, const std::string& log_path) {
  const std::string binary = argv[0];
  auto child =
      common::process::ChildProcess::Spawn({.argv = std::move(argv), .stderr_path = log_path});
  if (!child.ok()) return child.status();
  Proc p;
  p.child = *std::move(child);
  auto ports = common::process::WaitForListeningLine(*p.child, absl::Seconds(30));
  if (!ports.ok() || (!ports->grpc && !ports->http)) {
    return absl::Status(ports.ok() ? absl::StatusCode::kInternal : ports.status().code(),
                        absl::StrCat(binary, ": no listening line: ", p.child->Stderr()));
  }
  p.grpc_port = ports->grpc.value_or(0);
  p.http_port = ports->http.value_or(0);
  p.metrics_port = ports->metrics.value_or(0);
  // Services print nothing else on stdout; drained all the same, so none can block on it.
  p.child->DrainStdout();
  return p;
}

absl::StatusOr<Proc> StartWorker(const std::string& model_dir,
                                 const std::vector<std::string>& experts, int port,
                                 const std::string& log_path, const std::string& shm_dir) {
  return LaunchService(
      {BinPath("expert-worker"), "--set", "core.model_dir=" + model_dir, "--set",
       "core.experts=" + absl::StrJoin(experts, ","), "--set", "grpc.host=127.0.0.1", "--set",
       absl::StrCat("grpc.port=", port), "--set", "metrics.host=127.0.0.1", "--set",
       "metrics.port=0", "--set", "grpc.drain_timeout=1s", "--set", "shm.dir=" + shm_dir},
      log_path);
}

absl::StatusOr<Proc> StartRouter(const std::string& model_dir,
                                 const std::vector<std::string>& workers,
                                 const std::vector<std::string>& placement, int replicas,
                                 const std::string& dir, const std::string& transport, int port,
                                 const std::string& extra_yaml) {
  static int n = 0;
  const std::string config = absl::StrCat(dir, "/router", ++n, ".yaml");
  std::ofstream f(config);
  f << "core:\n  model_dir: \"" << model_dir << "\"\n  num_threads: 1\n"
    << "grpc:\n  host: 127.0.0.1\n  port: " << port << "\n  drain_timeout: 1s\n"
    << "metrics:\n  host: 127.0.0.1\n  port: 0\n";
  if (!workers.empty()) {
    f << "experts:\n  replicas: " << replicas << "\n  call_timeout: 2s\n"
      << "  probe_interval: 100ms\n  transport: " << transport << "\n  workers:\n";
    for (const auto& w : workers) f << "    - \"" << w << "\"\n";
    if (!placement.empty()) {
      f << "  placement:\n";
      for (const auto& p : placement) f << "    - \"" << p << "\"\n";
    }
  }
  f << extra_yaml;
  f.close();
  return LaunchService({BinPath("router"), "--config", config},
                       absl::StrCat(dir, "/router", n, ".log"));
}

absl::StatusOr<Proc> StartGateway(const std::string& model_dir,
                                  const std::vector<std::string>& routers, const std::string& dir,
                                  const std::vector<std::string>& sets) {
  static int n = 0;
  std::vector<std::string> argv = {BinPath("gateway"),
                                   "--set",
                                   "model_dir=" + model_dir,
                                   "--set",
                                   "http.host=127.0.0.1",
                                   "--set",
                                   "http.port=0",
                                   "--set",
                                   "http.drain_timeout=1s",
                                   "--set",
                                   "routing.routers=" + absl::StrJoin(routers, ",")};
  for (const std::string& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  auto gateway = LaunchService(std::move(argv), absl::StrCat(dir, "/gateway", ++n, ".log"));
  if (!gateway.ok()) return gateway;
  // Ready once it has seen a router up (its /readyz).
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    auto r = common::http::HttpCall(gateway->http_port, "GET", "/readyz");
    if (r && r->status == 200) return gateway;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError("gateway: /readyz not 200 within 30 s");
}

SseResult StreamCompletion(int gateway_port, const std::string& model,
                           const std::vector<int32_t>& prompt, int max_tokens,
                           absl::Duration deadline, const std::function<void()>& on_event) {
  const absl::Time start = absl::Now();
  SseResult r;
  nlohmann::json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens},
                         {"stream", true}, {"temperature", 0}, {"ignore_eos", true}};
  common::http::HttpClient client(gateway_port, deadline);
  auto finish = [&] {
    r.elapsed = absl::Now() - start;
    return r;
  };
  if (!client.Send("POST", "/v1/completions", body.dump())) return finish();
  auto head = client.ReadHeaders();
  if (!head) return finish();
  r.status = head->status;
  if (r.status != 200) {
    std::optional<std::string> error = client.ReadBody(*head);
    if (error) {
      nlohmann::json j = nlohmann::json::parse(*error, nullptr, /*allow_exceptions=*/false);
      r.error = !j.is_discarded() && j.contains("error") && j["error"].is_object()
                    ? j["error"].value("message", *error)
                    : *error;
      r.ended = true;
    }
    return finish();
  }
  std::string pending;
  while (absl::Now() - start < deadline) {
    std::optional<std::string> chunk = client.ReadChunk();
    if (!chunk) break;  // failed, closed or timed out without the last chunk
    if (chunk->empty()) {
      r.ended = true;
      break;
    }
    pending += *chunk;
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (!absl::StartsWith(event, "data: ")) continue;
      const std::string data = event.substr(6);
      if (data == "[DONE]") {
        r.done = true;
      } else {
        nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) {
          r.finish_reason = "malformed event: " + data;  // neither text nor error: lost
        } else if (j.contains("error")) {
          r.error = j["error"].is_object() ? j["error"].value("message", j["error"].dump())
                                           : j["error"].dump();
        } else if (j.contains("choices") && !j["choices"].empty()) {
          const auto& c = j["choices"][0];
          if (c.contains("text") && c["text"].is_string()) r.text += c["text"].get<std::string>();
          if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
            r.finish_reason = c["finish_reason"].get<std::string>();
          }
        }
      }
      if (on_event) on_event();
    }
  }
  return finish();
}

double Metric(const Proc& proc, const std::string& sample) {
  auto r = common::http::HttpCall(proc.metrics_port, "GET", "/metrics");
  if (!r || r->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (absl::StartsWith(line, sample + " ")) {
      double v = -1;
      if (absl::SimpleAtod(line.substr(sample.size() + 1), &v)) return v;
    }
  }
  return -1;
}

std::unique_ptr<moe::router::v1::Router::Stub> RouterStub(const std::string& address) {
  return moe::router::v1::Router::NewStub(*common::rpc::CreateChannel(address));
}

GenerateResult Generate(moe::router::v1::Router::Stub& stub, const std::vector<int32_t>& prompt,
                        int max_tokens, const std::function<void()>& on_token) {
  moe::router::v1::GenerateRequest req;
  static std::atomic<int> id{0};
  req.set_request_id(absl::StrCat("t", id++));
  for (int32_t t : prompt) req.add_prompt_token_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&ctx, req);
  GenerateResult r;
  moe::router::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    r.tokens.insert(r.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    if (resp.finish_reason() != moe::router::v1::FINISH_REASON_UNSPECIFIED) {
      r.finish_reason = resp.finish_reason();
      r.error_message = resp.error_message();
    }
    if (on_token) on_token();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) r.rpc_error = s.error_message();
  return r;
}

std::vector<GenerateResult> GenerateAll(const std::string& router_address,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        int max_tokens, const std::function<void()>& on_token) {
  auto stub = RouterStub(router_address);
  std::vector<GenerateResult> results(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = Generate(*stub, prompts[i], max_tokens, on_token); });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::vector<std::vector<int32_t>> MakePrompts(int n, int len, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(n);
  for (auto& p : out) {
    for (int i = 0; i < len; ++i) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  }
  return out;
}

}  // namespace moe::testing
