// Mono signed 16-bit PCM, the sample format every voice part of the project speaks (the ASR and
// TTS protos, the realtime API's pcm16, the encoders): conversions between little-endian bytes
// and samples, and a level measure.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moe::audio {

// Samples of little-endian s16 `bytes`. REQUIRES: bytes.size() is even (callers check: an odd
// count is a client error they answer with INVALID_ARGUMENT).
std::vector<int16_t> PcmFromBytes(std::string_view bytes);
// Appends the little-endian bytes of `samples` to `out`.
void AppendPcmBytes(std::span<const int16_t> samples, std::string* out);
std::string PcmToBytes(std::span<const int16_t> samples);
// Root mean square of the samples, in [0, 32768]; 0 for an empty span.
double Rms(std::span<const int16_t> samples);

}  // namespace moe::audio
