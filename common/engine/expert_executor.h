// The expert half of a MoE layer behind an asynchronous interface, so that the dense part (router)
// and the expert FFNs (expert workers) can live in different processes, and two micro-batches can
// overlap: Submit() the token rows of a layer grouped by expert, do other work, then Await().
//
// Routing semantics are the engine's: it picks the top-k experts of each token and combines the
// outputs (weighted sum in each token's top-k order) itself. An executor only evaluates
//   out[i] = down(silu(gate(x[i])) * up(x[i]))
// for each row i of each expert's batch, bit-exactly as kernels::MatMul computes it, so any
// executor (in-process, remote, any replica) yields identical rows.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kernels/kernels.h"
#include "common/model/weights.h"

namespace moe::engine {

// The rows of one layer that go to one expert.
struct ExpertBatch {
  int32_t expert_id = 0;
  int64_t num_tokens = 0;
  const float* input = nullptr;  // [num_tokens, hidden] f32, packed
  float* output = nullptr;       // [num_tokens, hidden] f32, written by the executor
};

// One layer's expert work. Buffers are the caller's and must stay valid (inputs unchanged) until
// Await() for this call returns.
struct ExpertCall {
  int32_t layer_idx = 0;
  int64_t hidden = 0;
  std::vector<ExpertBatch> batches;  // distinct expert ids, any order
  // The caller's numerics mode (cluster-wide, EngineOptions::activations). Remote executors send
  // it so that a worker configured otherwise refuses the call rather than computing other bits.
  kernels::Activations activations = kernels::Activations::kF32;
  // The caller's weight numerics (EngineOptions::weights), sent and checked the same way.
  model::WeightsMode weights = model::WeightsMode::kCheckpoint;
};

using ExpertCallHandle = uint64_t;

// Thread-safety, the contract every implementation keeps:
//  - Submit, Await, AwaitPartial and RunsConcurrently are thread-compatible: one caller at a
//    time, never two of them concurrently on one executor. The engine calls them from the thread
//    running Engine::Step (the router's scheduler loop, the Generator's caller); the expert
//    worker from whichever thread holds the slot that owns the executor (its slot mutex orders
//    the hand-offs). Implementations need no lock for this state.
//  - A caller may have several calls outstanding and await them in any order, each handle
//    exactly once. The engine keeps at most one per micro-batch (two) and awaits every call it
//    submitted before Step returns, errors included.
//  - A call's work may run on other threads (RunsConcurrently), reading its inputs and writing its
//    outputs until Await/AwaitPartial returns; nothing of it runs after that.
//  - Methods an implementation adds (placement, health) state their own thread-safety, and may
//    run concurrently with the calls above only where they say so.
//  - Destruction: no call outstanding.
class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;

  // Starts `call`. Errors: InvalidArgument (unknown layer/expert, bad shapes) or the transport's.
  virtual absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) = 0;

  // Blocks until every batch's `output` of the call `handle` is written. Each handle is awaited
  // exactly once. Errors: NotFound (unknown handle), Unavailable (no live replica), or the error
  // the call hit; then the outputs are unspecified.
  virtual absl::Status Await(ExpertCallHandle handle) = 0;

  // Like Await, but an expert with no live replica does not fail the call: its id is appended
  // to `unavailable_experts` and its batch's outputs are zero-filled, while every other batch
  // completes. Returns a non-OK status only for errors that fail the whole call. The default
  // (executors without replicas) is Await.
  virtual absl::Status AwaitPartial(ExpertCallHandle handle,
                                    std::vector<int32_t>* unavailable_experts) {
    return Await(handle);
  }

  // True when a submitted call runs elsewhere (another process, device or thread) while the
  // caller goes on, so that the caller gains by doing other work before Await: the engine then
  // splits a step into micro-batches (EngineOptions::micro_batches). False when the work runs
  // inside Submit on the caller's threads, where splitting would only read the weights twice.
  virtual bool RunsConcurrently() const { return false; }
};

}  // namespace moe::engine
