#include "services/gateway/core/gateway.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/file.h"
#include "common/base/hash.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/completion_session.h"
#include "services/gateway/core/openai_response.h"
#include "services/gateway/core/realtime_session.h"
#include "services/gateway/core/request_id.h"
#include "services/gateway/playground/playground_assets.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;

HttpResponse Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

HttpResponse JsonResponse(const Json& j) {
  HttpResponse r;
  r.body = DumpJson(j);
  return r;
}

const char* PromptParam(const CompletionRequest& r) {
  return r.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
}

}  // namespace

absl::StatusOr<ModelInfo> LoadModelInfo(const GatewayOptions& options) {
  ModelInfo info;
  namespace fs = std::filesystem;
  info.id = options.model_id;
  if (info.id.empty()) {
    fs::path p = fs::path(options.model_dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    info.id = p.filename().string();
  }
  info.max_model_len = options.max_model_len;
  if (info.max_model_len == 0) {
    const std::string path = (fs::path(options.model_dir) / "config.json").string();
    ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
    Json config = Json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
    }
    auto it = config.find("max_position_embeddings");
    if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": max_position_embeddings is missing or not a positive integer"));
    }
    info.max_model_len = static_cast<int32_t>(std::min<int64_t>(it->get<int64_t>(), 1 << 30));
  }
  std::error_code ec;
  auto mtime = fs::last_write_time(options.model_dir, ec);
  if (!ec) {
    info.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::file_clock::to_sys(mtime).time_since_epoch())
                       .count();
  }
  return info;
}

absl::StatusOr<std::unique_ptr<ApiKeyStore>> LoadApiKeys(const AuthOptions& options,
                                                         common::Clock& clock) {
  if (!options.api_keys_file.empty()) {
    if (!options.api_keys.empty()) {
      return absl::InvalidArgumentError(
          "auth.api_keys: set either api_keys or api_keys_file, not both");
    }
    return ApiKeyStore::Open(options.api_keys_file, options.api_keys_reload_interval, clock);
  }
  if (options.api_keys.empty()) return nullptr;
  std::vector<ApiKey> keys;
  for (size_t i = 0; i < options.api_keys.size(); ++i) {
    absl::StatusOr<common::SecretDigest> digest = common::ParseDigest(options.api_keys[i]);
    if (!digest.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth.api_keys[", i,
                       "]: not a sha256:<64 hex> digest (keys are stored hashed: "
                       "`moe hash-key`)"));
    }
    keys.push_back(ApiKey{.name = absl::StrCat("key", i + 1), .digest = *digest});
  }
  return ApiKeyStore::FromKeys(std::move(keys), clock);
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(const GatewayOptions& options,
                                                         const ModelInfo& model, GatewayDeps deps,
                                                         std::optional<GatewayVoiceDeps> voice) {
  if (model.max_model_len <= 0) {
    return absl::InvalidArgumentError("max_model_len: must be positive");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ApiKeyStore> keys, LoadApiKeys(options.auth, deps.clock));
  ASSIGN_OR_RETURN(
      std::unique_ptr<PromptBuilder> prompts,
      PromptBuilder::Create(deps.tokenizer, options.fallback_chat_template, deps.clock));
  std::string template_text = deps.tokenizer.chat_template();
  if (template_text.empty()) {
    ASSIGN_OR_RETURN(std::string_view fallback,
                     chat_template::FallbackTemplate(options.fallback_chat_template));
    template_text = std::string(fallback);
  }
  ASSIGN_OR_RETURN(ToolCallFormat tool_format,
                   ResolveToolCallFormat(options.tool_call_format, template_text));
  RETURN_IF_ERROR(options.grammar.Validate());
  // The gateway only checks that constraints compile (masks are the routers' work), so the end
  // ids do not matter here.
  ASSIGN_OR_RETURN(std::shared_ptr<const grammar::TokenVocabulary> vocabulary,
                   grammar::TokenVocabulary::FromTokenizer(
                       deps.tokenizer, deps.tokenizer.vocab_size(), deps.tokenizer.eos_ids()));
  auto grammar = std::make_unique<grammar::GrammarCache>(options.grammar, std::move(vocabulary),
                                                         deps.registry, deps.clock);
  ASSIGN_OR_RETURN(common::metrics::MetricsAuth metrics_auth,
                   common::metrics::MetricsAuth::FromFile(options.metrics.bearer_token_file));
  return std::unique_ptr<Gateway>(new Gateway(options, model, deps, voice, std::move(keys),
                                              std::move(prompts), std::move(grammar), tool_format,
                                              std::move(metrics_auth)));
}

Gateway::Gateway(const GatewayOptions& options, const ModelInfo& model, GatewayDeps deps,
                 std::optional<GatewayVoiceDeps> voice, std::unique_ptr<ApiKeyStore> api_keys,
                 std::unique_ptr<PromptBuilder> prompts,
                 std::unique_ptr<grammar::GrammarCache> grammar, ToolCallFormat tool_format,
                 common::metrics::MetricsAuth metrics_auth)
    : options_(options),
      model_(model),
      deps_(deps),
      voice_(voice),
      api_keys_(std::move(api_keys)),
      prompts_(std::move(prompts)),
      grammar_(std::move(grammar)),
      tool_format_(tool_format),
      metrics_auth_(std::move(metrics_auth)),
      request_limits_{.max_stop_strings = options.limits.max_stop_strings,
                      .max_stop_string_bytes = options.limits.max_stop_string_bytes,
                      .max_stop_token_ids = options.limits.max_stop_token_ids,
                      .max_logit_bias_entries = options.limits.max_logit_bias_entries,
                      .max_messages = options.limits.max_messages,
                      .max_tools = options.limits.max_tools,
                      .max_top_logprobs = options.limits.max_top_logprobs},
      id_seed_(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)),
      metrics_(deps.registry, model.id),
      voice_metrics_(deps.registry),
      audio_(voice ? std::make_unique<AudioEndpoints>(options.voice, options.limits.retry_after_s,
                                                      voice->asr, voice->tts, voice_metrics_)
                   : nullptr),
      rate_limiter_(options.limits.rate_limit_rps, options.limits.rate_limit_burst, deps.clock),
      in_flight_(options.limits.max_in_flight) {}

Gateway::~Gateway() = default;

std::string Gateway::NewRequestId(const char* prefix) {
  const uint64_t n = next_id_.fetch_add(1);
  return absl::StrFormat("%s%016x%08x", prefix, common::SplitMix64(id_seed_ ^ n),
                         static_cast<uint32_t>(common::SplitMix64(n + id_seed_)));
}

void Gateway::Reply(ResponseWriter& writer, HttpResponse response) {
  writer.Send(std::move(response));
}

void Gateway::Reject(ResponseWriter& writer, const ApiError& error, const char* reason) {
  metrics_.rejected_total.Add({{"reason", reason}}).Increment();
  writer.Send(error.ToResponse());
}

CancelFn Gateway::Handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool get = request.method == "GET" || request.method == "HEAD";
  // The playground: static files, public (its API calls carry the key the user enters).
  if (get && (path == "/" || path == "/index.html" || absl::StartsWith(path, "/playground/"))) {
    if (const PlaygroundAsset* a = FindPlaygroundAsset(path == "/" ? "/index.html" : path)) {
      HttpResponse r;
      r.content_type = std::string(a->content_type);
      r.body = std::string(a->body);
      r.headers.emplace_back("Cache-Control", "no-cache");
      Reply(*writer, std::move(r));
      return nullptr;
    }
  }
  if (path != "/healthz" && path != "/readyz" && path != "/metrics") {
    // Every API answer carries the request's id (core/request_id.h); probes and scrapes do not
    // need one, nor a log line each.
    if (!IsValidRequestId(request.request_id)) request.request_id = NewRequestId("req-");
    writer = WithRequestId(std::move(writer), request.request_id,
                           absl::StrCat(request.method, " ", path));
  }
  const bool post = request.method == "POST";
  auto expect = [&](bool ok) {
    if (!ok) Reply(*writer, ApiError::MethodNotAllowed(request.method, path).ToResponse());
    return ok;
  };
  if (path == "/healthz") {
    if (expect(get)) Reply(*writer, Text(200, "ok\n"));
    return nullptr;
  }
  if (path == "/readyz") {
    if (!expect(get)) return nullptr;
    const bool ready = !draining() && deps_.backend.Ready();
    Reply(*writer, Text(ready ? 200 : 503, ready ? "ready\n" : "not ready\n"));
    return nullptr;
  }
  if (path == "/metrics" && !options_.metrics.separate_port) {
    if (!expect(get)) return nullptr;
    if (!metrics_auth_.Allows(request.authorization)) {
      ApiError e =
          ApiError::Unauthorized("/metrics needs a bearer token (metrics.bearer_token_file).");
      HttpResponse r = e.ToResponse();
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      Reply(*writer, std::move(r));
      return nullptr;
    }
    HttpResponse r = Text(200, deps_.registry.TextExposition());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    Reply(*writer, std::move(r));
    return nullptr;
  }
  const bool completions = path == "/v1/completions";
  if (path == "/v1/chat/completions" || completions) {
    if (!expect(post)) return nullptr;
    return HandleCompletion(completions ? Endpoint::kCompletions : Endpoint::kChatCompletions,
                            request, writer);
  }
  if (path == "/v1/audio/transcriptions" || path == "/v1/audio/speech") {
    if (!expect(post)) return nullptr;
    return HandleAudio(path, request, writer);
  }
  if (path == "/v1/realtime") {
    ApiError e = ApiError::InvalidRequest(
        "/v1/realtime is a WebSocket: connect with an Upgrade: websocket request.");
    e.http_status = 426;
    e.code = "upgrade_required";
    Reply(*writer, e.ToResponse());
    return nullptr;
  }
  if (path == "/v1/models" || path == "/tokenize" || path == "/detokenize") {
    if (!expect(path == "/v1/models" ? get : post)) return nullptr;
    if (std::optional<ApiError> e = CheckAccess(request)) {
      Reject(*writer, *e, e->http_status == 401 ? "auth" : "rate_limit");
      return nullptr;
    }
    if (path == "/v1/models") {
      Reply(*writer, HandleModels());
    } else if (path == "/tokenize") {
      Reply(*writer, HandleTokenize(request));
    } else {
      Reply(*writer, HandleDetokenize(request));
    }
    return nullptr;
  }
  if (absl::StartsWith(path, "/v1/models/")) {
    if (!expect(get)) return nullptr;
    const std::string id = path.substr(std::string("/v1/models/").size());
    if (id != model_.id) {
      Reply(*writer, ApiError::ModelNotFound(id).ToResponse());
    } else {
      Reply(*writer, JsonResponse(Json::parse(HandleModels().body)["data"][0]));
    }
    return nullptr;
  }
  Reply(*writer, ApiError::NotFound(path).ToResponse());
  return nullptr;
}

std::optional<ApiError> Gateway::CheckAccess(const HttpRequest& request,
                                             std::shared_ptr<const ApiKey>* key_out) {
  std::shared_ptr<const ApiKey> key;
  if (api_keys_ != nullptr) {
    absl::string_view auth = absl::StripAsciiWhitespace(request.authorization);
    if (auth.empty()) {
      return ApiError::Unauthorized(
          "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.");
    }
    if (!absl::ConsumePrefix(&auth, "Bearer ") && !absl::ConsumePrefix(&auth, "bearer ")) {
      return ApiError::Unauthorized("The Authorization header must be 'Bearer YOUR_KEY'.");
    }
    const absl::string_view presented = absl::StripAsciiWhitespace(auth);
    key = api_keys_->Find(std::string_view(presented.data(), presented.size()));
    if (key == nullptr) return ApiError::Unauthorized("Incorrect API key provided.");
  }
  // Buckets by key name (the key itself is never kept), else by client address.
  const std::string bucket =
      key == nullptr ? absl::StrCat("client:", request.client) : absl::StrCat("key:", key->name);
  const double rps = key != nullptr && key->limits.rate_limit_rps >= 0
                         ? key->limits.rate_limit_rps
                         : options_.limits.rate_limit_rps;
  const double burst = key != nullptr && key->limits.rate_limit_burst >= 0
                           ? key->limits.rate_limit_burst
                           : options_.limits.rate_limit_burst;
  const absl::Duration wait = rate_limiter_.TryAcquire(bucket, rps, burst);
  if (wait > absl::ZeroDuration()) {
    return ApiError::RateLimited(
        std::max(1, static_cast<int>(std::ceil(absl::ToDoubleSeconds(wait)))));
  }
  if (key_out != nullptr) *key_out = std::move(key);
  return std::nullopt;
}

std::optional<ApiError> Gateway::CheckPromptIds(const CompletionRequest& request,
                                                const std::vector<int32_t>& prompt) const {
  const char* param = PromptParam(request);
  if (prompt.empty()) return ApiError::InvalidParam(param, "The prompt is empty.");
  const int32_t vocab = deps_.tokenizer.vocab_size();
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return ApiError::InvalidParam(
          param, absl::StrCat("Token id ", id, " is out of vocabulary (size ", vocab, ")."));
    }
  }
  for (int32_t id : request.sampling.stop_token_ids) {
    if (id >= vocab) {
      return ApiError::InvalidParam("stop_token_ids",
                                    absl::StrCat("Token id ", id, " is out of vocabulary."));
    }
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= vocab) {
      return ApiError::InvalidParam("logit_bias",
                                    absl::StrCat("Token id ", id, " is out of vocabulary."));
    }
  }
  const int64_t p = static_cast<int64_t>(prompt.size());
  const int32_t max_prompt = options_.limits.max_prompt_tokens > 0
                                 ? std::min(options_.limits.max_prompt_tokens, model_.max_model_len)
                                 : model_.max_model_len;
  if (p > max_prompt && max_prompt < model_.max_model_len) {
    // The operator's limit binds before the context does.
    return ApiError::LimitExceeded(
        param, "limits.max_prompt_tokens", max_prompt,
        absl::StrCat("The prompt has ", p, " tokens; at most ", max_prompt, " are allowed."));
  }
  if (p >= model_.max_model_len) {
    ApiError e = ApiError::InvalidParam(
        param, absl::StrCat("This model's maximum context length is ", model_.max_model_len,
                            " tokens. However, your request has ", p,
                            " input tokens. Please reduce the length of the input."));
    e.code = "context_length_exceeded";
    return e;
  }
  if (request.max_tokens && p + *request.max_tokens > model_.max_model_len) {
    ApiError e = ApiError::InvalidParam(
        request.endpoint == Endpoint::kChatCompletions ? "max_completion_tokens" : "max_tokens",
        absl::StrCat("'max_tokens' is too large: ", *request.max_tokens,
                     ". This model's "
                     "maximum context length is ",
                     model_.max_model_len,
                     " tokens and your "
                     "request has ",
                     p, " input tokens (", p, " + ", *request.max_tokens, " > ",
                     model_.max_model_len, ")."));
    e.code = "context_length_exceeded";
    return e;
  }
  return std::nullopt;
}

CancelFn Gateway::HandleCompletion(Endpoint endpoint, const HttpRequest& http,
                                   const std::shared_ptr<ResponseWriter>& writer) {
  const absl::Time received = deps_.clock.Now();
  if (draining()) {
    Reject(*writer,
           ApiError::Overloaded("The server is shutting down.", options_.limits.retry_after_s),
           "draining");
    return nullptr;
  }
  std::shared_ptr<const ApiKey> key;
  if (std::optional<ApiError> e = CheckAccess(http, &key)) {
    Reject(*writer, *e, e->http_status == 401 ? "auth" : "rate_limit");
    return nullptr;
  }
  CompletionRequest request;
  ApiError error;
  if (!ParseCompletionRequest(endpoint, http.body, request_limits_, &request, &error)) {
    Reject(*writer, error, "invalid");
    return nullptr;
  }
  if (request.model != model_.id) {
    Reject(*writer, ApiError::ModelNotFound(request.model), "invalid");
    return nullptr;
  }
  // The output constraint: response_format / guided_*, or a required / named tool_choice.
  generation::Constraint constraint = request.constraint;
  std::string constraint_param = request.constraint_param;
  if (std::optional<generation::Constraint> tc = ToolChoiceConstraint(request)) {
    constraint = *std::move(tc);
    constraint_param = "tools";
  }
  if (constraint.active()) {
    // The size first, so that a schema too large says which limit (the cache refuses it too).
    int64_t spec_bytes = static_cast<int64_t>(constraint.spec.size());
    for (const std::string& c : constraint.choices) spec_bytes += static_cast<int64_t>(c.size());
    if (spec_bytes > options_.grammar.max_spec_bytes) {
      Reject(*writer,
             ApiError::LimitExceeded(constraint_param, "grammar.max_spec_bytes",
                                     options_.grammar.max_spec_bytes,
                                     absl::StrCat("The output constraint from '", constraint_param,
                                                  "' is ", spec_bytes, " bytes.")),
             "invalid");
      return nullptr;
    }
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
        grammar_->Get(constraint);
    if (!compiled.ok()) {
      Reject(*writer,
             ApiError::InvalidParam(
                 constraint_param, absl::StrCat("'", constraint_param,
                                                "' cannot be used: ", compiled.status().message())),
             "invalid");
      return nullptr;
    }
  }
  absl::StatusOr<std::vector<int32_t>> prompt = prompts_->Build(request);
  if (!prompt.ok()) {
    ApiError e =
        ApiError::InvalidParam(PromptParam(request), std::string(prompt.status().message()));
    if (prompt.status().code() == absl::StatusCode::kResourceExhausted) e.http_status = 413;
    Reject(*writer, e, "invalid");
    return nullptr;
  }
  if (std::optional<ApiError> e = CheckPromptIds(request, *prompt)) {
    Reject(*writer, *e, "invalid");
    return nullptr;
  }
  const int32_t prompt_tokens = static_cast<int32_t>(prompt->size());
  int32_t max_tokens = model_.max_model_len - prompt_tokens;
  if (request.max_tokens) {
    max_tokens = *request.max_tokens;
  } else if (options_.default_max_tokens > 0) {
    max_tokens = std::min(max_tokens, options_.default_max_tokens);
  }
  // Per-key limits: a cap on max_tokens (an explicit request above it is refused; an implicit
  // one is clamped), and who may set a priority.
  const char* max_tokens_param =
      endpoint == Endpoint::kChatCompletions ? "max_completion_tokens" : "max_tokens";
  // The gateway's cap: an explicit request above it is refused, an implicit one clamped.
  if (options_.limits.max_tokens > 0 && max_tokens > options_.limits.max_tokens) {
    if (request.max_tokens) {
      Reject(
          *writer,
          ApiError::LimitExceeded(max_tokens_param, "limits.max_tokens", options_.limits.max_tokens,
                                  absl::StrCat("'", max_tokens_param, "' is ", max_tokens, ".")),
          "invalid");
      return nullptr;
    }
    max_tokens = options_.limits.max_tokens;
  }
  if (key != nullptr && key->limits.max_tokens > 0 && max_tokens > key->limits.max_tokens) {
    if (request.max_tokens) {
      Reject(*writer,
             ApiError::InvalidParam(max_tokens_param,
                                    absl::StrCat("'", max_tokens_param, "' is ", max_tokens,
                                                 ", above this API key's "
                                                 "limit of ",
                                                 key->limits.max_tokens, " tokens.")),
             "invalid");
      return nullptr;
    }
    max_tokens = key->limits.max_tokens;
  }
  if (request.priority != 0 &&
      !(key != nullptr ? key->limits.allow_priority
                       : api_keys_ == nullptr && options_.auth.priority_without_key)) {
    Reject(*writer,
           ApiError::Forbidden("priority",
                               "This API key may not set 'priority' (the request's "
                               "place in the queue)."),
           "forbidden");
    return nullptr;
  }
  if (key != nullptr && key->limits.max_concurrency > 0) {
    if (key->in_flight->fetch_add(1) >= key->limits.max_concurrency) {
      key->in_flight->fetch_sub(1);
      Reject(*writer, ApiError::RateLimited(options_.limits.retry_after_s), "rate_limit");
      return nullptr;
    }
  } else if (key != nullptr) {
    key->in_flight->fetch_add(1);
  }
  if (!in_flight_.TryAcquire()) {
    if (key != nullptr) key->in_flight->fetch_sub(1);
    Reject(*writer,
           ApiError::Overloaded("Too many requests in flight; retry later.",
                                options_.limits.retry_after_s),
           "overloaded");
    return nullptr;
  }
  metrics_.stage_parse_seconds.Observe(absl::ToDoubleSeconds(deps_.clock.Now() - received));
  metrics_.requests_running.Increment();

  SessionParams params;
  params.meta.endpoint = endpoint;
  params.meta.id = NewRequestId(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
  params.meta.created = absl::ToUnixSeconds(received);
  params.meta.model = model_.id;
  params.stream = request.stream;
  params.include_usage = request.include_usage;
  params.logprobs = request.sampling.returns_logprobs();
  params.top_logprobs = request.sampling.num_top_logprobs();
  params.skip_special_tokens = request.skip_special_tokens;
  params.stop = request.stop;
  params.include_stop_str_in_output = request.include_stop_str_in_output;
  params.prompt_tokens = prompt_tokens;
  params.received = received;
  params.retry_after_s = options_.limits.retry_after_s;
  if (endpoint == Endpoint::kChatCompletions && !request.tool_functions.empty()) {
    ToolSessionParams tools;
    for (const ToolFunction& f : request.tool_functions) tools.functions.push_back(f.name);
    tools.format = tool_format_;
    switch (request.tool_choice.mode) {
      case ToolChoiceMode::kNamed:
        tools.mode = ToolCallMode::kNamed;
        tools.named = request.tool_choice.name;
        params.tools = std::move(tools);
        break;
      case ToolChoiceMode::kRequired:
        tools.mode = ToolCallMode::kRequired;
        params.tools = std::move(tools);
        break;
      case ToolChoiceMode::kAuto:
        if (tool_format_ == ToolCallFormat::kNone) break;  // no known format: plain content
        tools.mode = ToolCallMode::kAuto;
        // Mistral tokenizers make [TOOL_CALLS] a special token: keep it in the text to parse.
        if (tool_format_ == ToolCallFormat::kMistral) params.skip_special_tokens = false;
        params.tools = std::move(tools);
        break;
      case ToolChoiceMode::kNone:
        break;
    }
  }

  GenerateRequest generate;
  generate.request_id = params.meta.id;
  generate.http_request_id = http.request_id;
  generate.prompt_token_ids = std::move(*prompt);
  generate.sampling = std::move(request.sampling);
  generate.sampling.max_tokens = max_tokens;
  generate.cache_salt = request.cache_salt;
  generate.priority = request.priority;
  generate.constraint = std::move(constraint);

  auto session = std::make_shared<CompletionSession>(
      std::move(params), deps_.tokenizer, writer, deps_.clock, metrics_,
      [this, key_in_flight = key != nullptr ? key->in_flight : nullptr] {
        in_flight_.Release();
        if (key_in_flight) key_in_flight->fetch_sub(1);
        metrics_.requests_running.Decrement();
      });
  session->Start(deps_.backend, std::move(generate));
  return [weak = std::weak_ptr<CompletionSession>(session)] {
    if (std::shared_ptr<CompletionSession> s = weak.lock()) s->Cancel();
  };
}

CancelFn Gateway::HandleAudio(const std::string& path, const HttpRequest& http,
                              const std::shared_ptr<ResponseWriter>& writer) {
  if (draining()) {
    Reject(*writer,
           ApiError::Overloaded("The server is shutting down.", options_.limits.retry_after_s),
           "draining");
    return nullptr;
  }
  if (std::optional<ApiError> e = CheckAccess(http)) {
    Reject(*writer, *e, e->http_status == 401 ? "auth" : "rate_limit");
    return nullptr;
  }
  if (audio_ == nullptr) {
    Reject(*writer,
           ApiError::Overloaded("Voice is not configured on this gateway (voice.asr, voice.tts).",
                                options_.limits.retry_after_s),
           "overloaded");
    return nullptr;
  }
  if (!in_flight_.TryAcquire()) {
    Reject(*writer,
           ApiError::Overloaded("Too many requests in flight; retry later.",
                                options_.limits.retry_after_s),
           "overloaded");
    return nullptr;
  }
  auto release = [this] { in_flight_.Release(); };
  return path == "/v1/audio/transcriptions" ? audio_->Transcribe(http, writer, release)
                                            : audio_->Speak(http, writer, release);
}

UpgradeResult Gateway::Upgrade(HttpRequest request, std::shared_ptr<WebSocketWriter> writer) {
  UpgradeResult result;
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (!IsValidRequestId(request.request_id)) request.request_id = NewRequestId("req-");
  if (path != "/v1/realtime") {
    result.rejection = ApiError::NotFound(path).ToResponse();
    return result;
  }
  if (draining()) {
    metrics_.rejected_total.Add({{"reason", "draining"}}).Increment();
    result.rejection =
        ApiError::Overloaded("The server is shutting down.", options_.limits.retry_after_s)
            .ToResponse();
    return result;
  }
  // Browsers cannot set headers on a WebSocket: OpenAI's browser client sends the key as the
  // subprotocol "openai-insecure-api-key.KEY" next to "realtime".
  const std::string protocols = request.Header("sec-websocket-protocol");
  for (absl::string_view p : absl::StrSplit(protocols, ',')) {
    p = absl::StripAsciiWhitespace(p);
    if (p == "realtime") result.subprotocol = "realtime";
    if (absl::ConsumePrefix(&p, "openai-insecure-api-key.") && request.authorization.empty()) {
      request.authorization = absl::StrCat("Bearer ", p);
    }
  }
  if (std::optional<ApiError> e = CheckAccess(request)) {
    metrics_.rejected_total.Add({{"reason", e->http_status == 401 ? "auth" : "rate_limit"}})
        .Increment();
    result.rejection = e->ToResponse();
    return result;
  }
  // ?model=: the served model, or a name OpenAI clients send.
  std::string model;
  const size_t q = request.target.find('?');
  if (q != std::string::npos) {
    for (absl::string_view kv : absl::StrSplit(request.target.substr(q + 1), '&')) {
      if (absl::ConsumePrefix(&kv, "model=")) model = std::string(kv);
    }
  }
  const auto& names = options_.voice.realtime_models;
  if (!model.empty() && model != model_.id &&
      std::find(names.begin(), names.end(), model) == names.end()) {
    result.rejection = ApiError::ModelNotFound(model).ToResponse();
    return result;
  }
  if (!voice_ || !voice_->asr.configured() || !voice_->tts.configured()) {
    result.rejection =
        ApiError::Overloaded("Voice is not configured on this gateway (voice.asr, voice.tts).",
                             options_.limits.retry_after_s)
            .ToResponse();
    return result;
  }
  RealtimeSessionParams params;
  params.model = model_.id;
  params.max_model_len = model_.max_model_len;
  params.flavor = absl::StrContains(request.Header("openai-beta"), "realtime=v1")
                      ? RealtimeFlavor::kBeta
                      : RealtimeFlavor::kGa;
  params.session_id = NewRequestId("sess_");
  params.http_request_id = request.request_id;
  MOE_LOG_INFO("gateway: {} realtime session {} ({})", request.request_id, params.session_id,
               params.flavor == RealtimeFlavor::kBeta ? "beta" : "GA");
  auto session = std::make_shared<RealtimeSession>(options_.voice.realtime, std::move(params),
                                                   RealtimeDeps{.backend = deps_.backend,
                                                                .asr = voice_->asr,
                                                                .tts = voice_->tts,
                                                                .tokenizer = deps_.tokenizer,
                                                                .prompts = *prompts_,
                                                                .clock = deps_.clock,
                                                                .timers = voice_->timers,
                                                                .metrics = voice_metrics_},
                                                   std::move(writer));
  session->Start();
  result.handler = std::move(session);
  return result;
}

HttpResponse Gateway::HandleModels() const {
  Json model = {{"id", model_.id},
                {"object", "model"},
                {"created", model_.created},
                {"owned_by", "moe"},
                {"root", model_.id},
                {"parent", nullptr},
                {"max_model_len", model_.max_model_len}};
  return JsonResponse(Json{{"object", "list"}, {"data", Json::array({std::move(model)})}});
}

HttpResponse Gateway::HandleTokenize(const HttpRequest& request) const {
  Json body = Json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return ApiError::InvalidRequest("The request body is not a JSON object.").ToResponse();
  }
  if (body.contains("model") && body["model"] != model_.id) {
    return ApiError::ModelNotFound(body["model"].is_string() ? body["model"].get<std::string>()
                                                             : body["model"].dump())
        .ToResponse();
  }
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    body["model"] = model_.id;
    CompletionRequest parsed;
    ApiError error;
    if (!ParseCompletionRequest(Endpoint::kChatCompletions, body.dump(), request_limits_, &parsed,
                                &error)) {
      return error.ToResponse();
    }
    absl::StatusOr<std::vector<int32_t>> built = prompts_->Build(parsed);
    if (!built.ok()) {
      return ApiError::InvalidParam("messages", std::string(built.status().message())).ToResponse();
    }
    ids = std::move(*built);
  } else {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) {
      return ApiError::InvalidParam("prompt", "'prompt' (a string) or 'messages' is required")
          .ToResponse();
    }
    bool add_special = true;
    if (auto it = body.find("add_special_tokens"); it != body.end()) {
      if (!it->is_boolean()) {
        return ApiError::InvalidParam("add_special_tokens", "must be a boolean").ToResponse();
      }
      add_special = it->get<bool>();
    }
    ids = deps_.tokenizer.Encode(prompt->get<std::string>(), add_special);
  }
  return JsonResponse(
      Json{{"count", ids.size()}, {"max_model_len", model_.max_model_len}, {"tokens", ids}});
}

HttpResponse Gateway::HandleDetokenize(const HttpRequest& request) const {
  Json body = Json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return ApiError::InvalidRequest("The request body is not a JSON object.").ToResponse();
  }
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return ApiError::InvalidParam("tokens", "'tokens' must be a list of token ids").ToResponse();
  }
  std::vector<int32_t> ids;
  const int32_t vocab = deps_.tokenizer.vocab_size();
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      return ApiError::InvalidParam("tokens",
                                    absl::StrCat("'tokens' must hold ids in [0, ", vocab, ")"))
          .ToResponse();
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return JsonResponse(Json{{"prompt", deps_.tokenizer.Decode(ids, false)}});
}

}  // namespace moe::gateway
