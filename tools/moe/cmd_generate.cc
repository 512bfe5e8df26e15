// `moe generate`: runs the embedded engine on one prompt (DESIGN.md §6).
//
//   moe generate --model DIR (--prompt TEXT [--chat] | --prompt-ids 1,2,3) [--max-tokens N]
//                [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//                [--repetition-penalty R] [--frequency-penalty F] [--presence-penalty P]
//                [--stop-token-ids 1,2] [--ignore-eos] [--threads N] [--block-size B]
//                [--activations f32|bf16] [--weights checkpoint|q8_0]
//                [--json [--logits last|all] [--logits-out FILE]]
//
// --activations bf16: the opt-in bf16-activation numerics (EngineOptions::activations; bf16
// weights only, fastest on AVX-512 BF16 CPUs). Default f32.
// --weights q8_0: the projections quantized to q8_0 on load, W8A8 (model::WeightsMode, kernels.h
// INT8 WEIGHTS). Default checkpoint (as stored).
//
// Without --json the generated text streams to stdout as tokens arrive. With --json one line:
//   {"prompt_ids":[...],"output_ids":[...],"text":"...","finish_reason":"stop|length"}
// and with --logits also "logits": after the last prompt position a flat [vocab] array, after
// every prompt position ("all") an array of [vocab] arrays, floats printed with %.9g (round-trip
// exact f32). --logits-out FILE writes the same logits as raw little-endian f32 [positions, vocab]
// instead of the JSON field. Sampling defaults to greedy (--temperature 0).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/chat_template/chat_template.h"
#include "common/chat_template/render_chat.h"
#include "common/engine/engine.h"
#include "common/engine/generator.h"
#include "common/generation/finish_reason.h"
#include "common/generation/sampling_params.h"
#include "common/model/checkpoint.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

constexpr int kUsage = 2;
constexpr int kFailure = 1;

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "moe generate: %s\n", msg.c_str());
  return code;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", std::string(part), "' is not a token id"));
    }
    ids.push_back(id);
  }
  return ids;
}

void AppendFloat(std::string* out, float f) {
  if (!std::isfinite(f)) {
    out->append("null");
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(f));
  out->append(buf);
}

void AppendIds(std::string* out, const std::vector<int32_t>& ids) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, ids[i]);
  }
  out->push_back(']');
}

struct Flags {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  bool chat = false;
  bool json = false;
  std::string logits;  // "", "last", "all"
  std::string logits_out;
  int64_t threads = 0;
  int64_t block_size = 16;
  kernels::Activations activations = kernels::Activations::kF32;
  model::WeightsMode weights = model::WeightsMode::kCheckpoint;
  generation::SamplingParams sampling;
};

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"json", "chat", "ignore-eos"}));
  RETURN_IF_ERROR(args.CheckKnown({"model",
                                   "prompt",
                                   "prompt-ids",
                                   "chat",
                                   "max-tokens",
                                   "temperature",
                                   "top-p",
                                   "top-k",
                                   "min-p",
                                   "seed",
                                   "repetition-penalty",
                                   "frequency-penalty",
                                   "presence-penalty",
                                   "stop-token-ids",
                                   "ignore-eos",
                                   "threads",
                                   "block-size",
                                   "activations",
                                   "weights",
                                   "json",
                                   "logits",
                                   "logits-out"}));
  if (!args.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args.positional()[0], "'"));
  }
  Flags f;
  f.model = args.GetOr("model", "");
  if (f.model.empty()) return absl::InvalidArgumentError("--model DIR is required");
  f.prompt = args.Get("prompt");
  f.prompt_ids = args.Get("prompt-ids");
  if (f.prompt.has_value() == f.prompt_ids.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
  }
  f.chat = args.Has("chat");
  if (f.chat && !f.prompt) return absl::InvalidArgumentError("--chat needs --prompt");
  f.json = args.Has("json");
  if (const auto act = args.Get("activations"); act.has_value()) {
    if (*act == "bf16") {
      f.activations = kernels::Activations::kBf16;
    } else if (*act != "f32") {
      return absl::InvalidArgumentError(
          absl::StrCat("--activations: '", *act, "' is not f32 or bf16"));
    }
  }
  if (const auto w = args.Get("weights"); w.has_value()) {
    if (*w == "q8_0") {
      f.weights = model::WeightsMode::kQ8_0;
    } else if (*w != "checkpoint") {
      return absl::InvalidArgumentError(
          absl::StrCat("--weights: '", *w, "' is not checkpoint or q8_0"));
    }
  }
  f.logits = args.GetOr("logits", "");
  f.logits_out = args.GetOr("logits-out", "");
  if (!f.logits.empty() && f.logits != "last" && f.logits != "all") {
    return absl::InvalidArgumentError(
        absl::StrCat("--logits must be 'last' or 'all', got '", f.logits, "'"));
  }
  if (!f.logits_out.empty() && f.logits.empty()) f.logits = "last";
  if (!f.logits.empty() && !f.json && f.logits_out.empty()) {
    return absl::InvalidArgumentError("--logits needs --json or --logits-out");
  }
  ASSIGN_OR_RETURN(f.threads, args.GetInt("threads", 0));
  ASSIGN_OR_RETURN(f.block_size, args.GetInt("block-size", 16));
  generation::SamplingParams& s = f.sampling;
  ASSIGN_OR_RETURN(int64_t max_tokens, args.GetInt("max-tokens", 16));
  if (max_tokens < 0 || max_tokens > INT32_MAX) {
    return absl::InvalidArgumentError("--max-tokens must be >= 0");
  }
  s.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(double temperature, args.GetDouble("temperature", 0.0));
  ASSIGN_OR_RETURN(double top_p, args.GetDouble("top-p", 1.0));
  ASSIGN_OR_RETURN(int64_t top_k, args.GetInt("top-k", 0));
  ASSIGN_OR_RETURN(double min_p, args.GetDouble("min-p", 0.0));
  ASSIGN_OR_RETURN(double rep, args.GetDouble("repetition-penalty", 1.0));
  ASSIGN_OR_RETURN(double freq, args.GetDouble("frequency-penalty", 0.0));
  ASSIGN_OR_RETURN(double pres, args.GetDouble("presence-penalty", 0.0));
  s.temperature = static_cast<float>(temperature);
  s.top_p = static_cast<float>(top_p);
  s.top_k = static_cast<int32_t>(std::clamp<int64_t>(top_k, -1, INT32_MAX));
  s.min_p = static_cast<float>(min_p);
  s.repetition_penalty = static_cast<float>(rep);
  s.frequency_penalty = static_cast<float>(freq);
  s.presence_penalty = static_cast<float>(pres);
  if (args.Has("seed")) {
    ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 0));
    s.seed = static_cast<uint64_t>(seed);
  }
  if (auto stops = args.Get("stop-token-ids")) {
    ASSIGN_OR_RETURN(s.stop_token_ids, ParseIds("stop-token-ids", *stops));
  }
  s.ignore_eos = args.Has("ignore-eos");
  return f;
}

// The prompt wrapped in the tokenizer's chat template as one user message, with the generation
// prompt, tokenized without extra special tokens (as HF apply_chat_template does).
absl::StatusOr<std::vector<int32_t>> RenderChatPrompt(const tokenizer::Tokenizer& tok,
                                                      const std::string& prompt) {
  if (tok.chat_template().empty()) {
    return absl::FailedPreconditionError("--chat: the model's tokenizer has no chat_template");
  }
  ASSIGN_OR_RETURN(
      chat_template::ChatTemplate tmpl,
      chat_template::ChatTemplate::Parse(tok.chat_template(), common::SystemClock::Get()));
  ASSIGN_OR_RETURN(
      std::string text,
      chat_template::RenderChat(
          tmpl, {.messages = nlohmann::json::array({{{"role", "user"}, {"content", prompt}}})},
          {tok.bos_token(), tok.eos_token()}));
  return tok.Encode(text, /*add_special_tokens=*/false);
}

std::string JsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int RunGenerate(const Args& /*parsed*/, const std::vector<std::string>& argv) {
  auto flags = ParseFlags(argv);
  if (!flags.ok()) return Fail(kUsage, std::string(flags.status().message()));
  Flags& f = *flags;

  std::vector<int32_t> prompt_ids;
  if (f.prompt_ids) {
    auto ids = ParseIds("prompt-ids", *f.prompt_ids);
    if (!ids.ok()) return Fail(kUsage, std::string(ids.status().message()));
    prompt_ids = std::move(*ids);
  }

  model::LoadOptions load;
  load.weights = f.weights;
  auto ckpt = model::Checkpoint::Open(f.model, load);
  if (!ckpt.ok()) return Fail(kFailure, std::string(ckpt.status().message()));
  const model::ModelConfig& config = (*ckpt)->config();
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return Fail(kUsage, absl::StrCat("prompt token id ", id, " outside the vocabulary [0, ",
                                       config.vocab_size, ")"));
    }
  }

  // The tokenizer is needed for --prompt and for text output; --prompt-ids --json without a
  // tokenizer.json still works (text is then empty).
  std::unique_ptr<tokenizer::Tokenizer> tok;
  {
    auto t = tokenizer::Tokenizer::FromFile(f.model);
    if (t.ok()) {
      tok = std::move(*t);
    } else if (f.prompt || !f.json) {
      return Fail(kFailure, std::string(t.status().message()));
    }
  }

  if (f.chat) {
    auto ids = RenderChatPrompt(*tok, *f.prompt);
    if (!ids.ok()) return Fail(kFailure, std::string(ids.status().message()));
    prompt_ids = std::move(*ids);
  } else if (f.prompt) {
    prompt_ids = tok->Encode(*f.prompt, /*add_special_tokens=*/true);
  }
  if (prompt_ids.empty()) return Fail(kUsage, "the prompt has no tokens");
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return Fail(kUsage, absl::StrCat("prompt token id ", id, " outside the vocabulary [0, ",
                                       config.vocab_size, ")"));
    }
  }

  engine::EngineOptions eopts;
  eopts.num_threads = f.threads > 0 ? static_cast<int>(f.threads)
                                    : std::max(1u, std::thread::hardware_concurrency());
  eopts.block_size = f.block_size;
  eopts.activations = f.activations;
  eopts.weights = f.weights;
  int64_t total = static_cast<int64_t>(prompt_ids.size()) + f.sampling.max_tokens;
  if (config.max_position_embeddings > 0) {
    total = std::min<int64_t>(total, config.max_position_embeddings);
  }
  eopts.kv_num_blocks =
      std::max<int64_t>(1, (total + f.block_size - 1) / std::max<int64_t>(1, f.block_size));
  eopts.max_batch_tokens = 512;
  auto engine = engine::Engine::Create(config, (*ckpt)->weights(), eopts);
  if (!engine.ok()) return Fail(kFailure, std::string(engine.status().message()));

  engine::GeneratorOptions gopts;
  gopts.prefill_chunk = eopts.max_batch_tokens;
  if (tok != nullptr && !tok->eos_ids().empty()) gopts.eos_token_ids = tok->eos_ids();
  engine::Generator generator(engine->get(), gopts);

  engine::GenerationRequest req;
  req.prompt_ids = prompt_ids;
  req.sampling = f.sampling;
  req.prompt_logits = f.logits == "all"    ? engine::LogitsMode::kAll
                      : f.logits == "last" ? engine::LogitsMode::kLast
                                           : engine::LogitsMode::kNone;

  std::unique_ptr<tokenizer::IncrementalDetokenizer> detok;
  engine::Generator::TokenCallback on_token;
  if (!f.json) {
    detok = std::make_unique<tokenizer::IncrementalDetokenizer>(*tok, /*skip_special_tokens=*/true);
    on_token = [&](size_t, const engine::SampledToken& t) {
      std::string delta = detok->Add(t.token_id);
      if (!delta.empty()) {
        std::fwrite(delta.data(), 1, delta.size(), stdout);
        std::fflush(stdout);
      }
    };
  }
  auto results = generator.Generate({&req, 1}, on_token);
  if (!results.ok()) return Fail(kFailure, std::string(results.status().message()));
  const engine::GenerationResult& res = (*results)[0];

  const int64_t vocab = config.vocab_size;
  if (!f.logits_out.empty()) {
    std::ofstream out(f.logits_out, std::ios::binary | std::ios::trunc);
    // f32 in memory is little-endian on every platform this project builds for (x86-64).
    out.write(reinterpret_cast<const char*>(res.prompt_logits.data()),
              static_cast<std::streamsize>(res.prompt_logits.size() * sizeof(float)));
    if (!out) return Fail(kFailure, absl::StrCat("cannot write ", f.logits_out));
  }
  if (!f.json) {
    std::string rest = detok->Finish();
    rest.push_back('\n');
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    return 0;
  }
  std::string line = "{\"prompt_ids\":";
  AppendIds(&line, prompt_ids);
  line += ",\"output_ids\":";
  AppendIds(&line, res.output_ids);
  line += ",\"text\":";
  line += JsonString(tok ? tok->Decode(res.output_ids, /*skip_special_tokens=*/true) : "");
  line += ",\"finish_reason\":\"";
  line += generation::FinishReasonName(res.finish_reason);
  line += "\"";
  if (!f.logits.empty() && f.logits_out.empty()) {
    line += ",\"logits\":";
    const int64_t rows = static_cast<int64_t>(res.prompt_logits.size()) / vocab;
    const bool nested = f.logits == "all";
    if (nested) line += "[";
    for (int64_t r = 0; r < rows; ++r) {
      if (r > 0) line += ",";
      line += "[";
      for (int64_t v = 0; v < vocab; ++v) {
        if (v > 0) line += ",";
        AppendFloat(&line, res.prompt_logits[r * vocab + v]);
      }
      line += "]";
    }
    if (nested) line += "]";
  }
  line += "}\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace

MOE_REGISTER_COMMAND("generate", "runs the embedded engine on one prompt", RunGenerate);

}  // namespace moe::cli
