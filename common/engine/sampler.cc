#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/base/hash.h"

namespace moe::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t ArgMax(const float* l, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (l[i] > l[best]) best = i;  // strict: ties keep the lower id
  }
  return static_cast<int32_t>(best);
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t counter) {
  const uint64_t r = common::Mix64(common::SplitMix64(seed) ^ (counter * 0xd1b54a32d192ed03ull));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

void LogSoftmax(const float* logits, int64_t n, float* out) {
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - lse);
}

struct SequenceSampler::Rep {
  Rep(const generation::SamplingParams& params, absl::Span<const int32_t> prompt_ids,
      int64_t vocab_size, uint64_t seed);
  SampledToken Sample(absl::Span<const float> logits, absl::Span<const uint32_t> allowed);
  void ApplyMask(absl::Span<const uint32_t> allowed, float* l) const;
  void ApplyBiasAndPenalties(float* l) const;
  int32_t Draw(float* l, uint64_t counter);
  void FillLogprobs(const float* l, SampledToken* out);

  generation::SamplingParams params_;
  int64_t vocab_;
  uint64_t seed_;
  int64_t num_sampled_ = 0;
  bool penalize_ = false;
  std::vector<uint8_t> in_prompt_;      // [vocab] when repetition_penalty != 1
  std::vector<int32_t> output_counts_;  // [vocab] when any penalty is on
  std::vector<float> work_;             // [vocab] scratch
  std::vector<float> probs_;            // [vocab] scratch
  std::vector<int32_t> idx_;            // [vocab] scratch
};

SequenceSampler::SequenceSampler(const generation::SamplingParams& params,
                                 absl::Span<const int32_t> prompt_ids, int64_t vocab_size,
                                 uint64_t seed)
    : rep_(std::make_unique<Rep>(params, prompt_ids, vocab_size, seed)) {}
SequenceSampler::~SequenceSampler() = default;
SequenceSampler::SequenceSampler(SequenceSampler&&) noexcept = default;
SequenceSampler& SequenceSampler::operator=(SequenceSampler&&) noexcept = default;
SampledToken SequenceSampler::Sample(absl::Span<const float> logits) {
  return rep_->Sample(logits, {});
}
SampledToken SequenceSampler::Sample(absl::Span<const float> logits,
                                     absl::Span<const uint32_t> allowed) {
  return rep_->Sample(logits, allowed);
}
int64_t SequenceSampler::num_sampled() const { return rep_->num_sampled_; }
const generation::SamplingParams& SequenceSampler::params() const { return rep_->params_; }

SequenceSampler::Rep::Rep(const generation::SamplingParams& params,
                          absl::Span<const int32_t> prompt_ids, int64_t vocab_size, uint64_t seed)
    : params_(params), vocab_(vocab_size), seed_(params.seed.value_or(seed)) {
  penalize_ = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
              params_.presence_penalty != 0.0f;
  if (penalize_) output_counts_.assign(static_cast<size_t>(vocab_), 0);
  if (params_.repetition_penalty != 1.0f) {
    in_prompt_.assign(static_cast<size_t>(vocab_), 0);
    for (int32_t id : prompt_ids) {
      if (id >= 0 && id < vocab_) in_prompt_[id] = 1;
    }
  }
  work_.resize(static_cast<size_t>(vocab_));
  if (!params_.greedy() || params_.logprobs >= 0) {
    probs_.resize(static_cast<size_t>(vocab_));
    idx_.resize(static_cast<size_t>(vocab_));
  }
}

void SequenceSampler::Rep::ApplyMask(absl::Span<const uint32_t> allowed, float* l) const {
  const size_t words = std::min(allowed.size(), static_cast<size_t>((vocab_ + 31) / 32));
  for (size_t w = 0; w < words; ++w) {
    uint32_t banned = ~allowed[w];
    while (banned != 0) {  // only the disallowed bits: a mostly-open mask costs little
      const int64_t id = static_cast<int64_t>(w * 32) + __builtin_ctz(banned);
      banned &= banned - 1;
      if (id < vocab_) l[id] = kNegInf;
    }
  }
}

void SequenceSampler::Rep::ApplyBiasAndPenalties(float* l) const {
  for (const auto& [id, b] : params_.logit_bias) l[id] += b;
  if (!penalize_) return;
  const float rep = params_.repetition_penalty;
  for (int64_t i = 0; i < vocab_; ++i) {
    const int32_t c = output_counts_[i];
    if (rep != 1.0f && (c > 0 || in_prompt_[i])) l[i] = l[i] > 0 ? l[i] / rep : l[i] * rep;
    if (c > 0) {
      l[i] -= params_.frequency_penalty * static_cast<float>(c) + params_.presence_penalty;
    }
  }
}

int32_t SequenceSampler::Rep::Draw(float* l, uint64_t counter) {
  if (params_.greedy()) return ArgMax(l, vocab_);
  const float inv_t = 1.0f / params_.temperature;
  float mx = kNegInf;
  for (int64_t i = 0; i < vocab_; ++i) {
    l[i] *= inv_t;
    mx = std::max(mx, l[i]);
  }
  // e_i = exp(l_i - max) is p_i / p_max, so min_p masks e_i < min_p.
  int64_t n = 0;
  for (int64_t i = 0; i < vocab_; ++i) {
    const float e = std::exp(l[i] - mx);
    if (e > 0.0f && e >= params_.min_p) {
      probs_[i] = e;
      idx_[n++] = static_cast<int32_t>(i);
    } else {
      l[i] = kNegInf;
      probs_[i] = 0.0f;
    }
  }
  if (params_.top_k > 0 && params_.top_k < n) {
    std::vector<int32_t>::iterator kth = idx_.begin() + (params_.top_k - 1);
    std::nth_element(idx_.begin(), kth, idx_.begin() + n,
                     [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float threshold = l[*kth];
    int64_t kept = 0;
    for (int64_t i = 0; i < vocab_; ++i) {  // rebuild in id order; ties with the k-th stay
      if (probs_[i] > 0.0f && l[i] >= threshold) {
        idx_[kept++] = static_cast<int32_t>(i);
      } else {
        probs_[i] = 0.0f;
        l[i] = kNegInf;
      }
    }
    n = kept;
  }
  if (params_.top_p < 1.0f) {
    std::sort(idx_.begin(), idx_.begin() + n, [&](int32_t a, int32_t b) {
      return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
    });
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += probs_[idx_[i]];
    double before = 0;
    int64_t kept = 0;
    while (kept < n && before < params_.top_p * total) before += probs_[idx_[kept++]];
    for (int64_t i = kept; i < n; ++i) {
      probs_[idx_[i]] = 0.0f;
      l[idx_[i]] = kNegInf;
    }
    n = kept;
  }
  if (n == 0) return ArgMax(l, vocab_);  // every logit was -inf or NaN
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += probs_[idx_[i]];
  const double target = CounterUniform(seed_, counter) * total;
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += probs_[idx_[i]];
    if (cum > target) return idx_[i];
  }
  return idx_[n - 1];  // rounding at the top end
}

void SequenceSampler::Rep::FillLogprobs(const float* l, SampledToken* out) {
  // probs_ is free again after Draw; it holds the log-probabilities now.
  LogSoftmax(l, vocab_, probs_.data());
  out->logprob = probs_[out->token_id];
  if (params_.logprobs <= 0) return;
  std::iota(idx_.begin(), idx_.end(), 0);
  const int64_t n = std::min<int64_t>(params_.logprobs, vocab_);
  std::partial_sort(idx_.begin(), idx_.begin() + n, idx_.end(), [&](int32_t a, int32_t b) {
    return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
  });
  out->top.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out->top[i] = {idx_[i], probs_[idx_[i]]};
}

SampledToken SequenceSampler::Rep::Sample(absl::Span<const float> logits,
                                          absl::Span<const uint32_t> allowed) {
  std::copy(logits.begin(), logits.end(), work_.begin());
  if (!allowed.empty()) ApplyMask(allowed, work_.data());
  ApplyBiasAndPenalties(work_.data());
  SampledToken out;
  out.token_id = Draw(work_.data(), static_cast<uint64_t>(num_sampled_));
  if (params_.logprobs >= 0) {
    FillLogprobs(
        params_.logprobs_mode == generation::LogprobsMode::kRaw ? logits.data() : work_.data(),
        &out);
  }
  ++num_sampled_;
  if (penalize_) ++output_counts_[out.token_id];
  return out;
}

}  // namespace moe::engine
