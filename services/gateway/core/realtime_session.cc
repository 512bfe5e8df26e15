#include "services/gateway/core/realtime_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/generation/finish_reason.h"
#include "services/gateway/core/openai_request.h"
#include "services/gateway/core/openai_response.h"

namespace moe::gateway {

using Json = nlohmann::json;

namespace {

constexpr int32_t kRate = 24000;  // pcm16 of the realtime API, in and out
constexpr int32_t kBytesPerMs = kRate * 2 / 1000;
// Tokens dropped from the end of a speculative prefix: the last word may still grow, and BPE
// may merge across it.
constexpr size_t kSpeculativeTrimTokens = 2;

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

// The reply in progress.
struct RealtimeSession::Response {
  uint64_t generation = 0;
  std::string id;
  std::string item_id;
  bool audio = true;
  std::string text;
  std::unique_ptr<GenerateCall> generate;
  std::unique_ptr<TtsCall> tts;
  tokenizer::IncrementalDetokenizer detok;
  bool generate_done = false;
  bool tts_done = false;
  std::deque<std::string> pending_audio;  // pcm16 not yet sent (pacing)
  int64_t audio_sent_bytes = 0;
  bool pump_scheduled = false;
  generation::Usage usage;
  bool spoken_turn = false;  // a reply to speech: the pipeline timings apply
  // Timings (gateway clock).
  absl::Time generate_sent;
  std::optional<absl::Time> first_token;
  std::optional<absl::Time> first_segment_ready;
  std::optional<absl::Time> first_audio;
  uint32_t tts_first_chunk_ms = 0;

  explicit Response(const tokenizer::Tokenizer& t) : detok(t, /*skip_special_tokens=*/true) {}
};

// Observers: each holds the session weakly and hands its events to the strand, tagged with the
// call's generation so that a replaced call's late events are dropped.
class RealtimeSession::AsrEvents final : public AsrObserver {
 public:
  AsrEvents(std::weak_ptr<RealtimeSession> s, uint64_t g) : session_(std::move(s)), gen_(g) {}
  void OnEvent(AsrEvent e) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, e = std::move(e)](RealtimeSession& r) mutable {
        r.OnAsrEvent(g, std::move(e));
      });
    }
  }
  void OnDone(absl::Status st) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, st = std::move(st)](RealtimeSession& r) { r.OnAsrDone(g, st); });
    }
  }

 private:
  const std::weak_ptr<RealtimeSession> session_;
  const uint64_t gen_;
};

class RealtimeSession::GenerateEvents final : public GenerateObserver {
 public:
  GenerateEvents(std::weak_ptr<RealtimeSession> s, uint64_t g) : session_(std::move(s)), gen_(g) {}
  void OnUpdate(GenerateUpdate u) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, u = std::move(u)](RealtimeSession& r) mutable {
        r.OnTokens(g, std::move(u));
      });
    }
  }
  void OnFailed(absl::Status st) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, st = std::move(st)](RealtimeSession& r) { r.OnGenerateFailed(g, st); });
    }
  }

 private:
  const std::weak_ptr<RealtimeSession> session_;
  const uint64_t gen_;
};

class RealtimeSession::TtsEvents final : public TtsObserver {
 public:
  TtsEvents(std::weak_ptr<RealtimeSession> s, uint64_t g) : session_(std::move(s)), gen_(g) {}
  void OnAudio(TtsAudio a) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, a = std::move(a)](RealtimeSession& r) mutable {
        r.OnTtsAudio(g, std::move(a));
      });
    }
  }
  void OnDone(absl::Status st) override {
    if (auto s = session_.lock()) {
      s->Post([g = gen_, st = std::move(st)](RealtimeSession& r) { r.OnTtsDone(g, st); });
    }
  }

 private:
  const std::weak_ptr<RealtimeSession> session_;
  const uint64_t gen_;
};

// A speculative prefill's end: the session may start the next one.
class RealtimeSession::PrefillEvents final : public GenerateObserver {
 public:
  explicit PrefillEvents(std::weak_ptr<RealtimeSession> s) : session_(std::move(s)) {}
  void OnUpdate(GenerateUpdate u) override {
    if (u.finish != generation::FinishReason::kNone) Done();
  }
  void OnFailed(absl::Status) override { Done(); }

 private:
  void Done() {
    if (auto s = session_.lock()) {
      s->Post([](RealtimeSession& r) { r.prefill_in_flight_ = false; });
    }
  }
  const std::weak_ptr<RealtimeSession> session_;
};

RealtimeSession::RealtimeSession(const RealtimeOptions& options, RealtimeSessionParams params,
                                 RealtimeDeps deps, std::shared_ptr<WebSocketWriter> writer)
    : options_(options),
      params_(std::move(params)),
      deps_(deps),
      writer_(std::move(writer)),
      started_(deps.clock.Now()),
      flavor_(params_.flavor) {
  config_.instructions = options_.instructions;
  config_.voice = options_.voice;
  config_.temperature = options_.temperature;
  config_.turn.silence_duration_ms =
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.silence_duration));
  deps_.metrics.realtime_sessions_active.Increment();
}

RealtimeSession::~RealtimeSession() { deps_.metrics.realtime_sessions_active.Decrement(); }

void RealtimeSession::Post(std::function<void(RealtimeSession&)> fn) {
  strand_.Post([weak = weak_from_this(), fn = std::move(fn)] {
    if (auto s = weak.lock(); s && !s->closed_) fn(*s);
  });
}

void RealtimeSession::Start() {
  Post([](RealtimeSession& s) {
    s.Send({{"type", "session.created"},
            {"session", SessionJson(s.config_, s.flavor_, s.params_.session_id, s.params_.model)}});
  });
  // The session's life is bounded.
  deps_.timers.RunAt(started_ + options_.max_session, [weak = weak_from_this()] {
    if (auto s = weak.lock()) {
      s->Post([](RealtimeSession& r) {
        r.Error("session_expired", "The session reached its maximum duration.", nullptr, nullptr,
                "invalid_request_error");
        r.writer_->Close(1000, "session expired");
        r.OnClosed();
      });
    }
  });
}

void RealtimeSession::OnText(std::string message) {
  Post([m = std::move(message)](RealtimeSession& s) { s.HandleEvent(m); });
}

void RealtimeSession::OnBinary(std::string) {
  Post([](RealtimeSession& s) {
    s.Error("invalid_event", "Binary messages are not part of the protocol; send JSON text.");
  });
}

void RealtimeSession::OnClosed() {
  strand_.Post([self = shared_from_this()] {
    if (self->closed_) return;
    self->closed_ = true;
    if (self->response_ != nullptr) {
      if (self->response_->generate) self->response_->generate->Cancel();
      if (self->response_->tts) self->response_->tts->Cancel();
      self->response_.reset();
    }
    if (self->prefill_) self->prefill_->Cancel();
    if (self->asr_) self->asr_->Cancel();
    self->asr_.reset();
  });
}

std::string RealtimeSession::NewId(const char* prefix) {
  return absl::StrFormat("%s%s%06d", prefix, params_.session_id.substr(5), ++next_id_);
}

void RealtimeSession::Send(Json event) {
  event["event_id"] = absl::StrFormat("event_%s%06d", params_.session_id.substr(5), ++next_event_);
  writer_->SendText(DumpJson(event));
}

void RealtimeSession::Error(const std::string& code, const std::string& message, const Json& param,
                            const Json& client_event_id, const std::string& type) {
  Send(ErrorEvent(type, code, message, param, client_event_id));
}

void RealtimeSession::HandleEvent(const std::string& message) {
  const Json event = Json::parse(message, nullptr, false);
  if (event.is_discarded() || !event.is_object() || !event.contains("type") ||
      !event["type"].is_string()) {
    Error("invalid_event", "The event is not a JSON object with a string `type`.");
    return;
  }
  const std::string type = event["type"].get<std::string>();
  if (type == "session.update") {
    OnSessionUpdate(event);
  } else if (type == "input_audio_buffer.append") {
    OnAppend(event);
  } else if (type == "input_audio_buffer.commit") {
    OnCommit(event);
  } else if (type == "input_audio_buffer.clear") {
    OnClear(event);
  } else if (type == "conversation.item.create") {
    OnItemCreate(event);
  } else if (type == "response.create") {
    OnResponseCreate(event);
  } else if (type == "response.cancel") {
    OnResponseCancel(event);
  } else {
    Error("unknown_event", absl::StrCat("Event type '", type, "' is not supported here."), "type",
          event.value("event_id", Json(nullptr)));
  }
}

void RealtimeSession::OnSessionUpdate(const Json& event) {
  const Json id = event.value("event_id", Json(nullptr));
  auto it = event.find("session");
  if (it == event.end()) {
    Error("missing_required_parameter", "session.update needs `session`.", "session", id);
    return;
  }
  const RealtimeTurnDetection before = config_.turn;
  absl::Status s = ApplySessionUpdate(*it, &config_, &flavor_);
  if (!s.ok()) {
    const std::string msg(s.message());
    Error("invalid_value", msg, msg.substr(0, msg.find(':')), id);
    return;
  }
  // A different endpointing needs a new asr stream (from the next audio on).
  if (before.server_vad != config_.turn.server_vad ||
      before.silence_duration_ms != config_.turn.silence_duration_ms) {
    CloseAsr();
  }
  Send({{"type", "session.updated"},
        {"session", SessionJson(config_, flavor_, params_.session_id, params_.model)}});
}

void RealtimeSession::EnsureAsr() {
  if (asr_ != nullptr) return;
  ++asr_generation_;
  asr_ = deps_.asr.Transcribe(
      {.sample_rate_hz = kRate,
       .endpoint_silence_ms = static_cast<uint32_t>(config_.turn.silence_duration_ms),
       .partial_results = true,
       .manual_endpointing = !config_.turn.server_vad},
      std::make_shared<AsrEvents>(weak_from_this(), asr_generation_));
}

void RealtimeSession::CloseAsr() {
  if (asr_ == nullptr) return;
  asr_->Cancel();
  asr_.reset();
  ++asr_generation_;
  speech_active_ = false;
}

void RealtimeSession::OnAppend(const Json& event) {
  const Json id = event.value("event_id", Json(nullptr));
  auto it = event.find("audio");
  std::string pcm;
  if (it == event.end() || !it->is_string() ||
      !absl::Base64Unescape(it->get<std::string>(), &pcm)) {
    Error("invalid_value", "`audio` must be base64-encoded pcm16.", "audio", id);
    return;
  }
  if (pcm.size() % 2 != 0) {
    Error("invalid_value", "`audio` must hold whole 16-bit samples (an even byte count).", "audio",
          id);
    return;
  }
  if (pcm.empty()) return;
  if (!deps_.asr.configured()) {
    Error("server_error", "Speech recognition is not configured on this gateway.", nullptr, id,
          "server_error");
    return;
  }
  const int64_t max_buffer =
      absl::ToInt64Milliseconds(options_.max_input_audio_buffer) * kBytesPerMs;
  if (!config_.turn.server_vad &&
      uncommitted_bytes_ + static_cast<int64_t>(pcm.size()) > max_buffer) {
    Error("input_audio_buffer_too_large",
          absl::StrCat("The input audio buffer would exceed ",
                       absl::ToInt64Milliseconds(options_.max_input_audio_buffer),
                       " ms of audio; commit or clear it (limit: "
                       "voice.realtime.max_input_audio_buffer). This chunk was dropped."),
          "audio", id);
    return;
  }
  EnsureAsr();
  uncommitted_bytes_ += static_cast<int64_t>(pcm.size());
  asr_->SendAudio(std::move(pcm));
}

void RealtimeSession::OnCommit(const Json& event) {
  const Json id = event.value("event_id", Json(nullptr));
  if (uncommitted_bytes_ < 100 * kBytesPerMs || asr_ == nullptr) {
    Error("input_audio_buffer_commit_empty",
          "Error committing input audio buffer: buffer too small. Expected at least 100ms of "
          "audio.",
          nullptr, id);
    return;
  }
  commit_pending_ = true;
  if (input_item_id_.empty()) input_item_id_ = NewId("item_");
  if (!speech_stopped_at_) speech_stopped_at_ = deps_.clock.Now();
  asr_->Finalize();
}

void RealtimeSession::OnClear(const Json& event) {
  if (asr_ != nullptr) asr_->Discard();
  uncommitted_bytes_ = 0;
  transcript_sent_.clear();
  speculated_chars_ = 0;
  input_item_id_.clear();
  Send({{"type", "input_audio_buffer.cleared"}});
}

void RealtimeSession::OnAsrEvent(uint64_t generation, AsrEvent e) {
  if (generation != asr_generation_) return;
  switch (e.type) {
    case AsrEvent::Type::kSpeechStarted:
      speech_active_ = true;
      speech_stopped_at_.reset();
      transcript_sent_.clear();
      speculated_chars_ = 0;
      if (input_item_id_.empty()) input_item_id_ = NewId("item_");
      if (config_.turn.server_vad) {
        Send({{"type", "input_audio_buffer.speech_started"},
              {"audio_start_ms", e.start_ms},
              {"item_id", input_item_id_}});
        if (response_ != nullptr && config_.turn.interrupt_response) {
          deps_.metrics.barge_ins_total.Increment();
          FinishResponse("cancelled", "turn_detected");
        }
      }
      break;
    case AsrEvent::Type::kPartial: {
      const std::string stable = e.text.substr(0, e.stable_bytes);
      if (config_.transcribe_input && stable.size() > transcript_sent_.size() &&
          stable.compare(0, transcript_sent_.size(), transcript_sent_) == 0) {
        std::string delta = stable.substr(transcript_sent_.size());
        if (!transcript_sent_.empty())
          delta = " " + std::string(absl::StripLeadingAsciiWhitespace(delta));
        Send({{"type", "conversation.item.input_audio_transcription.delta"},
              {"item_id", input_item_id_},
              {"content_index", 0},
              {"delta", delta}});
        transcript_sent_ = stable;
      }
      MaybeSpeculate(stable);
      break;
    }
    case AsrEvent::Type::kSpeechStopped:
      speech_active_ = false;
      speech_stopped_at_ = deps_.clock.Now();
      if (config_.turn.server_vad) {
        Send({{"type", "input_audio_buffer.speech_stopped"},
              {"audio_end_ms", e.end_ms},
              {"item_id", input_item_id_}});
      }
      break;
    case AsrEvent::Type::kFinal:
      OnFinalTranscript(e);
      break;
  }
}

void RealtimeSession::OnFinalTranscript(const AsrEvent& e) {
  final_at_ = deps_.clock.Now();
  asr_finalize_ms_ = e.finalize_ms;
  const bool committed = commit_pending_;
  commit_pending_ = false;
  // Server VAD heard only noise: no turn.
  if (e.text.empty() && !committed) {
    input_item_id_.clear();
    speech_stopped_at_.reset();
    return;
  }
  uncommitted_bytes_ = 0;
  if (input_item_id_.empty()) input_item_id_ = NewId("item_");
  const std::string previous = items_.empty() ? std::string() : items_.back().id;
  Send({{"type", "input_audio_buffer.committed"},
        {"previous_item_id", previous.empty() ? Json(nullptr) : Json(previous)},
        {"item_id", input_item_id_}});
  Item item{.id = input_item_id_, .role = "user", .text = e.text};
  EmitItemAdded(item);
  if (config_.transcribe_input) {
    Send({{"type", "conversation.item.input_audio_transcription.completed"},
          {"item_id", item.id},
          {"content_index", 0},
          {"transcript", e.text}});
  }
  if (flavor_ == RealtimeFlavor::kGa) {
    Send({{"type", "conversation.item.done"}, {"item", ItemJson(item, "completed")}});
  }
  AddItem(std::move(item));
  input_item_id_.clear();
  transcript_sent_.clear();
  speculated_chars_ = 0;
  if (config_.turn.server_vad && config_.turn.create_response && !committed) {
    if (response_ == nullptr) StartResponse(nullptr, nullptr);
  }
}

void RealtimeSession::MaybeSpeculate(const std::string& stable) {
  if (!options_.speculative_prefill || prefill_in_flight_ || response_ != nullptr) return;
  if (stable.size() < speculated_chars_ + static_cast<size_t>(options_.speculative_min_chars)) {
    return;
  }
  // The prompt as it will be at the end of speech, cut right after the stable words (the
  // template's continue_final_message): its blocks are a prefix of the final prompt's.
  CompletionRequest r;
  r.messages = Messages(config_.instructions);
  r.messages.push_back({{"role", "user"}, {"content", stable}});
  r.add_generation_prompt = false;
  r.continue_final_message = true;
  absl::StatusOr<std::vector<int32_t>> ids = deps_.prompts.Build(r);
  if (!ids.ok() || ids->size() <= kSpeculativeTrimTokens + 1 ||
      static_cast<int32_t>(ids->size()) >= params_.max_model_len) {
    return;
  }
  ids->resize(ids->size() - kSpeculativeTrimTokens);
  speculated_chars_ = stable.size();
  speculated_tokens_ = static_cast<int32_t>(ids->size());
  prefill_in_flight_ = true;
  deps_.metrics.speculative_prefills_total.Increment();
  deps_.metrics.speculative_prefill_tokens_total.Increment(static_cast<double>(ids->size()));
  GenerateRequest g;
  g.request_id = NewId("prefill_");
  g.http_request_id = params_.http_request_id;
  g.prompt_token_ids = *std::move(ids);
  g.cache_salt = params_.session_id;
  g.prefill_only = true;
  if (prefill_) prefill_->Cancel();
  prefill_ =
      deps_.backend.Generate(std::move(g), std::make_shared<PrefillEvents>(weak_from_this()));
}

void RealtimeSession::OnAsrDone(uint64_t generation, absl::Status status) {
  if (generation != asr_generation_) return;
  asr_.reset();
  speech_active_ = false;
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    Error("server_error",
          absl::StrCat("Speech recognition failed: ", status.message(),
                       " (the next audio reopens it)"),
          nullptr, nullptr, "server_error");
  }
}

Json RealtimeSession::Messages(const std::string& instructions) const {
  Json messages = Json::array();
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  for (const Item& i : items_) messages.push_back({{"role", i.role}, {"content", i.text}});
  return messages;
}

void RealtimeSession::AddItem(Item item) {
  items_.push_back(std::move(item));
  while (static_cast<int32_t>(items_.size()) > options_.max_items) items_.pop_front();
}

Json RealtimeSession::ItemJson(const Item& item, const std::string& status) const {
  Json content = Json::array();
  if (item.role == "user" && item.id.rfind("item_", 0) == 0 && !item.text.empty()) {
    content.push_back({{"type", "input_audio"}, {"transcript", item.text}});
  }
  Json j = {{"id", item.id},    {"object", "realtime.item"}, {"type", "message"},
            {"status", status}, {"role", item.role},         {"content", std::move(content)}};
  return j;
}

void RealtimeSession::EmitItemAdded(const Item& item) {
  const std::string previous = items_.empty() ? std::string() : items_.back().id;
  Json j = ItemJson(item, "completed");
  if (item.role == "user") {
    // The transcript follows in ...transcription.completed.
    j["content"] = Json::array({{{"type", "input_audio"}, {"transcript", nullptr}}});
  }
  Send({{"type", NamesFor(flavor_).item_added},
        {"previous_item_id", previous.empty() ? Json(nullptr) : Json(previous)},
        {"item", std::move(j)}});
}

void RealtimeSession::OnItemCreate(const Json& event) {
  const Json id = event.value("event_id", Json(nullptr));
  auto it = event.find("item");
  if (it == event.end() || !it->is_object()) {
    Error("missing_required_parameter", "conversation.item.create needs `item`.", "item", id);
    return;
  }
  const Json& item = *it;
  if (item.value("type", std::string("message")) != "message") {
    Error("invalid_value", "Only `message` items are supported.", "item.type", id);
    return;
  }
  const std::string role = item.value("role", std::string());
  if (role != "user" && role != "assistant" && role != "system") {
    Error("invalid_value", "item.role must be user, assistant or system.", "item.role", id);
    return;
  }
  std::string text;
  if (auto c = item.find("content"); c != item.end() && c->is_array()) {
    for (const Json& part : *c) {
      const std::string type = part.value("type", std::string());
      if (type == "input_text" || type == "text" || type == "output_text") {
        if (part.contains("text") && part["text"].is_string())
          text += part["text"].get<std::string>();
      } else {
        Error("invalid_value",
              absl::StrCat("Content type '", type,
                           "' is not supported in conversation.item.create "
                           "(send audio with input_audio_buffer.append)."),
              "item.content", id);
        return;
      }
    }
  }
  std::string item_id = item.value("id", std::string());
  if (item_id.empty() || item_id.size() > 64) item_id = NewId("item_");
  Item added{.id = item_id, .role = role, .text = text};
  Json j = {{"id", added.id},    {"object", "realtime.item"},
            {"type", "message"}, {"status", "completed"},
            {"role", role},      {"content", item.value("content", Json::array())}};
  const std::string previous = items_.empty() ? std::string() : items_.back().id;
  Send({{"type", NamesFor(flavor_).item_added},
        {"previous_item_id", previous.empty() ? Json(nullptr) : Json(previous)},
        {"item", j}});
  if (flavor_ == RealtimeFlavor::kGa) Send({{"type", "conversation.item.done"}, {"item", j}});
  AddItem(std::move(added));
}

void RealtimeSession::OnResponseCreate(const Json& event) {
  const Json id = event.value("event_id", Json(nullptr));
  if (response_ != nullptr) {
    Error("conversation_already_has_active_response",
          "Conversation already has an active response in progress.", nullptr, id);
    return;
  }
  StartResponse(event.value("response", Json(nullptr)), id);
}

void RealtimeSession::OnResponseCancel(const Json& event) {
  if (response_ == nullptr) {
    Error("response_cancel_not_active", "Cancellation failed: no active response found.", nullptr,
          event.value("event_id", Json(nullptr)));
    return;
  }
  FinishResponse("cancelled", "client_cancelled");
}

void RealtimeSession::StartResponse(const Json& overrides, const Json& client_event_id) {
  std::string instructions = config_.instructions;
  bool audio = config_.audio_out;
  int32_t max_tokens = config_.max_output_tokens;
  if (overrides.is_object()) {
    if (overrides.contains("instructions") && overrides["instructions"].is_string()) {
      instructions = overrides["instructions"].get<std::string>();
    }
    for (const char* key : {"output_modalities", "modalities"}) {
      if (auto m = overrides.find(key); m != overrides.end() && m->is_array()) {
        audio = std::find(m->begin(), m->end(), Json("audio")) != m->end();
      }
    }
    for (const char* key : {"max_output_tokens", "max_response_output_tokens"}) {
      if (auto m = overrides.find(key); m != overrides.end() && m->is_number_integer()) {
        max_tokens = std::max(1, m->get<int32_t>());
      }
    }
  }
  const int32_t cap = options_.max_response_tokens;
  max_tokens = max_tokens > 0 ? std::min(max_tokens, cap) : cap;
  if (audio && !deps_.tts.configured()) {
    Error("server_error", "Speech synthesis is not configured on this gateway.", nullptr,
          client_event_id, "server_error");
    return;
  }
  // The prompt: drop the oldest items until prompt + reply fit the context.
  std::vector<int32_t> prompt;
  while (true) {
    CompletionRequest r;
    r.messages = Messages(instructions);
    absl::StatusOr<std::vector<int32_t>> ids = deps_.prompts.Build(r);
    if (!ids.ok()) {
      Error("invalid_value", std::string(ids.status().message()), nullptr, client_event_id);
      return;
    }
    if (static_cast<int32_t>(ids->size()) + 1 < params_.max_model_len) {
      max_tokens = std::min(max_tokens, params_.max_model_len - static_cast<int32_t>(ids->size()));
      prompt = *std::move(ids);
      break;
    }
    if (items_.size() <= 1) {
      Error("context_length_exceeded", "The conversation does not fit the model's context.",
            nullptr, client_event_id);
      return;
    }
    items_.pop_front();
  }

  auto resp = std::make_unique<Response>(deps_.tokenizer);
  resp->generation = ++response_generation_;
  resp->id = NewId("resp_");
  resp->item_id = NewId("item_");
  resp->audio = audio;
  resp->spoken_turn = !overrides.is_object() && speech_stopped_at_.has_value();
  const RealtimeNames& names = NamesFor(flavor_);
  Json response_obj = {{"object", "realtime.response"}, {"id", resp->id},
                       {"status", "in_progress"},       {"status_details", nullptr},
                       {"output", Json::array()},       {"usage", nullptr}};
  response_obj[flavor_ == RealtimeFlavor::kGa ? "output_modalities" : "modalities"] =
      audio ? (flavor_ == RealtimeFlavor::kGa ? Json{"audio"} : Json{"text", "audio"})
            : Json{"text"};
  Send({{"type", "response.created"}, {"response", response_obj}});
  const Json item = {{"id", resp->item_id}, {"object", "realtime.item"},
                     {"type", "message"},   {"status", "in_progress"},
                     {"role", "assistant"}, {"content", Json::array()}};
  Send({{"type", "response.output_item.added"},
        {"response_id", resp->id},
        {"output_index", 0},
        {"item", item}});
  const std::string previous = items_.empty() ? std::string() : items_.back().id;
  Send({{"type", names.item_added},
        {"previous_item_id", previous.empty() ? Json(nullptr) : Json(previous)},
        {"item", item}});
  Json part = audio ? Json{{"type", names.audio_part}, {"transcript", ""}}
                    : Json{{"type", names.text_part}, {"text", ""}};
  Send({{"type", "response.content_part.added"},
        {"response_id", resp->id},
        {"item_id", resp->item_id},
        {"output_index", 0},
        {"content_index", 0},
        {"part", std::move(part)}});

  GenerateRequest g;
  g.request_id = resp->id;
  g.http_request_id = params_.http_request_id;
  g.prompt_token_ids = std::move(prompt);
  g.sampling.temperature = static_cast<float>(config_.temperature);
  g.sampling.max_tokens = max_tokens;
  g.cache_salt = params_.session_id;
  resp->generate_sent = deps_.clock.Now();
  if (prefill_ != nullptr) {
    // The speculative prefill has done its work (or is about to): its blocks are in the cache.
    prefill_.reset();
  }
  response_ = std::move(resp);
  const uint64_t gen = response_->generation;
  if (audio) {
    response_->tts = deps_.tts.Synthesize(
        {.voice = config_.voice, .sample_rate_hz = kRate, .speed = config_.speed},
        std::make_shared<TtsEvents>(weak_from_this(), gen));
  }
  std::unique_ptr<GenerateCall> call =
      deps_.backend.Generate(std::move(g), std::make_shared<GenerateEvents>(weak_from_this(), gen));
  if (response_ != nullptr && response_->generation == gen) response_->generate = std::move(call);
}

void RealtimeSession::OnTokens(uint64_t generation, GenerateUpdate u) {
  if (response_ == nullptr || response_->generation != generation) return;
  Response& r = *response_;
  if (!r.first_token && (!u.token_ids.empty() || u.finish != generation::FinishReason::kNone)) {
    r.first_token = deps_.clock.Now();
  }
  std::vector<int32_t> ids = std::move(u.token_ids);
  // A stop token is not rendered.
  if (u.finish == generation::FinishReason::kStop && !ids.empty()) ids.pop_back();
  std::string delta;
  for (int32_t id : ids) delta += r.detok.Add(id);
  if (u.finish != generation::FinishReason::kNone) delta += r.detok.Finish();
  if (!delta.empty()) {
    r.text += delta;
    const RealtimeNames& names = NamesFor(flavor_);
    Send({{"type", r.audio ? names.transcript_delta : names.text_delta},
          {"response_id", r.id},
          {"item_id", r.item_id},
          {"output_index", 0},
          {"content_index", 0},
          {"delta", delta}});
    if (r.tts) r.tts->SendText(delta);
  }
  if (u.finish == generation::FinishReason::kNone) return;
  if (u.usage) r.usage = *u.usage;
  r.generate_done = true;
  r.generate.reset();
  if (u.finish == generation::FinishReason::kError) {
    Error("server_error", absl::StrCat("Generation failed: ", u.error_message), nullptr, nullptr,
          "server_error");
    FinishResponse("failed", "error");
    return;
  }
  if (r.tts) {
    r.tts->CloseSend();
  } else {
    r.tts_done = true;
  }
  MaybeFinishResponse();
}

void RealtimeSession::OnGenerateFailed(uint64_t generation, absl::Status status) {
  if (response_ == nullptr || response_->generation != generation) return;
  response_->generate.reset();
  response_->generate_done = true;
  if (status.code() == absl::StatusCode::kCancelled) return;
  Error("server_error", absl::StrCat("Generation failed: ", status.message()), nullptr, nullptr,
        "server_error");
  FinishResponse("failed", "error");
}

void RealtimeSession::OnTtsAudio(uint64_t generation, TtsAudio a) {
  if (response_ == nullptr || response_->generation != generation) return;
  Response& r = *response_;
  if (!a.text.empty() && !r.first_segment_ready) {
    r.first_segment_ready = deps_.clock.Now() - absl::Milliseconds(a.segment_latency_ms);
    r.tts_first_chunk_ms = a.segment_latency_ms;
  }
  if (a.pcm_s16le.empty()) return;
  r.pending_audio.push_back(std::move(a.pcm_s16le));
  PumpAudio();
}

void RealtimeSession::PumpAudio() {
  if (response_ == nullptr) return;
  Response& r = *response_;
  const absl::Time now = deps_.clock.Now();
  while (!r.pending_audio.empty()) {
    if (r.first_audio) {
      // Audio already sent, minus what has played since the first byte: the client's buffer.
      const absl::Duration ahead =
          absl::Milliseconds(r.audio_sent_bytes / kBytesPerMs) - (now - *r.first_audio);
      if (ahead >= options_.audio_lead) {
        if (!r.pump_scheduled) {
          r.pump_scheduled = true;
          const uint64_t gen = r.generation;
          deps_.timers.RunAt(now + (ahead - options_.audio_lead), [weak = weak_from_this(), gen] {
            if (auto s = weak.lock()) {
              s->Post([gen](RealtimeSession& x) {
                if (x.response_ == nullptr || x.response_->generation != gen) return;
                x.response_->pump_scheduled = false;
                x.PumpAudio();
              });
            }
          });
        }
        return;
      }
    }
    std::string pcm = std::move(r.pending_audio.front());
    r.pending_audio.pop_front();
    if (!r.first_audio) {
      r.first_audio = now;
      if (r.spoken_turn && speech_stopped_at_) {
        deps_.metrics.stage_pipeline_seconds.Observe(
            absl::ToDoubleSeconds(now - *speech_stopped_at_));
      }
    }
    r.audio_sent_bytes += static_cast<int64_t>(pcm.size());
    Send({{"type", NamesFor(flavor_).audio_delta},
          {"response_id", r.id},
          {"item_id", r.item_id},
          {"output_index", 0},
          {"content_index", 0},
          {"delta", absl::Base64Escape(pcm)}});
  }
  MaybeFinishResponse();
}

void RealtimeSession::OnTtsDone(uint64_t generation, absl::Status status) {
  if (response_ == nullptr || response_->generation != generation) return;
  response_->tts.reset();
  response_->tts_done = true;
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    Error("server_error", absl::StrCat("Speech synthesis failed: ", status.message()), nullptr,
          nullptr, "server_error");
    FinishResponse("failed", "error");
    return;
  }
  MaybeFinishResponse();
}

void RealtimeSession::MaybeFinishResponse() {
  if (response_ == nullptr) return;
  const Response& r = *response_;
  if (r.generate_done && r.tts_done && r.pending_audio.empty()) {
    FinishResponse(r.usage.completion_tokens >= 0 ? "completed" : "incomplete", "");
  }
}

void RealtimeSession::FinishResponse(const std::string& status, const std::string& reason) {
  std::unique_ptr<Response> owned = std::move(response_);
  Response& r = *owned;
  if (r.generate) r.generate->Cancel();
  if (r.tts) r.tts->Cancel();
  const RealtimeNames& names = NamesFor(flavor_);
  const Json ids = {
      {"response_id", r.id}, {"item_id", r.item_id}, {"output_index", 0}, {"content_index", 0}};
  auto with = [&ids](Json j) {
    j.update(ids);
    return j;
  };
  Json part;
  if (r.audio) {
    Send(with({{"type", names.audio_done}}));
    Send(with({{"type", names.transcript_done}, {"transcript", r.text}}));
    part = {{"type", names.audio_part}, {"transcript", r.text}};
  } else {
    Send(with({{"type", names.text_done}, {"text", r.text}}));
    part = {{"type", names.text_part}, {"text", r.text}};
  }
  Send(with({{"type", "response.content_part.done"}, {"part", part}}));
  const std::string item_status = status == "completed" ? "completed" : "incomplete";
  const Json item = {{"id", r.item_id},     {"object", "realtime.item"},
                     {"type", "message"},   {"status", item_status},
                     {"role", "assistant"}, {"content", Json::array({part})}};
  Send({{"type", "response.output_item.done"},
        {"response_id", r.id},
        {"output_index", 0},
        {"item", item}});
  if (flavor_ == RealtimeFlavor::kGa) Send({{"type", "conversation.item.done"}, {"item", item}});

  // The per-stage timings of this reply (DESIGN.md §6 `moe bench voice` reads them).
  Json timings = Json::object();
  if (r.first_token) {
    const double prefill = Ms(*r.first_token - r.generate_sent);
    timings["prefill_ms"] = prefill;
    deps_.metrics.stage_prefill_seconds.Observe(prefill / 1000);
    if (r.first_segment_ready) {
      const double first_sentence = std::max(0.0, Ms(*r.first_segment_ready - *r.first_token));
      timings["first_sentence_ms"] = first_sentence;
      timings["tts_first_chunk_ms"] = r.tts_first_chunk_ms;
      deps_.metrics.stage_first_sentence_seconds.Observe(first_sentence / 1000);
      deps_.metrics.stage_tts_seconds.Observe(r.tts_first_chunk_ms / 1000.0);
    }
  }
  if (r.spoken_turn && speech_stopped_at_ && final_at_) {
    const double asr = Ms(*final_at_ - *speech_stopped_at_);
    timings["asr_final_ms"] = asr;
    timings["asr_finalize_ms"] = asr_finalize_ms_;
    deps_.metrics.stage_asr_seconds.Observe(asr / 1000);
    if (r.first_audio) timings["pipeline_ms"] = Ms(*r.first_audio - *speech_stopped_at_);
    timings["speculative_prefill_tokens"] = speculated_tokens_;
  }
  timings["cached_prompt_tokens"] = r.usage.cached_prompt_tokens;
  timings["audio_ms"] = r.audio_sent_bytes / kBytesPerMs;

  Json details = nullptr;
  if (status == "cancelled") details = {{"type", "cancelled"}, {"reason", reason}};
  if (status == "failed") details = {{"type", "failed"}, {"error", {{"type", "server_error"}}}};
  Json response_obj = {{"object", "realtime.response"},
                       {"id", r.id},
                       {"status", status},
                       {"status_details", details},
                       {"output", Json::array({item})},
                       {"usage",
                        {{"total_tokens", r.usage.prompt_tokens + r.usage.completion_tokens},
                         {"input_tokens", r.usage.prompt_tokens},
                         {"output_tokens", r.usage.completion_tokens},
                         {"input_token_details",
                          {{"cached_tokens", r.usage.cached_prompt_tokens},
                           {"text_tokens", r.usage.prompt_tokens},
                           {"audio_tokens", 0}}},
                         {"output_token_details",
                          {{"text_tokens", r.usage.completion_tokens}, {"audio_tokens", 0}}}}},
                       {"moe_timings", std::move(timings)}};
  Send({{"type", "response.done"}, {"response", std::move(response_obj)}});
  deps_.metrics.responses_total.Add({{"status", status}}).Increment();
  if (!r.text.empty()) AddItem({.id = r.item_id, .role = "assistant", .text = r.text});
  if (r.spoken_turn) {
    speech_stopped_at_.reset();
    final_at_.reset();
    speculated_tokens_ = 0;
  }
}

}  // namespace moe::gateway
