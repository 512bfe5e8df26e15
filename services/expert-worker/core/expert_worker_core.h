// The expert worker's compute core (no gRPC): a resident set of (layer, expert) FFNs mapped from
// the checkpoint, warm-up, batched execution of one layer's expert batches per call, and live
// re-placement (Load / Unload).
//
// Execution reuses engine::LocalExpertExecutor (the same RunSwiGlu path as the embedded engine),
// so a row's output is bitwise identical to the in-process path whatever else is in its batch.
//
// Concurrency: at most `max_concurrent_calls` calls compute at once, each on its own slot (a
// ThreadPool of threads_per_call threads plus a LocalExpertExecutor); up to `max_queued_calls`
// more wait for a slot, beyond that Run() / RunAsync() answer RESOURCE_EXHAUSTED (the router
// tries another replica). Load/Unload take the resident set exclusively: they wait for running
// calls.
//
// RunAsync (the gRPC server's path) never blocks its caller on a slot: a call finding a free slot
// computes on the calling thread while fewer than `max_inline_calls` calls do so (no thread
// hand-off: the RPC thread that read the request computes and answers); every other call queues
// for the core's own slot threads (one per slot).
//
// Thread-safety: every public method is thread-safe and may be called concurrently (the gRPC
// server calls them from its callback threads). `done` callbacks run on the calling thread or on
// a slot thread, never under the core's locks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/engine/expert_executor.h"
#include "common/kernels/kernels.h"
#include "common/metrics/registry.h"
#include "common/model/checkpoint.h"
#include "common/model/expert_spec.h"

namespace moe::expert_worker {

using model::ExpertKey;

// Where the expert FFNs run. kCuda needs a build with nvcc and a device at start-up.
enum class Compute : uint8_t { kCpu, kCuda };

struct ExpertWorkerCoreOptions {
  // Hugging Face checkpoint directory. Required.
  std::string model_dir;
  // Experts resident at start-up, each "L:E", "L:E1-E2" (a range) or "*:E..." (every MoE layer);
  // empty = none (the coordinator loads them with LoadExperts).
  std::vector<std::string> experts;
  // Calls computing at once; each gets threads_per_call threads.
  int max_concurrent_calls = 1;
  int threads_per_call = 1;
  // Calls waiting for a slot before RESOURCE_EXHAUSTED.
  int max_queued_calls = 64;
  // RunAsync calls computed on the caller's thread at once (the rest run on the slot threads).
  // Inline saves a thread hand-off per call (~50 us on a small VM) but occupies an RPC thread
  // while computing: gRPC 1.51 runs max(2, cores / 2) callback threads per process, so 1 always
  // leaves one free for health checks and the other RPCs. 0 = always hand off.
  int max_inline_calls = 1;
  // Tokens per expert in the warm-up batch (0 = no warm-up).
  int warmup_tokens = 8;
  // Activation numerics of the expert FFNs (kernels.h): cluster-wide, must match the routers'
  // core.activations.
  kernels::Activations activations = kernels::Activations::kF32;
  // Weight numerics (model::WeightsMode): checkpoint (as stored) or q8_0 (quantized on load:
  // kernels.h INT8 WEIGHTS). Cluster-wide, must match the routers' core.weights.
  model::WeightsMode weights = model::WeightsMode::kCheckpoint;
  // cpu (default): engine::LocalExpertExecutor, bitwise the embedded engine. cuda: the grouped
  // bf16 expert FFN on device 0 (engine::CudaExpertExecutor; the `gpu` numerics, within a
  // tolerance of the CPU, not its bits). Until the wire carries a `gpu` numerics tag, cuda
  // requires activations: bf16, so a router in the default f32 mode is refused rather than
  // served other bits; and max_concurrent_calls: 1 (each slot would hold its own weight copy).
  // Load/Unload re-upload the resident set to the device.
  Compute compute = Compute::kCpu;

  static void Describe(common::config::Schema<ExpertWorkerCoreOptions>& s) {
    s.Add("model_dir", &ExpertWorkerCoreOptions::model_dir, "HF checkpoint directory").NonEmpty();
    s.Add("experts", &ExpertWorkerCoreOptions::experts, "resident experts: L:E, L:E1-E2, *:E");
    s.Add("max_concurrent_calls", &ExpertWorkerCoreOptions::max_concurrent_calls,
          "calls computing at once")
        .Range(1, 256);
    s.Add("threads_per_call", &ExpertWorkerCoreOptions::threads_per_call, "threads per call")
        .Range(1, 1024);
    s.Add("max_queued_calls", &ExpertWorkerCoreOptions::max_queued_calls,
          "calls waiting for a slot")
        .Range(0, 1 << 20);
    s.Add("max_inline_calls", &ExpertWorkerCoreOptions::max_inline_calls,
          "RunAsync calls computed on the calling (RPC) thread at once")
        .Range(0, 256);
    s.Add("warmup_tokens", &ExpertWorkerCoreOptions::warmup_tokens, "tokens per warm-up batch")
        .Range(0, 4096);
    s.AddEnum("activations", &ExpertWorkerCoreOptions::activations,
              {{"f32", kernels::Activations::kF32}, {"bf16", kernels::Activations::kBf16}},
              "activation numerics, cluster-wide (must match the routers')");
    s.AddEnum(
        "weights", &ExpertWorkerCoreOptions::weights,
        {{"checkpoint", model::WeightsMode::kCheckpoint}, {"q8_0", model::WeightsMode::kQ8_0}},
        "weight numerics, cluster-wide (must match the routers'): as stored, or q8_0 on load");
    s.AddEnum("compute", &ExpertWorkerCoreOptions::compute,
              {{"cpu", Compute::kCpu}, {"cuda", Compute::kCuda}},
              "where expert FFNs run: cpu (default) or cuda (needs nvcc at build, a GPU at start)");
  }
  // Fields, then: compute cuda needs activations bf16, weights checkpoint and
  // max_concurrent_calls 1.
  absl::Status Validate() const;
};

using model::ParseExpertSpecs;

// Worker metrics (the router side has moe_expert_call_seconds).
struct ExpertWorkerMetrics {
  explicit ExpertWorkerMetrics(common::metrics::Registry& r);
  common::metrics::Counter& calls_total;     // moe_expert_worker_calls_total
  common::metrics::Counter& tokens_total;    // moe_expert_worker_tokens_total
  common::metrics::Counter& busy_seconds;    // moe_expert_worker_busy_seconds_total
  common::metrics::Counter& rejected_total;  // moe_expert_worker_rejected_calls_total
  common::metrics::Gauge& resident_experts;  // moe_expert_worker_resident_experts
  common::metrics::Gauge& resident_bytes;    // moe_expert_worker_resident_bytes
};

struct ResidentSet {
  std::vector<ExpertKey> experts;  // sorted
  int64_t bytes = 0;
};

class ExpertWorkerCore {
 public:
  // Opens the checkpoint mapping only the start-up experts (and config.json). `registry` and
  // `clock` are borrowed and must outlive the core. Errors: options, the checkpoint's,
  // InvalidArgument (bad specs).
  static absl::StatusOr<std::unique_ptr<ExpertWorkerCore>> Create(
      const ExpertWorkerCoreOptions& options, common::metrics::Registry& registry,
      common::Clock& clock);
  // Joins the slot threads once the queued calls have run. REQUIRES: no Run/RunAsync/Load/
  // Unload in progress on other threads.
  ~ExpertWorkerCore();
  ExpertWorkerCore(const ExpertWorkerCore&) = delete;
  ExpertWorkerCore& operator=(const ExpertWorkerCore&) = delete;

  // Runs a synthetic batch through every resident expert (faults the weights in, sizes the
  // scratch buffers), then marks the core ready. Run() answers UNAVAILABLE before.
  absl::Status WarmUp();
  bool ready() const;

  // Computes every batch of `call` (outputs written in place). `call.hidden` must be the
  // model's hidden size. Errors: UNAVAILABLE (not warmed up), INVALID_ARGUMENT (bad layer,
  // shape, duplicate expert id), FAILED_PRECONDITION (an expert not resident here),
  // RESOURCE_EXHAUSTED (queue full). `compute` (optional) receives the time spent computing.
  absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute = nullptr);

  // Called once with Run()'s status and the compute time (zero unless computed).
  using RunDone = std::function<void(absl::Status status, absl::Duration compute)>;
  // Run() without blocking on a slot: `done` is called on this thread (argument errors, queue
  // full, or a call computed inline, see the class comment) or later on a slot thread. `call`'s
  // buffers must stay valid until `done`.
  void RunAsync(const engine::ExpertCall& call, RunDone done);

  // Makes `keys` resident (mapping their tensors) and warms them up; already resident keys
  // stay. InvalidArgument for keys outside the model's MoE layers/experts.
  absl::StatusOr<ResidentSet> Load(const std::vector<ExpertKey>& keys);
  // Stops serving `keys` (waits for running calls); unknown keys are ignored.
  ResidentSet Unload(const std::vector<ExpertKey>& keys);
  ResidentSet resident() const;

  const model::ModelConfig& config() const;
  // The numerics mode every call must come with (options.activations).
  kernels::Activations activations() const;
  // Where this worker's experts run (options.compute).
  Compute compute() const;
  // OK when a caller computing with `caller` activations may use this worker; INVALID_ARGUMENT
  // naming core.activations otherwise (every transport refuses such a call the same way).
  absl::Status CheckActivations(kernels::Activations caller) const;
  // Likewise for the caller's weight numerics (options.weights, naming core.weights).
  absl::Status CheckWeights(model::WeightsMode caller) const;

 private:
  class Impl;  // the resident set, the slots, their threads and queue (expert_worker_core.cc)
  explicit ExpertWorkerCore(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

}  // namespace moe::expert_worker
