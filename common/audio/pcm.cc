#include "common/audio/pcm.h"

#include <cmath>

namespace moe::audio {

std::vector<int16_t> PcmFromBytes(std::string_view bytes) {
  std::vector<int16_t> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto lo = static_cast<uint8_t>(bytes[2 * i]);
    const auto hi = static_cast<uint8_t>(bytes[2 * i + 1]);
    out[i] = static_cast<int16_t>(static_cast<uint16_t>(lo | (hi << 8)));
  }
  return out;
}

void AppendPcmBytes(std::span<const int16_t> samples, std::string* out) {
  const size_t base = out->size();
  out->resize(base + 2 * samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto u = static_cast<uint16_t>(samples[i]);
    (*out)[base + 2 * i] = static_cast<char>(u & 0xff);
    (*out)[base + 2 * i + 1] = static_cast<char>(u >> 8);
  }
}

std::string PcmToBytes(std::span<const int16_t> samples) {
  std::string out;
  AppendPcmBytes(samples, &out);
  return out;
}

double Rms(std::span<const int16_t> samples) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (int16_t s : samples) sum += static_cast<double>(s) * s;
  return std::sqrt(sum / static_cast<double>(samples.size()));
}

}  // namespace moe::audio
