#include "services/expert-worker/core/shm_server.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "common/shm/expert_wire.h"
#include "common/shm/futex.h"
#include "common/shm/handshake.h"
#include "common/shm/region.h"
#include "services/expert-worker/core/expert_worker_core.h"

namespace moe::expert_worker {
namespace {

// How long an idle serving thread sleeps between looks at its router's heartbeat and at stop.
constexpr int64_t kIdleSliceNs = 50'000'000;

int64_t Nanos(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }

// Removes the sockets that crashed workers of this pid namespace left in `dir`
// (moe-ew-<pid>-<hex>.sock whose pid no longer exists): a SIGKILL leaves its file behind.
void RemoveStaleSockets(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "moe-ew-") || !absl::EndsWith(name, ".sock")) continue;
    const std::vector<std::string> parts = absl::StrSplit(name.substr(7), '-');
    int pid = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

absl::Status ShmServerOptions::Validate() const {
  RETURN_IF_ERROR(common::config::CheckFields(*this));
  if (!shm::ValidRingCapacity(static_cast<uint64_t>(ring_bytes))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring_bytes: ", ring_bytes, " is not a power of two"));
  }
  return absl::OkStatus();
}

int64_t CoreCallHandler::hidden() const { return core_.config().hidden_size; }

absl::Status CoreCallHandler::Run(const engine::ExpertCall& call, absl::Duration* compute) {
  RETURN_IF_ERROR(core_.CheckActivations(call.activations));
  RETURN_IF_ERROR(core_.CheckWeights(call.weights));
  return core_.Run(call, compute);
}

ShmServerMetrics::ShmServerMetrics(common::metrics::Registry& r)
    : regions(r.AddGauge("moe_expert_worker_shm_regions",
                         "Shared-memory regions (co-located routers) being served.")),
      calls(r.AddCounter("moe_expert_worker_shm_calls_total",
                         "RunExperts calls answered over shared memory.")),
      handshakes(r.CounterFamily("moe_expert_worker_shm_handshakes_total",
                                 "Shared-memory handshakes by result (ok, refused, failed).")),
      peers_lost(r.AddCounter("moe_expert_worker_shm_peers_lost_total",
                              "Regions dropped because the router vanished or broke the "
                              "protocol.")) {}

// One router's region and the thread serving it.
struct ShmServer::Region {
  std::unique_ptr<shm::MappedRegion> mapping;
  shm::PeerCredentials peer;
  std::thread thread;
  std::atomic<bool> finished{false};
};

absl::StatusOr<std::unique_ptr<ShmServer>> ShmServer::Start(const ShmServerOptions& options,
                                                            ExpertCallHandler& handler,
                                                            common::metrics::Registry& registry,
                                                            common::Clock& clock) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ShmServer> s(new ShmServer(options, handler, registry, clock));
  RemoveStaleSockets(options.dir);
  const std::string path =
      absl::StrCat(options.dir, "/moe-ew-", getpid(), "-",
                   absl::BytesToHexString(shm::RandomTicket().substr(0, 4)), ".sock");
  ASSIGN_OR_RETURN(s->listener_, shm::UnixListener::Listen(path));
  s->heartbeat_ = std::make_unique<shm::Heartbeat>(Nanos(options.heartbeat_interval));
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

ShmServer::ShmServer(const ShmServerOptions& options, ExpertCallHandler& handler,
                     common::metrics::Registry& registry, common::Clock& clock)
    : options_(options), handler_(handler), clock_(clock), metrics_(registry) {}

ShmServer::~ShmServer() {
  stop_.store(true);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::unique_ptr<Region>> regions;
  {
    absl::MutexLock lock(&mu_);
    regions.swap(regions_);
  }
  // Serving threads sleep at most kIdleSliceNs; wake them now to see stop_.
  for (auto& r : regions) shm::FutexWakeAll(&r->mapping->view().header->requests.head);
  for (auto& r : regions) r->thread.join();
}

const std::string& ShmServer::socket_path() const { return listener_->path(); }

int32_t ShmServer::regions() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& r : regions_) n += r->finished.load() ? 0 : 1;
  return n;
}

absl::StatusOr<ShmServer::Offer> ShmServer::IssueTicket() {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  absl::erase_if(tickets_, [now](const auto& t) { return t.second < now; });
  int64_t open = static_cast<int64_t>(tickets_.size());
  for (const auto& r : regions_) open += r->finished.load() ? 0 : 1;
  if (open >= options_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("expert worker: ", options_.max_regions, " shared-memory regions in use"));
  }
  Offer offer{listener_->path(), shm::RandomTicket(), static_cast<uint32_t>(options_.ring_bytes)};
  tickets_[offer.ticket] = now + options_.ticket_ttl;
  return offer;
}

absl::Status ShmServer::Admit(absl::string_view ticket, uid_t uid) {
  if (uid != geteuid() && std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(),
                                    static_cast<int64_t>(uid)) == options_.allowed_uids.end()) {
    return absl::PermissionDeniedError(absl::StrCat("uid ", uid, " is not admitted"));
  }
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = tickets_.find(std::string(ticket));
  if (it == tickets_.end()) return absl::PermissionDeniedError("unknown or used ticket");
  const bool expired = it->second < now;
  tickets_.erase(it);
  if (expired) return absl::PermissionDeniedError("expired ticket");
  return absl::OkStatus();
}

void ShmServer::AcceptLoop() {
  while (!stop_.load()) {
    Reap();
    absl::StatusOr<int> conn = listener_->Accept(absl::Milliseconds(100));
    if (!conn.ok()) continue;
    auto region = std::make_unique<Region>();
    absl::StatusOr<std::unique_ptr<shm::MappedRegion>> mapping = shm::ServeHandshake(
        *conn, static_cast<uint32_t>(options_.ring_bytes),
        [this](absl::string_view ticket, const shm::PeerCredentials& peer) {
          return Admit(ticket, peer.uid);
        },
        options_.handshake_timeout, &region->peer);
    if (!mapping.ok()) {
      const bool refused = mapping.status().code() == absl::StatusCode::kPermissionDenied;
      metrics_.handshakes.Add({{"result", refused ? "refused" : "failed"}}).Increment();
      MOE_LOG_WARN("expert-worker: shared-memory handshake with pid {} uid {}: {}",
                   region->peer.pid, region->peer.uid, mapping.status().ToString());
      continue;
    }
    metrics_.handshakes.Add({{"result", "ok"}}).Increment();
    region->mapping = std::move(*mapping);
    heartbeat_->Add(&region->mapping->view().header->worker);
    Region* r = region.get();
    MOE_LOG_INFO("expert-worker: shared-memory region for router pid {} uid {} ({} KiB rings)",
                 r->peer.pid, r->peer.uid, options_.ring_bytes >> 10);
    {
      absl::MutexLock lock(&mu_);
      regions_.push_back(std::move(region));
      metrics_.regions.Set(static_cast<double>(regions_.size()));
    }
    r->thread = std::thread([this, r] { Serve(r); });
  }
}

void ShmServer::Reap() {
  std::vector<std::unique_ptr<Region>> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto& r : regions_) {
      if (r->finished.load()) done.push_back(std::move(r));
    }
    regions_.erase(std::remove(regions_.begin(), regions_.end(), nullptr), regions_.end());
    metrics_.regions.Set(static_cast<double>(regions_.size()));
  }
  for (auto& r : done) r->thread.join();  // then the mapping goes
}

void ShmServer::Serve(Region* region) {
  const shm::RegionView& v = region->mapping->view();
  shm::RegionHeader& h = *v.header;
  shm::RingConsumer requests(&h.requests, v.request_data, v.ring_bytes);
  shm::RingProducer responses(&h.responses, v.response_data, v.ring_bytes);
  auto now_ns = [this] { return absl::ToUnixNanos(clock_.Now()); };
  shm::PeerMonitor router(&h.router, Nanos(options_.peer_timeout), now_ns());
  const int64_t spin_ns = Nanos(options_.spin);
  const int64_t hidden = handler_.hidden();
  shm::DecodedRequest req;
  std::string why;
  while (!stop_.load(std::memory_order_relaxed)) {
    shm::RingRecord rec;
    if (!requests.TryPeek(&rec)) {
      if (requests.broken()) {
        why = "a malformed request record";
        break;
      }
      if (!router.Alive(now_ns())) {
        why = h.router.state.load() == shm::kPeerClosed ? "" : "the router stopped beating";
        break;
      }
      requests.WaitForData(spin_ns, kIdleSliceNs);
      continue;
    }
    shm::WorkerTimes times;
    times.picked_mono_ns = shm::MonotonicNowNs();
    absl::Status status = shm::DecodeRequest(rec.payload, rec.payload_bytes, hidden, &req);
    uint64_t bytes = status.ok() ? req.response_bytes : sizeof(shm::ResultHeader);
    if (bytes > responses.max_payload()) {
      status = absl::InvalidArgumentError("the response does not fit the ring");
      bytes = sizeof(shm::ResultHeader);
    }
    std::byte* out = nullptr;
    while ((out = responses.TryReserve(static_cast<uint32_t>(bytes))) == nullptr) {
      if (responses.broken() || stop_.load() || !router.Alive(now_ns())) break;
      responses.WaitForSpace(spin_ns, kIdleSliceNs);
    }
    if (out == nullptr) {
      why = "no room for a response";
      break;
    }
    absl::Duration compute;
    if (status.ok()) {
      if (req.header.deadline_unix_ns != 0 && now_ns() > req.header.deadline_unix_ns) {
        status = absl::DeadlineExceededError("the call's deadline passed before it was read");
      } else {
        shm::SetOutputs(out, &req.call);
        times.compute_start_mono_ns = shm::MonotonicNowNs();
        status = handler_.Run(req.call, &compute);
      }
    }
    times.published_mono_ns = shm::MonotonicNowNs();
    shm::EncodeResult(req.header.call_id, status, absl::ToInt64Nanoseconds(compute),
                      static_cast<int32_t>(req.call.batches.size()), times, out);
    metrics_.calls.Increment();  // before the router can see the answer
    responses.Publish();
    requests.Release();
  }
  if (!stop_.load() && !why.empty()) {
    metrics_.peers_lost.Increment();
    MOE_LOG_WARN("expert-worker: dropping the shared-memory region of router pid {}: {}",
                 region->peer.pid, why);
  }
  heartbeat_->Remove(&h.worker);
  h.worker.state.store(shm::kPeerClosed, std::memory_order_release);
  // A router asleep on either of our indices looks again now.
  shm::FutexWakeAll(&h.responses.head);
  shm::FutexWakeAll(&h.requests.tail);
  region->finished.store(true);
}

}  // namespace moe::expert_worker
