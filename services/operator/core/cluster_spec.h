// Typed views of the operator's custom resources (deploy/crds): MoECluster, ExpertPool and
// RouterCalibration, parsed from their JSON with the CRDs' defaults applied (an API server
// defaults on write; parsing defaults again keeps the operator correct against objects written
// before a default existed, and against the test API server, which does not default).
//
// Pure functions; the JSON is the object as the API server returns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace moe::op {

using Json = nlohmann::json;

// Reading the objects: `j[key]` when it is set, not null and a T, else `fallback`; `j[key]`
// when it is an object, else an empty object.
namespace json_read {
template <typename T>
T Get(const Json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception&) {
    return fallback;
  }
}
const Json& Obj(const Json& j, const char* key);
}  // namespace json_read

inline constexpr char kGroup[] = "moe-cluster.io";
inline constexpr char kApiVersion[] = "moe-cluster.io/v1alpha1";

struct Bounds {
  int min_replicas = 1;
  int max_replicas = 1;
};

// One expert pool: an entry of MoECluster spec.expertPools, or a standalone ExpertPool.
struct PoolSpec {
  std::string name;                  // the pool's name (the entry's, or the ExpertPool's)
  std::string object_name;           // the ExpertPool object: "<cluster>-<pool>" for entries
  bool standalone = false;           // an ExpertPool created on its own (spec.cluster)
  int replicas = 1;                  // desired workers
  std::vector<std::string> experts;  // core.experts specs
  std::optional<Bounds> autoscaling;
  int gpus = 0;
  int threads_per_call = 1;
  int max_concurrent_calls = 1;
  int max_queued_calls = 64;
  Json resources = Json::object();
  Json node_selector = Json::object();
  Json tolerations = Json::array();
};

struct RecalibrationPolicy {
  enum class Mode { kOff, kOnDemand, kThreshold, kScheduled };
  Mode mode = Mode::kOnDemand;
  absl::Duration window = absl::Seconds(300);
  absl::Duration interval = absl::Seconds(30);
  double imbalance_threshold = 0.8;
  int sustain = 3;
  int64_t min_tokens = 0;
  absl::Duration cooldown = absl::Seconds(300);
  std::string schedule;  // cron, kScheduled only
};

struct AutoscalingPolicy {
  bool enabled = false;
  double expert_utilisation = 0.7;  // target mean utilisation of a pool's workers
  std::optional<Bounds> gateway, routers, asr, tts;
};

struct ClusterSpec {
  // metadata
  std::string name;
  std::string ns;
  std::string uid;
  int64_t generation = 0;
  bool deleting = false;  // deletionTimestamp set
  std::vector<std::string> finalizers;
  Json spec = Json::object();  // as written (the chart values are built from it)

  std::string model_name;
  int routers = 1;
  bool sidecar_experts = false;
  std::vector<PoolSpec> pools;                  // spec.expertPools, in order
  std::string placement_policy = "RoundRobin";  // RoundRobin | Static | EPLB
  int slots_per_worker = 0;
  AutoscalingPolicy autoscaling;
  RecalibrationPolicy recalibration;
};

// INVALID_ARGUMENT naming the field for a missing name/model or a malformed value (a duration,
// a pool without experts).
absl::StatusOr<ClusterSpec> ParseCluster(const Json& moecluster);
// A standalone ExpertPool (or the ExpertPool of an entry: its spec wins over the entry's).
absl::StatusOr<PoolSpec> ParseExpertPool(const Json& expertpool);
// The ExpertPool object name of `pool` in `cluster`: "<cluster>-<pool>".
std::string PoolObjectName(const std::string& cluster, const std::string& pool);

struct CalibrationSpec {
  std::string name;
  std::string ns;
  std::string uid;
  int64_t generation = 0;
  std::string cluster;
  bool scheduled = false;  // mode Scheduled (else OneShot)
  std::string schedule;
  absl::Duration window = absl::Seconds(300);
  int slots_per_worker = 0;
  std::optional<double> only_below_balancedness;
  bool dry_run = false;
  absl::Duration drain_timeout = absl::Seconds(30);
  absl::Duration timeout = absl::Minutes(10);
  absl::Time created;
};
absl::StatusOr<CalibrationSpec> ParseCalibration(const Json& routercalibration);

// RFC 3339 with seconds ("2026-12-01T03:00:00Z"), as metav1.Time; and back (INVALID_ARGUMENT).
std::string Rfc3339(absl::Time t);
absl::StatusOr<absl::Time> ParseRfc3339(const std::string& text);

}  // namespace moe::op
