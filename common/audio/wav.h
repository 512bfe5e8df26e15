// WAV (RIFF/WAVE) files: decoding what clients upload (PCM 8/16/24/32-bit integer, 32/64-bit
// float, WAVE_FORMAT_EXTENSIBLE, any channel count, any common rate) into mono s16 at the
// file's rate, and the header the speech endpoint writes.
//
// Decoding is strict about structure and bounded: every chunk length is checked against the
// bytes present, and the sample count against `max_samples` before anything is allocated, so a
// truncated header, a lying length or a huge file is an error, never an over-read or a large
// allocation.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::audio {

struct DecodedAudio {
  int32_t sample_rate = 0;       // Hz, as the file says, in [1000, 384000]
  int32_t channels = 0;          // in the file; `samples` is their average
  std::vector<int16_t> samples;  // mono s16, [num_frames]
};

struct WavLimits {
  int64_t max_frames = int64_t{16000} * 3600;  // frames (samples per channel) at most
};

// Errors (kInvalidArgument, each saying what is wrong): not RIFF/WAVE, no "fmt " or "data"
// chunk, a chunk longer than the file (truncated: the data chunk may be shorter than it says,
// as streamed WAVs are: the bytes present are used), an unsupported encoding (compressed
// formats such as ADPCM or mu-law: the message names the format tag), 0 or > 32 channels, a
// rate outside [1000, 384000]. kOutOfRange when the audio has more frames than the limit.
absl::StatusOr<DecodedAudio> DecodeWav(std::string_view bytes, const WavLimits& limits = {});

// A 44-byte header of mono s16 PCM at `sample_rate`. `data_bytes` = 0xFFFFFFFF for a stream of
// unknown length (what OpenAI's streamed WAV does; readers take the data to the end).
std::string WavHeader(int32_t sample_rate, uint32_t data_bytes);

}  // namespace moe::audio
