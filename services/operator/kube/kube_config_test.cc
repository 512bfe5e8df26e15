#include "services/operator/kube/kube_config.h"

#include <cstdio>
#include <fstream>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/testing/fake_api_server.h"

namespace moe::op::kube {
namespace {

using common::testing::StatusIs;

std::string TempDir() {
  char tmpl[] = "/tmp/moe-kubeconfig-XXXXXX";
  return mkdtemp(tmpl);
}
void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(KubeConfigTest, ReadsTheCurrentContext) {
  const std::string dir = TempDir();
  Write(dir + "/ca.pem", "CA");
  Write(dir + "/config", R"(
apiVersion: v1
kind: Config
current-context: b
clusters:
- name: one
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Q0FEQVRB}
- name: two
  cluster: {server: "https://k8s.example:8443/", certificate-authority: ca.pem}
users:
- name: u
  user: {token: abc}
contexts:
- name: a
  context: {cluster: one, user: u}
- name: b
  context: {cluster: two, user: u, namespace: moe}
)");
  ASSERT_OK_AND_ASSIGN(KubeConfig c, LoadKubeconfig(dir + "/config"));
  EXPECT_EQ(c.host, "k8s.example");
  EXPECT_EQ(c.port, 8443);
  EXPECT_TRUE(c.tls);
  EXPECT_EQ(c.ca_pem, "CA");
  EXPECT_EQ(c.token, "abc");
  EXPECT_EQ(c.ns, "moe");
  ASSERT_OK_AND_ASSIGN(KubeConfig a, LoadKubeconfig(dir + "/config", "a"));
  EXPECT_EQ(a.host, "10.0.0.1");
  EXPECT_EQ(a.ca_pem, "CADATA");
  EXPECT_EQ(a.ns, "default");
  EXPECT_THAT(LoadKubeconfig(dir + "/config", "zzz"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KubeConfigTest, InClusterFromTheServiceAccount) {
  const std::string dir = TempDir();
  Write(dir + "/token", "tok\n");
  Write(dir + "/ca.crt", "CA");
  Write(dir + "/namespace", "moe\n");
  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "KUBERNETES_SERVICE_HOST") return "10.96.0.1";
    if (k == "KUBERNETES_SERVICE_PORT") return "443";
    return std::nullopt;
  };
  ASSERT_OK_AND_ASSIGN(KubeConfig c, InClusterConfig(env, dir));
  EXPECT_EQ(c.host, "10.96.0.1");
  EXPECT_EQ(c.port, 443);
  EXPECT_EQ(c.ns, "moe");
  EXPECT_EQ(c.token_file, dir + "/token");
  auto none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_THAT(InClusterConfig(none, dir), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(KubeConfigTest, TheFakeServersKubeconfigParses) {
  auto server = testing::FakeApiServer::Start({});
  ASSERT_OK(server.status());
  const std::string dir = TempDir();
  Write(dir + "/kubeconfig", (*server)->Kubeconfig("ns1"));
  ASSERT_OK_AND_ASSIGN(KubeConfig c, LoadKubeconfig(dir + "/kubeconfig"));
  EXPECT_EQ(c.port, (*server)->port());
  EXPECT_EQ(c.token, "test-token");
  EXPECT_EQ(c.ns, "ns1");
  EXPECT_NE(c.ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
}

}  // namespace
}  // namespace moe::op::kube
