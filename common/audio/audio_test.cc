#include <FLAC/stream_decoder.h>
#include <lame/lame.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "common/audio/encoder.h"
#include "common/audio/pcm.h"
#include "common/audio/resampler.h"
#include "common/audio/wav.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::audio {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<int16_t> Sine(double hz, int rate, double seconds, double amplitude = 10000) {
  std::vector<int16_t> out(static_cast<size_t>(rate * seconds));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<int16_t>(amplitude * std::sin(2 * std::numbers::pi * hz * i / rate));
  }
  return out;
}

// Upward zero crossings per second: the frequency of a clean sine.
double Frequency(const std::vector<int16_t>& s, int rate) {
  int crossings = 0;
  for (size_t i = 1; i < s.size(); ++i) crossings += s[i - 1] < 0 && s[i] >= 0;
  return crossings * static_cast<double>(rate) / static_cast<double>(s.size());
}

// A WAV file with an arbitrary fmt chunk and sample bytes.
std::string Wav(uint16_t format, uint16_t channels, uint32_t rate, uint16_t bits,
                const std::string& data, bool extensible = false) {
  std::string fmt;
  auto u16 = [](std::string& s, uint16_t v) {
    s.push_back(static_cast<char>(v & 0xff));
    s.push_back(static_cast<char>(v >> 8));
  };
  auto u32 = [&](std::string& s, uint32_t v) {
    u16(s, static_cast<uint16_t>(v & 0xffff));
    u16(s, static_cast<uint16_t>(v >> 16));
  };
  u16(fmt, extensible ? 0xFFFE : format);
  u16(fmt, channels);
  u32(fmt, rate);
  u32(fmt, rate * channels * bits / 8);
  u16(fmt, static_cast<uint16_t>(channels * bits / 8));
  u16(fmt, bits);
  if (extensible) {
    u16(fmt, 22);
    u16(fmt, bits);
    u32(fmt, 0);
    u16(fmt, format);
    fmt += std::string(14, '\0');
  }
  std::string out = "RIFF";
  u32(out, static_cast<uint32_t>(4 + 8 + fmt.size() + 8 + data.size()));
  out += "WAVE";
  out += "LIST";  // an unrelated chunk first, as many tools write
  u32(out, 4);
  out += "INFO";
  out += "fmt ";
  u32(out, static_cast<uint32_t>(fmt.size()));
  out += fmt;
  out += "data";
  u32(out, static_cast<uint32_t>(data.size()));
  out += data;
  return out;
}

TEST(WavTest, DecodesStereo16BitToMonoAverage) {
  std::string data;
  for (int16_t l : {1000, -2000, 300}) {
    AppendPcmBytes(std::vector<int16_t>{l, static_cast<int16_t>(l + 200)}, &data);
  }
  absl::StatusOr<DecodedAudio> a = DecodeWav(Wav(1, 2, 44100, 16, data));
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->sample_rate, 44100);
  EXPECT_EQ(a->channels, 2);
  EXPECT_EQ(a->samples, (std::vector<int16_t>{1100, -1900, 400}));
}

TEST(WavTest, DecodesEightTwentyFourBitAndFloat) {
  EXPECT_EQ(DecodeWav(Wav(1, 1, 8000, 8, std::string("\x80\xff\x00", 3)))->samples,
            (std::vector<int16_t>{0, 32511, -32767}));
  EXPECT_EQ(DecodeWav(Wav(1, 1, 16000, 24, std::string("\x00\x00\x40", 3)))->samples,
            (std::vector<int16_t>{16384}));
  float f = -0.5f;
  std::string fb(4, '\0');
  std::memcpy(fb.data(), &f, 4);
  EXPECT_EQ(DecodeWav(Wav(3, 1, 48000, 32, fb, /*extensible=*/true))->samples,
            (std::vector<int16_t>{-16384}));
}

TEST(WavTest, StreamedLengthTakesTheBytesPresent) {
  std::string w = Wav(1, 1, 16000, 16, PcmToBytes(std::vector<int16_t>{1, 2, 3, 4}));
  w.replace(w.size() - 12, 4, "\xff\xff\xff\xff");  // the data chunk's length
  EXPECT_EQ(DecodeWav(w)->samples.size(), 4u);
  // A data chunk cut short (an upload that stopped) keeps the whole frames present.
  std::string cut = Wav(1, 1, 16000, 16, PcmToBytes(std::vector<int16_t>{1, 2, 3, 4}));
  cut.resize(cut.size() - 3);
  EXPECT_EQ(DecodeWav(cut)->samples, (std::vector<int16_t>{1, 2}));
}

TEST(WavTest, RejectsMalformedFilesWithAReason) {
  const std::string good = Wav(1, 1, 16000, 16, PcmToBytes(std::vector<int16_t>{1, 2}));
  EXPECT_THAT(DecodeWav("hello").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a WAV")));
  EXPECT_THAT(DecodeWav(good.substr(0, 30)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
  EXPECT_THAT(DecodeWav(Wav(2, 1, 16000, 4, "xx")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0x0002")));  // ADPCM
  EXPECT_THAT(DecodeWav(Wav(1, 0, 16000, 16, "xx")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("channel")));
  EXPECT_THAT(DecodeWav(Wav(1, 1, 100, 16, "xx")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rate")));
  std::string lying = good;
  lying[16] = '\x7f';  // the LIST chunk claims more bytes than the file has
  EXPECT_THAT(DecodeWav(lying).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("longer than the file")));
  EXPECT_THAT(DecodeWav(good, {.max_frames = 1}).status(), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(WavTest, HeaderRoundTrips) {
  const std::vector<int16_t> s = {5, -5, 7};
  absl::StatusOr<DecodedAudio> a = DecodeWav(WavHeader(24000, 6) + PcmToBytes(s));
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->sample_rate, 24000);
  EXPECT_EQ(a->samples, s);
}

TEST(ResamplerTest, KeepsFrequencyAndDuration) {
  const std::vector<int16_t> in = Sine(1000, 48000, 1.0);
  absl::StatusOr<std::vector<int16_t>> out = Resample(in, 48000, 16000);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_NEAR(static_cast<double>(out->size()), 16000, 16);
  EXPECT_NEAR(Frequency(*out, 16000), 1000, 5);
  EXPECT_NEAR(Rms(*out), Rms(in), Rms(in) * 0.02);
}

TEST(ResamplerTest, RemovesWhatTheTargetRateCannotCarry) {
  // 10 kHz is above the Nyquist frequency of 16 kHz (8 kHz).
  absl::StatusOr<std::vector<int16_t>> out = Resample(Sine(10000, 48000, 0.5), 48000, 16000);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_LT(Rms(*out), 100);  // no alias at 6 kHz
}

TEST(ResamplerTest, ChunkedStreamMatchesOneShot) {
  const std::vector<int16_t> in = Sine(440, 22050, 0.7);
  const std::vector<int16_t> whole = *Resample(in, 22050, 24000);
  absl::StatusOr<std::unique_ptr<Resampler>> r = Resampler::Create(22050, 24000);
  ASSERT_THAT(r.status(), IsOk());
  std::vector<int16_t> out;
  for (size_t i = 0; i < in.size(); i += 441) {
    const size_t n = std::min<size_t>(441, in.size() - i);
    (*r)->Process(std::span<const int16_t>(in).subspan(i, n), &out);
  }
  (*r)->Flush(&out);
  EXPECT_EQ(out, whole);
}

TEST(ResamplerTest, RejectsBadRates) {
  EXPECT_THAT(Resampler::Create(0, 16000).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

std::string EncodeAll(AudioFormat f, int rate, const std::vector<int16_t>& pcm) {
  absl::StatusOr<std::unique_ptr<AudioEncoder>> enc = CreateAudioEncoder(f, rate);
  EXPECT_THAT(enc.status(), IsOk());
  std::string out;
  for (size_t i = 0; i < pcm.size(); i += 1000) {
    const size_t n = std::min<size_t>(1000, pcm.size() - i);
    EXPECT_THAT((*enc)->Encode(std::span<const int16_t>(pcm).subspan(i, n), &out), IsOk());
  }
  EXPECT_THAT((*enc)->Finish(&out), IsOk());
  return out;
}

TEST(EncoderTest, FormatsAndContentTypes) {
  EXPECT_EQ(ParseAudioFormat("opus"), AudioFormat::kOpus);
  EXPECT_EQ(ParseAudioFormat("aac"), std::nullopt);
  EXPECT_EQ(ContentType(AudioFormat::kMp3), "audio/mpeg");
  EXPECT_THAT(CreateAudioEncoder(AudioFormat::kMp3, 23456).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EncoderTest, WavAndPcmCarryTheSamples) {
  const std::vector<int16_t> pcm = Sine(300, 24000, 0.2);
  EXPECT_EQ(EncodeAll(AudioFormat::kPcm, 24000, pcm), PcmToBytes(pcm));
  EXPECT_EQ(DecodeWav(EncodeAll(AudioFormat::kWav, 24000, pcm))->samples, pcm);
}

TEST(EncoderTest, Mp3DecodesBackToTheSignal) {
  const std::vector<int16_t> pcm = Sine(440, 24000, 1.0);
  std::string mp3 = EncodeAll(AudioFormat::kMp3, 24000, pcm);
  ASSERT_GT(mp3.size(), 4000u);  // ~64 kbit/s for a second
  hip_t hip = hip_decode_init();
  std::vector<short> left(100000), right(100000), all;
  for (size_t i = 0; i < mp3.size(); i += 512) {
    const size_t len = std::min<size_t>(512, mp3.size() - i);
    int n = hip_decode(hip, reinterpret_cast<unsigned char*>(mp3.data() + i), len, left.data(),
                       right.data());
    while (n > 0) {
      all.insert(all.end(), left.begin(), left.begin() + n);
      n = hip_decode(hip, nullptr, 0, left.data(), right.data());
    }
  }
  hip_decode_exit(hip);
  EXPECT_GT(all.size(), 20000u);
  EXPECT_NEAR(Frequency(all, 24000), 440, 25);  // the codec's delay shifts the ends
  EXPECT_NEAR(Rms(all), Rms(pcm), Rms(pcm) * 0.15);
}

TEST(EncoderTest, FlacIsLossless) {
  const std::vector<int16_t> pcm = Sine(523, 16000, 0.5);
  std::string flac = EncodeAll(AudioFormat::kFlac, 16000, pcm);
  ASSERT_EQ(flac.substr(0, 4), "fLaC");
  struct State {
    std::string bytes;
    size_t pos = 0;
    std::vector<int16_t> out;
  } st{flac};
  FLAC__StreamDecoder* d = FLAC__stream_decoder_new();
  auto read = [](const FLAC__StreamDecoder*, FLAC__byte buf[], size_t* n, void* u) {
    auto* s = static_cast<State*>(u);
    *n = std::min(*n, s->bytes.size() - s->pos);
    std::memcpy(buf, s->bytes.data() + s->pos, *n);
    s->pos += *n;
    return *n ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE
              : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
  };
  auto write = [](const FLAC__StreamDecoder*, const FLAC__Frame* f, const FLAC__int32* const b[],
                  void* u) {
    auto* s = static_cast<State*>(u);
    for (uint32_t i = 0; i < f->header.blocksize; ++i) {
      s->out.push_back(static_cast<int16_t>(b[0][i]));
    }
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
  };
  auto error = [](const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus, void*) {};
  ASSERT_EQ(FLAC__stream_decoder_init_stream(d, read, nullptr, nullptr, nullptr, nullptr, write,
                                             nullptr, error, &st),
            FLAC__STREAM_DECODER_INIT_STATUS_OK);
  EXPECT_TRUE(FLAC__stream_decoder_process_until_end_of_stream(d));
  FLAC__stream_decoder_delete(d);
  EXPECT_EQ(st.out, pcm);
}

TEST(EncoderTest, OpusIsAnOggOpusStream) {
  std::string ogg = EncodeAll(AudioFormat::kOpus, 24000, Sine(440, 24000, 1.0));
  ASSERT_GT(ogg.size(), 1000u);
  EXPECT_EQ(ogg.substr(0, 4), "OggS");
  EXPECT_NE(ogg.find("OpusHead"), std::string::npos);
  EXPECT_NE(ogg.find("OpusTags"), std::string::npos);
  // The last page carries the end-of-stream flag (header type bit 2).
  const size_t last = ogg.rfind("OggS");
  EXPECT_EQ(ogg[last + 5] & 4, 4);
}

}  // namespace
}  // namespace moe::audio
