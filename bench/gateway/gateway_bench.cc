// `moe bench gateway`: the gateway's own costs, on loopback, with the tiny preset.
//   - 1000 concurrent streaming requests held open through a gateway backed by a real router
//     (and through one backed by the paced fake, which keeps every stream open for about a
//     second): errors, peak concurrently open streams, peak RSS of the gateway process.
//   - gateway-added latency per streamed token: pairs of greedy requests with distinct fresh
//     prompts (no prefix-cache hit), one straight to the router over gRPC and one through the
//     gateway over HTTP/SSE, in alternating order; per pair and token index, arrival through
//     the gateway minus arrival direct (p50/p99; figure gateway_token_overhead_ms_p99).
//   - max sustained requests/s: closed loop of keep-alive clients on a gateway with the fake
//     backend (no model cost), non-stream completions of 8 tokens.
//   - overload: a gateway capped at limits.max_in_flight=8 in front of the real router, flooded
//     by 10x as many closed-loop streaming clients: refusal latency (request sent -> 503/429
//     headers) p50/p99, refusals without Retry-After (must be 0), admitted TTFT p50/p99 beside
//     the same gateway's unloaded TTFT, its peak RSS, and whether the request after the flood is
//     served.
// Processes are the binaries beside `moe` (router, gateway, and moe_bench_fake_gateway: the
// gateway's core and HTTP server in front of the fake backend), started with port 0 under one
// common::process::Supervisor.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/common/sse_load.h"
#include "bench/common/suite.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/supervisor.h"
#include "grpcpp/grpcpp.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using common::process::Supervisor;

// Starts `binary` with `args` up to its listening line (its output discarded) and waits until
// its HTTP /readyz (when it has an HTTP port) answers 200.
absl::StatusOr<const Supervisor::Member*> Start(Supervisor& group, const std::string& name,
                                                const std::string& binary,
                                                std::vector<std::string> args,
                                                absl::Duration ready_timeout) {
  args.insert(args.begin(), binary);
  ASSIGN_OR_RETURN(const Supervisor::Member* m,
                   group.Start(name, {.argv = std::move(args)}, ready_timeout));
  if (m->ports.http) {
    const int port = *m->ports.http;
    RETURN_IF_ERROR(group.WaitReady(
        *m,
        [port]() -> absl::StatusOr<bool> {
          auto r = common::http::HttpCall(port, "GET", "/readyz");
          return r && r->status == 200;
        },
        absl::Now() + ready_timeout, absl::Milliseconds(50)));
  }
  return m;
}

struct FloodResult {
  std::vector<double> refusal_ms;  // send -> refusal headers
  std::vector<double> ttft_ms;     // send -> first token chunk, admitted streams
  int64_t admitted = 0, completed = 0, refused_503 = 0, refused_429 = 0;
  int64_t without_retry_after = 0, other = 0;
};

// One streaming completion on a fresh connection: its status, and the milliseconds to the
// response headers and to the first token chunk (when admitted).
struct Attempt {
  int status = 0;
  bool retry_after = false;
  bool done = false;
  double headers_ms = 0, first_token_ms = -1;
};
Attempt OneStream(int port, const std::string& body) {
  Attempt a;
  const auto start = std::chrono::steady_clock::now();
  auto ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  common::http::HttpClient client(port);
  if (!client.connected() || !client.Send("POST", "/v1/completions", body)) return a;
  auto head = client.ReadHeaders();
  if (!head) return a;
  a.headers_ms = ms();
  a.status = head->status;
  a.retry_after = head->headers.count("retry-after") > 0;
  if (a.status != 200) return a;
  while (auto chunk = client.ReadChunk()) {
    if (chunk->empty()) {
      a.done = true;
      break;
    }
    if (a.first_token_ms < 0 && chunk->find("\"text\"") != std::string::npos) {
      a.first_token_ms = ms();
    }
  }
  return a;
}

// `clients` closed-loop clients for `seconds`, each sending `body` again as soon as it is
// answered (a refused client retries at once, ignoring Retry-After: the worst case).
FloodResult Flood(int port, const std::string& body, int clients, double seconds) {
  FloodResult total;
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      FloodResult mine;
      while (!stop.load()) {
        const Attempt a = OneStream(port, body);
        if (a.status == 200) {
          ++mine.admitted;
          mine.completed += a.done;
          if (a.first_token_ms >= 0) mine.ttft_ms.push_back(a.first_token_ms);
        } else if (a.status == 503 || a.status == 429) {
          ++(a.status == 503 ? mine.refused_503 : mine.refused_429);
          mine.without_retry_after += !a.retry_after;
          mine.refusal_ms.push_back(a.headers_ms);
        } else {
          ++mine.other;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      total.refusal_ms.insert(total.refusal_ms.end(), mine.refusal_ms.begin(),
                              mine.refusal_ms.end());
      total.ttft_ms.insert(total.ttft_ms.end(), mine.ttft_ms.begin(), mine.ttft_ms.end());
      total.admitted += mine.admitted;
      total.completed += mine.completed;
      total.refused_503 += mine.refused_503;
      total.refused_429 += mine.refused_429;
      total.without_retry_after += mine.without_retry_after;
      total.other += mine.other;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (std::thread& t : threads) t.join();
  return total;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

void RaiseFdLimit() {
  rlimit r;
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// Arrival time of each token of one direct gRPC Generate, seconds after the call started.
std::vector<double> DirectTokens(moe::router::v1::Router::Stub& stub,
                                 const std::vector<int32_t>& prompt, int max_tokens) {
  moe::router::v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("bench-", Clock::now().time_since_epoch().count()));
  req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  req.set_logprobs(true);
  grpc::ClientContext ctx;
  const Clock::time_point start = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  moe::router::v1::GenerateResponse resp;
  std::vector<double> times;
  while (reader->Read(&resp)) {
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    for (int i = 0; i < resp.token_ids_size(); ++i) times.push_back(t);
  }
  reader->Finish();
  return times;
}

std::string CompletionBody(const std::string& model, const std::vector<int32_t>& prompt,
                           int max_tokens, bool stream) {
  nlohmann::json body = {{"model", model},   {"prompt", prompt},   {"max_tokens", max_tokens},
                         {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}};
  if (stream) body["logprobs"] = 0;
  return body.dump();
}

absl::StatusOr<BenchReport> RunGatewayBench(const SuiteOptions& options) {
  RaiseFdLimit();
  BenchReport report("gateway");
  const std::string bin = SelfDir();
  const std::string router_bin = bin + "/router", gateway_bin = bin + "/gateway",
                    fake_gateway_bin = bin + "/moe_bench_fake_gateway";
  if (!fs::exists(router_bin) || !fs::exists(gateway_bin) || !fs::exists(fake_gateway_bin)) {
    return absl::FailedPreconditionError(
        "router, gateway and moe_bench_fake_gateway binaries must be built beside moe");
  }
  // The tiny preset (the gateway's costs do not depend on the model) unless a model is given.
  std::string model_dir = options.model_dir;
  if (model_dir.empty()) {
    model_dir = (fs::path(CacheDir(options)) / "gateway-tiny" / "tiny").string();
    if (!fs::exists(fs::path(model_dir) / "config.json")) {
      model::MakeModelOptions make;
      make.preset = model::Preset::kTiny;
      if (absl::Status s = model::MakeModel(make, model_dir); !s.ok()) return s;
    }
  }
  const std::string model = fs::path(model_dir).filename().string();
  const int streams = options.quick ? 200 : 1000;
  const int pairs = options.quick ? 5 : 20;
  const double rps_seconds = options.quick ? 1.0 : 3.0;

  std::fprintf(stderr, "bench gateway: starting router and gateways\n");
  Supervisor group({.stop_grace = absl::Seconds(6), .output_fd = -1, .log = nullptr});
  ASSIGN_OR_RETURN(const Supervisor::Member* router,
                   Start(group, "router", router_bin,
                         {"--set", "core.model_dir=" + model_dir, "--set", "grpc.host=127.0.0.1",
                          "--set", "grpc.port=0", "--set", "metrics.host=127.0.0.1", "--set",
                          "metrics.port=0", "--set", "core.scheduler.max_waiting=8192", "--set",
                          absl::StrCat("core.num_threads=", options.threads)},
                         absl::Seconds(120)));
  if (!router->ports.grpc) return absl::InternalError("router: no grpc port");
  const std::string router_addr = absl::StrCat("127.0.0.1:", *router->ports.grpc);
  const std::vector<std::string> limits = {
      "--set", "http.host=127.0.0.1",       "--set", "http.port=0",
      "--set", "limits.max_in_flight=4096", "--set", "http.max_connections=8192",
      "--set", "http.io_threads=2"};
  auto gateway_args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--set", "model_dir=" + model_dir};
    a.insert(a.end(), limits.begin(), limits.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ASSIGN_OR_RETURN(
      const Supervisor::Member* gw,
      Start(group, "gateway", gateway_bin,
            gateway_args({"--set", "routing.routers=" + router_addr}), absl::Seconds(120)));
  ASSIGN_OR_RETURN(const Supervisor::Member* fake_gw,
                   Start(group, "fake-gateway-paced", fake_gateway_bin,
                         gateway_args({"--set", "token_interval=20ms"}), absl::Seconds(30)));
  ASSIGN_OR_RETURN(const Supervisor::Member* fast_gw, Start(group, "fake-gateway", fake_gateway_bin,
                                                            gateway_args({}), absl::Seconds(30)));
  constexpr int kCapped = 8;  // the overload phase's gateway: limits.max_in_flight
  std::vector<std::string> capped_args = gateway_args({"--set", "routing.routers=" + router_addr});
  for (std::string& a : capped_args) {
    if (a == "limits.max_in_flight=4096") a = absl::StrCat("limits.max_in_flight=", kCapped);
  }
  ASSIGN_OR_RETURN(const Supervisor::Member* capped_gw,
                   Start(group, "gateway-capped", gateway_bin, capped_args, absl::Seconds(120)));
  if (!gw->ports.http || !fake_gw->ports.http || !fast_gw->ports.http || !capped_gw->ports.http) {
    return absl::InternalError("a gateway printed no http port");
  }
  const int gw_port = *gw->ports.http;
  const int fake_port = *fake_gw->ports.http;
  const int fast_port = *fast_gw->ports.http;

  // 1. Gateway-added latency per token (sequential, no contention).
  std::fprintf(stderr, "bench gateway: per-token overhead (%d request pairs)\n", pairs);
  auto channel = grpc::CreateChannel(router_addr, grpc::InsecureChannelCredentials());
  auto stub = moe::router::v1::Router::NewStub(channel);
  std::vector<double> overhead_ms;
  const int overhead_tokens = 32;
  // Each pair: two distinct fresh prompts (neither hits the prefix cache), one direct and one
  // through the gateway, the order alternating from pair to pair so that neither path always
  // runs second; the samples are paired by pair and token index.
  std::mt19937 rng(18);
  auto fresh_prompt = [&] {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 24; ++i) prompt.push_back(3 + static_cast<int32_t>(rng() % 200));
    return prompt;
  };
  for (int p = 0; p < pairs + 1; ++p) {
    const std::vector<int32_t> first = fresh_prompt(), second = fresh_prompt();
    auto via_gateway = [&](const std::vector<int32_t>& prompt) {
      return RunStreams(gw_port, "/v1/completions",
                        {CompletionBody(model, prompt, overhead_tokens, true)}, 60)
          .streams[0]
          .token_s;
    };
    std::vector<double> direct, g;
    if (p % 2 == 0) {
      direct = DirectTokens(*stub, first, overhead_tokens);
      g = via_gateway(second);
    } else {
      g = via_gateway(first);
      direct = DirectTokens(*stub, second, overhead_tokens);
    }
    if (p == 0) continue;  // warm-up
    for (size_t i = 0; i < std::min(direct.size(), g.size()); ++i) {
      overhead_ms.push_back((g[i] - direct[i]) * 1e3);
    }
  }

  // 2. Concurrent streams held open: through the router, and through the paced fake.
  auto hold = [&](int port, int max_tokens, const char* what) -> LoadResult {
    std::fprintf(stderr, "bench gateway: %d concurrent streams (%s)\n", streams, what);
    std::vector<std::string> bodies;
    for (int i = 0; i < streams; ++i) {
      std::vector<int32_t> prompt;
      for (int k = 0; k < 16; ++k) prompt.push_back(3 + (i * 13 + k * 5) % 250);
      bodies.push_back(CompletionBody(model, prompt, max_tokens, true));
    }
    return RunStreams(port, "/v1/completions", bodies, 300);
  };
  auto count_errors = [](const LoadResult& r, std::string* first) {
    int errors = 0;
    for (const StreamStats& s : r.streams) {
      if (s.error || !s.done) {
        if (errors++ == 0) *first = s.error_text;
      }
    }
    return errors;
  };
  LoadResult routed = hold(gw_port, 32, "router backend");
  LoadResult paced = hold(fake_port, 50, "fake backend, 20 ms/token");
  std::string first_routed_error, first_paced_error;
  const int routed_errors = count_errors(routed, &first_routed_error);
  const int paced_errors = count_errors(paced, &first_paced_error);

  // 3. Max sustained requests/s (closed loop, keep-alive, fake backend without pacing).
  std::fprintf(stderr, "bench gateway: requests/s for %.0f s\n", rps_seconds);
  const int clients = 16;
  std::atomic<int64_t> done{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const std::string small = CompletionBody(model, {5, 6, 7, 8}, 8, false);
  const Clock::time_point rps_start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      common::http::HttpClient client(fast_port);
      while (!stop.load()) {
        auto r = client.Request("POST", "/v1/completions", small);
        if (r && r->status == 200) {
          done.fetch_add(1);
        } else {
          failed.fetch_add(1);
          break;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(rps_seconds));
  stop.store(true);
  for (std::thread& t : threads) t.join();
  const double rps = done.load() / std::chrono::duration<double>(Clock::now() - rps_start).count();

  // 4. Overload: 10x the capped gateway's capacity, closed loop.
  const int capped_port = *capped_gw->ports.http;
  const std::string flood_body = CompletionBody(model, {9, 10, 11, 12, 13, 14, 15, 16}, 16, true);
  std::vector<double> unloaded_ttft;
  for (int i = 0; i < (options.quick ? 5 : 20); ++i) {
    const Attempt a = OneStream(capped_port, flood_body);
    if (a.status == 200 && a.first_token_ms >= 0) unloaded_ttft.push_back(a.first_token_ms);
  }
  const double flood_seconds = options.quick ? 1.0 : 3.0;
  std::fprintf(stderr, "bench gateway: overload, %d clients on max_in_flight=%d for %.0f s\n",
               10 * kCapped, kCapped, flood_seconds);
  const FloodResult flood = Flood(capped_port, flood_body, 10 * kCapped, flood_seconds);
  const Attempt after = OneStream(capped_port, flood_body);
  const int64_t rss_capped = capped_gw->child->PeakRssBytes();

  const int64_t rss_routed = gw->child->PeakRssBytes();
  const int64_t rss_paced = fake_gw->child->PeakRssBytes();
  group.StopAll();

  report.Add({"gateway_token_overhead_ms_p99",
              Percentile(overhead_ms, 0.99),
              "ms",
              {{"p50_ms", Percentile(overhead_ms, 0.5)},
               {"tokens", overhead_ms.size()},
               {"request_pairs", pairs},
               {"method",
                "per token index: arrival via gateway SSE minus arrival via direct "
                "router gRPC, same greedy request, sequential"}},
              std::nullopt});
  report.Add({"gateway_token_overhead_ms_p50",
              Percentile(overhead_ms, 0.5),
              "ms",
              {{"tokens", overhead_ms.size()}},
              std::nullopt});
  auto held = [&](const char* name, const LoadResult& r, int errors, const std::string& first,
                  const char* backend, int max_tokens) {
    report.Add({name,
                static_cast<double>(r.streams.size() - errors),
                "streams",
                {{"requested", r.streams.size()},
                 {"errors", errors},
                 {"first_error", first},
                 {"peak_open", r.peak_open},
                 {"wall_s", r.wall_s},
                 {"backend", backend},
                 {"max_tokens", max_tokens}},
                std::nullopt});
  };
  held("gateway_concurrent_streams_ok", routed, routed_errors, first_routed_error, "router (tiny)",
       32);
  held("gateway_concurrent_streams_ok_paced", paced, paced_errors, first_paced_error,
       "fake, 20 ms/token", 50);
  report.Add({"peak_rss_bytes",
              static_cast<double>(rss_routed),
              "bytes",
              {{"process", "gateway (router backend)"},
               {"streams", streams},
               {"paced_fake_gateway_bytes", rss_paced}},
              std::nullopt});
  report.Add({"gateway_requests_per_s",
              rps,
              "req/s",
              {{"clients", clients},
               {"failed", failed.load()},
               {"backend", "fake (no model cost)"},
               {"max_tokens", 8},
               {"seconds", rps_seconds}},
              std::nullopt});
  const nlohmann::json flood_params = {{"capacity_max_in_flight", kCapped},
                                       {"clients", 10 * kCapped},
                                       {"seconds", flood_seconds},
                                       {"admitted", flood.admitted},
                                       {"admitted_completed", flood.completed},
                                       {"refused_503", flood.refused_503},
                                       {"refused_429", flood.refused_429},
                                       {"refused_without_retry_after", flood.without_retry_after},
                                       {"other_status", flood.other},
                                       {"backend", "router (tiny), 16 tokens per stream"}};
  nlohmann::json refusal_params = flood_params;
  refusal_params["p50_ms"] = Percentile(flood.refusal_ms, 0.5);
  refusal_params["method"] =
      "closed-loop clients on fresh connections, retrying at once; request sent -> 503/429 "
      "headers";
  report.Add({"gateway_overload_refusal_ms_p99", Percentile(flood.refusal_ms, 0.99), "ms",
              refusal_params, std::nullopt});
  report.Add({"gateway_overload_refusal_ms_p50",
              Percentile(flood.refusal_ms, 0.5),
              "ms",
              {{"refusals", flood.refusal_ms.size()}},
              std::nullopt});
  report.Add({"gateway_overload_admitted_ttft_ms_p99",
              Percentile(flood.ttft_ms, 0.99),
              "ms",
              {{"p50_ms", Percentile(flood.ttft_ms, 0.5)},
               {"admitted", flood.ttft_ms.size()},
               {"unloaded_ttft_ms_p50", Percentile(unloaded_ttft, 0.5)},
               {"unloaded_ttft_ms_p99", Percentile(unloaded_ttft, 0.99)},
               {"unloaded_requests", unloaded_ttft.size()}},
              std::nullopt});
  report.Add({"gateway_overload_admitted_ttft_ms_p50",
              Percentile(flood.ttft_ms, 0.5),
              "ms",
              {{"unloaded_ttft_ms_p50", Percentile(unloaded_ttft, 0.5)}},
              std::nullopt});
  report.Add({"gateway_overload_recovered",
              after.status == 200 && after.done ? 1.0 : 0.0,
              "bool",
              {{"status_after_flood", after.status}, {"headers_ms", after.headers_ms}},
              std::nullopt});
  report.Add({"gateway_overload_peak_rss_bytes",
              static_cast<double>(rss_capped),
              "bytes",
              {{"process", "gateway (max_in_flight=8, router backend)"}},
              std::nullopt});
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("gateway",
                         "gateway: 1000 held streams + RSS, per-token overhead, requests/s",
                         RunGatewayBench);

}  // namespace moe::bench
