// Built-ins of the chat-template interpreter: filters, tests, methods of str/dict/list values,
// and the globals (range, namespace, raise_exception, strftime_now, dict, joiner-free subset).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/chat_template/eval.h"
#include "common/chat_template/value.h"

namespace moe::chat_template::jinja {

// `operand | name(args, kwargs)`. kInvalidArgument for an unknown filter or bad arguments.
absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, Value operand,
                                  ValueList args, KwArgs kwargs);

// `operand is name(args)`. kInvalidArgument for an unknown test.
absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& operand,
                               const ValueList& args);

// Whether a filter / test of that name exists (the parser rejects unknown ones, as Jinja does
// when it compiles a template).
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// `object.name` for a Python method of a str, dict or list: a bound callable, or undefined.
Value GetMethod(const Value& object, std::string_view name);

// The global functions every render starts with.
ValueDict MakeGlobals();

// The error of a built-in called wrongly (kInvalidArgument).
inline absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

// Python str.strip/lstrip/rstrip: `chars` null strips Unicode whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace moe::chat_template::jinja
