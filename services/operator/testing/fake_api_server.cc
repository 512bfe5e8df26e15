#include "services/operator/testing/fake_api_server.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <regex>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/base/file.h"
#include "common/grpc/testing/test_pki.h"
#include "httplib.h"

namespace moe::op::testing {
namespace {

struct ResourceType {
  std::string group_version;
  std::string plural;
  std::string kind;
  bool namespaced = true;
  bool status_subresource = false;
};

const std::vector<ResourceType>& Types() {
  static const std::vector<ResourceType> types = {
      {"v1", "pods", "Pod", true, true},
      {"v1", "configmaps", "ConfigMap", true, false},
      {"v1", "services", "Service", true, true},
      {"v1", "serviceaccounts", "ServiceAccount", true, false},
      {"v1", "events", "Event", true, false},
      {"v1", "namespaces", "Namespace", false, true},
      {"apps/v1", "statefulsets", "StatefulSet", true, true},
      {"apps/v1", "deployments", "Deployment", true, true},
      {"policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", true, true},
      {"networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", true, false},
      {"autoscaling/v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, true},
      {"coordination.k8s.io/v1", "leases", "Lease", true, false},
      {"moe-cluster.io/v1alpha1", "moeclusters", "MoECluster", true, true},
      {"moe-cluster.io/v1alpha1", "expertpools", "ExpertPool", true, true},
      {"moe-cluster.io/v1alpha1", "routercalibrations", "RouterCalibration", true, true},
  };
  return types;
}

const ResourceType* FindType(const std::string& gv, const std::string& plural) {
  for (const auto& t : Types()) {
    if (t.group_version == gv && t.plural == plural) return &t;
  }
  return nullptr;
}

const ResourceType* FindPlural(const std::string& plural) {
  for (const auto& t : Types()) {
    if (t.plural == plural) return &t;
  }
  return nullptr;
}

struct Target {
  const ResourceType* type = nullptr;
  std::string ns, name, subresource;
};

std::optional<Target> ParsePath(const std::string& path) {
  static const std::regex core(
      R"(^/api/(v1)/(?:namespaces/([^/]+)/)?([a-z0-9]+)(?:/([^/]+))?(?:/([a-z]+))?$)");
  static const std::regex group(
      R"(^/apis/([^/]+/[^/]+)/(?:namespaces/([^/]+)/)?([a-z0-9]+)(?:/([^/]+))?(?:/([a-z]+))?$)");
  std::smatch m;
  if (!std::regex_match(path, m, core) && !std::regex_match(path, m, group)) return std::nullopt;
  Target t;
  t.type = FindType(m[1], m[3]);
  if (t.type == nullptr) return std::nullopt;
  t.ns = m[2];
  t.name = m[4];
  t.subresource = m[5];
  return t;
}

// Leaf paths of an applied object: scalars, lists and empty objects, as "/a/b".
void Leaves(const Json& j, const std::string& prefix, std::set<std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      Leaves(it.value(), prefix + "/" + it.key(), out);
    }
    return;
  }
  out.insert(prefix);
}

bool Ignored(const std::string& path) {
  static const char* kServerFields[] = {"/apiVersion",
                                        "/kind",
                                        "/metadata/name",
                                        "/metadata/namespace",
                                        "/metadata/uid",
                                        "/metadata/resourceVersion",
                                        "/metadata/generation",
                                        "/metadata/creationTimestamp",
                                        "/metadata/managedFields",
                                        "/metadata/deletionTimestamp"};
  for (const char* f : kServerFields) {
    if (path == f || absl::StartsWith(path, std::string(f) + "/")) return true;
  }
  return false;
}

const Json* At(const Json& j, const std::string& path) {
  const Json* cur = &j;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(std::string(part));
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

void Erase(Json& j, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.empty()) return;
  std::vector<Json*> chain = {&j};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Json* cur = chain.back();
    if (!cur->is_object() || !cur->contains(parts[i])) return;
    chain.push_back(&(*cur)[parts[i]]);
  }
  if (chain.back()->is_object()) chain.back()->erase(parts.back());
  // Drop objects left empty by the removal (not the root).
  for (size_t i = chain.size() - 1; i > 0; --i) {
    if (chain[i]->is_object() && chain[i]->empty()) chain[i - 1]->erase(parts[i - 1]);
  }
}

Json Merge(Json under, const Json& over) {
  if (!under.is_object() || !over.is_object()) return over;
  for (auto it = over.begin(); it != over.end(); ++it) {
    under[it.key()] = under.contains(it.key()) ? Merge(under[it.key()], it.value()) : it.value();
  }
  return under;
}

Json MergePatch(Json target, const Json& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = Json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_null()) {
      target.erase(it.key());
    } else {
      target[it.key()] = MergePatch(target.value(it.key(), Json()), it.value());
    }
  }
  return target;
}

bool MatchesSelector(const Json& o, const std::string& selector) {
  if (selector.empty()) return true;
  const Json labels = o.value("metadata", Json::object()).value("labels", Json::object());
  for (absl::string_view req : absl::StrSplit(selector, ',', absl::SkipEmpty())) {
    const size_t ne = req.find("!=");
    const size_t eq = req.find('=');
    if (ne != absl::string_view::npos) {
      const std::string k(req.substr(0, ne)), v(req.substr(ne + 2));
      if (labels.contains(k) && labels[k] == v) return false;
    } else if (eq != absl::string_view::npos) {
      const std::string k(req.substr(0, eq));
      std::string v(req.substr(eq + 1));
      if (!v.empty() && v[0] == '=') v.erase(0, 1);  // "=="
      if (!labels.contains(k) || labels[k] != v) return false;
    } else if (!labels.contains(std::string(req))) {
      return false;
    }
  }
  return true;
}

// The RBAC attributes of a request: verb, API group, "plural[/subresource]".
struct Attributes {
  std::string verb, group, resource;
};
std::optional<Attributes> AttributesOf(const httplib::Request& req) {
  auto t = ParsePath(req.path);
  if (!t.has_value()) return std::nullopt;
  Attributes a;
  const std::string& gv = t->type->group_version;
  a.group = gv.find('/') == std::string::npos ? "" : gv.substr(0, gv.find('/'));
  a.resource = t->type->plural + (t->subresource.empty() ? "" : "/" + t->subresource);
  if (req.method == "GET") {
    a.verb = !t->name.empty() ? "get" : req.has_param("watch") ? "watch" : "list";
  } else if (req.method == "POST") {
    a.verb = "create";
  } else if (req.method == "PUT") {
    a.verb = "update";
  } else if (req.method == "PATCH") {
    a.verb = "patch";
  } else if (req.method == "DELETE") {
    a.verb = t->name.empty() ? "deletecollection" : "delete";
  }
  return a;
}

bool Allowed(const Json& rules, const Attributes& a) {
  auto has = [](const Json& list, const std::string& v) {
    if (!list.is_array()) return false;
    for (const Json& x : list) {
      if (x == v || x == "*") return true;
    }
    return false;
  };
  for (const Json& r : rules) {
    if (has(r.value("apiGroups", Json::array()), a.group) &&
        has(r.value("resources", Json::array()), a.resource) &&
        has(r.value("verbs", Json::array()), a.verb)) {
      return true;
    }
  }
  return false;
}

Json StatusJson(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
          {"code", code},     {"reason", reason},   {"message", message}};
}

std::string Now() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

}  // namespace

struct FakeApiServer::Impl {
  FakeApiServerOptions options;
  httplib::Server* server = nullptr;  // owned by `owned_server`
  std::unique_ptr<httplib::Server> owned_server;
  std::thread thread;

  struct Stored {
    Json object;
    std::map<std::string, std::set<std::string>> managers;  // manager -> leaf paths
  };
  struct Event {
    int64_t rv;
    std::string plural;
    std::string type;
    Json object;
  };
  struct Fault {
    std::string method, path_part;
    int status;
    int times;
  };

  mutable absl::Mutex mu;
  absl::CondVar changed;
  std::map<std::string, std::map<std::string, Stored>> store ABSL_GUARDED_BY(mu);
  std::vector<Event> history ABSL_GUARDED_BY(mu);
  int64_t rv ABSL_GUARDED_BY(mu) = 1;
  int64_t compacted ABSL_GUARDED_BY(mu) = 0;
  int64_t uid ABSL_GUARDED_BY(mu) = 0;
  int drop_generation ABSL_GUARDED_BY(mu) = 0;
  int open_watches ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::vector<Fault> faults ABSL_GUARDED_BY(mu);
  std::vector<Request> requests ABSL_GUARDED_BY(mu);

  static std::string Key(const std::string& ns, const std::string& name) { return ns + "/" + name; }

  void Emit(const std::string& plural, const std::string& type, const Json& object)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    history.push_back({rv, plural, type, object});
    changed.SignalAll();
  }

  // Bumps the resourceVersion into `o` and stores it.
  // Returns the stored object.
  Json Commit(const ResourceType& t, const std::string& key, Stored s, const char* type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++rv;
    s.object["metadata"]["resourceVersion"] = absl::StrCat(rv);
    s.object["apiVersion"] = t.group_version;
    s.object["kind"] = t.kind;
    store[t.plural][key] = s;
    Emit(t.plural, type, s.object);
    return s.object;
  }

  void Remove(const ResourceType& t, const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = store[t.plural].find(key);
    if (it == store[t.plural].end()) return;
    Json o = it->second.object;
    store[t.plural].erase(it);
    ++rv;
    o["metadata"]["resourceVersion"] = absl::StrCat(rv);
    Emit(t.plural, "DELETED", o);
    // Garbage collection: dependents go with their owner.
    const std::string owner_uid = o["metadata"].value("uid", "");
    for (const ResourceType& dt : Types()) {
      std::vector<std::string> dependents;
      for (const auto& [k, s] : store[dt.plural]) {
        for (const Json& ref : s.object["metadata"].value("ownerReferences", Json::array())) {
          if (ref.value("uid", "") == owner_uid) dependents.push_back(k);
        }
      }
      for (const std::string& k : dependents) Delete(dt, k);
    }
  }

  // DELETE semantics: finalizers first.
  void Delete(const ResourceType& t, const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = store[t.plural].find(key);
    if (it == store[t.plural].end()) return;
    Json& meta = it->second.object["metadata"];
    if (!meta.value("finalizers", Json::array()).empty()) {
      if (!meta.contains("deletionTimestamp")) {
        meta["deletionTimestamp"] = Now();
        Commit(t, key, it->second, "MODIFIED");
      }
      return;
    }
    Remove(t, key);
  }

  // After a write: an object being deleted whose last finalizer went is removed.
  void MaybeFinish(const ResourceType& t, const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = store[t.plural].find(key);
    if (it == store[t.plural].end()) return;
    const Json& meta = it->second.object["metadata"];
    if (meta.contains("deletionTimestamp") && meta.value("finalizers", Json::array()).empty()) {
      Remove(t, key);
    }
  }

  Json NewObject(const ResourceType& t, const Target& tg, Json o)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Json& meta = o["metadata"];
    if (t.namespaced) meta["namespace"] = tg.ns;
    meta["uid"] = absl::StrCat("uid-", ++uid);
    meta["creationTimestamp"] = Now();
    meta["generation"] = 1;
    if (t.status_subresource) o.erase("status");
    return o;
  }

  // Whether a main-resource write changed the spec (generation moves).
  static void BumpGeneration(const Json& before, Json& after) {
    Json a = before, b = after;
    for (Json* x : {&a, &b}) {
      x->erase("metadata");
      x->erase("status");
    }
    const int64_t g = before["metadata"].value("generation", int64_t{1});
    after["metadata"]["generation"] = a != b ? g + 1 : g;
  }

  void Reply(httplib::Response& res, int code, const Json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  }
  void Fail(httplib::Response& res, int code, const std::string& reason, const std::string& msg) {
    Reply(res, code, StatusJson(code, reason, msg));
  }

  void Handle(const httplib::Request& req, httplib::Response& res) {
    auto target = ParsePath(req.path);
    if (!target.has_value()) return Fail(res, 404, "NotFound", "no such resource: " + req.path);
    const ResourceType& t = *target->type;
    const std::string key = Key(t.namespaced ? target->ns : "", target->name);
    if (req.method == "GET" && target->name.empty()) {
      if (req.has_param("watch") &&
          (req.get_param_value("watch") == "1" || req.get_param_value("watch") == "true")) {
        return Watch(req, res, *target);
      }
      return ListHandler(req, res, *target);
    }
    absl::MutexLock lock(&mu);
    auto& objects = store[t.plural];
    auto it = objects.find(key);
    if (req.method == "GET") {
      if (it == objects.end())
        return Fail(res, 404, "NotFound", t.plural + " " + key + " not found");
      return Reply(res, 200, it->second.object);
    }
    if (req.method == "DELETE") {
      if (it == objects.end())
        return Fail(res, 404, "NotFound", t.plural + " " + key + " not found");
      Delete(t, key);
      return Reply(res, 200, StatusJson(200, "", "deleted"));
    }
    Json body;
    try {
      body = Json::parse(req.body);
    } catch (const Json::exception& e) {
      return Fail(res, 400, "BadRequest", std::string("body is not JSON: ") + e.what());
    }
    if (req.method == "POST") {
      const std::string name = body.value("metadata", Json::object()).value("name", "");
      if (name.empty()) return Fail(res, 422, "Invalid", "metadata.name is required");
      const std::string k = Key(t.namespaced ? target->ns : "", name);
      if (objects.count(k)) {
        return Fail(res, 409, "AlreadyExists", t.plural + " \"" + name + "\" already exists");
      }
      Stored s;
      s.object = NewObject(t, *target, body);
      Commit(t, k, s, "ADDED");
      return Reply(res, 201, store[t.plural][k].object);
    }
    const bool status_write = target->subresource == "status";
    if (req.method == "PUT") {
      if (it == objects.end())
        return Fail(res, 404, "NotFound", t.plural + " " + key + " not found");
      const std::string want_rv =
          body.value("metadata", Json::object()).value("resourceVersion", "");
      const std::string have_rv = it->second.object["metadata"].value("resourceVersion", "");
      if (!want_rv.empty() && want_rv != have_rv) {
        return Fail(res, 409, "Conflict",
                    "Operation cannot be fulfilled on " + t.plural + " \"" + target->name +
                        "\": the object has been modified; please apply your changes to the "
                        "latest version and try again");
      }
      Stored s = it->second;
      Json next = s.object;
      if (status_write) {
        next["status"] = body.value("status", Json::object());
      } else {
        Json keep_meta = s.object["metadata"];
        next = body;
        for (const char* f :
             {"uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace"}) {
          if (keep_meta.contains(f)) next["metadata"][f] = keep_meta[f];
        }
        if (t.status_subresource) {
          next.erase("status");
          if (s.object.contains("status")) next["status"] = s.object["status"];
        }
        BumpGeneration(s.object, next);
      }
      s.object = next;
      const Json stored = Commit(t, key, s, "MODIFIED");
      MaybeFinish(t, key);
      return Reply(res, 200, stored);
    }
    if (req.method == "PATCH") {
      const std::string ctype = req.get_header_value("Content-Type");
      if (absl::StartsWith(ctype, "application/merge-patch+json")) {
        if (it == objects.end())
          return Fail(res, 404, "NotFound", t.plural + " " + key + " not found");
        Stored s = it->second;
        Json next = MergePatch(s.object, body);
        if (!status_write) BumpGeneration(s.object, next);
        s.object = next;
        const Json stored = Commit(t, key, s, "MODIFIED");
        MaybeFinish(t, key);
        return Reply(res, 200, stored);
      }
      if (!absl::StartsWith(ctype, "application/apply-patch+yaml")) {
        return Fail(res, 415, "UnsupportedMediaType", "patch type " + ctype);
      }
      return Apply(req, res, *target, key, body);
    }
    return Fail(res, 405, "MethodNotAllowed", req.method);
  }

  void Apply(const httplib::Request& req, httplib::Response& res, const Target& tg,
             const std::string& key, Json applied) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const ResourceType& t = *tg.type;
    // Fields are managed per manager and subresource (as metadata.managedFields' `subresource`):
    // a manager's status apply does not release the fields its main apply owns.
    const std::string field_manager = req.get_param_value("fieldManager");
    if (field_manager.empty())
      return Fail(res, 422, "Invalid", "fieldManager is required for apply");
    const std::string manager =
        field_manager + (tg.subresource.empty() ? "" : "/" + tg.subresource);
    const bool force = req.get_param_value("force") == "true";
    const bool status_write = tg.subresource == "status";
    if (applied.value("metadata", Json::object()).value("name", "") != tg.name) {
      return Fail(res, 422, "Invalid", "metadata.name must match the path");
    }
    // What the apply may touch: the status for /status, everything else otherwise.
    if (t.status_subresource) {
      if (status_write) {
        applied = Json{{"metadata", applied["metadata"]},
                       {"status", applied.value("status", Json::object())}};
        applied["metadata"] = Json{{"name", tg.name}};
      } else {
        applied.erase("status");
      }
    }
    auto& objects = store[t.plural];
    auto it = objects.find(key);
    const bool create = it == objects.end();
    if (create && status_write)
      return Fail(res, 404, "NotFound", t.plural + " " + key + " not found");
    Stored s = create ? Stored{} : it->second;
    Json before = create ? Json::object() : s.object;
    std::set<std::string> paths;
    Leaves(applied, "", paths);
    for (auto p = paths.begin(); p != paths.end();) p = Ignored(*p) ? paths.erase(p) : std::next(p);
    // Conflicts: a field another manager owns, with another value.
    std::vector<std::string> conflicts;
    for (const auto& [m, owned] : s.managers) {
      if (m == manager) continue;
      for (const std::string& p : paths) {
        for (const std::string& o : owned) {
          const bool overlap =
              o == p || absl::StartsWith(o, p + "/") || absl::StartsWith(p, o + "/");
          if (!overlap) continue;
          const Json* have = At(before, o);
          const Json* want = At(applied, o);
          if (have != nullptr && (want == nullptr || *have != *want)) {
            conflicts.push_back(absl::StrCat(o, " (", m, ")"));
          }
        }
      }
    }
    if (!conflicts.empty() && !force) {
      return Fail(res, 409, "Conflict",
                  "Apply failed with conflicts: " + absl::StrJoin(conflicts, ", "));
    }
    Json next = create ? NewObject(t, tg, Json::object()) : before;
    // Fields this manager applied before and no longer does (and no one else owns) go.
    for (const std::string& p : s.managers[manager]) {
      if (paths.count(p)) continue;
      bool other = false;
      for (const auto& [m, owned] : s.managers) other = other || (m != manager && owned.count(p));
      if (!other) Erase(next, p);
    }
    next = Merge(next, applied);
    if (create) {
      next = NewObject(t, tg, next);
    } else if (!status_write) {
      BumpGeneration(before, next);
    }
    if (force) {
      for (auto& [m, owned] : s.managers) {
        if (m == manager) continue;
        for (auto o = owned.begin(); o != owned.end();) {
          bool lost = false;
          for (const std::string& p : paths) {
            const Json* have = At(before, *o);
            const Json* want = At(applied, *o);
            const bool overlap =
                *o == p || absl::StartsWith(*o, p + "/") || absl::StartsWith(p, *o + "/");
            lost = lost || (overlap && have != nullptr && (want == nullptr || *have != *want));
          }
          o = lost ? owned.erase(o) : std::next(o);
        }
      }
    }
    s.managers[manager] = paths;
    const bool unchanged = !create && next == before;
    s.object = next;
    if (unchanged) {
      objects[key].managers = s.managers;
      return Reply(res, 200, objects[key].object);
    }
    const Json stored = Commit(t, key, s, create ? "ADDED" : "MODIFIED");
    MaybeFinish(t, key);
    return Reply(res, create ? 201 : 200, stored);
  }

  void ListHandler(const httplib::Request& req, httplib::Response& res, const Target& tg) {
    const std::string selector = req.get_param_value("labelSelector");
    absl::MutexLock lock(&mu);
    Json items = Json::array();
    for (const auto& [k, s] : store[tg.type->plural]) {
      if (tg.type->namespaced && !tg.ns.empty() &&
          s.object["metadata"].value("namespace", "") != tg.ns) {
        continue;
      }
      if (!MatchesSelector(s.object, selector)) continue;
      Json item = s.object;
      item.erase("apiVersion");  // as the API serves lists
      item.erase("kind");
      items.push_back(std::move(item));
    }
    Reply(res, 200,
          {{"apiVersion", tg.type->group_version},
           {"kind", tg.type->kind + "List"},
           {"metadata", {{"resourceVersion", absl::StrCat(rv)}}},
           {"items", items}});
  }

  void Watch(const httplib::Request& req, httplib::Response& res, const Target& tg) {
    struct State {
      int64_t from = 0;
      bool initial = false;  // send the current objects first
      bool gone = false;
      int drop_generation = 0;
      absl::Time end;
      absl::Time next_bookmark;
      bool counted = false;
    };
    auto st = std::make_shared<State>();
    const std::string selector = req.get_param_value("labelSelector");
    const std::string rv_param = req.get_param_value("resourceVersion");
    int64_t timeout_s = 300;
    if (req.has_param("timeoutSeconds")) {
      (void)absl::SimpleAtoi(req.get_param_value("timeoutSeconds"), &timeout_s);
    }
    const bool bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
    {
      absl::MutexLock lock(&mu);
      if (rv_param.empty() || rv_param == "0") {
        st->initial = true;
        st->from = rv;
      } else if (!absl::SimpleAtoi(rv_param, &st->from)) {
        return Fail(res, 400, "BadRequest", "bad resourceVersion");
      } else if (st->from < compacted) {
        st->gone = true;
      }
      st->drop_generation = drop_generation;
      ++open_watches;
      st->counted = true;
    }
    st->end = absl::Now() + absl::Seconds(timeout_s);
    st->next_bookmark = absl::Now() + options.bookmark_interval;
    const Target target = tg;
    res.status = 200;
    res.set_chunked_content_provider(
        "application/json",
        [this, st, target, selector, bookmarks](size_t, httplib::DataSink& sink) {
          const ResourceType& t = *target.type;
          auto in_scope = [&](const Json& o) {
            if (t.namespaced && !target.ns.empty() &&
                o["metadata"].value("namespace", "") != target.ns) {
              return false;
            }
            return MatchesSelector(o, selector);
          };
          auto send = [&](const Json& ev) {
            const std::string line = ev.dump() + "\n";
            return sink.write(line.data(), line.size());
          };
          std::vector<Json> out;
          bool finish = false, drop = false;
          {
            absl::MutexLock lock(&mu);
            if (st->gone) {
              out.push_back(
                  {{"type", "ERROR"},
                   {"object", StatusJson(410, "Expired",
                                         "too old resource version: " + absl::StrCat(st->from) +
                                             " (" + absl::StrCat(compacted) + ")")}});
              finish = true;
            } else if (st->initial) {
              for (const auto& [k, s] : store[t.plural]) {
                if (in_scope(s.object)) out.push_back({{"type", "ADDED"}, {"object", s.object}});
              }
              st->initial = false;
            } else {
              auto pending = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
                if (stopping || drop_generation != st->drop_generation) return true;
                return !history.empty() && history.back().rv > st->from;
              };
              const absl::Time wake = std::min(st->end, st->next_bookmark);
              while (!pending() && absl::Now() < wake) {
                changed.WaitWithDeadline(&mu, wake);
              }
              if (stopping) {
                finish = true;
              } else if (drop_generation != st->drop_generation) {
                drop = true;
              } else {
                auto first = std::upper_bound(history.begin(), history.end(), st->from,
                                              [](int64_t v, const Event& e) { return v < e.rv; });
                for (auto e_it = first; e_it != history.end(); ++e_it) {
                  const Event& e = *e_it;
                  st->from = e.rv;
                  if (e.plural == t.plural && in_scope(e.object)) {
                    out.push_back({{"type", e.type}, {"object", e.object}});
                  }
                }
                st->from = std::max(st->from, rv);
                if (out.empty() && bookmarks && absl::Now() >= st->next_bookmark) {
                  out.push_back({{"type", "BOOKMARK"},
                                 {"object",
                                  {{"apiVersion", t.group_version},
                                   {"kind", t.kind},
                                   {"metadata", {{"resourceVersion", absl::StrCat(rv)}}}}}});
                }
                if (absl::Now() >= st->next_bookmark) {
                  st->next_bookmark = absl::Now() + options.bookmark_interval;
                }
                finish = absl::Now() >= st->end;
              }
            }
          }
          if (drop) {
            Release(st->counted);
            return false;  // the connection closes mid-stream
          }
          for (const Json& ev : out) {
            if (!send(ev)) {
              Release(st->counted);
              return false;
            }
          }
          if (finish) {
            Release(st->counted);
            sink.done();
          }
          return true;
        },
        [this, st](bool) { Release(st->counted); });
  }

  void Release(bool& counted) {
    absl::MutexLock lock(&mu);
    if (counted) --open_watches;
    counted = false;
  }
};

FakeApiServer::FakeApiServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

namespace {

// The test PKI of every server in this process, made once at first use
// (common/grpc/testing/test_pki.h): a CA and a server certificate for localhost / 127.0.0.1.
struct DefaultPki {
  common::rpc::testing::CertFiles ca, server;
};
const DefaultPki& Pki() {
  static const DefaultPki* pki = [] {
    std::string dir = "/tmp/moe_fake_api_pki.XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) std::abort();
    common::rpc::testing::TestPki maker(dir);
    auto* p = new DefaultPki;
    p->ca = maker.Ca("fake-api");
    p->server = maker.Issue(p->ca, "server", {"DNS:localhost", "IP:127.0.0.1"});
    return p;
  }();
  return *pki;
}

}  // namespace

std::string FakeApiServer::TestCaPath() { return Pki().ca.cert_file; }

absl::StatusOr<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(FakeApiServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.tls) {
    const std::string cert = options.cert_path.empty() ? Pki().server.cert_file : options.cert_path;
    const std::string key = options.key_path.empty() ? Pki().server.key_file : options.key_path;
    impl->owned_server = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
  } else {
    impl->owned_server = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *impl->owned_server;
  impl->server = &s;
  if (!s.is_valid()) return absl::InternalError("fake API server: TLS setup failed");
  // Every open watch holds a thread: plenty of them.
  s.new_task_queue = [] { return new httplib::ThreadPool(96); };
  s.set_keep_alive_max_count(1);
  Impl* p = impl.get();
  s.set_pre_routing_handler([p](const httplib::Request& req, httplib::Response& res) {
    const std::string auth = req.get_header_value("Authorization");
    const bool restricted =
        !p->options.restricted_token.empty() && auth == "Bearer " + p->options.restricted_token;
    if (!p->options.token.empty() && auth != "Bearer " + p->options.token && !restricted) {
      p->Fail(res, 401, "Unauthorized", "Unauthorized");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (restricted) {
      auto a = AttributesOf(req);
      if (!a.has_value() || !Allowed(p->options.restricted_rules, *a)) {
        p->Fail(res, 403, "Forbidden",
                a.has_value() ? absl::StrCat("cannot ", a->verb, " resource \"", a->resource,
                                             "\" in API group \"", a->group, "\"")
                              : "forbidden: " + req.path);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    absl::MutexLock lock(&p->mu);
    for (auto& f : p->faults) {
      if (f.times > 0 && f.method == req.method && absl::StrContains(req.path, f.path_part)) {
        --f.times;
        p->Fail(res, f.status, f.status == 409 ? "Conflict" : "InternalError",
                absl::StrCat("injected ", f.status));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto handler = [p](const httplib::Request& req, httplib::Response& res) { p->Handle(req, res); };
  s.Get(".*", handler);
  s.Post(".*", handler);
  s.Put(".*", handler);
  s.Patch(".*", handler);
  s.Delete(".*", handler);
  s.set_logger([p](const httplib::Request& req, const httplib::Response& res) {
    absl::MutexLock lock(&p->mu);
    auto a = AttributesOf(req);
    p->requests.push_back({req.method, req.path, req.get_header_value("User-Agent"),
                           req.get_param_value("fieldManager"), res.status,
                           a.has_value() ? a->verb : "",
                           a.has_value() ? a->group + "/" + a->resource : ""});
  });
  const int port = s.bind_to_any_port("127.0.0.1");
  if (port <= 0) return absl::UnavailableError("fake API server: cannot bind");
  auto listen_returned = std::make_shared<std::atomic<bool>>(false);
  impl->thread = std::thread([&s, listen_returned] {
    s.listen_after_bind();
    listen_returned->store(true);
  });
  // httplib's stop() is a no-op until the listen loop runs, so a server destroyed right after
  // Start() could miss it and hang the join (as common/metrics/metrics_server.cc guards too).
  while (!s.is_running() && !listen_returned->load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return std::unique_ptr<FakeApiServer>(new FakeApiServer(std::move(impl), port));
}

FakeApiServer::~FakeApiServer() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
    impl_->changed.SignalAll();
  }
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string FakeApiServer::Kubeconfig(const std::string& ns, const std::string& token) const {
  std::string ca;
  if (auto c = common::ReadFile(TestCaPath()); c.ok()) ca = absl::Base64Escape(*c);
  const std::string scheme = impl_->options.tls ? "https" : "http";
  return absl::StrCat(
      "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
      "clusters:\n- name: fake\n  cluster:\n    server: ",
      scheme, "://127.0.0.1:", port_, "\n",
      impl_->options.tls ? "    certificate-authority-data: " + ca + "\n" : "",
      "users:\n- name: operator\n  user:\n    token: ",
      token.empty() ? impl_->options.token : token,
      "\ncontexts:\n- name: test\n  context:\n    cluster: fake\n    user: operator\n"
      "    namespace: ",
      ns, "\n");
}

std::optional<Json> FakeApiServer::Get(const std::string& plural, const std::string& ns,
                                       const std::string& name) const {
  const ResourceType* t = FindPlural(plural);
  if (t == nullptr) return std::nullopt;
  absl::MutexLock lock(&impl_->mu);
  auto& objects = impl_->store[plural];
  auto it = objects.find(Impl::Key(t->namespaced ? ns : "", name));
  if (it == objects.end()) return std::nullopt;
  return it->second.object;
}

std::vector<Json> FakeApiServer::List(const std::string& plural, const std::string& ns) const {
  absl::MutexLock lock(&impl_->mu);
  std::vector<Json> out;
  for (const auto& [k, s] : impl_->store[plural]) {
    if (ns.empty() || s.object["metadata"].value("namespace", "") == ns) out.push_back(s.object);
  }
  return out;
}

int64_t FakeApiServer::resource_version() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->rv;
}

void FakeApiServer::DropWatches() {
  absl::MutexLock lock(&impl_->mu);
  ++impl_->drop_generation;
  impl_->changed.SignalAll();
}

void FakeApiServer::Compact() {
  absl::MutexLock lock(&impl_->mu);
  impl_->compacted = impl_->rv;
  impl_->history.clear();
  // Open watches from before are now too old too: they end, and resume with 410.
  ++impl_->drop_generation;
  impl_->changed.SignalAll();
}

void FakeApiServer::FailNext(const std::string& method, const std::string& path_part,
                             int http_status, int times) {
  absl::MutexLock lock(&impl_->mu);
  impl_->faults.push_back({method, path_part, http_status, times});
}

std::vector<FakeApiServer::Request> FakeApiServer::Requests() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->requests;
}

int FakeApiServer::open_watches() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->open_watches;
}

}  // namespace moe::op::testing
