// The informer against the in-test API server: it syncs, follows events, resumes a watch the
// server ended or dropped from the last resourceVersion (no event twice, none lost), moves its
// resourceVersion with bookmarks, and lists again after 410 Gone (the handler sees the
// difference).
#include "services/operator/kube/informer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/kube/http_kube_client.h"
#include "services/operator/testing/fake_api_server.h"

namespace moe::op::kube {
namespace {

using testing::FakeApiServer;

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start({.bookmark_interval = absl::Milliseconds(50)});
    ASSERT_OK(server.status());
    server_ = *std::move(server);
    KubeConfig c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    c.ca_pem = *common::ReadFile(FakeApiServer::TestCaPath());
    c.token = "test-token";
    client_ = std::make_unique<HttpKubeClient>(c, HttpKubeClientOptions{}, registry_);
    writer_ = std::make_unique<HttpKubeClient>(c, HttpKubeClientOptions{}, registry_);
  }
  void TearDown() override {
    client_->CancelWatches();
    if (informer_) informer_->Stop();
  }
  void StartInformer(absl::Duration watch_timeout = absl::Minutes(5),
                     absl::Duration backoff = absl::Milliseconds(10)) {
    informer_ = std::make_unique<Informer>(
        InformerOptions{.resource = kConfigMaps,
                        .ns = "moe",
                        .watch_timeout = watch_timeout,
                        .initial_backoff = backoff},
        *client_, common::SystemClock::Get(), registry_, [this](Informer::Change c, const Json& o) {
          absl::MutexLock lock(&mu_);
          const char* what[] = {"add", "update", "delete"};
          seen_.push_back(absl::StrCat(what[static_cast<int>(c)], ":",
                                       o["metadata"]["name"].get<std::string>()));
        });
    informer_->Start();
    ASSERT_TRUE(informer_->WaitForSync(absl::Seconds(5)));
  }
  void Put(const std::string& name, const std::string& value) {
    Json cm = {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", {{"name", name}}},
               {"data", {{"v", value}}}};
    ASSERT_OK(writer_->Apply(kConfigMaps, "moe", cm, {.field_manager = "test"}).status());
  }
  // Waits until the handler has seen `n` events; returns them joined.
  std::string Seen(size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    absl::MutexLock lock(&mu_);
    auto enough = [&] {
      mu_.AssertHeld();  // the Condition runs it under mu_
      return seen_.size() >= n;
    };
    while (!enough() && absl::Now() < deadline) {
      mu_.AwaitWithDeadline(absl::Condition(&enough), deadline);
    }
    return absl::StrJoin(seen_, " ");
  }
  bool CacheHas(const std::string& name, const std::string& value) {
    auto o = informer_->Get("moe", name);
    return o.has_value() && (*o)["data"]["v"] == value;
  }

  common::metrics::Registry registry_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<HttpKubeClient> client_, writer_;
  std::unique_ptr<Informer> informer_;
  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

TEST_F(InformerTest, SyncsAndFollowsEvents) {
  Put("a", "1");
  StartInformer();
  EXPECT_EQ(Seen(1), "add:a");
  Put("a", "2");
  Put("b", "1");
  ASSERT_OK(writer_->Delete(kConfigMaps, "moe", "a"));
  EXPECT_EQ(Seen(4), "add:a update:a add:b delete:a");
  EXPECT_FALSE(informer_->Get("moe", "a").has_value());
  EXPECT_TRUE(CacheHas("b", "1"));
  EXPECT_EQ(informer_->lists(), 1);
}

TEST_F(InformerTest, ResumesAfterTheServerEndsTheWatch) {
  StartInformer(absl::Seconds(1));
  Put("a", "1");
  EXPECT_EQ(Seen(1), "add:a");
  while (informer_->watches() < 2) absl::SleepFor(absl::Milliseconds(20));  // timed out once
  Put("a", "2");
  EXPECT_EQ(Seen(2), "add:a update:a");
  EXPECT_EQ(informer_->lists(), 1);  // resumed from its resourceVersion, no relist
}

TEST_F(InformerTest, ResumesAfterADroppedConnectionWithoutLosingOrRepeating) {
  StartInformer();
  Put("a", "1");
  EXPECT_EQ(Seen(1), "add:a");
  server_->DropWatches();
  Put("b", "1");  // written while the informer reconnects
  EXPECT_EQ(Seen(2), "add:a add:b");
  EXPECT_EQ(informer_->lists(), 1);
  EXPECT_GE(informer_->watches(), 2);
  EXPECT_TRUE(CacheHas("b", "1"));
}

TEST_F(InformerTest, BookmarksMoveTheResourceVersion) {
  StartInformer();
  const std::string before = informer_->resource_version();
  // Writes elsewhere (another namespace) reach this watch only as bookmarks.
  Json other = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "z"}}}};
  ASSERT_OK(writer_->Apply(kConfigMaps, "elsewhere", other, {.field_manager = "t"}).status());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (informer_->resource_version() == before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(informer_->resource_version(), before);
  EXPECT_EQ(Seen(0), "");
}

TEST_F(InformerTest, GoneListsAgainAndReportsTheDifference) {
  Put("a", "1");
  Put("b", "1");
  StartInformer();
  EXPECT_EQ(Seen(2), "add:a add:b");
  // While the history is compacted away, "a" changes, "b" goes, "c" comes.
  informer_->Stop();  // not watching: the changes happen behind its back
  informer_.reset();
  {
    absl::MutexLock lock(&mu_);
    seen_.clear();
  }
  Put("a", "2");
  ASSERT_OK(writer_->Delete(kConfigMaps, "moe", "b"));
  Put("c", "1");
  server_->Compact();
  StartInformer(absl::Minutes(5), absl::Milliseconds(200));  // a fresh one lists
  EXPECT_EQ(Seen(2), "add:a add:c");
  {
    absl::MutexLock lock(&mu_);
    seen_.clear();
  }
  // Now the 410 path: the watch drops and cannot come back at once; meanwhile "a" changes and
  // the history is compacted: it resumes from a version that is gone.
  Put("d", "1");
  EXPECT_EQ(Seen(1), "add:d");
  server_->FailNext("GET", "/namespaces/moe/configmaps", 503, 2);
  server_->DropWatches();
  Put("a", "3");
  server_->Compact();
  EXPECT_EQ(Seen(2), "add:d update:a");
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (informer_->lists() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(informer_->lists(), 2);
  EXPECT_TRUE(CacheHas("a", "3"));
}

}  // namespace
}  // namespace moe::op::kube
