#include "tools/moe/up_options.h"

#include "absl/strings/str_cat.h"
#include "tools/moe/up_topology.h"

namespace moe::cli {

namespace config = common::config;

void ServiceOptions::Describe(config::Schema<ServiceOptions>& s) {
  s.Add("replicas", &ServiceOptions::replicas, "processes to start").Range(0, 64);
  s.Add("args", &ServiceOptions::args, "extra command-line flags");
  s.Add("port", &ServiceOptions::port, "fixed port (gateway HTTP); 0 = any free one")
      .Range(0, 65535);
}

void SecurityOptions::Describe(config::Schema<SecurityOptions>& s) {
  s.Add("mtls", &SecurityOptions::mtls, "throwaway CA, mTLS on every gRPC hop");
  s.Add("auth", &SecurityOptions::auth, "per-role gRPC auth on every service, gateway API keys");
  s.Add("tokens", &SecurityOptions::tokens, "also grant roles by bearer token under mtls");
  s.Add("dir", &SecurityOptions::dir, "certificates, tokens, keys; default <data_dir>/security");
  s.Add("api_keys_file", &SecurityOptions::api_keys_file,
        "gateway key file (digests); default: moe up makes one key");
}

absl::Status SecurityOptions::Validate() const {
  if (tokens && !auth) return absl::InvalidArgumentError("tokens: true needs auth: true");
  if (!api_keys_file.empty() && !auth) {
    return absl::InvalidArgumentError("api_keys_file: needs auth: true");
  }
  return absl::OkStatus();
}

void NumericsOptions::Describe(config::Schema<NumericsOptions>& s) {
  s.Add("activations", &NumericsOptions::activations,
        "f32 | bf16: routers' and workers' core.activations");
  s.Add("weights", &NumericsOptions::weights,
        "checkpoint | q8_0: routers' and workers' core.weights");
}

absl::Status NumericsOptions::Validate() const {
  if (activations != "f32" && activations != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("activations: '", activations, "' is not f32 or bf16"));
  }
  if (weights != "checkpoint" && weights != "q8_0") {
    return absl::InvalidArgumentError(
        absl::StrCat("weights: '", weights, "' is not checkpoint or q8_0"));
  }
  return absl::OkStatus();
}

void UpOptions::Describe(config::Schema<UpOptions>& s) {
  s.Add("model_dir", &UpOptions::model_dir, "checkpoint; default <repo>/.models/<preset>");
  s.Add("preset", &UpOptions::preset, "preset made when the model is missing");
  s.Add("host", &UpOptions::host, "loopback address the services bind").NonEmpty();
  s.Add("data_dir", &UpOptions::data_dir, "kv-store L3 data; default <repo>/.moe-data");
  s.Add("ready_timeout", &UpOptions::ready_timeout, "wait for readiness at most")
      .Min(absl::Seconds(1));
  s.Add("stop_timeout", &UpOptions::stop_timeout, "grace per service on stop")
      .Min(absl::ZeroDuration());
  for (const ServiceSpec& spec : Topology()) s.Section(spec.name, spec.options);
  s.Section("security", &UpOptions::security);
  s.Section("numerics", &UpOptions::numerics);
}

absl::Status UpOptions::Validate() const {
  if (absl::Status st = config::CheckFields(*this); !st.ok()) return st;
  for (const ServiceSpec& spec : Topology()) {
    const int32_t replicas = (this->*spec.options).replicas;
    if (spec.min_replicas == spec.max_replicas && replicas != spec.min_replicas) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, ".replicas: must be ", spec.min_replicas));
    }
    if (replicas < spec.min_replicas) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, ".replicas: at least ", spec.min_replicas));
    }
    if (replicas > spec.max_replicas) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, ".replicas: at most ", spec.max_replicas));
    }
  }
  return absl::OkStatus();
}

}  // namespace moe::cli
