#include "services/operator/metrics_source.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace moe::op {

PrometheusClient::PrometheusClient(std::string url, absl::Duration timeout)
    : url_(std::move(url)), timeout_(timeout) {}

absl::StatusOr<std::vector<Sample>> PrometheusClient::Query(const std::string& promql) {
  // scheme://host:port[/prefix]
  const size_t scheme_end = url_.find("://");
  const size_t path_start = url_.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  const std::string origin = url_.substr(0, path_start);
  const std::string prefix = path_start == std::string::npos ? "" : url_.substr(path_start);
  httplib::Client cli(origin);
  cli.set_connection_timeout(absl::ToChronoSeconds(timeout_));
  cli.set_read_timeout(absl::ToChronoSeconds(timeout_));
  auto res = cli.Get((prefix + "/api/v1/query").c_str(), httplib::Params{{"query", promql}},
                     httplib::Headers{});
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("prometheus ", url_, ": ", httplib::to_string(res.error())));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(res->body);
  } catch (const nlohmann::json::exception& e) {
    return absl::UnavailableError(absl::StrCat("prometheus: HTTP ", res->status, ": ", e.what()));
  }
  if (res->status != 200 || j.value("status", "") != "success") {
    return absl::InvalidArgumentError(
        absl::StrCat("prometheus: ", j.value("error", res->body), " (query ", promql, ")"));
  }
  std::vector<Sample> out;
  const nlohmann::json& data = j["data"];
  auto value = [](const nlohmann::json& v) {
    return std::strtod(v[1].get<std::string>().c_str(), nullptr);
  };
  if (data.value("resultType", "") == "scalar") {
    out.push_back({{}, value(data["result"])});
    return out;
  }
  for (const nlohmann::json& r : data.value("result", nlohmann::json::array())) {
    Sample s;
    for (auto it = r["metric"].begin(); it != r["metric"].end(); ++it) {
      s.labels[it.key()] = it.value().get<std::string>();
    }
    if (r.contains("value")) s.value = value(r["value"]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace moe::op
