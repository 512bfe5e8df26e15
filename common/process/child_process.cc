#include "common/process/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace moe::common::process {
namespace {

// poll()'s timeout for `deadline`: -1 for ever, else milliseconds rounded up (a deadline a
// fraction of a millisecond away must not busy-loop on a 0 timeout).
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for POLLIN (or hang-up) on `fd` until `deadline`; false on timeout. Retries EINTR.
bool WaitReadable(int fd, absl::Time deadline) {
  for (;;) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    const int n = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

void WriteAll(int fd, const char* data, size_t size) {
  while (fd >= 0 && size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // The reader went away: the output is dropped, the child goes on.
    data += n;
    size -= static_cast<size_t>(n);
  }
}

int ExitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

absl::Time DeadlineOf(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("argv: empty");
  const std::string& path = options.argv[0];
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (!options.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, options.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  // Mains block their termination signals to take them with sigwait; a child must start with
  // default handling instead, whatever this process blocked, ignored or caught.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (options.env) {
    for (const std::string& e : *options.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(),
                               options.env ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    const std::string message = absl::StrCat("cannot run ", path, ": ", std::strerror(rc));
    return rc == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
  }
  // The pid cannot be recycled before the child is reaped, so this pidfd is the child's.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const std::string message = absl::StrCat("pidfd_open: ", std::strerror(errno));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    return absl::InternalError(message);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, pidfd, out[0], options.stderr_path));
}

ChildProcess::ChildProcess(pid_t pid, int pidfd, int stdout_fd, std::string stderr_path)
    : pid_(pid), pidfd_(pidfd), stderr_path_(std::move(stderr_path)), stdout_fd_(stdout_fd) {}

ChildProcess::~ChildProcess() {
  {
    absl::MutexLock lock(&mu_);
    if (!exit_code_) {
      ::syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0);
      ReapLocked(/*block=*/true);
    }
  }
  if (pump_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(pump_wake_fd_, &one, sizeof(one));
    pump_.join();
    ::close(pump_wake_fd_);
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  ::close(pidfd_);
}

bool ChildProcess::Fill(absl::Time deadline) {
  if (!WaitReadable(stdout_fd_, deadline)) return false;
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(stdout_fd_, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    stdout_ended_ = true;
  } else {
    buffered_.append(buf, static_cast<size_t>(n));
  }
  return true;
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  if (pump_.joinable()) return absl::FailedPreconditionError("stdout is being forwarded");
  const absl::Time deadline = DeadlineOf(timeout);
  for (;;) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (stdout_ended_) return absl::OutOfRangeError("the child's stdout ended");
    if (!Fill(deadline)) {
      return absl::DeadlineExceededError("no complete line on the child's stdout in time");
    }
  }
}

absl::StatusOr<std::string> ChildProcess::ReadToEnd(absl::Duration timeout) {
  if (pump_.joinable()) return absl::FailedPreconditionError("stdout is being forwarded");
  const absl::Time deadline = DeadlineOf(timeout);
  while (!stdout_ended_) {
    if (!Fill(deadline)) return absl::DeadlineExceededError("the child's stdout did not end");
  }
  return std::exchange(buffered_, std::string());
}

void ChildProcess::ForwardStdout(int fd) {
  if (pump_.joinable()) return;
  pump_wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  pump_ = std::thread([this, fd] { Pump(fd); });
}

void ChildProcess::Pump(int fd) {
  WriteAll(fd, buffered_.data(), buffered_.size());
  buffered_.clear();
  char buf[16384];
  while (!stdout_ended_) {
    pollfd p[2] = {{.fd = stdout_fd_, .events = POLLIN, .revents = 0},
                   {.fd = pump_wake_fd_, .events = POLLIN, .revents = 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    // The destructor's wake-up: the child is dead, so what it wrote is all in the pipe by now;
    // copy that much and stop (a grandchild holding the pipe open must not keep us here).
    const bool finishing = p[1].revents != 0;
    if (finishing) ::fcntl(stdout_fd_, F_SETFL, ::fcntl(stdout_fd_, F_GETFL) | O_NONBLOCK);
    // Once per wake-up of poll normally; until the pipe is empty when finishing.
    for (;;) {
      const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN)) stdout_ended_ = true;
      if (n <= 0) break;
      WriteAll(fd, buf, static_cast<size_t>(n));
      if (!finishing) break;
    }
    if (finishing) break;
  }
}

void ChildProcess::ReapLocked(bool block) {
  if (exit_code_) return;
  int status = 0;
  rusage usage{};
  pid_t got;
  do {
    got = ::wait4(pid_, &status, block ? 0 : WNOHANG, &usage);
  } while (got < 0 && errno == EINTR);
  if (got != pid_) return;
  exit_code_ = ExitCodeOf(status);
  reaped_max_rss_bytes_ = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: kilobytes
}

void ChildProcess::Signal(int signo) {
  absl::MutexLock lock(&mu_);
  if (!exit_code_) ::syscall(SYS_pidfd_send_signal, pidfd_, signo, nullptr, 0);
}

std::optional<int> ChildProcess::TryWait() {
  absl::MutexLock lock(&mu_);
  ReapLocked(/*block=*/false);
  return exit_code_;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (std::optional<int> code = TryWait()) return *code;
  // The pidfd turns readable when the child exits; reaping then does not block.
  if (!WaitReadable(pidfd_, DeadlineOf(timeout))) {
    return absl::DeadlineExceededError("the child is still running");
  }
  absl::MutexLock lock(&mu_);
  ReapLocked(/*block=*/true);
  return *exit_code_;
}

ChildProcess::Stopped ChildProcess::Stop(absl::Duration grace) {
  Stopped result;
  Signal(SIGTERM);
  absl::StatusOr<int> code = Wait(grace);
  if (!code.ok()) {
    result.killed = true;
    Signal(SIGKILL);
    code = Wait(absl::InfiniteDuration());
  }
  result.exit_code = *code;
  return result;
}

int64_t ChildProcess::PeakRssBytes() const {
  absl::MutexLock lock(&mu_);
  if (exit_code_) return reaped_max_rss_bytes_;
  // Not reaped, so the pid is still this child's.
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return 0;
}

std::string ChildProcess::Stderr() const {
  if (stderr_path_.empty()) return "";
  std::ifstream in(stderr_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<RunResult> RunToExit(const SpawnOptions& options, absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(options);
  if (!child.ok()) return child.status();
  const absl::Time deadline = DeadlineOf(timeout);
  absl::StatusOr<std::string> out = (*child)->ReadToEnd(timeout);
  if (!out.ok()) return out.status();  // The destructor kills it.
  absl::StatusOr<int> code = (*child)->Wait(
      deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : deadline - absl::Now());
  if (!code.ok()) return code.status();
  return RunResult{.exit_code = *code, .stdout_text = *std::move(out)};
}

}  // namespace moe::common::process
