#include "services/asr/asr_server.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/grpc/status.h"

namespace moe::asr {
namespace pb = ::moe::asr::v1;

absl::Status AsrOptions::Validate() const {
  if (absl::Status s = common::config::CheckFields(*this); !s.ok()) return s;
  if (engine.vad_hangover > core.endpoint_silence) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.vad_hangover: ", absl::FormatDuration(engine.vad_hangover),
        " is longer than core.endpoint_silence (", absl::FormatDuration(core.endpoint_silence),
        "): the default pause could not be met"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamConfig> StreamConfigFromProto(const pb::RecognitionConfig& c) {
  StreamConfig out;
  out.sample_rate_hz = c.sample_rate_hz();
  out.endpoint_silence_ms =
      static_cast<int32_t>(std::min<uint32_t>(c.endpoint_silence_ms(), 1u << 30));
  out.partial_results = c.partial_results();
  out.manual_endpointing = c.manual_endpointing();
  out.language = c.language();
  switch (c.mode()) {
    case pb::RECOGNITION_MODE_DICTATION:
      out.spec.mode = RecognitionMode::kDictation;
      break;
    case pb::RECOGNITION_MODE_GRAMMAR:
      out.spec.mode = RecognitionMode::kGrammar;
      out.spec.grammar_jsgf = c.grammar_jsgf();
      break;
    case pb::RECOGNITION_MODE_KEYWORDS:
      out.spec.mode = RecognitionMode::kKeywords;
      out.spec.keywords.assign(c.keywords().begin(), c.keywords().end());
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("mode: ", c.mode(), " is not known"));
  }
  return out;
}

pb::TranscribeResponse EventToProto(const AsrEvent& e) {
  pb::TranscribeResponse r;
  r.set_utterance_index(e.utterance_index);
  r.set_start_ms(static_cast<uint32_t>(e.start_ms));
  switch (e.type) {
    case AsrEvent::Type::kSpeechStarted:
      r.set_event(pb::TranscribeResponse::SPEECH_STARTED);
      break;
    case AsrEvent::Type::kSpeechStopped:
      r.set_event(pb::TranscribeResponse::SPEECH_STOPPED);
      r.set_end_ms(static_cast<uint32_t>(e.end_ms));
      break;
    case AsrEvent::Type::kPartial:
      r.set_text(e.text);
      r.set_stable_bytes(e.stable_bytes);
      break;
    case AsrEvent::Type::kFinal:
      r.set_text(e.text);
      r.set_is_final(true);
      r.set_end_ms(static_cast<uint32_t>(e.end_ms));
      r.set_stable_bytes(e.stable_bytes);
      r.set_finalize_ms(e.finalize_ms);
      break;
  }
  return r;
}

::grpc::Status AsrServer::Transcribe(
    ::grpc::ServerContext* context,
    ::grpc::ServerReaderWriter<pb::TranscribeResponse, pb::TranscribeRequest>* stream) {
  if (auth_ != nullptr) {
    if (::grpc::Status s = auth_->Check(*context, kTranscribePolicy); !s.ok()) return s;
  }
  pb::TranscribeRequest request;
  if (!stream->Read(&request)) return ::grpc::Status::OK;  // the client left at once
  if (request.payload_case() != pb::TranscribeRequest::kConfig) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                          "the first message must carry `config`");
  }
  absl::StatusOr<StreamConfig> config = StreamConfigFromProto(request.config());
  if (!config.ok()) return common::rpc::ToGrpcStatus(config.status());
  absl::StatusOr<std::unique_ptr<AsrStream>> s = core_.Open(*config);
  if (!s.ok()) return common::rpc::ToGrpcStatus(s.status());
  AsrStream& asr = **s;

  std::vector<AsrEvent> events;
  auto flush = [&]() -> bool {
    for (const AsrEvent& e : events) {
      if (!stream->Write(EventToProto(e))) return false;
    }
    events.clear();
    return true;
  };
  while (stream->Read(&request)) {
    absl::Status status;
    switch (request.payload_case()) {
      case pb::TranscribeRequest::kAudio:
        status = asr.Audio(request.audio().pcm_s16le(), &events);
        break;
      case pb::TranscribeRequest::kControl:
        switch (request.control().action()) {
          case pb::Control::FINALIZE:
            status = asr.Finalize(&events);
            break;
          case pb::Control::DISCARD:
            status = asr.Discard(&events);
            break;
          default:
            status = absl::InvalidArgumentError("control.action: must be FINALIZE or DISCARD");
        }
        break;
      case pb::TranscribeRequest::kConfig:
        status = absl::InvalidArgumentError("`config` may come only first");
        break;
      default:
        status = absl::InvalidArgumentError("an empty request");
    }
    // What was decoded before an error still goes out.
    if (!flush()) return ::grpc::Status(::grpc::StatusCode::CANCELLED, "client went away");
    if (!status.ok()) return common::rpc::ToGrpcStatus(status);
  }
  if (context->IsCancelled()) return ::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled");
  if (absl::Status st = asr.Finish(&events); !st.ok()) return common::rpc::ToGrpcStatus(st);
  flush();
  return ::grpc::Status::OK;
}

}  // namespace moe::asr
