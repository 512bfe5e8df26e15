// Metrics of constrained decoding, built from an injected registry (one per process: the router's,
// the gateway's). Copyable: the series live in the registry, which must outlive every copy.
#pragma once

#include "common/metrics/registry.h"

namespace moe::grammar {

struct GrammarMetrics {
  explicit GrammarMetrics(common::metrics::Registry& registry);

  // moe_grammar_compilations_total: constraints compiled (cache misses of GrammarCache).
  common::metrics::Counter* compilations_total;
  // moe_grammar_cache_hits_total: constraints served from GrammarCache without compiling.
  common::metrics::Counter* cache_hits_total;
  // moe_grammar_compile_seconds: time to compile one constraint (schema -> automaton).
  common::metrics::Histogram* compile_seconds;
  // moe_grammar_masks_computed_total: token masks computed (mask-cache misses, one per new
  // grammar state); moe_grammar_mask_cache_hits_total: masks reused.
  common::metrics::Counter* masks_computed_total;
  common::metrics::Counter* mask_cache_hits_total;
};

}  // namespace moe::grammar
