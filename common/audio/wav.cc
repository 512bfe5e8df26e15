#include "common/audio/wav.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moe::audio {
namespace {

constexpr uint16_t kFormatPcm = 1;
constexpr uint16_t kFormatFloat = 3;
constexpr uint16_t kFormatExtensible = 0xFFFE;

uint16_t U16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}
uint32_t U32(const char* p) {
  return static_cast<uint32_t>(U16(p)) | (static_cast<uint32_t>(U16(p + 2)) << 16);
}

// One sample of `bits` at `p` as a float in [-1, 1].
double Sample(const char* p, int bits, bool is_float) {
  if (is_float) {
    if (bits == 32) {
      float f;
      const uint32_t u = U32(p);
      std::memcpy(&f, &u, 4);
      return std::isfinite(f) ? f : 0.0;
    }
    double d;
    const uint64_t u = static_cast<uint64_t>(U32(p)) | (static_cast<uint64_t>(U32(p + 4)) << 32);
    std::memcpy(&d, &u, 8);
    return std::isfinite(d) ? d : 0.0;
  }
  switch (bits) {
    case 8:
      return (static_cast<uint8_t>(p[0]) - 128) / 128.0;
    case 16:
      return static_cast<int16_t>(U16(p)) / 32768.0;
    case 24: {
      int32_t v = static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8) |
                  (static_cast<uint8_t>(p[2]) << 16);
      if (v & 0x800000) v -= 0x1000000;
      return v / 8388608.0;
    }
    default:  // 32
      return static_cast<int32_t>(U32(p)) / 2147483648.0;
  }
}

}  // namespace

absl::StatusOr<DecodedAudio> DecodeWav(std::string_view bytes, const WavLimits& limits) {
  if (bytes.size() < 12 || bytes.substr(0, 4) != "RIFF" || bytes.substr(8, 4) != "WAVE") {
    return absl::InvalidArgumentError("not a WAV file (no RIFF/WAVE header)");
  }
  bool have_fmt = false;
  uint16_t format = 0, channels = 0, bits = 0, block_align = 0;
  uint32_t rate = 0;
  size_t pos = 12;
  while (true) {
    if (pos + 8 > bytes.size()) {
      return absl::InvalidArgumentError(have_fmt ? "WAV file has no data chunk"
                                                 : "WAV file is truncated: no fmt chunk");
    }
    const std::string_view id = bytes.substr(pos, 4);
    const uint32_t len = U32(bytes.data() + pos + 4);
    const size_t body = pos + 8;
    if (id == "fmt ") {
      if (len < 16 || body + len > bytes.size()) {
        return absl::InvalidArgumentError("WAV fmt chunk is truncated");
      }
      const char* f = bytes.data() + body;
      format = U16(f);
      channels = U16(f + 2);
      rate = U32(f + 4);
      block_align = U16(f + 12);
      bits = U16(f + 14);
      if (format == kFormatExtensible) {
        if (len < 40) return absl::InvalidArgumentError("WAV extensible fmt chunk is truncated");
        format = U16(f + 24);  // the sub-format GUID starts with the format tag
      }
      have_fmt = true;
    } else if (id == "data") {
      if (!have_fmt) return absl::InvalidArgumentError("WAV data chunk comes before fmt");
      break;
    } else if (body + len > bytes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("WAV chunk '", std::string(id), "' is longer than the file"));
    }
    pos = body + len + (len & 1);  // chunks are word-aligned
  }
  const bool is_float = format == kFormatFloat;
  if (format != kFormatPcm && !is_float) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "WAV encoding 0x%04x is not supported (PCM integer or float only)", format));
  }
  if (channels == 0 || channels > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV channel count ", channels, " is not in [1, 32]"));
  }
  if (rate < 1000 || rate > 384000) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV sample rate ", rate, " Hz is not in [1000, 384000]"));
  }
  const bool bits_ok =
      is_float ? (bits == 32 || bits == 64) : (bits == 8 || bits == 16 || bits == 24 || bits == 32);
  if (!bits_ok || block_align != channels * (bits / 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV sample size of ", bits, " bits is not supported"));
  }
  const size_t data_start = pos + 8;
  const uint32_t declared = U32(bytes.data() + pos + 4);
  // A streamed WAV says 0 or 0xFFFFFFFF, a cut one more than is there: take what is present.
  const size_t present = bytes.size() - data_start;
  const size_t data_len =
      (declared == 0 || declared == 0xFFFFFFFFu) ? present : std::min<size_t>(declared, present);
  const int64_t frames = static_cast<int64_t>(data_len / block_align);
  if (frames > limits.max_frames) {
    return absl::OutOfRangeError(absl::StrCat("the audio has ", frames, " frames; at most ",
                                              limits.max_frames, " are accepted"));
  }
  DecodedAudio out;
  out.sample_rate = static_cast<int32_t>(rate);
  out.channels = channels;
  out.samples.resize(static_cast<size_t>(frames));
  const int step = bits / 8;
  const char* p = bytes.data() + data_start;
  for (int64_t i = 0; i < frames; ++i) {
    double sum = 0;
    for (int c = 0; c < channels; ++c) {
      sum += Sample(p, bits, is_float);
      p += step;
    }
    const double v = std::clamp(sum / channels, -1.0, 1.0) * 32767.0;
    out.samples[static_cast<size_t>(i)] = static_cast<int16_t>(std::lrint(v));
  }
  return out;
}

std::string WavHeader(int32_t sample_rate, uint32_t data_bytes) {
  std::string h;
  auto u16 = [&h](uint16_t v) {
    h.push_back(static_cast<char>(v & 0xff));
    h.push_back(static_cast<char>(v >> 8));
  };
  auto u32 = [&](uint32_t v) {
    u16(static_cast<uint16_t>(v & 0xffff));
    u16(static_cast<uint16_t>(v >> 16));
  };
  h += "RIFF";
  u32(data_bytes == 0xFFFFFFFFu ? 0xFFFFFFFFu : 36 + data_bytes);
  h += "WAVEfmt ";
  u32(16);
  u16(kFormatPcm);
  u16(1);
  u32(static_cast<uint32_t>(sample_rate));
  u32(static_cast<uint32_t>(sample_rate) * 2);
  u16(2);
  u16(16);
  h += "data";
  u32(data_bytes);
  return h;
}

}  // namespace moe::audio
