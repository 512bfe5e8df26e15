// Describe an Options struct's fields once; the binder (loader.h) then loads YAML into it, applies
// `--set key.sub=value` overrides, checks ranges and dumps the effective config from that one list.
//
//   struct ServerOptions {
//     std::string host = "0.0.0.0";                      // Address to bind.
//     int port = 0;                                      // 0 picks a free port.
//     absl::Duration drain_timeout = absl::Seconds(10);  // Grace for in-flight RPCs on shutdown.
//     TlsOptions tls;                                    // A nested section: `tls.cert_file`.
//
//     static void Describe(config::Schema<ServerOptions>& s) {
//       s.Add("host", &ServerOptions::host).NonEmpty();
//       s.Add("port", &ServerOptions::port).Range(0, 65535);
//       s.Add("drain_timeout", &ServerOptions::drain_timeout).Min(absl::ZeroDuration());
//       s.Section("tls", &ServerOptions::tls);
//     }
//     absl::Status Validate() const { return config::CheckFields(*this); }
//   };
//
// Supported field types: bool, integers, float/double, std::string, absl::Duration ("10s",
// "250ms"), enums (AddEnum with their names), std::vector of those, and nested sections (any
// struct with a static Describe).
//
// Error convention: every message starts with the offending key and names the value
// (`port: 70000 is out of range [0, 65535]`). A section prefixes the messages of its fields
// (`grpc.port: ...`), so a struct's own cross-field checks in Validate() should start with a key
// too.
//
// Thread-safety: a Schema is built once per type (SchemaOf) and immutable afterwards.
#pragma once

#include <concepts>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/config/value_codec.h"

namespace moe::common::config {

template <typename O>
class Schema;

template <typename T>
concept Describable = requires(Schema<T>& s) {
  T::Describe(s);
};

template <typename T>
concept HasValidate = requires(const T& t) {
  { t.Validate() } -> std::convertible_to<absl::Status>;
};

namespace internal {

class SchemaBase;

// `"text"` with C escapes, for error messages.
std::string Quote(absl::string_view text);
// `prefix.key` (or `key` when prefix is empty).
std::string JoinKey(absl::string_view prefix, absl::string_view key);
// Prepends `prefix.` to the message of a non-OK status (keeps the code).
absl::Status PrefixKey(absl::string_view prefix, const absl::Status& status);

// One described field, type-erased so the YAML/flag binder is written once (loader.cc).
// `obj` always points at the struct whose Schema holds this field.
class FieldBase {
 public:
  explicit FieldBase(absl::string_view name, absl::string_view help) : name_(name), help_(help) {}
  virtual ~FieldBase() = default;
  FieldBase(const FieldBase&) = delete;
  FieldBase& operator=(const FieldBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  // "int32", "duration", "list<string>", "one of a|b", "section".
  virtual std::string TypeName() const = 0;
  // Constraints in words ("range [0, 65535], non-empty"), or "".
  virtual std::string ConstraintText() const { return ""; }

  // Non-null for a nested section.
  virtual const SchemaBase* section() const { return nullptr; }
  virtual void* SectionOf(void* obj) const { return nullptr; }
  virtual const void* SectionOf(const void* obj) const { return nullptr; }

  // Whether a YAML sequence is accepted (list fields).
  virtual bool is_list() const { return false; }
  // Parses `text` into the field. Returns false when `text` is not a value of this type.
  virtual bool SetFromText(void* obj, absl::string_view text) const = 0;
  // Parses a YAML sequence into a list field.
  virtual bool SetFromItems(void* obj, const std::vector<std::string>& items) const {
    return false;
  }
  // The current value as text (lists comma-separated), and its items for a list field.
  virtual std::string Format(const void* obj) const = 0;
  virtual std::vector<std::string> FormatItems(const void* obj) const { return {}; }

  // Range and other constraints; `key` is the field's full key, used to start the message.
  virtual absl::Status Check(const void* obj, absl::string_view key) const = 0;

 private:
  std::string name_;
  std::string help_;
};

class SchemaBase {
 public:
  SchemaBase() = default;
  SchemaBase(const SchemaBase&) = delete;
  SchemaBase& operator=(const SchemaBase&) = delete;

  // nullptr when there is no field `name` (a plain name, not a dotted key).
  const FieldBase* Find(absl::string_view name) const;
  const std::vector<std::unique_ptr<FieldBase>>& fields() const { return fields_; }
  // "host, port, tls" for "unknown key" messages.
  std::string FieldNames() const;
  // Runs every field's Check (and nested sections' Validate) with keys under `prefix`.
  absl::Status CheckAll(const void* obj, absl::string_view prefix) const;

 protected:
  // CHECK-fails on a duplicate or dotted name: a programming error in a Describe().
  void AddField(std::unique_ptr<FieldBase> field);

 private:
  std::vector<std::unique_ptr<FieldBase>> fields_;
};

template <typename O, typename V>
class TypedField : public FieldBase {
 public:
  TypedField(absl::string_view name, absl::string_view help, V O::*member)
      : FieldBase(name, help), member_(member) {}

 protected:
  V& Get(void* obj) const { return static_cast<O*>(obj)->*member_; }
  const V& Get(const void* obj) const { return static_cast<const O*>(obj)->*member_; }

 private:
  V O::*member_;
};

}  // namespace internal

// The Schema of `O`, built on first use from O::Describe.
template <Describable O>
const Schema<O>& SchemaOf() {
  static const Schema<O>* const schema = [] {
    auto* s = new Schema<O>();
    O::Describe(*s);
    return s;
  }();
  return *schema;
}

// Range and other constraints on the fields of `opts` (and Validate() of its sections).
// The usual body of an Options::Validate(), before any cross-field checks.
template <Describable O>
absl::Status CheckFields(const O& opts) {
  return SchemaOf<O>().CheckAll(&opts, "");
}

// A scalar or list field. Min/Max/Range/Require apply to each element of a list.
template <typename O, typename V>
class Field final : public internal::TypedField<O, V> {
  using Codec = internal::Codec<V>;
  static constexpr bool kIsList = internal::ElemOf<V>::kIsList;
  using Elem = typename internal::ElemOf<V>::type;
  using ElemCodec = internal::Codec<Elem>;

 public:
  using internal::TypedField<O, V>::TypedField;

  Field& Min(Elem lo) {
    min_ = std::move(lo);
    return *this;
  }
  Field& Max(Elem hi) {
    max_ = std::move(hi);
    return *this;
  }
  Field& Range(Elem lo, Elem hi) { return Min(std::move(lo)).Max(std::move(hi)); }
  // For strings and lists: the empty value is rejected.
  Field& NonEmpty() {
    non_empty_ = true;
    return *this;
  }
  // An extra predicate; `what` completes "<key>: <value> <what>", e.g. "is not a power of two".
  Field& Require(std::function<bool(const Elem&)> ok, std::string what) {
    requires_.push_back({std::move(ok), std::move(what)});
    return *this;
  }

  // internal::FieldBase
  std::string TypeName() const override { return Codec::TypeName(); }
  std::string ConstraintText() const override {
    std::string out = RangeText();
    if (non_empty_) absl::StrAppend(&out, out.empty() ? "" : ", ", "non-empty");
    return out;
  }
  bool is_list() const override { return kIsList; }
  bool SetFromText(void* obj, absl::string_view text) const override {
    return Codec::Parse(text, &this->Get(obj));
  }
  bool SetFromItems(void* obj, const std::vector<std::string>& items) const override {
    if constexpr (kIsList) {
      return Codec::ParseItems(items, &this->Get(obj));
    } else {
      return false;
    }
  }
  std::string Format(const void* obj) const override { return Codec::Format(this->Get(obj)); }
  std::vector<std::string> FormatItems(const void* obj) const override {
    std::vector<std::string> out;
    if constexpr (kIsList) {
      for (const Elem& e : this->Get(obj)) out.push_back(ElemCodec::Format(e));
    }
    return out;
  }
  absl::Status Check(const void* obj, absl::string_view key) const override {
    const V& v = this->Get(obj);
    if constexpr (requires { v.empty(); }) {
      if (non_empty_ && v.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(key, ": must not be empty"));
      }
    }
    if constexpr (kIsList) {
      for (const Elem& e : v) {
        if (absl::Status s = CheckElem(e, key); !s.ok()) return s;
      }
      return absl::OkStatus();
    } else {
      return CheckElem(v, key);
    }
  }

 private:
  struct Requirement {
    std::function<bool(const Elem&)> ok;
    std::string what;
  };

  std::string RangeText() const {
    if (min_ && max_) {
      return absl::StrCat("[", ElemCodec::Format(*min_), ", ", ElemCodec::Format(*max_), "]");
    }
    if (min_) return absl::StrCat(">= ", ElemCodec::Format(*min_));
    if (max_) return absl::StrCat("<= ", ElemCodec::Format(*max_));
    return "";
  }
  absl::Status CheckElem(const Elem& e, absl::string_view key) const {
    if ((min_ && e < *min_) || (max_ && *max_ < e)) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": ", ShowValue(e), " is out of range ", RangeText()));
    }
    for (const Requirement& r : requires_) {
      if (!r.ok(e))
        return absl::InvalidArgumentError(absl::StrCat(key, ": ", ShowValue(e), " ", r.what));
    }
    return absl::OkStatus();
  }
  static std::string ShowValue(const Elem& e) {
    if constexpr (std::is_same_v<Elem, std::string>) {
      return internal::Quote(e);
    } else {
      return ElemCodec::Format(e);
    }
  }

  std::optional<Elem> min_;
  std::optional<Elem> max_;
  bool non_empty_ = false;
  std::vector<Requirement> requires_;
};

// An enum field, written by name in YAML and flags.
template <typename O, typename E>
class EnumField final : public internal::TypedField<O, E> {
 public:
  EnumField(absl::string_view name, absl::string_view help, E O::*member,
            std::vector<std::pair<std::string, E>> names)
      : internal::TypedField<O, E>(name, help, member), names_(std::move(names)) {}

  // internal::FieldBase
  std::string TypeName() const override {
    std::string out = "one of ";
    for (size_t i = 0; i < names_.size(); ++i) absl::StrAppend(&out, i ? "|" : "", names_[i].first);
    return out;
  }
  bool SetFromText(void* obj, absl::string_view text) const override {
    for (const auto& [name, value] : names_) {
      if (name == text) {
        this->Get(obj) = value;
        return true;
      }
    }
    return false;
  }
  std::string Format(const void* obj) const override {
    const E v = this->Get(obj);
    for (const auto& [name, value] : names_) {
      if (value == v) return name;
    }
    return absl::StrCat("<unnamed ", static_cast<long long>(v), ">");
  }
  absl::Status Check(const void* obj, absl::string_view key) const override {
    const E v = this->Get(obj);
    for (const auto& entry : names_) {
      if (entry.second == v) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", Format(obj), " is not ", TypeName()));
  }

 private:
  std::vector<std::pair<std::string, E>> names_;
};

// A nested Options struct: its keys are `name.<field>`. Checked with its own Validate() when it
// has one (else CheckFields), messages prefixed with `name.`.
template <typename O, Describable S>
class SectionField final : public internal::TypedField<O, S> {
 public:
  using internal::TypedField<O, S>::TypedField;

  // internal::FieldBase
  std::string TypeName() const override { return "section"; }
  const internal::SchemaBase* section() const override { return &SchemaOf<S>(); }
  void* SectionOf(void* obj) const override { return &this->Get(obj); }
  const void* SectionOf(const void* obj) const override { return &this->Get(obj); }
  bool SetFromText(void* obj, absl::string_view text) const override { return false; }
  std::string Format(const void* obj) const override { return ""; }
  absl::Status Check(const void* obj, absl::string_view key) const override {
    const S& sub = this->Get(obj);
    if constexpr (HasValidate<S>) {
      return internal::PrefixKey(key, sub.Validate());
    } else {
      return SchemaOf<S>().CheckAll(&sub, key);
    }
  }
};

template <typename O>
class Schema final : public internal::SchemaBase {
 public:
  template <typename V>
  Field<O, V>& Add(absl::string_view name, V O::*member, absl::string_view help = "") {
    auto field = std::make_unique<Field<O, V>>(name, help, member);
    Field<O, V>& ref = *field;
    AddField(std::move(field));
    return ref;
  }

  template <typename E>
  EnumField<O, E>& AddEnum(absl::string_view name, E O::*member,
                           std::initializer_list<std::pair<absl::string_view, E>> names,
                           absl::string_view help = "") {
    std::vector<std::pair<std::string, E>> owned;
    for (const auto& [n, v] : names) owned.emplace_back(std::string(n), v);
    auto field = std::make_unique<EnumField<O, E>>(name, help, member, std::move(owned));
    EnumField<O, E>& ref = *field;
    AddField(std::move(field));
    return ref;
  }

  template <Describable S>
  void Section(absl::string_view name, S O::*member, absl::string_view help = "") {
    AddField(std::make_unique<SectionField<O, S>>(name, help, member));
  }
};

}  // namespace moe::common::config
