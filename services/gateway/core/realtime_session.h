// One /v1/realtime WebSocket: OpenAI's Realtime protocol (realtime_protocol.h: beta or GA
// names) over the asr and tts services and the routers, with the stages overlapped
// (DESIGN.md §1):
//
//   input_audio_buffer.append -> asr stream (one per session, 24 kHz pcm16)
//     asr SPEECH_STARTED -> input_audio_buffer.speech_started; a reply in progress is cancelled
//                           (barge-in: response.done, status cancelled, reason turn_detected)
//     asr partials       -> conversation.item.input_audio_transcription.delta (the stable part)
//                           and, when it grew by realtime.speculative_min_chars, a prefill-only
//                           Generate of the conversation so far plus the stable transcript, so
//                           that the router's prefix cache holds it at the end of speech
//     asr SPEECH_STOPPED -> input_audio_buffer.speech_stopped
//     asr final          -> input_audio_buffer.committed, the user item,
//     ...transcription.completed,
//                           then a response (server VAD with create_response)
//   response -> Generate (token stream, the session's cache salt) -> text deltas -> tts stream
//            -> audio deltas (base64 pcm16), sent ahead of real time by at most
//               realtime.audio_lead -> the .done events and response.done (with usage and
//               the per-stage timings as `moe_timings`).
//
// Client events served: session.update, input_audio_buffer.append|commit|clear,
// conversation.item.create (text messages), response.create (optional instructions,
// output_modalities / modalities, max_output_tokens), response.cancel. Anything else gets an
// `error` event (invalid_request_error, code unknown_event); malformed events too. The
// conversation is bounded (realtime.max_items; the prompt drops the oldest items to fit the
// context), and so is the session's life (realtime.max_session).
//
// Thread-safety: all work runs on the session's strand (strand.h), whatever thread delivers
// it; the public methods may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/gateway_options.h"
#include "services/gateway/core/generate_backend.h"
#include "services/gateway/core/http_types.h"
#include "services/gateway/core/prompt_builder.h"
#include "services/gateway/core/realtime_protocol.h"
#include "services/gateway/core/strand.h"
#include "services/gateway/core/timer_queue.h"
#include "services/gateway/core/voice_backend.h"
#include "services/gateway/core/voice_metrics.h"

namespace moe::gateway {

// What a session borrows; everything must outlive it.
struct RealtimeDeps {
  GenerateBackend& backend;
  AsrClient& asr;
  TtsClient& tts;
  const tokenizer::Tokenizer& tokenizer;
  const PromptBuilder& prompts;
  common::Clock& clock;
  TimerQueue& timers;
  VoiceMetrics& metrics;
};

struct RealtimeSessionParams {
  std::string model;          // the served model id (session.model, the prompt's namespace)
  int32_t max_model_len = 0;  // context length
  RealtimeFlavor flavor = RealtimeFlavor::kGa;
  std::string session_id;  // "sess_..."; also the cache salt of its prompts
  std::string http_request_id;
};

class RealtimeSession final : public WebSocketHandler,
                              public std::enable_shared_from_this<RealtimeSession> {
 public:
  RealtimeSession(const RealtimeOptions& options, RealtimeSessionParams params, RealtimeDeps deps,
                  std::shared_ptr<WebSocketWriter> writer);
  ~RealtimeSession() override;

  // Sends session.created. Call once, after construction (it needs shared_from_this).
  void Start();

  // WebSocketHandler
  void OnText(std::string message) override;
  void OnBinary(std::string message) override;
  void OnClosed() override;

 private:
  struct Item {
    std::string id;
    std::string role;  // user | assistant | system
    std::string text;
  };
  struct Response;
  class AsrEvents;
  class GenerateEvents;
  class TtsEvents;
  class PrefillEvents;

  // All of these run on strand_.
  void HandleEvent(const std::string& message);
  void OnSessionUpdate(const nlohmann::json& event);
  void OnAppend(const nlohmann::json& event);
  void OnCommit(const nlohmann::json& event);
  void OnClear(const nlohmann::json& event);
  void OnItemCreate(const nlohmann::json& event);
  void OnResponseCreate(const nlohmann::json& event);
  void OnResponseCancel(const nlohmann::json& event);

  void EnsureAsr();
  void CloseAsr();
  void OnAsrEvent(uint64_t generation, AsrEvent event);
  void OnAsrDone(uint64_t generation, absl::Status status);
  void OnFinalTranscript(const AsrEvent& event);
  void MaybeSpeculate(const std::string& stable_text);

  // Starts a reply; `overrides` is response.create's `response` object (or null).
  void StartResponse(const nlohmann::json& overrides, const nlohmann::json& client_event_id);
  void OnTokens(uint64_t response, GenerateUpdate update);
  void OnGenerateFailed(uint64_t response, absl::Status status);
  void OnTtsAudio(uint64_t response, TtsAudio audio);
  void OnTtsDone(uint64_t response, absl::Status status);
  void PumpAudio();
  void MaybeFinishResponse();
  // Ends the current response with `status` (completed, cancelled, incomplete, failed).
  void FinishResponse(const std::string& status, const std::string& reason);

  // The conversation (+ the session's instructions) as chat messages.
  nlohmann::json Messages(const std::string& instructions) const;
  void AddItem(Item item);
  nlohmann::json ItemJson(const Item& item, const std::string& status) const;
  void EmitItemAdded(const Item& item);

  void Send(nlohmann::json event);
  void Error(const std::string& code, const std::string& message,
             const nlohmann::json& param = nullptr, const nlohmann::json& client_event_id = nullptr,
             const std::string& type = "invalid_request_error");
  std::string NewId(const char* prefix);
  // Runs `fn` on the strand while the session lives.
  void Post(std::function<void(RealtimeSession&)> fn);

  // Constant after construction.
  const RealtimeOptions options_;
  const RealtimeSessionParams params_;
  const RealtimeDeps deps_;
  const std::shared_ptr<WebSocketWriter> writer_;
  const absl::Time started_;
  Strand strand_;

  // Everything below: the strand only.
  RealtimeFlavor flavor_;
  RealtimeSessionConfig config_;
  bool closed_ = false;
  uint64_t next_id_ = 0;
  uint64_t next_event_ = 0;
  std::deque<Item> items_;

  // Input audio and its transcription.
  std::unique_ptr<AsrCall> asr_;
  uint64_t asr_generation_ = 0;  // events of older asr calls are dropped
  int64_t uncommitted_bytes_ = 0;
  std::string input_item_id_;    // the user item the current utterance becomes
  std::string transcript_sent_;  // of the current utterance, in transcription deltas
  bool speech_active_ = false;
  std::optional<absl::Time> speech_stopped_at_;
  uint32_t asr_finalize_ms_ = 0;
  std::optional<absl::Time> final_at_;
  bool commit_pending_ = false;  // manual commit: the next final is the committed item

  // Speculative prefill of the current utterance.
  size_t speculated_chars_ = 0;
  std::unique_ptr<GenerateCall> prefill_;
  bool prefill_in_flight_ = false;
  int32_t speculated_tokens_ = 0;

  std::unique_ptr<Response> response_;
  uint64_t response_generation_ = 0;
};

}  // namespace moe::gateway
