// The expert worker's RunExperts handling, as the gRPC adapter does it after authorisation
// (HandleRunExperts: the request checks of BuildCall, then ExpertWorkerCore::Run on this
// thread), not through a socket. The input is parsed as a RunExpertsRequest (inputs that do not
// parse are dropped); malformed shapes, expert ids, layers, token counts, dtypes and activation
// modes must come back as a status, never a crash. The tiny preset is written once per process
// and experts 0-1 of every layer made resident (the rest answer FAILED_PRECONDITION).
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "moe/expert_worker/v1/expert_worker.pb.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/expert_worker_server.h"

namespace {

namespace pb = ::moe::expert_worker::v1;
using moe::expert_worker::ExpertWorkerCore;

struct Worker {
  moe::common::metrics::Registry registry;
  std::unique_ptr<ExpertWorkerCore> core;
};

Worker& TheWorker() {
  static Worker* w = [] {
    auto* st = new Worker;
    const std::string& dir = moe::fuzz::ScratchDir("expert_worker");
    moe::model::MakeModelOptions make;
    make.preset = moe::model::Preset::kTiny;
    if (!moe::model::MakeModel(make, dir).ok()) std::abort();
    moe::expert_worker::ExpertWorkerCoreOptions o;
    o.model_dir = dir;
    o.experts = {"*:0-1"};
    o.warmup_tokens = 1;
    auto core = ExpertWorkerCore::Create(o, st->registry, moe::common::SystemClock::Get());
    if (!core.ok()) std::abort();
    st->core = *std::move(core);
    if (!st->core->WarmUp().ok()) std::abort();
    return st;
  }();
  return *w;
}

}  // namespace

MOE_FUZZ_QUIET_PROTOBUF()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pb::RunExpertsRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  Worker& w = TheWorker();
  pb::RunExpertsResponse response;
  const ::grpc::Status s = moe::expert_worker::HandleRunExperts(*w.core, request, &response);
  if (s.ok()) {
    // Every batch answered, each [num_tokens, hidden] f32 of the request's size.
    if (response.outputs_size() != request.batches_size()) std::abort();
    for (int i = 0; i < response.outputs_size(); ++i) {
      const auto& out = response.outputs(i).outputs();
      if (out.data().size() != request.batches(i).activations().data().size()) std::abort();
    }
  } else if (response.outputs_size() != 0) {
    std::abort();  // an error clears the response
  }
  return 0;
}
