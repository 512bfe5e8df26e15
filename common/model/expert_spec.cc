#include "common/model/expert_spec.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::model {
namespace {

// "E" or "E1-E2" -> [first, last].
bool ParseRange(absl::string_view text, int64_t* first, int64_t* last) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '-');
  if (parts.size() == 1) {
    if (!absl::SimpleAtoi(parts[0], first)) return false;
    *last = *first;
    return true;
  }
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], first) &&
         absl::SimpleAtoi(parts[1], last) && *first <= *last;
}

}  // namespace

absl::StatusOr<std::vector<ExpertKey>> ParseExpertSpecs(const std::vector<std::string>& specs,
                                                        const ModelConfig& config) {
  std::vector<ExpertKey> keys;
  for (const std::string& spec : specs) {
    std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
    int64_t e0 = 0, e1 = 0, l0 = 0, l1 = config.num_hidden_layers - 1;
    const bool all_layers = parts.size() == 2 && parts[0] == "*";
    if (parts.size() != 2 || (!all_layers && !ParseRange(parts[0], &l0, &l1)) ||
        !ParseRange(parts[1], &e0, &e1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("experts: \"", spec, "\" is not L:E, L:E1-E2 or *:E"));
    }
    if (l0 < 0 || l1 >= config.num_hidden_layers || e0 < 0 || e1 >= config.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("experts: \"", spec, "\" is outside the model's ", config.num_hidden_layers,
                       " layers and ", config.num_experts, " experts"));
    }
    for (int64_t l = l0; l <= l1; ++l) {
      if (!config.IsMoeLayer(l)) {
        if (all_layers) continue;
        return absl::InvalidArgumentError(
            absl::StrCat("experts: \"", spec, "\": layer ", l, " is not an MoE layer"));
      }
      for (int64_t e = e0; e <= e1; ++e) keys.push_back({l, e});
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace moe::model
