// pocketsphinx 0.8 (Debian's libpocketsphinx3, CMU's en-us models) behind the Decoder interface:
// dictation with the en-us 3-gram model, JSGF grammars, keyword spotting. Its VAD
// (ps_get_in_speech) drives the endpointer; its hang-over (-vad_postspeech, 500 ms by default
// in pocketsphinx) is set to engine.vad_hangover (300 ms), so that the default endpoint pause
// of 300 ms is not held back by the VAD.
//
// Thread-compatible (one stream at a time per decoder); decoders share nothing.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "services/asr/core/decoder.h"

namespace moe::asr {

struct PocketsphinxOptions {
  // Model files; relative paths are under model_dir.
  std::string model_dir = "/usr/share/pocketsphinx/model/en-us";
  std::string hmm = "en-us";
  std::string lm = "en-us.lm.bin";
  std::string dict = "cmudict-en-us.dict";
  // The VAD's hang-over: speech is reported over this long after its last voiced frame. The
  // smallest effective endpoint pause.
  absl::Duration vad_hangover = absl::Milliseconds(300);
  // Speech reported after this much of it (-vad_startspeech); start times are moved back by it.
  absl::Duration vad_onset = absl::Milliseconds(100);
  // VAD threshold over the noise floor (-vad_threshold; pocketsphinx's default 2.0).
  double vad_threshold = 2.0;
  // pocketsphinx's second and third passes (-fwdflat, -bestpath): about the same accuracy on
  // the test data (README), but 150-380 ms more at the end of each utterance: off keeps the
  // finalisation short.
  bool second_pass = false;
  // Keyword spotting threshold (-kws_threshold); lower finds more, with more false alarms.
  double kws_threshold = 1e-20;
  // -beam and -wbeam (pruning; wider is slower and a little more accurate).
  double beam = 1e-48;
  double wbeam = 7e-29;

  static void Describe(common::config::Schema<PocketsphinxOptions>& s);
  absl::Status Validate() const;
};

// Loads the models (~0.3 s). kNotFound naming the file when one is missing; kInternal when
// pocketsphinx refuses them.
absl::StatusOr<std::unique_ptr<Decoder>> CreatePocketsphinxDecoder(
    const PocketsphinxOptions& options);

}  // namespace moe::asr
