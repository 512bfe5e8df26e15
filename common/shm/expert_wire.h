// RunExperts over the rings (ring.h): the byte layout of a request record (router -> worker)
// and of its response record (worker -> router). No protobuf: the activations sit packed in
// the request record, written once by the router; the worker computes from them in place into
// the response record, which the router reads once into the engine's buffers.
//
//   request payload:  CallHeader (64) | BatchEntry x num_batches, padded to 64 |
//                     batch 0 activations [num_tokens, hidden] f32, padded to 64 | batch 1 ...
//   response payload: ResultHeader (256) | batch 0 outputs [num_tokens, hidden] f32, padded to
//                     64 | batch 1 ...   (the same sizes, in request order)
//
// Everything read from the other side is copied out of shared memory before it is checked
// (DecodeRequest, DecodeResult), so a peer rewriting a header after the check changes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/engine/expert_executor.h"

namespace moe::shm {

struct CallHeader {
  uint64_t call_id = 0;
  int64_t deadline_unix_ns = 0;  // the router's deadline; 0 = none
  uint64_t placement_version = 0;
  int32_t layer_idx = 0;
  int32_t num_batches = 0;
  int64_t hidden = 0;
  uint32_t activations = 0;  // kernels::Activations as an integer
  uint32_t weights = 0;      // model::WeightsMode as an integer
  int64_t sent_mono_ns = 0;  // CLOCK_MONOTONIC when the router began writing it (timing only)
  int64_t reserved2 = 0;
};
static_assert(sizeof(CallHeader) == 64);

struct BatchEntry {
  int32_t expert_id = 0;
  int32_t reserved = 0;
  int64_t num_tokens = 0;
};
static_assert(sizeof(BatchEntry) == 16);

inline constexpr size_t kResultMessageChars = 200;
// Timing of one call on the worker's side, CLOCK_MONOTONIC (the same clock in every process of
// a host; futex.h MonotonicNowNs): for benchmarks and the transport's own overhead figures,
// never for decisions (a peer's clock values are not trusted).
struct WorkerTimes {
  int64_t picked_mono_ns = 0;         // the serving thread read the request
  int64_t compute_start_mono_ns = 0;  // compute began (0 when nothing was computed)
  int64_t published_mono_ns = 0;      // just before the answer was published
};
struct ResultHeader {
  uint64_t call_id = 0;
  int64_t compute_ns = 0;      // worker compute time of the call
  int32_t status_code = 0;     // absl::StatusCode
  uint32_t message_bytes = 0;  // of `message`, <= kResultMessageChars
  int32_t num_batches = 0;
  uint32_t reserved = 0;
  WorkerTimes times;
  char message[kResultMessageChars] = {};
};
static_assert(sizeof(ResultHeader) == 256);

// Most batches one call may carry (far above any model's experts per layer).
inline constexpr int32_t kMaxWireBatches = 4096;

// Payload bytes of the request / response for batches of these row counts at `hidden` (0 when
// the sizes do not fit a record: the caller sends the call another way).
uint64_t RequestPayloadBytes(int64_t hidden, absl::Span<const int64_t> num_tokens);
uint64_t ResponsePayloadBytes(int64_t hidden, absl::Span<const int64_t> num_tokens);

// Writes `header` (layer, hidden, activations and num_batches taken from `call`), the batch table
// and the activations of `call.batches[i]` for i in `batch_idx` into `payload` (RequestPayloadBytes
// long): the one copy of the activations.
void EncodeRequest(CallHeader header, const engine::ExpertCall& call,
                   absl::Span<const size_t> batch_idx, std::byte* payload);

// A request read in place: `call` has the decoded layer, hidden and activations and one batch
// per entry whose `input` points into the request payload; `output` is unset (the worker
// points it into its response record with SetOutputs).
struct DecodedRequest {
  CallHeader header;
  engine::ExpertCall call;
  uint64_t response_bytes = 0;
};

// Copies the header and table out of `payload` and checks them: hidden == `hidden`,
// 1 <= num_batches <= kMaxWireBatches, every num_tokens >= 1, sizes within `payload_bytes`.
// INVALID_ARGUMENT otherwise (then `out->header.call_id` is still set when readable).
absl::Status DecodeRequest(const std::byte* payload, uint32_t payload_bytes, int64_t hidden,
                           DecodedRequest* out);

// Points each batch's output into a response payload laid out for `call`.
void SetOutputs(std::byte* response_payload, engine::ExpertCall* call);

// Writes the result header of a response.
void EncodeResult(uint64_t call_id, const absl::Status& status, int64_t compute_ns,
                  int32_t num_batches, const WorkerTimes& times, std::byte* response_payload);

// Copies and checks a response's result header. INVALID_ARGUMENT when malformed.
absl::Status DecodeResult(const std::byte* payload, uint32_t payload_bytes, ResultHeader* out);
// The worker's status carried by a result header.
absl::Status ResultStatus(const ResultHeader& r);

}  // namespace moe::shm
