#include "services/tts/espeak_synthesizer.h"

#include <espeak-ng/speak_lib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::tts {
namespace {

std::atomic<bool> g_initialised{false};

// The synthesis in progress (espeak_Synth is synchronous and serialised by mu_).
struct Job {
  const std::function<bool(std::span<const int16_t>)>* on_audio;
  bool stopped = false;
};

int OnSynth(short* wav, int num_samples, espeak_EVENT* events) {
  auto* job = static_cast<Job*>(events->user_data);
  if (job == nullptr || job->stopped) return 1;
  if (wav != nullptr && num_samples > 0 &&
      !(*job->on_audio)(std::span<const int16_t>(wav, static_cast<size_t>(num_samples)))) {
    job->stopped = true;
    return 1;  // abort the synthesis
  }
  return 0;
}

// Whether espeak-ng knows `name` (a language or voice file name, with an optional +variant).
bool SelectVoice(const std::string& name) { return espeak_SetVoiceByName(name.c_str()) == EE_OK; }

}  // namespace

void EspeakOptions::Describe(common::config::Schema<EspeakOptions>& s) {
  s.Add("voice_aliases", &EspeakOptions::voice_aliases, "alias=voice pairs (OpenAI's names)");
  s.Add("words_per_minute", &EspeakOptions::words_per_minute, "speaking rate at speed 1")
      .Range(80, 450);
  s.Add("data_dir", &EspeakOptions::data_dir, "espeak-ng data directory; empty = built-in");
}

absl::Status EspeakOptions::Validate() const {
  if (absl::Status s = common::config::CheckFields(*this); !s.ok()) return s;
  for (const std::string& a : voice_aliases) {
    const std::vector<std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("voice_aliases: '", a, "' is not alias=voice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EspeakSynthesizer>> EspeakSynthesizer::Create(
    const EspeakOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (g_initialised.exchange(true)) {
    return absl::FailedPreconditionError("espeak-ng is already initialised in this process");
  }
  // 50 ms callback buffers: the engine hands audio over as it goes.
  const int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 50,
                                     options.data_dir.empty() ? nullptr : options.data_dir.c_str(),
                                     espeakINITIALIZE_DONT_EXIT);
  if (rate <= 0) {
    g_initialised.store(false);
    return absl::InternalError("espeak-ng cannot start (is espeak-ng-data installed?)");
  }
  espeak_SetSynthCallback(OnSynth);
  std::vector<std::pair<std::string, std::string>> aliases;
  for (const std::string& a : options.voice_aliases) {
    std::vector<std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    if (!SelectVoice(kv[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("voice_aliases: '", a, "' names a voice espeak-ng does not have"));
    }
    aliases.emplace_back(std::move(kv[0]), std::move(kv[1]));
  }
  return std::unique_ptr<EspeakSynthesizer>(
      new EspeakSynthesizer(options, rate, std::move(aliases)));
}

EspeakSynthesizer::EspeakSynthesizer(const EspeakOptions& options, int32_t rate,
                                     std::vector<std::pair<std::string, std::string>> aliases)
    : options_(options), rate_(rate), aliases_(std::move(aliases)) {}

EspeakSynthesizer::~EspeakSynthesizer() {
  absl::MutexLock lock(&mu_);
  espeak_Terminate();
  g_initialised.store(false);
}

std::string EspeakSynthesizer::Resolve(const std::string& voice) const {
  for (const auto& [alias, target] : aliases_) {
    if (alias == voice) return target;
  }
  // Only names an espeak voice file could have (no paths, no dot names, no options): espeak-ng
  // opens voices/<name> and voices/!v/<variant> under its data directory.
  if (voice.empty() || voice.size() > 64 || voice[0] == '.' ||
      voice.find("..") != std::string::npos ||
      voice.find_first_of("/\\ \t\n\r") != std::string::npos) {
    return "";
  }
  return SelectVoice(voice) ? voice : "";
}

absl::Status EspeakSynthesizer::CheckVoice(const std::string& voice) const {
  absl::MutexLock lock(&mu_);
  if (Resolve(voice).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "voice: '", voice, "' is not an espeak-ng voice (e.g. en-us, en+f3) or an alias"));
  }
  return absl::OkStatus();
}

absl::Status EspeakSynthesizer::Synthesize(
    const std::string& text, const VoiceSettings& voice,
    const std::function<bool(std::span<const int16_t>)>& on_audio) {
  absl::MutexLock lock(&mu_);
  const std::string name = Resolve(voice.voice);
  if (name.empty() || !SelectVoice(name)) {
    return absl::InvalidArgumentError(absl::StrCat("voice: '", voice.voice, "' is not known"));
  }
  const int wpm =
      std::clamp(static_cast<int>(std::lround(options_.words_per_minute * voice.speed)), 80, 450);
  espeak_SetParameter(espeakRATE, wpm, 0);
  Job job{.on_audio = &on_audio};
  const espeak_ERROR e = espeak_Synth(text.c_str(), text.size() + 1, 0, POS_CHARACTER, 0,
                                      espeakCHARS_UTF8, nullptr, &job);
  if (job.stopped) return absl::CancelledError("synthesis stopped");
  if (e != EE_OK) return absl::InternalError(absl::StrCat("espeak_Synth failed: ", e));
  return absl::OkStatus();
}

}  // namespace moe::tts
