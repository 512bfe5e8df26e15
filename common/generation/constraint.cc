#include "common/generation/constraint.h"

#include "absl/strings/str_cat.h"

namespace moe::generation {

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kNone:
      break;
  }
  return "none";
}

std::string Constraint::CacheKey() const {
  std::string key = absl::StrCat(ConstraintKindName(kind), ":");
  if (kind == ConstraintKind::kChoice) {
    // Length-prefixed, so that {"a,b"} and {"a", "b"} differ.
    for (const std::string& c : choices) absl::StrAppend(&key, c.size(), ":", c);
  } else {
    key += spec;
  }
  return key;
}

absl::Status Constraint::Validate() const {
  switch (kind) {
    case ConstraintKind::kNone:
    case ConstraintKind::kJsonObject:
      if (!spec.empty() || !choices.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constraint ", ConstraintKindName(kind), " takes no spec or choices"));
      }
      return absl::OkStatus();
    case ConstraintKind::kJsonSchema:
    case ConstraintKind::kRegex:
      if (spec.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constraint ", ConstraintKindName(kind), ": the ",
                         kind == ConstraintKind::kRegex ? "pattern" : "schema", " is empty"));
      }
      return absl::OkStatus();
    case ConstraintKind::kChoice:
      if (choices.empty()) return absl::InvalidArgumentError("constraint choice: no choices");
      for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i].empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("constraint choice: choice ", i, " is empty"));
        }
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("constraint: unknown kind");
}

}  // namespace moe::generation
