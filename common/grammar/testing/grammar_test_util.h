// Helpers for grammar tests: compile a constraint against a vocabulary without a cache.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/generation/constraint.h"
#include "common/grammar/compiled_grammar.h"
#include "common/grammar/json_schema.h"
#include "common/metrics/registry.h"

namespace moe::grammar::testing {

inline absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileForTest(
    const generation::Constraint& constraint, std::shared_ptr<const TokenVocabulary> vocabulary,
    common::metrics::Registry& registry, const CompiledGrammarOptions& options = {},
    const JsonGrammarOptions& json = {}) {
  absl::StatusOr<Grammar> g = ConstraintToGrammar(constraint, json);
  if (!g.ok()) return g.status();
  absl::StatusOr<std::shared_ptr<const Automaton>> a = Automaton::Compile(*g);
  if (!a.ok()) return a.status();
  return std::make_shared<const CompiledGrammar>(*std::move(a), std::move(vocabulary), options,
                                                 GrammarMetrics(registry));
}

inline generation::Constraint Schema(std::string schema) {
  return {.kind = generation::ConstraintKind::kJsonSchema, .spec = std::move(schema)};
}
inline generation::Constraint Regex(std::string pattern) {
  return {.kind = generation::ConstraintKind::kRegex, .spec = std::move(pattern)};
}

}  // namespace moe::grammar::testing
