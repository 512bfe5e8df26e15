#include "common/base/log.h"

#include <string>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace moe::common {

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("moe");
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
    return l;
  }();
  return *logger;
}

void SetLogLevel(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  Logger().set_level(lvl);
}

}  // namespace moe::common
