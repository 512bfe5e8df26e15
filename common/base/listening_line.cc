#include "common/base/listening_line.h"

#include <cstdint>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe::common {

std::string ListeningLine(const ListeningPorts& ports) {
  std::string out = "{\"event\":\"listening\"";
  if (ports.grpc) absl::StrAppend(&out, ",\"grpc\":", *ports.grpc);
  if (ports.http) absl::StrAppend(&out, ",\"http\":", *ports.http);
  if (ports.metrics) absl::StrAppend(&out, ",\"metrics\":", *ports.metrics);
  out += "}";
  return out;
}

void PrintListeningLine(const ListeningPorts& ports) {
  const std::string line = ListeningLine(ports) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

absl::StatusOr<ListeningPorts> ParseListeningLine(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("event") || j["event"] != "listening") {
    return absl::InvalidArgumentError(absl::StrCat("not a listening line: ", std::string(line)));
  }
  ListeningPorts ports;
  for (auto [key, port] : {std::pair{"grpc", &ports.grpc}, std::pair{"http", &ports.http},
                           std::pair{"metrics", &ports.metrics}}) {
    if (!j.contains(key)) continue;
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("listening line: bad ", key, " port: ", std::string(line)));
    }
    *port = v.get<int>();
  }
  return ports;
}

}  // namespace moe::common
