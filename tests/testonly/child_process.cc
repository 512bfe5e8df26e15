#include "tests/testonly/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace moe::testonly {
namespace {

int RemainingMs(absl::Time deadline) {
  return static_cast<int>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()) + 1));
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 const std::string& stderr_path) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // The child starts with default signal handling and an empty mask, whatever the test did.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    return absl::InternalError("pidfd_open failed");
  }
  return ChildProcess(pid, out[0], pidfd, stderr_path);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdout_fd_(std::exchange(other.stdout_fd_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      stderr_path_(std::move(other.stderr_path_)),
      buffered_(std::move(other.buffered_)),
      exit_code_(other.exit_code_) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  if (pidfd_ >= 0) ::close(pidfd_);
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    pollfd p{.fd = stdout_fd_, .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, RemainingMs(deadline));
    if (ready == 0 || absl::Now() >= deadline) {
      return absl::DeadlineExceededError("no complete line on the child's stdout in time");
    }
    if (ready < 0) continue;  // EINTR.
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) return absl::OutOfRangeError("the child's stdout ended");
    buffered_.append(buf, n);
  }
}

void ChildProcess::Signal(int signo) {
  if (!exit_code_) ::kill(pid_, signo);
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (exit_code_) return *exit_code_;
  // The pidfd becomes readable when the child exits.
  pollfd p{.fd = pidfd_, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, RemainingMs(absl::Now() + timeout)) <= 0) {
    return absl::DeadlineExceededError("the child is still running");
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return *exit_code_;
}

std::string ChildProcess::Stderr() const {
  std::ifstream in(stderr_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace moe::testonly
