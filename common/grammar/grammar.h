// A byte-level context-free grammar: named rules whose bodies are regular expressions over bytes
// that may refer to other rules. Every constraint (JSON Schema, plain JSON, regex, choice)
// compiles to one of these (json_schema.h, regex.h); automaton.h compiles it further into one
// DFA per recursive rule, a pushdown automaton that the token masks are computed on.
//
// Expressions live in the grammar's pool and are referred to by ExprId; building never fails
// (Validate() checks the whole). Text is bytes: UTF-8 is spelled out with Codepoints().
//
//   Grammar g;
//   RuleId value = g.AddRule("value");
//   g.SetBody(value, g.Alt({g.Literal("null"), g.Seq({g.Byte('['), g.Ref(value), g.Byte(']')})}));
//   g.set_root(value);
//
// Thread-compatible; immutable once built.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace moe::grammar {

using ExprId = int32_t;
using RuleId = int32_t;
using ByteSet = std::bitset<256>;

struct Expr {
  enum class Kind : uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kRef };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;                 // kBytes: one byte of this set
  std::vector<ExprId> children;  // kSeq, kAlt: in order; kRepeat: exactly one
  int32_t min = 0;               // kRepeat: at least this many
  int32_t max = 0;               // kRepeat: at most this many; -1 = unbounded
  RuleId rule = -1;              // kRef
};

// A sorted list of disjoint, inclusive code point ranges.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

class Grammar {
 public:
  // A rule without a body yet (SetBody gives it one). Names are for messages and DebugString.
  RuleId AddRule(std::string name);
  void SetBody(RuleId rule, ExprId body);
  void set_root(RuleId rule) { root_ = rule; }

  ExprId Empty();
  ExprId Bytes(const ByteSet& bytes);  // one byte of `bytes` (an empty set matches nothing)
  ExprId Byte(uint8_t b);
  ExprId ByteRange(uint8_t lo, uint8_t hi);
  ExprId Literal(std::string_view text);  // these bytes in order
  ExprId Seq(std::vector<ExprId> parts);
  ExprId Alt(std::vector<ExprId> options);
  // `e` repeated min..max times (max -1: unbounded). REQUIRES: 0 <= min, max == -1 || max >= min.
  ExprId Repeat(ExprId e, int32_t min, int32_t max);
  ExprId Optional(ExprId e) { return Repeat(e, 0, 1); }
  ExprId Ref(RuleId rule);
  // One code point of `ranges`, UTF-8 encoded (surrogates D800-DFFF are never encoded).
  ExprId Codepoints(const CodepointRanges& ranges);

  const Expr& expr(ExprId id) const { return exprs_[static_cast<size_t>(id)]; }
  int64_t num_exprs() const { return static_cast<int64_t>(exprs_.size()); }
  int32_t num_rules() const { return static_cast<int32_t>(names_.size()); }
  const std::string& rule_name(RuleId r) const { return names_[static_cast<size_t>(r)]; }
  ExprId rule_body(RuleId r) const { return bodies_[static_cast<size_t>(r)]; }
  RuleId root() const { return root_; }

  // kInvalidArgument when the root is unset or a rule has no body or an id is out of range.
  absl::Status Validate() const;
  // One line per rule, EBNF-like: `value ::= ("null" | "[" value "]")`. For tests and messages.
  std::string DebugString() const;

 private:
  ExprId Add(Expr e);
  std::string ExprString(ExprId id) const;

  std::vector<Expr> exprs_;
  std::vector<std::string> names_;
  std::vector<ExprId> bodies_;
  RuleId root_ = -1;
};

// The UTF-8 byte-range sequences of code points [lo, hi] (surrogates skipped): each inner vector
// is one sequence of (lo byte, hi byte) ranges, as in RE2 / Rust regex-syntax. Exposed for tests.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi);

// Complement of `ranges` within [0, 0x10FFFF].
CodepointRanges NegateRanges(const CodepointRanges& ranges);
// Sorts and merges overlapping or adjacent ranges.
CodepointRanges NormalizeRanges(CodepointRanges ranges);

}  // namespace moe::grammar
