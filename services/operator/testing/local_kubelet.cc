#include "services/operator/testing/local_kubelet.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/file.h"
#include "common/base/log.h"
#include "common/grpc/channel_factory.h"
#include "common/http/http_client.h"
#include "common/process/child_process.h"

extern char** environ;

namespace moe::op::testing {
namespace {

using Json = nlohmann::json;

const kube::Resource kPods{"v1", "pods", true};
using kube::kConfigMaps;
const kube::Resource kStatefulSets{"apps/v1", "statefulsets", true};
const kube::Resource kDeployments{"apps/v1", "deployments", true};

void MakeDirs(const std::string& path) {
  std::string p;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!p.empty()) ::mkdir(p.c_str(), 0755);
    }
    if (i < path.size()) p += path[i];
  }
}

std::string Name(const Json& o) { return o["metadata"].value("name", ""); }

}  // namespace

struct LocalKubelet::Pod {
  struct Container {
    std::string name;
    std::vector<std::string> argv;
    std::unique_ptr<common::process::ChildProcess> child;
    Json probe;
    Json ports;
    std::string log;
  };
  std::string name, ip, dir;
  std::string owner_kind, owner_name;
  Json tmpl;
  std::vector<std::pair<std::string, std::string>> mounts;  // mountPath -> local, longest first
  std::vector<Container> containers;
  bool ready = false;
  bool reported_ready = false;
  int restarts = 0;
  absl::Time next_probe = absl::InfinitePast();
};

LocalKubelet::LocalKubelet(LocalKubeletOptions options, kube::KubeClient& client)
    : options_(std::move(options)), client_(client) {}

LocalKubelet::~LocalKubelet() { Stop(); }

void LocalKubelet::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LocalKubelet::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [n, p] : pods_) names.push_back(n);
  }
  for (const std::string& n : names) StopPod(n);
}

std::vector<LocalKubelet::PodInfo> LocalKubelet::Pods() const {
  absl::MutexLock lock(&mu_);
  std::vector<PodInfo> out;
  for (const auto& [n, p] : pods_) out.push_back({n, p->ip, p->ready, p->restarts});
  return out;
}

std::string LocalKubelet::IpOf(const std::string& pod) {
  absl::MutexLock lock(&mu_);
  auto it = ips_.find(pod);
  if (it != ips_.end()) return it->second;
  const int n = next_ip_++;
  const std::string ip = absl::StrCat("127.1.", n / 250, ".", n % 250 + 2);
  ips_[pod] = ip;
  return ip;
}

std::string LocalKubelet::Log(const std::string& pod, const std::string& container) const {
  return common::ReadFile(absl::StrCat(options_.work_dir, "/", pod, "/", container, ".log"))
      .value_or("");
}

std::string LocalKubelet::Rewrite(const std::string& text, const Pod& pod) {
  // Cluster DNS: "<pod>.<service>.<ns>.svc" -> that pod's address.
  static const std::regex dns(
      R"(([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.([a-z0-9-]+)\.svc(\.cluster\.local)?)");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), dns);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += text.substr(last, static_cast<size_t>(m.position()) - last);
    out += (*it)[4] == options_.ns ? IpOf(m[1]) : m.str();
    last = static_cast<size_t>(m.position() + m.length());
  }
  out += text.substr(last);
  out = absl::StrReplaceAll(out, {{"0.0.0.0", pod.ip}});
  // Mount paths -> local directories, in one pass (a mapped path is never mapped again), as a
  // path prefix only.
  std::string mapped;
  for (size_t i = 0; i < out.size();) {
    const bool boundary_before =
        i == 0 || !(isalnum(static_cast<unsigned char>(out[i - 1])) || out[i - 1] == '_' ||
                    out[i - 1] == '/' || out[i - 1] == '.' || out[i - 1] == '-');
    bool replaced = false;
    if (out[i] == '/' && boundary_before) {
      for (const auto& [from, to] : pod.mounts) {  // longest first
        if (out.compare(i, from.size(), from) != 0) continue;
        const size_t end = i + from.size();
        const char next = end < out.size() ? out[end] : '\0';
        if (next != '\0' && next != '/' && next != '"' && next != '\n' && next != ' ' &&
            next != '\'' && next != ',') {
          continue;
        }
        mapped += to;
        i = end;
        replaced = true;
        break;
      }
    }
    if (!replaced) mapped += out[i++];
  }
  out = std::move(mapped);
  return out;
}

void LocalKubelet::StartPod(const std::string& name, const Json& owner, const Json& tmpl) {
  auto pod = std::make_unique<Pod>();
  pod->name = name;
  pod->ip = IpOf(name);
  pod->dir = absl::StrCat(options_.work_dir, "/", name);
  pod->owner_kind = owner.value("kind", "");
  pod->owner_name = Name(owner);
  pod->tmpl = tmpl;
  MakeDirs(pod->dir);
  const Json spec = tmpl.value("spec", Json::object());
  // Volumes.
  std::map<std::string, std::string> volume_dirs;
  std::vector<std::pair<std::string, Json>> config_maps;
  for (const Json& v : spec.value("volumes", Json::array())) {
    const std::string vn = v.value("name", "");
    if (v.contains("hostPath")) {
      volume_dirs[vn] = v["hostPath"].value("path", "");
    } else {
      volume_dirs[vn] = absl::StrCat(pod->dir, "/volumes/", vn);
      MakeDirs(volume_dirs[vn]);
      if (v.contains("configMap")) config_maps.emplace_back(vn, v["configMap"]);
    }
  }
  std::set<std::pair<std::string, std::string>> mounts;
  auto all_containers = spec.value("initContainers", Json::array());
  for (const Json& c : spec.value("containers", Json::array())) all_containers.push_back(c);
  for (const Json& c : all_containers) {
    for (const Json& m : c.value("volumeMounts", Json::array())) {
      auto it = volume_dirs.find(m.value("name", ""));
      if (it == volume_dirs.end()) continue;
      std::string local = it->second;
      if (m.contains("subPath")) local += "/" + m["subPath"].get<std::string>();
      mounts.insert({m.value("mountPath", ""), local});
    }
  }
  pod->mounts.assign(mounts.begin(), mounts.end());
  std::sort(pod->mounts.begin(), pod->mounts.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [vn, ref] : config_maps) {
    auto cm = client_.Get(kConfigMaps, options_.ns, ref.value("name", ""));
    if (!cm.ok()) {
      MOE_LOG_WARN("kubelet: {}: configMap {}: {}", name, ref.value("name", ""),
                   cm.status().ToString());
      continue;
    }
    for (auto it = (*cm)["data"].begin(); it != (*cm)["data"].end(); ++it) {
      std::ofstream(volume_dirs[vn] + "/" + it.key())
          << Rewrite(it.value().get<std::string>(), *pod);
    }
  }
  auto argv_of = [&](const Json& c) {
    std::vector<std::string> argv;
    for (const Json& a : c.value("args", Json::array())) {
      std::string s = absl::StrReplaceAll(
          a.get<std::string>(), {{"$(POD_NAME)", name}, {"$(POD_NAMESPACE)", options_.ns}});
      argv.push_back(Rewrite(s, *pod));
    }
    if (!argv.empty()) argv[0] = options_.bin_dir + "/" + argv[0];
    return argv;
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("POD_NAME=" + name);
  env.push_back("POD_NAMESPACE=" + options_.ns);
  for (const std::string& e : options_.env) env.push_back(e);
  for (const Json& c : spec.value("initContainers", Json::array())) {
    auto r = common::process::RunToExit({.argv = argv_of(c), .env = env}, absl::Minutes(2));
    if (!r.ok() || r->exit_code != 0) {
      MOE_LOG_WARN("kubelet: {}: init container {} failed", name, c.value("name", ""));
    }
  }
  for (const Json& c : spec.value("containers", Json::array())) {
    Pod::Container ct;
    ct.name = c.value("name", "");
    ct.argv = argv_of(c);
    ct.probe = c.value("readinessProbe", Json());
    ct.ports = c.value("ports", Json::array());
    ct.log = absl::StrCat(pod->dir, "/", ct.name, ".log");
    auto child =
        common::process::ChildProcess::Spawn({.argv = ct.argv, .env = env, .stderr_path = ct.log});
    if (child.ok()) {
      ct.child = *std::move(child);
      ct.child->DrainStdout();
    } else {
      MOE_LOG_WARN("kubelet: {}/{}: {}", name, ct.name, child.status().ToString());
    }
    pod->containers.push_back(std::move(ct));
  }
  // The Pod object: labels and annotations of the template, owned by its workload.
  Json meta = tmpl.value("metadata", Json::object());
  Json obj = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", options_.ns},
                {"labels", meta.value("labels", Json::object())},
                {"annotations", meta.value("annotations", Json::object())},
                {"ownerReferences",
                 {{{"apiVersion", "apps/v1"},
                   {"kind", pod->owner_kind},
                   {"name", pod->owner_name},
                   {"uid", owner["metadata"].value("uid", "")},
                   {"controller", true}}}}}},
              {"spec", {{"containers", spec.value("containers", Json::array())}}}};
  (void)client_.Delete(kPods, options_.ns, name);  // a leftover of an earlier incarnation
  if (auto created = client_.Create(kPods, options_.ns, obj); created.ok()) {
    Json st = *created;
    st["status"] = {{"phase", "Running"},
                    {"podIP", pod->ip},
                    {"conditions", {{{"type", "Ready"}, {"status", "False"}}}}};
    (void)client_.Update(kPods, options_.ns, st, "status");
  }
  absl::MutexLock lock(&mu_);
  pods_[name] = std::move(pod);
}

void LocalKubelet::StopPod(const std::string& name) {
  std::unique_ptr<Pod> pod;
  {
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return;
    pod = std::move(it->second);
    pods_.erase(it);
  }
  // Not ready first (endpoints and the operator see it go), then SIGTERM (drain), then gone.
  if (auto p = client_.Get(kPods, options_.ns, name); p.ok()) {
    Json st = *p;
    st["status"]["conditions"] = {{{"type", "Ready"}, {"status", "False"}}};
    (void)client_.Update(kPods, options_.ns, st, "status");
  }
  for (auto& c : pod->containers) {
    if (c.child) c.child->Stop(options_.stop_grace);
  }
  (void)client_.Delete(kPods, options_.ns, name);
}

void LocalKubelet::Probe(Pod& pod) {
  bool ready = true;
  for (auto& c : pod.containers) {
    if (!c.child || c.child->TryWait().has_value()) {
      // Exited: restart it (restartPolicy Always).
      ready = false;
      std::vector<std::string> env;
      for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
      env.push_back("POD_NAME=" + pod.name);
      env.push_back("POD_NAMESPACE=" + options_.ns);
      for (const std::string& e : options_.env) env.push_back(e);
      auto child = common::process::ChildProcess::Spawn(
          {.argv = c.argv, .env = env, .stderr_path = c.log + ".restart"});
      if (child.ok()) {
        c.child = *std::move(child);
        c.child->DrainStdout();
        ++pod.restarts;
      }
      continue;
    }
    if (c.probe.is_null()) continue;
    auto port_of = [&](const Json& p) {
      if (p.is_number()) return p.get<int>();
      for (const Json& cp : c.ports) {
        if (cp.value("name", "") == p.get<std::string>()) return cp.value("containerPort", 0);
      }
      return 0;
    };
    if (c.probe.contains("grpc")) {
      auto ch =
          common::rpc::CreateChannel(absl::StrCat(pod.ip, ":", port_of(c.probe["grpc"]["port"])));
      auto serving = ch.ok() ? common::rpc::CheckServing(**ch, "", absl::Milliseconds(500))
                             : absl::StatusOr<bool>(ch.status());
      ready = ready && serving.ok() && *serving;
    } else if (c.probe.contains("httpGet")) {
      auto r = common::http::HttpCall(pod.ip, port_of(c.probe["httpGet"]["port"]), "GET",
                                      c.probe["httpGet"].value("path", "/"), absl::Seconds(1));
      ready = ready && r.has_value() && r->status == 200;
    }
  }
  pod.ready = ready;
  if (pod.ready != pod.reported_ready) {
    if (auto p = client_.Get(kPods, options_.ns, pod.name); p.ok()) {
      Json st = *p;
      st["status"] = {{"phase", "Running"},
                      {"podIP", pod.ip},
                      {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}};
      if (client_.Update(kPods, options_.ns, st, "status").ok()) pod.reported_ready = ready;
    }
  }
}

void LocalKubelet::WriteStatus(const Json& owner, const char* plural, int replicas, int ready) {
  const int64_t generation = owner["metadata"].value("generation", int64_t{1});
  Json status = {{"observedGeneration", generation}, {"replicas", replicas},
                 {"readyReplicas", ready},           {"availableReplicas", ready},
                 {"updatedReplicas", replicas},      {"currentReplicas", replicas}};
  const std::string key = absl::StrCat(plural, "/", Name(owner));
  if (last_status_[key] == status && owner.value("status", Json::object()) == status) return;
  Json o = owner;
  o["status"] = status;
  const kube::Resource& r = std::string(plural) == "statefulsets" ? kStatefulSets : kDeployments;
  if (client_.Update(r, options_.ns, o, "status").ok()) last_status_[key] = status;
}

void LocalKubelet::WriteFileSd() {
  if (options_.file_sd.empty()) return;
  Json groups = Json::array();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, pod] : pods_) {
      const Json meta = pod->tmpl.value("metadata", Json::object());
      const Json ann = meta.value("annotations", Json::object());
      const Json labels = meta.value("labels", Json::object());
      for (const auto& c : pod->containers) {
        for (const Json& port : c.ports) {
          Json l = {{"__meta_kubernetes_namespace", options_.ns},
                    {"__meta_kubernetes_pod_name", name},
                    {"__meta_kubernetes_pod_container_name", c.name},
                    {"__meta_kubernetes_pod_container_port_name", port.value("name", "")},
                    {"__meta_kubernetes_pod_phase", "Running"},
                    {"__meta_kubernetes_pod_ready", pod->ready ? "true" : "false"}};
          for (auto it = ann.begin(); it != ann.end(); ++it) {
            std::string k = it.key();
            for (char& ch : k) {
              if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
            }
            if (it.value().is_string()) l["__meta_kubernetes_pod_annotation_" + k] = it.value();
          }
          for (auto it = labels.begin(); it != labels.end(); ++it) {
            std::string k = it.key();
            for (char& ch : k) {
              if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
            }
            if (it.value().is_string()) l["__meta_kubernetes_pod_label_" + k] = it.value();
          }
          groups.push_back(
              {{"targets", {absl::StrCat(pod->ip, ":", port.value("containerPort", 0))}},
               {"labels", l}});
        }
      }
    }
  }
  const std::string tmp = options_.file_sd + ".tmp";
  std::ofstream(tmp) << groups.dump(1);
  std::rename(tmp.c_str(), options_.file_sd.c_str());
}

void LocalKubelet::Sync() {
  std::map<std::string, std::pair<Json, Json>> wanted;  // pod -> (owner, template)
  std::vector<std::pair<Json, const char*>> owners;
  for (const auto& [r, plural] :
       {std::pair{kStatefulSets, "statefulsets"}, std::pair{kDeployments, "deployments"}}) {
    auto list = client_.List(r, options_.ns, "");
    if (!list.ok()) return;
    for (const Json& o : list->items) {
      owners.emplace_back(o, plural);
      const int replicas = o.value("spec", Json::object()).value("replicas", 1);
      for (int i = 0; i < replicas; ++i) {
        wanted[absl::StrCat(Name(o), "-", i)] = {o, o["spec"].value("template", Json::object())};
      }
    }
  }
  std::vector<std::string> running, stale;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [n, p] : pods_) {
      running.push_back(n);
      if (!wanted.count(n)) stale.push_back(n);
    }
  }
  for (const std::string& n : stale) StopPod(n);
  for (const auto& [n, ot] : wanted) {
    if (std::find(running.begin(), running.end(), n) == running.end()) {
      StartPod(n, ot.first, ot.second);
    }
  }
  {
    std::vector<Pod*> pods;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [n, p] : pods_) pods.push_back(p.get());
    }
    // Only this thread adds or removes pods: the pointers stay valid while it probes.
    for (Pod* p : pods) {
      if (absl::Now() < p->next_probe) continue;
      p->next_probe = absl::Now() + absl::Milliseconds(200);
      Probe(*p);
    }
  }
  for (const auto& [o, plural] : owners) {
    int replicas = 0, ready = 0;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [n, p] : pods_) {
        if (p->owner_name == Name(o) && p->owner_kind == o.value("kind", "")) {
          ++replicas;
          ready += p->ready ? 1 : 0;
        }
      }
    }
    WriteStatus(o, plural, replicas, ready);
  }
  WriteFileSd();
}

void LocalKubelet::Run() {
  while (!stop_) {
    Sync();
    absl::SleepFor(options_.poll);
  }
}

}  // namespace moe::op::testing
