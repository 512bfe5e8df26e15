#include "common/grammar/automaton.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace moe::grammar {

// Builds an Automaton from a Grammar; one use.
class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const AutomatonLimits& limits) : g_(g), limits_(limits) {}

  absl::StatusOr<std::shared_ptr<const Automaton>> Build() {
    if (absl::Status s = g_.Validate(); !s.ok()) return s;
    out_.reset(new Automaton());
    ComputeByteClasses();
    ComputeNullable();
    ChooseKeptRules();
    // Rule DFAs are numbered in kept order; the root is first.
    for (size_t k = 0; k < kept_.size(); ++k) {
      const RuleId r = kept_[k];
      const int32_t start = NewState();
      const int32_t end = BuildExpr(g_.rule_body(r), start, 0);
      if (!error_.ok()) return error_;
      nfa_rule_start_.push_back(start);
      nfa_rule_end_.push_back(end);
    }
    for (size_t k = 0; k < kept_.size(); ++k) {
      if (absl::Status s = Determinize(static_cast<int32_t>(k)); !s.ok()) return s;
    }
    if (absl::Status s = CheckLeftRecursion(); !s.ok()) return s;
    out_->root_ = 0;
    return std::shared_ptr<const Automaton>(std::move(out_));
  }

 private:
  struct NfaState {
    std::vector<std::pair<int32_t, int32_t>> byte_edges;  // (byte set index, target)
    std::vector<int32_t> eps;
    std::vector<std::pair<int32_t, int32_t>> calls;  // (kept rule index, target)
  };

  int32_t NewState() {
    if (static_cast<int64_t>(nfa_.size()) >= limits_.max_nfa_states) {
      if (error_.ok()) {
        error_ = absl::InvalidArgumentError(
            absl::StrCat("the constraint is too complex: more than ", limits_.max_nfa_states,
                         " automaton states (simplify the schema or pattern)"));
      }
      return 0;
    }
    nfa_.emplace_back();
    return static_cast<int32_t>(nfa_.size() - 1);
  }

  void ComputeByteClasses() {
    std::array<int32_t, 256> cls{};
    int32_t n = 1;
    absl::flat_hash_set<std::string> seen;
    for (int64_t i = 0; i < g_.num_exprs(); ++i) {
      const Expr& e = g_.expr(static_cast<ExprId>(i));
      if (e.kind != Expr::Kind::kBytes) continue;
      if (!seen.insert(e.bytes.to_string()).second) continue;
      std::map<std::pair<int32_t, bool>, int32_t> remap;
      for (int b = 0; b < 256; ++b) {
        auto [it, inserted] = remap.emplace(std::make_pair(cls[b], static_cast<bool>(e.bytes[b])),
                                            static_cast<int32_t>(remap.size()));
        cls[b] = it->second;
      }
      n = static_cast<int32_t>(remap.size());
    }
    // Number classes by their smallest byte, so that the numbering is canonical.
    std::vector<int32_t> renumber(static_cast<size_t>(n), -1);
    int32_t next = 0;
    for (int b = 0; b < 256; ++b) {
      if (renumber[cls[b]] < 0) {
        renumber[cls[b]] = next++;
        out_->representative_.push_back(static_cast<uint8_t>(b));
      }
      out_->byte_class_[b] = static_cast<uint8_t>(renumber[cls[b]]);
    }
    out_->num_classes_ = next;
  }

  bool ExprNullable(ExprId id) const {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return true;
      case Expr::Kind::kBytes:
        return false;
      case Expr::Kind::kSeq:
        return std::all_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return ExprNullable(c); });
      case Expr::Kind::kAlt:
        return std::any_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return ExprNullable(c); });
      case Expr::Kind::kRepeat:
        return e.min == 0 || ExprNullable(e.children[0]);
      case Expr::Kind::kRef:
        return nullable_[static_cast<size_t>(e.rule)];
    }
    return false;
  }

  void ComputeNullable() {
    nullable_.assign(static_cast<size_t>(g_.num_rules()), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (RuleId r = 0; r < g_.num_rules(); ++r) {
        if (!nullable_[r] && ExprNullable(g_.rule_body(r))) {
          nullable_[r] = true;
          changed = true;
        }
      }
    }
  }

  void CollectRefs(ExprId id, std::vector<RuleId>* out) const {
    const Expr& e = g_.expr(id);
    if (e.kind == Expr::Kind::kRef) out->push_back(e.rule);
    for (ExprId c : e.children) CollectRefs(c, out);
  }

  // Kept rules: the root, and every rule on a reference cycle (Tarjan's SCCs).
  void ChooseKeptRules() {
    const int32_t n = g_.num_rules();
    std::vector<std::vector<RuleId>> refs(static_cast<size_t>(n));
    for (RuleId r = 0; r < n; ++r) CollectRefs(g_.rule_body(r), &refs[r]);
    std::vector<int32_t> index(static_cast<size_t>(n), -1), low(static_cast<size_t>(n), 0);
    std::vector<bool> on_stack(static_cast<size_t>(n), false),
        cyclic(static_cast<size_t>(n), false);
    std::vector<RuleId> stack;
    int32_t counter = 0;
    // Iterative Tarjan: (rule, next ref position).
    for (RuleId s = 0; s < n; ++s) {
      if (index[s] >= 0) continue;
      std::vector<std::pair<RuleId, size_t>> work{{s, 0}};
      index[s] = low[s] = counter++;
      stack.push_back(s);
      on_stack[s] = true;
      while (!work.empty()) {
        auto& [v, pos] = work.back();
        if (pos < refs[v].size()) {
          const RuleId w = refs[v][pos++];
          if (index[w] < 0) {
            index[w] = low[w] = counter++;
            stack.push_back(w);
            on_stack[w] = true;
            work.emplace_back(w, 0);
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          std::vector<RuleId> scc;
          RuleId w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            scc.push_back(w);
          } while (w != v);
          const bool self_loop = std::find(refs[v].begin(), refs[v].end(), v) != refs[v].end();
          if (scc.size() > 1 || self_loop) {
            for (RuleId x : scc) cyclic[x] = true;
          }
        }
        const RuleId done = v;
        work.pop_back();
        if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
      }
    }
    kept_index_.assign(static_cast<size_t>(n), -1);
    kept_.push_back(g_.root());
    kept_index_[g_.root()] = 0;
    for (RuleId r = 0; r < n; ++r) {
      if (cyclic[r] && kept_index_[r] < 0) {
        kept_index_[r] = static_cast<int32_t>(kept_.size());
        kept_.push_back(r);
      }
    }
  }

  int32_t ByteSetIndex(const ByteSet& s) {
    auto [it, inserted] = byte_set_ids_.emplace(s.to_string(), static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(s);
    return it->second;
  }

  // Adds the NFA of `id` starting at `from`; returns its end state.
  int32_t BuildExpr(ExprId id, int32_t from, int depth) {
    if (!error_.ok()) return from;
    if (depth > 100000) {
      error_ = absl::InvalidArgumentError("the constraint is nested too deeply");
      return from;
    }
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return from;
      case Expr::Kind::kBytes: {
        const int32_t to = NewState();
        if (e.bytes.any()) nfa_[from].byte_edges.emplace_back(ByteSetIndex(e.bytes), to);
        return to;
      }
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (ExprId c : e.children) cur = BuildExpr(c, cur, depth + 1);
        return cur;
      }
      case Expr::Kind::kAlt: {
        const int32_t end = NewState();
        for (ExprId c : e.children) {
          const int32_t s = NewState();
          nfa_[from].eps.push_back(s);
          const int32_t t = BuildExpr(c, s, depth + 1);
          nfa_[t].eps.push_back(end);
        }
        return end;
      }
      case Expr::Kind::kRepeat: {
        int32_t cur = from;
        for (int32_t i = 0; i < e.min && error_.ok(); ++i) {
          cur = BuildExpr(e.children[0], cur, depth + 1);
        }
        if (e.max < 0) {
          const int32_t loop = NewState();
          nfa_[cur].eps.push_back(loop);
          const int32_t t = BuildExpr(e.children[0], loop, depth + 1);
          nfa_[t].eps.push_back(loop);
          return loop;
        }
        const int32_t end = NewState();
        for (int32_t i = e.min; i < e.max && error_.ok(); ++i) {
          nfa_[cur].eps.push_back(end);
          cur = BuildExpr(e.children[0], cur, depth + 1);
        }
        nfa_[cur].eps.push_back(end);
        return end;
      }
      case Expr::Kind::kRef: {
        const int32_t k = kept_index_[e.rule];
        if (k < 0) return BuildExpr(g_.rule_body(e.rule), from, depth + 1);  // inlined
        const int32_t to = NewState();
        nfa_[from].calls.emplace_back(k, to);
        if (nullable_[e.rule]) nfa_[from].eps.push_back(to);
        return to;
      }
    }
    return from;
  }

  void Closure(std::vector<int32_t>* states) const {
    std::vector<int32_t> work = *states;
    absl::flat_hash_set<int32_t> seen(states->begin(), states->end());
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      for (int32_t t : nfa_[s].eps) {
        if (seen.insert(t).second) {
          work.push_back(t);
          states->push_back(t);
        }
      }
    }
    std::sort(states->begin(), states->end());
  }

  absl::Status Determinize(int32_t k) {
    RuleDfa dfa;
    dfa.name = g_.rule_name(kept_[k]);
    const int32_t nc = out_->num_classes_;
    const int32_t accept = nfa_rule_end_[k];
    absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> sets;
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      Closure(&set);
      auto [it, inserted] = ids.emplace(set, static_cast<int32_t>(sets.size()));
      if (inserted) sets.push_back(std::move(set));
      return it->second;
    };
    dfa.start = intern({nfa_rule_start_[k]});
    for (size_t i = 0; i < sets.size(); ++i) {
      if (out_->num_states_ + static_cast<int64_t>(sets.size()) > limits_.max_dfa_states) {
        return absl::InvalidArgumentError(
            absl::StrCat("the constraint is too complex: more than ", limits_.max_dfa_states,
                         " automaton states (simplify the schema or pattern)"));
      }
      const std::vector<int32_t> set = sets[i];  // copy: intern() may grow `sets`
      dfa.next.resize((i + 1) * static_cast<size_t>(nc), -1);
      bool accepting = false;
      for (int32_t s : set) accepting |= s == accept;
      dfa.accepting.push_back(accepting);
      bool edges = false;
      for (int32_t c = 0; c < nc; ++c) {
        const uint8_t rep = out_->representative_[static_cast<size_t>(c)];
        std::vector<int32_t> targets;
        for (int32_t s : set) {
          for (const auto& [set_index, t] : nfa_[s].byte_edges) {
            if (sets_[set_index][rep]) targets.push_back(t);
          }
        }
        if (targets.empty()) continue;
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        const int32_t to = intern(std::move(targets));
        dfa.next[i * static_cast<size_t>(nc) + static_cast<size_t>(c)] = to;
        edges = true;
      }
      std::map<int32_t, std::vector<int32_t>> by_rule;
      for (int32_t s : set) {
        for (const auto& [rule, t] : nfa_[s].calls) by_rule[rule].push_back(t);
      }
      std::vector<RuleCall> calls;
      for (auto& [rule, targets] : by_rule) {
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        calls.push_back({rule, intern(std::move(targets))});
      }
      edges |= !calls.empty();
      dfa.has_edges.push_back(edges);
      dfa.calls.push_back(std::move(calls));
    }
    dfa.num_states = static_cast<int32_t>(sets.size());
    out_->num_states_ += dfa.num_states;
    out_->rules_.push_back(std::move(dfa));
    return absl::OkStatus();
  }

  // A rule may not reach a call of itself without reading a byte: matching would never end.
  absl::Status CheckLeftRecursion() const {
    const size_t n = out_->rules_.size();
    std::vector<std::vector<int32_t>> first(n);
    for (size_t k = 0; k < n; ++k) {
      const RuleDfa& d = out_->rules_[k];
      for (const RuleCall& c : d.calls[static_cast<size_t>(d.start)]) first[k].push_back(c.rule);
    }
    std::vector<int> color(n, 0);  // 0 new, 1 on path, 2 done
    for (size_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      std::vector<std::pair<int32_t, size_t>> work{{static_cast<int32_t>(s), 0}};
      color[s] = 1;
      while (!work.empty()) {
        auto& [v, pos] = work.back();
        if (pos < first[v].size()) {
          const int32_t w = first[v][pos++];
          if (color[w] == 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "the constraint refers to itself before producing any output (left recursion "
                "through '",
                out_->rules_[w].name, "')"));
          }
          if (color[w] == 0) {
            color[w] = 1;
            work.emplace_back(w, 0);
          }
          continue;
        }
        color[v] = 2;
        work.pop_back();
      }
    }
    return absl::OkStatus();
  }

  const Grammar& g_;
  const AutomatonLimits limits_;
  std::unique_ptr<Automaton> out_;
  absl::Status error_;
  std::vector<bool> nullable_;
  std::vector<RuleId> kept_;         // kept rule index -> grammar rule
  std::vector<int32_t> kept_index_;  // grammar rule -> kept index, -1 inlined
  std::vector<NfaState> nfa_;
  std::vector<ByteSet> sets_;
  absl::flat_hash_map<std::string, int32_t> byte_set_ids_;
  std::vector<int32_t> nfa_rule_start_, nfa_rule_end_;
};

absl::StatusOr<std::shared_ptr<const Automaton>> Automaton::Compile(const Grammar& grammar,
                                                                    const AutomatonLimits& limits) {
  return AutomatonBuilder(grammar, limits).Build();
}

int64_t Automaton::memory_bytes() const {
  int64_t bytes = 0;
  for (const RuleDfa& d : rules_) {
    bytes += static_cast<int64_t>(d.next.size() * sizeof(int32_t) + d.accepting.size() * 2);
    for (const auto& c : d.calls) bytes += static_cast<int64_t>(c.size() * sizeof(RuleCall) + 24);
  }
  return bytes;
}

}  // namespace moe::grammar
