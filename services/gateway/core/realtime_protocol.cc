#include "services/gateway/core/realtime_protocol.h"

#include "absl/strings/str_cat.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;

constexpr int32_t kRate = 24000;  // pcm16 of the realtime API

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("session.", field, ": ", why));
}

// A number field into `out`; absent or null leaves it.
template <typename T>
absl::Status Number(const Json& obj, const char* key, const std::string& path, double lo, double hi,
                    T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return Invalid(path, "must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Invalid(path, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status String(const Json& obj, const char* key, const std::string& path, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return Invalid(path, "must be a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// beta "pcm16" or GA {"type": "audio/pcm", "rate": 24000}.
absl::Status AudioFormat(const Json& v, const std::string& path) {
  if (v.is_null()) return absl::OkStatus();
  if (v.is_string() && v.get<std::string>() == "pcm16") return absl::OkStatus();
  if (v.is_object()) {
    const Json type = v.value("type", Json("audio/pcm"));
    const Json rate = v.value("rate", Json(kRate));
    if (type == "audio/pcm" && rate == kRate) return absl::OkStatus();
  }
  return Invalid(path, "only 16-bit PCM at 24 kHz is supported (pcm16 / audio/pcm)");
}

absl::Status TurnDetection(const Json& v, const std::string& path, RealtimeTurnDetection* t) {
  if (v.is_null()) {
    t->server_vad = false;
    return absl::OkStatus();
  }
  if (!v.is_object()) return Invalid(path, "must be an object or null");
  const std::string type = v.value("type", std::string("server_vad"));
  if (type != "server_vad" && type != "semantic_vad") {
    return Invalid(path + ".type", "must be server_vad (or semantic_vad, served as server_vad)");
  }
  t->server_vad = true;
  if (absl::Status s = Number(v, "silence_duration_ms", path + ".silence_duration_ms", 100, 5000,
                              &t->silence_duration_ms);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Number(v, "prefix_padding_ms", path + ".prefix_padding_ms", 0, 5000,
                              &t->prefix_padding_ms);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Number(v, "threshold", path + ".threshold", 0, 1, &t->threshold); !s.ok()) {
    return s;
  }
  for (auto [key, out] : {std::pair{"create_response", &t->create_response},
                          std::pair{"interrupt_response", &t->interrupt_response}}) {
    auto it = v.find(key);
    if (it == v.end() || it->is_null()) continue;
    if (!it->is_boolean()) return Invalid(path + "." + key, "must be a boolean");
    *out = it->get<bool>();
  }
  return absl::OkStatus();
}

absl::Status Transcription(const Json& v, const std::string& path, RealtimeSessionConfig* c) {
  if (v.is_null()) {
    c->transcribe_input = false;
    return absl::OkStatus();
  }
  if (!v.is_object()) return Invalid(path, "must be an object or null");
  c->transcribe_input = true;
  return String(v, "model", path + ".model", &c->transcription_model);
}

absl::Status Modalities(const Json& v, const std::string& path, bool ga, bool* audio_out) {
  if (!v.is_array() || v.empty()) return Invalid(path, "must be a non-empty list");
  bool text = false, audio = false;
  for (const Json& m : v) {
    if (m == "text") {
      text = true;
    } else if (m == "audio") {
      audio = true;
    } else {
      return Invalid(path, "items must be \"text\" or \"audio\"");
    }
  }
  // GA: ["audio"] (with its transcript) or ["text"]; beta: ["text"] or ["text", "audio"].
  if (ga && text && audio) return Invalid(path, "must be [\"audio\"] or [\"text\"]");
  *audio_out = audio;
  return absl::OkStatus();
}

absl::Status MaxTokens(const Json& obj, const char* key, RealtimeSessionConfig* c) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (*it == "inf") {
    c->max_output_tokens = 0;
    return absl::OkStatus();
  }
  return Number(obj, key, key, 1, 1 << 20, &c->max_output_tokens);
}

}  // namespace

absl::Status ApplySessionUpdate(const Json& s, RealtimeSessionConfig* c, RealtimeFlavor* flavor) {
  if (!s.is_object()) return absl::InvalidArgumentError("session: must be an object");
  RealtimeSessionConfig next = *c;
  bool ga = *flavor == RealtimeFlavor::kGa;
  if (auto it = s.find("type"); it != s.end()) {
    if (*it == "realtime") {
      ga = true;
    } else if (*it == "transcription") {
      return Invalid("type", "transcription sessions are not supported; use \"realtime\"");
    } else {
      return Invalid("type", "must be \"realtime\"");
    }
  } else if (s.contains("modalities") || s.contains("input_audio_format") ||
             s.contains("input_audio_transcription") || s.contains("turn_detection") ||
             s.contains("max_response_output_tokens")) {
    ga = false;
  }
  auto check = [](const absl::Status& st) { return st; };
  if (absl::Status st = String(s, "instructions", "instructions", &next.instructions); !st.ok()) {
    return st;
  }
  if (absl::Status st = Number(s, "temperature", "temperature", 0, 2, &next.temperature);
      !st.ok()) {
    return check(st);
  }
  if (ga) {
    if (auto it = s.find("output_modalities"); it != s.end()) {
      if (absl::Status st = Modalities(*it, "output_modalities", true, &next.audio_out); !st.ok()) {
        return st;
      }
    }
    if (absl::Status st = MaxTokens(s, "max_output_tokens", &next); !st.ok()) return st;
    if (auto audio = s.find("audio"); audio != s.end() && !audio->is_null()) {
      if (!audio->is_object()) return Invalid("audio", "must be an object");
      if (auto in = audio->find("input"); in != audio->end() && in->is_object()) {
        if (auto f = in->find("format"); f != in->end()) {
          if (absl::Status st = AudioFormat(*f, "audio.input.format"); !st.ok()) return st;
        }
        if (auto t = in->find("transcription"); t != in->end()) {
          if (absl::Status st = Transcription(*t, "audio.input.transcription", &next); !st.ok()) {
            return st;
          }
        }
        if (auto t = in->find("turn_detection"); t != in->end()) {
          if (absl::Status st = TurnDetection(*t, "audio.input.turn_detection", &next.turn);
              !st.ok()) {
            return st;
          }
        }
      }
      if (auto out = audio->find("output"); out != audio->end() && out->is_object()) {
        if (auto f = out->find("format"); f != out->end()) {
          if (absl::Status st = AudioFormat(*f, "audio.output.format"); !st.ok()) return st;
        }
        if (absl::Status st = String(*out, "voice", "audio.output.voice", &next.voice); !st.ok()) {
          return st;
        }
        if (absl::Status st = Number(*out, "speed", "audio.output.speed", 0.25, 4, &next.speed);
            !st.ok()) {
          return st;
        }
      }
    }
  } else {
    if (auto it = s.find("modalities"); it != s.end()) {
      if (absl::Status st = Modalities(*it, "modalities", false, &next.audio_out); !st.ok()) {
        return st;
      }
    }
    if (absl::Status st = MaxTokens(s, "max_response_output_tokens", &next); !st.ok()) return st;
    if (absl::Status st = String(s, "voice", "voice", &next.voice); !st.ok()) return st;
    if (absl::Status st = Number(s, "speed", "speed", 0.25, 4, &next.speed); !st.ok()) return st;
    for (const char* key : {"input_audio_format", "output_audio_format"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (absl::Status st = AudioFormat(*it, key); !st.ok()) return st;
      }
    }
    if (auto it = s.find("input_audio_transcription"); it != s.end()) {
      if (absl::Status st = Transcription(*it, "input_audio_transcription", &next); !st.ok()) {
        return st;
      }
    }
    if (auto it = s.find("turn_detection"); it != s.end()) {
      if (absl::Status st = TurnDetection(*it, "turn_detection", &next.turn); !st.ok()) return st;
    }
  }
  if (auto it = s.find("tools"); it != s.end() && it->is_array() && !it->empty()) {
    return Invalid("tools", "function calling is not supported");
  }
  *c = std::move(next);
  *flavor = ga ? RealtimeFlavor::kGa : RealtimeFlavor::kBeta;
  return absl::OkStatus();
}

Json SessionJson(const RealtimeSessionConfig& c, RealtimeFlavor flavor, const std::string& id,
                 const std::string& model) {
  const Json turn = c.turn.server_vad ? Json{{"type", "server_vad"},
                                             {"threshold", c.turn.threshold},
                                             {"prefix_padding_ms", c.turn.prefix_padding_ms},
                                             {"silence_duration_ms", c.turn.silence_duration_ms},
                                             {"create_response", c.turn.create_response},
                                             {"interrupt_response", c.turn.interrupt_response}}
                                      : Json(nullptr);
  const Json transcription =
      c.transcribe_input ? Json{{"model", c.transcription_model}} : Json(nullptr);
  const Json max_tokens = c.max_output_tokens > 0 ? Json(c.max_output_tokens) : Json("inf");
  if (flavor == RealtimeFlavor::kBeta) {
    return {{"id", id},
            {"object", "realtime.session"},
            {"model", model},
            {"modalities", c.audio_out ? Json{"text", "audio"} : Json{"text"}},
            {"instructions", c.instructions},
            {"voice", c.voice},
            {"speed", c.speed},
            {"input_audio_format", "pcm16"},
            {"output_audio_format", "pcm16"},
            {"input_audio_transcription", transcription},
            {"turn_detection", turn},
            {"tools", Json::array()},
            {"tool_choice", "auto"},
            {"temperature", c.temperature},
            {"max_response_output_tokens", max_tokens}};
  }
  const Json format = {{"type", "audio/pcm"}, {"rate", kRate}};
  return {{"type", "realtime"},
          {"object", "realtime.session"},
          {"id", id},
          {"model", model},
          {"output_modalities", c.audio_out ? Json{"audio"} : Json{"text"}},
          {"instructions", c.instructions},
          {"audio",
           {{"input",
             {{"format", format},
              {"transcription", transcription},
              {"turn_detection", turn},
              {"noise_reduction", nullptr}}},
            {"output", {{"format", format}, {"voice", c.voice}, {"speed", c.speed}}}}},
          {"tools", Json::array()},
          {"tool_choice", "auto"},
          {"max_output_tokens", max_tokens}};
}

const RealtimeNames& NamesFor(RealtimeFlavor flavor) {
  static const RealtimeNames kBeta = {"response.text.delta",
                                      "response.text.done",
                                      "response.audio.delta",
                                      "response.audio.done",
                                      "response.audio_transcript.delta",
                                      "response.audio_transcript.done",
                                      "conversation.item.created",
                                      "text",
                                      "audio"};
  static const RealtimeNames kGa = {"response.output_text.delta",
                                    "response.output_text.done",
                                    "response.output_audio.delta",
                                    "response.output_audio.done",
                                    "response.output_audio_transcript.delta",
                                    "response.output_audio_transcript.done",
                                    "conversation.item.added",
                                    "output_text",
                                    "output_audio"};
  return flavor == RealtimeFlavor::kBeta ? kBeta : kGa;
}

Json ErrorEvent(const std::string& type, const std::string& code, const std::string& message,
                const Json& param, const Json& client_event_id) {
  return {{"type", "error"},
          {"error",
           {{"type", type},
            {"code", code},
            {"message", message},
            {"param", param},
            {"event_id", client_event_id}}}};
}

}  // namespace moe::gateway
