// `moe up [--model DIR] [--config FILE] [--port N] [--set key=value]`: the main job. Makes the
// default model when it is missing (the `small` preset in <repo>/.models/small), starts the local
// cluster as separate processes on loopback (routers, then the gateway; each further service is
// one entry in Services() below plus a section in UpOptions), waits until every process is
// ready, prints the gateway URL and a curl example, and on Ctrl-C (SIGINT/SIGTERM) stops
// everything: the gateway first (it drains), then the rest.
//
// Topology file (optional; every key has a default, `moe up --help` lists them):
//   model_dir: /path/to/checkpoint
//   gateway: {port: 8000, args: ["--set", "limits.max_in_flight=64"]}
//   router: {replicas: 2, args: ["--set", "core.num_threads=2"]}
//   expert_worker: {replicas: 2}   # default 0: experts run inside the routers
//
// Progress goes to stderr; stdout gets the URL and the curl example.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config/loader.h"
#include "common/grpc/channel_factory.h"
#include "common/model/make_model.h"
#include "nlohmann/json.hpp"
#include "tools/moe/command.h"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
namespace config = common::config;

// One kind of service in the topology.
struct ServiceOptions {
  int32_t replicas = 1;
  std::vector<std::string> args;  // extra flags for every replica
  int32_t port = 0;               // gateway: the HTTP port users call (others: 0 = any)

  static void Describe(config::Schema<ServiceOptions>& s) {
    s.Add("replicas", &ServiceOptions::replicas, "processes to start").Range(0, 64);
    s.Add("args", &ServiceOptions::args, "extra command-line flags");
    s.Add("port", &ServiceOptions::port, "fixed port (gateway HTTP); 0 = any free one")
        .Range(0, 65535);
  }
  absl::Status Validate() const { return config::CheckFields(*this); }
};

struct UpOptions {
  std::string model_dir;         // "" = <repo>/.models/<preset>
  std::string preset = "small";  // made when model_dir has no config.json
  std::string host = "127.0.0.1";
  absl::Duration ready_timeout = absl::Seconds(180);
  absl::Duration stop_timeout = absl::Seconds(30);
  ServiceOptions expert_worker{.replicas = 0, .args = {}, .port = 0};  // 0: experts in-process
  ServiceOptions router;
  ServiceOptions gateway{.replicas = 1, .args = {}, .port = 8000};

  static void Describe(config::Schema<UpOptions>& s) {
    s.Add("model_dir", &UpOptions::model_dir, "checkpoint; default <repo>/.models/<preset>");
    s.Add("preset", &UpOptions::preset, "preset made when the model is missing");
    s.Add("host", &UpOptions::host, "loopback address the services bind").NonEmpty();
    s.Add("ready_timeout", &UpOptions::ready_timeout, "wait for readiness at most")
        .Min(absl::Seconds(1));
    s.Add("stop_timeout", &UpOptions::stop_timeout, "grace per service on stop")
        .Min(absl::ZeroDuration());
    s.Section("expert_worker", &UpOptions::expert_worker);
    s.Section("router", &UpOptions::router);
    s.Section("gateway", &UpOptions::gateway);
  }
  absl::Status Validate() const {
    if (absl::Status st = config::CheckFields(*this); !st.ok()) return st;
    if (router.replicas < 1) return absl::InvalidArgumentError("router.replicas: at least 1");
    if (gateway.replicas != 1) return absl::InvalidArgumentError("gateway.replicas: must be 1");
    return absl::OkStatus();
  }
};

struct Process {
  std::string name;  // "router-0"
  pid_t pid = -1;
  nlohmann::json listening;  // the service's listening line
  std::thread stdout_pump;
};

// What later services need to know about earlier ones.
struct Cluster {
  UpOptions options;
  std::string model_dir;
  std::string bin_dir;
  int num_experts = 0;  // routed experts per MoE layer (config.json)
  std::vector<std::unique_ptr<Process>> processes;

  std::vector<std::string> Addresses(const std::string& service, const char* port_key) const {
    std::vector<std::string> out;
    for (const auto& p : processes) {
      if (p->name.rfind(service + "-", 0) == 0 && p->listening.contains(port_key)) {
        out.push_back(absl::StrCat(options.host, ":", p->listening[port_key].get<int>()));
      }
    }
    return out;
  }
};

// One service kind: how many, its flags, and how to tell it is ready.
struct ServiceSpec {
  std::string name;  // "router": binary <bin>/<name>, processes <name>-<i>
  std::string binary;
  const ServiceOptions* options;
  std::function<std::vector<std::string>(const Cluster&, int index)> flags;
  std::function<absl::StatusOr<bool>(const Cluster&, const Process&)> ready;
};

absl::StatusOr<bool> GrpcServing(const Cluster& c, const Process& p) {
  if (!p.listening.contains("grpc")) return absl::InternalError(p.name + ": no grpc port");
  auto channel =
      common::rpc::CreateChannel(absl::StrCat(c.options.host, ":", p.listening["grpc"].get<int>()));
  if (!channel.ok()) return channel.status();
  absl::StatusOr<bool> serving = common::rpc::CheckServing(**channel, "", absl::Seconds(1));
  return serving.ok() && *serving;
}

// HTTP GET status code on loopback (0 when it cannot be reached).
int HttpGetStatus(const std::string& host, int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  int status = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[64] = {};
      const ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, 0);
      if (n > 12) status = std::atoi(buf + 9);
    }
  }
  ::close(fd);
  return status;
}

absl::StatusOr<bool> HttpReady(const Cluster& c, const Process& p) {
  if (!p.listening.contains("http")) return absl::InternalError(p.name + ": no http port");
  return HttpGetStatus(c.options.host, p.listening["http"].get<int>(), "/readyz") == 200;
}

// The topology, in start order. A new service (expert workers, kv-store, ...) is one entry here
// and one section in UpOptions.
std::vector<ServiceSpec> Services(const Cluster& c) {
  std::vector<ServiceSpec> specs;
  specs.push_back(
      ServiceSpec{"expert_worker", "expert-worker", &c.options.expert_worker,
                  [](const Cluster& c, int) {
                    // Every worker holds every expert; routers spread calls over the replicas.
                    return std::vector<std::string>{
                        "--set", "core.model_dir=" + c.model_dir,
                        "--set", absl::StrCat("core.experts=*:0-", std::max(0, c.num_experts - 1)),
                        "--set", "grpc.host=" + c.options.host,
                        "--set", "grpc.port=0",
                        "--set", "metrics.host=" + c.options.host,
                        "--set", "metrics.port=0"};
                  },
                  GrpcServing});
  specs.push_back(ServiceSpec{
      "router", "router", &c.options.router,
      [](const Cluster& c, int i) {
        std::vector<std::string> flags = {"--set", "core.model_dir=" + c.model_dir,
                                          "--set", "grpc.host=" + c.options.host,
                                          "--set", "grpc.port=0",
                                          "--set", "metrics.host=" + c.options.host,
                                          "--set", "metrics.port=0",
                                          "--set", absl::StrCat("router_id=router-", i)};
        const std::vector<std::string> workers = c.Addresses("expert_worker", "grpc");
        if (!workers.empty()) {
          flags.push_back("--set");
          flags.push_back("experts.workers=" + absl::StrJoin(workers, ","));
          // Router and workers share this machine's cores: micro-batch ping-pong only adds
          // contention when there are none to spare (0.83-0.89x on 2 vCPUs, README).
          if (std::thread::hardware_concurrency() < 4) {
            flags.push_back("--set");
            flags.push_back("core.micro_batches=1");
          }
        }
        return flags;
      },
      GrpcServing});
  specs.push_back(ServiceSpec{
      "gateway", "gateway", &c.options.gateway,
      [](const Cluster& c, int) {
        return std::vector<std::string>{
            "--set", "model_dir=" + c.model_dir,
            "--set", "http.host=" + c.options.host,
            "--set", absl::StrCat("http.port=", c.options.gateway.port),
            "--set", "routing.routers=" + absl::StrJoin(c.Addresses("router", "grpc"), ",")};
      },
      HttpReady});
  return specs;
}

void Progress(const std::string& msg) {
  std::fprintf(stderr, "moe up: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

absl::Status EnsureModel(const UpOptions& options, const std::string& dir) {
  if (fs::exists(fs::path(dir) / "config.json")) return absl::OkStatus();
  absl::StatusOr<model::Preset> preset = model::ParsePreset(options.preset);
  if (!preset.ok()) return preset.status();
  Progress(
      absl::StrCat("making the '", options.preset, "' model in ", dir, " (first run only)..."));
  model::MakeModelOptions make;
  make.preset = *preset;
  int last_pct = -1;
  make.progress = [&last_pct](int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (pct / 10 != last_pct / 10) {
      std::fprintf(stderr, "moe up:   weights %d%%\n", pct);
      last_pct = pct;
    }
  };
  const std::string tmp = dir + ".partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (absl::Status s = model::MakeModel(make, tmp); !s.ok()) return s;
  fs::remove_all(dir, ec);
  fs::create_directories(fs::path(dir).parent_path(), ec);
  fs::rename(tmp, dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot move the model to ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

// fork/exec with stdout on a pipe; the child's stderr is ours. The signal mask is restored in
// the child (the parent blocks SIGINT/SIGTERM to take them with sigwait).
absl::StatusOr<std::unique_ptr<Process>> Spawn(const std::string& name, const std::string& binary,
                                               const std::vector<std::string>& args,
                                               const sigset_t& child_mask, absl::Duration timeout) {
  int fds[2];
  if (::pipe(fds) != 0) return absl::InternalError("pipe failed");
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "moe up: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  auto p = std::make_unique<Process>();
  p->name = name;
  p->pid = pid;
  // Read the listening line (with a deadline), then forward the rest of stdout to stderr.
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fds[0], &set);
    timeval tv{0, 200'000};
    if (::select(fds[0] + 1, &set, nullptr, nullptr, &tv) <= 0) {
      int wstatus;
      if (::waitpid(pid, &wstatus, WNOHANG) == pid) {
        p->pid = -1;
        ::close(fds[0]);
        return absl::InternalError(absl::StrCat(name, " exited during start-up"));
      }
      continue;
    }
    char c;
    const ssize_t n = ::read(fds[0], &c, 1);
    if (n <= 0) break;
    if (c == '\n') {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("event", "") == "listening") {
        p->listening = std::move(j);
        break;
      }
      std::fprintf(stderr, "[%s] %s\n", name.c_str(), line.c_str());
      line.clear();
    } else {
      line.push_back(c);
    }
  }
  if (p->listening.is_null()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    p->pid = -1;
    ::close(fds[0]);
    return absl::DeadlineExceededError(absl::StrCat(name, " printed no listening line"));
  }
  const int out = fds[0];
  p->stdout_pump = std::thread([out, name] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(out, buf, sizeof(buf))) > 0) {
      (void)!::write(STDERR_FILENO, buf, static_cast<size_t>(n));
    }
    ::close(out);
  });
  return p;
}

// SIGTERM, then SIGKILL after `timeout`. Reaps the process.
void StopProcess(Process& p, absl::Duration timeout) {
  if (p.pid > 0) {
    ::kill(p.pid, SIGTERM);
    const absl::Time deadline = absl::Now() + timeout;
    int status;
    while (::waitpid(p.pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        Progress(p.name + " did not stop in time; killing it");
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    p.pid = -1;
  }
  if (p.stdout_pump.joinable()) p.stdout_pump.join();
}

void StopAll(Cluster& c) {
  // Reverse start order: the gateway drains first, routers last.
  for (auto it = c.processes.rbegin(); it != c.processes.rend(); ++it) {
    if ((*it)->pid > 0) Progress("stopping " + (*it)->name);
    StopProcess(**it, c.options.stop_timeout);
  }
}

// Waits for SIGINT/SIGTERM (returns 0) or for a child to exit (returns 1).
int WaitForSignalOrExit(Cluster& c) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  for (;;) {
    timespec ts{1, 0};
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) return 0;
    for (auto& p : c.processes) {
      int status;
      if (p->pid > 0 && ::waitpid(p->pid, &status, WNOHANG) == p->pid) {
        Progress(absl::StrCat(p->name, " exited unexpectedly (status ", status, "); stopping"));
        p->pid = -1;
        return 1;
      }
    }
  }
}

int RunUp(const Args& args, const std::vector<std::string>& argv) {
  std::vector<const char*> cargv = {"moe-up"};
  std::vector<config::FlagAlias> aliases = {
      {"model", "model_dir"}, {"port", "gateway.port"}, {"routers", "router.replicas"}};
  for (const std::string& a : argv) cargv.push_back(a.c_str());
  auto cl = config::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data(), aliases);
  if (!cl.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(config::DescribeKeys<UpOptions>().c_str(), stdout);
    return 0;
  }
  auto options = config::LoadOptions<UpOptions>(*cl);
  if (options.ok()) {
    if (absl::Status s = options->Validate(); !s.ok()) options = s;
  }
  if (!options.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  Cluster c;
  c.options = *options;
  c.bin_dir = SelfDir();
  c.model_dir = options->model_dir.empty()
                    ? (fs::path(MOE_SOURCE_DIR) / ".models" / options->preset).string()
                    : options->model_dir;
  c.model_dir = fs::absolute(c.model_dir).lexically_normal().string();

  // Signals are taken with sigwait; children get the original mask back.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &block, &old);

  if (absl::Status s = EnsureModel(*options, c.model_dir); !s.ok()) {
    std::fprintf(stderr, "moe up: model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  {
    std::ifstream in(fs::path(c.model_dir) / "config.json");
    nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    if (!config.is_discarded() && config.is_object()) {
      c.num_experts = config.value("num_local_experts", config.value("num_experts", 0));
    }
  }
  const absl::Time start = absl::Now();
  absl::Status failure = absl::OkStatus();
  for (const ServiceSpec& spec : Services(c)) {
    for (int i = 0; i < spec.options->replicas && failure.ok(); ++i) {
      const std::string name = absl::StrCat(spec.name, "-", i);
      std::vector<std::string> flags = spec.flags(c, i);
      flags.insert(flags.end(), spec.options->args.begin(), spec.options->args.end());
      const std::string binary = (fs::path(c.bin_dir) / spec.binary).string();
      if (!fs::exists(binary)) {
        failure =
            absl::NotFoundError(absl::StrCat(binary, " is not built (ninja ", spec.binary, ")"));
        break;
      }
      Progress(absl::StrCat("starting ", name, "..."));
      auto p = Spawn(name, binary, flags, old, options->ready_timeout);
      if (!p.ok()) {
        failure = p.status();
        break;
      }
      c.processes.push_back(std::move(p).value());
    }
    if (!failure.ok()) break;
  }
  // Readiness of every process.
  if (failure.ok()) {
    const ServiceSpec* spec_of = nullptr;
    std::vector<ServiceSpec> specs = Services(c);
    for (const auto& p : c.processes) {
      for (const ServiceSpec& s : specs) {
        if (p->name.rfind(s.name + "-", 0) == 0) spec_of = &s;
      }
      Progress(absl::StrCat("waiting for ", p->name, " to be ready..."));
      for (;;) {
        absl::StatusOr<bool> ready = spec_of->ready(c, *p);
        if (ready.ok() && *ready) break;
        int status;
        if (::waitpid(p->pid, &status, WNOHANG) == p->pid) {
          p->pid = -1;
          failure = absl::InternalError(p->name + " exited before it was ready");
          break;
        }
        if (absl::Now() - start > options->ready_timeout) {
          failure = absl::DeadlineExceededError(p->name + " is not ready in time");
          break;
        }
        absl::SleepFor(absl::Milliseconds(100));
      }
      if (!failure.ok()) break;
    }
  }
  if (!failure.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(failure.message()).c_str());
    StopAll(c);
    return 1;
  }
  const std::string url = absl::StrCat("http://", c.options.host, ":",
                                       c.Addresses("gateway", "http").empty()
                                           ? 0
                                           : c.processes.back()->listening["http"].get<int>());
  const std::string model = fs::path(c.model_dir).filename().string();
  std::printf(
      "moe up: ready in %.1f s. OpenAI-compatible API at %s/v1 (model \"%s\")\n"
      "  curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n"
      "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], "
      "\"max_tokens\": 32}'\n"
      "Press Ctrl-C to stop.\n",
      absl::ToDoubleSeconds(absl::Now() - start), url.c_str(), model.c_str(), url.c_str(),
      model.c_str());
  std::printf("%s\n",
              nlohmann::json{{"event", "ready"}, {"url", url}, {"model", model}}.dump().c_str());
  std::fflush(stdout);
  const int rc = WaitForSignalOrExit(c);
  StopAll(c);
  Progress("stopped");
  (void)args;
  return rc;
}

MOE_REGISTER_COMMAND("up", "starts the local cluster (router + gateway) and prints its URL", RunUp);

}  // namespace
}  // namespace moe::cli
