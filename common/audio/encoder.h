// Streaming audio encoders for the speech endpoint's response formats (OpenAI's set): mp3
// (libmp3lame, CBR 64 kbit/s mono), opus (libopusenc: Ogg Opus, 32 kbit/s, VoIP tuning), flac
// (libFLAC, level 5), wav (s16 with a streaming header) and pcm (raw s16le). Each turns mono s16
// chunks into bytes as they come, so the response streams while speech is synthesized; Finish()
// writes what the codec held back (frame remainders, the last Ogg page, FLAC's last frame).
//
// Thread-compatible: one stream per encoder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moe::audio {

enum class AudioFormat { kMp3, kOpus, kFlac, kWav, kPcm };

// "mp3" | "opus" | "flac" | "wav" | "pcm"; nullopt for anything else (OpenAI's "aac" too).
std::optional<AudioFormat> ParseAudioFormat(std::string_view name);
std::string_view AudioFormatName(AudioFormat format);
// The HTTP Content-Type OpenAI answers with ("audio/mpeg", "audio/ogg", "audio/flac",
// "audio/wav", "audio/pcm").
std::string_view ContentType(AudioFormat format);

class AudioEncoder {
 public:
  virtual ~AudioEncoder() = default;
  AudioEncoder(const AudioEncoder&) = delete;
  AudioEncoder& operator=(const AudioEncoder&) = delete;

  // Encodes `pcm` (mono s16 at the encoder's rate) and appends the bytes ready so far to `out`
  // (possibly none: codecs work in frames). kInternal when the codec fails.
  virtual absl::Status Encode(std::span<const int16_t> pcm, std::string* out) = 0;
  // Ends the stream: appends the rest. Call once; Encode() is not allowed afterwards.
  virtual absl::Status Finish(std::string* out) = 0;

 protected:
  AudioEncoder() = default;
};

// kInvalidArgument when `sample_rate` does not suit the format (mp3: 8-48 kHz MPEG rates;
// opus, flac, wav, pcm: 8-192 kHz).
absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateAudioEncoder(AudioFormat format,
                                                                 int32_t sample_rate);

namespace internal {
absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateMp3Encoder(int32_t sample_rate);
absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateOpusEncoder(int32_t sample_rate);
absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateFlacEncoder(int32_t sample_rate);
}  // namespace internal

}  // namespace moe::audio
