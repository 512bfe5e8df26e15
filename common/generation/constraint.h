// What a constrained (structured-output) request allows the model to write: the output text must
// be a string the constraint accepts. The gateway derives it from OpenAI's `response_format`, from
// `tools` with `tool_choice` "required" or a named function, and from vLLM's `guided_*` extras;
// the router compiles it (common/grammar/grammar_cache.h) and masks every sampling step with it.
//
// The wire form is moe.router.v1.Constraint (GenerateRequest.constraint); the server adapters
// convert. Plain data; copyable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace moe::generation {

enum class ConstraintKind : uint8_t {
  kNone = 0,    // unconstrained
  kJsonObject,  // any JSON object (OpenAI response_format {"type": "json_object"})
  kJsonSchema,  // JSON valid against the JSON Schema in `spec` (OpenAI strict-mode subset)
  kRegex,       // the whole output matches the regular expression in `spec`
  kChoice,      // the output is exactly one of `choices`
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::kNone;
  // kJsonSchema: the schema as JSON text; kRegex: the pattern. Empty otherwise.
  std::string spec;
  // kChoice: the allowed outputs, each non-empty. Empty otherwise.
  std::vector<std::string> choices;

  bool active() const { return kind != ConstraintKind::kNone; }
  // A key equal for equal constraints (different kinds never collide): what compiled grammars
  // are cached under.
  std::string CacheKey() const;
  // kInvalidArgument when the fields do not fit the kind (an empty schema text, no choices, an
  // empty choice). Whether a schema or pattern compiles is the grammar library's check.
  absl::Status Validate() const;
};

// "none", "json_object", "json_schema", "regex", "choice".
const char* ConstraintKindName(ConstraintKind kind);

}  // namespace moe::generation
