#include "services/asr/pocketsphinx_decoder.h"

#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moe::asr {
namespace {

constexpr char kGrammarSearch[] = "grammar";
constexpr char kKeywordSearch[] = "keywords";

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return (std::filesystem::path(dir) / path).string();
}

class PocketsphinxDecoder final : public Decoder {
 public:
  PocketsphinxDecoder(const PocketsphinxOptions& options, cmd_ln_t* config, ps_decoder_t* ps)
      : options_(options), config_(config), ps_(ps), dictation_search_(ps_get_search(ps)) {}
  ~PocketsphinxDecoder() override {
    if (in_utterance_) ps_end_utt(ps_);
    ps_free(ps_);
    cmd_ln_free_r(config_);
  }

  int32_t sample_rate() const override { return 16000; }
  VadTiming vad_timing() const override {
    return {.onset_ms = static_cast<int32_t>(absl::ToInt64Milliseconds(options_.vad_onset)),
            .hangover_ms = static_cast<int32_t>(absl::ToInt64Milliseconds(options_.vad_hangover))};
  }

  absl::Status Configure(const RecognitionSpec& spec) override {
    // The previous stream may have left an utterance open (a final's restart, a cancel):
    // pocketsphinx switches searches only between utterances.
    if (in_utterance_) {
      ps_end_utt(ps_);
      in_utterance_ = false;
    }
    switch (spec.mode) {
      case RecognitionMode::kDictation:
        if (ps_set_search(ps_, dictation_search_.c_str()) < 0) {
          return absl::InternalError("pocketsphinx: cannot select the dictation search");
        }
        return absl::OkStatus();
      case RecognitionMode::kGrammar:
        if (ps_set_jsgf_string(ps_, kGrammarSearch, spec.grammar_jsgf.c_str()) < 0) {
          return absl::InvalidArgumentError(
              "grammar_jsgf: pocketsphinx cannot use the grammar (a JSGF syntax error, no public "
              "rule, or a word not in the dictionary)");
        }
        ps_set_search(ps_, kGrammarSearch);
        return absl::OkStatus();
      case RecognitionMode::kKeywords:
        return ConfigureKeywords(spec.keywords);
    }
    return absl::InvalidArgumentError("unknown recognition mode");
  }

  absl::Status StartUtterance() override {
    if (ps_start_utt(ps_) < 0) return absl::InternalError("pocketsphinx: ps_start_utt failed");
    in_utterance_ = true;
    return absl::OkStatus();
  }

  absl::Status Process(std::span<const int16_t> pcm) override {
    if (ps_process_raw(ps_, pcm.data(), pcm.size(), FALSE, FALSE) < 0) {
      return absl::InternalError("pocketsphinx: ps_process_raw failed");
    }
    return absl::OkStatus();
  }

  bool InSpeech() const override { return ps_get_in_speech(ps_) != 0; }

  std::string Partial() override {
    int32 score = 0;
    const char* hyp = ps_get_hyp(ps_, &score);
    // Keyword spotting separates what it heard with spaces, one after each.
    return hyp == nullptr ? "" : std::string(absl::StripAsciiWhitespace(hyp));
  }

  absl::StatusOr<std::string> EndUtterance() override {
    in_utterance_ = false;
    if (ps_end_utt(ps_) < 0) return absl::InternalError("pocketsphinx: ps_end_utt failed");
    return Partial();
  }

 private:
  absl::Status ConfigureKeywords(const std::vector<std::string>& keywords) {
    for (const std::string& phrase : keywords) {
      for (absl::string_view word : absl::StrSplit(phrase, ' ', absl::SkipEmpty())) {
        char* known = ps_lookup_word(ps_, std::string(word).c_str());
        if (known == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("keywords: '", word, "' is not in the dictionary"));
        }
        std::free(known);
      }
    }
    // pocketsphinx 0.8 reads a keyword list only from a file: write a private temporary one.
    char path[] = "/tmp/moe-asr-kws-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return absl::InternalError("cannot create a keyword file in /tmp");
    FILE* f = fdopen(fd, "w");
    for (const std::string& phrase : keywords) {
      absl::FPrintF(f, "%s /%g/\n", phrase, options_.kws_threshold);
    }
    std::fclose(f);
    const int r = ps_set_kws(ps_, kKeywordSearch, path);
    unlink(path);
    if (r < 0) return absl::InvalidArgumentError("keywords: pocketsphinx refused the list");
    ps_set_search(ps_, kKeywordSearch);
    return absl::OkStatus();
  }

  const PocketsphinxOptions options_;
  cmd_ln_t* const config_;
  ps_decoder_t* const ps_;
  const std::string dictation_search_;
  bool in_utterance_ = false;
};

}  // namespace

void PocketsphinxOptions::Describe(common::config::Schema<PocketsphinxOptions>& s) {
  s.Add("model_dir", &PocketsphinxOptions::model_dir, "pocketsphinx model directory").NonEmpty();
  s.Add("hmm", &PocketsphinxOptions::hmm, "acoustic model (under model_dir)").NonEmpty();
  s.Add("lm", &PocketsphinxOptions::lm, "language model for dictation (under model_dir)")
      .NonEmpty();
  s.Add("dict", &PocketsphinxOptions::dict, "pronunciation dictionary (under model_dir)")
      .NonEmpty();
  s.Add("vad_hangover", &PocketsphinxOptions::vad_hangover,
        "VAD hang-over (-vad_postspeech): the smallest endpoint pause")
      .Range(absl::Milliseconds(50), absl::Seconds(2));
  s.Add("vad_onset", &PocketsphinxOptions::vad_onset, "speech needed to start (-vad_startspeech)")
      .Range(absl::Milliseconds(10), absl::Seconds(1));
  s.Add("vad_threshold", &PocketsphinxOptions::vad_threshold, "VAD threshold (-vad_threshold)")
      .Range(0.5, 10.0);
  s.Add("second_pass", &PocketsphinxOptions::second_pass,
        "run -fwdflat and -bestpath (slower finals)");
  s.Add("kws_threshold", &PocketsphinxOptions::kws_threshold, "keyword spotting threshold")
      .Range(1e-80, 1.0);
  s.Add("beam", &PocketsphinxOptions::beam, "search beam (-beam)").Range(1e-100, 1.0);
  s.Add("wbeam", &PocketsphinxOptions::wbeam, "word exit beam (-wbeam)").Range(1e-100, 1.0);
}

absl::Status PocketsphinxOptions::Validate() const { return common::config::CheckFields(*this); }

absl::StatusOr<std::unique_ptr<Decoder>> CreatePocketsphinxDecoder(
    const PocketsphinxOptions& options) {
  const std::string hmm = Resolve(options.model_dir, options.hmm);
  const std::string lm = Resolve(options.model_dir, options.lm);
  const std::string dict = Resolve(options.model_dir, options.dict);
  for (const std::string& p : {hmm, lm, dict}) {
    if (!std::filesystem::exists(p)) {
      return absl::NotFoundError(
          absl::StrCat("pocketsphinx model file ", p, " does not exist (engine.model_dir)"));
    }
  }
  // pocketsphinx logs every parameter and search to stderr; keep only what the service says.
  static std::once_flag quiet;
  std::call_once(quiet, [] { err_set_logfp(nullptr); });
  const std::string frames = [](absl::Duration d) {
    return absl::StrCat(std::max<int64_t>(1, absl::ToInt64Milliseconds(d) / 10));
  }(options.vad_hangover);
  const std::string onset =
      absl::StrCat(std::max<int64_t>(1, absl::ToInt64Milliseconds(options.vad_onset) / 10));
  const std::string threshold = absl::StrCat(options.vad_threshold);
  const std::string kws = absl::StrFormat("%g", options.kws_threshold);
  const std::string beam = absl::StrFormat("%g", options.beam);
  const std::string wbeam = absl::StrFormat("%g", options.wbeam);
  const char* pass = options.second_pass ? "yes" : "no";
  cmd_ln_t* config = cmd_ln_init(
      nullptr, ps_args(), TRUE, "-hmm", hmm.c_str(), "-lm", lm.c_str(), "-dict", dict.c_str(),
      "-vad_postspeech", frames.c_str(), "-vad_startspeech", onset.c_str(), "-vad_threshold",
      threshold.c_str(), "-kws_threshold", kws.c_str(), "-beam", beam.c_str(), "-wbeam",
      wbeam.c_str(), "-fwdflat", pass, "-bestpath", pass, nullptr);
  if (config == nullptr) return absl::InternalError("pocketsphinx: bad configuration");
  ps_decoder_t* ps = ps_init(config);
  if (ps == nullptr) {
    cmd_ln_free_r(config);
    return absl::InternalError(
        absl::StrCat("pocketsphinx: cannot load the models in ", options.model_dir));
  }
  return std::unique_ptr<Decoder>(new PocketsphinxDecoder(options, config, ps));
}

}  // namespace moe::asr
