// Sample-rate conversion of mono s16 PCM (libsoxr, "high quality": a linear-phase low-pass with
// ~0.1 dB passband ripple, so 44.1/48 kHz uploads reach the 16 kHz recognizer without aliasing
// and espeak's 22.05 kHz reaches 24 kHz clients without imaging). Streaming: Process() may be
// called with chunks of any size; Flush() returns the filter's tail at the end of a stream.
//
// Thread-compatible: one stream per object.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::audio {

class Resampler {
 public:
  // kInvalidArgument unless both rates are in [1000, 384000]. Equal rates copy samples through.
  static absl::StatusOr<std::unique_ptr<Resampler>> Create(int32_t in_rate, int32_t out_rate);
  ~Resampler();
  Resampler(const Resampler&) = delete;
  Resampler& operator=(const Resampler&) = delete;

  // Appends the output for `in` to `out` (about in.size() * out_rate / in_rate samples; the
  // filter holds a few ms back until later input or Flush()).
  void Process(std::span<const int16_t> in, std::vector<int16_t>* out);
  // Appends what the filter still holds; the stream may then start again.
  void Flush(std::vector<int16_t>* out);

  int32_t in_rate() const { return in_rate_; }
  int32_t out_rate() const { return out_rate_; }

 private:
  Resampler(int32_t in_rate, int32_t out_rate, void* soxr);
  void Run(const int16_t* in, size_t len, std::vector<int16_t>* out);

  const int32_t in_rate_;
  const int32_t out_rate_;
  void* soxr_;  // soxr_t; null when the rates are equal
};

// One-shot: the whole of `in` converted, tail included.
absl::StatusOr<std::vector<int16_t>> Resample(std::span<const int16_t> in, int32_t in_rate,
                                              int32_t out_rate);

}  // namespace moe::audio
