#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config/loader.h"
#include "common/config/schema.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::config {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

enum class Mode { kFast, kSafe };

struct TlsTestOptions {
  std::string cert_file;
  bool require_client_cert = false;

  static void Describe(Schema<TlsTestOptions>& s) {
    s.Add("cert_file", &TlsTestOptions::cert_file, "PEM certificate");
    s.Add("require_client_cert", &TlsTestOptions::require_client_cert);
  }
  absl::Status Validate() const {
    if (absl::Status s = CheckFields(*this); !s.ok()) return s;
    if (require_client_cert && cert_file.empty()) {
      return absl::InvalidArgumentError("require_client_cert: true needs cert_file");
    }
    return absl::OkStatus();
  }
};

struct TestOptions {
  std::string host = "0.0.0.0";
  int port = 0;
  absl::Duration drain_timeout = absl::Seconds(10);
  double ratio = 0.85;
  uint64_t max_bytes = 1 << 20;
  std::vector<int> ids = {1, 2};
  Mode mode = Mode::kFast;
  TlsTestOptions tls;

  static void Describe(Schema<TestOptions>& s) {
    s.Add("host", &TestOptions::host).NonEmpty();
    s.Add("port", &TestOptions::port, "0 picks a free port").Range(0, 65535);
    s.Add("drain_timeout", &TestOptions::drain_timeout).Min(absl::ZeroDuration());
    s.Add("ratio", &TestOptions::ratio).Range(0.0, 1.0);
    s.Add("max_bytes", &TestOptions::max_bytes)
        .Min(1)
        .Require([](uint64_t v) { return (v & (v - 1)) == 0; }, "is not a power of two");
    s.Add("ids", &TestOptions::ids).Min(0);
    s.AddEnum("mode", &TestOptions::mode, {{"fast", Mode::kFast}, {"safe", Mode::kSafe}});
    s.Section("tls", &TestOptions::tls);
  }
  absl::Status Validate() const { return CheckFields(*this); }
};

absl::StatusOr<TestOptions> FromYaml(absl::string_view yaml) {
  TestOptions opts;
  if (absl::Status s = ApplyYaml(yaml, "test.yaml", opts); !s.ok()) return s;
  return opts;
}

TEST(ConfigTest, DumpShowsInlineDefaults) {
  EXPECT_EQ(DumpYaml(TestOptions{}),
            "host: 0.0.0.0\n"
            "port: 0\n"
            "drain_timeout: 10s\n"
            "ratio: 0.85\n"
            "max_bytes: 1048576\n"
            "ids: [1, 2]\n"
            "mode: fast\n"
            "tls:\n"
            "  cert_file: \"\"\n"
            "  require_client_cert: false\n");
}

TEST(ConfigTest, YamlSetsScalarsListsEnumsAndSections) {
  ASSERT_OK_AND_ASSIGN(TestOptions opts, FromYaml(R"(
host: 127.0.0.1
port: 8080
drain_timeout: 250ms
ratio: 0.5
ids: [3, 4, 5]
mode: safe
tls:
  cert_file: /etc/cert.pem
  require_client_cert: yes
)"));
  EXPECT_EQ(opts.host, "127.0.0.1");
  EXPECT_EQ(opts.port, 8080);
  EXPECT_EQ(opts.drain_timeout, absl::Milliseconds(250));
  EXPECT_EQ(opts.ratio, 0.5);
  EXPECT_EQ(opts.max_bytes, 1u << 20);  // Absent keys keep their default.
  EXPECT_EQ(opts.ids, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(opts.mode, Mode::kSafe);
  EXPECT_EQ(opts.tls.cert_file, "/etc/cert.pem");
  EXPECT_TRUE(opts.tls.require_client_cert);
  EXPECT_OK(opts.Validate());
}

TEST(ConfigTest, EmptyDocumentKeepsDefaults) {
  ASSERT_OK_AND_ASSIGN(TestOptions opts, FromYaml(""));
  EXPECT_EQ(DumpYaml(opts), DumpYaml(TestOptions{}));
}

TEST(ConfigTest, UnknownKeyIsAnErrorNamingKeyAndValue) {
  EXPECT_THAT(
      FromYaml("tls:\n  cert: /x.pem\n"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("unknown key \"tls.cert\""), HasSubstr("\"/x.pem\""),
                     HasSubstr("test.yaml:2"), HasSubstr("cert_file, require_client_cert"))));
  EXPECT_THAT(FromYaml("prot: 5\n"), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("unknown key \"prot\" (value \"5\")")));
}

TEST(ConfigTest, WrongTypeIsAnErrorNamingKeyAndValue) {
  EXPECT_THAT(FromYaml("port: abc\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("port: \"abc\" is not a valid int32 (in test.yaml:1)")));
  EXPECT_THAT(FromYaml("max_bytes: -1\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_bytes: \"-1\" is not a valid uint64")));
  EXPECT_THAT(FromYaml("drain_timeout: 10\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("drain_timeout: \"10\" is not a valid duration (with a unit")));
  EXPECT_THAT(FromYaml("mode: turbo\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mode: \"turbo\" is not a valid one of fast|safe")));
  EXPECT_THAT(FromYaml("port: [1, 2]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port: a list")));
  EXPECT_THAT(FromYaml("ids: [1, x]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ids: [1, x] is not a valid list<int32>")));
  EXPECT_THAT(FromYaml("tls: 5\n"), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("tls: \"5\" is not a section")));
  EXPECT_THAT(FromYaml("ratio: nan\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ratio: \"nan\"")));
}

TEST(ConfigTest, SyntaxErrorNamesSourceAndLine) {
  EXPECT_THAT(FromYaml("port: 1\nhost: [unclosed\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("test.yaml:")));
  EXPECT_THAT(FromYaml("- 1\n- 2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a mapping")));
}

TEST(ConfigTest, ValidateNamesKeyAndValueOutOfRange) {
  TestOptions opts;
  opts.port = 70000;
  EXPECT_THAT(opts.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        "port: 70000 is out of range [0, 65535]"));
  opts = TestOptions{};
  opts.ratio = 1.5;
  EXPECT_THAT(opts.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, "ratio: 1.5 is out of range [0, 1]"));
  opts = TestOptions{};
  opts.drain_timeout = absl::Seconds(-1);
  EXPECT_THAT(opts.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        "drain_timeout: -1s is out of range >= 0"));
  opts = TestOptions{};
  opts.ids = {1, -3};
  EXPECT_THAT(opts.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, "ids: -3 is out of range >= 0"));
  opts = TestOptions{};
  opts.host = "";
  EXPECT_THAT(opts.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, "host: must not be empty"));
  opts = TestOptions{};
  opts.max_bytes = 1000;
  EXPECT_THAT(opts.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        "max_bytes: 1000 is not a power of two"));
}

TEST(ConfigTest, SectionValidateErrorsArePrefixedWithTheSectionKey) {
  TestOptions opts;
  opts.tls.require_client_cert = true;
  EXPECT_THAT(opts.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        "tls.require_client_cert: true needs cert_file"));
}

TEST(ConfigTest, OverridesApplyAfterYamlInOrder) {
  const std::string dir = testing::MakeTempDir("config_test");
  const std::string path = dir + "/app.yaml";
  { std::ofstream(path) << "port: 100\ntls:\n  cert_file: a.pem\n"; }
  CommandLine cl{.config_file = path,
                 .overrides = {"port=200", "tls.cert_file=b.pem", "ids=7, 8", "port=300"}};
  ASSERT_OK_AND_ASSIGN(TestOptions opts, LoadOptions<TestOptions>(cl));
  EXPECT_EQ(opts.port, 300);
  EXPECT_EQ(opts.tls.cert_file, "b.pem");
  EXPECT_EQ(opts.ids, (std::vector<int>{7, 8}));
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, OverrideErrorsNameKeyAndValue) {
  TestOptions opts;
  EXPECT_THAT(ApplyOverride("tls.cert=x", opts),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("unknown key \"tls.cert\" (value \"x\")"),
                             HasSubstr("--set tls.cert=x"), HasSubstr("under \"tls\""))));
  EXPECT_THAT(ApplyOverride("port=eighty", opts),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("port: \"eighty\" is not a valid int32 (in --set port=eighty)")));
  EXPECT_THAT(ApplyOverride("tls=1", opts),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls: is a section")));
  EXPECT_THAT(ApplyOverride("port.x=1", opts),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key \"port.x\"")));
  EXPECT_THAT(ApplyOverride("port", opts),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expects key=value")));
  EXPECT_EQ(DumpYaml(opts), DumpYaml(TestOptions{}));  // Failed overrides changed nothing visible.
}

TEST(ConfigTest, MissingConfigFileIsNotFound) {
  CommandLine cl{.config_file = "/nonexistent/app.yaml"};
  EXPECT_THAT(LoadOptions<TestOptions>(cl),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/app.yaml")));
}

TEST(ConfigTest, DumpRoundTripsThroughYaml) {
  TestOptions opts;
  opts.host = "a: b";  // Needs quoting in YAML.
  opts.port = 9;
  opts.drain_timeout = absl::Milliseconds(1500);
  opts.ratio = 0.1;
  opts.ids = {};
  opts.mode = Mode::kSafe;
  opts.tls.cert_file = "c.pem";
  ASSERT_OK_AND_ASSIGN(TestOptions back, FromYaml(DumpYaml(opts)));
  EXPECT_EQ(back.host, "a: b");
  EXPECT_EQ(back.drain_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(back.ratio, 0.1);
  EXPECT_TRUE(back.ids.empty());
  EXPECT_EQ(DumpYaml(back), DumpYaml(opts));
}

TEST(ConfigTest, DescribeKeysListsTypesDefaultsAndRanges) {
  const std::string help = DescribeKeys<TestOptions>();
  EXPECT_THAT(help, HasSubstr("  port  int32  default \"0\"  [0, 65535]  0 picks a free port\n"));
  EXPECT_THAT(help, HasSubstr("  tls.cert_file  string  default \"\"  PEM certificate\n"));
  EXPECT_THAT(help, HasSubstr("  mode  one of fast|safe  default \"fast\"\n"));
}

TEST(ConfigTest, ParseCommandLineTurnsFlagsAndAliasesIntoOverrides) {
  const FlagAlias aliases[] = {{"grpc_port", "port"}};
  const char* argv[] = {"svc",   "--config",        "a.yaml",
                        "--set", "tls.cert_file=x", "--grpc_port",
                        "5",     "--set=ratio=0.5", "--grpc_port=6"};
  ASSERT_OK_AND_ASSIGN(CommandLine cl, ParseCommandLine(std::size(argv), argv, aliases));
  EXPECT_EQ(cl.config_file, "a.yaml");
  EXPECT_THAT(cl.overrides,
              ::testing::ElementsAre("tls.cert_file=x", "port=5", "ratio=0.5", "port=6"));
  EXPECT_FALSE(cl.help);
}

TEST(ConfigTest, ParseCommandLineRejectsUnknownFlagsAndMissingValues) {
  const char* unknown[] = {"svc", "--grpc_prot", "5"};
  EXPECT_THAT(ParseCommandLine(3, unknown),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--grpc_prot")));
  const char* missing[] = {"svc", "--set"};
  EXPECT_THAT(ParseCommandLine(2, missing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--set needs a value")));
  const char* positional[] = {"svc", "file.yaml"};
  EXPECT_THAT(ParseCommandLine(2, positional),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"file.yaml\"")));
  const char* help[] = {"svc", "--help", "--print_config"};
  ASSERT_OK_AND_ASSIGN(CommandLine cl, ParseCommandLine(3, help));
  EXPECT_TRUE(cl.help);
  EXPECT_TRUE(cl.print_config);
}

}  // namespace
}  // namespace moe::common::config
