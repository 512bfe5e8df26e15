// Every size a client controls (README "Limits"), through the real HttpServer on loopback with
// the real Gateway core, the fake backend and fake voice services: each limit is hit, answered
// with its documented error (status, OpenAI error code, `param`, the option named in the
// message), and the server goes on serving the next request. Also: /metrics on its own port or
// behind a bearer token, and client strings that must never reach a path or a URL.
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/websocket.hpp"
#include "common/audio/pcm.h"
#include "common/audio/wav.h"
#include "common/base/clock.h"
#include "common/http/http_client.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/gateway.h"
#include "services/gateway/http_server.h"
#include "services/gateway/testing/fake_backend.h"
#include "services/gateway/testing/fake_voice.h"
#include "services/gateway/testing/test_tokenizer.h"
#include "services/gateway/testing/tone_wav.h"
#include "services/gateway/thread_timer_queue.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using common::http::HttpCall;
using testing::FakeAsrClient;
using testing::FakeBackend;
using testing::FakeTtsClient;
using ::testing::HasSubstr;
using testing::ToneWav;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;

constexpr char kBoundary[] = "limitsboundary";

// A raw HTTP/1.1 request with `extra` header lines ("Name: value\r\n" each).
std::string RawRequest(const std::string& method, const std::string& path,
                       const std::string& content_type, const std::string& body,
                       const std::string& extra = "") {
  return absl::StrCat(
      method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n", extra, "\r\n", body);
}

std::string Upload(const std::string& file, const std::string& filename) {
  return absl::StrCat(
      "--", kBoundary, "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--",
      kBoundary, "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"", filename,
      "\"\r\nContent-Type: audio/wav\r\n\r\n", file, "\r\n--", kBoundary, "--\r\n");
}

// A WebSocket client of /v1/realtime (synchronous Beast).
class WsClient {
 public:
  explicit WsClient(int port) : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(
        net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
    ws_.handshake(absl::StrCat("127.0.0.1:", port), "/v1/realtime?model=gpt-realtime", ec_);
  }
  bool ok() const { return !ec_; }
  websocket::stream<beast::tcp_stream>& ws() { return ws_; }
  bool Send(const std::string& text) {
    ws_.text(true);
    ws_.write(net::buffer(text), ec_);
    return !ec_;
  }
  bool Send(const Json& event) { return Send(event.dump()); }
  // The next event, or nullopt when the socket closed (close_code() says why).
  std::optional<Json> Read() {
    beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(20));
    beast::flat_buffer buffer;
    ws_.read(buffer, ec_);
    if (ec_) return std::nullopt;
    return Json::parse(beast::buffers_to_string(buffer.data()));
  }
  // Reads until an event of `type` (nullopt when the socket closes first).
  std::optional<Json> WaitFor(const std::string& type) {
    while (std::optional<Json> e = Read()) {
      if ((*e)["type"] == type) return e;
    }
    return std::nullopt;
  }
  int close_code() const { return static_cast<int>(ws_.reason().code); }

 private:
  net::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::error_code ec_;
};

class LimitsTest : public ::testing::Test {
 protected:
  void Start(GatewayOptions options = {}) {
    backend_ = std::make_unique<FakeBackend>(testing::FakeBackendOptions{});
    options.model_dir = "/unused";
    options.http.host = "127.0.0.1";
    options.http.port = 0;
    auto gw =
        Gateway::Create(options, ModelInfo{"tiny", 512, 0},
                        GatewayDeps{*tokenizer_, *backend_, common::SystemClock::Get(), registry_},
                        GatewayVoiceDeps{asr_, tts_, timers_});
    ASSERT_OK(gw.status());
    gateway_ = std::move(gw).value();
    auto server = ServeGateway(options.http, *gateway_);
    ASSERT_OK(server.status());
    server_ = std::move(server).value();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (backend_) backend_->Release();
    if (backend_) backend_->WaitForIdle(absl::Seconds(10));
  }

  // A request of the kind every limit test ends with: still served.
  void ExpectStillServing(const std::string& after) {
    auto ok = HttpCall(port_, "POST", "/v1/completions",
                       R"({"model":"tiny","prompt":"x","max_tokens":2})");
    ASSERT_TRUE(ok) << after;
    EXPECT_EQ(ok->status, 200) << after << ": " << ok->body;
  }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
  common::metrics::Registry registry_;
  std::unique_ptr<FakeBackend> backend_;
  FakeAsrClient asr_;
  FakeTtsClient tts_;
  ThreadTimerQueue timers_{common::SystemClock::Get()};
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

struct Case {
  std::string name;
  std::string raw;  // the whole request
  int status;
  std::string code;
  std::string param;   // "" = JSON null
  std::string option;  // named in the message
};

std::string Completion(const std::string& extra, const std::string& prompt = "hello") {
  return RawRequest("POST", "/v1/completions", "application/json",
                    R"({"model":"tiny","prompt":")" + prompt + "\"" + extra + "}");
}
std::string Chat(const std::string& extra,
                 const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return RawRequest("POST", "/v1/chat/completions", "application/json",
                    R"({"model":"tiny","messages":)" + messages + extra + "}");
}

TEST_F(LimitsTest, EverySizeLimitGetsItsErrorAndTheServerGoesOn) {
  GatewayOptions o;
  o.http.max_body_bytes = 8192;
  o.http.max_upload_bytes = 16384;
  o.http.max_header_bytes = 2048;
  o.http.max_header_fields = 20;
  o.limits.max_prompt_tokens = 64;
  o.limits.max_tokens = 32;
  o.limits.max_stop_strings = 2;
  o.limits.max_stop_string_bytes = 8;
  o.limits.max_stop_token_ids = 2;
  o.limits.max_logit_bias_entries = 2;
  o.limits.max_messages = 3;
  o.limits.max_tools = 1;
  o.limits.max_top_logprobs = 2;
  o.grammar.max_spec_bytes = 1024;
  o.voice.max_speech_input_chars = 16;
  o.voice.max_transcription_audio = absl::Seconds(1);
  Start(o);

  std::string many_headers;
  for (int i = 0; i < 30; ++i) absl::StrAppend(&many_headers, "X-Filler-", i, ": y\r\n");
  std::string big_schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 60; ++i) {
    absl::StrAppend(&big_schema, i ? "," : "", "\"field_", i, "\":{\"type\":\"string\"}");
  }
  big_schema += "}}";
  const std::vector<Case> cases = {
      {"body", Completion(R"(,"user":")" + std::string(9000, 'a') + "\""), 413, "request_too_large",
       "", "http.max_body_bytes"},
      {"upload",
       RawRequest("POST", "/v1/audio/transcriptions",
                  absl::StrCat("multipart/form-data; boundary=", kBoundary),
                  Upload(std::string(20000, 'a'), "a.wav")),
       413, "request_too_large", "", "http.max_upload_bytes"},
      {"header bytes",
       RawRequest("POST", "/v1/completions", "application/json",
                  R"({"model":"tiny","prompt":"x","max_tokens":2})",
                  "X-Big: " + std::string(3000, 'h') + "\r\n"),
       431, "request_header_fields_too_large", "", "http.max_header_bytes"},
      {"header fields",
       RawRequest("POST", "/v1/completions", "application/json",
                  R"({"model":"tiny","prompt":"x","max_tokens":2})", many_headers),
       431, "request_header_fields_too_large", "", "http.max_header_fields"},
      {"prompt tokens", Completion("", std::string(100, 'a')), 400, "limit_exceeded", "prompt",
       "limits.max_prompt_tokens"},
      {"max_tokens", Completion(R"(,"max_tokens":33)"), 400, "limit_exceeded", "max_tokens",
       "limits.max_tokens"},
      {"stop count", Completion(R"(,"stop":["a","b","c"])"), 400, "limit_exceeded", "stop",
       "limits.max_stop_strings"},
      {"stop length", Completion(R"(,"stop":["123456789"])"), 400, "limit_exceeded", "stop",
       "limits.max_stop_string_bytes"},
      {"stop_token_ids", Completion(R"(,"stop_token_ids":[1,2,3])"), 400, "limit_exceeded",
       "stop_token_ids", "limits.max_stop_token_ids"},
      {"logit_bias", Completion(R"(,"logit_bias":{"1":1,"2":1,"3":1})"), 400, "limit_exceeded",
       "logit_bias", "limits.max_logit_bias_entries"},
      {"completions logprobs", Completion(R"(,"logprobs":3)"), 400, "limit_exceeded", "logprobs",
       "limits.max_top_logprobs"},
      {"top_logprobs", Chat(R"(,"logprobs":true,"top_logprobs":3)"), 400, "limit_exceeded",
       "top_logprobs", "limits.max_top_logprobs"},
      {"messages", Chat("", R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},
                   {"role":"user","content":"c"},{"role":"user","content":"d"}])"),
       400, "limit_exceeded", "messages", "limits.max_messages"},
      {"tools", Chat(R"(,"tools":[{"type":"function","function":{"name":"f1"}},
                          {"type":"function","function":{"name":"f2"}}])"),
       400, "limit_exceeded", "tools", "limits.max_tools"},
      {"schema size",
       Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":)" +
            big_schema + "}}"),
       400, "limit_exceeded", "response_format", "grammar.max_spec_bytes"},
      {"n", Chat(R"(,"n":2)"), 400, "", "n", ""},
      {"speech input",
       RawRequest("POST", "/v1/audio/speech", "application/json",
                  R"({"model":"tts-1","voice":"alloy","input":"this is longer than sixteen"})"),
       400, "limit_exceeded", "input", "voice.max_speech_input_chars"},
      {"audio seconds",
       RawRequest("POST", "/v1/audio/transcriptions",
                  absl::StrCat("multipart/form-data; boundary=", kBoundary),
                  Upload(ToneWav(4000, 1.5), "a.wav")),
       400, "limit_exceeded", "file", "voice.max_transcription_audio"},
  };
  for (const Case& c : cases) {
    common::http::HttpClient client(port_);
    ASSERT_TRUE(client.connected()) << c.name;
    ASSERT_TRUE(client.SendRaw(c.raw)) << c.name;
    auto r = client.Read();
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.name << ": " << r->body;
    const Json& e = j["error"];
    EXPECT_EQ(e["code"].is_null() ? "" : e["code"].get<std::string>(), c.code) << c.name;
    EXPECT_EQ(e["param"].is_null() ? "" : e["param"].get<std::string>(), c.param) << c.name;
    EXPECT_EQ(e["type"], "invalid_request_error") << c.name;
    if (!c.option.empty()) {
      EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("(limit: " + c.option + " = "))
          << c.name;
    }
    ExpectStillServing(c.name);
  }
  // Nothing past a limit reached the routers or the speech services.
  EXPECT_EQ(asr_.num_calls(), 0);
  EXPECT_EQ(tts_.num_calls(), 0);
  // A request without max_tokens is capped at limits.max_tokens, not refused.
  auto capped = HttpCall(port_, "POST", "/v1/completions", R"({"model":"tiny","prompt":"x"})");
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->status, 200) << capped->body;
  EXPECT_EQ(Json::parse(capped->body)["usage"]["completion_tokens"], 32);
}

// One WebSocket message (in one frame, or fragmented into small frames) past
// http.max_ws_message_bytes closes that session with 1009 (message too big); the next session and
// plain HTTP are served.
TEST_F(LimitsTest, AWebSocketMessageOrFramePastTheLimitClosesOnlyThatSession) {
  GatewayOptions o;
  o.http.max_ws_message_bytes = 4096;
  Start(o);
  const std::string big =
      R"({"type":"conversation.item.create","pad":")" + std::string(6000, 'w') + R"("})";
  for (const bool fragmented : {false, true}) {
    WsClient client(port_);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE(client.WaitFor("session.created"));
    if (fragmented) {
      client.ws().auto_fragment(true);
      client.ws().write_buffer_bytes(1024);  // frames of 1 KiB, each under the limit
    }
    client.Send(big);
    EXPECT_FALSE(client.WaitFor("never")) << "the session must close";
    EXPECT_EQ(client.close_code(), 1009) << (fragmented ? "fragmented" : "one frame");
  }
  WsClient next(port_);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(next.WaitFor("session.created"));
  ASSERT_TRUE(next.Send(Json{{"type", "input_audio_buffer.clear"}}));
  EXPECT_TRUE(next.WaitFor("input_audio_buffer.cleared"));
  ExpectStillServing("websocket");
}

// voice.realtime.max_session: the session gets session_expired and a close; others go on.
TEST_F(LimitsTest, ARealtimeSessionEndsAtItsMaximumLength) {
  GatewayOptions o;
  o.voice.realtime.max_session = absl::Seconds(1);
  Start(o);
  WsClient client(port_);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.WaitFor("session.created"));
  std::optional<Json> e = client.WaitFor("error");
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["error"]["code"], "session_expired");
  EXPECT_FALSE(client.WaitFor("never"));
  EXPECT_EQ(client.close_code(), 1000);
  ExpectStillServing("session length");
}

// voice.realtime.max_input_audio_buffer (turn detection off): an append past it is refused with
// an error event and dropped; the session goes on (clear, then appends are taken again).
TEST_F(LimitsTest, TheRealtimeInputAudioBufferIsBounded) {
  GatewayOptions o;
  o.voice.realtime.max_input_audio_buffer = absl::Milliseconds(200);  // 9600 bytes of pcm16
  Start(o);
  WsClient client(port_);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.WaitFor("session.created"));
  ASSERT_TRUE(client.Send(Json{
      {"type", "session.update"},
      {"session", {{"type", "realtime"}, {"audio", {{"input", {{"turn_detection", nullptr}}}}}}}}));
  ASSERT_TRUE(client.WaitFor("session.updated"));
  auto append = [&](size_t bytes) {
    return client.Send(Json{{"type", "input_audio_buffer.append"},
                            {"audio", absl::Base64Escape(std::string(bytes, '\x01'))}});
  };
  ASSERT_TRUE(append(8000));
  ASSERT_TRUE(append(4000));  // 12000 > 9600
  std::optional<Json> e = client.WaitFor("error");
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["error"]["code"], "input_audio_buffer_too_large");
  EXPECT_EQ((*e)["error"]["param"], "audio");
  EXPECT_THAT((*e)["error"]["message"].get<std::string>(),
              HasSubstr("voice.realtime.max_input_audio_buffer"));
  ASSERT_EQ(asr_.num_calls(), 1);
  EXPECT_EQ(asr_.audio_bytes(0), 8000);  // the refused chunk never reached asr
  ASSERT_TRUE(client.Send(Json{{"type", "input_audio_buffer.clear"}}));
  ASSERT_TRUE(client.WaitFor("input_audio_buffer.cleared"));
  ASSERT_TRUE(append(8000));
  ASSERT_TRUE(client.Send(Json{{"type", "input_audio_buffer.clear"}}));
  ASSERT_TRUE(client.WaitFor("input_audio_buffer.cleared"));
  EXPECT_EQ(asr_.audio_bytes(0), 16000);
  ExpectStillServing("audio buffer");
}

// Client strings that name things (a file name in a multipart upload, a schema $ref) never
// become a path or a URL: the upload is transcribed whatever its file name, and a non-local
// $ref is refused before anything is fetched.
TEST_F(LimitsTest, ClientStringsNeverBecomePathsOrUrls) {
  Start();
  for (const std::string name : {"../../../../etc/passwd", "/etc/shadow", "http://127.0.0.1:1/x"}) {
    common::http::HttpClient client(port_);
    ASSERT_TRUE(client.SendRaw(RawRequest("POST", "/v1/audio/transcriptions",
                                          absl::StrCat("multipart/form-data; boundary=", kBoundary),
                                          Upload(ToneWav(16000, 0.2), name))));
    auto t = client.Read();
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->status, 200) << name << ": " << t->body;
  }
  for (const std::string ref :
       {"file:///etc/passwd", "http://127.0.0.1:1/schema.json", "/etc/passwd", "../x.json"}) {
    auto r = HttpCall(port_, "POST", "/v1/chat/completions",
                      Json{{"model", "tiny"},
                           {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                           {"response_format",
                            {{"type", "json_schema"},
                             {"json_schema", {{"name", "s"}, {"schema", {{"$ref", ref}}}}}}}}
                          .dump());
    ASSERT_TRUE(r) << ref;
    EXPECT_EQ(r->status, 400) << ref << ": " << r->body;
    EXPECT_THAT(r->body, HasSubstr("only local $ref")) << ref;
  }
  ExpectStillServing("paths");
}

// metrics.separate_port: the HTTP port answers 404 for /metrics, the metrics port serves it (the
// server main.cc starts from GatewayMetricsOptions::server()).
TEST_F(LimitsTest, MetricsMoveToTheirOwnPort) {
  GatewayOptions o;
  o.metrics.separate_port = true;
  o.metrics.host = "127.0.0.1";
  Start(o);
  ASSERT_OK_AND_ASSIGN(auto metrics,
                       common::metrics::MetricsServer::Start(o.metrics.server(), registry_));
  ExpectStillServing("metrics");
  auto main_port = HttpCall(port_, "GET", "/metrics");
  ASSERT_TRUE(main_port);
  EXPECT_EQ(main_port->status, 404);
  auto own = HttpCall(metrics->port(), "GET", "/metrics");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 200);
  EXPECT_THAT(own->body, HasSubstr("moe_gateway_http_responses_total{code=\"200\"}"));
}

// metrics.bearer_token_file on the HTTP port: no token or a wrong one = 401, the token = 200;
// the API itself is not affected.
TEST_F(LimitsTest, MetricsOnTheHttpPortCanRequireABearerToken) {
  const std::string path = ::testing::TempDir() + "/gateway_metrics_token";
  {
    std::ofstream f(path);
    f << "scrape-me\n";
  }
  GatewayOptions o;
  o.metrics.bearer_token_file = path;
  Start(o);
  auto none = HttpCall(port_, "GET", "/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->headers["www-authenticate"], "Bearer");
  EXPECT_THAT(none->body, ::testing::Not(HasSubstr("moe_gateway")));
  auto wrong = HttpCall(port_, "GET", "/metrics", "", "Bearer scrape-you");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto right = HttpCall(port_, "GET", "/metrics", "", "Bearer scrape-me");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_THAT(right->body, HasSubstr("moe_gateway_connections_open"));
  ExpectStillServing("metrics token");
  // A token file that cannot be read stops the gateway from starting.
  o.metrics.bearer_token_file = ::testing::TempDir() + "/no_such_token";
  EXPECT_FALSE(
      Gateway::Create(o, ModelInfo{"tiny", 512, 0},
                      GatewayDeps{*tokenizer_, *backend_, common::SystemClock::Get(), registry_})
          .ok());
}

}  // namespace
}  // namespace moe::gateway
