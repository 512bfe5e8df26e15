#include "bench/engine/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/engine.h"
#include "common/kernels/bandwidth.h"
#include "common/model/checkpoint.h"
#include "common/model/make_model.h"

namespace moe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t Bytes(const kernels::WeightView& w) {
  return w.data == nullptr ? 0 : w.rows * common::RowBytes(w.dtype, w.cols);
}
int64_t Bytes(const model::ExpertWeights& e) { return Bytes(e.gate) + Bytes(e.up) + Bytes(e.down); }

// Weight bytes every token reads whatever its routing (embedding row included).
int64_t DenseBytesPerToken(const model::ModelWeights& w, const model::ModelConfig& c) {
  int64_t b = c.hidden_size * common::DTypeSize(w.embed_tokens.dtype) + Bytes(w.final_norm) +
              Bytes(w.lm_head);
  for (const model::LayerWeights& l : w.layers) {
    for (const kernels::WeightView* v :
         {&l.input_norm, &l.post_attn_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_bias,
          &l.k_bias, &l.v_bias, &l.o_bias, &l.q_norm, &l.k_norm, &l.router,
          &l.shared_expert_gate}) {
      b += Bytes(*v);
    }
    b += Bytes(l.shared_expert) + Bytes(l.dense_mlp);
  }
  return b;
}

// Best seconds of `passes` MatMuls of x[m, k] by `w` (after one warm-up call).
double TimeMatMul(const kernels::WeightView& w, int64_t m, kernels::Activations act,
                  kernels::ThreadPool* pool, int passes) {
  std::vector<float> x(static_cast<size_t>(m * w.cols)), y(static_cast<size_t>(m * w.rows));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& f : x) f = d(rng);
  kernels::MatMul(x.data(), m, w, y.data(), pool, nullptr, act);
  double best = 1e30;
  for (int i = 0; i < passes; ++i) {
    const auto s = Clock::now();
    kernels::MatMul(x.data(), m, w, y.data(), pool, nullptr, act);
    best = std::min(best, Seconds(s, Clock::now()));
  }
  return best;
}

int32_t ArgMax(const float* l, int64_t n) {
  return static_cast<int32_t>(std::max_element(l, l + n) - l);
}

// Sequences with private blocks, stepped together by the benchmark.
class Batch {
 public:
  Batch(engine::Engine* engine, int64_t num_seqs, int64_t prompt_len, int64_t capacity,
        int32_t* next_block, std::mt19937* rng)
      : engine_(engine), seqs_(static_cast<size_t>(num_seqs)) {
    const int64_t bs = engine->kv_cache().block_size();
    for (Seq& s : seqs_) {
      for (int64_t i = 0; i < prompt_len; ++i) {
        s.tokens.push_back(static_cast<int32_t>((*rng)() % engine->vocab_size()));
      }
      for (int64_t b = 0; b < (capacity + bs - 1) / bs; ++b) s.blocks.push_back((*next_block)++);
    }
  }
  // One step: every sequence's pending tokens (its prompt, or its last token).
  absl::Status Step(engine::StepOutput* out) {
    items_.clear();
    for (Seq& s : seqs_) {
      engine::StepItem it;
      it.token_ids = absl::MakeConstSpan(s.tokens).subspan(s.computed);
      it.start_pos = static_cast<int32_t>(s.computed);
      it.block_table = s.blocks;
      it.logits = engine::LogitsMode::kLast;
      items_.push_back(it);
    }
    RETURN_IF_ERROR(engine_->Step(items_, out));
    for (size_t i = 0; i < seqs_.size(); ++i) {
      seqs_[i].computed = static_cast<int64_t>(seqs_[i].tokens.size());
      seqs_[i].tokens.push_back(
          ArgMax(out->row(i, 0, engine_->vocab_size()), engine_->vocab_size()));
    }
    return absl::OkStatus();
  }

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int64_t computed = 0;
  };
  engine::Engine* engine_;
  std::vector<Seq> seqs_;
  std::vector<engine::StepItem> items_;
};

// The warm-TTFT step: a prefix already in the KV cache, then a short question.
constexpr int64_t kWarmPrefix = 2048;
constexpr int64_t kWarmNew = 32;

}  // namespace

absl::StatusOr<std::string> PresetCheckpoint(const SuiteOptions& options) {
  ASSIGN_OR_RETURN(model::Preset preset, model::ParsePreset(options.preset));
  model::MakeModelOptions mo;
  mo.preset = preset;
  if (options.arch == "mixtral") {
    mo.arch = model::Arch::kMixtral;
  } else {
    ASSIGN_OR_RETURN(mo.arch, model::ArchFromModelType(options.arch));
  }
  if (options.dtype == "f32") {
    mo.dtype = common::DType::kF32;
  } else if (options.dtype == "bf16") {
    mo.dtype = common::DType::kBF16;
  } else if (options.dtype == "f16") {
    mo.dtype = common::DType::kF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown dtype '", options.dtype, "'"));
  }
  const std::string cache = CacheDir(options);
  const std::string dir =
      absl::StrCat(cache, "/", options.preset, "-", options.arch, "-", options.dtype, "-v1");
  const std::string marker = dir + "/.complete";
  if (std::filesystem::exists(marker)) return dir;
  std::fprintf(stderr, "moe bench: generating the %s preset (%s, %s) into %s\n",
               options.preset.c_str(), options.arch.c_str(), options.dtype.c_str(), dir.c_str());
  int last_pct = -1;
  mo.progress = [&](int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (pct / 10 != last_pct / 10) std::fprintf(stderr, "  %d%%\n", pct);
    last_pct = pct;
  };
  RETURN_IF_ERROR(model::MakeModel(mo, dir));
  std::ofstream(marker) << "ok\n";
  return dir;
}

absl::StatusOr<BenchReport> RunEngineBench(const SuiteOptions& options) {
  BenchReport report("engine");
  std::string dir = options.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(options));
  }
  const int64_t prefill_len = 512;
  // The lengths of native llama.cpp's tools (bench/llamacpp/compare-native.sh): batch 1 as
  // `llama-bench -n 128` (128 tokens; here after a 16-token prompt), batches of 8 and 32 as
  // `llama-batched-bench -npp 16 -ntg 64` (a 16-token prompt each, then 64 tokens).
  const int64_t prompt_len = 16;
  auto decode_steps_of = [&](int64_t batch) -> int64_t {
    return options.quick ? 4 : batch == 1 ? 128 : 64;
  };
  const int64_t capacity = prompt_len + decode_steps_of(1) + 1;

  const auto t0 = Clock::now();
  model::LoadOptions lo;
  lo.prefetch = true;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> ckpt, model::Checkpoint::Open(dir, lo));
  engine::EngineOptions eo;
  eo.num_threads = options.threads;
  eo.block_size = 16;
  eo.max_batch_tokens = std::max<int64_t>(prefill_len, 32 * prompt_len);
  eo.kv_num_blocks = (prefill_len + 15) / 16 * 2 + (1 + 8 + 32) * ((capacity + 15) / 16) + 1 +
                     (kWarmPrefix + kWarmNew + 15) / 16;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                   engine::Engine::Create(ckpt->config(), ckpt->weights(), eo));
  const double load_s = Seconds(t0, Clock::now());
  const model::ModelConfig& c = ckpt->config();

  nlohmann::json params = {{"model", dir},
                           {"architecture", c.architecture},
                           {"dtype", std::string(common::DTypeName(c.dtype))},
                           {"threads", options.threads},
                           {"isa", kernels::ActiveIsa()}};
  auto with = [&](nlohmann::json extra) {
    nlohmann::json p = params;
    p.update(extra);
    return p;
  };
  report.Add({"model_load_s", load_s, "s", with({{"prefetch", true}}), std::nullopt});

  std::mt19937 rng(1);
  int32_t next_block = 0;
  engine::StepOutput out;

  // Prefill: a warm-up pass (faults the weights in), then the best of the timed passes.
  auto best_prefill_s = [&](engine::Engine* e) -> absl::StatusOr<double> {
    double best = 1e30;
    for (int pass = 0; pass < (options.quick ? 2 : 3); ++pass) {
      next_block = 0;
      Batch b(e, 1, prefill_len, prefill_len + 1, &next_block, &rng);
      const auto s = Clock::now();
      RETURN_IF_ERROR(b.Step(&out));
      if (pass > 0) best = std::min(best, Seconds(s, Clock::now()));
    }
    return best;
  };
  ASSIGN_OR_RETURN(const double best_prefill, best_prefill_s(engine.get()));
  report.Add({"prefill_tok_s", prefill_len / best_prefill, "tok/s",
              with({{"prompt_tokens", prefill_len}}), std::nullopt});

  // The opt-in bf16-activation mode (EngineOptions::activations) side by side, bf16 weights
  // only: the same prefill on a second engine, and MatMul GFLOP/s on an expert's gate
  // projection at m = 32 / 512 in both modes (one pool: the f32 engine's).
  if (c.dtype == common::DType::kBF16) {
    engine::EngineOptions bo = eo;
    bo.activations = kernels::Activations::kBf16;
    ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> bf16_engine,
                     engine::Engine::Create(c, ckpt->weights(), bo));
    ASSIGN_OR_RETURN(const double best_bf16, best_prefill_s(bf16_engine.get()));
    report.Add({"prefill_tok_s_bf16_act", prefill_len / best_bf16, "tok/s",
                with({{"prompt_tokens", prefill_len}, {"activations", "bf16"}}), std::nullopt});
    report.Add({"prefill_bf16_act_speedup", best_prefill / best_bf16, "ratio",
                with({{"prompt_tokens", prefill_len}, {"over", "prefill_tok_s"}}), std::nullopt});
    const kernels::WeightView* w = nullptr;
    for (const model::LayerWeights& l : ckpt->weights().layers) {
      if (!l.experts.empty() && l.experts[0].gate.data != nullptr) {
        w = &l.experts[0].gate;
        break;
      }
    }
    if (w == nullptr) w = &ckpt->weights().layers[0].q_proj;
    for (int64_t m : {32, 512}) {
      double secs[2];
      for (const kernels::Activations act :
           {kernels::Activations::kF32, kernels::Activations::kBf16}) {
        const double t = TimeMatMul(*w, m, act, engine->pool(), options.quick ? 3 : 20);
        secs[act == kernels::Activations::kBf16] = t;
        report.Add({absl::StrCat("matmul_gflops_m", m), 2.0 * m * w->rows * w->cols / t / 1e9,
                    "GFLOP/s",
                    with({{"m", m},
                          {"k", w->cols},
                          {"n", w->rows},
                          {"activations", kernels::ActivationsName(act)}}),
                    std::nullopt});
      }
      report.Add({absl::StrCat("matmul_bf16_act_speedup_m", m), secs[0] / secs[1], "ratio",
                  with({{"m", m}, {"k", w->cols}, {"n", w->rows}}), std::nullopt});
    }
  }

  // The warm-TTFT step (issue 18): kWarmNew tokens after a kWarmPrefix-token prefix already in
  // the cache (a prefix-cache hit), logits for the last token only. The same step again and again
  // (it rewrites the same K/V slots with the same values); best and median.
  {
    std::vector<int32_t> blocks;
    for (int64_t b = 0; b < (kWarmPrefix + kWarmNew + 15) / 16; ++b) blocks.push_back(next_block++);
    std::vector<int32_t> tokens(kWarmPrefix + kWarmNew);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
    for (int64_t p = 0; p < kWarmPrefix; p += 512) {  // the prefix, in max_batch_tokens chunks
      const engine::StepItem it{absl::MakeConstSpan(tokens).subspan(p, 512),
                                static_cast<int32_t>(p), blocks, engine::LogitsMode::kNone};
      RETURN_IF_ERROR(engine->Step({&it, 1}, &out));
    }
    const engine::StepItem warm{absl::MakeConstSpan(tokens).subspan(kWarmPrefix, kWarmNew),
                                static_cast<int32_t>(kWarmPrefix), blocks,
                                engine::LogitsMode::kLast};
    RETURN_IF_ERROR(engine->Step({&warm, 1}, &out));
    std::vector<double> secs;
    for (int i = 0; i < (options.quick ? 5 : 15); ++i) {
      const auto s = Clock::now();
      RETURN_IF_ERROR(engine->Step({&warm, 1}, &out));
      secs.push_back(Seconds(s, Clock::now()));
    }
    std::sort(secs.begin(), secs.end());
    report.Add({"prefill_warm_ms", secs[secs.size() / 2] * 1e3, "ms",
                with({{"prefix_tokens", kWarmPrefix},
                      {"new_tokens", kWarmNew},
                      {"best_ms", secs.front() * 1e3},
                      {"steps", secs.size()},
                      {"method", "median engine Step of the new tokens, prefix cached"}}),
                std::nullopt});
  }

  // The opt-in q8_0 weights (model::WeightsMode::kQ8_0, W8A8) on the same checkpoint: a second
  // load quantizing on the way, then its prefill and decode alternating with the checkpoint
  // engine's, so each ratio compares runs made side by side.
  std::unique_ptr<model::Checkpoint> q8_ckpt;
  std::unique_ptr<engine::Engine> q8_engine;
  const auto wflag = options.flags.find("weights");
  const std::string weights_flag = wflag == options.flags.end() ? "both" : wflag->second;
  if (weights_flag != "both" && weights_flag != "checkpoint") {
    return absl::InvalidArgumentError(
        absl::StrCat("--weights: '", weights_flag, "' is not both or checkpoint"));
  }
  if (weights_flag == "both") {
    const auto q0 = Clock::now();
    model::LoadOptions ql = lo;
    ql.weights = model::WeightsMode::kQ8_0;
    ql.quantize_threads = options.threads;
    ASSIGN_OR_RETURN(q8_ckpt, model::Checkpoint::Open(dir, ql));
    engine::EngineOptions qo = eo;
    qo.weights = model::WeightsMode::kQ8_0;
    ASSIGN_OR_RETURN(q8_engine, engine::Engine::Create(c, q8_ckpt->weights(), qo));
    report.Add({"model_load_s_q8_0", Seconds(q0, Clock::now()), "s",
                with({{"weights", "q8_0"}, {"quantize_threads", options.threads}}), std::nullopt});
    ASSIGN_OR_RETURN(const double best_q8, best_prefill_s(q8_engine.get()));
    report.Add({"prefill_tok_s_q8_0", prefill_len / best_q8, "tok/s",
                with({{"prompt_tokens", prefill_len}, {"weights", "q8_0"}}), std::nullopt});
    report.Add({"prefill_q8_0_speedup", best_prefill / best_q8, "ratio",
                with({{"prompt_tokens", prefill_len}, {"over", "prefill_tok_s"}}), std::nullopt});
  }

  // Decode of `batch` sequences on `e` (weights `w`): seconds of the timed steps, and the weight
  // bytes batch-1 steps read (dense part plus the experts the step routed to).
  struct Decoded {
    double secs = 0, bytes = 0;
  };
  auto decode = [&](engine::Engine* e, const model::ModelWeights& w,
                    int64_t batch) -> absl::StatusOr<Decoded> {
    const int64_t dense_bytes = DenseBytesPerToken(w, c);
    next_block = 0;  // each engine has its own cache, and no batch outlives its call
    Batch b(e, batch, prompt_len, capacity, &next_block, &rng);
    RETURN_IF_ERROR(b.Step(&out));  // prefill
    Decoded d;
    const int64_t decode_steps = decode_steps_of(batch);
    for (int64_t step = 0; step < decode_steps; ++step) {
      const auto s = Clock::now();
      RETURN_IF_ERROR(b.Step(&out));
      d.secs += Seconds(s, Clock::now());
      if (batch == 1) {
        d.bytes += static_cast<double>(dense_bytes);
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
          for (int64_t x = 0; x < c.num_experts; ++x) {
            if (out.expert_tokens[l * c.num_experts + x] > 0) {
              d.bytes += static_cast<double>(Bytes(w.layers[l].experts[x]));
            }
          }
        }
      }
    }
    return d;
  };
  const int64_t dense_bytes = DenseBytesPerToken(ckpt->weights(), c);
  double b1_bytes_per_s = 0, b1_q8_bytes_per_s = 0;
  const int rounds = q8_engine != nullptr ? 2 : 1;
  for (int64_t batch : {1, 8, 32}) {
    // Each engine's best round (they alternate), so a noisy moment hurts neither alone.
    Decoded best, best_q8;
    for (int round = 0; round < rounds; ++round) {
      ASSIGN_OR_RETURN(Decoded d, decode(engine.get(), ckpt->weights(), batch));
      if (best.secs == 0 || d.secs < best.secs) best = d;
      if (q8_engine != nullptr) {
        ASSIGN_OR_RETURN(Decoded q, decode(q8_engine.get(), q8_ckpt->weights(), batch));
        if (best_q8.secs == 0 || q.secs < best_q8.secs) best_q8 = q;
      }
    }
    const int64_t decode_steps = decode_steps_of(batch);
    if (batch == 1) {
      b1_bytes_per_s = best.bytes / best.secs;
      if (q8_engine != nullptr) b1_q8_bytes_per_s = best_q8.bytes / best_q8.secs;
    }
    const nlohmann::json p =
        with({{"batch", batch}, {"prompt_tokens", prompt_len}, {"decode_steps", decode_steps}});
    report.Add({absl::StrCat("decode_tok_s_b", batch), batch * decode_steps / best.secs, "tok/s", p,
                std::nullopt});
    if (q8_engine != nullptr) {
      nlohmann::json pq = p;
      pq["weights"] = "q8_0";
      if (batch == 1) pq["weight_bytes_per_s"] = best_q8.bytes / best_q8.secs;
      report.Add({absl::StrCat("decode_tok_s_b", batch, "_q8_0"),
                  batch * decode_steps / best_q8.secs, "tok/s", pq, std::nullopt});
      report.Add({absl::StrCat("decode_q8_0_speedup_b", batch), best.secs / best_q8.secs, "ratio",
                  with({{"batch", batch}, {"over", absl::StrCat("decode_tok_s_b", batch)}}),
                  std::nullopt});
    }
  }

  // Before the bandwidth probe, whose 1 GiB buffer is not the engine's memory.
  const int64_t peak_rss = PeakRssBytes();
  // The roof: the best sustained read of several buffer sizes with the engine's own threads and
  // a dynamic split (kernels/bandwidth.h), so a loaded machine does not flatter the ratio.
  nlohmann::json probe = nlohmann::json::array();
  double stream_bw = 0;
  for (const kernels::ReadBandwidth& r :
       kernels::MeasureReadBandwidth(engine->pool(), kernels::DefaultReadProbeSizes())) {
    probe.push_back({{"bytes", r.bytes}, {"bytes_per_s", r.bytes_per_s}});
    stream_bw = std::max(stream_bw, r.bytes_per_s);
  }
  report.Add({"decode_bandwidth_efficiency", b1_bytes_per_s / stream_bw, "ratio",
              with({{"weight_bytes_per_s", b1_bytes_per_s},
                    {"stream_read_bytes_per_s", stream_bw},
                    {"read_probe", probe},
                    {"dense_bytes_per_token", dense_bytes}}),
              std::nullopt});
  if (q8_engine != nullptr) {
    report.Add({"decode_bandwidth_efficiency_q8_0", b1_q8_bytes_per_s / stream_bw, "ratio",
                with({{"weight_bytes_per_s", b1_q8_bytes_per_s},
                      {"stream_read_bytes_per_s", stream_bw},
                      {"weights", "q8_0"}}),
                std::nullopt});
  }
  report.Add({"peak_rss_bytes", static_cast<double>(peak_rss), "bytes", params, std::nullopt});
  return report;
}

const std::vector<std::string> kEngineFlags = {"weights"};  // both (default) | checkpoint
MOE_REGISTER_BENCH_SUITE_EX("engine",
                            "prefill/decode speed of the embedded engine (checkpoint weights and "
                            "q8_0 side by side)",
                            RunEngineBench, kEngineFlags, 600, 180);

}  // namespace moe::bench
