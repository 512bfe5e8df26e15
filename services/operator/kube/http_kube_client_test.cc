// HttpKubeClient against the in-test API server over HTTPS: CRUD with optimistic concurrency,
// server-side apply (managers, conflicts, force, removed fields), the status subresource, watch
// (events, bookmarks, its timeout, 410 Gone, a dropped connection), authentication and TLS.
#include "services/operator/kube/http_kube_client.h"

#include <thread>

#include "common/base/file.h"
#include "common/metrics/registry.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/kube/kube_config.h"
#include "services/operator/testing/fake_api_server.h"

namespace moe::op::kube {
namespace {

using common::testing::IsOk;
using common::testing::StatusIs;
using testing::FakeApiServer;
using ::testing::HasSubstr;

const Resource kStatefulSets{"apps/v1", "statefulsets", true};
const Resource kClusters{"moe-cluster.io/v1alpha1", "moeclusters", true};

class HttpKubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start({.bookmark_interval = absl::Milliseconds(50)});
    ASSERT_OK(server.status());
    server_ = *std::move(server);
    client_ = MakeClient("test-token");
  }
  std::unique_ptr<HttpKubeClient> MakeClient(const std::string& token) {
    KubeConfig c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    auto ca = common::ReadFile(FakeApiServer::TestCaPath());
    EXPECT_OK(ca.status());
    c.ca_pem = *ca;
    c.token = token;
    return std::make_unique<HttpKubeClient>(c, HttpKubeClientOptions{.timeout = absl::Seconds(5)},
                                            registry_);
  }
  static Json ConfigMap(const std::string& name, const Json& data) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"app", "moe"}}}}},
            {"data", data}};
  }

  common::metrics::Registry registry_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<HttpKubeClient> client_;
};

TEST_F(HttpKubeClientTest, CreateGetListUpdateDelete) {
  ASSERT_OK_AND_ASSIGN(Json created,
                       client_->Create(kConfigMaps, "moe", ConfigMap("a", {{"k", "1"}})));
  EXPECT_EQ(created["metadata"]["namespace"], "moe");
  EXPECT_FALSE(created["metadata"]["uid"].get<std::string>().empty());
  EXPECT_THAT(client_->Create(kConfigMaps, "moe", ConfigMap("a", {})),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK(client_->Create(kConfigMaps, "moe", ConfigMap("b", {})).status());
  Json other = ConfigMap("c", {});
  other["metadata"]["labels"]["app"] = "other";
  ASSERT_OK(client_->Create(kConfigMaps, "moe", other).status());

  ASSERT_OK_AND_ASSIGN(ListResult list, client_->List(kConfigMaps, "moe", "app=moe"));
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_EQ(list.items[0]["kind"], "ConfigMap");  // filled in from the list's kind
  EXPECT_FALSE(list.resource_version.empty());

  ASSERT_OK_AND_ASSIGN(Json got, client_->Get(kConfigMaps, "moe", "a"));
  got["data"]["k"] = "2";
  ASSERT_OK_AND_ASSIGN(Json updated, client_->Update(kConfigMaps, "moe", got));
  EXPECT_EQ(updated["data"]["k"], "2");
  // `got` now has a stale resourceVersion: 409 Conflict.
  got["data"]["k"] = "3";
  EXPECT_THAT(client_->Update(kConfigMaps, "moe", got),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("modified")));

  ASSERT_OK(client_->Delete(kConfigMaps, "moe", "a"));
  EXPECT_THAT(client_->Get(kConfigMaps, "moe", "a"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HttpKubeClientTest, ServerSideApplyTracksManagers) {
  Json sts = {{"apiVersion", "apps/v1"},
              {"kind", "StatefulSet"},
              {"metadata", {{"name", "w"}}},
              {"spec", {{"replicas", 2}, {"serviceName", "w"}, {"minReadySeconds", 1}}}};
  ASSERT_OK_AND_ASSIGN(Json a, client_->Apply(kStatefulSets, "moe", sts, {.field_manager = "op"}));
  EXPECT_EQ(a["metadata"]["generation"], 1);
  // The same apply changes nothing (no new resourceVersion).
  ASSERT_OK_AND_ASSIGN(Json b, client_->Apply(kStatefulSets, "moe", sts, {.field_manager = "op"}));
  EXPECT_EQ(b["metadata"]["resourceVersion"], a["metadata"]["resourceVersion"]);
  // Another manager changing a field "op" owns: a conflict without force...
  Json scale = {{"apiVersion", "apps/v1"},
                {"kind", "StatefulSet"},
                {"metadata", {{"name", "w"}}},
                {"spec", {{"replicas", 5}}}};
  EXPECT_THAT(client_->Apply(kStatefulSets, "moe", scale, {.field_manager = "hpa", .force = false}),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("/spec/replicas (op)")));
  // ... taken over with it.
  ASSERT_OK_AND_ASSIGN(Json c,
                       client_->Apply(kStatefulSets, "moe", scale, {.field_manager = "hpa"}));
  EXPECT_EQ(c["spec"]["replicas"], 5);
  EXPECT_EQ(c["metadata"]["generation"], 2);
  // "op" stops applying replicas and minReadySeconds: the field it alone owned goes, the one
  // "hpa" owns stays.
  sts["spec"].erase("replicas");
  sts["spec"].erase("minReadySeconds");
  ASSERT_OK_AND_ASSIGN(Json d, client_->Apply(kStatefulSets, "moe", sts, {.field_manager = "op"}));
  EXPECT_EQ(d["spec"]["replicas"], 5);
  EXPECT_FALSE(d["spec"].contains("minReadySeconds"));
  EXPECT_EQ(d["spec"]["serviceName"], "w");
}

TEST_F(HttpKubeClientTest, StatusSubresourceIsSeparate) {
  Json mc = {{"apiVersion", "moe-cluster.io/v1alpha1"},
             {"kind", "MoECluster"},
             {"metadata", {{"name", "c"}}},
             {"spec", {{"model", {{"name", "tiny"}}}}},
             {"status", {{"placementVersion", 9}}}};
  ASSERT_OK_AND_ASSIGN(Json a, client_->Apply(kClusters, "moe", mc, {.field_manager = "user"}));
  EXPECT_FALSE(a.contains("status"));  // ignored on the main resource
  Json status = {{"apiVersion", "moe-cluster.io/v1alpha1"},
                 {"kind", "MoECluster"},
                 {"metadata", {{"name", "c"}}},
                 {"status", {{"placementVersion", 3}, {"observedGeneration", 1}}},
                 {"spec", {{"model", {{"name", "ignored"}}}}}};
  ASSERT_OK_AND_ASSIGN(Json b, client_->Apply(kClusters, "moe", status,
                                              {.field_manager = "op", .subresource = "status"}));
  EXPECT_EQ(b["status"]["placementVersion"], 3);
  EXPECT_EQ(b["spec"]["model"]["name"], "tiny");
  EXPECT_EQ(b["metadata"]["generation"], 1);  // a status write is not a new generation
  // One manager's fields of the object and of its status are tracked apart: applying the
  // status alone keeps what its main apply set.
  ASSERT_OK(client_->Apply(kClusters, "moe", mc, {.field_manager = "op"}).status());
  ASSERT_OK_AND_ASSIGN(Json c, client_->Apply(kClusters, "moe", status,
                                              {.field_manager = "op", .subresource = "status"}));
  EXPECT_EQ(c["spec"]["model"]["name"], "tiny");
}

TEST_F(HttpKubeClientTest, WatchStreamsEventsAndBookmarks) {
  ASSERT_OK_AND_ASSIGN(ListResult list, client_->List(kConfigMaps, "moe", ""));
  std::vector<std::string> seen;
  int bookmarks = 0;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (void)client_->Create(kConfigMaps, "moe", ConfigMap("x", {}));
    (void)client_->Delete(kConfigMaps, "moe", "x");
  });
  absl::Status s = client_->Watch(
      {.resource = kConfigMaps,
       .ns = "moe",
       .resource_version = list.resource_version,
       .timeout = absl::Seconds(1)},
      [&](const WatchEvent& ev) {
        if (ev.type == WatchEvent::Type::kBookmark) {
          ++bookmarks;
          EXPECT_FALSE(ev.object["metadata"]["resourceVersion"].get<std::string>().empty());
          return true;
        }
        seen.push_back(absl::StrCat(static_cast<int>(ev.type), ":",
                                    ev.object["metadata"]["name"].get<std::string>()));
        return true;
      });
  writer.join();
  EXPECT_OK(s);  // the server's timeout ended it
  EXPECT_EQ(seen, (std::vector<std::string>{"0:x", "2:x"}));
  EXPECT_GT(bookmarks, 3);
}

TEST_F(HttpKubeClientTest, WatchFromACompactedVersionIsGone) {
  ASSERT_OK_AND_ASSIGN(ListResult list, client_->List(kConfigMaps, "moe", ""));
  ASSERT_OK(client_->Create(kConfigMaps, "moe", ConfigMap("y", {})).status());
  server_->Compact();
  EXPECT_THAT(client_->Watch(
                  {.resource = kConfigMaps, .ns = "moe", .resource_version = list.resource_version},
                  [](const WatchEvent&) { return true; }),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("410")));
}

TEST_F(HttpKubeClientTest, ADroppedWatchIsUnavailable) {
  std::thread dropper([&] {
    while (server_->open_watches() == 0) absl::SleepFor(absl::Milliseconds(5));
    server_->DropWatches();
  });
  absl::Status s =
      client_->Watch({.resource = kConfigMaps, .ns = "moe", .timeout = absl::Seconds(30)},
                     [](const WatchEvent&) { return true; });
  dropper.join();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(HttpKubeClientTest, CancelWatchesEndsThemPromptly) {
  std::thread canceller([&] {
    while (server_->open_watches() == 0) absl::SleepFor(absl::Milliseconds(5));
    client_->CancelWatches();
  });
  const absl::Time start = absl::Now();
  absl::Status s = client_->Watch(
      {.resource = kConfigMaps, .ns = "moe", .timeout = absl::Seconds(30), .bookmarks = false},
      [](const WatchEvent&) { return true; });
  canceller.join();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(HttpKubeClientTest, InjectedErrorsMapToTheirCodes) {
  server_->FailNext("GET", "/configmaps/q", 500);
  EXPECT_THAT(client_->Get(kConfigMaps, "moe", "q"), StatusIs(absl::StatusCode::kUnavailable));
  server_->FailNext("PUT", "/configmaps/q", 409);
  EXPECT_THAT(client_->Update(kConfigMaps, "moe", ConfigMap("q", {})),
              StatusIs(absl::StatusCode::kAborted));
}

TEST_F(HttpKubeClientTest, WrongTokenIsUnauthenticated) {
  EXPECT_THAT(MakeClient("nope")->Get(kConfigMaps, "moe", "a"),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

// The harness runs the operator with a token the server authorizes by the chart's Role: a
// request outside the Role's rules is 403 (PERMISSION_DENIED), and the server records it.
TEST_F(HttpKubeClientTest, ARestrictedTokenMayDoOnlyWhatItsRulesAllow) {
  const Json rules = Json::parse(R"([
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
    {"apiGroups": ["moe-cluster.io"], "resources": ["moeclusters/status"], "verbs": ["patch"]}
  ])");
  auto server = FakeApiServer::Start({.restricted_token = "narrow", .restricted_rules = rules});
  ASSERT_OK(server.status());
  server_ = *std::move(server);
  ASSERT_OK(MakeClient("test-token")
                ->Create(kClusters, "moe",
                         {{"apiVersion", "moe-cluster.io/v1alpha1"},
                          {"kind", "MoECluster"},
                          {"metadata", {{"name", "c"}}},
                          {"spec", Json::object()}})
                .status());
  auto narrow = MakeClient("narrow");
  ASSERT_OK(narrow->Create(kConfigMaps, "moe", ConfigMap("a", {{"k", "1"}})).status());
  EXPECT_OK(narrow->Get(kConfigMaps, "moe", "a").status());
  EXPECT_OK(narrow->List(kConfigMaps, "moe", "").status());
  EXPECT_OK(narrow
                ->Apply(kConfigMaps, "moe", ConfigMap("a", {{"k", "2"}}),
                        {.field_manager = "t", .force = true})
                .status());
  EXPECT_THAT(narrow->Delete(kConfigMaps, "moe", "a"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("cannot delete")));
  EXPECT_THAT(narrow->List(kStatefulSets, "moe", ""),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // The status subresource is its own resource: patching it does not allow patching the object.
  const Json cluster = {{"apiVersion", "moe-cluster.io/v1alpha1"},
                        {"kind", "MoECluster"},
                        {"metadata", {{"name", "c"}}},
                        {"status", {{"phase", "x"}}}};
  EXPECT_OK(narrow
                ->Apply(kClusters, "moe", cluster,
                        {.field_manager = "t", .force = true, .subresource = "status"})
                .status());
  EXPECT_THAT(narrow->Apply(kClusters, "moe", cluster, {.field_manager = "t", .force = true}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  std::vector<std::string> refused;
  for (const auto& r : server_->Requests()) {
    if (r.status == 403) refused.push_back(r.verb + " " + r.resource);
  }
  EXPECT_EQ(refused, (std::vector<std::string>{"delete /configmaps", "list apps/statefulsets",
                                               "patch moe-cluster.io/moeclusters"}));
}

TEST_F(HttpKubeClientTest, AServerTheCaDoesNotVouchForIsRefused) {
  KubeConfig c;
  c.host = "127.0.0.1";
  c.port = server_->port();
  c.token = "test-token";
  // The system's CAs do not know the test CA.
  HttpKubeClient untrusting(c, {.timeout = absl::Seconds(5)}, registry_);
  EXPECT_THAT(untrusting.Get(kConfigMaps, "moe", "a"), StatusIs(absl::StatusCode::kUnavailable));
  c.insecure_skip_tls_verify = true;
  HttpKubeClient insecure(c, {.timeout = absl::Seconds(5)}, registry_);
  EXPECT_THAT(insecure.Get(kConfigMaps, "moe", "a"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ResourceTest, Paths) {
  EXPECT_EQ(kConfigMaps.Path("moe", "a"), "/api/v1/namespaces/moe/configmaps/a");
  EXPECT_EQ(kClusters.Path("moe", "c", "status"),
            "/apis/moe-cluster.io/v1alpha1/namespaces/moe/moeclusters/c/status");
  EXPECT_EQ(kStatefulSets.Path(""), "/apis/apps/v1/statefulsets");
}

TEST(StatusFromHttpTest, ByHowToRetry) {
  EXPECT_OK(StatusFromHttp(201, ""));
  EXPECT_THAT(StatusFromHttp(409, R"({"reason": "AlreadyExists", "message": "m"})"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("m")));
  EXPECT_THAT(StatusFromHttp(409, R"({"reason": "Conflict"})"),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(StatusFromHttp(410, ""), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(StatusFromHttp(422, ""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(StatusFromHttp(403, ""), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(StatusFromHttp(429, ""), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(StatusFromHttp(503, ""), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace moe::op::kube
