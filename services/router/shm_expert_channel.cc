#include "services/router/shm_expert_channel.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/shm/expert_wire.h"
#include "common/shm/futex.h"
#include "common/shm/handshake.h"

namespace moe::router {
namespace {

// Longest sleep between looks at the worker's liveness and the deadline while awaiting.
constexpr absl::Duration kAwaitSlice = absl::Milliseconds(10);

uint64_t Align64(uint64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

absl::StatusOr<std::unique_ptr<ShmExpertChannel>> ShmExpertChannel::Connect(
    const std::string& socket_path, absl::string_view ticket, const ShmChannelOptions& options,
    shm::Heartbeat& heartbeat, common::Clock& clock) {
  absl::StatusOr<std::unique_ptr<shm::MappedRegion>> region =
      shm::ConnectHandshake(socket_path, ticket, options.handshake_timeout);
  if (!region.ok()) return region.status();
  return std::unique_ptr<ShmExpertChannel>(
      new ShmExpertChannel(std::move(*region), options, heartbeat, clock));
}

ShmExpertChannel::ShmExpertChannel(std::unique_ptr<shm::MappedRegion> region,
                                   const ShmChannelOptions& options, shm::Heartbeat& heartbeat,
                                   common::Clock& clock)
    : options_(options),
      region_(std::move(region)),
      heartbeat_(heartbeat),
      clock_(clock),
      requests_(&region_->view().header->requests, region_->view().request_data,
                region_->view().ring_bytes),
      responses_(&region_->view().header->responses, region_->view().response_data,
                 region_->view().ring_bytes),
      worker_(&region_->view().header->worker, absl::ToInt64Nanoseconds(options.peer_timeout),
              NowNs()) {
  heartbeat_.Add(&region_->view().header->router);
}

ShmExpertChannel::~ShmExpertChannel() {
  shm::RegionHeader& h = *region_->view().header;
  heartbeat_.Remove(&h.router);
  h.router.state.store(shm::kPeerClosed, std::memory_order_release);
  // The worker may sleep on either of our indices: it looks again now.
  shm::FutexWakeAll(&h.requests.head);
  shm::FutexWakeAll(&h.responses.tail);
}

uint32_t ShmExpertChannel::ring_bytes() const { return region_->view().ring_bytes; }

int64_t ShmExpertChannel::NowNs() const { return absl::ToUnixNanos(clock_.Now()); }

absl::Status ShmExpertChannel::Break(absl::string_view why) {
  if (!broken()) {
    broken_why_ = std::string(why);
    broken_.store(true, std::memory_order_relaxed);
  }
  return absl::UnavailableError(absl::StrCat("shared memory: ", broken_why_));
}

bool ShmExpertChannel::TrySubmit(uint64_t call_id, const engine::ExpertCall& call,
                                 absl::Span<const size_t> batch_idx, uint64_t placement_version,
                                 absl::Time deadline) {
  if (broken() || batch_idx.empty()) return false;
  if (!worker_.Alive(NowNs())) {
    Break(region_->view().header->worker.state.load() == shm::kPeerClosed
              ? "the worker closed the region"
              : "the worker stopped beating (killed?)")
        .IgnoreError();
    return false;
  }
  Call c;
  c.id = call_id;
  c.hidden = call.hidden;
  c.rows.reserve(batch_idx.size());
  c.outputs.reserve(batch_idx.size());
  for (size_t i : batch_idx) {
    c.rows.push_back(call.batches[i].num_tokens);
    c.outputs.push_back(call.batches[i].output);
  }
  const uint64_t request = shm::RequestPayloadBytes(call.hidden, c.rows);
  c.response_bytes = shm::ResponsePayloadBytes(call.hidden, c.rows);
  const uint64_t half = ring_bytes() / 2;
  // Each record within half a ring, and the unanswered answers within one ring, so that the
  // worker always finds room for an answer once the earlier ones are read.
  if (request == 0 || c.response_bytes == 0 || shm::RecordBytes(request) > half ||
      shm::RecordBytes(c.response_bytes) > half ||
      outstanding_response_bytes_ + 2 * shm::RecordBytes(c.response_bytes) > ring_bytes()) {
    return false;
  }
  std::byte* at = requests_.TryReserve(static_cast<uint32_t>(request));
  if (at == nullptr) {
    if (requests_.broken()) Break("the worker corrupted the request ring").IgnoreError();
    return false;
  }
  shm::CallHeader header;
  header.call_id = call_id;
  header.deadline_unix_ns = absl::ToUnixNanos(deadline);
  header.placement_version = placement_version;
  header.sent_mono_ns = shm::MonotonicNowNs();
  c.times.sent_mono_ns = header.sent_mono_ns;
  shm::EncodeRequest(header, call, batch_idx, at);
  requests_.Publish();
  outstanding_response_bytes_ += 2 * shm::RecordBytes(c.response_bytes);
  calls_.push_back(std::move(c));
  return true;
}

bool ShmExpertChannel::TakeAnswer(const shm::RingRecord& record) {
  auto it = std::find_if(calls_.begin(), calls_.end(), [](const Call& c) { return !c.answered; });
  shm::ResultHeader r;
  if (it == calls_.end() || !shm::DecodeResult(record.payload, record.payload_bytes, &r).ok() ||
      r.call_id != it->id) {
    return false;
  }
  Call& c = *it;
  c.answered = true;
  outstanding_response_bytes_ -= 2 * shm::RecordBytes(c.response_bytes);
  c.status = shm::ResultStatus(r);
  c.compute_ns = r.compute_ns;
  c.times.picked_mono_ns = r.times.picked_mono_ns;
  c.times.compute_start_mono_ns = r.times.compute_start_mono_ns;
  c.times.published_mono_ns = r.times.published_mono_ns;
  c.times.seen_mono_ns = shm::MonotonicNowNs();
  if (c.status.ok() && (record.payload_bytes < c.response_bytes ||
                        r.num_batches != static_cast<int32_t>(c.rows.size()))) {
    return false;
  }
  if (c.abandoned) {
    calls_.erase(it);
    return true;
  }
  if (c.status.ok()) {
    // The answer's rows, each batch padded to 64 bytes, in request order: read once.
    uint64_t offset = sizeof(shm::ResultHeader);
    for (size_t j = 0; j < c.rows.size(); ++j) {
      const uint64_t bytes = static_cast<uint64_t>(c.rows[j] * c.hidden) * sizeof(float);
      std::memcpy(c.outputs[j], record.payload + offset, bytes);
      offset += Align64(bytes);
    }
  }
  return true;
}

absl::Status ShmExpertChannel::Await(uint64_t call_id, absl::Time deadline, absl::Duration* compute,
                                     ShmCallTimes* times) {
  auto find = [this, call_id] {
    return std::find_if(calls_.begin(), calls_.end(),
                        [call_id](const Call& c) { return c.id == call_id; });
  };
  if (find() == calls_.end()) {
    return absl::NotFoundError(absl::StrCat("shared memory: no call ", call_id));
  }
  const int64_t spin_ns = absl::ToInt64Nanoseconds(options_.spin);
  while (!find()->answered) {
    if (broken()) return Break("");
    shm::RingRecord record;
    if (responses_.TryPeek(&record)) {
      const bool ok = TakeAnswer(record);
      responses_.Release();
      if (!ok) return Break("a malformed answer");
      continue;
    }
    if (responses_.broken()) return Break("the worker corrupted the response ring");
    const absl::Time now = clock_.Now();
    if (!worker_.Alive(absl::ToUnixNanos(now))) {
      return Break(region_->view().header->worker.state.load() == shm::kPeerClosed
                       ? "the worker closed the region"
                       : "the worker stopped beating (killed?)");
    }
    if (now >= deadline) {
      find()->abandoned = true;
      return absl::DeadlineExceededError("shared memory: no answer before the deadline");
    }
    responses_.WaitForData(spin_ns,
                           absl::ToInt64Nanoseconds(std::min(deadline - now, kAwaitSlice)));
  }
  auto it = find();
  absl::Status status = std::move(it->status);
  if (compute != nullptr) *compute = absl::Nanoseconds(it->compute_ns);
  if (times != nullptr) *times = it->times;
  calls_.erase(it);
  return status;
}

}  // namespace moe::router
