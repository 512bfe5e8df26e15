// The tts service's Synthesize stream handling, as TtsServer::Synthesize does it after
// authorisation (not through a socket): the input is a stream of SynthesizeRequest messages,
// each a varint length then its bytes (fuzz_util.h SplitDelimited; a message that does not parse
// ends the input). The first must carry `config` (TtsCore::Open: voice, sample rate, speed), the
// rest text chunks fed to the TtsStream (segmentation, then espeak-ng, made once per process),
// then Finish. The sink checks each audio chunk the adapter would send. Run with -max_len=4096
// to cap the text.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "moe/tts/v1/tts.pb.h"
#include "services/tts/core/tts_core.h"
#include "services/tts/espeak_synthesizer.h"

namespace {

namespace pb = ::moe::tts::v1;
using moe::tts::TtsCore;

// Held for the process (reachable: no leak reports).
struct Tts {
  moe::common::metrics::Registry registry;
  std::unique_ptr<moe::tts::EspeakSynthesizer> synth;
  std::unique_ptr<TtsCore> core;
};

TtsCore& TheCore() {
  static Tts* t = [] {
    auto* st = new Tts;
    auto synth = moe::tts::EspeakSynthesizer::Create({});
    if (!synth.ok()) std::abort();
    st->synth = *std::move(synth);
    st->core = std::make_unique<TtsCore>(moe::tts::TtsCoreOptions{.max_streams = 1}, *st->synth,
                                         moe::common::SystemClock::Get(), st->registry);
    return st;
  }();
  return *t->core;
}

}  // namespace

MOE_FUZZ_QUIET_PROTOBUF()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> messages = moe::fuzz::SplitDelimited(data, size);
  if (messages.empty()) return 0;
  pb::SynthesizeRequest request;
  if (!request.ParseFromArray(messages[0].data(), static_cast<int>(messages[0].size()))) return 0;
  if (request.payload_case() != pb::SynthesizeRequest::kConfig) return 0;
  const pb::SynthesisConfig& c = request.config();
  auto stream = TheCore().Open(
      {.voice = c.voice(), .sample_rate_hz = c.sample_rate_hz(), .speed = c.speed()});
  if (!stream.ok()) return 0;
  const moe::tts::ChunkSink sink = [](moe::tts::AudioChunk chunk) {
    if (chunk.pcm_s16le.size() % 2 != 0 || chunk.sample_rate_hz <= 0) std::abort();
    pb::SynthesizeResponse r;
    r.set_pcm_s16le(std::move(chunk.pcm_s16le));
    r.set_text(std::move(chunk.text));
    return true;
  };
  for (size_t i = 1; i < messages.size(); ++i) {
    if (!request.ParseFromArray(messages[i].data(), static_cast<int>(messages[i].size()))) break;
    if (request.payload_case() != pb::SynthesizeRequest::kText) return 0;
    if (!(*stream)->Text(request.text().text(), request.text().flush(), sink).ok()) return 0;
  }
  (void)(*stream)->Finish(sink);
  return 0;
}
