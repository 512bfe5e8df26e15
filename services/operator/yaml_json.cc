#include "services/operator/yaml_json.h"

#include <regex>

#include "yaml-cpp/yaml.h"

namespace moe::op {
namespace {

nlohmann::json Scalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  static const std::regex integer(R"(^[-+]?(0|[1-9][0-9]*)$)");
  static const std::regex number(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (std::regex_match(s, integer)) {
    try {
      return std::stoll(s);
    } catch (const std::exception&) {
      return s;
    }
  }
  if (std::regex_match(s, number)) return std::stod(s);
  return s;
}

nlohmann::json Convert(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = Convert(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) a.push_back(Convert(e));
      return a;
    }
    case YAML::NodeType::Scalar:
      return Scalar(n);
    default:
      return nullptr;
  }
}

}  // namespace

absl::StatusOr<std::vector<nlohmann::json>> ParseYamlDocuments(const std::string& text) {
  try {
    std::vector<nlohmann::json> out;
    for (const YAML::Node& doc : YAML::LoadAll(text)) {
      nlohmann::json j = Convert(doc);
      if (!j.is_null()) out.push_back(std::move(j));
    }
    return out;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(std::string("YAML: ") + e.what());
  }
}

}  // namespace moe::op
