// FLAC through libFLAC's stream encoder, written to memory by its write callback (level 5).
#include <FLAC/stream_encoder.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/audio/encoder.h"

namespace moe::audio::internal {
namespace {

class FlacEncoder final : public AudioEncoder {
 public:
  FlacEncoder() : enc_(FLAC__stream_encoder_new()) {}
  ~FlacEncoder() override {
    if (enc_ != nullptr) FLAC__stream_encoder_delete(enc_);
  }

  absl::Status Init(int32_t rate) {
    if (enc_ == nullptr) return absl::InternalError("FLAC__stream_encoder_new failed");
    FLAC__stream_encoder_set_channels(enc_, 1);
    FLAC__stream_encoder_set_bits_per_sample(enc_, 16);
    FLAC__stream_encoder_set_sample_rate(enc_, static_cast<uint32_t>(rate));
    FLAC__stream_encoder_set_compression_level(enc_, 5);
    FLAC__stream_encoder_set_streamable_subset(enc_, true);
    const FLAC__StreamEncoderInitStatus s = FLAC__stream_encoder_init_stream(
        enc_, &FlacEncoder::Write, nullptr, nullptr, nullptr, this);
    if (s != FLAC__STREAM_ENCODER_INIT_STATUS_OK) {
      return absl::InternalError(absl::StrCat("FLAC__stream_encoder_init_stream: ",
                                              FLAC__StreamEncoderInitStatusString[s]));
    }
    return absl::OkStatus();
  }

  absl::Status Encode(std::span<const int16_t> pcm, std::string* out) override {
    wide_.assign(pcm.begin(), pcm.end());
    const bool ok = wide_.empty() || FLAC__stream_encoder_process_interleaved(
                                         enc_, wide_.data(), static_cast<uint32_t>(wide_.size()));
    *out += pending_;
    pending_.clear();
    if (!ok) return absl::InternalError("FLAC__stream_encoder_process_interleaved failed");
    return absl::OkStatus();
  }

  absl::Status Finish(std::string* out) override {
    const bool ok = FLAC__stream_encoder_finish(enc_);
    *out += pending_;
    pending_.clear();
    if (!ok) return absl::InternalError("FLAC__stream_encoder_finish failed");
    return absl::OkStatus();
  }

 private:
  static FLAC__StreamEncoderWriteStatus Write(const FLAC__StreamEncoder*, const FLAC__byte* buffer,
                                              size_t bytes, uint32_t, uint32_t, void* self) {
    auto* e = static_cast<FlacEncoder*>(self);
    e->pending_.append(reinterpret_cast<const char*>(buffer), bytes);
    return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
  }

  FLAC__StreamEncoder* const enc_;
  std::vector<FLAC__int32> wide_;  // libFLAC takes 32-bit samples
  std::string pending_;            // written by the codec, not yet handed out
};

}  // namespace

absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateFlacEncoder(int32_t sample_rate) {
  auto enc = std::make_unique<FlacEncoder>();
  if (absl::Status s = enc->Init(sample_rate); !s.ok()) return s;
  return std::unique_ptr<AudioEncoder>(std::move(enc));
}

}  // namespace moe::audio::internal
