#include "services/gateway/core/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Fails with the first error; every accessor names its field in the error.
class Fields {
 public:
  Fields(const Json& obj, ApiError* error) : obj_(obj), error_(error) {}

  bool failed() const { return failed_; }

  // nullptr when absent or null.
  const Json* Find(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool Fail(const std::string& param, const std::string& message) {
    if (!failed_) *error_ = ApiError::InvalidParam(param, message);
    failed_ = true;
    return false;
  }

  // A size past the limit option `option` (RequestLimits).
  bool FailLimit(const std::string& param, const char* option, int64_t limit,
                 const std::string& message) {
    if (!failed_) *error_ = ApiError::LimitExceeded(param, option, limit, message);
    failed_ = true;
    return false;
  }

  void Bool(const char* key, bool* out) {
    const Json* v = Find(key);
    if (v == nullptr || failed_) return;
    if (!v->is_boolean()) {
      Fail(key, absl::StrCat("'", key, "' must be a boolean"));
      return;
    }
    *out = v->get<bool>();
  }

  void String(const char* key, std::string* out) {
    const Json* v = Find(key);
    if (v == nullptr || failed_) return;
    if (!v->is_string()) {
      Fail(key, absl::StrCat("'", key, "' must be a string"));
      return;
    }
    *out = v->get<std::string>();
  }

  // A number within [lo, hi] (open at lo when lo_open).
  void Number(const char* key, double lo, double hi, bool lo_open, float* out) {
    const Json* v = Find(key);
    if (v == nullptr || failed_) return;
    if (!v->is_number()) {
      Fail(key, absl::StrCat("'", key, "' must be a number"));
      return;
    }
    const double d = v->get<double>();
    if (!std::isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo)) {
      Fail(key, absl::StrCat("'", key, "' must be in ", lo_open ? "(" : "[", lo, ", ", hi,
                             "], got ", v->dump()));
      return;
    }
    *out = static_cast<float>(d);
  }

  // An integer within [lo, hi].
  bool Int(const char* key, int64_t lo, int64_t hi, int64_t* out) {
    const Json* v = Find(key);
    if (v == nullptr || failed_) return false;
    if (!IsInteger(*v)) return Fail(key, absl::StrCat("'", key, "' must be an integer"));
    const double d = v->get<double>();
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
      return Fail(key,
                  absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "], got ", v->dump()));
    }
    *out = v->is_number_float() ? static_cast<int64_t>(d) : v->get<int64_t>();
    return true;
  }

  static bool IsInteger(const Json& v) {
    if (v.is_number_integer()) return true;
    // 3.0 is accepted as an integer (Python clients send it), 3.5 is not.
    return v.is_number_float() && std::isfinite(v.get<double>()) &&
           std::floor(v.get<double>()) == v.get<double>();
  }

 private:
  const Json& obj_;
  ApiError* error_;
  bool failed_ = false;
};

bool ParseIdList(Fields& f, const Json& v, const std::string& param, std::vector<int32_t>* out) {
  if (!v.is_array()) return f.Fail(param, absl::StrCat("'", param, "' must be a list of integers"));
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
        e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return f.Fail(param, absl::StrCat("'", param, "' must contain non-negative token ids"));
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return true;
}

// Rejects parameters that exist in the OpenAI API but are not implemented here.
bool RejectUnsupported(Fields& f, Endpoint endpoint) {
  int64_t n = 1;
  if (f.Int("n", 1, 128, &n) && n != 1) {
    return f.Fail("n", "'n' > 1 is not supported yet; send one request per completion");
  }
  if (const Json* v = f.Find("best_of"); v != nullptr && !(v->is_number() && *v == 1)) {
    return f.Fail("best_of", "'best_of' is not supported");
  }
  if (const Json* v = f.Find("functions"); v != nullptr && !(v->is_array() && v->empty())) {
    return f.Fail("functions", "'functions' is deprecated and not supported; use 'tools'");
  }
  if (const Json* v = f.Find("function_call"); v != nullptr && !(v->is_string() && *v == "none")) {
    return f.Fail("function_call",
                  "'function_call' is deprecated and not supported; use 'tool_choice'");
  }
  if (const Json* v = f.Find("guided_grammar"); v != nullptr) {
    return f.Fail("guided_grammar",
                  "'guided_grammar' is not supported; use guided_json, guided_regex or "
                  "guided_choice");
  }
  if (const Json* v = f.Find("echo"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return f.Fail("echo", "'echo' is not supported");
  }
  if (const Json* v = f.Find("suffix"); v != nullptr && !(v->is_string() && v->empty())) {
    return f.Fail("suffix", "'suffix' is not supported");
  }
  if (const Json* v = f.Find("audio"); v != nullptr) {
    return f.Fail("audio", "'audio' output is not supported on this endpoint");
  }
  if (const Json* v = f.Find("modalities"); v != nullptr) {
    if (!v->is_array()) return f.Fail("modalities", "'modalities' must be a list of strings");
    for (const Json& m : *v) {
      if (m != "text") return f.Fail("modalities", "only the 'text' modality is supported");
    }
  }
  (void)endpoint;
  return true;
}

bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments": "<JSON text>"}}]. Chat templates expect arguments as an object (transformers'
// convention), so the JSON text becomes one when it parses.
bool ParseMessageToolCalls(Fields& f, const Json& calls, const std::string& where, Json* msg) {
  if (!calls.is_array()) return f.Fail(where, absl::StrCat("'", where, "' must be a list"));
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string w = absl::StrCat(where, "[", i, "]");
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string()) {
      return f.Fail(w, absl::StrCat("'", w,
                                    "' must be {\"id\": ..., \"type\": \"function\", "
                                    "\"function\": {\"name\": ..., \"arguments\": ...}}"));
    }
    if (c.contains("type") && c["type"] != "function") {
      return f.Fail(w + ".type", "only 'function' tool calls are supported");
    }
    Json call = c;
    call["type"] = "function";
    if (!call.contains("id") || !call["id"].is_string()) call["id"] = absl::StrCat("call_", i);
    Json& fn = call["function"];
    if (!fn.contains("arguments") || fn["arguments"].is_null()) {
      fn["arguments"] = Json::object();
    } else if (fn["arguments"].is_string()) {
      Json parsed = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) fn["arguments"] = std::move(parsed);
    }
    out.push_back(std::move(call));
  }
  (*msg)["tool_calls"] = std::move(out);
  return true;
}

bool ParseMessages(Fields& f, const Json& v, const RequestLimits& limits, Json* out) {
  if (!v.is_array() || v.empty()) {
    return f.Fail("messages", "'messages' must be a non-empty list of messages");
  }
  if (static_cast<int>(v.size()) > limits.max_messages) {
    return f.FailLimit("messages", "limits.max_messages", limits.max_messages,
                       absl::StrCat("'messages' has ", v.size(), " messages; at most ",
                                    limits.max_messages, " are allowed"));
  }
  *out = Json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& m = v[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return f.Fail(where, absl::StrCat("'", where, "' must be an object"));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return f.Fail(where + ".role", absl::StrCat("'", where, ".role' must be a string"));
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
      return f.Fail(where + ".role", absl::StrCat("'", where,
                                                  ".role' must be one of system, developer, user, "
                                                  "assistant, tool; got '",
                                                  r, "'"));
    }
    Json msg = m;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (r != "assistant") {
        return f.Fail(where + ".content", absl::StrCat("'", where, ".content' is required"));
      }
      msg["content"] = "";
    } else if (content->is_array()) {
      // Text parts are joined; other part types (images, audio) are not supported.
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const Json& part = (*content)[j];
        const std::string pw = absl::StrCat(where, ".content[", j, "]");
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return f.Fail(pw, absl::StrCat("'", pw,
                                         "' must be a text part {\"type\": \"text\", "
                                         "\"text\": \"...\"}; other content types are not "
                                         "supported"));
        }
        text += part["text"].get<std::string>();
      }
      msg["content"] = std::move(text);
    } else if (!content->is_string()) {
      return f.Fail(where + ".content",
                    absl::StrCat("'", where, ".content' must be a string or a list of parts"));
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (r != "assistant") {
        return f.Fail(where + ".tool_calls", "only assistant messages carry tool_calls");
      }
      if (!ParseMessageToolCalls(f, m["tool_calls"], where + ".tool_calls", &msg)) return false;
    }
    if (r == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string()) {
        return f.Fail(where + ".tool_call_id",
                      absl::StrCat("'", where, ".tool_call_id' is required for tool messages"));
      }
    }
    out->push_back(std::move(msg));
  }
  return true;
}

bool ParsePrompt(Fields& f, const Json& v, CompletionRequest* out) {
  if (v.is_string()) {
    out->prompt_text = v.get<std::string>();
    return true;
  }
  if (v.is_array() && !v.empty()) {
    if (v[0].is_string()) {
      if (v.size() != 1) return f.Fail("prompt", "batched prompts are not supported yet");
      out->prompt_text = v[0].get<std::string>();
      return true;
    }
    if (v[0].is_array()) {
      if (v.size() != 1) return f.Fail("prompt", "batched prompts are not supported yet");
      out->prompt_is_ids = true;
      return ParseIdList(f, v[0], "prompt", &out->prompt_ids);
    }
    out->prompt_is_ids = true;
    return ParseIdList(f, v, "prompt", &out->prompt_ids);
  }
  return f.Fail("prompt",
                "'prompt' must be a string, a list of token ids or a list of one of those");
}

bool ParseStop(Fields& f, const RequestLimits& limits, CompletionRequest* out) {
  const Json* v = f.Find("stop");
  if (v == nullptr) return true;
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const Json& s : *v) {
      if (!s.is_string()) return f.Fail("stop", "'stop' must be a string or a list of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    return f.Fail("stop", "'stop' must be a string or a list of strings");
  }
  if (static_cast<int>(stops.size()) > limits.max_stop_strings) {
    return f.FailLimit("stop", "limits.max_stop_strings", limits.max_stop_strings,
                       absl::StrCat("'stop' has ", stops.size(), " strings; at most ",
                                    limits.max_stop_strings, " are allowed"));
  }
  for (std::string& s : stops) {
    if (static_cast<int>(s.size()) > limits.max_stop_string_bytes) {
      return f.FailLimit("stop", "limits.max_stop_string_bytes", limits.max_stop_string_bytes,
                         absl::StrCat("a stop string of ", s.size(), " bytes; each is at most ",
                                      limits.max_stop_string_bytes, " bytes"));
    }
    if (!s.empty()) out->stop.push_back(std::move(s));
  }
  return true;
}

bool ParseLogitBias(Fields& f, const RequestLimits& limits, generation::SamplingParams* out) {
  const Json* v = f.Find("logit_bias");
  if (v == nullptr) return true;
  if (!v->is_object()) return f.Fail("logit_bias", "'logit_bias' must be an object");
  if (static_cast<int>(v->size()) > limits.max_logit_bias_entries) {
    return f.FailLimit("logit_bias", "limits.max_logit_bias_entries", limits.max_logit_bias_entries,
                       absl::StrCat("'logit_bias' has ", v->size(), " entries; at most ",
                                    limits.max_logit_bias_entries, " are allowed"));
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    int32_t id;
    if (!absl::SimpleAtoi(it.key(), &id) || id < 0) {
      return f.Fail("logit_bias",
                    absl::StrCat("logit_bias key '", it.key(), "' is not a token id"));
    }
    if (!it.value().is_number() || it.value().get<double>() < -100 ||
        it.value().get<double>() > 100) {
      return f.Fail("logit_bias", "logit_bias values must be numbers in [-100, 100]");
    }
    out->logit_bias[id] = it.value().get<float>();
  }
  return true;
}

// The request body again, keeping key order: a schema's property order is the output's.
const OrderedJson& Ordered(std::string_view body, std::optional<OrderedJson>* cache) {
  if (!cache->has_value()) *cache = OrderedJson::parse(body, nullptr, /*allow_exceptions=*/false);
  return **cache;
}

bool SetConstraint(Fields& f, const std::string& param, generation::Constraint c,
                   CompletionRequest* out) {
  if (out->constraint.active()) {
    return f.Fail(param, absl::StrCat("'", param, "' and '", out->constraint_param,
                                      "' both constrain the output; send one of them"));
  }
  out->constraint = std::move(c);
  out->constraint_param = param;
  return true;
}

bool ParseStructuredOutputs(Fields& f, std::string_view body, std::optional<OrderedJson>* ordered,
                            CompletionRequest* out) {
  using generation::Constraint;
  using generation::ConstraintKind;
  if (const Json* rf = f.Find("response_format"); rf != nullptr) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      return f.Fail("response_format",
                    "'response_format' must be an object with a 'type' (text, json_object, "
                    "json_schema)");
    }
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      if (!SetConstraint(f, "response_format", {.kind = ConstraintKind::kJsonObject}, out)) {
        return false;
      }
    } else if (type == "json_schema") {
      const OrderedJson& o = Ordered(body, ordered);
      auto js = o["response_format"].find("json_schema");
      if (js == o["response_format"].end() || !js->is_object()) {
        return f.Fail("response_format.json_schema",
                      "'response_format.json_schema' must be an object {name, schema, strict}");
      }
      auto name = js->find("name");
      if (name == js->end() || !name->is_string() || !ValidToolName(name->get<std::string>())) {
        return f.Fail("response_format.json_schema.name",
                      "'response_format.json_schema.name' must be 1-64 characters of a-z, A-Z, "
                      "0-9, _ and -");
      }
      if (auto strict = js->find("strict");
          strict != js->end() && !strict->is_boolean() && !strict->is_null()) {
        return f.Fail("response_format.json_schema.strict", "'strict' must be a boolean");
      }
      std::string schema = "{}";
      if (auto sc = js->find("schema"); sc != js->end() && !sc->is_null()) {
        if (!sc->is_object() && !sc->is_boolean()) {
          return f.Fail("response_format.json_schema.schema",
                        "'response_format.json_schema.schema' must be a JSON Schema object");
        }
        schema = sc->dump();
      }
      if (!SetConstraint(f, "response_format",
                         {.kind = ConstraintKind::kJsonSchema, .spec = std::move(schema)}, out)) {
        return false;
      }
    } else if (type != "text") {
      return f.Fail("response_format.type",
                    absl::StrCat("'response_format.type' must be text, json_object or "
                                 "json_schema; got '",
                                 type, "'"));
    }
  }
  // vLLM's extras, flat (guided_*) or grouped (structured_outputs).
  auto extras = [&](const std::string& prefix, const OrderedJson& obj, const char* json_key,
                    const char* regex_key, const char* choice_key) -> bool {
    if (auto j = obj.find(json_key); j != obj.end() && !j->is_null()) {
      const std::string param = prefix + json_key;
      std::string spec;
      if (j->is_string()) {
        spec = j->get<std::string>();
      } else if (j->is_object() || j->is_boolean()) {
        spec = j->dump();
      } else {
        return f.Fail(param, absl::StrCat("'", param, "' must be a JSON Schema"));
      }
      if (!SetConstraint(f, param, {.kind = ConstraintKind::kJsonSchema, .spec = spec}, out)) {
        return false;
      }
    }
    if (auto r = obj.find(regex_key); r != obj.end() && !r->is_null()) {
      const std::string param = prefix + regex_key;
      if (!r->is_string() || r->get<std::string>().empty()) {
        return f.Fail(param, absl::StrCat("'", param, "' must be a non-empty string"));
      }
      if (!SetConstraint(f, param, {.kind = ConstraintKind::kRegex, .spec = r->get<std::string>()},
                         out)) {
        return false;
      }
    }
    if (auto c = obj.find(choice_key); c != obj.end() && !c->is_null()) {
      const std::string param = prefix + choice_key;
      Constraint choice{.kind = ConstraintKind::kChoice};
      if (!c->is_array() || c->empty()) {
        return f.Fail(param, absl::StrCat("'", param, "' must be a non-empty list of strings"));
      }
      for (const OrderedJson& x : *c) {
        if (!x.is_string() || x.get<std::string>().empty()) {
          return f.Fail(param, absl::StrCat("'", param, "' must be a non-empty list of strings"));
        }
        choice.choices.push_back(x.get<std::string>());
      }
      if (!SetConstraint(f, param, std::move(choice), out)) return false;
    }
    return true;
  };
  if (f.Find("guided_json") || f.Find("guided_regex") || f.Find("guided_choice")) {
    if (!extras("", Ordered(body, ordered), "guided_json", "guided_regex", "guided_choice")) {
      return false;
    }
  }
  if (const Json* so = f.Find("structured_outputs"); so != nullptr) {
    if (!so->is_object()) {
      return f.Fail("structured_outputs", "'structured_outputs' must be an object");
    }
    if (so->contains("grammar")) {
      return f.Fail("structured_outputs.grammar", "grammars are not supported");
    }
    if (!extras("structured_outputs.", Ordered(body, ordered)["structured_outputs"], "json",
                "regex", "choice")) {
      return false;
    }
    if (auto jo = so->find("json_object"); jo != so->end() && jo->is_boolean() && jo->get<bool>()) {
      if (!SetConstraint(f, "structured_outputs.json_object", {.kind = ConstraintKind::kJsonObject},
                         out)) {
        return false;
      }
    }
  }
  return true;
}

bool ParseTools(Fields& f, std::string_view body, const RequestLimits& limits,
                std::optional<OrderedJson>* ordered, CompletionRequest* out) {
  const Json* tools = f.Find("tools");
  const Json* choice = f.Find("tool_choice");
  if (tools != nullptr && !(tools->is_array())) {
    return f.Fail("tools", "'tools' must be a list of function tools");
  }
  absl::flat_hash_set<std::string> names;
  if (tools != nullptr && static_cast<int>(tools->size()) > limits.max_tools) {
    return f.FailLimit("tools", "limits.max_tools", limits.max_tools,
                       absl::StrCat("'tools' has ", tools->size(), " tools; at most ",
                                    limits.max_tools, " are allowed"));
  }
  if (tools != nullptr) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string w = absl::StrCat("tools[", i, "]");
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object()) {
        return f.Fail(w, absl::StrCat("'", w,
                                      "' must be {\"type\": \"function\", \"function\": "
                                      "{\"name\": ..., \"parameters\": ...}}"));
      }
      const Json& fn = t["function"];
      const std::string name = fn.value("name", "");
      if (!ValidToolName(name)) {
        return f.Fail(w + ".function.name",
                      "function names must be 1-64 characters of a-z, A-Z, 0-9, _ and -");
      }
      if (!names.insert(name).second) {
        return f.Fail(w + ".function.name",
                      absl::StrCat("the function name '", name, "' appears twice"));
      }
      ToolFunction tf{.name = name};
      if (fn.contains("parameters") && !fn["parameters"].is_null()) {
        if (!fn["parameters"].is_object()) {
          return f.Fail(w + ".function.parameters", "'parameters' must be a JSON Schema object");
        }
        tf.parameters_json = Ordered(body, ordered)["tools"][i]["function"]["parameters"].dump();
      }
      out->tool_functions.push_back(std::move(tf));
    }
    out->tools = *tools;
  }
  const bool have_tools = !out->tool_functions.empty();
  out->tool_choice.mode = have_tools ? ToolChoiceMode::kAuto : ToolChoiceMode::kNone;
  if (choice != nullptr) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        out->tool_choice.mode = ToolChoiceMode::kNone;
      } else if (c == "auto" || c == "required") {
        if (!have_tools) {
          return f.Fail("tool_choice", "'tool_choice' needs 'tools'");
        }
        out->tool_choice.mode = c == "auto" ? ToolChoiceMode::kAuto : ToolChoiceMode::kRequired;
      } else {
        return f.Fail("tool_choice", "'tool_choice' must be none, auto, required or a function");
      }
    } else if (choice->is_object() && choice->value("type", "") == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      const std::string name = (*choice)["function"]["name"].get<std::string>();
      if (!names.contains(name)) {
        return f.Fail("tool_choice", absl::StrCat("'tool_choice' names the function '", name,
                                                  "', which is not in 'tools'"));
      }
      out->tool_choice = {.mode = ToolChoiceMode::kNamed, .name = name};
    } else {
      return f.Fail("tool_choice",
                    "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
    }
  }
  f.Bool("parallel_tool_calls", &out->parallel_tool_calls);
  if (out->constraint.active() && (out->tool_choice.mode == ToolChoiceMode::kRequired ||
                                   out->tool_choice.mode == ToolChoiceMode::kNamed)) {
    return f.Fail("tool_choice",
                  absl::StrCat("a required or named 'tool_choice' constrains the output; it "
                               "cannot be combined with '",
                               out->constraint_param, "'"));
  }
  return !f.failed();
}

}  // namespace

bool ParseCompletionRequest(Endpoint endpoint, std::string_view body, const RequestLimits& limits,
                            CompletionRequest* out, ApiError* error) {
  Json root = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    *error = ApiError::InvalidRequest("The request body is not valid JSON.");
    return false;
  }
  if (!root.is_object()) {
    *error = ApiError::InvalidRequest("The request body must be a JSON object.");
    return false;
  }
  *out = CompletionRequest{};
  out->endpoint = endpoint;
  out->sampling.temperature = 1;  // OpenAI's default
  Fields f(root, error);

  const Json* model = f.Find("model");
  if (model == nullptr || !model->is_string()) {
    f.Fail("model", "'model' is required and must be a string");
    return false;
  }
  out->model = model->get<std::string>();
  if (!RejectUnsupported(f, endpoint)) return false;

  if (endpoint == Endpoint::kChatCompletions) {
    const Json* messages = f.Find("messages");
    if (messages == nullptr) return f.Fail("messages", "'messages' is required");
    if (!ParseMessages(f, *messages, limits, &out->messages)) return false;
    f.Bool("add_generation_prompt", &out->add_generation_prompt);
    f.Bool("continue_final_message", &out->continue_final_message);
    if (const Json* kw = f.Find("chat_template_kwargs"); kw != nullptr) {
      if (!kw->is_object()) return f.Fail("chat_template_kwargs", "must be an object");
      out->chat_template_kwargs = *kw;
    }
    bool logprobs = false;
    f.Bool("logprobs", &logprobs);
    int64_t top = 0;
    f.Int("top_logprobs", 0, std::numeric_limits<int32_t>::max(), &top);
    if (!f.failed() && top > limits.max_top_logprobs) {
      return f.FailLimit("top_logprobs", "limits.max_top_logprobs", limits.max_top_logprobs,
                         absl::StrCat("'top_logprobs' is ", top, "; at most ",
                                      limits.max_top_logprobs, " are allowed"));
    }
    if (!f.failed() && top > 0 && !logprobs) {
      return f.Fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    out->sampling.logprobs = logprobs ? static_cast<int32_t>(top) : -1;
  } else {
    const Json* prompt = f.Find("prompt");
    if (prompt == nullptr) return f.Fail("prompt", "'prompt' is required");
    if (!ParsePrompt(f, *prompt, out)) return false;
    int64_t lp = 0;
    if (f.Int("logprobs", 0, std::numeric_limits<int32_t>::max(), &lp)) {
      // OpenAI's completions allow 5; the operator may lower it.
      const int max_lp = std::min(5, limits.max_top_logprobs);
      if (lp > max_lp) {
        return f.FailLimit("logprobs", "limits.max_top_logprobs", max_lp,
                           absl::StrCat("'logprobs' is ", lp, "; at most ", max_lp,
                                        " are allowed on /v1/completions"));
      }
      out->sampling.logprobs = static_cast<int32_t>(lp);
    }
  }
  if (f.failed()) return false;
  std::optional<OrderedJson> ordered;
  if (!ParseStructuredOutputs(f, body, &ordered, out)) return false;
  if (endpoint == Endpoint::kChatCompletions) {
    if (!ParseTools(f, body, limits, &ordered, out)) return false;
  } else if (const Json* t = f.Find("tools"); t != nullptr && !(t->is_array() && t->empty())) {
    return f.Fail("tools", "'tools' are only supported on /v1/chat/completions");
  }

  int64_t max_tokens = 0;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (f.Int(key, std::numeric_limits<int64_t>::min() / 2, std::numeric_limits<int64_t>::max() / 2,
              &max_tokens)) {
      if (max_tokens < 1 || max_tokens > std::numeric_limits<int32_t>::max()) {
        return f.Fail(key, absl::StrCat("'", key, "' must be at least 1, got ", max_tokens));
      }
      out->max_tokens = static_cast<int32_t>(max_tokens);
    }
  }
  generation::SamplingParams& s = out->sampling;
  f.Number("temperature", 0, 2, false, &s.temperature);
  f.Number("top_p", 0, 1, true, &s.top_p);
  f.Number("min_p", 0, 1, false, &s.min_p);
  f.Number("frequency_penalty", -2, 2, false, &s.frequency_penalty);
  f.Number("presence_penalty", -2, 2, false, &s.presence_penalty);
  f.Number("repetition_penalty", 0, 2, true, &s.repetition_penalty);
  int64_t top_k = 0;
  if (f.Int("top_k", -1, 1 << 20, &top_k)) s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  int64_t seed = 0;
  if (f.Int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
            &seed)) {
    s.seed = static_cast<uint64_t>(seed);
  }
  if (!ParseLogitBias(f, limits, &s)) return false;
  if (!ParseStop(f, limits, out)) return false;
  if (const Json* ids = f.Find("stop_token_ids"); ids != nullptr) {
    if (!ParseIdList(f, *ids, "stop_token_ids", &s.stop_token_ids)) return false;
    if (static_cast<int>(s.stop_token_ids.size()) > limits.max_stop_token_ids) {
      return f.FailLimit("stop_token_ids", "limits.max_stop_token_ids", limits.max_stop_token_ids,
                         absl::StrCat("'stop_token_ids' has ", s.stop_token_ids.size(),
                                      " ids; at most ", limits.max_stop_token_ids, " are allowed"));
    }
  }
  f.Bool("ignore_eos", &s.ignore_eos);
  f.Bool("skip_special_tokens", &out->skip_special_tokens);
  f.Bool("include_stop_str_in_output", &out->include_stop_str_in_output);
  f.Bool("stream", &out->stream);
  if (const Json* so = f.Find("stream_options"); so != nullptr && !f.failed()) {
    if (!so->is_object()) return f.Fail("stream_options", "'stream_options' must be an object");
    if (!out->stream) {
      return f.Fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return f.Fail("stream_options.include_usage", "'include_usage' must be a boolean");
      }
      out->include_usage = it->get<bool>();
    }
  }
  f.String("user", &out->user);
  f.String("cache_salt", &out->cache_salt);
  int64_t priority = 0;
  if (f.Int("priority", -1000, 1000, &priority)) out->priority = static_cast<int32_t>(priority);
  return !f.failed();
}

}  // namespace moe::gateway
