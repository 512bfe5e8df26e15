#include "common/audio/encoder.h"

#include "absl/strings/str_cat.h"
#include "common/audio/pcm.h"
#include "common/audio/wav.h"

namespace moe::audio {
namespace {

// wav and pcm: the samples as bytes (wav behind a header of unknown length).
class RawEncoder final : public AudioEncoder {
 public:
  RawEncoder(bool wav, int32_t rate) : header_(wav ? WavHeader(rate, 0xFFFFFFFFu) : "") {}
  absl::Status Encode(std::span<const int16_t> pcm, std::string* out) override {
    if (!header_.empty()) {
      *out += header_;
      header_.clear();
    }
    AppendPcmBytes(pcm, out);
    return absl::OkStatus();
  }
  absl::Status Finish(std::string* out) override { return Encode({}, out); }

 private:
  std::string header_;  // written before the first samples
};

}  // namespace

std::optional<AudioFormat> ParseAudioFormat(std::string_view name) {
  if (name == "mp3") return AudioFormat::kMp3;
  if (name == "opus") return AudioFormat::kOpus;
  if (name == "flac") return AudioFormat::kFlac;
  if (name == "wav") return AudioFormat::kWav;
  if (name == "pcm") return AudioFormat::kPcm;
  return std::nullopt;
}

std::string_view AudioFormatName(AudioFormat format) {
  switch (format) {
    case AudioFormat::kMp3:
      return "mp3";
    case AudioFormat::kOpus:
      return "opus";
    case AudioFormat::kFlac:
      return "flac";
    case AudioFormat::kWav:
      return "wav";
    case AudioFormat::kPcm:
      return "pcm";
  }
  return "";
}

std::string_view ContentType(AudioFormat format) {
  switch (format) {
    case AudioFormat::kMp3:
      return "audio/mpeg";
    case AudioFormat::kOpus:
      return "audio/ogg";
    case AudioFormat::kFlac:
      return "audio/flac";
    case AudioFormat::kWav:
      return "audio/wav";
    case AudioFormat::kPcm:
      return "audio/pcm";
  }
  return "application/octet-stream";
}

absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateAudioEncoder(AudioFormat format,
                                                                 int32_t sample_rate) {
  if (sample_rate < 8000 || sample_rate > 192000) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample rate ", sample_rate, " Hz is not in [8000, 192000]"));
  }
  switch (format) {
    case AudioFormat::kMp3:
      return internal::CreateMp3Encoder(sample_rate);
    case AudioFormat::kOpus:
      return internal::CreateOpusEncoder(sample_rate);
    case AudioFormat::kFlac:
      return internal::CreateFlacEncoder(sample_rate);
    case AudioFormat::kWav:
    case AudioFormat::kPcm:
      return std::unique_ptr<AudioEncoder>(
          new RawEncoder(format == AudioFormat::kWav, sample_rate));
  }
  return absl::InvalidArgumentError("unknown audio format");
}

}  // namespace moe::audio
