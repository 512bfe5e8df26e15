// Evaluator of the chat-template interpreter: walks the syntax tree with Jinja's semantics
// (Python values, `set` scoped to the enclosing loop iteration or macro, `namespace()` objects
// shared by reference, `loop.*` variables, macros as closures).
//
// One Interpreter renders one template once; it is not thread-safe, but any number of
// interpreters may render the same (immutable) tree concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/value.h"

namespace moe::chat_template::jinja {

struct EvalLimits {
  size_t max_output_bytes = 0;  // rendered text
  int64_t max_steps = 0;        // statements executed + loop iterations + calls
  int max_call_depth = 0;       // nested macro calls
};

struct Frame {
  ValueDict vars;
  std::shared_ptr<Frame> parent;
};

class Interpreter {
 public:
  // `clock` and `time_zone` serve strftime_now(); `clock` must outlive the interpreter.
  Interpreter(const EvalLimits& limits, common::Clock& clock, absl::TimeZone time_zone);

  // Renders `program` with `context` (a dict) as the template's variables.
  // Errors: kInvalidArgument with line:column for template errors and raise_exception(),
  // kResourceExhausted when a limit is hit.
  absl::StatusOr<std::string> Render(const StmtList& program, const ValueDict& context);

  // For built-ins.
  absl::StatusOr<Value> CallValue(const Value& fn, ValueList args, KwArgs kwargs);
  absl::Status CountStep();
  absl::Time Now() const { return clock_.Now(); }
  absl::TimeZone time_zone() const { return time_zone_; }

  // Runs a macro body (used by the macro Callable).
  absl::StatusOr<Value> RunMacro(const Stmt& macro, const std::shared_ptr<Frame>& closure,
                                 ValueList args, KwArgs kwargs, const Value& caller);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::StatusOr<Flow> ExecList(const StmtList& list, std::string* out);
  absl::StatusOr<Flow> Exec(const Stmt& s, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Stmt& s, std::string* out);
  absl::Status ExecSet(const Stmt& s);
  absl::Status Assign(const Expr& target, Value value);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalFilter(const Expr& e, const Value* placeholder_value);
  absl::StatusOr<Value> EvalTest(const Expr& e);
  absl::Status EvalArgs(const Expr& e, size_t first, ValueList* args, KwArgs* kwargs);

  Value Lookup(std::string_view name) const;
  absl::Status Append(std::string* out, std::string_view text);
  absl::Status At(const Expr& e, absl::Status s) const;
  absl::Status ErrorAt(const Expr& e, std::string_view msg) const;

  const EvalLimits limits_;
  common::Clock& clock_;
  const absl::TimeZone time_zone_;
  std::shared_ptr<Frame> frame_;
  // Frames captured by macros (a macro stored in the frame it closes over is a reference
  // cycle); their variables are cleared when the render ends.
  std::vector<std::shared_ptr<Frame>> captured_frames_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  size_t output_bytes_ = 0;
  // Value of the `_` placeholder while evaluating a filter block / block-set filter.
  const Value* placeholder_ = nullptr;
};

}  // namespace moe::chat_template::jinja
