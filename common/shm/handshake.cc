#include "common/shm/handshake.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace moe::shm {
namespace {

constexpr uint32_t kHandshakeMagic = 0x4B48534D;  // "MSHK"
constexpr uint32_t kHandshakeVersion = 1;
constexpr size_t kMessageChars = 160;

struct Hello {
  uint32_t magic;
  uint32_t version;
  char ticket[kTicketBytes];
  uint32_t pid;
  uint32_t reserved;
};
struct Offer {
  uint32_t magic;
  int32_t status;  // absl::StatusCode
  uint32_t ring_bytes;
  uint32_t worker_pid;
  char message[kMessageChars];
};
struct Ack {
  uint32_t magic;
  uint32_t ok;
};
struct Done {
  uint32_t magic;
  int32_t status;
  char message[kMessageChars];
};

absl::Status Errno(absl::StatusCode code, absl::string_view what) {
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(errno)));
}

void SetTimeouts(int fd, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(std::max(timeout, absl::Milliseconds(1)));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Sends one message, with `pass_fd` attached when >= 0.
absl::Status Send(int fd, const void* msg, size_t bytes, int pass_fd = -1) {
  iovec iov{const_cast<void*>(msg), bytes};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  const ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
  if (n < 0) {
    return Errno(
        errno == EAGAIN ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
        "shm handshake: send");
  }
  if (static_cast<size_t>(n) != bytes) return absl::UnavailableError("shm handshake: short send");
  return absl::OkStatus();
}

// Receives one message of exactly `bytes`; a passed descriptor goes to *got_fd (else -1).
absl::Status Receive(int fd, void* msg, size_t bytes, int* got_fd = nullptr) {
  if (got_fd != nullptr) *got_fd = -1;
  iovec iov{msg, bytes};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  if (n < 0) {
    return Errno(
        errno == EAGAIN ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
        "shm handshake: receive");
  }
  int passed = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
    }
  }
  if (n == 0) {
    if (passed >= 0) close(passed);
    return absl::UnavailableError("shm handshake: the peer closed the socket");
  }
  if (static_cast<size_t>(n) != bytes || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      (passed >= 0 && got_fd == nullptr)) {
    if (passed >= 0) close(passed);
    return absl::InvalidArgumentError("shm handshake: malformed message");
  }
  if (got_fd != nullptr) *got_fd = passed;
  return absl::OkStatus();
}

void CopyMessage(char (&dst)[kMessageChars], absl::string_view msg) {
  const size_t n = std::min(msg.size(), kMessageChars - 1);
  std::memcpy(dst, msg.data(), n);
  dst[n] = '\0';
}

absl::Status StatusFrom(int32_t code, const char (&message)[kMessageChars]) {
  if (code == 0) return absl::OkStatus();
  const size_t n = strnlen(message, kMessageChars);
  const auto c = static_cast<absl::StatusCode>(code);
  return absl::Status(c == absl::StatusCode::kOk ? absl::StatusCode::kUnknown : c,
                      absl::StrCat("shm handshake refused: ", absl::string_view(message, n)));
}

void Tokens(const RegionHeader& h, uint64_t worker[2], uint64_t router[2]) {
  for (int i = 0; i < 2; ++i) {
    worker[i] = h.worker_token[i].load(std::memory_order_acquire);
    router[i] = h.router_token[i].load(std::memory_order_acquire);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedRegion>> MappedRegion::Create(uint32_t ring_bytes,
                                                                   const uint64_t token[2]) {
  if (!ValidRingCapacity(ring_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("shm: ring size ", ring_bytes, " invalid"));
  }
  const int fd = memfd_create("moe-expert-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno(absl::StatusCode::kInternal, "shm: memfd_create");
  absl::Cleanup close_fd = [fd] { close(fd); };
  const uint64_t bytes = RegionBytes(ring_bytes);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return Errno(absl::StatusCode::kResourceExhausted, "shm: ftruncate");
  }
  // Sealed: the peer cannot shrink it under our mapping (SIGBUS) nor grow it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno(absl::StatusCode::kInternal, "shm: F_ADD_SEALS");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno(absl::StatusCode::kResourceExhausted, "shm: mmap");
  const RegionView view = InitRegion(base, ring_bytes, token);
  std::move(close_fd).Cancel();
  return std::unique_ptr<MappedRegion>(new MappedRegion(fd, base, bytes, view));
}

absl::StatusOr<std::unique_ptr<MappedRegion>> MappedRegion::Map(int fd) {
  absl::Cleanup close_fd = [fd] { close(fd); };
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError("shm: the region is not sealed against shrinking");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno(absl::StatusCode::kInternal, "shm: fstat");
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes < kRegionHeaderBytes || bytes > RegionBytes(uint32_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("shm: region of ", bytes, " bytes"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno(absl::StatusCode::kResourceExhausted, "shm: mmap");
  RegionView view;
  if (!ValidateRegion(base, bytes, &view)) {
    munmap(base, bytes);
    return absl::InvalidArgumentError("shm: not a region of this version");
  }
  std::move(close_fd).Cancel();
  return std::unique_ptr<MappedRegion>(new MappedRegion(fd, base, bytes, view));
}

MappedRegion::~MappedRegion() {
  munmap(base_, bytes_);
  close(fd_);
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("shm: socket path '", path, "' longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(absl::StatusCode::kUnavailable, "shm: socket");
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(absl::StatusCode::kUnavailable, absl::StrCat("shm: bind ", path));
  }
  if (listen(fd, 16) != 0) return Errno(absl::StatusCode::kUnavailable, "shm: listen");
  std::move(close_fd).Cancel();
  return std::unique_ptr<UnixListener>(new UnixListener(fd, path));
}

UnixListener::~UnixListener() {
  close(fd_);
  unlink(path_.c_str());
}

absl::StatusOr<int> UnixListener::Accept(absl::Duration timeout) {
  pollfd p{fd_, POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (r < 0 && errno != EINTR) return Errno(absl::StatusCode::kUnavailable, "shm: poll");
  if (r <= 0) return absl::DeadlineExceededError("shm: no connection");
  const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (conn < 0) return Errno(absl::StatusCode::kUnavailable, "shm: accept");
  return conn;
}

absl::StatusOr<std::unique_ptr<MappedRegion>> ServeHandshake(int fd, uint32_t ring_bytes,
                                                             const AdmitFn& admit,
                                                             absl::Duration timeout,
                                                             PeerCredentials* peer) {
  absl::Cleanup close_fd = [fd] { close(fd); };
  SetTimeouts(fd, timeout);
  Hello hello;
  if (absl::Status s = Receive(fd, &hello, sizeof(hello)); !s.ok()) return s;
  Offer offer{};
  offer.magic = kHandshakeMagic;
  offer.worker_pid = static_cast<uint32_t>(getpid());
  auto refuse = [&](absl::Status s) {
    offer.status = static_cast<int32_t>(s.code());
    CopyMessage(offer.message, s.message());
    Send(fd, &offer, sizeof(offer)).IgnoreError();
    return s;
  };
  if (hello.magic != kHandshakeMagic || hello.version != kHandshakeVersion) {
    return refuse(absl::InvalidArgumentError("unknown handshake version"));
  }
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return refuse(Errno(absl::StatusCode::kPermissionDenied, "SO_PEERCRED"));
  }
  *peer = {cred.pid, cred.uid, cred.gid};
  if (absl::Status s = admit(absl::string_view(hello.ticket, kTicketBytes), *peer); !s.ok()) {
    return refuse(s);
  }
  uint64_t token[2];
  const std::string random = RandomTicket();
  std::memcpy(token, random.data(), sizeof(token));
  auto region = MappedRegion::Create(ring_bytes, token);
  if (!region.ok()) return refuse(region.status());
  offer.ring_bytes = ring_bytes;
  if (absl::Status s = Send(fd, &offer, sizeof(offer), (*region)->fd()); !s.ok()) return s;
  Ack ack;
  if (absl::Status s = Receive(fd, &ack, sizeof(ack)); !s.ok()) return s;
  uint64_t worker[2], router[2];
  Tokens(*(*region)->view().header, worker, router);
  Done done{};
  done.magic = kHandshakeMagic;
  if (ack.magic != kHandshakeMagic || ack.ok != 1 || worker[0] != router[0] ||
      worker[1] != router[1]) {
    const absl::Status s =
        absl::PermissionDeniedError("the router did not prove it shares the region");
    done.status = static_cast<int32_t>(s.code());
    CopyMessage(done.message, s.message());
    Send(fd, &done, sizeof(done)).IgnoreError();
    return s;
  }
  PeerWord& me = (*region)->view().header->worker;
  me.pid.store(static_cast<uint32_t>(getpid()), std::memory_order_relaxed);
  me.state.store(kPeerAttached, std::memory_order_release);
  if (absl::Status s = Send(fd, &done, sizeof(done)); !s.ok()) return s;
  return region;
}

absl::StatusOr<std::unique_ptr<MappedRegion>> ConnectHandshake(const std::string& socket_path,
                                                               absl::string_view ticket,
                                                               absl::Duration timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("shm: bad socket path '", socket_path, "'"));
  }
  if (ticket.size() != kTicketBytes) return absl::InvalidArgumentError("shm: bad ticket");
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(absl::StatusCode::kUnavailable, "shm: socket");
  absl::Cleanup close_fd = [fd] { close(fd); };
  SetTimeouts(fd, timeout);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(absl::StatusCode::kUnavailable, absl::StrCat("shm: connect ", socket_path));
  }
  Hello hello{};
  hello.magic = kHandshakeMagic;
  hello.version = kHandshakeVersion;
  std::memcpy(hello.ticket, ticket.data(), kTicketBytes);
  hello.pid = static_cast<uint32_t>(getpid());
  if (absl::Status s = Send(fd, &hello, sizeof(hello)); !s.ok()) return s;
  Offer offer;
  int region_fd = -1;
  if (absl::Status s = Receive(fd, &offer, sizeof(offer), &region_fd); !s.ok()) return s;
  if (offer.magic != kHandshakeMagic) {
    if (region_fd >= 0) close(region_fd);
    return absl::InvalidArgumentError("shm handshake: not a worker's reply");
  }
  if (offer.status != 0 || region_fd < 0) {
    if (region_fd >= 0) close(region_fd);
    absl::Status s = StatusFrom(offer.status, offer.message);
    return s.ok() ? absl::InvalidArgumentError("shm handshake: no region passed") : s;
  }
  auto region = MappedRegion::Map(region_fd);
  if (!region.ok()) return region.status();
  if ((*region)->view().ring_bytes != offer.ring_bytes) {
    return absl::InvalidArgumentError("shm handshake: region size differs from the offer");
  }
  RegionHeader& h = *(*region)->view().header;
  for (int i = 0; i < 2; ++i) {
    h.router_token[i].store(h.worker_token[i].load(std::memory_order_acquire),
                            std::memory_order_release);
  }
  h.router.pid.store(static_cast<uint32_t>(getpid()), std::memory_order_relaxed);
  h.router.heartbeat.fetch_add(1, std::memory_order_relaxed);
  h.router.state.store(kPeerAttached, std::memory_order_release);
  const Ack ack{kHandshakeMagic, 1};
  if (absl::Status s = Send(fd, &ack, sizeof(ack)); !s.ok()) return s;
  Done done;
  if (absl::Status s = Receive(fd, &done, sizeof(done)); !s.ok()) return s;
  if (done.magic != kHandshakeMagic) {
    return absl::InvalidArgumentError("shm handshake: not a worker's reply");
  }
  if (absl::Status s = StatusFrom(done.status, done.message); !s.ok()) return s;
  return region;
}

std::string HostBootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

std::string RandomTicket() {
  std::string t(kTicketBytes, '\0');
  size_t got = 0;
  while (got < t.size()) {
    const ssize_t n = getrandom(t.data() + got, t.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return t;
}

}  // namespace moe::shm
