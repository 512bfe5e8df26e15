// Ogg Opus through libopusenc, written to memory by its callbacks: 32 kbit/s, VoIP tuning.
#include <opus/opusenc.h>

#include "absl/strings/str_cat.h"
#include "common/audio/encoder.h"

namespace moe::audio::internal {
namespace {

class OpusEncoder final : public AudioEncoder {
 public:
  OpusEncoder() = default;
  ~OpusEncoder() override {
    if (enc_ != nullptr) ope_encoder_destroy(enc_);
    if (comments_ != nullptr) ope_comments_destroy(comments_);
  }

  absl::Status Init(int32_t rate) {
    comments_ = ope_comments_create();
    if (comments_ == nullptr) return absl::InternalError("ope_comments_create failed");
    ope_comments_add(comments_, "ENCODER", "moe-cluster tts");
    static const OpusEncCallbacks kCallbacks = {&OpusEncoder::Write, &OpusEncoder::Close};
    int error = 0;
    enc_ = ope_encoder_create_callbacks(&kCallbacks, this, comments_, rate, 1, 0, &error);
    if (enc_ == nullptr || error != OPE_OK) {
      return absl::InternalError(
          absl::StrCat("ope_encoder_create_callbacks: ", ope_strerror(error)));
    }
    ope_encoder_ctl(enc_, OPUS_SET_BITRATE(32000));
    ope_encoder_ctl(enc_, OPUS_SET_APPLICATION(OPUS_APPLICATION_VOIP));
    // Pages as soon as a packet is ready (latency over overhead: a streamed answer).
    ope_encoder_ctl(enc_, OPE_SET_MUXING_DELAY(0));
    return absl::OkStatus();
  }

  absl::Status Encode(std::span<const int16_t> pcm, std::string* out) override {
    const int r = ope_encoder_write(enc_, pcm.data(), static_cast<int>(pcm.size()));
    *out += pending_;
    pending_.clear();
    if (r != OPE_OK)
      return absl::InternalError(absl::StrCat("ope_encoder_write: ", ope_strerror(r)));
    return absl::OkStatus();
  }

  absl::Status Finish(std::string* out) override {
    const int r = ope_encoder_drain(enc_);
    *out += pending_;
    pending_.clear();
    if (r != OPE_OK)
      return absl::InternalError(absl::StrCat("ope_encoder_drain: ", ope_strerror(r)));
    return absl::OkStatus();
  }

 private:
  static int Write(void* self, const unsigned char* ptr, opus_int32 len) {
    auto* e = static_cast<OpusEncoder*>(self);
    e->pending_.append(reinterpret_cast<const char*>(ptr), len);
    return 0;
  }
  static int Close(void*) { return 0; }

  OggOpusComments* comments_ = nullptr;
  OggOpusEnc* enc_ = nullptr;
  std::string pending_;  // written by the codec (the headers at creation), not yet handed out
};

}  // namespace

absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateOpusEncoder(int32_t sample_rate) {
  auto enc = std::make_unique<OpusEncoder>();
  if (absl::Status s = enc->Init(sample_rate); !s.ok()) return s;
  return std::unique_ptr<AudioEncoder>(std::move(enc));
}

}  // namespace moe::audio::internal
