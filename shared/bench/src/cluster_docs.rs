//! Generated clusters as the agent's documents (for the state-by-changes
//! benchmark): nodes in three zones, Deployments' bound pods spread over
//! them, and pending pods with preferred hostname and zone spreads.
//! Deterministic for the same arguments.

use serde_json::{json, Value};

use crate::mixes::Rng;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub nodes: usize,
    pub bound_pods: usize,
    pub pending_pods: usize,
    /// Deployments the bound pods belong to.
    pub apps: usize,
    pub seed: u64,
}

const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];

/// The NodePool and its EC2NodeClass.
pub fn pool_documents() -> Vec<Value> {
    vec![
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
                                 {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}]}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}}}),
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
                     "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                     "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}]}}),
    ]
}

pub fn node_name(i: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.us-west-2.compute.internal",
        i / 65_536,
        (i / 256) % 256,
        i % 256
    )
}

/// Node `i` as the agent sends it.
pub fn node(i: usize) -> Value {
    let name = node_name(i);
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": ZONES[i % 3], "topology.kubernetes.io/region": "us-west-2",
                "node.kubernetes.io/instance-type": "m5.4xlarge", "karpenter.sh/capacity-type": "on-demand",
                "karpenter.sh/nodepool": "default", "karpenter.k8s.aws/instance-category": "m"}},
        "spec": {"providerID": format!("aws:///{}/i-{i:017x}", ZONES[i % 3])},
        "status": {"allocatable": {"cpu": "15890m", "memory": "57691Mi", "pods": "234", "ephemeral-storage": "18242267924"},
                   "capacity": {"cpu": "16", "memory": "63124Mi", "pods": "234"}}})
}

/// A pod of Deployment `app` (its template: requests, labels, a zone
/// spread), named `i`, on `node` when bound.
pub fn pod(app: usize, i: usize, node: Option<&str>) -> Value {
    let name = format!("app-{app}-7d4b9c{app:04x}-{i:x}");
    let labels =
        json!({"app": format!("app-{app}"), "pod-template-hash": format!("7d4b9c{app:04x}")});
    let cpu = ["100m", "250m", "500m", "1"][app % 4];
    let memory = ["128Mi", "256Mi", "512Mi", "1Gi"][(app / 4) % 4];
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": format!("team-{}", app % 16), "labels": labels,
            "creationTimestamp": format!("2026-11-2{}T{:02}:{:02}:00Z", 1 + i % 5, i % 24, i % 60),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": true,
                "name": format!("app-{app}-7d4b9c{app:04x}"), "uid": format!("00000000-0000-0000-0000-{app:012}")}]},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}},
                                 "ports": [{"containerPort": 8080, "protocol": "TCP"}]}],
                 "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                     "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": format!("app-{app}")}}}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
                 "schedulerName": "default-scheduler", "priority": 0},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running", "startTime": format!("2026-11-2{}T{:02}:{:02}:30Z", 1 + i % 5, i % 24, i % 60)});
    }
    p
}

/// A pending pod of the large-cluster shape: preferred hostname and zone
/// spreads over its app.
pub fn pending_pod(app: usize, i: usize) -> Value {
    let mut p = pod(app, i, None);
    p["metadata"]["name"] = json!(format!("pending-{app}-{i}"));
    p["spec"]["topologySpreadConstraints"] = json!([
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": format!("app-{app}")}}},
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": format!("app-{app}")}}}]);
    p
}

/// Bound pod `i`'s Deployment and node (indexes), for every bound pod
/// of `shape`: what [`for_each_document`] generates them from.
pub fn placements(shape: Shape) -> Vec<(u32, u32)> {
    let mut rng = Rng::new(shape.seed);
    let apps = shape.apps.max(1);
    let nodes = shape.nodes.max(1);
    (0..shape.bound_pods)
        .map(|_| {
            let app = rng.below(apps);
            let node = rng.below(nodes);
            (
                u32::try_from(app).unwrap_or(u32::MAX),
                u32::try_from(node).unwrap_or(u32::MAX),
            )
        })
        .collect()
}

/// Bound pod `i` placed on `(app, node)`.
pub fn bound_pod(i: usize, (app, node): (u32, u32)) -> Value {
    pod(app as usize, i, Some(&node_name(node as usize)))
}

/// Every document of `shape`, handed one at a time to `f` (a million pods
/// are never all held as documents).
pub fn for_each_document(shape: Shape, mut f: impl FnMut(Value)) {
    for d in pool_documents() {
        f(d);
    }
    for i in 0..shape.nodes {
        f(node(i));
    }
    let mut rng = Rng::new(shape.seed);
    let apps = shape.apps.max(1);
    let nodes = shape.nodes.max(1);
    for i in 0..shape.bound_pods {
        let app = rng.below(apps);
        f(pod(app, i, Some(&node_name(rng.below(nodes)))));
    }
    for i in 0..shape.pending_pods {
        f(pending_pod(i % 20, i));
    }
}
