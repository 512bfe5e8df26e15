// JSON Schema and plain JSON as grammars, and ConstraintToGrammar for every constraint kind.
//
// The schema subset is what OpenAI's strict structured outputs accept, plus a little:
//   type (one or a list): object, array, string, number, integer, boolean, null;
//   object: properties (emitted in the schema's order), required, additionalProperties (false,
//     true or a schema; absent means false, as in strict mode);
//   array: items, prefixItems, minItems, maxItems;
//   string: minLength, maxLength, pattern (regex.h, full match), format (date, time, date-time,
//     uuid, ipv4, email; other formats are annotations and ignored);
//   integer / number: minimum, maximum, exclusiveMinimum, exclusiveMaximum (bounded numbers are
//     written without an exponent);
//   enum, const, anyOf, oneOf (as anyOf), allOf of one schema, $ref to "#" or "#/..." (local JSON
//     pointers into $defs / definitions; recursion allowed), and `true` / `{}` for any value.
// Refused with kInvalidArgument naming the keyword and where it is (a JSON pointer into the
// schema): not, if/then/else, patternProperties, propertyNames, dependent*, unevaluated*,
// min/maxProperties, contains, multipleOf, uniqueItems, remote $ref, a required property that is
// not declared, and bounds that nothing satisfies. Annotations (title, description, default,
// examples, $schema, $id, $comment, ...) and unknown keywords are ignored.
//
// Output shape: whitespace between JSON tokens is bounded (max_whitespace characters of
// " \t\n\r"), numbers have bounded digits, and the top-level value has no whitespace around it,
// so that even a model that never "wants" to close a value reaches the end of the grammar; all of
// it is still ordinary JSON.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/generation/constraint.h"
#include "common/grammar/grammar.h"

namespace moe::grammar {

struct JsonGrammarOptions {
  // Whitespace characters allowed in a row between JSON tokens (0: compact JSON only).
  int32_t max_whitespace = 4;
  // Digits of an integer part (ranges are exact within it), a fraction, an exponent.
  int32_t max_integer_digits = 18;
  int32_t max_fraction_digits = 16;
  int32_t max_exponent_digits = 3;
  // Largest minItems / maxItems / minLength / maxLength honoured; larger ones are refused (each
  // unit costs automaton states).
  int32_t max_count = 2048;
};

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonGrammarOptions& options = {});
// Any JSON object (OpenAI's json_object mode).
Grammar JsonObjectGrammar(const JsonGrammarOptions& options = {});
// The grammar of any constraint kind. kInvalidArgument for kNone, or when the schema or pattern
// does not compile.
absl::StatusOr<Grammar> ConstraintToGrammar(const generation::Constraint& constraint,
                                            const JsonGrammarOptions& options = {});

}  // namespace moe::grammar
