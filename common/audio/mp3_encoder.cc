// mp3 through libmp3lame: CBR 64 kbit/s mono, encoded as chunks arrive.
#include <lame/lame.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/audio/encoder.h"

namespace moe::audio::internal {
namespace {

class Mp3Encoder final : public AudioEncoder {
 public:
  explicit Mp3Encoder(lame_global_flags* lame) : lame_(lame) {}
  ~Mp3Encoder() override { lame_close(lame_); }

  absl::Status Encode(std::span<const int16_t> pcm, std::string* out) override {
    // lame's documented worst case: 1.25 * samples + 7200 bytes.
    buffer_.resize(pcm.size() * 5 / 4 + 7200);
    const int n = lame_encode_buffer(lame_, pcm.data(), nullptr, static_cast<int>(pcm.size()),
                                     buffer_.data(), static_cast<int>(buffer_.size()));
    if (n < 0) return absl::InternalError(absl::StrCat("lame_encode_buffer: error ", n));
    out->append(reinterpret_cast<const char*>(buffer_.data()), static_cast<size_t>(n));
    return absl::OkStatus();
  }

  absl::Status Finish(std::string* out) override {
    buffer_.resize(7200);
    const int n = lame_encode_flush(lame_, buffer_.data(), static_cast<int>(buffer_.size()));
    if (n < 0) return absl::InternalError(absl::StrCat("lame_encode_flush: error ", n));
    out->append(reinterpret_cast<const char*>(buffer_.data()), static_cast<size_t>(n));
    return absl::OkStatus();
  }

 private:
  lame_global_flags* const lame_;
  std::vector<unsigned char> buffer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AudioEncoder>> CreateMp3Encoder(int32_t sample_rate) {
  static constexpr int kRates[] = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000};
  bool ok = false;
  for (int r : kRates) ok = ok || r == sample_rate;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("mp3 cannot carry ", sample_rate, " Hz (MPEG rates 8000-48000 only)"));
  }
  lame_global_flags* lame = lame_init();
  if (lame == nullptr) return absl::InternalError("lame_init failed");
  lame_set_num_channels(lame, 1);
  lame_set_mode(lame, MONO);
  lame_set_in_samplerate(lame, sample_rate);
  lame_set_out_samplerate(lame, sample_rate);
  lame_set_brate(lame, 64);
  lame_set_quality(lame, 5);
  lame_set_bWriteVbrTag(lame, 0);  // a streamed file cannot seek back to fill it in
  if (lame_init_params(lame) < 0) {
    lame_close(lame);
    return absl::InternalError("lame_init_params failed");
  }
  return std::unique_ptr<AudioEncoder>(new Mp3Encoder(lame));
}

}  // namespace moe::audio::internal
