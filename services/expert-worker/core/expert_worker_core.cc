#include "services/expert-worker/core/expert_worker_core.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "common/engine/ffn.h"
#include "common/engine/local_expert_executor.h"
#if MOE_HAVE_CUDA
#include "common/engine/cuda/cuda_expert_executor.h"
#endif
#include "common/kernels/thread_pool.h"
#include "common/tensor/dtype.h"

namespace moe::expert_worker {
namespace {

int64_t ViewBytes(const kernels::WeightView& v) {
  return v.rows * common::RowBytes(v.dtype, v.cols);
}

int64_t ExpertBytes(const model::ExpertWeights& w) {
  return ViewBytes(w.gate) + ViewBytes(w.up) + ViewBytes(w.down);
}

}  // namespace

ExpertWorkerMetrics::ExpertWorkerMetrics(common::metrics::Registry& r)
    : calls_total(r.AddCounter("moe_expert_worker_calls_total", "RunExperts calls computed.")),
      tokens_total(r.AddCounter("moe_expert_worker_tokens_total",
                                "Token rows computed (each expert batch row counts once).")),
      busy_seconds(r.AddCounter("moe_expert_worker_busy_seconds_total",
                                "Time spent computing expert batches, seconds.")),
      rejected_total(r.AddCounter("moe_expert_worker_rejected_calls_total",
                                  "Calls refused because the queue was full.")),
      resident_experts(
          r.AddGauge("moe_expert_worker_resident_experts", "(layer, expert) pairs resident.")),
      resident_bytes(
          r.AddGauge("moe_expert_worker_resident_bytes", "Weight bytes of resident experts.")) {}

// The core's state. Members are grouped by the lock that protects them; the slot threads are
// started by Create and joined by the destructor.
class ExpertWorkerCore::Impl {
 public:
  Impl(const ExpertWorkerCoreOptions& options, common::Clock& clock,
       common::metrics::Registry& registry);
  ~Impl();

  // Opens the checkpoint with the start-up experts, builds the slots, starts their threads.
  absl::Status Init(const std::vector<ExpertKey>& keys);

  absl::Status WarmUp();
  bool ready() const;
  absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute);
  void RunAsync(const engine::ExpertCall& call, RunDone done);
  absl::StatusOr<ResidentSet> Load(const std::vector<ExpertKey>& keys);
  ResidentSet Unload(const std::vector<ExpertKey>& keys);
  ResidentSet resident() const;
  // The checkpoint is opened in Init() and never replaced: reading its config needs no lock.
  const model::ModelConfig& config() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return checkpoint_->config();
  }
  kernels::Activations activations() const { return options_.activations; }
  model::WeightsMode weights_mode() const { return options_.weights; }
  Compute compute() const { return options_.compute; }

 private:
  // A compute slot: its own pool and executor, used by one call at a time (whoever took it from
  // free_slots_).
  struct Slot {
    std::unique_ptr<kernels::ThreadPool> pool;
    std::unique_ptr<engine::ExpertExecutor> executor;
  };
  // A slot's executor over the current weights_ (options_.compute).
  absl::StatusOr<std::unique_ptr<engine::ExpertExecutor>> MakeExecutor(kernels::ThreadPool* pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(weights_mu_);
  // compute cuda: uploads the resident set again into every slot's executor.
  absl::Status RebuildDeviceExecutors() ABSL_EXCLUSIVE_LOCKS_REQUIRED(weights_mu_);
  struct Job {
    engine::ExpertCall call;
    RunDone done;
  };

  ResidentSet ResidentLocked() const ABSL_SHARED_LOCKS_REQUIRED(weights_mu_);
  absl::Status WarmUpKeys(const std::vector<ExpertKey>& keys);
  // Blocks for a free slot; RESOURCE_EXHAUSTED when `bounded` and the queue is full.
  absl::StatusOr<Slot*> AcquireSlot(bool bounded) ABSL_LOCKS_EXCLUDED(slots_mu_);
  void ReleaseSlot(Slot* slot) ABSL_LOCKS_EXCLUDED(slots_mu_);
  // Argument checks of Run(); `ids` gets the call's expert ids, sorted.
  absl::Status CheckCall(const engine::ExpertCall& call, std::vector<int32_t>* ids,
                         int64_t* tokens) const;
  // Computes a checked call on `slot` (readiness and residency checked under weights_mu_).
  absl::Status RunOnSlot(Slot* slot, const engine::ExpertCall& call,
                         const std::vector<int32_t>& ids, int64_t tokens, absl::Duration* took)
      ABSL_LOCKS_EXCLUDED(weights_mu_);
  // A slot thread: runs queued RunAsync calls until stopped and the queue is empty.
  void SlotLoop() ABSL_LOCKS_EXCLUDED(slots_mu_);

  // Constant after construction.
  const ExpertWorkerCoreOptions options_;
  common::Clock& clock_;
  ExpertWorkerMetrics metrics_;

  // Protects the resident set: Run() holds it shared, Load/Unload exclusively.
  mutable absl::Mutex weights_mu_;
  std::unique_ptr<model::Checkpoint> checkpoint_ ABSL_GUARDED_BY(weights_mu_);
  // layers[l].experts[e] has non-null views exactly for resident experts.
  model::ModelWeights weights_ ABSL_GUARDED_BY(weights_mu_);
  bool ready_ ABSL_GUARDED_BY(weights_mu_) = false;

  // Constant after Init(): every slot; a slot is free or held by one call.
  std::vector<std::unique_ptr<Slot>> all_slots_;
  absl::Mutex slots_mu_;
  std::vector<Slot*> free_slots_ ABSL_GUARDED_BY(slots_mu_);
  int waiting_ ABSL_GUARDED_BY(slots_mu_) = 0;        // Run() callers waiting for a slot
  std::deque<Job> queue_ ABSL_GUARDED_BY(slots_mu_);  // RunAsync calls waiting for a slot
  int inline_running_ ABSL_GUARDED_BY(slots_mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(slots_mu_) = false;
  // Started by Init(), joined by ~Impl.
  std::vector<std::thread> slot_threads_;
};

absl::StatusOr<std::unique_ptr<ExpertWorkerCore>> ExpertWorkerCore::Create(
    const ExpertWorkerCoreOptions& options, common::metrics::Registry& registry,
    common::Clock& clock) {
  RETURN_IF_ERROR(options.Validate());
  // Read config.json alone first (no tensors), to resolve '*' in the specs.
  ASSIGN_OR_RETURN(auto probe,
                   model::Checkpoint::Open(options.model_dir, model::LoadOptions::OnlyExperts({})));
  ASSIGN_OR_RETURN(std::vector<ExpertKey> keys, ParseExpertSpecs(options.experts, probe->config()));
  probe.reset();
  auto impl = std::make_unique<Impl>(options, clock, registry);
  RETURN_IF_ERROR(impl->Init(keys));
  return std::unique_ptr<ExpertWorkerCore>(new ExpertWorkerCore(std::move(impl)));
}

ExpertWorkerCore::ExpertWorkerCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExpertWorkerCore::~ExpertWorkerCore() = default;

absl::Status ExpertWorkerCore::WarmUp() { return impl_->WarmUp(); }
bool ExpertWorkerCore::ready() const { return impl_->ready(); }
absl::Status ExpertWorkerCore::Run(const engine::ExpertCall& call, absl::Duration* compute) {
  return impl_->Run(call, compute);
}
void ExpertWorkerCore::RunAsync(const engine::ExpertCall& call, RunDone done) {
  impl_->RunAsync(call, std::move(done));
}
absl::StatusOr<ResidentSet> ExpertWorkerCore::Load(const std::vector<ExpertKey>& keys) {
  return impl_->Load(keys);
}
ResidentSet ExpertWorkerCore::Unload(const std::vector<ExpertKey>& keys) {
  return impl_->Unload(keys);
}
ResidentSet ExpertWorkerCore::resident() const { return impl_->resident(); }
const model::ModelConfig& ExpertWorkerCore::config() const { return impl_->config(); }
kernels::Activations ExpertWorkerCore::activations() const { return impl_->activations(); }

absl::Status ExpertWorkerCoreOptions::Validate() const {
  RETURN_IF_ERROR(common::config::CheckFields(*this));
  if (compute == Compute::kCuda && activations != kernels::Activations::kBf16) {
    return absl::InvalidArgumentError(
        "compute: cuda computes the gpu numerics (bf16 activations into tensor cores); set "
        "activations: bf16 on this worker and its routers");
  }
  if (compute == Compute::kCuda && weights != model::WeightsMode::kCheckpoint) {
    return absl::InvalidArgumentError(
        "compute: cuda uploads the checkpoint's weights as bf16; weights: q8_0 is CPU-only");
  }
  if (compute == Compute::kCuda && max_concurrent_calls != 1) {
    return absl::InvalidArgumentError(
        "compute: cuda needs max_concurrent_calls: 1 (one device copy of the weights)");
  }
  return absl::OkStatus();
}

Compute ExpertWorkerCore::compute() const { return impl_->compute(); }

absl::Status ExpertWorkerCore::CheckActivations(kernels::Activations caller) const {
  if (caller == activations()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the caller computes with ", kernels::ActivationsName(caller),
                   " activations and this worker with ", kernels::ActivationsName(activations()),
                   ": core.activations must be the same on every process of the cluster"));
}

absl::Status ExpertWorkerCore::CheckWeights(model::WeightsMode caller) const {
  if (caller == impl_->weights_mode()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the caller computes with ", model::WeightsModeName(caller),
                   " weights and this worker with ", model::WeightsModeName(impl_->weights_mode()),
                   ": core.weights must be the same on every process of the cluster"));
}

ExpertWorkerCore::Impl::Impl(const ExpertWorkerCoreOptions& options, common::Clock& clock,
                             common::metrics::Registry& registry)
    : options_(options), clock_(clock), metrics_(registry) {}

absl::StatusOr<std::unique_ptr<engine::ExpertExecutor>> ExpertWorkerCore::Impl::MakeExecutor(
    kernels::ThreadPool* pool) {
  if (options_.compute == Compute::kCpu) {
    return std::make_unique<engine::LocalExpertExecutor>(&weights_, pool, options_.activations);
  }
#if MOE_HAVE_CUDA
  ASSIGN_OR_RETURN(std::unique_ptr<engine::CudaExpertExecutor> e,
                   engine::CudaExpertExecutor::Create(checkpoint_->config(), weights_));
  return std::unique_ptr<engine::ExpertExecutor>(std::move(e));
#else
  return absl::FailedPreconditionError(
      "core.compute: cuda, but this build has no CUDA (configure with nvcc, MOE_ENABLE_CUDA)");
#endif
}

absl::Status ExpertWorkerCore::Impl::RebuildDeviceExecutors() {
  if (options_.compute != Compute::kCuda) return absl::OkStatus();
  for (const std::unique_ptr<Slot>& slot : all_slots_) {
    ASSIGN_OR_RETURN(std::unique_ptr<engine::ExpertExecutor> e, MakeExecutor(slot->pool.get()));
    slot->executor = std::move(e);
  }
  return absl::OkStatus();
}

absl::Status ExpertWorkerCore::Impl::Init(const std::vector<ExpertKey>& keys) {
  model::LoadOptions load = model::LoadOptions::OnlyExperts(keys);
  load.weights = options_.weights;
  absl::MutexLock lock(&weights_mu_);
  ASSIGN_OR_RETURN(checkpoint_, model::Checkpoint::Open(options_.model_dir, load));
  weights_ = checkpoint_->weights();
  {
    absl::MutexLock slots_lock(&slots_mu_);
    for (int i = 0; i < options_.max_concurrent_calls; ++i) {
      auto slot = std::make_unique<Slot>();
      slot->pool = std::make_unique<kernels::ThreadPool>(options_.threads_per_call);
      ASSIGN_OR_RETURN(slot->executor, MakeExecutor(slot->pool.get()));
      free_slots_.push_back(slot.get());
      all_slots_.push_back(std::move(slot));
    }
  }
  for (int i = 0; i < options_.max_concurrent_calls; ++i) {
    slot_threads_.emplace_back([this] { SlotLoop(); });
  }
  const ResidentSet r = ResidentLocked();
  metrics_.resident_experts.Set(static_cast<double>(r.experts.size()));
  metrics_.resident_bytes.Set(static_cast<double>(r.bytes));
  return absl::OkStatus();
}

ExpertWorkerCore::Impl::~Impl() {
  {
    absl::MutexLock lock(&slots_mu_);
    stop_ = true;
  }
  for (std::thread& t : slot_threads_) t.join();
}

bool ExpertWorkerCore::Impl::ready() const {
  absl::ReaderMutexLock lock(&weights_mu_);
  return ready_;
}

absl::Status ExpertWorkerCore::Impl::WarmUp() {
  std::vector<ExpertKey> keys = resident().experts;
  RETURN_IF_ERROR(WarmUpKeys(keys));
  absl::MutexLock lock(&weights_mu_);
  ready_ = true;
  return absl::OkStatus();
}

absl::Status ExpertWorkerCore::Impl::WarmUpKeys(const std::vector<ExpertKey>& keys) {
  if (options_.warmup_tokens == 0 || keys.empty()) return absl::OkStatus();
  const int64_t hidden = config().hidden_size;
  const int64_t n = options_.warmup_tokens;
  std::vector<float> in(static_cast<size_t>(n * hidden));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  std::vector<float> out(in.size());
  // One call per (layer, expert) on whichever slot is free (calls may be running: Load).
  for (const ExpertKey& k : keys) {
    engine::ExpertCall call;
    call.layer_idx = static_cast<int32_t>(k.layer);
    call.hidden = hidden;
    call.batches.push_back({static_cast<int32_t>(k.expert), n, in.data(), out.data()});
    ASSIGN_OR_RETURN(Slot * slot, AcquireSlot(/*bounded=*/false));
    absl::Status status;
    {
      absl::ReaderMutexLock lock(&weights_mu_);
      auto h = slot->executor->Submit(call);
      status = h.ok() ? slot->executor->Await(*h) : h.status();
    }
    ReleaseSlot(slot);
    RETURN_IF_ERROR(status);
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertWorkerCore::Impl::Slot*> ExpertWorkerCore::Impl::AcquireSlot(bool bounded) {
  absl::MutexLock lock(&slots_mu_);
  if (bounded && free_slots_.empty() &&
      waiting_ + static_cast<int64_t>(queue_.size()) >= options_.max_queued_calls) {
    metrics_.rejected_total.Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("expert worker: ", waiting_, " calls already queued"));
  }
  ++waiting_;
  slots_mu_.Await(absl::Condition(
      +[](std::vector<Slot*>* free) { return !free->empty(); }, &free_slots_));
  --waiting_;
  Slot* slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void ExpertWorkerCore::Impl::ReleaseSlot(Slot* slot) {
  absl::MutexLock lock(&slots_mu_);
  free_slots_.push_back(slot);
}

absl::Status ExpertWorkerCore::Impl::CheckCall(const engine::ExpertCall& call,
                                               std::vector<int32_t>* ids, int64_t* tokens) const {
  const model::ModelConfig& c = config();
  if (call.layer_idx < 0 || call.layer_idx >= c.num_hidden_layers ||
      !c.IsMoeLayer(call.layer_idx)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer_idx ", call.layer_idx, " is not an MoE layer of the model"));
  }
  if (call.hidden != c.hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden ", call.hidden, " != the model's ", c.hidden_size));
  }
  if (call.batches.empty()) return absl::InvalidArgumentError("no expert batches");
  *tokens = 0;
  for (const engine::ExpertBatch& b : call.batches) {
    if (b.expert_id < 0 || b.expert_id >= c.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat("expert_id ", b.expert_id, " out of range"));
    }
    if (b.num_tokens <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", b.expert_id, ": num_tokens must be >= 1"));
    }
    ids->push_back(b.expert_id);
    *tokens += b.num_tokens;
  }
  std::sort(ids->begin(), ids->end());
  if (std::adjacent_find(ids->begin(), ids->end()) != ids->end()) {
    return absl::InvalidArgumentError("duplicate expert_id in one call");
  }
  return absl::OkStatus();
}

absl::Status ExpertWorkerCore::Impl::Run(const engine::ExpertCall& call, absl::Duration* compute) {
  std::vector<int32_t> ids;
  int64_t tokens = 0;
  RETURN_IF_ERROR(CheckCall(call, &ids, &tokens));
  ASSIGN_OR_RETURN(Slot * slot, AcquireSlot(/*bounded=*/true));
  absl::Duration took;
  absl::Status status = RunOnSlot(slot, call, ids, tokens, &took);
  ReleaseSlot(slot);
  if (compute != nullptr) *compute = took;
  return status;
}

void ExpertWorkerCore::Impl::RunAsync(const engine::ExpertCall& call, RunDone done) {
  std::vector<int32_t> ids;
  int64_t tokens = 0;
  if (absl::Status s = CheckCall(call, &ids, &tokens); !s.ok()) {
    done(std::move(s), absl::ZeroDuration());
    return;
  }
  Slot* slot = nullptr;
  bool rejected = false;
  {
    absl::MutexLock lock(&slots_mu_);
    if (!free_slots_.empty() && queue_.empty() && inline_running_ < options_.max_inline_calls) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      ++inline_running_;
    } else if (free_slots_.empty() &&
               waiting_ + static_cast<int64_t>(queue_.size()) >= options_.max_queued_calls) {
      rejected = true;
    } else {
      queue_.push_back({call, std::move(done)});
      return;
    }
  }
  if (rejected) {
    metrics_.rejected_total.Increment();
    done(absl::ResourceExhaustedError(
             absl::StrCat("expert worker: ", options_.max_queued_calls, " calls already queued")),
         absl::ZeroDuration());
    return;
  }
  absl::Duration took;
  absl::Status status = RunOnSlot(slot, call, ids, tokens, &took);
  {
    absl::MutexLock lock(&slots_mu_);
    free_slots_.push_back(slot);
    --inline_running_;
  }
  done(std::move(status), took);
}

void ExpertWorkerCore::Impl::SlotLoop() {
  for (;;) {
    Job job;
    Slot* slot = nullptr;
    {
      absl::MutexLock lock(&slots_mu_);
      slots_mu_.Await(absl::Condition(
          +[](Impl* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return (c->stop_ && c->queue_.empty()) ||
                   (!c->queue_.empty() && !c->free_slots_.empty());
          },
          this));
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    std::vector<int32_t> ids;
    int64_t tokens = 0;
    absl::Duration took;
    absl::Status status = CheckCall(job.call, &ids, &tokens);
    if (status.ok()) status = RunOnSlot(slot, job.call, ids, tokens, &took);
    ReleaseSlot(slot);
    job.done(std::move(status), took);
  }
}

absl::Status ExpertWorkerCore::Impl::RunOnSlot(Slot* slot, const engine::ExpertCall& call,
                                               const std::vector<int32_t>& ids, int64_t tokens,
                                               absl::Duration* compute) {
  absl::Status status;
  absl::Duration took;
  {
    absl::ReaderMutexLock lock(&weights_mu_);
    if (!ready_) {
      status = absl::UnavailableError("expert worker is warming up");
    } else {
      const model::LayerWeights& layer = weights_.layers[call.layer_idx];
      for (int32_t e : ids) {
        if (!engine::HasFfn(layer.experts[e])) {
          status = absl::FailedPreconditionError(absl::StrCat(
              "expert ", e, " of layer ", call.layer_idx, " is not resident on this worker"));
          break;
        }
      }
      if (status.ok()) {
        const absl::Time start = clock_.Now();
        auto handle = slot->executor->Submit(call);
        status = handle.ok() ? slot->executor->Await(*handle) : handle.status();
        took = clock_.Now() - start;
      }
    }
  }
  if (status.ok()) {
    metrics_.calls_total.Increment();
    metrics_.tokens_total.Increment(static_cast<double>(tokens));
    metrics_.busy_seconds.Increment(absl::ToDoubleSeconds(took));
  }
  if (compute != nullptr) *compute = took;
  return status;
}

ResidentSet ExpertWorkerCore::Impl::ResidentLocked() const {
  ResidentSet r;
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const auto& experts = weights_.layers[l].experts;
    for (size_t e = 0; e < experts.size(); ++e) {
      if (engine::HasFfn(experts[e])) {
        r.experts.push_back({static_cast<int64_t>(l), static_cast<int64_t>(e)});
        r.bytes += ExpertBytes(experts[e]);
      }
    }
  }
  return r;
}

ResidentSet ExpertWorkerCore::Impl::resident() const {
  absl::ReaderMutexLock lock(&weights_mu_);
  return ResidentLocked();
}

absl::StatusOr<ResidentSet> ExpertWorkerCore::Impl::Load(const std::vector<ExpertKey>& keys) {
  const model::ModelConfig& c = config();
  for (const ExpertKey& k : keys) {
    if (k.layer < 0 || k.layer >= c.num_hidden_layers || !c.IsMoeLayer(k.layer) || k.expert < 0 ||
        k.expert >= c.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("no expert ", k.expert, " on MoE layer ", k.layer, " in the model"));
    }
  }
  std::vector<ExpertKey> added;
  {
    absl::MutexLock lock(&weights_mu_);
    for (const ExpertKey& k : keys) {
      model::ExpertWeights& slot = weights_.layers[k.layer].experts[k.expert];
      if (engine::HasFfn(slot)) continue;
      ASSIGN_OR_RETURN(model::ExpertWeights w, checkpoint_->MapExpert(k.layer, k.expert));
      slot = w;
      added.push_back(k);
    }
    if (!added.empty()) RETURN_IF_ERROR(RebuildDeviceExecutors());
  }
  RETURN_IF_ERROR(WarmUpKeys(added));
  ResidentSet r = resident();
  metrics_.resident_experts.Set(static_cast<double>(r.experts.size()));
  metrics_.resident_bytes.Set(static_cast<double>(r.bytes));
  return r;
}

ResidentSet ExpertWorkerCore::Impl::Unload(const std::vector<ExpertKey>& keys) {
  ResidentSet r;
  {
    absl::MutexLock lock(&weights_mu_);
    for (const ExpertKey& k : keys) {
      if (k.layer < 0 || k.layer >= static_cast<int64_t>(weights_.layers.size())) continue;
      auto& experts = weights_.layers[k.layer].experts;
      if (k.expert < 0 || k.expert >= static_cast<int64_t>(experts.size())) continue;
      experts[k.expert] = model::ExpertWeights{};
    }
    // Unload cannot fail: a failed re-upload keeps the old device copy, which still holds every
    // expert that stays resident (the unloaded ones are refused by the resident check first).
    (void)RebuildDeviceExecutors();
    r = ResidentLocked();
  }
  metrics_.resident_experts.Set(static_cast<double>(r.experts.size()));
  metrics_.resident_bytes.Set(static_cast<double>(r.bytes));
  return r;
}

}  // namespace moe::expert_worker
