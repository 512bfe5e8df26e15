#include "common/config/schema.h"

#include <charconv>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/base/check.h"

namespace moe::common::config::internal {

bool ParseBool(absl::string_view text, bool* out) {
  const absl::string_view t = text;
  for (const char* yes : {"true", "yes", "on", "1"}) {
    if (absl::EqualsIgnoreCase(t, yes)) {
      *out = true;
      return true;
    }
  }
  for (const char* no : {"false", "no", "off", "0"}) {
    if (absl::EqualsIgnoreCase(t, no)) {
      *out = false;
      return true;
    }
  }
  return false;
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  MOE_CHECK(ec == std::errc());
  return std::string(buf, end);
}

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

std::string JoinKey(absl::string_view prefix, absl::string_view key) {
  if (prefix.empty()) return std::string(key);
  return absl::StrCat(prefix, ".", key);
}

absl::Status PrefixKey(absl::string_view prefix, const absl::Status& status) {
  if (status.ok() || prefix.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, ".", status.message()));
}

const FieldBase* SchemaBase::Find(absl::string_view name) const {
  for (const auto& f : fields_) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

std::string SchemaBase::FieldNames() const {
  return absl::StrJoin(fields_, ", ", [](std::string* out, const std::unique_ptr<FieldBase>& f) {
    out->append(f->name());
  });
}

absl::Status SchemaBase::CheckAll(const void* obj, absl::string_view prefix) const {
  for (const auto& f : fields_) {
    if (absl::Status s = f->Check(obj, JoinKey(prefix, f->name())); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void SchemaBase::AddField(std::unique_ptr<FieldBase> field) {
  MOE_CHECK_MSG(!field->name().empty() && field->name().find('.') == std::string::npos &&
                    field->name().find('=') == std::string::npos,
                field->name().c_str());
  MOE_CHECK_MSG(Find(field->name()) == nullptr, ("duplicate config key " + field->name()).c_str());
  fields_.push_back(std::move(field));
}

}  // namespace moe::common::config::internal
