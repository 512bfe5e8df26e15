#include "common/audio/resampler.h"

#include <soxr.h>

#include "absl/strings/str_cat.h"

namespace moe::audio {

absl::StatusOr<std::unique_ptr<Resampler>> Resampler::Create(int32_t in_rate, int32_t out_rate) {
  for (int32_t r : {in_rate, out_rate}) {
    if (r < 1000 || r > 384000) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample rate ", r, " Hz is not in [1000, 384000]"));
    }
  }
  void* handle = nullptr;
  if (in_rate != out_rate) {
    soxr_error_t error = nullptr;
    soxr_io_spec_t io = soxr_io_spec(SOXR_INT16_I, SOXR_INT16_I);
    io.flags |= SOXR_NO_DITHER;  // deterministic: the same input gives the same samples
    const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
    soxr_t s = soxr_create(in_rate, out_rate, 1, &error, &io, &quality, nullptr);
    if (error != nullptr || s == nullptr) {
      return absl::InternalError(absl::StrCat("soxr_create: ", error ? error : "failed"));
    }
    handle = s;
  }
  return std::unique_ptr<Resampler>(new Resampler(in_rate, out_rate, handle));
}

Resampler::Resampler(int32_t in_rate, int32_t out_rate, void* soxr)
    : in_rate_(in_rate), out_rate_(out_rate), soxr_(soxr) {}

Resampler::~Resampler() {
  if (soxr_ != nullptr) soxr_delete(static_cast<soxr_t>(soxr_));
}

void Resampler::Run(const int16_t* in, size_t len, std::vector<int16_t>* out) {
  auto* s = static_cast<soxr_t>(soxr_);
  // Room for this input's share plus the filter's tail; loop while soxr keeps producing.
  const size_t room = len * static_cast<size_t>(out_rate_) / static_cast<size_t>(in_rate_) + 1024;
  size_t consumed = 0;
  while (true) {
    const size_t base = out->size();
    out->resize(base + room);
    size_t idone = 0, odone = 0;
    soxr_process(s, in == nullptr ? nullptr : in + consumed, in == nullptr ? 0 : len - consumed,
                 &idone, out->data() + base, room, &odone);
    out->resize(base + odone);
    consumed += idone;
    const bool input_left = in != nullptr && consumed < len;
    if (!input_left && odone < room) break;
  }
}

void Resampler::Process(std::span<const int16_t> in, std::vector<int16_t>* out) {
  if (in.empty()) return;
  if (soxr_ == nullptr) {
    out->insert(out->end(), in.begin(), in.end());
    return;
  }
  Run(in.data(), in.size(), out);
}

void Resampler::Flush(std::vector<int16_t>* out) {
  if (soxr_ == nullptr) return;
  Run(nullptr, 0, out);
  soxr_clear(static_cast<soxr_t>(soxr_));
}

absl::StatusOr<std::vector<int16_t>> Resample(std::span<const int16_t> in, int32_t in_rate,
                                              int32_t out_rate) {
  absl::StatusOr<std::unique_ptr<Resampler>> r = Resampler::Create(in_rate, out_rate);
  if (!r.ok()) return r.status();
  std::vector<int16_t> out;
  out.reserve(in.size() * static_cast<size_t>(out_rate) / static_cast<size_t>(in_rate) + 64);
  (*r)->Process(in, &out);
  (*r)->Flush(&out);
  return out;
}

}  // namespace moe::audio
