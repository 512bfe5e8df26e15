// The matching state space of one Automaton, built lazily and interned so that equal states have
// equal ids: a *stack* is a list of (rule, state) frames (the top one reads the next byte; each
// one below waits at its return state), a *configuration* is the set of stacks the bytes so far
// may have led to (usually one: the constraints here are nearly deterministic). Consume() steps a
// configuration by one byte and caches the answer, so that walking a token's bytes is a few hash
// lookups once warm, and token masks can be cached per configuration (compiled_grammar.h).
//
// Stepping a stack on byte b: the top frame's own edge on b; or, for each call at the top state,
// entering the callee (push) and stepping that; or, when the top state accepts, popping to the
// frame below and stepping it. A stack never grows past max_stack_depth frames (deeper nesting is
// not allowed by the mask). After a step, frames that have ended (accepting, nothing leaves them)
// are popped at once, so that finished sub-values do not tell configurations apart.
//
// Bounded: once more than max_configs configurations exist, Full() turns true and the owner
// Reset()s the table; configurations survive a reset as values (Export/Import).
//
// Thread-compatible: the owner serialises calls (CompiledGrammar holds a mutex).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/grammar/automaton.h"

namespace moe::grammar {

using ConfigId = int32_t;
inline constexpr ConfigId kDeadConfig = -1;

struct StateTableOptions {
  // Most (rule, state) frames on a stack: nesting deeper than this (recursive grammars such as
  // plain JSON) is never allowed. About two frames per JSON nesting level.
  int32_t max_stack_depth = 64;
  // Configurations interned before Full() (each costs ~100 bytes plus its cached transitions).
  int64_t max_configs = 1 << 17;
};

class StateTable {
 public:
  struct Frame {
    int32_t rule = 0;
    int32_t state = 0;
    bool operator==(const Frame& o) const { return rule == o.rule && state == o.state; }
  };
  // Stacks bottom first.
  using ConfigValue = std::vector<std::vector<Frame>>;

  // `automaton` must outlive the table.
  StateTable(const Automaton& automaton, const StateTableOptions& options);

  // The configuration before any byte.
  ConfigId Initial();
  // The configuration after `byte`, kDeadConfig when no stack can read it.
  ConfigId Consume(ConfigId config, uint8_t byte);
  // Some stack may end here (every frame of it in an accepting state).
  bool Accepting(ConfigId config) const { return accepting_[static_cast<size_t>(config)]; }
  // Some byte can be read next.
  bool CanContinue(ConfigId config);

  bool Full() const;
  void Reset();
  ConfigValue Export(ConfigId config) const;
  ConfigId Import(const ConfigValue& value);

  int64_t num_configs() const { return static_cast<int64_t>(configs_.size()); }
  int64_t num_stacks() const { return static_cast<int64_t>(stacks_.size()); }

 private:
  struct StackNode {
    Frame frame;
    int32_t parent = -1;  // -1: bottom
    int32_t depth = 1;
    bool accepts = false;  // this frame and every one below may end
  };
  struct StackKey {
    int32_t rule, state, parent;
    bool operator==(const StackKey& o) const {
      return rule == o.rule && state == o.state && parent == o.parent;
    }
    template <typename H>
    friend H AbslHashValue(H h, const StackKey& k) {
      return H::combine(std::move(h), k.rule, k.state, k.parent);
    }
  };

  int32_t InternStack(Frame frame, int32_t parent);
  // Pops ended frames.
  int32_t Normalize(int32_t stack) const;
  ConfigId InternConfig(std::vector<int32_t> stacks);
  void StepStack(int32_t stack, uint8_t byte, std::vector<int32_t>* out);

  const Automaton& automaton_;
  const StateTableOptions options_;

  std::vector<StackNode> stacks_;
  absl::flat_hash_map<StackKey, int32_t> stack_ids_;
  std::vector<std::vector<int32_t>> configs_;  // sorted stack ids
  absl::flat_hash_map<std::vector<int32_t>, ConfigId> config_ids_;
  std::vector<uint8_t> accepting_;                       // [configs]
  std::vector<int8_t> can_continue_;                     // [configs]: -1 unknown
  absl::flat_hash_map<uint64_t, ConfigId> transitions_;  // (config << 8 | byte) -> next
  // StepStack scratch.
  std::vector<int32_t> visited_;
};

}  // namespace moe::grammar
