#include "common/grammar/state_table.h"

#include <algorithm>
#include <utility>

namespace moe::grammar {

StateTable::StateTable(const Automaton& automaton, const StateTableOptions& options)
    : automaton_(automaton), options_(options) {}

int32_t StateTable::InternStack(Frame frame, int32_t parent) {
  const StackKey key{frame.rule, frame.state, parent};
  auto it = stack_ids_.find(key);
  if (it != stack_ids_.end()) return it->second;
  StackNode node;
  node.frame = frame;
  node.parent = parent;
  node.depth = parent < 0 ? 1 : stacks_[static_cast<size_t>(parent)].depth + 1;
  const RuleDfa& d = automaton_.rules()[static_cast<size_t>(frame.rule)];
  node.accepts = d.accepting[static_cast<size_t>(frame.state)] &&
                 (parent < 0 || stacks_[static_cast<size_t>(parent)].accepts);
  const int32_t id = static_cast<int32_t>(stacks_.size());
  stacks_.push_back(node);
  stack_ids_.emplace(key, id);
  return id;
}

int32_t StateTable::Normalize(int32_t stack) const {
  for (;;) {
    const StackNode& n = stacks_[static_cast<size_t>(stack)];
    if (n.parent < 0) return stack;
    const RuleDfa& d = automaton_.rules()[static_cast<size_t>(n.frame.rule)];
    const size_t s = static_cast<size_t>(n.frame.state);
    if (!d.accepting[s] || d.has_edges[s]) return stack;
    stack = n.parent;
  }
}

ConfigId StateTable::InternConfig(std::vector<int32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  auto it = config_ids_.find(stacks);
  if (it != config_ids_.end()) return it->second;
  bool accepting = false;
  for (int32_t s : stacks) accepting |= stacks_[static_cast<size_t>(s)].accepts;
  const ConfigId id = static_cast<ConfigId>(configs_.size());
  config_ids_.emplace(stacks, id);
  configs_.push_back(std::move(stacks));
  accepting_.push_back(accepting);
  can_continue_.push_back(-1);
  return id;
}

ConfigId StateTable::Initial() {
  const RuleDfa& root = automaton_.rules()[static_cast<size_t>(automaton_.root())];
  return InternConfig({Normalize(InternStack({automaton_.root(), root.start}, -1))});
}

void StateTable::StepStack(int32_t stack, uint8_t byte, std::vector<int32_t>* out) {
  // Exploring the same stack twice within one step adds nothing (nullable calls can lead back).
  if (std::find(visited_.begin(), visited_.end(), stack) != visited_.end()) return;
  visited_.push_back(stack);
  const StackNode n = stacks_[static_cast<size_t>(stack)];  // copy: interning may reallocate
  const RuleDfa& d = automaton_.rules()[static_cast<size_t>(n.frame.rule)];
  const int32_t next = automaton_.Next(n.frame.rule, n.frame.state, byte);
  if (next >= 0) out->push_back(Normalize(InternStack({n.frame.rule, next}, n.parent)));
  if (n.depth < options_.max_stack_depth) {
    for (const RuleCall& call : d.calls[static_cast<size_t>(n.frame.state)]) {
      const int32_t ret = InternStack({n.frame.rule, call.return_state}, n.parent);
      const RuleDfa& callee = automaton_.rules()[static_cast<size_t>(call.rule)];
      StepStack(InternStack({call.rule, callee.start}, ret), byte, out);
    }
  }
  if (d.accepting[static_cast<size_t>(n.frame.state)] && n.parent >= 0) {
    StepStack(n.parent, byte, out);
  }
}

ConfigId StateTable::Consume(ConfigId config, uint8_t byte) {
  const uint64_t key = (static_cast<uint64_t>(config) << 8) | byte;
  auto it = transitions_.find(key);
  if (it != transitions_.end()) return it->second;
  std::vector<int32_t> next;
  visited_.clear();
  // Copy: interning below may reallocate configs_.
  const std::vector<int32_t> stacks = configs_[static_cast<size_t>(config)];
  for (int32_t s : stacks) StepStack(s, byte, &next);
  const ConfigId out = next.empty() ? kDeadConfig : InternConfig(std::move(next));
  transitions_.emplace(key, out);
  return out;
}

bool StateTable::CanContinue(ConfigId config) {
  int8_t& known = can_continue_[static_cast<size_t>(config)];
  if (known >= 0) return known != 0;
  bool any = false;
  for (int32_t c = 0; c < automaton_.num_classes() && !any; ++c) {
    any = Consume(config, automaton_.class_representative(c)) != kDeadConfig;
  }
  can_continue_[static_cast<size_t>(config)] = any ? 1 : 0;
  return any;
}

bool StateTable::Full() const {
  return num_configs() > options_.max_configs || num_stacks() > 4 * options_.max_configs;
}

void StateTable::Reset() {
  stacks_.clear();
  stack_ids_.clear();
  configs_.clear();
  config_ids_.clear();
  accepting_.clear();
  can_continue_.clear();
  transitions_.clear();
}

StateTable::ConfigValue StateTable::Export(ConfigId config) const {
  ConfigValue value;
  for (int32_t s : configs_[static_cast<size_t>(config)]) {
    std::vector<Frame> frames;
    for (int32_t cur = s; cur >= 0; cur = stacks_[static_cast<size_t>(cur)].parent) {
      frames.push_back(stacks_[static_cast<size_t>(cur)].frame);
    }
    std::reverse(frames.begin(), frames.end());
    value.push_back(std::move(frames));
  }
  return value;
}

ConfigId StateTable::Import(const ConfigValue& value) {
  std::vector<int32_t> stacks;
  for (const std::vector<Frame>& frames : value) {
    int32_t parent = -1;
    for (const Frame& f : frames) parent = InternStack(f, parent);
    stacks.push_back(parent);
  }
  return InternConfig(std::move(stacks));
}

}  // namespace moe::grammar
