#include "common/config/loader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/file.h"
#include "yaml-cpp/yaml.h"

namespace moe::common::config {
namespace {

using internal::FieldBase;
using internal::JoinKey;
using internal::Quote;
using internal::SchemaBase;

std::string Where(absl::string_view source, const YAML::Mark& mark) {
  if (mark.is_null()) return std::string(source);
  return absl::StrCat(source, ":", mark.line + 1);
}

std::string ShowNode(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(n.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "null";
}

std::string Expected(const FieldBase& f) {
  std::string type = f.TypeName();
  if (type == "duration") type += " (with a unit: 10s, 250ms, 1m30s)";
  return type;
}

absl::Status UnknownKey(absl::string_view key, absl::string_view value, absl::string_view where,
                        absl::string_view prefix, const SchemaBase& schema) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown key ", Quote(key), " (value ", value, ") in ", where, "; keys",
                   prefix.empty() ? std::string() : absl::StrCat(" under ", Quote(prefix)), ": ",
                   schema.FieldNames()));
}

absl::Status BadValue(absl::string_view key, absl::string_view shown, const FieldBase& f,
                      absl::string_view where) {
  return absl::InvalidArgumentError(
      absl::StrCat(key, ": ", shown, " is not a valid ", Expected(f), " (in ", where, ")"));
}

absl::Status ApplyMap(const SchemaBase& schema, void* obj, const YAML::Node& map,
                      absl::string_view prefix, absl::string_view source) {
  for (const auto& entry : map) {
    // Copies (cheap handles): yaml-cpp's iterator yields a temporary pair, so references to
    // its members would dangle.
    const YAML::Node key_node = entry.first;
    const YAML::Node value = entry.second;
    const std::string where = Where(source, key_node.Mark());
    if (!key_node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat("a key under ", Quote(prefix), " is ",
                                                     ShowNode(key_node), " (in ", where, ")"));
    }
    const std::string key = JoinKey(prefix, key_node.Scalar());
    const FieldBase* f = schema.Find(key_node.Scalar());
    if (f == nullptr) return UnknownKey(key, ShowNode(value), where, prefix, schema);

    if (const SchemaBase* section = f->section()) {
      if (value.IsNull()) continue;
      if (!value.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": ", ShowNode(value), " is not a section (a mapping of ",
                         section->FieldNames(), ") (in ", where, ")"));
      }
      if (absl::Status s = ApplyMap(*section, f->SectionOf(obj), value, key, source); !s.ok()) {
        return s;
      }
    } else if (value.IsSequence()) {
      std::vector<std::string> items;
      for (const YAML::Node& item : value) {
        if (!item.IsScalar()) return BadValue(key, ShowNode(value), *f, where);
        items.push_back(item.Scalar());
      }
      if (!f->is_list()) return BadValue(key, "a list", *f, where);
      if (!f->SetFromItems(obj, items)) {
        return BadValue(key, absl::StrCat("[", absl::StrJoin(items, ", "), "]"), *f, where);
      }
    } else if (value.IsMap()) {
      return BadValue(key, "a mapping", *f, where);
    } else {
      const std::string text = value.IsNull() ? "" : value.Scalar();
      if (!f->SetFromText(obj, text)) return BadValue(key, ShowNode(value), *f, where);
    }
  }
  return absl::OkStatus();
}

void Emit(const SchemaBase& schema, const void* obj, YAML::Emitter& out) {
  out << YAML::BeginMap;
  for (const auto& f : schema.fields()) {
    out << YAML::Key << f->name() << YAML::Value;
    if (const SchemaBase* section = f->section()) {
      Emit(*section, f->SectionOf(obj), out);
    } else if (f->is_list()) {
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& item : f->FormatItems(obj)) out << item;
      out << YAML::EndSeq;
    } else {
      out << f->Format(obj);
    }
  }
  out << YAML::EndMap;
}

void Describe(const SchemaBase& schema, const void* obj, absl::string_view prefix,
              std::string* out) {
  for (const auto& f : schema.fields()) {
    const std::string key = JoinKey(prefix, f->name());
    if (const SchemaBase* section = f->section()) {
      Describe(*section, f->SectionOf(obj), key, out);
      continue;
    }
    absl::StrAppend(out, "  ", key, "  ", f->TypeName(), "  default ", Quote(f->Format(obj)));
    if (std::string c = f->ConstraintText(); !c.empty()) absl::StrAppend(out, "  ", c);
    if (!f->help().empty()) absl::StrAppend(out, "  ", f->help());
    out->append("\n");
  }
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv,
                                             std::span<const FlagAlias> aliases) {
  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", Quote(arg)));
    }
    absl::string_view name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != absl::string_view::npos) {
      value = std::string(name.substr(eq + 1));
      name = name.substr(0, eq);
    }
    if (name == "help" || name == "print_config") {
      if (value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      (name == "help" ? cl.help : cl.print_config) = true;
      continue;
    }
    const FlagAlias* alias = nullptr;
    for (const FlagAlias& a : aliases) {
      if (a.flag == name) alias = &a;
    }
    if (name != "config" && name != "set" && alias == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (name == "config") {
      cl.config_file = *value;
    } else if (name == "set") {
      cl.overrides.push_back(*value);
    } else {
      cl.overrides.push_back(absl::StrCat(alias->key, "=", *value));
    }
  }
  return cl;
}

namespace internal {

absl::Status ApplyYaml(const SchemaBase& schema, void* obj, absl::string_view yaml_text,
                       absl::string_view source) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    if (root.IsNull()) return absl::OkStatus();
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": the top level is ", ShowNode(root),
                                                     ", expected a mapping of keys"));
    }
    return ApplyMap(schema, obj, root, "", source);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": YAML error: ", e.msg));
  }
}

absl::Status ApplyYamlFile(const SchemaBase& schema, void* obj, const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("cannot read config file ", Quote(path)));
  return ApplyYaml(schema, obj, *text, path);
}

absl::Status ApplyOverride(const SchemaBase& schema, void* obj, absl::string_view assignment) {
  const std::string where = absl::StrCat("--set ", assignment);
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set expects key=value, got ", Quote(assignment)));
  }
  const std::string key(assignment.substr(0, eq));
  const absl::string_view text = assignment.substr(eq + 1);

  const SchemaBase* current = &schema;
  std::string prefix;
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldBase* f = current->Find(parts[i]);
    if (f == nullptr) return UnknownKey(key, Quote(text), where, prefix, *current);
    const bool last = i + 1 == parts.size();
    if (f->section() != nullptr) {
      if (last) {
        return absl::InvalidArgumentError(absl::StrCat(key, ": is a section, set one of its keys (",
                                                       f->section()->FieldNames(), ") in ", where));
      }
      obj = f->SectionOf(obj);
      current = f->section();
      prefix = JoinKey(prefix, parts[i]);
      continue;
    }
    if (!last) return UnknownKey(key, Quote(text), where, prefix, *current);
    if (!f->SetFromText(obj, text)) return BadValue(key, Quote(text), *f, where);
  }
  return absl::OkStatus();
}

std::string DumpYaml(const SchemaBase& schema, const void* obj) {
  YAML::Emitter out;
  Emit(schema, obj, out);
  return std::string(out.c_str()) + "\n";
}

std::string DescribeKeys(const SchemaBase& schema, const void* defaults) {
  std::string out;
  Describe(schema, defaults, "", &out);
  return out;
}

}  // namespace internal
}  // namespace moe::common::config
