#include "common/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/ffn.h"
#include "common/engine/local_expert_executor.h"

namespace moe::engine {
namespace {

using kernels::WeightView;
using model::Arch;

absl::Status CheckView(const WeightView& w, int64_t rows, int64_t cols, const std::string& name) {
  if (w.data == nullptr) return absl::InvalidArgumentError(absl::StrCat("engine: missing ", name));
  if (w.rows * w.cols != rows * cols || (cols > 1 && rows > 1 && w.cols != cols)) {
    return absl::InvalidArgumentError(absl::StrCat("engine: ", name, " is [", w.rows, ", ", w.cols,
                                                   "], want [", rows, ", ", cols, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFfn(const model::ExpertWeights& w, int64_t hidden, int64_t inter,
                      const std::string& name) {
  if (absl::Status s = CheckView(w.gate, inter, hidden, name + ".gate"); !s.ok()) return s;
  if (absl::Status s = CheckView(w.up, inter, hidden, name + ".up"); !s.ok()) return s;
  return CheckView(w.down, hidden, inter, name + ".down");
}

template <typename T>
void EnsureSize(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

// Everything a step needs besides its inputs. Constant after Create(): the borrowed model, the
// options, the pool, the KV storage and the executor; the rest is scratch, sized for
// max_batch_tokens at Create() and reused by every step (engine.h: one calling thread).
class Engine::Impl {
 public:
  Impl(const model::ModelConfig& config, const model::ModelWeights& weights,
       const EngineOptions& options)
      : config_(config), weights_(weights), options_(options) {}

  // Allocates the KV cache, the pool, the executor (when not given) and the scratch.
  absl::Status Init(ExpertExecutor* experts);
  absl::Status CheckWeights() const;
  absl::Status Step(absl::Span<const StepItem> items, StepOutput* out);

  const model::ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  KvCache& kv_cache() { return *kv_; }
  kernels::ThreadPool* pool() { return pool_.get(); }

 private:
  // A micro-batch: rows [row0, row0 + t) of the step. Every per-token buffer below is indexed by
  // the step's row (packed expert buffers by row * k), so micro-batches share them without
  // overlapping; only the expert call in flight is per micro-batch.
  struct MicroBatch {
    int64_t row0 = 0;
    int64_t t = 0;
    std::vector<int64_t> counts;  // [num_experts] this micro-batch's rows per expert
    std::vector<int64_t> fill;    // [num_experts] counting-sort cursors
    ExpertCall call;
    ExpertCallHandle handle = 0;
    bool pending = false;  // `handle` submitted, not yet awaited
  };

  absl::Status ValidateItems(absl::Span<const StepItem> items, int64_t* num_tokens) const;
  // Splits the step's items into micro-batches (one, or two balanced by tokens).
  void PlanMicroBatches(absl::Span<const StepItem> items, int64_t t);
  // Layer `l` up to its FFN: input norm, attention, residual, post-attention norm; then the FFN:
  // a dense MLP runs now; an MoE layer's gate runs, its routed experts are submitted and its
  // shared expert runs while they are away. FinishFfn awaits them and adds the FFN output to
  // the residual stream.
  absl::Status StartLayer(MicroBatch& mb, int64_t l, StepOutput* out);
  absl::Status FinishFfn(MicroBatch& mb, int64_t l);
  void Attention(const MicroBatch& mb, int64_t layer_idx);
  absl::Status SubmitExperts(MicroBatch& mb, int64_t layer_idx, StepOutput* out);
  absl::Status CombineExperts(MicroBatch& mb, int64_t layer_idx);
  // Awaits every call still in flight (after an error: their buffers must outlive them).
  void DrainPending();
  void ComputeLogits(absl::Span<const StepItem> items, int64_t t, StepOutput* out);

  // Constant after Init().
  const model::ModelConfig& config_;
  const model::ModelWeights& weights_;
  const EngineOptions options_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<ExpertExecutor> owned_experts_;
  ExpertExecutor* experts_ = nullptr;
  float attn_scale_ = 1.0f;

  // Scratch, sized for max_batch_tokens at Init() and reused by every step.
  std::vector<int32_t> positions_;               // [T]
  std::vector<kernels::AttentionToken> tokens_;  // [T]
  std::vector<float> x_;                         // [T, hidden] residual stream
  std::vector<float> h_;                         // [T, hidden] normed input of a sub-block
  std::vector<float> q_, k_, v_;                 // [T, heads*head_dim], [T, kv_heads*head_dim] x2
  std::vector<float> attn_;                      // [T, heads*head_dim]
  std::vector<float> proj_;                      // [T, hidden] output of o_proj / FFN
  std::vector<float> gate_logits_;               // [T, num_experts]
  std::vector<int32_t> topk_ids_;                // [T, k]
  std::vector<float> topk_weights_;              // [T, k]
  std::vector<int32_t> slot_of_;      // [T, k] row of (token, j) in the packed expert buffers
  std::vector<float> packed_in_;      // [T*k, hidden] a micro-batch's rows grouped by expert
  std::vector<float> packed_out_;     // [T*k, hidden]
  std::vector<float> shared_gate_;    // [T]
  std::vector<uint8_t> row_failed_;   // [T] a token routed to an unavailable expert this step
  std::vector<int32_t> unavailable_;  // expert ids the executor could not run (one layer)
  std::string failure_;               // what the first unavailable expert was, for item_status
  std::vector<float> logit_rows_;     // [rows, hidden] normed final hidden states of wanted rows
  FfnScratch ffn_scratch_;            // dense MLP / shared expert (one micro-batch at a time)
  MicroBatch micro_[2];
  int num_micro_ = 1;
};

absl::Status EngineOptions::Validate() const {
  if (num_threads < 1 || num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: num_threads ", num_threads, " out of range [1, 1024]"));
  }
  if (block_size < 1 || block_size > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: block_size ", block_size, " out of range [1, 4096]"));
  }
  if (max_batch_tokens < 1 || max_batch_tokens > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: max_batch_tokens ", max_batch_tokens, " out of range [1, 1048576]"));
  }
  if (micro_batches < 1 || micro_batches > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: micro_batches ", micro_batches, " out of range [1, 2]"));
  }
  if (micro_batch_min_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: micro_batch_min_tokens ", micro_batch_min_tokens, " must be >= 2"));
  }
  if (kv_num_blocks < 0 || (kv_num_blocks == 0 && kv_cache_bytes <= 0)) {
    return absl::InvalidArgumentError(
        "engine: need kv_num_blocks > 0 or a positive kv_cache_bytes");
  }
  return absl::OkStatus();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::ModelConfig& config,
                                                       const model::ModelWeights& weights,
                                                       const EngineOptions& options,
                                                       ExpertExecutor* experts) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(config, weights, options);
  if (absl::Status s = impl->CheckWeights(); !s.ok()) return s;
  if (absl::Status s = impl->Init(experts); !s.ok()) return s;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

absl::Status Engine::Step(absl::Span<const StepItem> items, StepOutput* out) {
  return impl_->Step(items, out);
}

const model::ModelConfig& Engine::config() const { return impl_->config(); }
const EngineOptions& Engine::options() const { return impl_->options(); }
int64_t Engine::vocab_size() const { return impl_->config().vocab_size; }
KvCache& Engine::kv_cache() { return impl_->kv_cache(); }
kernels::ThreadPool* Engine::pool() { return impl_->pool(); }

absl::Status Engine::Impl::Init(ExpertExecutor* experts) {
  const model::ModelConfig& config = config_;
  const EngineOptions& options = options_;
  KvCacheOptions kv_opts;
  kv_opts.num_layers = config.num_hidden_layers;
  kv_opts.num_kv_heads = config.num_key_value_heads;
  kv_opts.head_dim = config.head_dim;
  kv_opts.block_size = options.block_size;
  kv_opts.budget_bytes = options.kv_cache_bytes;
  kv_opts.num_blocks = options.kv_num_blocks;
  auto kv = KvCache::Create(kv_opts);
  if (!kv.ok()) return kv.status();
  kv_ = std::move(*kv);

  pool_ = std::make_unique<kernels::ThreadPool>(options.num_threads);
  if (experts == nullptr) {
    owned_experts_ =
        std::make_unique<LocalExpertExecutor>(&weights_, pool_.get(), options.activations);
    experts_ = owned_experts_.get();
  } else {
    experts_ = experts;
  }
  attn_scale_ = 1.0f / std::sqrt(static_cast<float>(config.head_dim));

  const int64_t t = options.max_batch_tokens;
  const int64_t hidden = config.hidden_size;
  const int64_t qd = config.num_attention_heads * config.head_dim;
  const int64_t kvd = config.num_key_value_heads * config.head_dim;
  const int64_t k = std::max<int64_t>(config.num_experts_per_tok, 1);
  positions_.resize(t);
  tokens_.resize(t);
  x_.resize(t * hidden);
  h_.resize(t * hidden);
  q_.resize(t * qd);
  k_.resize(t * kvd);
  v_.resize(t * kvd);
  attn_.resize(t * qd);
  proj_.resize(t * hidden);
  if (config.num_experts > 0) {
    gate_logits_.resize(t * config.num_experts);
    topk_ids_.resize(t * k);
    topk_weights_.resize(t * k);
    slot_of_.resize(t * k);
    packed_in_.resize(t * k * hidden);
    packed_out_.resize(t * k * hidden);
    for (MicroBatch& mb : micro_) {
      mb.counts.resize(config.num_experts);
      mb.fill.resize(config.num_experts);
      mb.call.batches.reserve(config.num_experts);
    }
  }
  shared_gate_.resize(t);
  return absl::OkStatus();
}

absl::Status Engine::Impl::CheckWeights() const {
  const model::ModelConfig& c = config_;
  // The weights' numerics must be the ones the engine tags its calls with: any q8_0 view means
  // they were loaded in kQ8_0 mode, and that mode quantizes every dense projection it can.
  bool any_q8 = false, dense_unquantized = false;
  for (const model::LayerWeights& l : weights_.layers) {
    for (const model::WeightView* v : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj}) {
      if (v->data == nullptr) continue;
      if (v->dtype == common::DType::kQ8_0) {
        any_q8 = true;
      } else if (v->cols % common::kQ8BlockSize == 0) {
        dense_unquantized = true;
      }
    }
  }
  if (options_.weights == model::WeightsMode::kQ8_0 && dense_unquantized) {
    return absl::InvalidArgumentError(
        "engine: weights q8_0, but the checkpoint's projections were loaded as stored (load "
        "them with model::LoadOptions::weights = kQ8_0)");
  }
  if (options_.weights == model::WeightsMode::kCheckpoint && any_q8) {
    return absl::InvalidArgumentError(
        "engine: the weights were quantized to q8_0 on load; set EngineOptions::weights to q8_0");
  }
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError("engine: config has non-positive or inconsistent sizes");
  }
  if (c.num_experts > 0 && (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: num_experts_per_tok ", c.num_experts_per_tok, " not in [1, ", c.num_experts, "]"));
  }
  if (c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings) {
    // PagedAttention attends the whole prefix; a window shorter than the context would differ.
    return absl::UnimplementedError(absl::StrCat("engine: sliding_window ", c.sliding_window,
                                                 " shorter than the context is not supported"));
  }
  const int64_t hidden = c.hidden_size;
  const int64_t qd = c.num_attention_heads * c.head_dim;
  const int64_t kvd = c.num_key_value_heads * c.head_dim;
  if (absl::Status s = CheckView(weights_.embed_tokens, c.vocab_size, hidden, "embed_tokens");
      !s.ok())
    return s;
  if (absl::Status s = CheckView(weights_.lm_head, c.vocab_size, hidden, "lm_head"); !s.ok())
    return s;
  if (absl::Status s = CheckView(weights_.final_norm, 1, hidden, "norm"); !s.ok()) return s;
  if (static_cast<int64_t>(weights_.layers.size()) != c.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: ", weights_.layers.size(), " layers loaded, config has ", c.num_hidden_layers));
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const model::LayerWeights& w = weights_.layers[l];
    const std::string p = absl::StrCat("layers.", l, ".");
    const std::pair<const WeightView*, std::pair<int64_t, int64_t>> need[] = {
        {&w.input_norm, {1, hidden}}, {&w.post_attn_norm, {1, hidden}}, {&w.q_proj, {qd, hidden}},
        {&w.k_proj, {kvd, hidden}},   {&w.v_proj, {kvd, hidden}},       {&w.o_proj, {hidden, qd}}};
    const char* names[] = {
        "input_layernorm", "post_attention_layernorm", "q_proj", "k_proj", "v_proj", "o_proj"};
    for (size_t i = 0; i < std::size(names); ++i) {
      if (absl::Status s =
              CheckView(*need[i].first, need[i].second.first, need[i].second.second, p + names[i]);
          !s.ok())
        return s;
    }
    if (c.attention_bias) {
      if (absl::Status s = CheckView(w.q_bias, 1, qd, p + "q_proj.bias"); !s.ok()) return s;
      if (absl::Status s = CheckView(w.k_bias, 1, kvd, p + "k_proj.bias"); !s.ok()) return s;
      if (absl::Status s = CheckView(w.v_bias, 1, kvd, p + "v_proj.bias"); !s.ok()) return s;
    }
    if (c.o_proj_bias) {
      if (absl::Status s = CheckView(w.o_bias, 1, hidden, p + "o_proj.bias"); !s.ok()) return s;
    }
    if (c.qk_norm) {
      const int64_t qn = c.qk_norm_per_head ? c.head_dim : qd;
      const int64_t kn = c.qk_norm_per_head ? c.head_dim : kvd;
      if (absl::Status s = CheckView(w.q_norm, 1, qn, p + "q_norm"); !s.ok()) return s;
      if (absl::Status s = CheckView(w.k_norm, 1, kn, p + "k_norm"); !s.ok()) return s;
    }
    if (c.IsMoeLayer(l)) {
      if (absl::Status s = CheckView(w.router, c.num_experts, hidden, p + "gate"); !s.ok())
        return s;
      // Experts may live elsewhere (a remote executor); only the dense parts are required here.
      if (c.shared_expert_intermediate_size > 0) {
        if (absl::Status s = CheckFfn(w.shared_expert, hidden, c.shared_expert_intermediate_size,
                                      p + "shared_expert");
            !s.ok())
          return s;
        if (absl::Status s = CheckView(w.shared_expert_gate, 1, hidden, p + "shared_expert_gate");
            !s.ok())
          return s;
      }
    } else {
      if (absl::Status s = CheckFfn(w.dense_mlp, hidden, c.intermediate_size, p + "mlp"); !s.ok())
        return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::ValidateItems(absl::Span<const StepItem> items,
                                         int64_t* num_tokens) const {
  int64_t total = 0;
  const int64_t bs = kv_->block_size();
  const int64_t num_blocks = kv_->num_blocks();
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    const int64_t n = static_cast<int64_t>(it.token_ids.size());
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("step item ", i, ": no tokens"));
    if (it.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("step item ", i, ": negative start_pos"));
    }
    const int64_t last = it.start_pos + n - 1;
    if (last >= INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("step item ", i, ": position overflow"));
    }
    const int64_t blocks_needed = last / bs + 1;
    if (static_cast<int64_t>(it.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("step item ", i, ": block table has ", it.block_table.size(),
                       " blocks, positions up to ", last, " need ", blocks_needed));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (it.block_table[b] < 0 || it.block_table[b] >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step item ", i, ": block id ", it.block_table[b], " outside [0, ", num_blocks, ")"));
      }
    }
    for (int32_t tok : it.token_ids) {
      if (tok < 0 || tok >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("step item ", i, ": token id ", tok,
                                                       " outside the vocabulary [0, ",
                                                       config_.vocab_size, ")"));
      }
    }
    total += n;
  }
  if (total > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", total, " tokens, more than max_batch_tokens ", options_.max_batch_tokens));
  }
  *num_tokens = total;
  return absl::OkStatus();
}

absl::Status Engine::Impl::Step(absl::Span<const StepItem> items, StepOutput* out) {
  int64_t t = 0;
  if (absl::Status s = ValidateItems(items, &t); !s.ok()) return s;
  const int64_t hidden = config_.hidden_size;
  const int64_t esize = common::DTypeSize(weights_.embed_tokens.dtype);
  const auto* embed = static_cast<const uint8_t*>(weights_.embed_tokens.data);

  // Flatten the items into token rows; embed.
  int64_t row = 0;
  for (const StepItem& it : items) {
    for (size_t j = 0; j < it.token_ids.size(); ++j, ++row) {
      positions_[row] = it.start_pos + static_cast<int32_t>(j);
      tokens_[row] = {positions_[row], it.block_table.data()};
      kernels::ConvertToF32(embed + static_cast<int64_t>(it.token_ids[j]) * hidden * esize,
                            weights_.embed_tokens.dtype, hidden, x_.data() + row * hidden);
    }
  }

  row_failed_.assign(static_cast<size_t>(t), 0);
  failure_.clear();
  out->expert_tokens.assign(
      static_cast<size_t>(config_.num_hidden_layers * std::max<int64_t>(config_.num_experts, 0)),
      0);
  PlanMicroBatches(items, t);
  // Ping-pong: layer l of micro-batch 1 (attention, gate, submit) runs while the experts of
  // micro-batch 0's layer l are away, and micro-batch 0's layer l+1 while micro-batch 1's are.
  // With one micro-batch this is the plain layer-by-layer order.
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    for (int m = 0; m < num_micro_; ++m) {
      absl::Status s = l > 0 ? FinishFfn(micro_[m], l - 1) : absl::OkStatus();
      if (s.ok()) s = StartLayer(micro_[m], l, out);
      if (!s.ok()) {
        DrainPending();
        return s;
      }
    }
  }
  for (int m = 0; m < num_micro_; ++m) {
    if (absl::Status s = FinishFfn(micro_[m], config_.num_hidden_layers - 1); !s.ok()) {
      DrainPending();
      return s;
    }
  }
  ComputeLogits(items, t, out);
  out->item_status.assign(items.size(), absl::OkStatus());
  if (!failure_.empty()) {
    int64_t first = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t n = static_cast<int64_t>(items[i].token_ids.size());
      for (int64_t r = first; r < first + n; ++r) {
        if (row_failed_[r]) {
          out->item_status[i] = absl::UnavailableError(failure_);
          break;
        }
      }
      first += n;
    }
  }
  return absl::OkStatus();
}

void Engine::Impl::PlanMicroBatches(absl::Span<const StepItem> items, int64_t t) {
  num_micro_ = 1;
  micro_[0].row0 = 0;
  micro_[0].t = t;
  if (options_.micro_batches < 2 || items.size() < 2 || t < options_.micro_batch_min_tokens ||
      config_.num_experts == 0 || !experts_->RunsConcurrently()) {
    return;
  }
  // Cut at the item boundary closest to half the tokens (each side keeps >= 1 item).
  int64_t best = 0, before = 0;
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    before += static_cast<int64_t>(items[i].token_ids.size());
    if (best == 0 || std::abs(2 * before - t) < std::abs(2 * best - t)) best = before;
  }
  num_micro_ = 2;
  micro_[0].t = best;
  micro_[1].row0 = best;
  micro_[1].t = t - best;
}

void Engine::Impl::DrainPending() {
  std::vector<int32_t> ignored;
  for (MicroBatch& mb : micro_) {
    if (mb.pending) {
      mb.pending = false;
      experts_->AwaitPartial(mb.handle, &ignored).IgnoreError();
    }
  }
}

absl::Status Engine::Impl::StartLayer(MicroBatch& mb, int64_t l, StepOutput* out) {
  const model::LayerWeights& w = weights_.layers[l];
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* x = x_.data() + mb.row0 * hidden;
  float* h = h_.data() + mb.row0 * hidden;
  float* proj = proj_.data() + mb.row0 * hidden;
  kernels::RmsNorm(x, mb.t, hidden, w.input_norm, eps, h);
  Attention(mb, l);
  for (int64_t i = 0; i < mb.t * hidden; ++i) x[i] += proj[i];
  kernels::RmsNorm(x, mb.t, hidden, w.post_attn_norm, eps, h);
  if (config_.IsMoeLayer(l)) return SubmitExperts(mb, l, out);
  RunSwiGlu(h, mb.t, w.dense_mlp, &ffn_scratch_, proj, pool_.get(), options_.activations);
  return absl::OkStatus();
}

absl::Status Engine::Impl::FinishFfn(MicroBatch& mb, int64_t l) {
  if (config_.IsMoeLayer(l)) RETURN_IF_ERROR(CombineExperts(mb, l));
  const int64_t hidden = config_.hidden_size;
  float* x = x_.data() + mb.row0 * hidden;
  const float* proj = proj_.data() + mb.row0 * hidden;
  for (int64_t i = 0; i < mb.t * hidden; ++i) x[i] += proj[i];
  return absl::OkStatus();
}

void Engine::Impl::Attention(const MicroBatch& mb, int64_t layer_idx) {
  const model::LayerWeights& w = weights_.layers[layer_idx];
  const model::ModelConfig& c = config_;
  const int64_t heads = c.num_attention_heads;
  const int64_t kv_heads = c.num_key_value_heads;
  const int64_t hd = c.head_dim;
  const int64_t t = mb.t;
  const float eps = static_cast<float>(c.rms_norm_eps);
  kernels::ThreadPool* pool = pool_.get();
  const float* h = h_.data() + mb.row0 * c.hidden_size;
  float* q = q_.data() + mb.row0 * heads * hd;
  float* k = k_.data() + mb.row0 * kv_heads * hd;
  float* v = v_.data() + mb.row0 * kv_heads * hd;
  float* attn = attn_.data() + mb.row0 * heads * hd;
  const int32_t* positions = positions_.data() + mb.row0;
  const kernels::AttentionToken* tokens = tokens_.data() + mb.row0;

  // q, k and v in one parallel region (one fork/join).
  const bool bias = c.attention_bias;
  const kernels::Activations act = options_.activations;
  const kernels::MatMulTask qkv[] = {{h, t, w.q_proj, q, bias ? &w.q_bias : nullptr, act},
                                     {h, t, w.k_proj, k, bias ? &w.k_bias : nullptr, act},
                                     {h, t, w.v_proj, v, bias ? &w.v_bias : nullptr, act}};
  kernels::MatMulMany(qkv, 3, pool);
  if (c.qk_norm) {
    if (c.qk_norm_per_head) {  // Qwen3-MoE: RMSNorm over each head's head_dim features
      kernels::RmsNorm(q, t * heads, hd, w.q_norm, eps, q);
      kernels::RmsNorm(k, t * kv_heads, hd, w.k_norm, eps, k);
    } else {  // OLMoE: over the whole projection
      kernels::RmsNorm(q, t, heads * hd, w.q_norm, eps, q);
      kernels::RmsNorm(k, t, kv_heads * hd, w.k_norm, eps, k);
    }
  }
  if (c.clip_qkv > 0) {  // OLMoE clamps after the q/k norms
    const float lim = static_cast<float>(c.clip_qkv);
    for (float* buf : {q, k, v}) {
      const int64_t n = t * (buf == q ? heads : kv_heads) * hd;
      for (int64_t i = 0; i < n; ++i) buf[i] = std::clamp(buf[i], -lim, lim);
    }
  }
  const float theta = static_cast<float>(c.rope_theta);
  kernels::ApplyRope(q, t, heads, hd, hd, positions, theta);
  kernels::ApplyRope(k, t, kv_heads, hd, hd, positions, theta);
  kernels::WriteKv(k, v, t, tokens, kv_->layout(), kv_->k(layer_idx), kv_->v(layer_idx));
  kernels::PagedAttention(q, t, heads, tokens, kv_->layout(), kv_->k(layer_idx), kv_->v(layer_idx),
                          attn_scale_, attn, pool);
  kernels::MatMul(attn, t, w.o_proj, proj_.data() + mb.row0 * c.hidden_size, pool,
                  c.o_proj_bias ? &w.o_bias : nullptr, act);
}

absl::Status Engine::Impl::SubmitExperts(MicroBatch& mb, int64_t layer_idx, StepOutput* out) {
  const model::LayerWeights& w = weights_.layers[layer_idx];
  const model::ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t ne = c.num_experts;
  const int64_t k = c.num_experts_per_tok;
  const int64_t t = mb.t;
  // Mixtral always renormalises its top-k; Qwen and OLMoE follow norm_topk_prob.
  const bool normalize = c.arch == Arch::kMixtral || c.norm_topk_prob;
  const float* h = h_.data() + mb.row0 * hidden;
  int32_t* topk_ids = topk_ids_.data() + mb.row0 * k;
  int32_t* slot_of = slot_of_.data() + mb.row0 * k;
  float* packed_in = packed_in_.data() + mb.row0 * k * hidden;
  float* packed_out = packed_out_.data() + mb.row0 * k * hidden;

  float* gate_logits = gate_logits_.data() + mb.row0 * ne;
  kernels::MatMul(h, t, w.router, gate_logits, pool_.get());
  kernels::TopKGating(gate_logits, t, ne, k, normalize,
                      {topk_ids, topk_weights_.data() + mb.row0 * k});

  // Group (token, j) pairs by expert: counting sort, tokens in increasing order inside a group.
  std::fill(mb.counts.begin(), mb.counts.end(), 0);
  for (int64_t i = 0; i < t * k; ++i) ++mb.counts[topk_ids[i]];
  int64_t* layer_counts = out->expert_tokens.data() + layer_idx * ne;
  int64_t offset = 0;
  mb.call.layer_idx = static_cast<int32_t>(layer_idx);
  mb.call.hidden = hidden;
  mb.call.activations = options_.activations;
  mb.call.weights = options_.weights;
  mb.call.batches.clear();
  for (int64_t e = 0; e < ne; ++e) {
    layer_counts[e] += mb.counts[e];
    mb.fill[e] = offset;
    if (mb.counts[e] > 0) {
      mb.call.batches.push_back({static_cast<int32_t>(e), mb.counts[e], packed_in + offset * hidden,
                                 packed_out + offset * hidden});
    }
    offset += mb.counts[e];
  }
  for (int64_t i = 0; i < t * k; ++i) {
    const int64_t slot = mb.fill[topk_ids[i]]++;
    slot_of[i] = static_cast<int32_t>(slot);
    std::memcpy(packed_in + slot * hidden, h + (i / k) * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
  // The experts run elsewhere: the pool's workers would spin on the cores the expert workers
  // are about to need (the router's pool finished its last kernel, the gate, just above).
  if (experts_->RunsConcurrently()) pool_->Park();
  ASSIGN_OR_RETURN(mb.handle, experts_->Submit(mb.call));
  mb.pending = true;

  // The shared expert runs here while the routed experts are (possibly) elsewhere.
  if (c.shared_expert_intermediate_size > 0) {
    RunSwiGlu(h, t, w.shared_expert, &ffn_scratch_, proj_.data() + mb.row0 * hidden, pool_.get(),
              options_.activations);
    kernels::MatMul(h, t, w.shared_expert_gate, shared_gate_.data() + mb.row0, pool_.get());
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::CombineExperts(MicroBatch& mb, int64_t layer_idx) {
  const model::ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t k = c.num_experts_per_tok;
  const int64_t t = mb.t;
  mb.pending = false;
  unavailable_.clear();
  // Whatever ran on the pool since Submit (the shared expert), its workers sleep while we wait.
  if (experts_->RunsConcurrently()) pool_->Park();
  RETURN_IF_ERROR(experts_->AwaitPartial(mb.handle, &unavailable_));
  const int32_t* topk_ids = topk_ids_.data() + mb.row0 * k;
  const float* topk_weights = topk_weights_.data() + mb.row0 * k;
  const int32_t* slot_of = slot_of_.data() + mb.row0 * k;
  const float* packed_out = packed_out_.data() + mb.row0 * k * hidden;
  if (!unavailable_.empty()) {
    // Tokens that needed an unavailable expert fail (their sequences end with the error); the
    // other rows never read them, so the rest of the batch stays exact.
    if (failure_.empty()) {
      failure_ =
          absl::StrCat("no live replica of expert ", unavailable_.front(), " of layer ", layer_idx);
    }
    for (int64_t i = 0; i < t * k; ++i) {
      if (std::find(unavailable_.begin(), unavailable_.end(), topk_ids[i]) != unavailable_.end()) {
        row_failed_[mb.row0 + i / k] = 1;
      }
    }
  }

  // Combine in each token's top-k order, then add the gated shared expert: a fixed order per row.
  const bool shared = c.shared_expert_intermediate_size > 0;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t r = mb.row0 + i;
    float* acc = h_.data() + r * hidden;  // h_ is free again: reuse it as the accumulator
    const float* o0 = packed_out + static_cast<int64_t>(slot_of[i * k]) * hidden;
    const float w0 = topk_weights[i * k];
    for (int64_t d = 0; d < hidden; ++d) acc[d] = w0 * o0[d];
    for (int64_t j = 1; j < k; ++j) {
      const float* o = packed_out + static_cast<int64_t>(slot_of[i * k + j]) * hidden;
      const float wj = topk_weights[i * k + j];
      for (int64_t d = 0; d < hidden; ++d) acc[d] += wj * o[d];
    }
    float* dst = proj_.data() + r * hidden;
    if (shared) {
      const float g = 1.0f / (1.0f + std::exp(-shared_gate_[r]));
      for (int64_t d = 0; d < hidden; ++d) dst[d] = acc[d] + g * dst[d];
    } else {
      std::memcpy(dst, acc, static_cast<size_t>(hidden) * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void Engine::Impl::ComputeLogits(absl::Span<const StepItem> items, int64_t t, StepOutput* out) {
  const int64_t hidden = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;
  out->row_begin.resize(items.size() + 1);
  int64_t rows = 0;
  int64_t token_row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    out->row_begin[i] = rows;
    const int64_t n = static_cast<int64_t>(items[i].token_ids.size());
    int64_t first = n;  // first token of the item whose logits are wanted
    if (items[i].logits == LogitsMode::kAll) first = 0;
    if (items[i].logits == LogitsMode::kLast) first = n - 1;
    EnsureSize(logit_rows_, (rows + n - first) * hidden);
    for (int64_t j = first; j < n; ++j, ++rows) {
      std::memcpy(logit_rows_.data() + rows * hidden, x_.data() + (token_row + j) * hidden,
                  static_cast<size_t>(hidden) * sizeof(float));
    }
    token_row += n;
  }
  out->row_begin[items.size()] = rows;
  out->logits.resize(static_cast<size_t>(rows * vocab));
  if (rows == 0) return;
  kernels::RmsNorm(logit_rows_.data(), rows, hidden, weights_.final_norm,
                   static_cast<float>(config_.rms_norm_eps), logit_rows_.data());
  kernels::MatMul(logit_rows_.data(), rows, weights_.lm_head, out->logits.data(), pool_.get());
}

}  // namespace moe::engine
