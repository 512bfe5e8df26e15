#include "services/gateway/core/tool_calls.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/hash.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {
namespace {

using OrderedJson = nlohmann::ordered_json;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The pieces of `s` between occurrences of `sep` (empty pieces kept).
std::vector<std::string_view> Split(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t p; (p = s.find(sep, start)) != std::string_view::npos; start = p + sep.size()) {
    out.push_back(s.substr(start, p - start));
  }
  out.push_back(s.substr(start));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Renames a function's $defs / definitions to "<prefix><name>" and rewrites its local $refs so
// that the schema can sit under "$defs/<prefix>" of a larger document ("#" -> the function).
void Relocate(OrderedJson& node, const std::string& prefix, OrderedJson& defs, bool root) {
  if (node.is_array()) {
    for (OrderedJson& x : node) Relocate(x, prefix, defs, false);
    return;
  }
  if (!node.is_object()) return;
  if (auto ref = node.find("$ref"); ref != node.end() && ref->is_string()) {
    std::string r = ref->get<std::string>();
    if (r == "#") {
      *ref = absl::StrCat("#/$defs/", prefix);
    } else if (r.starts_with("#/$defs/")) {
      *ref = absl::StrCat("#/$defs/", prefix, "_", r.substr(8));
    } else if (r.starts_with("#/definitions/")) {
      *ref = absl::StrCat("#/$defs/", prefix, "_", r.substr(14));
    }
  }
  for (const char* key : {"$defs", "definitions"}) {
    if (!root) break;
    if (auto d = node.find(key); d != node.end() && d->is_object()) {
      for (auto& [name, sub] : d->items()) {
        OrderedJson moved = sub;
        Relocate(moved, prefix, defs, false);
        defs[absl::StrCat(prefix, "_", name)] = std::move(moved);
      }
      node.erase(key);
    }
  }
  for (auto& [key, value] : node.items()) {
    if (key != "$ref" && key != "enum" && key != "const") Relocate(value, prefix, defs, false);
  }
}

// A function's parameters as a schema; none means an empty object.
OrderedJson Parameters(const ToolFunction& f) {
  if (f.parameters_json.empty()) {
    return OrderedJson{{"type", "object"}, {"properties", OrderedJson::object()}};
  }
  return OrderedJson::parse(f.parameters_json, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

ToolCallFormat DetectToolCallFormat(std::string_view chat_template) {
  if (Contains(chat_template, "[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (Contains(chat_template, "<tool_call>")) return ToolCallFormat::kHermes;
  if (Contains(chat_template, "<|python_tag|>") || Contains(chat_template, "ipython")) {
    return ToolCallFormat::kLlama3;
  }
  return ToolCallFormat::kNone;
}

absl::StatusOr<ToolCallFormat> ResolveToolCallFormat(std::string_view name,
                                                     std::string_view chat_template) {
  if (name == "auto") return DetectToolCallFormat(chat_template);
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kMistral, ToolCallFormat::kHermes,
                           ToolCallFormat::kLlama3}) {
    if (name == ToolCallFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tool_call_format: '", std::string(name),
                   "' is not one of auto, none, mistral, hermes, llama3"));
}

std::optional<generation::Constraint> ToolChoiceConstraint(const CompletionRequest& request) {
  const ToolChoice& choice = request.tool_choice;
  if (choice.mode == ToolChoiceMode::kNamed) {
    for (const ToolFunction& f : request.tool_functions) {
      if (f.name != choice.name) continue;
      return generation::Constraint{.kind = generation::ConstraintKind::kJsonSchema,
                                    .spec = Parameters(f).dump()};
    }
    return std::nullopt;  // the parser checked that the name is declared
  }
  if (choice.mode != ToolChoiceMode::kRequired) return std::nullopt;
  OrderedJson defs = OrderedJson::object();
  OrderedJson any = OrderedJson::array();
  for (size_t i = 0; i < request.tool_functions.size(); ++i) {
    const ToolFunction& f = request.tool_functions[i];
    const std::string prefix = absl::StrCat("fn", i);
    OrderedJson params = Parameters(f);
    Relocate(params, prefix, defs, /*root=*/true);
    defs[prefix] = std::move(params);
    any.push_back({{"type", "object"},
                   {"properties",
                    {{"name", {{"const", f.name}}},
                     {"arguments", {{"$ref", absl::StrCat("#/$defs/", prefix)}}}}},
                   {"required", {"name", "arguments"}},
                   {"additionalProperties", false}});
  }
  OrderedJson items = any.size() == 1 ? any[0] : OrderedJson{{"anyOf", std::move(any)}};
  OrderedJson schema = {{"type", "array"}, {"items", std::move(items)}, {"minItems", 1}};
  if (!request.parallel_tool_calls) schema["maxItems"] = 1;
  schema["$defs"] = std::move(defs);
  return generation::Constraint{.kind = generation::ConstraintKind::kJsonSchema,
                                .spec = schema.dump()};
}

ToolCallParser::ToolCallParser(ToolCallMode mode, ToolCallFormat format,
                               std::vector<std::string> functions, std::string named,
                               uint64_t id_seed)
    : mode_(mode),
      format_(format),
      functions_(std::move(functions)),
      named_(std::move(named)),
      id_seed_(id_seed) {
  switch (format_) {
    case ToolCallFormat::kMistral:
      marker_ = "[TOOL_CALLS]";
      break;
    case ToolCallFormat::kHermes:
      marker_ = "<tool_call>";
      break;
    case ToolCallFormat::kLlama3:
      marker_ = "<|python_tag|>";
      break;
    case ToolCallFormat::kNone:
      break;
  }
}

std::string ToolCallParser::NewId() {
  const uint64_t n = calls_.size();
  return absl::StrFormat("call_%016x%08x", common::SplitMix64(id_seed_ ^ (n * 0x9e37u)),
                         static_cast<uint32_t>(common::SplitMix64(id_seed_ + n + 1)));
}

bool ToolCallParser::Known(const std::string& name) const {
  return std::find(functions_.begin(), functions_.end(), name) != functions_.end();
}

void ToolCallParser::EmitArguments(std::string_view text, Output* out) {
  if (text.empty()) return;
  if (!call_open_) {
    pending_args_ += text;
    return;
  }
  const int32_t index = static_cast<int32_t>(calls_.size()) - 1;
  calls_.back().arguments += text;
  if (!out->deltas.empty() && out->deltas.back().index == index) {
    out->deltas.back().arguments += text;
  } else {
    out->deltas.push_back({.index = index, .arguments = std::string(text)});
  }
}

ToolCallParser::Output ToolCallParser::Add(std::string_view text) {
  Output out;
  if (text.empty()) return out;
  switch (mode_) {
    case ToolCallMode::kNamed:
      if (!call_open_) {
        calls_.push_back({.id = NewId(), .name = named_});
        out.deltas.push_back({.index = 0, .id = calls_.back().id, .name = named_});
        call_open_ = true;
      }
      EmitArguments(text, &out);
      return out;
    case ToolCallMode::kRequired:
      for (char c : text) ScanRequired(c, &out);
      return out;
    case ToolCallMode::kAuto:
      break;
  }
  if (in_tools_) {
    tool_text_ += text;
    return out;
  }
  held_ += text;
  if (format_ == ToolCallFormat::kLlama3 && !started_) {
    const size_t p = held_.find_first_not_of(" \t\r\n");
    if (p == std::string::npos) return out;  // only whitespace so far
    started_ = true;
    if (held_[p] == '{') {  // a bare JSON call
      in_tools_ = true;
      marker_.clear();
      tool_text_ = held_.substr(p);
      held_.clear();
      return out;
    }
  }
  if (marker_.empty()) {
    out.content = std::move(held_);
    held_.clear();
    return out;
  }
  if (const size_t m = held_.find(marker_); m != std::string::npos) {
    out.content = held_.substr(0, m);
    tool_text_ = held_.substr(m + marker_.size());
    held_.clear();
    in_tools_ = true;
    return out;
  }
  // Hold back the longest tail that may still become the marker.
  size_t keep = 0;
  for (size_t k = std::min(marker_.size() - 1, held_.size()); k > 0; --k) {
    if (std::string_view(held_).ends_with(std::string_view(marker_).substr(0, k))) {
      keep = k;
      break;
    }
  }
  out.content = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

void ToolCallParser::ScanRequired(char c, Output* out) {
  const std::string_view one(&c, 1);
  auto emit = [&] {
    if (!held_ws_.empty()) {
      EmitArguments(held_ws_, out);
      held_ws_.clear();
    }
    EmitArguments(one, out);
  };
  if (in_string_) {
    bool closing = false;
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      closing = true;
    }
    if (slot_ == Slot::kArguments) {
      emit();
    } else if (depth_ == 2 && slot_ == Slot::kKey && !closing) {
      key_ += c;
    } else if (depth_ == 2 && slot_ == Slot::kName) {
      if (!closing) {
        name_ += c;
      } else if (!call_open_) {
        calls_.push_back({.id = NewId(), .name = name_});
        out->deltas.push_back({.index = static_cast<int32_t>(calls_.size()) - 1,
                               .id = calls_.back().id,
                               .name = name_});
        call_open_ = true;
        std::string pending = std::move(pending_args_);
        pending_args_.clear();
        EmitArguments(pending, out);
      }
    }
    return;
  }
  if (c == '"') {
    in_string_ = true;
    if (depth_ == 2 && slot_ != Slot::kArguments) {
      if (expect_key_) {
        slot_ = Slot::kKey;
        key_.clear();
      } else if (key_ == "name") {
        slot_ = Slot::kName;
        name_.clear();
      } else if (key_ == "arguments") {
        slot_ = Slot::kArguments;
        emit();
      } else {
        slot_ = Slot::kOther;
      }
      return;
    }
    if (slot_ == Slot::kArguments) emit();
    return;
  }
  if (IsSpace(c)) {
    if (slot_ == Slot::kArguments) held_ws_ += c;  // sent only when more of the value follows
    return;
  }
  if (c == '[' || c == '{') {
    ++depth_;
    if (depth_ == 2) {  // a new element of the array
      name_.clear();
      pending_args_.clear();
      held_ws_.clear();
      call_open_ = false;
      expect_key_ = true;
      slot_ = Slot::kNone;
      return;
    }
    if (depth_ == 3 && slot_ == Slot::kNone) {
      slot_ = (!expect_key_ && key_ == "arguments") ? Slot::kArguments : Slot::kOther;
    }
    if (slot_ == Slot::kArguments) emit();
    return;
  }
  if (c == ']' || c == '}') {
    if (slot_ == Slot::kArguments && depth_ >= 3) emit();
    --depth_;
    if (depth_ == 1) {  // the element ended
      held_ws_.clear();
      slot_ = Slot::kNone;
      call_open_ = false;
    }
    return;
  }
  if (depth_ == 2) {
    if (c == ':') {
      expect_key_ = false;
      slot_ = Slot::kNone;
      return;
    }
    if (c == ',') {
      slot_ = Slot::kNone;
      expect_key_ = true;
      held_ws_.clear();
      return;
    }
    if (slot_ == Slot::kNone && !expect_key_) {  // a number, true, false or null starts
      slot_ = key_ == "arguments" ? Slot::kArguments : Slot::kOther;
    }
  }
  if (slot_ == Slot::kArguments) emit();
}

bool ToolCallParser::AddParsedCall(const std::string& name, const std::string& arguments) {
  if (!Known(name)) return false;
  calls_.push_back({.id = NewId(), .name = name, .arguments = arguments});
  return true;
}

bool ToolCallParser::ParseAuto(const std::string& text) {
  // One {"name": ..., "arguments" | "parameters": ...} object.
  auto call = [&](std::string_view json) {
    OrderedJson j = OrderedJson::parse(Trim(json), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) {
      return false;
    }
    const OrderedJson* args = nullptr;
    for (const char* key : {"arguments", "parameters"}) {
      if (j.contains(key)) args = &j[key];
    }
    std::string a = "{}";
    if (args != nullptr && args->is_string()) {
      a = args->get<std::string>();
    } else if (args != nullptr && args->is_object()) {
      a = args->dump();
    } else if (args != nullptr) {
      return false;
    }
    return AddParsedCall(j["name"].get<std::string>(), a);
  };
  switch (format_) {
    case ToolCallFormat::kMistral: {
      OrderedJson list = OrderedJson::parse(Trim(text), nullptr, /*allow_exceptions=*/false);
      if (list.is_discarded() || !list.is_array() || list.empty()) return false;
      for (const OrderedJson& item : list) {
        if (!call(item.dump())) return false;
      }
      return true;
    }
    case ToolCallFormat::kHermes: {
      // The marker was consumed: `{...}</tool_call>` then more `<tool_call>{...}</tool_call>`.
      std::vector<std::string_view> parts = Split(text, "</tool_call>");
      if (parts.size() < 2) return false;
      for (size_t i = 0; i < parts.size(); ++i) {
        std::string_view p = Trim(parts[i]);
        if (i + 1 == parts.size()) return p.empty();
        if (i > 0) {
          if (!p.starts_with("<tool_call>")) return false;
          p.remove_prefix(std::string_view("<tool_call>").size());
        }
        if (!call(p)) return false;
      }
      return true;
    }
    case ToolCallFormat::kLlama3: {
      for (std::string_view p : Split(text, ";")) {
        if (Trim(p).empty()) continue;
        if (!call(p)) return false;
      }
      return !calls_.empty();
    }
    case ToolCallFormat::kNone:
      break;
  }
  return false;
}

ToolCallParser::Output ToolCallParser::Finish() {
  Output out;
  if (mode_ != ToolCallMode::kAuto) return out;
  if (!in_tools_) {
    out.content = std::move(held_);
    held_.clear();
    return out;
  }
  in_tools_ = false;
  if (!ParseAuto(tool_text_)) {
    calls_.clear();
    out.content = marker_ + tool_text_;
    return out;
  }
  for (size_t i = 0; i < calls_.size(); ++i) {
    out.deltas.push_back({.index = static_cast<int32_t>(i),
                          .id = calls_[i].id,
                          .name = calls_[i].name,
                          .arguments = calls_[i].arguments});
  }
  return out;
}

}  // namespace moe::gateway
