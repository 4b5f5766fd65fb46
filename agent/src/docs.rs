//! Which objects go into a batch, and what of each: pure functions over
//! k8s-openapi types and JSON.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::Value;

/// The label Flotilla puts on the nodes it launches, naming the NodeClaim
/// (`flotilla_service::records::NODECLAIM_LABEL`).
pub const NODECLAIM_LABEL: &str = "flotilla.io/nodeclaim";
/// Set by the agent once a node's NodeClaim labels and taints are applied.
pub const REGISTERED_LABEL: &str = "flotilla.io/registered";

/// A pod the scheduler gave up on: not bound, not finished, not being
/// deleted, and `PodScheduled=False` with reason `Unschedulable` (what
/// Karpenter provisions for). DaemonSet pods are left out: their overhead
/// comes from the DaemonSet.
pub fn is_unschedulable(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return false;
    }
    if pod.metadata.deletion_timestamp.is_some() || is_daemon_pod(pod) {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    if status.phase.as_deref().is_some_and(|p| p != "Pending") {
        return false;
    }
    status.conditions.iter().flatten().any(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })
}

/// `Succeeded` or `Failed`: holds no resources.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Bound to a node and not finished.
pub fn bound_node(pod: &Pod) -> Option<&str> {
    if is_terminal(pod) {
        return None;
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

pub fn is_daemon_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
}

/// A static pod's mirror (the kubelet owns it; eviction cannot move it).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Pod annotations that disruption reads: never disrupt (and its v1alpha5
/// spelling), and the eviction order among a node's pods.
pub const POD_ANNOTATIONS: &[&str] = &[
    flotilla_core::labels::DO_NOT_DISRUPT,
    flotilla_core::labels::DO_NOT_EVICT,
    flotilla_core::labels::POD_DELETION_COST,
];

/// Node annotations that disruption reads: never disrupt / consolidate,
/// and the NodePool and EC2NodeClass template hashes recorded at launch
/// (with their `-version` companions: `karpenter.sh/nodepool-hash-version`).
pub const NODE_ANNOTATIONS: &[&str] = &[
    flotilla_core::labels::DO_NOT_DISRUPT,
    flotilla_core::labels::DO_NOT_CONSOLIDATE,
];
/// Prefixes of further node annotations kept (see [`NODE_ANNOTATIONS`]).
pub const NODE_ANNOTATION_PREFIXES: &[&str] = &[
    flotilla_core::labels::NODEPOOL_HASH,
    flotilla_core::labels::NODECLASS_HASH,
];

/// Which annotations a document keeps.
#[derive(Clone, Copy)]
enum Annotations {
    /// All but `kubectl.kubernetes.io/last-applied-configuration`.
    All,
    /// Only these keys, and keys starting with these prefixes.
    Only(&'static [&'static str], &'static [&'static str]),
}

fn strip_metadata(v: &mut Value, keep: Annotations) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "selfLink",
            "finalizers",
        ] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            match keep {
                Annotations::All => {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
                Annotations::Only(keys, prefixes) => a.retain(|k, _| {
                    keys.contains(&k.as_str()) || prefixes.iter().any(|p| k.starts_with(p))
                }),
            }
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// A pod as sent: metadata without bookkeeping (`creationTimestamp` and
/// `deletionTimestamp` stay; of the annotations only [`POD_ANNOTATIONS`]),
/// the spec, and of the status only the phase, the scheduling conditions of
/// pending pods and the `startTime` of bound ones (disruption dates a node's
/// last change by its pods' creation and start times).
pub fn pod_document(pod: &Pod) -> Value {
    let mut v = serde_json::to_value(pod).unwrap_or(Value::Null);
    strip_metadata(&mut v, Annotations::Only(POD_ANNOTATIONS, &[]));
    // Of each container, only what scheduling reads (requests, limits,
    // host ports, sidecar restart policy): env, commands, probes and
    // mounts can be most of a pod's size.
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        for list in ["containers", "initContainers"] {
            if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.retain(|k, _| {
                        matches!(k.as_str(), "name" | "resources" | "ports" | "restartPolicy")
                    });
                }
            }
        }
        spec.remove("ephemeralContainers");
        // Of the volumes, only the claims scheduling reads (PVCs and
        // ephemeral claims). The service account token volume
        // (`kube-api-access-<random>`) and StatefulSet hostnames differ per
        // pod and matter to no scheduling rule: kept, they would make every
        // pod its own template.
        if let Some(vs) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
            vs.retain(|v| v.get("persistentVolumeClaim").is_some() || v.get("ephemeral").is_some());
            if vs.is_empty() {
                spec.remove("volumes");
            }
        }
        spec.remove("hostname");
    }
    let pending = bound_node(pod).is_none();
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| {
            k == "phase" || (pending && k == "conditions") || (!pending && k == "startTime")
        });
        if let Some(c) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            c.retain(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"));
        }
    }
    v
}

/// A node as sent: labels, taints, unschedulable, providerID, allocatable
/// and capacity, `creationTimestamp`, of the annotations only those
/// disruption reads ([`NODE_ANNOTATIONS`], [`NODE_ANNOTATION_PREFIXES`]),
/// and of the conditions only `Ready`'s type and status (disruption waits
/// for Ready replacements and leaves NotReady nodes alone); no images, no
/// heartbeat or transition times (they would change the document every
/// minute).
pub fn node_document(node: &k8s_openapi::api::core::v1::Node) -> Value {
    let mut v = serde_json::to_value(node).unwrap_or(Value::Null);
    strip_metadata(
        &mut v,
        Annotations::Only(NODE_ANNOTATIONS, NODE_ANNOTATION_PREFIXES),
    );
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| k == "allocatable" || k == "capacity" || k == "conditions");
        if let Some(cs) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            cs.retain(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.retain(|k, _| k == "type" || k == "status");
            }
            if cs.is_empty() {
                status.remove("conditions");
            }
        }
    }
    v
}

/// Any other object (NodePools, EC2NodeClasses, DaemonSets, volumes...):
/// bookkeeping and status removed, annotations kept (StorageClass defaults
/// and preference annotations live there). `api_version` and `kind` are
/// set when given (list items of dynamic objects carry neither).
pub fn object_document(mut v: Value, api_version: Option<&str>, kind: Option<&str>) -> Value {
    strip_metadata(&mut v, Annotations::All);
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
        if let Some(a) = api_version {
            o.insert("apiVersion".into(), Value::String(a.into()));
        }
        if let Some(k) = kind {
            o.insert("kind".into(), Value::String(k.into()));
        }
    }
    v
}

/// A `policy/v1` PodDisruptionBudget as sent: name, namespace and labels,
/// the spec (selector, `minAvailable` / `maxUnavailable`,
/// `unhealthyPodEvictionPolicy`), and of the status the disruption
/// controller's counts (`disruptionsAllowed`, `currentHealthy`,
/// `desiredHealthy`, `expectedPods`): disruption plans with them, and the
/// Eviction API still has the last word when the agent drains.
pub fn pdb_document(pdb: &PodDisruptionBudget) -> Value {
    let mut v = serde_json::to_value(pdb).unwrap_or(Value::Null);
    strip_metadata(&mut v, Annotations::Only(&[], &[]));
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), Value::String("policy/v1".into()));
        o.insert("kind".into(), Value::String("PodDisruptionBudget".into()));
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| {
            matches!(
                k.as_str(),
                "disruptionsAllowed" | "currentHealthy" | "desiredHealthy" | "expectedPods"
            )
        });
    }
    v
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn pod(v: Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    pub fn pending(name: &str) -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": name, "namespace": "default",
                "managedFields": [{"manager": "kubectl"}], "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "nginx",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                {"type": "Ready", "status": "False"}]}
        }))
    }

    #[test]
    fn pods_of_one_workload_share_a_template_despite_their_token_volumes() {
        let replica = |name: &str, token: &str| {
            let d = pod_document(&pod(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop",
                    "labels": {"app": "web", "pod-template-hash": "5d8f"}},
                "spec": {"nodeName": "n1", "hostname": name, "containers": [{"name": "c",
                        "resources": {"requests": {"cpu": "1"}},
                        "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets"}]}],
                    "volumes": [
                        {"name": token, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                        {"name": "cfg", "configMap": {"name": "cfg"}}]},
                "status": {"phase": "Running"}
            })));
            flotilla_core::state::PodRow::split(d).expect("a pod splits")
        };
        let (a, ta, _) = replica("web-1", "kube-api-access-abcde");
        let (b, tb, _) = replica("web-2", "kube-api-access-vwxyz");
        assert_eq!(a, b, "one template");
        assert_eq!(ta, tb);
        let names: Vec<&str> = ta["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["data", "scratch"],
            "the claims scheduling reads stay"
        );
        assert!(ta["spec"].get("hostname").is_none());
    }

    #[test]
    fn only_pods_the_scheduler_gave_up_on_are_pending() {
        assert!(is_unschedulable(&pending("a")));
        let mut bound = pending("b");
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert!(!is_unschedulable(&bound));
        assert_eq!(bound_node(&bound), Some("n1"));
        // Not yet looked at by the scheduler.
        let fresh = pod(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {"containers": []},
            "status": {"phase": "Pending"}
        }));
        assert!(!is_unschedulable(&fresh));
        // Other reasons (e.g. SchedulingGated) are not ours.
        let mut gated = pending("d");
        gated.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].reason =
            Some("SchedulingGated".into());
        assert!(!is_unschedulable(&gated));
        let mut deleting = pending("e");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!is_unschedulable(&deleting));
        let mut daemon = pending("f");
        daemon.metadata.owner_references = Some(vec![serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true
        })).unwrap()]);
        assert!(!is_unschedulable(&daemon));
        assert!(is_daemon_pod(&daemon));
        let mut done = pending("g");
        done.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(!is_unschedulable(&done));
        assert!(is_terminal(&done));
    }

    #[test]
    fn documents_drop_bookkeeping_but_keep_what_scheduling_reads() {
        let d = pod_document(&pending("a"));
        assert_eq!(d["kind"], "Pod");
        assert_eq!(d["apiVersion"], "v1");
        assert!(d["metadata"].get("managedFields").is_none());
        assert!(d["metadata"].get("annotations").is_none());
        assert_eq!(d["status"]["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(
            d["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "500m"
        );
        assert!(d["spec"]["containers"][0].get("image").is_none());
        assert_eq!(d["spec"]["containers"][0]["name"], "c");

        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": {"x": "y"}, "annotations": {"big": "z"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"},
                "images": [{"names": ["a"], "sizeBytes": 1}], "conditions": []}
        }))
        .unwrap();
        let d = node_document(&node);
        assert_eq!(d["kind"], "Node");
        assert_eq!(
            d["status"],
            serde_json::json!({"allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"}})
        );
        assert_eq!(d["spec"]["taints"][0]["key"], "k");

        let sc = object_document(
            serde_json::json!({"metadata": {"name": "gp3", "managedFields": [],
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
                "provisioner": "ebs.csi.aws.com", "status": {"x": 1}}),
            Some("storage.k8s.io/v1"),
            Some("StorageClass"),
        );
        assert_eq!(sc["kind"], "StorageClass");
        assert!(sc.get("status").is_none());
        assert_eq!(
            sc["metadata"]["annotations"],
            serde_json::json!({"storageclass.kubernetes.io/is-default-class": "true"})
        );
    }

    /// Of a node's conditions only Ready's type and status are sent: no
    /// heartbeat or transition time, no other condition.
    #[test]
    fn node_documents_keep_the_ready_condition_only() {
        let hb = "2026-11-25T05:00:00Z";
        let cond = |t: &str, st: &str| {
            serde_json::json!({"type": t, "status": st, "reason": "KubeletReady",
                "lastHeartbeatTime": hb, "lastTransitionTime": hb})
        };
        // (conditions posted, conditions sent)
        let cases = [
            (serde_json::json!([]), None),
            (
                serde_json::json!([cond("MemoryPressure", "False"), cond("Ready", "True")]),
                Some(serde_json::json!([{"type": "Ready", "status": "True"}])),
            ),
            (
                serde_json::json!([cond("Ready", "Unknown")]),
                Some(serde_json::json!([{"type": "Ready", "status": "Unknown"}])),
            ),
            (serde_json::json!([cond("DiskPressure", "False")]), None),
        ];
        for (posted, want) in cases {
            let node: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "n"},
                    "status": {"allocatable": {"cpu": "4"}, "conditions": posted}
                }))
                .unwrap();
            let d = node_document(&node);
            assert_eq!(d["status"].get("conditions").cloned(), want, "{posted}");
        }
    }

    /// A bound pod of a Deployment as the API server shows it.
    fn bound(annotations: Value) -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "shop",
                "creationTimestamp": "2026-11-25T06:00:00Z",
                "managedFields": [{"manager": "kube-controller-manager"}],
                "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx",
                "resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-25T06:00:05Z",
                "podIP": "10.0.0.7", "hostIP": "10.0.0.1", "qosClass": "Burstable",
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    #[test]
    fn pods_keep_the_annotations_and_times_disruption_reads() {
        // (annotations on the pod, annotations sent)
        let cases = [
            (serde_json::json!({}), None),
            (
                serde_json::json!({"karpenter.sh/do-not-disrupt": "true",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                    "prometheus.io/scrape": "true"}),
                Some(serde_json::json!({"karpenter.sh/do-not-disrupt": "true"})),
            ),
            (
                serde_json::json!({"karpenter.sh/do-not-disrupt": "1h"}),
                Some(serde_json::json!({"karpenter.sh/do-not-disrupt": "1h"})),
            ),
            (
                serde_json::json!({"karpenter.sh/do-not-evict": "true"}),
                Some(serde_json::json!({"karpenter.sh/do-not-evict": "true"})),
            ),
            (
                serde_json::json!({"controller.kubernetes.io/pod-deletion-cost": "-100",
                    "checksum/config": "abc"}),
                Some(serde_json::json!({"controller.kubernetes.io/pod-deletion-cost": "-100"})),
            ),
            // Only other annotations: none sent, not even an empty map.
            (serde_json::json!({"a": "b"}), None),
        ];
        for (given, sent) in cases {
            let d = pod_document(&bound(given.clone()));
            assert_eq!(d["metadata"].get("annotations").cloned(), sent, "{given}");
            assert_eq!(d["metadata"]["creationTimestamp"], "2026-11-25T06:00:00Z");
            assert_eq!(
                d["status"],
                serde_json::json!({"phase": "Running", "startTime": "2026-11-25T06:00:05Z"}),
                "{given}"
            );
            assert!(d["metadata"].get("managedFields").is_none());
        }
        // A terminating pod says so.
        let mut going = bound(serde_json::json!({}));
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let d = pod_document(&going);
        assert_eq!(d["metadata"]["deletionTimestamp"], "1970-01-01T00:00:00Z");
        // A pending pod has no start time to send, only its scheduling condition.
        let d = pod_document(&pending("p"));
        assert!(d["status"].get("startTime").is_none());
        assert_eq!(d["status"]["conditions"][0]["type"], "PodScheduled");
    }

    #[test]
    fn nodes_keep_the_annotations_disruption_reads() {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": "2026-11-25T05:00:00Z",
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    "karpenter.sh/do-not-consolidate": "true",
                    "karpenter.sh/nodepool-hash": "123",
                    "karpenter.sh/nodepool-hash-version": "flotilla-v1",
                    "karpenter.k8s.aws/ec2nodeclass-hash": "456",
                    "karpenter.k8s.aws/ec2nodeclass-hash-version": "flotilla-v1",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "csi.volume.kubernetes.io/nodeid": "{\"ebs.csi.aws.com\":\"i-0\"}"}},
            "spec": {"providerID": "aws:///us-west-2a/i-0abc"},
            "status": {"allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"}}
        }))
        .unwrap();
        let d = node_document(&node);
        assert_eq!(
            d["metadata"]["annotations"],
            serde_json::json!({
                "karpenter.sh/do-not-disrupt": "true",
                "karpenter.sh/do-not-consolidate": "true",
                "karpenter.sh/nodepool-hash": "123",
                "karpenter.sh/nodepool-hash-version": "flotilla-v1",
                "karpenter.k8s.aws/ec2nodeclass-hash": "456",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": "flotilla-v1"})
        );
        assert_eq!(d["metadata"]["creationTimestamp"], "2026-11-25T05:00:00Z");
        assert_eq!(d["spec"]["providerID"], "aws:///us-west-2a/i-0abc");
    }

    #[test]
    fn pdbs_keep_selector_bounds_and_the_controller_counts() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "generation": 3,
                "resourceVersion": "9", "labels": {"team": "a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"selector": {"matchLabels": {"app": "web"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]},
                "maxUnavailable": "25%", "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 4, "desiredHealthy": 3,
                "expectedPods": 4, "observedGeneration": 3,
                "disruptedPods": {"web-1": "2026-11-25T06:00:00Z"},
                "conditions": [{"type": "DisruptionAllowed", "status": "True",
                    "reason": "SufficientPods", "message": "",
                    "lastTransitionTime": "2026-11-25T06:00:00Z"}]}
        }))
        .unwrap();
        let d = pdb_document(&pdb);
        assert_eq!(
            d,
            serde_json::json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"team": "a"}},
                "spec": {"selector": {"matchLabels": {"app": "web"},
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]},
                    "maxUnavailable": "25%", "unhealthyPodEvictionPolicy": "AlwaysAllow"},
                "status": {"disruptionsAllowed": 1, "currentHealthy": 4, "desiredHealthy": 3,
                    "expectedPods": 4}
            })
        );
        // minAvailable as a number stays a number; no status, none sent.
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"minAvailable": 2, "selector": {}}
        }))
        .unwrap();
        let d = pdb_document(&pdb);
        assert_eq!(d["spec"]["minAvailable"], 2);
        assert!(d.get("status").is_none());
    }
}
