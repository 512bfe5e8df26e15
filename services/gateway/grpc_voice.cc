#include "services/gateway/grpc_voice.h"

#include <atomic>
#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/status.h"
#include "grpcpp/grpcpp.h"
#include "moe/asr/v1/asr.grpc.pb.h"
#include "moe/tts/v1/tts.grpc.pb.h"

namespace moe::gateway {
namespace {

namespace asr_pb = ::moe::asr::v1;
namespace tts_pb = ::moe::tts::v1;

// One bidirectional stream: a queue of requests written one at a time, responses handed to
// `on_response`, the final status to `on_done`. Owned by shared_ptrs (the call handle, and
// itself until OnDone), so it outlives every reaction.
//
// Writes are started outside mu_ (reactions are never run under our lock). A hold keeps
// OnDone away until no write can start any more: it is removed once the stream is no longer
// writable (the writes are done, the server ended the stream, or the call was cancelled) and
// no write is in flight.
template <typename Req, typename Resp>
class BidiStream : public grpc::ClientBidiReactor<Req, Resp>,
                   public std::enable_shared_from_this<BidiStream<Req, Resp>> {
 public:
  using StartFn = std::function<void(grpc::ClientContext*, grpc::ClientBidiReactor<Req, Resp>*)>;

  BidiStream(int64_t max_queued_bytes, std::function<void(Resp&)> on_response,
             std::function<void(absl::Status)> on_done)
      : max_queued_bytes_(max_queued_bytes),
        on_response_(std::move(on_response)),
        on_done_(std::move(on_done)) {}

  void Start(const StartFn& start, Req first) {
    self_ = this->shared_from_this();
    start(&context_, this);
    this->AddHold();
    Req* head = nullptr;
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(first));
      head = &queue_.front();
      writing_ = true;
    }
    this->StartWrite(head);
    this->StartRead(&response_);
    this->StartCall();
  }

  void Send(Req request) {
    const int64_t bytes = static_cast<int64_t>(request.ByteSizeLong());
    Req* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!writable_ || close_requested_) return;
      if (queued_bytes_ + bytes > max_queued_bytes_) {
        overflowed_ = true;
        writable_ = false;
        context_.TryCancel();
        return;
      }
      queued_bytes_ += bytes;
      queue_.push_back(std::move(request));
      if (writing_) return;
      writing_ = true;
      next = &queue_.front();
    }
    this->StartWrite(next);
  }

  void CloseSend() {
    {
      absl::MutexLock lock(&mu_);
      if (!writable_ || close_requested_) return;
      close_requested_ = true;
      if (writing_) return;  // OnWriteDone starts WritesDone once the queue drained
      writing_ = true;
    }
    this->StartWritesDone();
  }

  void Cancel() {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (writable_) {
        writable_ = false;
        release = !writing_;
      }
    }
    context_.TryCancel();
    if (release) ReleaseHold();
  }

  // grpc::ClientBidiReactor
  void OnWriteDone(bool ok) override {
    Req* next = nullptr;
    bool writes_done = false, release = false;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= static_cast<int64_t>(queue_.front().ByteSizeLong());
      queue_.pop_front();
      if (!ok) writable_ = false;
      if (writable_ && !queue_.empty()) {
        next = &queue_.front();
      } else if (writable_ && close_requested_) {
        writes_done = true;
      } else {
        writing_ = false;
        release = !writable_;
      }
    }
    if (next != nullptr) this->StartWrite(next);
    if (writes_done) this->StartWritesDone();
    if (release) ReleaseHold();
  }
  void OnWritesDoneDone(bool) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      writable_ = false;
    }
    ReleaseHold();
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      // The server ended the stream: nothing more will be written.
      bool release = false;
      {
        absl::MutexLock lock(&mu_);
        if (writable_) {
          writable_ = false;
          release = !writing_;
        }
      }
      if (release) ReleaseHold();
      return;
    }
    on_response_(response_);
    this->StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::Status s = common::rpc::FromGrpcStatus(status);
    {
      absl::MutexLock lock(&mu_);
      if (overflowed_) {
        s = absl::ResourceExhaustedError("the speech service does not keep up: queue full");
      } else if (cancelled_) {
        s = absl::CancelledError("cancelled");
      }
    }
    on_done_(std::move(s));
    self_.reset();  // may delete this
  }

 private:
  void ReleaseHold() {
    if (!hold_released_.exchange(true)) this->RemoveHold();
  }

  const int64_t max_queued_bytes_;
  const std::function<void(Resp&)> on_response_;
  const std::function<void(absl::Status)> on_done_;
  std::shared_ptr<BidiStream> self_;  // until OnDone
  grpc::ClientContext context_;
  Resp response_;
  std::atomic<bool> hold_released_{false};

  absl::Mutex mu_;
  std::deque<Req> queue_ ABSL_GUARDED_BY(mu_);  // front = the write in flight
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool writable_ ABSL_GUARDED_BY(mu_) = true;
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
};

template <typename Stub>
struct Targets {
  std::vector<std::unique_ptr<Stub>> stubs;
  std::atomic<uint64_t> next{0};
  Stub* Pick() { return stubs[next.fetch_add(1) % stubs.size()].get(); }
};

template <typename Service>
absl::StatusOr<std::unique_ptr<Targets<typename Service::Stub>>> Connect(
    const std::vector<std::string>& targets, const common::rpc::ChannelOptions& channel_options) {
  auto out = std::make_unique<Targets<typename Service::Stub>>();
  for (const std::string& t : targets) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        common::rpc::CreateChannel(t, channel_options);
    if (!channel.ok()) return channel.status();
    out->stubs.push_back(Service::NewStub(*channel));
  }
  return out;
}

// --- ASR ---

using AsrStream = BidiStream<asr_pb::TranscribeRequest, asr_pb::TranscribeResponse>;

class GrpcAsrCall final : public AsrCall {
 public:
  explicit GrpcAsrCall(std::shared_ptr<AsrStream> stream) : stream_(std::move(stream)) {}
  ~GrpcAsrCall() override = default;
  void SendAudio(std::string pcm) override {
    asr_pb::TranscribeRequest r;
    r.mutable_audio()->set_pcm_s16le(std::move(pcm));
    stream_->Send(std::move(r));
  }
  void Finalize() override { Control(asr_pb::Control::FINALIZE); }
  void Discard() override { Control(asr_pb::Control::DISCARD); }
  void CloseSend() override { stream_->CloseSend(); }
  void Cancel() override { stream_->Cancel(); }

 private:
  void Control(asr_pb::Control::Action a) {
    asr_pb::TranscribeRequest r;
    r.mutable_control()->set_action(a);
    stream_->Send(std::move(r));
  }
  const std::shared_ptr<AsrStream> stream_;
};

AsrEvent EventFromProto(const asr_pb::TranscribeResponse& r) {
  AsrEvent e;
  switch (r.event()) {
    case asr_pb::TranscribeResponse::SPEECH_STARTED:
      e.type = AsrEvent::Type::kSpeechStarted;
      break;
    case asr_pb::TranscribeResponse::SPEECH_STOPPED:
      e.type = AsrEvent::Type::kSpeechStopped;
      break;
    default:
      e.type = r.is_final() ? AsrEvent::Type::kFinal : AsrEvent::Type::kPartial;
  }
  e.text = r.text();
  e.utterance_index = r.utterance_index();
  e.start_ms = r.start_ms();
  e.end_ms = r.end_ms();
  e.stable_bytes = std::min<uint32_t>(r.stable_bytes(), static_cast<uint32_t>(e.text.size()));
  e.finalize_ms = r.finalize_ms();
  return e;
}

class NoAsrCall final : public AsrCall {
 public:
  void SendAudio(std::string) override {}
  void Finalize() override {}
  void Discard() override {}
  void CloseSend() override {}
  void Cancel() override {}
};

class GrpcAsrClient final : public AsrClient {
 public:
  GrpcAsrClient(const VoiceClientOptions& options,
                std::unique_ptr<Targets<asr_pb::Asr::Stub>> targets)
      : options_(options), targets_(std::move(targets)) {}

  std::unique_ptr<AsrCall> Transcribe(const AsrStreamConfig& config,
                                      std::shared_ptr<AsrObserver> observer) override {
    if (targets_->stubs.empty()) {
      observer->OnDone(absl::UnavailableError("speech recognition is not configured (voice.asr)"));
      return std::make_unique<NoAsrCall>();
    }
    auto stream = std::make_shared<AsrStream>(
        options_.max_queued_bytes,
        [observer](asr_pb::TranscribeResponse& r) { observer->OnEvent(EventFromProto(r)); },
        [observer](absl::Status s) { observer->OnDone(std::move(s)); });
    asr_pb::TranscribeRequest first;
    asr_pb::RecognitionConfig* c = first.mutable_config();
    c->set_sample_rate_hz(config.sample_rate_hz);
    c->set_endpoint_silence_ms(config.endpoint_silence_ms);
    c->set_partial_results(config.partial_results);
    c->set_manual_endpointing(config.manual_endpointing);
    c->set_language(config.language);
    asr_pb::Asr::Stub* stub = targets_->Pick();
    stream->Start(
        [stub](grpc::ClientContext* ctx,
               grpc::ClientBidiReactor<asr_pb::TranscribeRequest, asr_pb::TranscribeResponse>* r) {
          stub->async()->Transcribe(ctx, r);
        },
        std::move(first));
    return std::make_unique<GrpcAsrCall>(std::move(stream));
  }
  bool configured() const override { return !targets_->stubs.empty(); }

 private:
  const VoiceClientOptions options_;
  const std::unique_ptr<Targets<asr_pb::Asr::Stub>> targets_;
};

// --- TTS ---

using TtsStream = BidiStream<tts_pb::SynthesizeRequest, tts_pb::SynthesizeResponse>;

class GrpcTtsCall final : public TtsCall {
 public:
  explicit GrpcTtsCall(std::shared_ptr<TtsStream> stream) : stream_(std::move(stream)) {}
  void SendText(std::string text, bool flush) override {
    tts_pb::SynthesizeRequest r;
    r.mutable_text()->set_text(std::move(text));
    r.mutable_text()->set_flush(flush);
    stream_->Send(std::move(r));
  }
  void CloseSend() override { stream_->CloseSend(); }
  void Cancel() override { stream_->Cancel(); }

 private:
  const std::shared_ptr<TtsStream> stream_;
};

class NoTtsCall final : public TtsCall {
 public:
  void SendText(std::string, bool) override {}
  void CloseSend() override {}
  void Cancel() override {}
};

class GrpcTtsClient final : public TtsClient {
 public:
  GrpcTtsClient(const VoiceClientOptions& options,
                std::unique_ptr<Targets<tts_pb::Tts::Stub>> targets)
      : options_(options), targets_(std::move(targets)) {}

  std::unique_ptr<TtsCall> Synthesize(const TtsStreamConfig& config,
                                      std::shared_ptr<TtsObserver> observer) override {
    if (targets_->stubs.empty()) {
      observer->OnDone(absl::UnavailableError("speech synthesis is not configured (voice.tts)"));
      return std::make_unique<NoTtsCall>();
    }
    auto stream = std::make_shared<TtsStream>(
        options_.max_queued_bytes,
        [observer](tts_pb::SynthesizeResponse& r) {
          TtsAudio a;
          a.pcm_s16le = std::move(*r.mutable_pcm_s16le());
          a.sample_rate_hz = r.sample_rate_hz();
          a.segment_index = r.sentence_index();
          a.end_of_segment = r.end_of_sentence();
          a.text = r.text();
          a.segment_latency_ms = r.segment_latency_ms();
          observer->OnAudio(std::move(a));
        },
        [observer](absl::Status s) { observer->OnDone(std::move(s)); });
    tts_pb::SynthesizeRequest first;
    tts_pb::SynthesisConfig* c = first.mutable_config();
    c->set_voice(config.voice);
    c->set_sample_rate_hz(config.sample_rate_hz);
    c->set_speed(config.speed);
    tts_pb::Tts::Stub* stub = targets_->Pick();
    stream->Start(
        [stub](grpc::ClientContext* ctx,
               grpc::ClientBidiReactor<tts_pb::SynthesizeRequest, tts_pb::SynthesizeResponse>* r) {
          stub->async()->Synthesize(ctx, r);
        },
        std::move(first));
    return std::make_unique<GrpcTtsCall>(std::move(stream));
  }
  bool configured() const override { return !targets_->stubs.empty(); }

 private:
  const VoiceClientOptions options_;
  const std::unique_ptr<Targets<tts_pb::Tts::Stub>> targets_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AsrClient>> CreateGrpcAsrClient(const VoiceClientOptions& options) {
  auto targets = Connect<asr_pb::Asr>(options.targets, options.channel);
  if (!targets.ok()) return targets.status();
  return std::unique_ptr<AsrClient>(new GrpcAsrClient(options, *std::move(targets)));
}

absl::StatusOr<std::unique_ptr<TtsClient>> CreateGrpcTtsClient(const VoiceClientOptions& options) {
  auto targets = Connect<tts_pb::Tts>(options.targets, options.channel);
  if (!targets.ok()) return targets.status();
  return std::unique_ptr<TtsClient>(new GrpcTtsClient(options, *std::move(targets)));
}

}  // namespace moe::gateway
