// The embedded text corpus that preset tokenizers are trained on (a few KB, mostly English, with a
// few lines of German, French, Spanish, Italian, Russian, Japanese, Chinese and code).
#pragma once

namespace moe::tokenizer {

const char* PresetCorpus();

}  // namespace moe::tokenizer
