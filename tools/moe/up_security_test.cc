// `moe up`'s secure cluster: the credentials it makes and the flags that turn them on, parsed by
// the same option schemas the services use (a key name that no service knows fails here).
#include "tools/moe/up_security.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/base/file.h"
#include "common/base/secret.h"
#include "common/config/loader.h"
#include "common/grpc/server_runner.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/moe/up_topology.h"

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
using ::moe::common::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A service's option sections as the services declare them: grpc (every server), a client
// channel (routing.channel of the gateway, experts.channel of the router, ...).
struct ServerAndChannel {
  common::rpc::ServerOptions grpc;
  common::rpc::ChannelOptions channel;
  static void Describe(common::config::Schema<ServerAndChannel>& s) {
    s.Section("grpc", &ServerAndChannel::grpc);
    s.Section("channel", &ServerAndChannel::channel);
  }
};

// Parses `flags` (pairs "--set", "key=value"), keeping the keys under `prefixes` renamed:
// {"grpc.", "grpc."}, {"experts.channel.", "channel."}.
absl::StatusOr<ServerAndChannel> Parse(const std::vector<std::string>& flags,
                                       const std::string& channel_prefix) {
  std::vector<std::string> kept = {"x"};
  for (size_t i = 0; i + 1 < flags.size(); i += 2) {
    const std::string& kv = flags[i + 1];
    if (kv.rfind("grpc.", 0) == 0) {
      kept.insert(kept.end(), {"--set", kv});
    } else if (!channel_prefix.empty() && kv.rfind(channel_prefix, 0) == 0) {
      kept.insert(kept.end(), {"--set", "channel." + kv.substr(channel_prefix.size())});
    }
  }
  std::vector<const char*> argv;
  for (const std::string& a : kept) argv.push_back(a.c_str());
  auto cl = common::config::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  if (!cl.ok()) return cl.status();
  auto o = common::config::LoadOptions<ServerAndChannel>(*cl);
  if (!o.ok()) return o.status();
  if (absl::Status s = o->grpc.Validate(); !s.ok()) return s;
  if (absl::Status s = o->grpc.tls.Validate(); !s.ok()) return s;
  if (absl::Status s = o->grpc.auth.Validate(); !s.ok()) return s;
  if (absl::Status s = o->channel.tls.Validate(); !s.ok()) return s;
  return o;
}

bool Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out);
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(UpSecurityTest, OffByDefaultAndMakesNothing) {
  const std::string dir = common::testing::MakeTempDir() + "/security";
  ASSERT_OK_AND_ASSIGN(ClusterSecurity sec, MakeClusterSecurity({}, dir, "127.0.0.1"));
  EXPECT_FALSE(sec.enabled());
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_THAT(sec.ServerFlags("router"), IsEmpty());
  EXPECT_THAT(sec.ChannelFlags("experts.channel", "router", "router"), IsEmpty());
  UpContext c;
  c.model_dir = "/m";
  EXPECT_THAT(absl::StrJoin(ServiceNamed("router").flags(c, 0), " "), Not(HasSubstr("tls")));
  EXPECT_THAT(absl::StrJoin(ServiceNamed("gateway").flags(c, 0), " "), Not(HasSubstr("api_keys")));
}

TEST(UpSecurityTest, OptionsNeedAuthForTokensAndKeys) {
  UpOptions o;
  o.security.tokens = true;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     "security.tokens: true needs auth: true"));
  o.security = {.mtls = false, .auth = false, .tokens = false, .dir = "", .api_keys_file = "k"};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auth: true")));
  o.security.auth = true;
  EXPECT_OK(o.Validate());
  EXPECT_THAT(common::config::DescribeKeys<UpOptions>(), HasSubstr("security.mtls"));
}

TEST(UpSecurityTest, MtlsAndAuthMakeOneCertificatePerKindAndAKeyWithoutTheCaKey) {
  const std::string dir = common::testing::MakeTempDir() + "/security";
  fs::create_directories(dir);
  ASSERT_TRUE(Write(dir + "/stale", "old"));
  ASSERT_OK_AND_ASSIGN(ClusterSecurity sec,
                       MakeClusterSecurity({.mtls = true, .auth = true}, dir, "127.0.0.1"));
  EXPECT_FALSE(fs::exists(dir + "/stale"));  // made afresh
  EXPECT_EQ(ModeOf(dir), 0700u);
  for (const std::string& kind : CertifiedKinds()) {
    EXPECT_TRUE(fs::exists(sec.CertFile(kind))) << kind;
    EXPECT_EQ(ModeOf(sec.KeyFile(kind)), 0600u) << kind;
  }
  EXPECT_TRUE(fs::exists(sec.ca_file));
  EXPECT_FALSE(fs::exists(dir + "/moe-up-ca.key"));  // nothing can be signed after start
  // Under mTLS roles go by certificate: no token files.
  EXPECT_FALSE(fs::exists(sec.TokenFile("admin")));
  // The API key's digest is in the key file, the key itself only in api-key (0600).
  ASSERT_OK_AND_ASSIGN(std::string key, common::ReadFile(sec.api_key_file));
  ASSERT_OK_AND_ASSIGN(std::string keys, common::ReadFile(sec.api_keys_file));
  while (!key.empty() && key.back() == '\n') key.pop_back();
  EXPECT_THAT(key, HasSubstr("sk-moe-"));
  EXPECT_THAT(keys, HasSubstr(common::FormatDigest(common::DigestOf(key))));
  EXPECT_THAT(keys, Not(HasSubstr(key)));
  EXPECT_EQ(ModeOf(sec.api_key_file), 0600u);
}

TEST(UpSecurityTest, EveryServerAndClientFlagIsAKeyTheServicesKnow) {
  const std::string dir = common::testing::MakeTempDir() + "/security";
  ASSERT_OK_AND_ASSIGN(
      ClusterSecurity sec,
      MakeClusterSecurity({.mtls = true, .auth = true, .tokens = true}, dir, "127.0.0.1"));
  UpContext c;
  c.model_dir = "/m";
  c.security = sec;
  c.started.push_back({"expert_worker", {.grpc = 5001, .metrics = 5002}});
  c.started.push_back({"kv_store", {.grpc = 7001, .metrics = 7002}});
  for (const char* kind : {"expert_worker", "kv_store", "router", "asr", "tts"}) {
    ASSERT_OK_AND_ASSIGN(ServerAndChannel o, Parse(ServiceNamed(kind).flags(c, 0), ""));
    EXPECT_EQ(o.grpc.tls.cert_file, sec.CertFile(kind));
    EXPECT_EQ(o.grpc.tls.key_file, sec.KeyFile(kind));
    EXPECT_EQ(o.grpc.tls.client_ca_file, sec.ca_file);
    EXPECT_TRUE(o.grpc.tls.require_client_cert);
    EXPECT_TRUE(o.grpc.auth.enabled);
    EXPECT_THAT(o.grpc.auth.gateway.identities, ElementsAre("spiffe://moe.local/gateway"));
    EXPECT_THAT(o.grpc.auth.router.identities, ElementsAre("spiffe://moe.local/router"));
    EXPECT_THAT(o.grpc.auth.admin.identities, ElementsAre("spiffe://moe.local/admin"));
    EXPECT_THAT(o.grpc.auth.admin.token_files, ElementsAre(sec.TokenFile("admin")));
  }
  // Clients dial with their own kind's certificate and their role's token.
  const std::vector<std::string> router = ServiceNamed("router").flags(c, 0);
  for (const char* section : {"experts.channel.", "kv_store.channel."}) {
    ASSERT_OK_AND_ASSIGN(ServerAndChannel o, Parse(router, section));
    EXPECT_TRUE(o.channel.tls.enabled) << section;
    EXPECT_EQ(o.channel.tls.ca_file, sec.ca_file);
    EXPECT_EQ(o.channel.tls.cert_file, sec.CertFile("router"));
    EXPECT_EQ(o.channel.tls.key_file, sec.KeyFile("router"));
    EXPECT_EQ(o.channel.tls.server_name_override, "localhost");
    EXPECT_EQ(o.channel.token_file, sec.TokenFile("router"));
  }
  c.started.push_back({"router", {.grpc = 6001}});
  const std::vector<std::string> gateway = ServiceNamed("gateway").flags(c, 0);
  for (const char* section : {"routing.channel.", "voice.channel."}) {
    ASSERT_OK_AND_ASSIGN(ServerAndChannel o, Parse(gateway, section));
    EXPECT_EQ(o.channel.tls.cert_file, sec.CertFile("gateway")) << section;
    EXPECT_EQ(o.channel.token_file, sec.TokenFile("gateway"));
  }
  EXPECT_THAT(gateway, Contains("auth.api_keys_file=" + sec.api_keys_file));
  // moe up's own probe holds the admin role.
  EXPECT_EQ(sec.AdminChannel().tls.cert_file, sec.CertFile("admin"));
  EXPECT_EQ(sec.AdminChannel().token_file, sec.TokenFile("admin"));
  // Tokens are random and distinct per role, and readable by the owner only.
  ASSERT_OK_AND_ASSIGN(std::string gw, common::ReadFile(sec.TokenFile("gateway")));
  ASSERT_OK_AND_ASSIGN(std::string ad, common::ReadFile(sec.TokenFile("admin")));
  EXPECT_NE(gw, ad);
  EXPECT_GE(gw.size(), 64u);
  EXPECT_EQ(ModeOf(sec.TokenFile("gateway")), 0600u);
}

TEST(UpSecurityTest, AuthWithoutMtlsGrantsRolesByTokenOnly) {
  const std::string dir = common::testing::MakeTempDir() + "/security";
  ASSERT_OK_AND_ASSIGN(ClusterSecurity sec, MakeClusterSecurity({.auth = true}, dir, "127.0.0.1"));
  ASSERT_OK_AND_ASSIGN(ServerAndChannel o, Parse(sec.ServerFlags("router"), ""));
  EXPECT_FALSE(o.grpc.tls.enabled());
  EXPECT_TRUE(o.grpc.auth.enabled);
  EXPECT_THAT(o.grpc.auth.gateway.identities, IsEmpty());
  EXPECT_THAT(o.grpc.auth.gateway.token_files, ElementsAre(sec.TokenFile("gateway")));
  ASSERT_OK_AND_ASSIGN(
      ServerAndChannel ch,
      Parse(sec.ChannelFlags("routing.channel", "gateway", "gateway"), "routing.channel."));
  EXPECT_FALSE(ch.channel.tls.enabled);
  EXPECT_EQ(ch.channel.token_file, sec.TokenFile("gateway"));
}

TEST(UpSecurityTest, AnApiKeysFileOfTheOperatorIsUsedAsIs) {
  const std::string tmp = common::testing::MakeTempDir();
  EXPECT_THAT(MakeClusterSecurity({.auth = true, .api_keys_file = tmp + "/missing"},
                                  tmp + "/security", "127.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("security.api_keys_file")));
  ASSERT_TRUE(Write(tmp + "/keys", "sha256:00 name=x\n"));
  ASSERT_OK_AND_ASSIGN(ClusterSecurity sec,
                       MakeClusterSecurity({.auth = true, .api_keys_file = tmp + "/keys"},
                                           tmp + "/security", "127.0.0.1"));
  EXPECT_EQ(sec.api_keys_file, tmp + "/keys");
  EXPECT_EQ(sec.api_key_file, "");
}

}  // namespace
}  // namespace moe::cli
