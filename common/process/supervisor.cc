#include "common/process/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::common::process {

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() { StopAll(); }

absl::StatusOr<const Supervisor::Member*> Supervisor::Start(const std::string& name,
                                                            const SpawnOptions& spawn,
                                                            absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(spawn);
  if (!child.ok()) {
    return absl::Status(child.status().code(), absl::StrCat(name, ": ", child.status().message()));
  }
  const int out = options_.output_fd;
  absl::StatusOr<ListeningPorts> ports =
      WaitForListeningLine(**child, timeout, [&name, out](const std::string& line) {
        if (out < 0) return;
        const std::string text = absl::StrCat("[", name, "] ", line, "\n");
        (void)!::write(out, text.data(), text.size());
      });
  if (!ports.ok()) {
    return absl::Status(ports.status().code(), absl::StrCat(name, " ", ports.status().message()));
  }
  (*child)->ForwardStdout(out);
  members_.push_back(std::make_unique<Member>(Member{name, *ports, *std::move(child)}));
  return members_.back().get();
}

absl::Status Supervisor::WaitReady(const Member& member,
                                   const std::function<absl::StatusOr<bool>()>& probe,
                                   absl::Time deadline, absl::Duration interval) {
  for (;;) {
    absl::StatusOr<bool> ready = probe();
    if (ready.ok() && *ready) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(member.name + " is not ready in time");
    }
    // Waiting on the member's exit is the pause between probes: a death ends it at once.
    if (member.child->Wait(std::min(interval, deadline - absl::Now())).ok()) {
      return absl::OutOfRangeError(member.name + " exited before it was ready");
    }
  }
}

Supervisor::Event Supervisor::WaitForSignalOrExit(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  const int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);
  std::vector<pollfd> fds;
  fds.push_back({.fd = sfd, .events = POLLIN, .revents = 0});
  for (const auto& m : members_) fds.push_back({.fd = m->child->exit_fd(), .events = POLLIN});
  Event event;
  while (event.signal == 0 && event.exited == nullptr) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(sfd, &info, sizeof(info)) == sizeof(info)) {
        event.signal = static_cast<int>(info.ssi_signo);
        break;
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Member& m = *members_[i - 1];
      if (std::optional<int> code = m.child->TryWait()) {
        event.exited = &m;
        event.exit_code = *code;
        break;
      }
    }
  }
  if (sfd >= 0) ::close(sfd);
  return event;
}

void Supervisor::StopAll() {
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    Member& m = **it;
    if (m.child->TryWait()) continue;
    if (options_.log) options_.log("stopping " + m.name);
    m.child->Signal(SIGTERM);
    if (!m.child->Wait(options_.stop_grace).ok()) {
      if (options_.log) options_.log(m.name + " did not stop in time; killing it");
      m.child->Signal(SIGKILL);
      (void)m.child->Wait(absl::InfiniteDuration());
    }
  }
}

}  // namespace moe::common::process
