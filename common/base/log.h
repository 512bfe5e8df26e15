// Logging at boundaries (STYLE.md rule 17): a thin wrapper over spdlog, to stderr so that stdout
// stays free for machine-readable lines (the "listening" JSON line, --json output).
#pragma once

#include <string_view>

#include "spdlog/spdlog.h"

namespace moe::common {

// Sets the process-wide level from "trace|debug|info|warn|error|off"; unknown names keep "info".
void SetLogLevel(std::string_view level);
// The shared stderr logger.
spdlog::logger& Logger();

}  // namespace moe::common

#define MOE_LOG_DEBUG(...) ::moe::common::Logger().debug(__VA_ARGS__)
#define MOE_LOG_INFO(...) ::moe::common::Logger().info(__VA_ARGS__)
#define MOE_LOG_WARN(...) ::moe::common::Logger().warn(__VA_ARGS__)
#define MOE_LOG_ERROR(...) ::moe::common::Logger().error(__VA_ARGS__)
