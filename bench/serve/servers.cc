#include "bench/serve/servers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/http/http_client.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {
namespace {

namespace fs = std::filesystem;
using common::process::ChildProcess;

// A port nobody listens on now (llama-server has no port 0 + listening line).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > 600 ? s.substr(s.size() - 600) : s;
}

// Busy and total jiffies of all CPUs (the first line of /proc/stat); nullopt where unreadable.
std::optional<std::pair<int64_t, int64_t>> CpuJiffies() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  if (!(f >> cpu) || cpu != "cpu") return std::nullopt;
  int64_t total = 0, idle = 0, v = 0;
  for (int i = 0; i < 8 && (f >> v); ++i) {  // user nice system idle iowait irq softirq steal
    total += v;
    if (i == 3 || i == 4) idle += v;
  }
  return std::make_pair(total - idle, total);
}

}  // namespace

void RunningServer::Stop() {
  if (child) {
    child->Stop(absl::Seconds(20));
    child.reset();
  }
}

absl::StatusOr<RunningServer> StartCluster(const ClusterOptions& o) {
  const std::string name = o.name.empty() ? absl::StrCat(o.expert_workers) : o.name;
  nlohmann::json router_args = {"--set", absl::StrCat("core.num_threads=", o.router_threads),
                                "--set", "core.scheduler.max_waiting=8192"};
  for (const std::string& a : o.router_args) router_args.push_back(a);
  nlohmann::json config = {
      {"model_dir", o.model_dir},
      {"gateway",
       {{"port", 0},
        {"args", {"--set", "limits.max_in_flight=4096", "--set", "http.max_connections=8192"}}}},
      {"router", {{"replicas", 1}, {"args", router_args}}},
      {"expert_worker",
       {{"replicas", o.expert_workers},
        {"args", {"--set", absl::StrCat("core.threads_per_call=", o.worker_threads)}}}}};
  if (!o.kv_store_args.empty()) config["kv_store"] = {{"args", o.kv_store_args}};
  if (o.fresh_data) {
    const fs::path data = fs::path(o.work_dir) / absl::StrCat("moe-data-", name);
    std::error_code ec;
    fs::remove_all(data, ec);
    fs::create_directories(data, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", data.string()));
    config["data_dir"] = fs::absolute(data).string();
  }
  const std::string path = (fs::path(o.work_dir) / absl::StrCat("moe-up-", name, ".yaml")).string();
  {
    std::ofstream out(path);
    out << config.dump(2) << "\n";  // JSON is YAML
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  auto child = ChildProcess::Spawn(
      {.argv = {o.moe_binary, "up", "--config", path}, .stderr_path = o.stderr_path});
  if (!child.ok()) return child.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(180);
  for (;;) {
    auto line = (*child)->ReadLine(deadline - absl::Now());
    if (!line.ok()) {
      return absl::Status(line.status().code(),
                          absl::StrCat("moe up did not get ready (", line.status().message(),
                                       "); its log ", o.stderr_path, ": ", Tail(o.stderr_path)));
    }
    nlohmann::json j = nlohmann::json::parse(*line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("event", "") != "ready") continue;
    RunningServer s;
    s.system = o.expert_workers > 0 ? "moe-disagg" : "moe";
    s.model = j.value("model", "");
    const std::string url = j.value("url", "");
    const size_t colon = url.rfind(':');
    s.port = colon == std::string::npos ? 0 : std::atoi(url.c_str() + colon + 1);
    if (j.contains("services") && j["services"].is_array()) {
      for (const auto& svc : j["services"]) {
        if (svc.value("service", "") != "router") continue;
        if (svc.contains("metrics")) s.router_metrics_ports.push_back(svc["metrics"].get<int>());
        if (svc.contains("grpc")) s.router_grpc_ports.push_back(svc["grpc"].get<int>());
      }
    }
    if (s.port <= 0) return absl::InternalError(absl::StrCat("moe up: bad ready line ", *line));
    (*child)->DrainStdout();
    s.child = std::move(*child);
    return s;
  }
}

absl::StatusOr<RunningServer> StartLlamaServer(const LlamaServerOptions& o) {
  if (!fs::exists(o.binary)) {
    return absl::NotFoundError(absl::StrCat(
        o.binary, " not found (bench/llamacpp/build-native.sh builds it; or --llama-server PATH)"));
  }
  RunningServer s;
  s.system = "llama-server";
  s.model = fs::path(o.gguf).filename().string();
  s.port = FreePort();
  auto child =
      ChildProcess::Spawn({.argv = {o.binary, "-m", o.gguf, "-t", absl::StrCat(o.threads), "-np",
                                    absl::StrCat(o.parallel), "-c", absl::StrCat(o.context),
                                    "--host", "127.0.0.1", "--port", absl::StrCat(s.port)},
                           .stderr_path = o.stderr_path});
  if (!child.ok()) return child.status();
  (*child)->DrainStdout();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    if (auto code = (*child)->TryWait()) {
      return absl::InternalError(
          absl::StrCat("llama-server exited (code ", *code, "): ", Tail(o.stderr_path)));
    }
    auto r = common::http::HttpCall(s.port, "GET", "/health");
    if (r && r->status == 200) {
      s.child = std::move(*child);
      return s;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError("llama-server: /health not 200 within 120 s");
}

absl::Status ExportGguf(const std::string& moe_binary, const std::string& model_dir,
                        const std::string& gguf) {
  std::error_code ec;
  const fs::path config = fs::path(model_dir) / "config.json";
  if (fs::exists(gguf, ec) && fs::last_write_time(gguf, ec) >= fs::last_write_time(config, ec)) {
    return absl::OkStatus();
  }
  auto r = common::process::RunToExit(
      {.argv = {moe_binary, "export-gguf", "--model", model_dir, "--out", gguf}},
      absl::Seconds(300));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("moe export-gguf exited ", r->exit_code));
  }
  return absl::OkStatus();
}

std::optional<double> ScrapeValue(const std::string& exposition, const std::string& name,
                                  const std::string& labels) {
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    if (!rest.empty() && rest[0] != '{' && rest[0] != ' ') continue;  // a longer name
    absl::string_view series_labels;
    if (!rest.empty() && rest[0] == '{') {
      const size_t close = rest.find('}');
      if (close == absl::string_view::npos) continue;
      series_labels = rest.substr(1, close - 1);
      rest = rest.substr(close + 1);
    }
    if (!labels.empty() && series_labels.find(labels) == absl::string_view::npos) continue;
    double v = 0;
    rest = absl::StripLeadingAsciiWhitespace(rest);
    const size_t space = rest.find(' ');
    if (!absl::SimpleAtod(rest.substr(0, space), &v)) continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

absl::Duration SettleCpu(absl::Duration max_wait) {
  const absl::Time start = absl::Now();
  auto before = CpuJiffies();
  while (before && absl::Now() - start < max_wait) {
    absl::SleepFor(absl::Milliseconds(100));
    auto after = CpuJiffies();
    if (!after) break;
    const int64_t total = after->second - before->second;
    if (total > 0 && (after->first - before->first) * 10 < total) break;
    before = after;
  }
  return absl::Now() - start;
}

}  // namespace moe::bench::serve
