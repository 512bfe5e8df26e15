#include "common/base/thread.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"

namespace moe::common {

void SetCurrentThreadName(std::string_view name) {
  const std::string n(name.substr(0, 15));
  pthread_setname_np(pthread_self(), n.c_str());
}

absl::Status SetCurrentThreadNice(int nice) {
  // PRIO_PROCESS with a thread id sets that thread alone (Linux, setpriority(2) BUGS).
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, nice) != 0) {
    return absl::InternalError(absl::StrCat("setpriority(", nice, "): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void BecomeBackgroundThread(std::string_view name) {
  SetCurrentThreadName(name);
  if (absl::Status s = SetCurrentThreadNice(kBackgroundNice); !s.ok()) {
    MOE_LOG_WARN("thread {} keeps its priority: {}", name, s.ToString());
  }
}

}  // namespace moe::common
