#include "services/tts/tts_server.h"

#include "common/grpc/status.h"

namespace moe::tts {
namespace pb = ::moe::tts::v1;

::grpc::Status TtsServer::Synthesize(
    ::grpc::ServerContext* context,
    ::grpc::ServerReaderWriter<pb::SynthesizeResponse, pb::SynthesizeRequest>* stream) {
  if (auth_ != nullptr) {
    if (::grpc::Status s = auth_->Check(*context, kSynthesizePolicy); !s.ok()) return s;
  }
  pb::SynthesizeRequest request;
  if (!stream->Read(&request)) return ::grpc::Status::OK;
  if (request.payload_case() != pb::SynthesizeRequest::kConfig) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                          "the first message must carry `config`");
  }
  const pb::SynthesisConfig& c = request.config();
  absl::StatusOr<std::unique_ptr<TtsStream>> s =
      core_.Open({.voice = c.voice(), .sample_rate_hz = c.sample_rate_hz(), .speed = c.speed()});
  if (!s.ok()) return common::rpc::ToGrpcStatus(s.status());
  const ChunkSink sink = [&](AudioChunk chunk) {
    if (context->IsCancelled()) return false;
    pb::SynthesizeResponse r;
    r.set_pcm_s16le(std::move(chunk.pcm_s16le));
    r.set_sample_rate_hz(chunk.sample_rate_hz);
    r.set_sentence_index(chunk.segment_index);
    r.set_end_of_sentence(chunk.end_of_segment);
    r.set_text(std::move(chunk.text));
    r.set_segment_latency_ms(chunk.segment_latency_ms);
    return stream->Write(r);
  };
  while (stream->Read(&request)) {
    if (request.payload_case() != pb::SynthesizeRequest::kText) {
      return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                            "every message after the first must carry `text`");
    }
    absl::Status st = (*s)->Text(request.text().text(), request.text().flush(), sink);
    if (!st.ok()) return common::rpc::ToGrpcStatus(st);
  }
  if (context->IsCancelled()) return ::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled");
  return common::rpc::ToGrpcStatus((*s)->Finish(sink));
}

}  // namespace moe::tts
