// The subset of OpenAI's Realtime protocol that a voice app needs, in both its flavours: the
// beta protocol (a client that sends `OpenAI-Beta: realtime=v1`) and the GA one. They name some
// events and session fields differently; a session speaks exactly one, never both (a client
// that handled both would play the audio twice):
//
//   concept                 beta                              GA
//   text out                response.text.delta / .done       response.output_text.delta / .done
//   audio out               response.audio.delta / .done      response.output_audio.delta / .done
//   audio transcript out    response.audio_transcript.*       response.output_audio_transcript.*
//   item added              conversation.item.created         conversation.item.added (+ .done)
//   content part types      text, audio                       output_text, output_audio
//   session shape           modalities, voice, input_audio_format, input_audio_transcription,
//                           turn_detection at the top         type "realtime", output_modalities,
//                                                             audio.{input,output}.{format,...}
//
// The flavour starts from the header and follows the session shape the client sends
// (session.update with `type: "realtime"` is GA; one with beta-only fields is beta).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {

enum class RealtimeFlavor { kBeta, kGa };

struct RealtimeTurnDetection {
  bool server_vad = true;  // false: `turn_detection: null` (the client commits)
  int32_t silence_duration_ms = 300;
  int32_t prefix_padding_ms = 300;  // accepted and reported (the engine's VAD decides)
  double threshold = 0.5;           // accepted and reported
  bool create_response = true;
  bool interrupt_response = true;
};

struct RealtimeSessionConfig {
  bool audio_out = true;  // modalities include audio (beta) / output_modalities = ["audio"] (GA)
  std::string instructions;
  std::string voice;
  float speed = 1.0f;
  double temperature = 0.8;
  int32_t max_output_tokens = 0;  // 0 = "inf" (the gateway's cap)
  bool transcribe_input = false;  // input_audio_transcription / audio.input.transcription set
  std::string transcription_model;
  RealtimeTurnDetection turn;
};

// Applies a client's `session` object to `config` (absent fields keep their value) and says
// which flavour its shape is (unchanged when it does not tell). kInvalidArgument with the
// message naming the field ("session.input_audio_format: only pcm16 (24 kHz) is supported").
absl::Status ApplySessionUpdate(const nlohmann::json& session, RealtimeSessionConfig* config,
                                RealtimeFlavor* flavor);
// The session object of session.created / session.updated in `flavor`'s shape.
nlohmann::json SessionJson(const RealtimeSessionConfig& config, RealtimeFlavor flavor,
                           const std::string& id, const std::string& model);

// Event names that differ between the flavours.
struct RealtimeNames {
  const char* text_delta;
  const char* text_done;
  const char* audio_delta;
  const char* audio_done;
  const char* transcript_delta;
  const char* transcript_done;
  const char* item_added;  // GA also sends conversation.item.done
  const char* text_part;   // content part types
  const char* audio_part;
};
const RealtimeNames& NamesFor(RealtimeFlavor flavor);

// {"type": "error", "error": {"type", "code", "message", "param", "event_id"}}.
nlohmann::json ErrorEvent(const std::string& type, const std::string& code,
                          const std::string& message, const nlohmann::json& param = nullptr,
                          const nlohmann::json& client_event_id = nullptr);

}  // namespace moe::gateway
