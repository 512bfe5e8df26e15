// The router's Generate request handling, as RouterServer::Generate does it after authorisation
// (not through a socket): the input parsed as a GenerateRequest (inputs that do not parse are
// dropped), RouterServer::FromProto (limits, sampling params, stop ids, the constraint compiled
// against the tiny model's tokenizer), then Scheduler::Submit (prompt ids vs vocabulary and
// context, sampling validation, KV blocks). An accepted request is cancelled and the scheduler
// stepped on this thread until idle (its loop is never started: no thread runs between inputs).
// The tiny preset is written once per process into a scratch directory.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/base/clock.h"
#include "common/grpc/auth.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "moe/router/v1/router.pb.h"
#include "services/router/core/router_core.h"
#include "services/router/router_server.h"

namespace {

namespace pb = ::moe::router::v1;

struct Router {
  moe::common::metrics::Registry registry;
  std::unique_ptr<moe::common::rpc::Authorizer> auth;
  std::unique_ptr<moe::router::RouterCore> core;
  std::unique_ptr<moe::router::RouterServer> server;
};

Router& TheRouter() {
  static Router* r = [] {
    auto* st = new Router;
    const std::string& dir = moe::fuzz::ScratchDir("router");
    moe::model::MakeModelOptions make;
    make.preset = moe::model::Preset::kTiny;
    if (!moe::model::MakeModel(make, dir).ok()) std::abort();
    moe::router::RouterCoreOptions options;
    options.model_dir = dir;
    options.model_name = "tiny";
    options.num_threads = 1;
    options.kv_num_blocks = 64;
    auto core =
        moe::router::RouterCore::Create(options, st->registry, moe::common::SystemClock::Get());
    if (!core.ok() || (*core)->grammar_cache() == nullptr) std::abort();
    st->core = *std::move(core);
    st->auth = moe::common::rpc::Authorizer::AllowAll("router", st->registry);
    const auto& config = st->core->config();
    st->server = std::make_unique<moe::router::RouterServer>(
        st->core->scheduler(),
        moe::router::RouterServerInfo{.model_name = "tiny",
                                      .router_id = "r0",
                                      .vocab_size = config.vocab_size,
                                      .max_context = config.max_position_embeddings,
                                      .num_layers = config.num_hidden_layers,
                                      .num_experts = config.num_experts},
        moe::common::SystemClock::Get(), *st->auth);
    st->server->set_grammar_cache(st->core->grammar_cache());
    return st;
  }();
  return *r;
}

}  // namespace

MOE_FUZZ_QUIET_PROTOBUF()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pb::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  Router& r = TheRouter();
  auto converted = r.server->FromProto(request);
  if (!converted.ok()) return 0;
  moe::router::Scheduler& scheduler = r.core->scheduler();
  auto submitted = scheduler.Submit(*std::move(converted));
  if (!submitted.ok()) return 0;
  scheduler.Cancel(submitted->seq_id);
  for (int i = 0; i < 8 && scheduler.HasWork(); ++i) scheduler.Step();
  if (scheduler.HasWork()) std::abort();  // a cancelled request must end at the next step
  return 0;
}
