#include "bench/common/suite.h"

#include <utility>

namespace moe::bench {

std::string CacheDir(const SuiteOptions& options) {
  return options.cache_dir.empty() ? kDefaultCacheDir : options.cache_dir;
}

std::map<std::string, Suite>& Suites() {
  static std::map<std::string, Suite> suites;
  return suites;
}

bool RegisterSuite(Suite suite) {
  std::string name = suite.name;
  return Suites().emplace(std::move(name), std::move(suite)).second;
}

}  // namespace moe::bench
