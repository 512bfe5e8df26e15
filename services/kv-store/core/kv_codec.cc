#include "services/kv-store/core/kv_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe::kv_store {
namespace {

// Regroups the bytes of n elements of `width` bytes: out[b * n + i] = in[i * width + b].
void Shuffle(const uint8_t* in, uint8_t* out, int64_t n, int width) {
  if (width == 4) {
    uint8_t *p0 = out, *p1 = out + n, *p2 = out + 2 * n, *p3 = out + 3 * n;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, in + 4 * i, 4);
      p0[i] = static_cast<uint8_t>(v);
      p1[i] = static_cast<uint8_t>(v >> 8);
      p2[i] = static_cast<uint8_t>(v >> 16);
      p3[i] = static_cast<uint8_t>(v >> 24);
    }
    return;
  }
  for (int b = 0; b < width; ++b) {
    uint8_t* plane = out + b * n;
    for (int64_t i = 0; i < n; ++i) plane[i] = in[i * width + b];
  }
}

bool Int8Applies(const BlockLayout& layout) {
  return layout.dtype == common::DType::kF32 && layout.dims.size() == 5 && layout.dims[1] == 2;
}

EncodedBlock EncodeZstd(const CodecOptions& options, const BlockLayout& layout,
                        std::string_view raw) {
  const int width = static_cast<int>(common::DTypeSize(layout.dtype));
  const int64_t n = layout.num_elements();
  std::vector<uint8_t> shuffled(raw.size());
  Shuffle(reinterpret_cast<const uint8_t*>(raw.data()), shuffled.data(), n, width);
  EncodedBlock out;
  out.payload.resize(ZSTD_compressBound(raw.size()));
  const size_t got = ZSTD_compress(out.payload.data(), out.payload.size(), shuffled.data(),
                                   shuffled.size(), options.zstd_level);
  const double limit = static_cast<double>(raw.size()) * (1.0 - options.min_savings);
  if (ZSTD_isError(got) || static_cast<double>(got) > limit) return EncodedBlock{};  // kRaw
  out.payload.resize(got);
  out.payload.shrink_to_fit();
  out.codec = Codec::kShuffleZstd;
  return out;
}

EncodedBlock EncodeInt8(const BlockLayout& layout, std::string_view raw) {
  const int64_t layers = layout.dims[0], tokens = layout.dims[2], heads = layout.dims[3],
                dim = layout.dims[4];
  const float* x = reinterpret_cast<const float*>(raw.data());
  const int64_t num_scales = layers * 2 * heads;
  EncodedBlock out;
  out.codec = Codec::kInt8;
  out.payload.resize(num_scales * sizeof(float) + layout.num_elements());
  float* scales = reinterpret_cast<float*>(out.payload.data());
  int8_t* q = reinterpret_cast<int8_t*>(out.payload.data() + num_scales * sizeof(float));
  for (int64_t lk = 0; lk < layers * 2; ++lk) {
    for (int64_t h = 0; h < heads; ++h) {
      float max_abs = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        const float* row = x + ((lk * tokens + t) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) max_abs = std::max(max_abs, std::fabs(row[d]));
      }
      const float scale = max_abs / 127.0f;
      scales[lk * heads + h] = scale;
      const float inv = scale > 0 ? 1.0f / scale : 0.0f;
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t base = ((lk * tokens + t) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) {
          const float v = std::nearbyint(x[base + d] * inv);
          q[base + d] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
        }
      }
    }
  }
  return out;
}

absl::Status DecodeInt8(const BlockLayout& layout, std::string_view payload,
                        std::span<uint8_t> out) {
  if (!Int8Applies(layout)) return absl::DataLossError("int8 block with a non-KV layout");
  const int64_t layers = layout.dims[0], tokens = layout.dims[2], heads = layout.dims[3],
                dim = layout.dims[4];
  const int64_t num_scales = layers * 2 * heads;
  if (payload.size() != static_cast<size_t>(num_scales * 4 + layout.num_elements())) {
    return absl::DataLossError("int8 block of the wrong size");
  }
  std::vector<float> scales(num_scales);
  std::memcpy(scales.data(), payload.data(), num_scales * sizeof(float));
  const int8_t* q = reinterpret_cast<const int8_t*>(payload.data() + num_scales * sizeof(float));
  float* x = reinterpret_cast<float*>(out.data());
  for (int64_t lk = 0; lk < layers * 2; ++lk) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const float scale = scales[lk * heads + h];
        const int64_t base = ((lk * tokens + t) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) x[base + d] = static_cast<float>(q[base + d]) * scale;
      }
    }
  }
  return absl::OkStatus();
}

// Decompresses the planes into a scratch buffer (per thread, reused), then interleaves them into
// `out`, whose every byte is written once: a few bytes per element of branch-free work, far
// faster than scattering each plane byte by byte.
absl::Status DecodeShuffleZstd(const BlockLayout& layout, std::string_view payload,
                               std::span<uint8_t> out) {
  const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (size != out.size()) return absl::DataLossError("zstd block of the wrong size");
  thread_local std::vector<uint8_t> planes;
  planes.resize(out.size());
  const size_t got = ZSTD_decompress(planes.data(), planes.size(), payload.data(), payload.size());
  if (ZSTD_isError(got) || got != out.size()) {
    return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(got)));
  }
  const int64_t n = layout.num_elements();
  const uint8_t* p = planes.data();
  if (common::DTypeSize(layout.dtype) == 4) {
    const uint8_t *p0 = p, *p1 = p + n, *p2 = p + 2 * n, *p3 = p + 3 * n;
    uint8_t* o = out.data();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t v = static_cast<uint32_t>(p0[i]) | static_cast<uint32_t>(p1[i]) << 8 |
                         static_cast<uint32_t>(p2[i]) << 16 | static_cast<uint32_t>(p3[i]) << 24;
      std::memcpy(o + 4 * i, &v, 4);
    }
  } else {
    const uint8_t *p0 = p, *p1 = p + n;
    uint8_t* o = out.data();
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(p0[i] | p1[i] << 8);
      std::memcpy(o + 2 * i, &v, 2);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kRaw:
      return "raw";
    case Codec::kShuffleZstd:
      return "shuffle_zstd";
    case Codec::kInt8:
      return "int8";
  }
  return "?";
}

int64_t BlockLayout::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

EncodedBlock EncodeBlock(const CodecOptions& options, const BlockLayout& layout,
                         std::string_view raw, CompressionBackoff* backoff) {
  if (options.mode == CompressionMode::kNone) return EncodedBlock{};
  if (options.mode == CompressionMode::kInt8 && Int8Applies(layout)) {
    return EncodeInt8(layout, raw);
  }
  if (backoff != nullptr && !backoff->ShouldTry()) return EncodedBlock{.backed_off = true};
  EncodedBlock out = EncodeZstd(options, layout, raw);
  if (backoff != nullptr) backoff->Record(out.codec == Codec::kShuffleZstd);
  return out;
}

bool CompressionBackoff::ShouldTry() {
  if (misses_.load(std::memory_order_relaxed) < kMissesBeforeBackoff) return true;
  if (since_probe_.fetch_add(1, std::memory_order_relaxed) + 1 >= kProbeInterval) {
    since_probe_.store(0, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void CompressionBackoff::Record(bool paid) {
  if (paid) {
    misses_.store(0, std::memory_order_relaxed);
    since_probe_.store(0, std::memory_order_relaxed);
  } else {
    misses_.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::Status DecodeBlock(Codec codec, const BlockLayout& layout, std::string_view payload,
                         std::span<uint8_t> out) {
  if (out.size() != static_cast<size_t>(layout.num_bytes())) {
    return absl::InternalError("DecodeBlock: output of the wrong size");
  }
  switch (codec) {
    case Codec::kRaw:
      if (payload.size() != out.size()) return absl::DataLossError("raw block of the wrong size");
      std::memcpy(out.data(), payload.data(), out.size());
      return absl::OkStatus();
    case Codec::kShuffleZstd:
      return DecodeShuffleZstd(layout, payload, out);
    case Codec::kInt8:
      return DecodeInt8(layout, payload, out);
  }
  return absl::DataLossError("unknown codec");
}

}  // namespace moe::kv_store
