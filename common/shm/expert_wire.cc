#include "common/shm/expert_wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace moe::shm {
namespace {

constexpr uint64_t kAlign = 64;
constexpr uint64_t kMaxPayload = std::numeric_limits<uint32_t>::max();

uint64_t Align(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

uint64_t TableBytes(uint64_t num_batches) { return Align(num_batches * sizeof(BatchEntry)); }

// Bytes of one batch's rows, or 0 when they cannot be sized.
uint64_t RowsBytes(int64_t num_tokens, int64_t hidden) {
  if (num_tokens < 1 || hidden < 1 || num_tokens > (int64_t{1} << 31) / hidden) return 0;
  return Align(static_cast<uint64_t>(num_tokens * hidden) * sizeof(float));
}

uint64_t DataBytes(int64_t hidden, absl::Span<const int64_t> num_tokens) {
  uint64_t total = 0;
  for (int64_t n : num_tokens) {
    const uint64_t b = RowsBytes(n, hidden);
    if (b == 0) return 0;
    total += b;
    if (total > kMaxPayload) return 0;
  }
  return total;
}

}  // namespace

uint64_t RequestPayloadBytes(int64_t hidden, absl::Span<const int64_t> num_tokens) {
  if (num_tokens.empty() || num_tokens.size() > static_cast<size_t>(kMaxWireBatches)) return 0;
  const uint64_t data = DataBytes(hidden, num_tokens);
  if (data == 0) return 0;
  const uint64_t total = sizeof(CallHeader) + TableBytes(num_tokens.size()) + data;
  return total > kMaxPayload ? 0 : total;
}

uint64_t ResponsePayloadBytes(int64_t hidden, absl::Span<const int64_t> num_tokens) {
  if (num_tokens.empty() || num_tokens.size() > static_cast<size_t>(kMaxWireBatches)) return 0;
  const uint64_t data = DataBytes(hidden, num_tokens);
  if (data == 0) return 0;
  const uint64_t total = sizeof(ResultHeader) + data;
  return total > kMaxPayload ? 0 : total;
}

void EncodeRequest(CallHeader header, const engine::ExpertCall& call,
                   absl::Span<const size_t> batch_idx, std::byte* payload) {
  header.num_batches = static_cast<int32_t>(batch_idx.size());
  header.hidden = call.hidden;
  header.layer_idx = call.layer_idx;
  header.activations = static_cast<uint32_t>(call.activations);
  header.weights = static_cast<uint32_t>(call.weights);
  std::memcpy(payload, &header, sizeof(header));
  std::byte* table = payload + sizeof(CallHeader);
  uint64_t offset = sizeof(CallHeader) + TableBytes(batch_idx.size());
  for (size_t j = 0; j < batch_idx.size(); ++j) {
    const engine::ExpertBatch& b = call.batches[batch_idx[j]];
    const BatchEntry e{b.expert_id, 0, b.num_tokens};
    std::memcpy(table + j * sizeof(BatchEntry), &e, sizeof(e));
    const size_t bytes = static_cast<size_t>(b.num_tokens * call.hidden) * sizeof(float);
    std::memcpy(payload + offset, b.input, bytes);
    offset += RowsBytes(b.num_tokens, call.hidden);
  }
}

absl::Status DecodeRequest(const std::byte* payload, uint32_t payload_bytes, int64_t hidden,
                           DecodedRequest* out) {
  out->header = CallHeader{};
  out->call.batches.clear();
  if (payload_bytes < sizeof(CallHeader)) {
    return absl::InvalidArgumentError("shm request: shorter than its header");
  }
  CallHeader& h = out->header;
  std::memcpy(&h, payload, sizeof(h));
  if (h.hidden != hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden ", h.hidden, " != the model's ", hidden));
  }
  if (h.num_batches < 1 || h.num_batches > kMaxWireBatches) {
    return absl::InvalidArgumentError(absl::StrCat("shm request: ", h.num_batches, " batches"));
  }
  const uint64_t table_end = sizeof(CallHeader) + TableBytes(static_cast<uint64_t>(h.num_batches));
  if (table_end > payload_bytes) {
    return absl::InvalidArgumentError("shm request: batch table beyond the record");
  }
  std::vector<int64_t> tokens(static_cast<size_t>(h.num_batches));
  std::vector<BatchEntry> entries(static_cast<size_t>(h.num_batches));
  std::memcpy(entries.data(), payload + sizeof(CallHeader), entries.size() * sizeof(BatchEntry));
  for (size_t j = 0; j < entries.size(); ++j) {
    if (entries[j].num_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", entries[j].expert_id, ": num_tokens must be >= 1"));
    }
    tokens[j] = entries[j].num_tokens;
  }
  const uint64_t data = DataBytes(hidden, tokens);
  if (data == 0 || table_end + data > payload_bytes) {
    return absl::InvalidArgumentError("shm request: activations beyond the record");
  }
  out->response_bytes = ResponsePayloadBytes(hidden, tokens);
  out->call.layer_idx = h.layer_idx;
  out->call.hidden = hidden;
  out->call.activations = static_cast<kernels::Activations>(h.activations);
  if (h.weights > static_cast<uint32_t>(model::WeightsMode::kQ8_0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm request: unknown weights mode ", h.weights));
  }
  out->call.weights = static_cast<model::WeightsMode>(h.weights);
  out->call.batches.reserve(entries.size());
  uint64_t offset = table_end;
  for (const BatchEntry& e : entries) {
    out->call.batches.push_back(
        {e.expert_id, e.num_tokens, reinterpret_cast<const float*>(payload + offset), nullptr});
    offset += RowsBytes(e.num_tokens, hidden);
  }
  return absl::OkStatus();
}

void SetOutputs(std::byte* response_payload, engine::ExpertCall* call) {
  uint64_t offset = sizeof(ResultHeader);
  for (engine::ExpertBatch& b : call->batches) {
    b.output = reinterpret_cast<float*>(response_payload + offset);
    offset += RowsBytes(b.num_tokens, call->hidden);
  }
}

void EncodeResult(uint64_t call_id, const absl::Status& status, int64_t compute_ns,
                  int32_t num_batches, const WorkerTimes& times, std::byte* response_payload) {
  ResultHeader r;
  r.call_id = call_id;
  r.compute_ns = compute_ns;
  r.times = times;
  r.status_code = static_cast<int32_t>(status.code());
  r.num_batches = num_batches;
  const size_t n = std::min(status.message().size(), kResultMessageChars);
  if (n > 0) std::memcpy(r.message, status.message().data(), n);  // an ok status's data() is null
  r.message_bytes = static_cast<uint32_t>(n);
  std::memcpy(response_payload, &r, sizeof(r));
}

absl::Status DecodeResult(const std::byte* payload, uint32_t payload_bytes, ResultHeader* out) {
  if (payload_bytes < sizeof(ResultHeader)) {
    return absl::InvalidArgumentError("shm response: shorter than its header");
  }
  std::memcpy(out, payload, sizeof(*out));
  if (out->message_bytes > kResultMessageChars || out->status_code < 0 ||
      out->status_code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError("shm response: malformed header");
  }
  return absl::OkStatus();
}

absl::Status ResultStatus(const ResultHeader& r) {
  if (r.status_code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.status_code),
                      absl::string_view(r.message, r.message_bytes));
}

}  // namespace moe::shm
