#include "services/gateway/core/gateway.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/base/secret.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/request_id.h"
#include "services/gateway/testing/fake_backend.h"
#include "services/gateway/testing/recording_writer.h"
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using testing::FakeBackend;
using testing::FakeBackendOptions;
using ::testing::HasSubstr;
using testing::RecordingWriter;

// The data lines of an SSE body.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::ConsumePrefix(&part, "data: ")) << part;
    out.emplace_back(part);
  }
  return out;
}

class GatewayTest : public ::testing::Test {
 protected:
  void Init(FakeBackendOptions backend_options = {}, GatewayOptions options = {}) {
    backend_ = std::make_unique<FakeBackend>(std::move(backend_options));
    options.model_dir = "/unused";
    auto gw = Gateway::Create(options, ModelInfo{"tiny", 256, 0},
                              GatewayDeps{*tokenizer_, *backend_, clock_, registry_});
    ASSERT_OK(gw.status());
    gateway_ = std::move(gw).value();
  }

  struct Answer {
    int status;
    std::string body;
    std::shared_ptr<RecordingWriter> writer;
  };
  Answer Call(const std::string& method, const std::string& path, const std::string& body = "",
              const std::string& auth = "") {
    auto writer = std::make_shared<RecordingWriter>();
    gateway_->Handle(HttpRequest{method, path, auth, "10.0.0.1", body}, writer);
    writer->Wait();
    return {writer->status(), writer->body(), writer};
  }
  Answer Post(const std::string& path, const std::string& body) { return Call("POST", path, body); }

  std::string ExpectedEcho(const std::string& prompt, int n) {
    std::vector<int32_t> ids = tokenizer_->Encode(prompt, true);
    ids.resize(std::min<size_t>(ids.size(), n));
    return tokenizer_->Decode(ids, true);
  }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
  common::testing::FakeClock clock_;
  common::metrics::Registry registry_;
  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayTest, CompletionReturnsGeneratedTextAndUsage) {
  FakeBackendOptions fb;
  fb.cached_prompt_tokens = 4;
  Init(fb);
  Answer a = Post("/v1/completions", R"({"model":"tiny","prompt":"abcdefgh","max_tokens":5})");
  ASSERT_EQ(a.status, 200) << a.body;
  Json j = Json::parse(a.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_THAT(j["id"].get<std::string>(), ::testing::StartsWith("cmpl-"));
  EXPECT_EQ(j["choices"][0]["text"], ExpectedEcho("abcdefgh", 5));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const int prompt_tokens = static_cast<int>(tokenizer_->Encode("abcdefgh", true).size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(backend_->last_request().sampling.max_tokens, 5);
  EXPECT_EQ(gateway_->in_flight(), 0);
}

TEST_F(GatewayTest, ChatStreamReassemblesToTheNonStreamText) {
  Init();
  const std::string req =
      R"({"model":"tiny","messages":[{"role":"user","content":"hello there"}],"max_tokens":9)";
  Answer full = Post("/v1/chat/completions", req + "}");
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string text = Json::parse(full.body)["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());

  Answer stream = Post("/v1/chat/completions",
                       req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.writer->streamed());
  std::vector<std::string> events = Events(stream.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json first = Json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string reassembled;
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    Json e = Json::parse(events[i]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e["usage"].is_null());
    reassembled += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(reassembled, text);
  Json finish = Json::parse(events[events.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 9);
}

TEST_F(GatewayTest, StopStringTruncatesTheOutputAndCancelsGeneration) {
  FakeBackendOptions fb;
  std::vector<int32_t> script = tokenizer_->Encode("say END and more text", false);
  fb.script = [script](const GenerateRequest&) { return script; };
  fb.token_interval = absl::Milliseconds(1);
  Init(fb);
  Answer a =
      Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":100,"stop":["END"]})");
  ASSERT_EQ(a.status, 200) << a.body;
  Json j = Json::parse(a.body);
  EXPECT_EQ(j["choices"][0]["text"], "say ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), static_cast<int>(script.size()));
}

TEST_F(GatewayTest, StopTokenEndsWithStopAndIsNotRendered) {
  FakeBackendOptions fb;
  fb.eos_id = testing::kTestEosId;
  std::vector<int32_t> script = tokenizer_->Encode("ok", false);
  script.push_back(testing::kTestEosId);
  script.push_back(tokenizer_->Encode("never", false)[0]);
  fb.script = [script](const GenerateRequest&) { return script; };
  Init(fb);
  Answer a =
      Post("/v1/completions", R"({"model":"tiny","prompt":"x","skip_special_tokens":false})");
  Json j = Json::parse(a.body);
  EXPECT_EQ(j["choices"][0]["text"], "ok");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], static_cast<int>(script.size()) - 1);
}

TEST_F(GatewayTest, BadInputGetsTheRightStatusAndErrorJson) {
  Init();
  struct Case {
    std::string path, body;
    int status;
    std::string param, code;
  };
  const std::string long_prompt(600, 'x');
  std::vector<Case> cases = {
      {"/v1/chat/completions", "{oops", 400, "", ""},
      {"/v1/chat/completions", R"({"model":"tiny","messages":"hi"})", 400, "messages", ""},
      {"/v1/chat/completions", R"({"model":"gpt-9","messages":[{"role":"user","content":"x"}]})",
       404, "model", "model_not_found"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":-3})", 400, "max_tokens",
       ""},
      {"/v1/completions", R"({"model":"tiny","prompt":")" + long_prompt + R"("})", 400, "prompt",
       "context_length_exceeded"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1000})", 400, "max_tokens",
       "context_length_exceeded"},
      {"/v1/completions", R"({"model":"tiny","prompt":[1,99999]})", 400, "prompt", ""},
      {"/v1/completions", R"({"model":"tiny","prompt":[]})", 400, "prompt", ""},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"n":2})", 400, "n", ""},
  };
  for (const Case& c : cases) {
    Answer a = Post(c.path, c.body);
    EXPECT_EQ(a.status, c.status) << c.body << " -> " << a.body;
    Json j = Json::parse(a.body);
    ASSERT_TRUE(j.contains("error")) << a.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_EQ(j["error"]["param"].is_null() ? "" : j["error"]["param"].get<std::string>(), c.param)
        << c.body;
    EXPECT_EQ(j["error"]["code"].is_null() ? "" : j["error"]["code"].get<std::string>(), c.code)
        << c.body;
  }
  EXPECT_EQ(backend_->num_started(), 0);
  // Still serving.
  EXPECT_EQ(Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})").status, 200);
}

TEST_F(GatewayTest, ApiKeysAreCheckedWhenConfigured) {
  GatewayOptions options;
  options.auth.api_keys = {common::FormatDigest(common::DigestOf("sk-good"))};
  Init({}, options);
  const std::string body = R"({"model":"tiny","prompt":"x","max_tokens":1})";
  EXPECT_EQ(Call("POST", "/v1/completions", body).status, 401);
  Answer bad = Call("POST", "/v1/completions", body, "Bearer sk-bad");
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(Json::parse(bad.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(Call("POST", "/v1/completions", body, "Bearer sk-good").status, 200);
  EXPECT_EQ(Call("GET", "/v1/models", "", "").status, 401);
  EXPECT_EQ(Call("GET", "/healthz").status, 200);  // probes need no key
}

TEST_F(GatewayTest, PlaintextKeysInTheConfigAreRefusedWithoutBeingEchoed) {
  GatewayOptions options;
  options.model_dir = "/unused";
  options.auth.api_keys = {"sk-live-plaintext"};
  backend_ = std::make_unique<FakeBackend>(FakeBackendOptions{});
  auto gw = Gateway::Create(options, ModelInfo{"tiny", 256, 0},
                            GatewayDeps{*tokenizer_, *backend_, clock_, registry_});
  ASSERT_FALSE(gw.ok());
  EXPECT_THAT(gw.status().message(), HasSubstr("moe hash-key"));
  EXPECT_THAT(std::string(gw.status().message()), ::testing::Not(HasSubstr("sk-live")));
}

// The key file: several keys, each with its limits, reloaded when it changes.
class GatewayKeyFileTest : public GatewayTest {
 protected:
  void SetUp() override {
    dir_ = common::testing::MakeTempDir("gateway_keys");
    file_ = dir_ + "/api-keys";
  }
  void Write(const std::string& text) { std::ofstream(file_, std::ios::trunc) << text; }
  static std::string Line(const std::string& key, const std::string& opts) {
    return common::FormatDigest(common::DigestOf(key)) + " " + opts + "\n";
  }
  void InitWithFile(FakeBackendOptions fb = {}) {
    GatewayOptions options;
    options.auth.api_keys_file = file_;
    options.auth.api_keys_reload_interval = absl::Seconds(5);
    Init(std::move(fb), options);
  }
  Answer As(const std::string& key, const std::string& body) {
    return Call("POST", "/v1/completions", body, "Bearer " + key);
  }
  std::string dir_, file_;
};

TEST_F(GatewayKeyFileTest, EachKeyHasItsOwnLimits) {
  Write("# two teams\n" + Line("sk-a", "name=team-a rps=1 burst=1 max_tokens=4") +
        Line("sk-ops", "name=ops priority=true"));
  InitWithFile();
  EXPECT_EQ(As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":4})").status, 200);
  // team-a's bucket is spent; ops has the gateway's default (no limit).
  EXPECT_EQ(As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":1})").status, 429);
  EXPECT_EQ(As("sk-ops", R"({"model":"tiny","prompt":"x","max_tokens":1})").status, 200);
  clock_.Advance(absl::Seconds(1));
  Answer over = As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":5})");
  EXPECT_EQ(over.status, 400);
  EXPECT_THAT(over.body, HasSubstr("limit of 4 tokens"));
  clock_.Advance(absl::Seconds(1));
  // Without max_tokens the key's cap applies.
  EXPECT_EQ(As("sk-a", R"({"model":"tiny","prompt":"x"})").status, 200);
  EXPECT_EQ(backend_->last_request().sampling.max_tokens, 4);
  // Only ops may set a priority.
  clock_.Advance(absl::Seconds(1));
  Answer jump = As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":1,"priority":-5})");
  EXPECT_EQ(jump.status, 403);
  EXPECT_EQ(Json::parse(jump.body)["error"]["param"], "priority");
  EXPECT_EQ(As("sk-ops", R"({"model":"tiny","prompt":"x","max_tokens":1,"priority":-5})").status,
            200);
  EXPECT_EQ(backend_->last_request().priority, -5);
}

TEST_F(GatewayKeyFileTest, PerKeyConcurrencyIsBounded) {
  Write(Line("sk-a", "name=a concurrency=1") + Line("sk-b", "name=b"));
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  InitWithFile(fb);
  auto held = std::make_shared<RecordingWriter>();
  gateway_->Handle(HttpRequest{"POST", "/v1/completions", "Bearer sk-a", "c",
                               R"({"model":"tiny","prompt":"abc","max_tokens":3})"},
                   held);
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  Answer second = As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":1})");
  EXPECT_EQ(second.status, 429);
  backend_->Release();
  held->Wait();
  EXPECT_EQ(held->status(), 200);
  EXPECT_EQ(As("sk-a", R"({"model":"tiny","prompt":"x","max_tokens":1})").status, 200);
}

TEST_F(GatewayKeyFileTest, TheFileIsReloadedWithoutARestart) {
  Write(Line("sk-old", "name=old"));
  InitWithFile();
  const std::string body = R"({"model":"tiny","prompt":"x","max_tokens":1})";
  EXPECT_EQ(As("sk-old", body).status, 200);
  EXPECT_EQ(As("sk-new", body).status, 401);
  Write(Line("sk-new", "name=new"));
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(As("sk-new", body).status, 200);
  EXPECT_EQ(As("sk-old", body).status, 401);  // revoked
  // A broken file keeps the last good table.
  Write("sk-pasted-in-plaintext\n");
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(As("sk-new", body).status, 200);
}

TEST(ApiKeyFileTest, BadLinesNameTheLineAndNeverEchoIt) {
  absl::StatusOr<std::vector<ApiKey>> keys = ParseApiKeyFile("# c\nsk-live-123 name=x\n");
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(keys.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(std::string(keys.status().message()), ::testing::Not(HasSubstr("sk-live")));
  const std::string d = common::FormatDigest(common::DigestOf("k"));
  EXPECT_THAT(ParseApiKeyFile(d + " rps=fast\n").status().message(),
              HasSubstr("bad value for rps"));
  EXPECT_THAT(ParseApiKeyFile(d + " colour=red\n").status().message(), HasSubstr("unknown option"));
  EXPECT_THAT(ParseApiKeyFile(d + "\n" + d + "\n").status().message(), HasSubstr("same key"));
  EXPECT_THAT(ParseApiKeyFile("# only comments\n").status().message(), HasSubstr("no key"));
}

TEST_F(GatewayTest, PriorityIsRefusedWithoutAKeyThatAllowsIt) {
  Init();
  Answer jump =
      Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,"priority":3})");
  EXPECT_EQ(jump.status, 403);
  GatewayOptions trusted;
  trusted.auth.priority_without_key = true;
  Init({}, trusted);
  EXPECT_EQ(Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,"priority":3})")
                .status,
            200);
}

TEST_F(GatewayTest, RateLimitAnswers429WithRetryAfter) {
  GatewayOptions options;
  options.limits.rate_limit_rps = 0.5;
  options.limits.rate_limit_burst = 2;
  Init({}, options);
  const std::string body = R"({"model":"tiny","prompt":"x","max_tokens":1})";
  EXPECT_EQ(Post("/v1/completions", body).status, 200);
  EXPECT_EQ(Post("/v1/completions", body).status, 200);
  Answer limited = Post("/v1/completions", body);
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.writer->header("Retry-After"), "2");
  EXPECT_EQ(Json::parse(limited.body)["error"]["code"], "rate_limit_exceeded");
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Post("/v1/completions", body).status, 200);
}

TEST_F(GatewayTest, InFlightBoundAnswers503AndRecovers) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  GatewayOptions options;
  options.limits.max_in_flight = 1;
  Init(fb, options);
  auto held = std::make_shared<RecordingWriter>();
  gateway_->Handle(HttpRequest{"POST", "/v1/completions", "", "c",
                               R"({"model":"tiny","prompt":"abc","max_tokens":3})"},
                   held);
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  Answer refused = Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1})");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.writer->header("Retry-After"), "1");
  backend_->Release();
  held->Wait();
  EXPECT_EQ(held->status(), 200);
  EXPECT_EQ(Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1})").status, 200);
}

TEST_F(GatewayTest, ClientGoneCancelsTheGenerationAndFreesTheSlot) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  Init(fb);
  auto writer = std::make_shared<RecordingWriter>();
  CancelFn cancel = gateway_->Handle(
      HttpRequest{"POST", "/v1/chat/completions", "", "c",
                  R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true})"},
      writer);
  ASSERT_TRUE(cancel);
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  EXPECT_EQ(gateway_->in_flight(), 1);
  cancel();
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_TRUE(backend_->WaitForIdle(absl::Seconds(10)));
  EXPECT_EQ(gateway_->in_flight(), 0);
  EXPECT_THAT(
      registry_.Value("moe_requests_total", {{"model", "tiny"}, {"finish_reason", "abort"}}),
      common::testing::IsOkAndHolds(1.0));
}

TEST_F(GatewayTest, FailureBeforeTheFirstTokenIsAnHttpError) {
  FakeBackendOptions fb;
  fb.fail_with = absl::UnavailableError("no router");
  Init(fb);
  Answer a = Post("/v1/chat/completions",
                  R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true})");
  EXPECT_EQ(a.status, 503);
  EXPECT_FALSE(a.writer->streamed());
  EXPECT_THAT(a.body, HasSubstr("no router"));
}

TEST_F(GatewayTest, FailureAfterTheStreamStartedIsAnSseErrorEvent) {
  FakeBackendOptions fb;
  fb.error_after_tokens = 4;
  Init(fb);
  Answer a = Post("/v1/completions",
                  R"({"model":"tiny","prompt":"abcdef","max_tokens":10,"stream":true})");
  EXPECT_EQ(a.status, 200);
  std::vector<std::string> events = Events(a.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json error = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("injected failure"));
}

TEST_F(GatewayTest, ClientRequestIdIsReturnedAndSentToTheBackend) {
  Init();
  auto writer = std::make_shared<RecordingWriter>();
  HttpRequest request{"POST", "/v1/completions", "", "10.0.0.1",
                      R"({"model":"tiny","prompt":"abc","max_tokens":2})"};
  request.request_id = "client-id-42";
  gateway_->Handle(request, writer);
  writer->Wait();
  EXPECT_EQ(writer->status(), 200);
  EXPECT_EQ(writer->header("x-request-id"), "client-id-42");
  EXPECT_EQ(backend_->last_request().http_request_id, "client-id-42");
  EXPECT_THAT(backend_->last_request().request_id, ::testing::StartsWith("cmpl-"));
}

TEST_F(GatewayTest, RequestIdIsMadeWhenAbsentOrUnsafe) {
  Init();
  Answer a = Call("GET", "/v1/models");
  const std::string made = a.writer->header("x-request-id");
  EXPECT_THAT(made, ::testing::StartsWith("req-"));
  EXPECT_TRUE(IsValidRequestId(made));
  auto writer = std::make_shared<RecordingWriter>();
  HttpRequest request{"GET", "/v1/models", "", "10.0.0.1", ""};
  request.request_id = "bad id\r\nx: y";
  gateway_->Handle(request, writer);
  writer->Wait();
  EXPECT_THAT(writer->header("x-request-id"), ::testing::StartsWith("req-"));
  EXPECT_FALSE(IsValidRequestId(std::string(129, 'a')));
  EXPECT_EQ(Call("GET", "/healthz").writer->header("x-request-id"), "");
}

TEST_F(GatewayTest, ErrorBodiesCarryTheRequestId) {
  FakeBackendOptions fb;
  fb.error_after_tokens = 2;
  Init(fb);
  auto writer = std::make_shared<RecordingWriter>();
  HttpRequest bad{"POST", "/v1/completions", "", "10.0.0.1",
                  R"({"model":"tiny","prompt":"x","max_tokens":-1})"};
  bad.request_id = "id-bad";
  gateway_->Handle(bad, writer);
  writer->Wait();
  EXPECT_EQ(writer->status(), 400);
  EXPECT_EQ(Json::parse(writer->body())["error"]["request_id"], "id-bad");
  // A failure after the stream started: the SSE error event carries it too.
  auto stream = std::make_shared<RecordingWriter>();
  HttpRequest streamed{"POST", "/v1/completions", "", "10.0.0.1",
                       R"({"model":"tiny","prompt":"abcdef","max_tokens":10,"stream":true})"};
  streamed.request_id = "id-stream";
  gateway_->Handle(streamed, stream);
  stream->Wait();
  std::vector<std::string> events = Events(stream->body());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[events.size() - 2])["error"]["request_id"], "id-stream");
}

TEST_F(GatewayTest, DrainingRefusesNewRequestsAndIsNotReady) {
  Init();
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  gateway_->StartDrain();
  EXPECT_EQ(Call("GET", "/readyz").status, 503);
  Answer a = Post("/v1/completions", R"({"model":"tiny","prompt":"x"})");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.writer->header("Retry-After"), "1");
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
}

TEST_F(GatewayTest, ModelsTokenizeDetokenizeAndMetrics) {
  Init();
  Json models = Json::parse(Call("GET", "/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  EXPECT_EQ(Call("GET", "/v1/models/tiny").status, 200);
  EXPECT_EQ(Call("GET", "/v1/models/other").status, 404);

  Json tok = Json::parse(Post("/tokenize", R"({"prompt":"hey"})").body);
  EXPECT_EQ(tok["tokens"].get<std::vector<int32_t>>(), tokenizer_->Encode("hey", true));
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  Json detok = Json::parse(Post("/detokenize", R"({"tokens":)" + tok["tokens"].dump() + "}").body);
  EXPECT_EQ(detok["prompt"], tokenizer_->Decode(tok["tokens"].get<std::vector<int32_t>>(), false));

  Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})");
  Answer metrics = Call("GET", "/metrics");
  EXPECT_THAT(metrics.body,
              HasSubstr("moe_requests_total{finish_reason=\"length\",model=\"tiny\"} 1"));
  EXPECT_THAT(metrics.body, HasSubstr("moe_request_ttft_seconds_count"));
  EXPECT_EQ(Call("GET", "/nope").status, 404);
  EXPECT_EQ(Call("GET", "/v1/completions").status, 405);
}

TEST_F(GatewayTest, ChatLogprobsListEveryToken) {
  Init();
  Answer a = Post("/v1/chat/completions",
                  R"({"model":"tiny","messages":[{"role":"user","content":"abc"}],"max_tokens":3,
                      "logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(a.status, 200) << a.body;
  Json content = Json::parse(a.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(backend_->last_request().sampling.returns_logprobs());
  EXPECT_EQ(backend_->last_request().sampling.num_top_logprobs(), 2);
}

TEST_F(GatewayTest, SamplingParametersReachTheBackend) {
  Init();
  Post("/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":2,
           "temperature":0.7,"top_k":5,"seed":9,"stop_token_ids":[7],"ignore_eos":true,
           "cache_salt":"t1","logit_bias":{"4":2.5}})");
  GenerateRequest r = backend_->last_request();
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_THAT(r.sampling.stop_token_ids, ::testing::ElementsAre(7));
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.cache_salt, "t1");
  EXPECT_FLOAT_EQ(r.sampling.logit_bias.at(4), 2.5f);
  EXPECT_THAT(r.request_id, ::testing::StartsWith("chatcmpl-"));
}

// A backend that "generates" `text` (then EOS) whatever the prompt.
FakeBackendOptions Scripted(const tokenizer::Tokenizer& tok, const std::string& text) {
  FakeBackendOptions fb;
  fb.eos_id = testing::kTestEosId;
  std::vector<int32_t> ids = tok.Encode(text, /*add_special_tokens=*/false);
  ids.push_back(testing::kTestEosId);
  fb.script = [ids](const GenerateRequest&) { return ids; };
  return fb;
}

const char kWeatherTools[] =
    R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{
       "type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
       {"type":"function","function":{"name":"now"}}])";

std::string ToolChat(const std::string& extra) {
  return absl::StrCat(R"({"model":"tiny","messages":[{"role":"user","content":"Weather?"}],)",
                      kWeatherTools, extra, "}");
}

// The tool calls of a stream, reassembled by index as the SDK does, and the finish reason.
Json StreamedToolCalls(const std::string& body, std::string* finish) {
  Json calls = Json::array();
  for (const std::string& e : Events(body)) {
    if (e == "[DONE]") continue;
    Json chunk = Json::parse(e);
    for (const Json& c : chunk["choices"]) {
      if (!c["finish_reason"].is_null()) *finish = c["finish_reason"];
      if (!c["delta"].contains("tool_calls")) continue;
      for (const Json& d : c["delta"]["tool_calls"]) {
        const size_t i = d["index"].get<size_t>();
        if (i == calls.size()) {
          EXPECT_TRUE(d.contains("id")) << e;
          calls.push_back({{"id", d["id"]},
                           {"type", d["type"]},
                           {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
        }
        calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                            d["function"]["arguments"].get<std::string>();
      }
    }
  }
  return calls;
}

TEST_F(GatewayTest, ResponseFormatTravelsAsAConstraintAndABadSchemaIs400) {
  Init(Scripted(*tokenizer_, R"({"a":1})"));
  Answer ok = Post("/v1/chat/completions",
                   R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
                       "response_format":{"type":"json_schema","json_schema":{"name":"n",
                       "schema":{"type":"object","properties":{"a":{"type":"integer"}},
                       "required":["a"]}}}})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Json::parse(ok.body)["choices"][0]["message"]["content"], R"({"a":1})");
  const GenerateRequest r = backend_->last_request();
  EXPECT_EQ(r.constraint.kind, generation::ConstraintKind::kJsonSchema);
  EXPECT_THAT(r.constraint.spec, HasSubstr("\"integer\""));

  const int started = backend_->num_started();
  Answer bad = Post("/v1/chat/completions",
                    R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
                        "response_format":{"type":"json_schema","json_schema":{"name":"n",
                        "schema":{"type":"object","patternProperties":{"^x":{}}}}}})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  Json e = Json::parse(bad.body)["error"];
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("patternProperties"));
  Answer bad_regex = Post("/v1/chat/completions",
                          R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
                              "guided_regex":"(a"})");
  EXPECT_EQ(bad_regex.status, 400) << bad_regex.body;
  EXPECT_EQ(Json::parse(bad_regex.body)["error"]["param"], "guided_regex");
  Answer bad_tool = Post("/v1/chat/completions",
                         R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
                             "tools":[{"type":"function","function":{"name":"f","parameters":{
                             "type":"object","properties":{"a":{"not":{}}}}}}],
                             "tool_choice":"required"})");
  EXPECT_EQ(bad_tool.status, 400) << bad_tool.body;
  EXPECT_EQ(Json::parse(bad_tool.body)["error"]["param"], "tools");
  EXPECT_EQ(backend_->num_started(), started);  // none of them reached a router
  // The second request with a schema compiles nothing.
  EXPECT_EQ(gateway_->grammar_cache().size(), 4);
}

TEST_F(GatewayTest, RequiredToolChoiceAnswersWithToolCalls) {
  const std::string out = R"([{"name":"get_weather","arguments":{"city":"Paris"}}])";
  Init(Scripted(*tokenizer_, out));
  Answer a = Post("/v1/chat/completions", ToolChat(R"(,"tool_choice":"required")"));
  ASSERT_EQ(a.status, 200) << a.body;
  Json choice = Json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("call_"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");
  // The constraint: an array of calls of the declared tools.
  const GenerateRequest r = backend_->last_request();
  EXPECT_EQ(r.constraint.kind, generation::ConstraintKind::kJsonSchema);
  EXPECT_THAT(r.constraint.spec, HasSubstr("\"minItems\":1"));

  Answer s = Post("/v1/chat/completions", ToolChat(R"(,"tool_choice":"required","stream":true)"));
  ASSERT_EQ(s.status, 200) << s.body;
  std::string finish;
  Json calls = StreamedToolCalls(s.body, &finish);
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  // Streamed incrementally: more than one piece of arguments.
  EXPECT_GT(Events(s.body).size(), 4u);
}

TEST_F(GatewayTest, NamedToolChoiceConstrainsToTheParameters) {
  Init(Scripted(*tokenizer_, R"({"city":"Rome"})"));
  Answer a =
      Post("/v1/chat/completions",
           ToolChat(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  ASSERT_EQ(a.status, 200) << a.body;
  Json choice = Json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Rome"})");
  const GenerateRequest r = backend_->last_request();
  EXPECT_EQ(Json::parse(r.constraint.spec)["required"], Json::array({"city"}));
}

TEST_F(GatewayTest, AutoToolChoiceParsesTheModelsOwnFormat) {
  GatewayOptions options;
  options.tool_call_format = "mistral";
  Init(Scripted(
           *tokenizer_,
           R"(Checking. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}])"),
       options);
  EXPECT_EQ(gateway_->tool_call_format(), ToolCallFormat::kMistral);
  Answer a = Post("/v1/chat/completions", ToolChat(""));
  ASSERT_EQ(a.status, 200) << a.body;
  Json choice = Json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking. ");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_FALSE(backend_->last_request().constraint.active());  // auto is unconstrained

  Answer s = Post("/v1/chat/completions", ToolChat(R"(,"stream":true)"));
  std::string finish;
  Json calls = StreamedToolCalls(s.body, &finish);
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Oslo"})");
  std::string content;
  for (const std::string& e : Events(s.body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    for (const Json& c : chunk["choices"]) {
      if (c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        content += c["delta"]["content"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(content, "Checking. ");

  // tool_choice none: the text is content, whatever it looks like.
  Answer none = Post("/v1/chat/completions", ToolChat(R"(,"tool_choice":"none")"));
  Json m = Json::parse(none.body)["choices"][0]["message"];
  EXPECT_FALSE(m.contains("tool_calls"));
  EXPECT_THAT(m["content"].get<std::string>(), HasSubstr("[TOOL_CALLS]"));
}

}  // namespace
}  // namespace moe::gateway
