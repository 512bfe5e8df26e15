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

// Streams the decompressed planes through a small buffer and scatters each chunk to its place, so
// every output byte is written once and no block-sized temporary exists.
absl::Status DecodeShuffleZstd(const BlockLayout& layout, std::string_view payload,
                               std::span<uint8_t> out) {
  const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (size != out.size()) return absl::DataLossError("zstd block of the wrong size");
  struct DctxDeleter {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
  };
  std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx(ZSTD_createDCtx());
  const int width = static_cast<int>(common::DTypeSize(layout.dtype));
  const int64_t n = layout.num_elements();
  constexpr size_t kChunk = 64 << 10;
  uint8_t chunk[kChunk];
  ZSTD_inBuffer in{payload.data(), payload.size(), 0};
  int64_t produced = 0;  // offset in the shuffled stream
  for (;;) {
    ZSTD_outBuffer o{chunk, kChunk, 0};
    const size_t ret = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(ret))
      return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(ret)));
    if (produced + static_cast<int64_t>(o.pos) > static_cast<int64_t>(out.size())) {
      return absl::DataLossError("zstd block decodes past its size");
    }
    for (size_t k = 0; k < o.pos;) {
      const int64_t off = produced + static_cast<int64_t>(k);
      const int64_t plane = off / n;
      int64_t i = off % n;
      const size_t run = static_cast<size_t>(std::min<int64_t>(n - i, o.pos - k));
      uint8_t* dst = out.data() + i * width + plane;
      for (size_t j = 0; j < run; ++j) dst[j * width] = chunk[k + j];
      k += run;
    }
    produced += static_cast<int64_t>(o.pos);
    if (ret == 0) break;                        // frame complete
    if (in.pos == in.size && o.pos < kChunk) {  // input used up, frame not complete
      return absl::DataLossError("zstd block truncated");
    }
  }
  if (produced != static_cast<int64_t>(out.size())) return absl::DataLossError("zstd block short");
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
                         std::string_view raw) {
  switch (options.mode) {
    case CompressionMode::kNone:
      return EncodedBlock{};
    case CompressionMode::kInt8:
      if (Int8Applies(layout)) return EncodeInt8(layout, raw);
      return EncodeZstd(options, layout, raw);
    case CompressionMode::kZstd:
      return EncodeZstd(options, layout, raw);
  }
  return EncodedBlock{};
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
