// A group of service processes on one machine, as `moe up` runs them (and any local stand-in
// for a cluster): started in order, each up to its listening line; then checked for readiness
// with a deadline; watched until a termination signal arrives or a member exits on its own;
// stopped in reverse start order (the front door drains first, the back ends last), SIGTERM
// then SIGKILL after a grace period.
//
//   Supervisor group({.stop_grace = absl::Seconds(10), .log = Progress});
//   ASSIGN_OR_RETURN(const Supervisor::Member* router, group.Start("router-0", spawn, timeout));
//   RETURN_IF_ERROR(group.WaitReady(*router, probe, deadline));
//   Supervisor::Event e = group.WaitForSignalOrExit({SIGINT, SIGTERM});
//   group.StopAll();
//
// Members' stdout after their listening line is copied to options.output_fd (or discarded),
// so a member never blocks on a full pipe; the lines it printed before are copied there too, as
// "[name] line".
//
// Thread-compatible: one thread drives a Supervisor.
#pragma once

#include <unistd.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "common/process/listening.h"

namespace moe::common::process {

struct SupervisorOptions {
  // Per member on stop: time between SIGTERM and SIGKILL. Long enough for a drain.
  absl::Duration stop_grace = absl::Seconds(30);
  // Where members' stdout goes (not owned; must outlive the Supervisor); -1 discards it.
  int output_fd = STDERR_FILENO;
  // Progress lines ("stopping router-0", "router-0 did not stop in time; killing it"); null:
  // none.
  std::function<void(const std::string&)> log;
};

class Supervisor {
 public:
  struct Member {
    std::string name;  // "router-0"
    ListeningPorts ports;
    std::unique_ptr<ChildProcess> child;
  };

  explicit Supervisor(SupervisorOptions options);
  // StopAll().
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Spawns a member named `name` and waits up to `timeout` for its listening line. On error
  // the child is killed and not kept; the message starts with `name`: Spawn's errors,
  // kDeadlineExceeded (no listening line in time), kOutOfRange (it exited first). The Member
  // lives as long as this Supervisor.
  absl::StatusOr<const Member*> Start(const std::string& name, const SpawnOptions& spawn,
                                      absl::Duration timeout);

  // Calls `probe` until it returns true, every `interval`. kDeadlineExceeded ("<name> is not
  // ready in time") at `deadline`; kOutOfRange ("<name> exited before it was ready") when the
  // member exits first. A probe error counts as not ready yet.
  absl::Status WaitReady(const Member& member, const std::function<absl::StatusOr<bool>()>& probe,
                         absl::Time deadline, absl::Duration interval = absl::Milliseconds(100));

  // What ended WaitForSignalOrExit: a signal, or a member that exited.
  struct Event {
    int signal = 0;                  // the signal taken; 0 when a member exited
    const Member* exited = nullptr;  // the member that exited on its own
    int exit_code = 0;               // its exit code (128 + signal when killed by one)
  };
  // Blocks until one of `signals` is delivered to this process (it is taken, so its default
  // action does not run) or a member exits. REQUIRES: `signals` blocked in every thread
  // (common::rpc::BlockTerminationSignals for SIGINT/SIGTERM), else the signal may kill the
  // process instead.
  Event WaitForSignalOrExit(std::initializer_list<int> signals);

  // Stops every member still running, in reverse start order (each: SIGTERM, then SIGKILL
  // after options.stop_grace), logging "stopping <name>". Members stay listed.
  void StopAll();

  // In start order.
  const std::vector<std::unique_ptr<Member>>& members() const { return members_; }

 private:
  const SupervisorOptions options_;
  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace moe::common::process
