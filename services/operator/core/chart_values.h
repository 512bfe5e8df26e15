// MoECluster -> the Helm chart's values (deploy/k8s/values.yaml), the one renderer's input.
//
// The operator does not keep a second copy of the chart's objects: it renders the chart
// (operator.enabled=false, the plain workloads) with these values and applies what comes out
// (children.h). This function is the inverse of the chart's templates/operator/moecluster.yaml
// (which renders a MoECluster from values), extended to every field of the CRD.
//
// Expert pools are rendered at their floor (topology.h): the routers' config lists the floor
// workers; the StatefulSets' replicas and the live placement are the operator's (children.h,
// pool_plan.h).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "services/operator/core/cluster_spec.h"

namespace moe::op {

// `pools`: the cluster's effective pools in id order (its spec.expertPools as their ExpertPools
// say, then standalone ExpertPools naming it). `base`: values under the cluster's (the
// operator's --chart_values: ports, monitoring, network policy ...); the cluster's own fields
// win. The prometheus-operator objects (PodMonitor, ServiceMonitor, PrometheusRule) are off:
// the operator applies only the kinds its RBAC names (children.h). The namespace-wide monitoring
// ConfigMaps (rule file, dashboards, prometheus-adapter rules) are off unless `base` turns them
// on: the operator's own release renders them once per namespace. INVALID_ARGUMENT for a bad
// quantity.
absl::StatusOr<Json> ChartValues(const ClusterSpec& cluster, const std::vector<PoolSpec>& pools,
                                 const Json& base);

// Deep merge: objects merge key by key, anything else in `over` replaces `under`.
Json MergeValues(Json under, const Json& over);

}  // namespace moe::op
