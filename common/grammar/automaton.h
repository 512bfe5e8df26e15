// A Grammar compiled for matching: a recursive transition network. Rules that are not recursive
// are inlined into the rules that use them; each remaining rule (the root and every rule on a
// reference cycle, such as plain JSON's `value`) becomes one DFA over byte classes whose states
// may also "call" another rule: run that rule's DFA from its start to an accepting state, then
// continue at the call's return state. Matching therefore keeps a stack of (rule, state) frames
// (state_table.h); a grammar without recursion is a single DFA and its stack never grows.
//
// Construction: Thompson NFA per rule, then subset construction. Bytes that no expression tells
// apart share a class, so a DFA row has num_classes() entries instead of 256. A rule that may
// match nothing also gets an epsilon edge beside each call to it. Left recursion (a rule that can
// call itself before reading a byte, e.g. the schema {"$ref": "#"}) is rejected.
//
// Thread-safe: immutable after Compile().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace moe::grammar {

struct AutomatonLimits {
  // Beyond these the constraint is refused (kInvalidArgument, "too complex"): they bound the
  // memory and compile time one request can cost. DFA states cost num_classes() * 4 bytes each.
  int64_t max_nfa_states = 1 << 20;
  int64_t max_dfa_states = 1 << 17;
};

struct RuleCall {
  int32_t rule = 0;          // index into Automaton::rules()
  int32_t return_state = 0;  // state of the calling rule once the callee has matched
};

struct RuleDfa {
  std::string name;
  int32_t start = 0;
  int32_t num_states = 0;
  std::vector<int32_t> next;                 // [num_states, num_classes]; -1: no edge
  std::vector<uint8_t> accepting;            // [num_states]: the rule may end here
  std::vector<uint8_t> has_edges;            // [num_states]: some byte edge or call leaves it
  std::vector<std::vector<RuleCall>> calls;  // [num_states]
};

class Automaton {
 public:
  // kInvalidArgument when the grammar is malformed, left-recursive, or past `limits`.
  static absl::StatusOr<std::shared_ptr<const Automaton>> Compile(
      const Grammar& grammar, const AutomatonLimits& limits = {});

  int32_t root() const { return root_; }
  const std::vector<RuleDfa>& rules() const { return rules_; }
  int32_t num_classes() const { return num_classes_; }
  uint8_t byte_class(uint8_t byte) const { return byte_class_[byte]; }
  // A byte of class `c` (the smallest).
  uint8_t class_representative(int32_t c) const { return representative_[static_cast<size_t>(c)]; }
  // State reached from `state` of rule `rule` on `byte`, -1 when there is no edge.
  int32_t Next(int32_t rule, int32_t state, uint8_t byte) const {
    const RuleDfa& d = rules_[static_cast<size_t>(rule)];
    return d
        .next[static_cast<size_t>(state) * static_cast<size_t>(num_classes_) + byte_class_[byte]];
  }
  int64_t num_states() const { return num_states_; }
  // Approximate heap bytes of the tables.
  int64_t memory_bytes() const;

 private:
  Automaton() = default;
  friend class AutomatonBuilder;

  int32_t root_ = 0;
  std::vector<RuleDfa> rules_;
  int32_t num_classes_ = 0;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<uint8_t> representative_;
  int64_t num_states_ = 0;
};

}  // namespace moe::grammar
