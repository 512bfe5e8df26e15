#include "common/model/reference/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tensor/dtype.h"

namespace moe::model::reference {
namespace {

using common::DType;

// W[row, col] as double (exact for every stored dtype).
double At(const WeightView& w, int64_t row, int64_t col) {
  const int64_t i = row * w.cols + col;
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kBF16:
      return common::Bf16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF16:
      return common::F16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kQ8_0:
      return common::Q8_0At(w.data, w.cols, row, col);
  }
  return 0;
}

// A 1-D weight (norm, bias) element.
double Elem(const WeightView& w, int64_t i) { return At(w, 0, i); }

// The activation side of W8A8 (kernels.h INT8 WEIGHTS), written independently of the kernels: x
// as the engine holds it (f32), then per 32-block amax, scale d = f32(amax / 127) and
// q = clamp(round-half-even(x / d), -127, 127); returns the dequantized d * q.
std::vector<double> QuantizedActivations(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += common::kQ8BlockSize) {
    const size_t end = std::min(x.size(), b + common::kQ8BlockSize);
    float amax = 0;
    for (size_t i = b; i < end; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
    const float d = amax / 127.0f;
    for (size_t i = b; i < end; ++i) {
      if (d == 0) {
        out[i] = 0;
        continue;
      }
      const float v = std::clamp(static_cast<float>(x[i]) / d, -127.0f, 127.0f);
      out[i] = static_cast<double>(d) * std::nearbyint(v);
    }
  }
  return out;
}

// y = W x (+ b): y[r] = sum_c W[r, c] x[c], summed in double in column order. q8_0 weights (the
// W8A8 mode) take x quantized as the engine's kernels quantize it.
std::vector<double> Linear(const WeightView& w, const std::vector<double>& x_in,
                           const WeightView* bias = nullptr) {
  const std::vector<double> x = w.dtype == common::DType::kQ8_0 ? QuantizedActivations(x_in) : x_in;
  std::vector<double> y(w.rows, 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < w.cols; ++c) s += At(w, r, c) * x[c];
    if (bias != nullptr && bias->data != nullptr) s += Elem(*bias, r);
    y[r] = s;
  }
  return y;
}

// HF RMSNorm over x[begin, begin + n): x / sqrt(mean(x^2) + eps) * weight.
void RmsNormInPlace(std::vector<double>& x, int64_t begin, int64_t n, const WeightView& weight,
                    double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[begin + i] * x[begin + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[begin + i] = x[begin + i] * inv * Elem(weight, i);
}

std::vector<double> RmsNorm(const std::vector<double>& x, const WeightView& weight, double eps) {
  std::vector<double> y = x;
  RmsNormInPlace(y, 0, static_cast<int64_t>(y.size()), weight, eps);
  return y;
}

double Silu(double z) { return z / (1.0 + std::exp(-z)); }

// down(silu(gate x) * up x)
std::vector<double> SwiGlu(const ExpertWeights& e, const std::vector<double>& x) {
  std::vector<double> g = Linear(e.gate, x);
  std::vector<double> u = Linear(e.up, x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
  return Linear(e.down, g);
}

// rotate_half RoPE on one head (d features) at position `pos`, with HF's f32 angles.
void Rope(double* x, int64_t d, int64_t pos, const std::vector<float>& inv_freq) {
  const int64_t half = d / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float angle = inv_freq[j] * static_cast<float>(pos);  // f32, as HF computes freqs
    const double c = std::cos(static_cast<double>(angle));
    const double s = std::sin(static_cast<double>(angle));
    const double a = x[j], b = x[j + half];
    x[j] = a * c - b * s;         // x * cos + (-x2) * sin
    x[j + half] = b * c + a * s;  // x * cos + x1 * sin
  }
}

absl::Status Need(const WeightView& v, int64_t rows, int64_t cols, const std::string& what) {
  if (v.data == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("reference: ", what, " is not loaded"));
  }
  if (v.rows != rows || v.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat("reference: ", what, " is [", v.rows, ", ",
                                                   v.cols, "], expected [", rows, ", ", cols, "]"));
  }
  return absl::OkStatus();
}

absl::Status NeedExpert(const ExpertWeights& e, int64_t f, int64_t h, const std::string& what) {
  for (absl::Status s : {Need(e.gate, f, h, what + " gate"), Need(e.up, f, h, what + " up"),
                         Need(e.down, h, f, what + " down")}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReferenceModel> ReferenceModel::Create(const ModelConfig& c, const ModelWeights& w) {
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  const int64_t h = c.hidden_size;
  std::vector<absl::Status> checks;
  checks.push_back(Need(w.embed_tokens, c.vocab_size, h, "embed_tokens"));
  checks.push_back(Need(w.final_norm, 1, h, "norm"));
  checks.push_back(Need(w.lm_head, c.vocab_size, h, "lm_head"));
  if (static_cast<int64_t>(w.layers.size()) != c.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference: ", w.layers.size(), " layers of weights, config has ", c.num_hidden_layers));
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = absl::StrCat("layer ", l, " ");
    checks.push_back(Need(L.input_norm, 1, h, p + "input_layernorm"));
    checks.push_back(Need(L.post_attn_norm, 1, h, p + "post_attention_layernorm"));
    checks.push_back(Need(L.q_proj, c.q_size(), h, p + "q_proj"));
    checks.push_back(Need(L.k_proj, c.kv_size(), h, p + "k_proj"));
    checks.push_back(Need(L.v_proj, c.kv_size(), h, p + "v_proj"));
    checks.push_back(Need(L.o_proj, h, c.q_size(), p + "o_proj"));
    if (c.attention_bias) {
      checks.push_back(Need(L.q_bias, 1, c.q_size(), p + "q_proj.bias"));
      checks.push_back(Need(L.k_bias, 1, c.kv_size(), p + "k_proj.bias"));
      checks.push_back(Need(L.v_bias, 1, c.kv_size(), p + "v_proj.bias"));
    }
    if (c.o_proj_bias) checks.push_back(Need(L.o_bias, 1, h, p + "o_proj.bias"));
    if (c.qk_norm) {
      checks.push_back(
          Need(L.q_norm, 1, c.qk_norm_per_head ? c.head_dim : c.q_size(), p + "q_norm"));
      checks.push_back(
          Need(L.k_norm, 1, c.qk_norm_per_head ? c.head_dim : c.kv_size(), p + "k_norm"));
    }
    if (c.IsMoeLayer(l)) {
      checks.push_back(Need(L.router, c.num_experts, h, p + "router gate"));
      if (static_cast<int64_t>(L.experts.size()) != c.num_experts) {
        return absl::FailedPreconditionError(absl::StrCat(
            "reference: ", p, "has ", L.experts.size(), " expert slots, expected ", c.num_experts));
      }
      for (int64_t e = 0; e < c.num_experts; ++e) {
        checks.push_back(
            NeedExpert(L.experts[e], c.moe_intermediate_size, h, absl::StrCat(p, "expert ", e)));
      }
      if (c.shared_expert_intermediate_size > 0) {
        checks.push_back(
            NeedExpert(L.shared_expert, c.shared_expert_intermediate_size, h, p + "shared_expert"));
        checks.push_back(Need(L.shared_expert_gate, 1, h, p + "shared_expert_gate"));
      }
    } else {
      checks.push_back(NeedExpert(L.dense_mlp, c.intermediate_size, h, p + "mlp"));
    }
  }
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  ReferenceModel m(c, w);
  m.k_cache_.resize(c.num_hidden_layers);
  m.v_cache_.resize(c.num_hidden_layers);
  // HF: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in f32.
  for (int64_t j = 0; j < c.head_dim / 2; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(c.head_dim);
    const float p = static_cast<float>(
        std::pow(static_cast<double>(static_cast<float>(c.rope_theta)), static_cast<double>(e)));
    m.inv_freq_.push_back(1.0f / p);
  }
  return m;
}

std::vector<double> ReferenceModel::Layer(int64_t l, const std::vector<double>& h_in, int64_t pos,
                                          ReferenceTrace* trace) {
  const LayerWeights& L = w_->layers[l];
  const int64_t d = c_.head_dim, nh = c_.num_attention_heads, nkv = c_.num_key_value_heads;
  std::vector<double> h = h_in;

  // --- attention ---
  std::vector<double> x = RmsNorm(h, L.input_norm, c_.rms_norm_eps);
  std::vector<double> q = Linear(L.q_proj, x, c_.attention_bias ? &L.q_bias : nullptr);
  std::vector<double> k = Linear(L.k_proj, x, c_.attention_bias ? &L.k_bias : nullptr);
  std::vector<double> v = Linear(L.v_proj, x, c_.attention_bias ? &L.v_bias : nullptr);
  if (c_.qk_norm && !c_.qk_norm_per_head) {  // OLMoE: over the whole projection
    RmsNormInPlace(q, 0, c_.q_size(), L.q_norm, c_.rms_norm_eps);
    RmsNormInPlace(k, 0, c_.kv_size(), L.k_norm, c_.rms_norm_eps);
  }
  if (c_.clip_qkv > 0) {
    for (auto* t : {&q, &k, &v}) {
      for (double& e : *t) e = std::clamp(e, -c_.clip_qkv, c_.clip_qkv);
    }
  }
  if (c_.qk_norm && c_.qk_norm_per_head) {  // Qwen3-MoE: per head over head_dim
    for (int64_t hd = 0; hd < nh; ++hd) RmsNormInPlace(q, hd * d, d, L.q_norm, c_.rms_norm_eps);
    for (int64_t hd = 0; hd < nkv; ++hd) RmsNormInPlace(k, hd * d, d, L.k_norm, c_.rms_norm_eps);
  }
  for (int64_t hd = 0; hd < nh; ++hd) Rope(q.data() + hd * d, d, pos, inv_freq_);
  for (int64_t hd = 0; hd < nkv; ++hd) Rope(k.data() + hd * d, d, pos, inv_freq_);
  std::vector<double>& kc = k_cache_[l];
  std::vector<double>& vc = v_cache_[l];
  kc.insert(kc.end(), k.begin(), k.end());
  vc.insert(vc.end(), v.begin(), v.end());

  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t first =
      c_.sliding_window > 0 ? std::max<int64_t>(0, pos - c_.sliding_window + 1) : 0;
  std::vector<double> attn(c_.q_size(), 0.0);
  for (int64_t hd = 0; hd < nh; ++hd) {
    const int64_t g = hd / (nh / nkv);
    std::vector<double> scores;
    for (int64_t j = first; j <= pos; ++j) {
      double s = 0;
      for (int64_t i = 0; i < d; ++i) s += q[hd * d + i] * kc[j * c_.kv_size() + g * d + i];
      scores.push_back(s * scale);
    }
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double& s : scores) sum += (s = std::exp(s - mx));
    for (int64_t j = first; j <= pos; ++j) {
      const double p = scores[j - first] / sum;
      for (int64_t i = 0; i < d; ++i) attn[hd * d + i] += p * vc[j * c_.kv_size() + g * d + i];
    }
  }
  std::vector<double> o = Linear(L.o_proj, attn, c_.o_proj_bias ? &L.o_bias : nullptr);
  for (int64_t i = 0; i < c_.hidden_size; ++i) h[i] += o[i];

  // --- feed-forward ---
  x = RmsNorm(h, L.post_attn_norm, c_.rms_norm_eps);
  std::vector<double> out(c_.hidden_size, 0.0);
  if (c_.IsMoeLayer(l)) {
    std::vector<double> p = Linear(L.router, x);
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& e : p) sum += (e = std::exp(e - mx));
    for (double& e : p) e /= sum;
    std::vector<int32_t> order(c_.num_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    order.resize(c_.num_experts_per_tok);
    std::vector<double> wts;
    double wsum = 0;
    for (int32_t e : order) wsum += p[e];
    for (int32_t e : order) wts.push_back(c_.norm_topk_prob ? p[e] / wsum : p[e]);
    for (size_t r = 0; r < order.size(); ++r) {
      std::vector<double> y = SwiGlu(L.experts[order[r]], x);
      for (int64_t i = 0; i < c_.hidden_size; ++i) out[i] += wts[r] * y[i];
    }
    if (c_.shared_expert_intermediate_size > 0) {
      std::vector<double> y = SwiGlu(L.shared_expert, x);
      const double gate = 1.0 / (1.0 + std::exp(-Linear(L.shared_expert_gate, x)[0]));
      for (int64_t i = 0; i < c_.hidden_size; ++i) out[i] += gate * y[i];
    }
    if (trace != nullptr) {
      trace->experts[l].push_back(order);
      trace->weights[l].push_back(wts);
    }
  } else {
    out = SwiGlu(L.dense_mlp, x);
    if (trace != nullptr) {
      trace->experts[l].emplace_back();
      trace->weights[l].emplace_back();
    }
  }
  for (int64_t i = 0; i < c_.hidden_size; ++i) h[i] += out[i];
  return h;
}

absl::StatusOr<std::vector<std::vector<double>>> ReferenceModel::Forward(
    std::span<const int32_t> tokens, ReferenceTrace* trace) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("reference: token ", tokens[i], " at index ",
                                                     i, " is outside the vocabulary [0, ",
                                                     c_.vocab_size, ")"));
    }
  }
  if (trace != nullptr) {
    trace->experts.resize(c_.num_hidden_layers);
    trace->weights.resize(c_.num_hidden_layers);
  }
  std::vector<std::vector<double>> logits;
  for (int32_t token : tokens) {
    std::vector<double> h(c_.hidden_size);
    for (int64_t i = 0; i < c_.hidden_size; ++i) h[i] = At(w_->embed_tokens, token, i);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) h = Layer(l, h, pos_, trace);
    logits.push_back(Linear(w_->lm_head, RmsNorm(h, w_->final_norm, c_.rms_norm_eps)));
    ++pos_;
  }
  return logits;
}

absl::StatusOr<std::vector<std::vector<float>>> ReferenceLogits(const ModelConfig& config,
                                                                const ModelWeights& weights,
                                                                std::span<const int32_t> tokens,
                                                                ReferenceTrace* trace) {
  absl::StatusOr<ReferenceModel> model = ReferenceModel::Create(config, weights);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<std::vector<double>>> logits = model->Forward(tokens, trace);
  if (!logits.ok()) return logits.status();
  std::vector<std::vector<float>> out;
  for (const auto& row : *logits) out.emplace_back(row.begin(), row.end());
  return out;
}

absl::StatusOr<std::vector<int32_t>> ReferenceGreedy(const ModelConfig& config,
                                                     const ModelWeights& weights,
                                                     std::span<const int32_t> prompt, int64_t n,
                                                     std::vector<std::vector<float>>* step_logits) {
  if (prompt.empty()) return absl::InvalidArgumentError("reference: empty prompt");
  absl::StatusOr<ReferenceModel> model = ReferenceModel::Create(config, weights);
  if (!model.ok()) return model.status();
  std::vector<int32_t> out;
  absl::StatusOr<std::vector<std::vector<double>>> logits = model->Forward(prompt);
  for (int64_t step = 0; step < n; ++step) {
    if (!logits.ok()) return logits.status();
    const std::vector<double>& last = logits->back();
    const int32_t next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    if (step_logits != nullptr) step_logits->emplace_back(last.begin(), last.end());
    out.push_back(next);
    if (step + 1 < n) logits = model->Forward(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}

}  // namespace moe::model::reference
