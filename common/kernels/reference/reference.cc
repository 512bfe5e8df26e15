#include "common/kernels/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace moe::kernels::reference {

using common::Bf16ToF32;
using common::F16ToF32;

float WeightAt(const WeightView& w, int64_t i) {
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kQ8_0:
      return common::Q8_0At(w.data, w.cols, i / w.cols, i % w.cols);
  }
  return 0.0f;
}

void MatMul(const float* x, int64_t m, const WeightView& w, float* y, const WeightView* bias) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  // q8_0 weights: x quantized as the kernel does (kernels.h INT8 WEIGHTS step 1), then the
  // dequantized operands xd * xq and d * q (exact in double; so is their product) summed in
  // double.
  std::vector<double> xs(static_cast<size_t>(m * k));
  if (w.dtype == DType::kQ8_0) {
    std::vector<int8_t> q(static_cast<size_t>(m * k));
    std::vector<float> d(static_cast<size_t>(m * (k / common::kQ8BlockSize)));
    QuantizeActivationsQ8(x, m, k, q.data(), d.data());
    for (int64_t p = 0; p < m * k; ++p) {
      xs[p] = static_cast<double>(d[p / common::kQ8BlockSize]) * q[p];
    }
  } else {
    std::copy(x, x + m * k, xs.begin());
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        acc += xs[i * k + p] * WeightAt(w, j * k + p);
      }
      if (bias != nullptr && bias->data != nullptr) acc += WeightAt(*bias, j);
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

void RmsNorm(const float* x, int64_t m, int64_t d, const WeightView& weight, float eps,
             float* out) {
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[i * d + j]) * x[i * d + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      out[i * d + j] = static_cast<float>(x[i * d + j] * inv * WeightAt(weight, j));
    }
  }
}

void ApplyRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
               const int32_t* positions, float theta) {
  const int64_t half = rotary_dim / 2;
  std::vector<float> inv_freq(half);
  for (int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(rotary_dim);
    inv_freq[j] = 1.0f / std::pow(theta, exponent);
  }
  std::vector<double> rotated(rotary_dim);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (i * num_heads + h) * head_dim;
      for (int64_t j = 0; j < rotary_dim; ++j) {
        const float angle = static_cast<float>(positions[i]) * inv_freq[j % half];
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        // rotate_half(v) = cat(-v[half:], v[:half]).
        const double rot = j < half ? -static_cast<double>(v[j + half]) : v[j - half];
        rotated[j] = v[j] * c + rot * s;
      }
      for (int64_t j = 0; j < rotary_dim; ++j) v[j] = static_cast<float>(rotated[j]);
    }
  }
}

void Softmax(float* x, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = x + i * n;
    const double mx = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(std::exp(row[j] - mx) / sum);
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void TopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k, bool normalize,
                TopK out) {
  std::vector<float> probs(num_experts);
  std::vector<int32_t> order(num_experts);
  for (int64_t i = 0; i < m; ++i) {
    std::copy(logits + i * num_experts, logits + (i + 1) * num_experts, probs.begin());
    Softmax(probs.data(), 1, num_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += probs[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      out.expert_ids[i * k + j] = order[j];
      out.weights[i * k + j] =
          normalize ? static_cast<float>(probs[order[j]] / sum) : probs[order[j]];
    }
  }
}

namespace {
int64_t SlotOffset(const AttentionToken& t, int64_t pos, const PagedKvLayout& layout) {
  const int64_t block = t.block_table[pos / layout.block_size];
  return (block * layout.block_size + pos % layout.block_size) * layout.num_kv_heads *
         layout.head_dim;
}
}  // namespace

void WriteKv(const float* k, const float* v, int64_t m, const AttentionToken* tokens,
             const PagedKvLayout& layout, float* k_cache, float* v_cache) {
  const int64_t row = layout.num_kv_heads * layout.head_dim;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t off = SlotOffset(tokens[i], tokens[i].position, layout);
    for (int64_t j = 0; j < row; ++j) {
      k_cache[off + j] = k[i * row + j];
      v_cache[off + j] = v[i * row + j];
    }
  }
}

void PagedAttention(const float* q, int64_t m, int64_t num_heads, const AttentionToken* tokens,
                    const PagedKvLayout& layout, const float* k_cache, const float* v_cache,
                    float scale, float* out) {
  const int64_t hd = layout.head_dim;
  const int64_t group = num_heads / layout.num_kv_heads;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t len = tokens[i].position + 1;
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t kvh = h / group;
      const float* qv = q + (i * num_heads + h) * hd;
      std::vector<double> scores(len);
      double mx = -INFINITY;
      for (int64_t p = 0; p < len; ++p) {
        const float* kv = k_cache + SlotOffset(tokens[i], p, layout) + kvh * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qv[d]) * kv[d];
        scores[p] = dot * scale;
        mx = std::max(mx, scores[p]);
      }
      double sum = 0.0;
      for (int64_t p = 0; p < len; ++p) {
        scores[p] = std::exp(scores[p] - mx);
        sum += scores[p];
      }
      std::vector<double> acc(hd, 0.0);
      for (int64_t p = 0; p < len; ++p) {
        const float* vv = v_cache + SlotOffset(tokens[i], p, layout) + kvh * hd;
        for (int64_t d = 0; d < hd; ++d) acc[d] += scores[p] / sum * vv[d];
      }
      for (int64_t d = 0; d < hd; ++d)
        out[(i * num_heads + h) * hd + d] = static_cast<float>(acc[d]);
    }
  }
}

void ConvertToF32(const void* src, DType dtype, int64_t n, float* dst) {
  const WeightView w{src, dtype, 1, n};
  for (int64_t i = 0; i < n; ++i) dst[i] = WeightAt(w, i);
}

}  // namespace moe::kernels::reference
