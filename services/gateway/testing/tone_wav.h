// Test audio: a 440 Hz tone as a mono s16 WAV file's bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/audio/pcm.h"
#include "common/audio/wav.h"

namespace moe::gateway::testing {

// A tone, `seconds` long, at `rate` Hz sampling, as a mono s16 WAV.
inline std::string ToneWav(int rate, double seconds) {
  std::vector<int16_t> s(static_cast<size_t>(rate * seconds));
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = static_cast<int16_t>(8000 * std::sin(2 * M_PI * 440 * static_cast<double>(i) / rate));
  }
  const std::string pcm = audio::PcmToBytes(s);
  return audio::WavHeader(rate, static_cast<uint32_t>(pcm.size())) + pcm;
}

}  // namespace moe::gateway::testing
