//! Karpenter's provisioning suite and instance-type selection suite, ported
//! as tables.
//!
//! Sources: kubernetes-sigs/karpenter
//! `pkg/controllers/provisioning/suite_test.go` ([`SUITE`]) and
//! `pkg/controllers/provisioning/scheduling/instance_selection_test.go`
//! ([`INSTANCE_SELECTION`]), every `It`. Each case is what a Karpenter user
//! would try: Kubernetes documents (Pods, DaemonSets, NodePools
//! `karpenter.sh/v1`, an EC2NodeClass, Nodes with their bound pods, volumes)
//! written as YAML, read by `flotilla_input::load` and planned by
//! `flotilla_core::scheduler::schedule` on the embedded us-west-2 catalog.
//! The conventions are those of `karpenter_topology.rs`:
//!
//! * `test-zone-1/2/3` are `us-west-2a/b/c`; every NodePool that does not
//!   restrict zones itself is given `topology.kubernetes.io/zone In
//!   [us-west-2a, us-west-2b, us-west-2c]`;
//! * the fake instance types are real EC2 types. The fake catalog's size
//!   ladder (`small-instance-type` 2 CPU / 2Gi, `default-instance-type`
//!   4 CPU / 4Gi, bigger ones labelled `size: large`) is the `c5` family:
//!   `c5.large` is "small", `c5.xlarge` is "default", and the fake `size`
//!   label is `karpenter.k8s.aws/instance-cpu` (`Lt 5` small, `Gt 4` large);
//!   `arm-instance-type` is any arm64 type; GPU vendors A and B are
//!   `nvidia.com/gpu` and `aws.amazon.com/neuron`; the fake
//!   `single-pod-instance-type` is an EC2NodeClass with `kubelet.maxPods: 1`;
//!   the numeric fake label `karpenter/numerical-value` is
//!   `karpenter.k8s.aws/instance-generation` (a1 = 1, m6g = 6, ...);
//!   instance types that exist only in a Go test are names that are not in
//!   the catalog; a fake type offered in two of the three zones is `a1.*`
//!   (us-west-2a and us-west-2c only);
//! * the EC2NodeClass sets `kubelet.maxPods: 5`, the fake types' pod count;
//! * a NodePool without a capacity-type requirement launches on-demand
//!   (Karpenter's AWS provider and Flotilla agree; the fake provider offers
//!   both at the same price), so "the cheapest instance" is the cheapest
//!   on-demand offering for such pools;
//! * "the cheapest instance" (`ExpectScheduled` + `nodePrice == minPrice`)
//!   is checked against the whole catalog: no type at least as large as the
//!   one chosen (vCPU and memory), allowed by the case's constraints, has a
//!   cheaper offering in the allowed zones of the same capacity type, and
//!   spot is taken whenever it is allowed;
//! * `ExpectProvisioned` followed by more `ExpectProvisioned` calls is a
//!   sequence of *steps*: the plan's NodeClaims become `Node`s (labels of
//!   the NodeClaim, zone, capacity type, instance type, architecture,
//!   allocatable of its cheapest type, taints) and the planned pods are
//!   bound to them; unschedulable pods stay pending into the next step;
//! * what Karpenter reads from `cloudProvider.CreateCalls[0]` (the
//!   NodeClaim's requirements, requests and instance types) is read from the
//!   plan's NodeClaim of the pod (`requirements`, `resources.requests`,
//!   `instanceTypes`).
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never
//! failed. Every other case must behave as in Karpenter.
//!
//! Tally: `suite_test.go` has 104 `It`s: 91 are ported (all 91 behave as
//! in Karpenter; 71 and 20 known differences when first ported), 13 are in
//! [`NOT_PORTED`]. `instance_selection_test.go` has 36: 35 are ported (29
//! as in Karpenter, 6 known differences: Windows and the spot default;
//! "should schedule on an instance with enough resources" is one case per
//! pod size, 3 of the 49 sizes differ), 1 is in [`NOT_PORTED`]. The known
//! differences left are listed above [`NOT_PORTED`]. The `DescribeTable` entries of `suite_test.go` (local
//! volumes' hostname affinity, ignored preferences) are not `It`s and are
//! not ported here; volume topology is covered in depth elsewhere.
//!
//! `cargo test -p flotilla-input --test karpenter_provisioning -- --nocapture`
//! prints each case's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use flotilla_core::catalog::Catalog;
use flotilla_core::plan::{NodeClaimPlan, Plan};
use flotilla_core::quantity::Quantity;
use flotilla_core::scheduler::{schedule, MinValuesPolicy, SchedulerOptions};
use flotilla_input::{load, Source};
use serde_json::{json, Value};

/// The Go files.
const SUITE: &str = "pkg/controllers/provisioning/suite_test.go";
const INSTANCE_SELECTION: &str =
    "pkg/controllers/provisioning/scheduling/instance_selection_test.go";

// ---------------------------------------------------------------------------
// Vocabulary

/// Karpenter's `test-zone-1`, `test-zone-2`, `test-zone-3`.
const Z1: &str = "us-west-2a";
const Z2: &str = "us-west-2b";
const Z3: &str = "us-west-2c";
const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";
const CT: &str = "karpenter.sh/capacity-type";
const ARCH: &str = "kubernetes.io/arch";
const OS: &str = "kubernetes.io/os";
const ITYPE: &str = "node.kubernetes.io/instance-type";
const NODEPOOL: &str = "karpenter.sh/nodepool";
const FAMILY: &str = "karpenter.k8s.aws/instance-family";
const CPU: &str = "karpenter.k8s.aws/instance-cpu";
const GEN: &str = "karpenter.k8s.aws/instance-generation";
/// Karpenter's `NodeClaimMinValuesRelaxedAnnotationKey`.
const RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// The fake `small-instance-type` and `default-instance-type`.
const SMALL: &str = "c5.large";
const DEFAULT: &str = "c5.xlarge";

fn map(kv: &[(&str, &str)]) -> Value {
    Value::Object(
        kv.iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect(),
    )
}

fn sel(kv: &[(&str, &str)]) -> Value {
    json!({ "matchLabels": map(kv) })
}

/// A node selector requirement (`NodeSelectorRequirement`).
fn req(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({ "key": key, "operator": op })
    } else {
        json!({ "key": key, "operator": op, "values": values })
    }
}

/// A NodePool requirement with `minValues`.
fn req_min(key: &str, op: &str, values: &[&str], min: u32) -> Value {
    let mut r = req(key, op, values);
    r["minValues"] = json!(min);
    r
}

/// A pod affinity term.
fn term(kv: &[(&str, &str)], key: &str) -> Value {
    json!({ "labelSelector": sel(kv), "topologyKey": key })
}

fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Value {
    let mut t = json!({ "operator": op });
    if !key.is_empty() {
        t["key"] = json!(key);
    }
    if !value.is_empty() {
        t["value"] = json!(value);
    }
    if !effect.is_empty() {
        t["effect"] = json!(effect);
    }
    t
}

fn taint(key: &str, value: &str, effect: &str) -> Value {
    if value.is_empty() {
        json!({ "key": key, "effect": effect })
    } else {
        json!({ "key": key, "value": value, "effect": effect })
    }
}

fn rl(kv: &[(&str, &str)]) -> Value {
    map(kv)
}

/// A container (init containers, sidecars) with requests and limits.
fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Value {
    let mut c = json!({ "name": name, "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2" });
    let mut r = serde_json::Map::new();
    if !requests.is_empty() {
        r.insert("requests".into(), rl(requests));
    }
    if !limits.is_empty() {
        r.insert("limits".into(), rl(limits));
    }
    if !r.is_empty() {
        c["resources"] = Value::Object(r);
    }
    c
}

/// A native sidecar: an init container with `restartPolicy: Always`.
fn sidecar(name: &str, requests: &[(&str, &str)]) -> Value {
    let mut c = container(name, requests, requests);
    c["restartPolicy"] = json!("Always");
    c
}

// ---------------------------------------------------------------------------
// Pods (Karpenter's `test.UnschedulablePod(test.PodOptions{...})`)

#[derive(Clone, Default)]
struct P {
    labels: Vec<(&'static str, &'static str)>,
    requests: Vec<(&'static str, &'static str)>,
    limits: Vec<(&'static str, &'static str)>,
    init: Vec<Value>,
    pod_resources: Option<Value>,
    host_ports: Vec<u16>,
    node_selector: Vec<(&'static str, &'static str)>,
    /// Required node affinity terms (OR'd).
    terms: Vec<Vec<Value>>,
    /// Preferred node affinity terms (weight, requirements).
    prefs: Vec<(i32, Vec<Value>)>,
    pod_anti: Vec<Value>,
    tolerations: Vec<Value>,
    pvcs: Vec<&'static str>,
    /// Generic ephemeral volumes: their storage class.
    ephemeral: Vec<&'static str>,
    owner: Option<Value>,
    node_name: Option<String>,
}

fn p() -> P {
    P::default()
}

impl P {
    fn labels(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.labels.extend_from_slice(kv);
        self
    }
    /// Requests (`resources.requests`).
    fn req(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.requests.extend_from_slice(kv);
        self
    }
    fn cpu(self, cpu: &'static str) -> Self {
        self.req(&[("cpu", cpu)])
    }
    /// Limits (`resources.limits`).
    fn lim(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.limits.extend_from_slice(kv);
        self
    }
    fn init(mut self, c: Value) -> Self {
        self.init.push(c);
        self
    }
    /// Pod-level `spec.resources`.
    fn pod_resources(mut self, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Self {
        self.pod_resources = Some(json!({ "requests": rl(requests), "limits": rl(limits) }));
        self
    }
    fn host_port(mut self, port: u16) -> Self {
        self.host_ports.push(port);
        self
    }
    fn node_selector(mut self, k: &'static str, v: &'static str) -> Self {
        self.node_selector.push((k, v));
        self
    }
    /// A requirement of the first required node affinity term.
    fn node_req(mut self, r: Value) -> Self {
        if self.terms.is_empty() {
            self.terms.push(vec![]);
        }
        self.terms[0].push(r);
        self
    }
    /// One more OR'd required node affinity term.
    fn node_term(mut self, reqs: Vec<Value>) -> Self {
        self.terms.push(reqs);
        self
    }
    /// A preferred node affinity term.
    fn node_pref(mut self, weight: i32, reqs: Vec<Value>) -> Self {
        self.prefs.push((weight, reqs));
        self
    }
    fn anti(mut self, t: Value) -> Self {
        self.pod_anti.push(t);
        self
    }
    fn tolerate(mut self, t: Value) -> Self {
        self.tolerations.push(t);
        self
    }
    fn pvc(mut self, claim: &'static str) -> Self {
        self.pvcs.push(claim);
        self
    }
    fn ephemeral(mut self, storage_class: &'static str) -> Self {
        self.ephemeral.push(storage_class);
        self
    }
    fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.owner = Some(json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": name,
            "uid": format!("{name}-uid"), "controller": true, "blockOwnerDeletion": true,
        }]));
        self
    }
    fn on(mut self, node: &str) -> Self {
        self.node_name = Some(node.to_string());
        self
    }

    /// The pod spec (also a DaemonSet's template spec).
    fn spec(&self) -> Value {
        let mut main = container("app", &[], &[]);
        let mut r = serde_json::Map::new();
        if !self.requests.is_empty() {
            r.insert("requests".into(), rl(&self.requests));
        }
        if !self.limits.is_empty() {
            r.insert("limits".into(), rl(&self.limits));
        }
        if !r.is_empty() {
            main["resources"] = Value::Object(r);
        }
        if !self.host_ports.is_empty() {
            main["ports"] = json!(self
                .host_ports
                .iter()
                .map(|hp| json!({ "containerPort": hp, "hostPort": hp, "protocol": "TCP" }))
                .collect::<Vec<_>>());
        }
        let mut spec = json!({ "containers": [main] });
        if !self.init.is_empty() {
            spec["initContainers"] = json!(self.init);
        }
        if let Some(pr) = &self.pod_resources {
            spec["resources"] = pr.clone();
        }
        if !self.node_selector.is_empty() {
            spec["nodeSelector"] = map(&self.node_selector);
        }
        let mut affinity = serde_json::Map::new();
        let mut node_aff = serde_json::Map::new();
        if !self.terms.is_empty() {
            let terms: Vec<Value> = self
                .terms
                .iter()
                .map(|t| json!({ "matchExpressions": t }))
                .collect();
            node_aff.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!({ "nodeSelectorTerms": terms }),
            );
        }
        if !self.prefs.is_empty() {
            let prefs: Vec<Value> = self
                .prefs
                .iter()
                .map(|(w, t)| json!({ "weight": w, "preference": { "matchExpressions": t } }))
                .collect();
            node_aff.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                json!(prefs),
            );
        }
        if !node_aff.is_empty() {
            affinity.insert("nodeAffinity".into(), Value::Object(node_aff));
        }
        if !self.pod_anti.is_empty() {
            affinity.insert(
                "podAntiAffinity".into(),
                json!({ "requiredDuringSchedulingIgnoredDuringExecution": self.pod_anti }),
            );
        }
        if !affinity.is_empty() {
            spec["affinity"] = Value::Object(affinity);
        }
        if !self.tolerations.is_empty() {
            spec["tolerations"] = json!(self.tolerations);
        }
        let mut volumes: Vec<Value> = self
            .pvcs
            .iter()
            .enumerate()
            .map(|(i, c)| json!({ "name": format!("v{i}"), "persistentVolumeClaim": { "claimName": c } }))
            .collect();
        for (i, sc) in self.ephemeral.iter().enumerate() {
            volumes.push(json!({
                "name": format!("e{i}"),
                "ephemeral": { "volumeClaimTemplate": { "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": sc,
                    "resources": { "requests": { "storage": "10Gi" } },
                } } },
            }));
        }
        if !volumes.is_empty() {
            spec["volumes"] = json!(volumes);
        }
        spec
    }

    fn build(&self, name: &str) -> Value {
        let mut meta = json!({ "name": name, "namespace": "default" });
        if !self.labels.is_empty() {
            meta["labels"] = map(&self.labels);
        }
        if let Some(o) = &self.owner {
            meta["ownerReferences"] = o.clone();
        }
        let mut pod =
            json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": self.spec() });
        if let Some(n) = &self.node_name {
            pod["spec"]["nodeName"] = json!(n);
            pod["status"] = json!({ "phase": "Running" });
        }
        pod
    }
}

/// One pod.
fn pod(name: &str, t: &P) -> Vec<Value> {
    vec![t.build(name)]
}

/// `test.UnschedulablePods(opts, n)`: `prefix-0` … `prefix-(n-1)`.
fn pods(prefix: &str, n: usize, t: &P) -> Vec<Value> {
    (0..n).map(|i| t.build(&format!("{prefix}-{i}"))).collect()
}

/// `test.DaemonSet(test.DaemonSetOptions{PodOptions: ...})`.
fn ds(name: &str, t: &P) -> Vec<Value> {
    vec![json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "selector": { "matchLabels": { "ds": name } },
            "template": { "metadata": { "labels": { "ds": name } }, "spec": t.spec() },
        },
    })]
}

// ---------------------------------------------------------------------------
// Karpenter objects, nodes and volumes

#[derive(Clone)]
struct Np {
    name: &'static str,
    reqs: Vec<Value>,
    labels: Vec<(&'static str, &'static str)>,
    annotations: Vec<(&'static str, &'static str)>,
    taints: Vec<Value>,
    startup_taints: Vec<Value>,
    limits: Option<Value>,
    weight: Option<i32>,
    node_class: &'static str,
    replicas: Option<u32>,
    deleting: bool,
}

/// `test.NodePool(...)` with the given requirements.
fn np(name: &'static str, reqs: Vec<Value>) -> Np {
    Np {
        name,
        reqs,
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        limits: None,
        weight: None,
        node_class: "default",
        replicas: None,
        deleting: false,
    }
}

/// `test.NodePool()`.
fn default_np() -> Np {
    np("default", vec![])
}

/// The fake catalog's size ladder (see the module docs).
fn c5_np() -> Np {
    np("default", vec![req(FAMILY, "In", &["c5"])])
}

impl Np {
    fn labels(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.labels.extend_from_slice(kv);
        self
    }
    fn annotations(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.annotations.extend_from_slice(kv);
        self
    }
    fn taint(mut self, t: Value) -> Self {
        self.taints.push(t);
        self
    }
    fn startup_taint(mut self, t: Value) -> Self {
        self.startup_taints.push(t);
        self
    }
    fn limits(mut self, l: Value) -> Self {
        self.limits = Some(l);
        self
    }
    fn weight(mut self, w: i32) -> Self {
        self.weight = Some(w);
        self
    }
    fn node_class(mut self, n: &'static str) -> Self {
        self.node_class = n;
        self
    }
    fn replicas(mut self, r: u32) -> Self {
        self.replicas = Some(r);
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn build(&self) -> Value {
        let mut reqs = self.reqs.clone();
        if !reqs.iter().any(|r| r["key"] == ZONE) {
            // the fake cloud provider's three zones
            reqs.push(req(ZONE, "In", &[Z1, Z2, Z3]));
        }
        let mut spec = json!({
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": self.node_class },
            "requirements": reqs,
        });
        if !self.taints.is_empty() {
            spec["taints"] = json!(self.taints);
        }
        if !self.startup_taints.is_empty() {
            spec["startupTaints"] = json!(self.startup_taints);
        }
        let mut template = json!({ "spec": spec });
        let mut tmeta = serde_json::Map::new();
        if !self.labels.is_empty() {
            tmeta.insert("labels".into(), map(&self.labels));
        }
        if !self.annotations.is_empty() {
            tmeta.insert("annotations".into(), map(&self.annotations));
        }
        if !tmeta.is_empty() {
            template["metadata"] = Value::Object(tmeta);
        }
        let mut meta = json!({ "name": self.name });
        if self.deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:10Z");
            meta["finalizers"] = json!(["karpenter.sh/termination"]);
        }
        let mut np = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": meta,
            "spec": { "template": template },
        });
        if let Some(l) = &self.limits {
            np["spec"]["limits"] = l.clone();
        }
        if let Some(w) = self.weight {
            np["spec"]["weight"] = json!(w);
        }
        if let Some(r) = self.replicas {
            np["spec"]["replicas"] = json!(r);
        }
        np
    }
}

fn nps(list: &[Np]) -> Vec<Value> {
    list.iter().map(Np::build).collect()
}

fn node_class(name: &str, alias: &str, kubelet: Option<Value>) -> Value {
    let mut nc = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": name },
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{ "alias": alias }],
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
        },
    });
    if let Some(k) = kubelet {
        nc["spec"]["kubelet"] = k;
    }
    nc
}

/// `test.Node(...)`: an existing node.
fn node(
    name: &str,
    labels: &[(&str, &str)],
    allocatable: &[(&str, &str)],
    deleting: bool,
) -> Vec<Value> {
    let mut n = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": map(labels) },
        "spec": {},
        "status": { "allocatable": map(allocatable), "capacity": map(allocatable) },
    });
    if deleting {
        n["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:10Z");
        n["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    }
    vec![n]
}

/// `test.StorageClass(...)`; `zones` empty: no `allowedTopologies`.
fn storage_class(name: &str, zones: &[&str]) -> Vec<Value> {
    let mut sc = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": { "name": name },
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    });
    if !zones.is_empty() {
        sc["allowedTopologies"] =
            json!([{ "matchLabelExpressions": [{ "key": ZONE, "values": zones }] }]);
    }
    vec![sc]
}

/// `test.PersistentVolume(...)`: a CSI volume, with a node affinity on the
/// given zones (none: no node affinity) or the given requirement.
fn pv(name: &str, storage_class: &str, affinity: Option<Value>) -> Vec<Value> {
    let mut v = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": name },
        "spec": {
            "capacity": { "storage": "10Gi" },
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "csi": { "driver": "ebs.csi.aws.com", "volumeHandle": format!("vol-{name}") },
        },
    });
    if let Some(r) = affinity {
        v["spec"]["nodeAffinity"] =
            json!({ "required": { "nodeSelectorTerms": [{ "matchExpressions": [r] }] } });
    }
    vec![v]
}

/// `test.PersistentVolumeClaim(...)`; `storage_class: None` leaves the
/// field out, `Some("")` is the empty class.
fn pvc(name: &str, storage_class: Option<&str>, volume: Option<&str>) -> Vec<Value> {
    let mut c = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "10Gi" } },
        },
    });
    if let Some(sc) = storage_class {
        c["spec"]["storageClassName"] = json!(sc);
    }
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
    }
    vec![c]
}

// ---------------------------------------------------------------------------
// Cases

/// Constraints for [`Check::Cheapest`]: allowed architectures, zones and
/// capacity types (empty: any).
#[derive(Clone, Debug, Default)]
struct Allowed {
    arch: Vec<&'static str>,
    zones: Vec<&'static str>,
    cts: Vec<&'static str>,
}

fn allowed(arch: &[&'static str], zones: &[&'static str], cts: &[&'static str]) -> Allowed {
    Allowed {
        arch: arch.to_vec(),
        zones: zones.to_vec(),
        cts: cts.to_vec(),
    }
}

/// What Karpenter asserts after a step.
#[derive(Clone, Debug)]
enum Check {
    /// Every pod matching the pattern (`name` or `prefix*`) is scheduled.
    Scheduled(&'static str),
    NotScheduled(&'static str),
    /// Exactly this many pods of the pattern are scheduled.
    ScheduledCount(&'static str, usize),
    /// The scheduled pods of the pattern share one node.
    OneNode(&'static str),
    DiffNode(&'static str, &'static str),
    /// The pod is not on this node.
    NotOn(&'static str, &'static str),
    /// Every pod of the pattern is on a node with this label value.
    NodeLabel(&'static str, &'static str, &'static str),
    /// The pod's node has the label, with any value but the one given.
    LabelNot(&'static str, &'static str, &'static str),
    NoLabel(&'static str, &'static str),
    /// The pod's node carries this annotation.
    NodeAnnotation(&'static str, &'static str, &'static str),
    /// Number of nodes in the cluster.
    Nodes(usize),
    /// The pod's node carries this taint (key=value:effect).
    HasTaint(&'static str, &'static str),
    /// The pod's NodeClaim has a requirement (key, operator) with exactly
    /// these values (`ExpectNodeClaimRequirements`).
    ClaimReq(&'static str, &'static str, &'static str, Vec<&'static str>),
    /// The pod's NodeClaim requests (`ExpectNodeClaimRequests`).
    Requests(&'static str, Vec<(&'static str, &'static str)>),
    /// The pod's NodeClaim has `minValues` n on the key (`None`: none).
    ClaimMinValues(&'static str, &'static str, Option<u32>),
    /// The pod is pending with a reason containing the text.
    Reason(&'static str, &'static str),
    /// Number of resources the pod's NodeClaim requests.
    RequestCount(&'static str, usize),
    /// At least this many instance types on the pod's NodeClaim.
    TypesAtLeast(&'static str, usize),
    /// Exactly these instance types on the pod's NodeClaim.
    TypesExactly(&'static str, Vec<&'static str>),
    /// Every instance type of the pod's NodeClaim has this architecture
    /// (`ExpectInstancesWithLabel(.., arch, ..)`).
    TypesArch(&'static str, &'static str),
    /// Every instance type of the pod's NodeClaim has an offering in the
    /// zone (`""`: any) of the capacity type (`""`: any)
    /// (`ExpectInstancesWithOffering`).
    TypesOffer(&'static str, &'static str, &'static str),
    /// Every instance type of the pod's NodeClaim has a GPU.
    TypesGpu(&'static str),
    /// Every instance type of the pod's NodeClaim has more vCPU and memory
    /// than the NodeClaim requests.
    TypesFit(&'static str),
    /// The pod's node is one of the cheapest instances (see module docs).
    Cheapest(&'static str, Allowed),
}

use Check::*;

struct Step {
    docs: Vec<Value>,
    checks: Vec<Check>,
}

fn step(docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Step {
    Step {
        docs: docs.into_iter().flatten().collect(),
        checks,
    }
}

struct Case {
    /// The `It` text, verbatim.
    name: &'static str,
    steps: Vec<Step>,
    /// What Flotilla does instead of Karpenter, when it does.
    known_difference: Option<&'static str>,
    /// Karpenter's `MIN_VALUES_POLICY` (`--min-values-policy`).
    min_values_policy: MinValuesPolicy,
}

fn case(name: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        steps,
        known_difference: None,
        min_values_policy: MinValuesPolicy::Strict,
    }
}

/// One `ExpectProvisioned` over the given documents.
fn one(name: &'static str, docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Case {
    case(name, vec![step(docs, checks)])
}

impl Case {
    fn differs(mut self, what: &'static str) -> Self {
        self.known_difference = Some(what);
        self
    }

    /// Planned with `MIN_VALUES_POLICY=BestEffort`.
    fn best_effort(mut self) -> Self {
        self.min_values_policy = MinValuesPolicy::BestEffort;
        self
    }
}

// ---------------------------------------------------------------------------
// Running a case

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded("us-west-2").expect("embedded us-west-2 catalog"))
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("quantity")
}

fn key_of(v: &Value) -> (String, String, String) {
    (
        v["kind"].as_str().unwrap_or_default().to_string(),
        v["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn pod_key(v: &Value) -> String {
    format!(
        "{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or("default"),
        v["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn pod_name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

/// The cluster as Karpenter's test client would list it.
#[derive(Default)]
struct World {
    /// NodePools, EC2NodeClasses, DaemonSets, volumes: the last definition
    /// wins.
    objects: BTreeMap<(String, String, String), Value>,
    nodes: Vec<Value>,
    bound: Vec<Value>,
    pending: Vec<Value>,
    plans: Vec<Plan>,
    /// The NodeClaim each launched node came from.
    claims: BTreeMap<String, NodeClaimPlan>,
    opts: SchedulerOptions,
}

impl World {
    fn node(&self, name: &str) -> Option<&Value> {
        self.nodes.iter().find(|n| n["metadata"]["name"] == name)
    }

    fn add(&mut self, doc: Value) {
        match doc["kind"].as_str().unwrap_or_default() {
            "Node" => self.nodes.push(doc),
            "Pod" if doc["spec"]["nodeName"].is_string() => self.bound.push(doc),
            "Pod" => self.pending.push(doc),
            _ => {
                self.objects.insert(key_of(&doc), doc);
            }
        }
    }

    fn yaml(&self) -> String {
        let mut out = String::new();
        let all = self
            .objects
            .values()
            .chain(&self.nodes)
            .chain(&self.bound)
            .chain(&self.pending);
        for d in all {
            out.push_str("---\n");
            out.push_str(&serde_yaml_ng::to_string(d).expect("yaml"));
        }
        out
    }

    /// `ExpectProvisioned`: plan, then launch the NodeClaims as Nodes and
    /// bind the planned pods.
    fn provision(&mut self, step_no: usize) -> Result<(), String> {
        let yaml = self.yaml();
        let name = format!("step-{step_no}.yaml");
        let state = load(&[Source {
            name: &name,
            bytes: yaml.as_bytes(),
        }])
        .map_err(|e| format!("load failed: {e}"))?;
        let plan = schedule(&state, catalog(), &self.opts);
        let mut placed: BTreeMap<String, String> = BTreeMap::new();
        for nc in &plan.node_claims {
            let node_name = format!("{}-s{step_no}", nc.name);
            let mut labels: BTreeMap<String, String> = nc.labels.clone();
            let zone = labels.get(ZONE).cloned().unwrap_or_else(|| {
                if nc.zones.len() == 1 {
                    nc.zones[0].clone()
                } else {
                    nc.price.zone.clone()
                }
            });
            labels.insert(ZONE.into(), zone);
            labels
                .entry(CT.into())
                .or_insert_with(|| nc.price.capacity_type.as_str().to_string());
            labels
                .entry(ITYPE.into())
                .or_insert_with(|| nc.price.instance_type.clone());
            if let Some(e) = catalog().get(&nc.price.instance_type) {
                labels
                    .entry(ARCH.into())
                    .or_insert_with(|| e.info.architecture.clone());
            }
            labels.insert(OS.into(), "linux".into());
            labels.insert(HOST.into(), node_name.clone());
            labels.insert(NODEPOOL.into(), nc.node_pool.clone());
            let mut n = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": { "name": node_name, "labels": labels },
                "spec": {},
                "status": { "allocatable": serde_json::to_value(&nc.resources.allocatable).expect("resources") },
            });
            if !nc.taints.is_empty() {
                n["spec"]["taints"] = serde_json::to_value(&nc.taints).expect("taints");
            }
            self.nodes.push(n);
            self.claims.insert(node_name.clone(), nc.clone());
            for p in &nc.pods {
                placed.insert(p.clone(), node_name.clone());
            }
        }
        for en in &plan.existing_nodes {
            for p in &en.pods {
                placed.insert(p.clone(), en.name.clone());
            }
        }
        let pending = std::mem::take(&mut self.pending);
        for mut p in pending {
            match placed.get(&pod_key(&p)) {
                Some(n) => {
                    p["spec"]["nodeName"] = json!(n);
                    p["status"] = json!({ "phase": "Running" });
                    self.bound.push(p);
                }
                None => self.pending.push(p),
            }
        }
        self.plans.push(plan);
        Ok(())
    }

    fn matches(pattern: &str, name: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        }
    }

    fn bound_of(&self, pattern: &str) -> Vec<&Value> {
        self.bound
            .iter()
            .filter(|p| Self::matches(pattern, pod_name(p)))
            .collect()
    }

    fn pending_of(&self, pattern: &str) -> Vec<&Value> {
        self.pending
            .iter()
            .filter(|p| Self::matches(pattern, pod_name(p)))
            .collect()
    }

    fn node_of(&self, pod: &str) -> Result<&Value, String> {
        let p = self
            .bound
            .iter()
            .find(|p| pod_name(p) == pod)
            .ok_or_else(|| format!("pod {pod} is not scheduled"))?;
        let n = p["spec"]["nodeName"].as_str().unwrap_or_default();
        self.node(n)
            .ok_or_else(|| format!("node {n} of {pod} is missing"))
    }

    /// The NodeClaim the pod's node was launched from.
    fn claim_of(&self, pod: &str) -> Result<&NodeClaimPlan, String> {
        let n = self.node_of(pod)?;
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        self.claims
            .get(name)
            .ok_or_else(|| format!("{pod} is on {name}, which no NodeClaim of this run launched"))
    }

    fn check(&self, c: &Check) -> Result<(), String> {
        let any = |pattern: &str| -> Result<(), String> {
            if self.bound_of(pattern).is_empty() && self.pending_of(pattern).is_empty() {
                Err(format!("no pod matches {pattern}"))
            } else {
                Ok(())
            }
        };
        let label = |pod: &str, key: &str| -> Result<Option<String>, String> {
            let n = self.node_of(pod)?;
            Ok(n["metadata"]["labels"][key].as_str().map(str::to_string))
        };
        match c {
            Scheduled(pat) => {
                any(pat)?;
                let left: Vec<String> = self.pending_of(pat).iter().map(|p| pod_key(p)).collect();
                if !left.is_empty() {
                    return Err(format!("want {pat} scheduled; not scheduled: {left:?}"));
                }
            }
            NotScheduled(pat) => {
                any(pat)?;
                let b: Vec<String> = self.bound_of(pat).iter().map(|p| pod_key(p)).collect();
                if !b.is_empty() {
                    return Err(format!("want {pat} not scheduled; scheduled: {b:?}"));
                }
            }
            ScheduledCount(pat, n) => {
                any(pat)?;
                let got = self.bound_of(pat).len();
                if got != *n {
                    return Err(format!("want {n} of {pat} scheduled, got {got}"));
                }
            }
            OneNode(pat) => {
                let nodes: BTreeSet<&str> = self
                    .bound_of(pat)
                    .iter()
                    .map(|p| p["spec"]["nodeName"].as_str().unwrap_or_default())
                    .collect();
                if nodes.len() != 1 {
                    return Err(format!("want {pat} on one node, got {nodes:?}"));
                }
            }
            DiffNode(a, b) => {
                let (na, nb) = (self.node_of(a)?, self.node_of(b)?);
                if na["metadata"]["name"] == nb["metadata"]["name"] {
                    return Err(format!(
                        "{a} and {b} share {}: want different nodes",
                        na["metadata"]["name"]
                    ));
                }
            }
            NotOn(pat, node) => {
                any(pat)?;
                for p in self.bound_of(pat) {
                    if p["spec"]["nodeName"] == *node {
                        return Err(format!("{} is on {node}", pod_key(p)));
                    }
                }
            }
            NodeLabel(pat, key, value) => {
                any(pat)?;
                for p in self.bound_of(pat) {
                    let n = self.node_of(pod_name(p))?;
                    if n["metadata"]["labels"][key] != *value {
                        return Err(format!(
                            "{} on a node with {key}={}, want {value}",
                            pod_key(p),
                            n["metadata"]["labels"][key]
                        ));
                    }
                }
                if self.bound_of(pat).is_empty() {
                    return Err(format!("{pat} is not scheduled"));
                }
            }
            LabelNot(pod, key, value) => match label(pod, key)? {
                None => return Err(format!("{pod}'s node has no label {key}")),
                Some(v) if v == *value => {
                    return Err(format!("{pod}'s node has {key}={v}, want another value"))
                }
                Some(_) => {}
            },
            NoLabel(pod, key) => {
                if let Some(v) = label(pod, key)? {
                    return Err(format!("{pod}'s node has {key}={v}, want no such label"));
                }
            }
            ClaimMinValues(pod, key, want) => {
                let nc = self.claim_of(pod)?;
                let got = nc
                    .requirements
                    .iter()
                    .find_map(|r| (r.key == *key).then_some(r.min_values))
                    .flatten();
                if got != *want {
                    return Err(format!(
                        "{pod}'s NodeClaim: want minValues {want:?} on {key}, got {got:?}"
                    ));
                }
            }
            Reason(pod, text) => {
                let plan = self.plans.last().ok_or("no plan")?;
                let key = format!("default/{pod}");
                let u = plan
                    .unschedulable
                    .iter()
                    .find(|u| u.pod == key)
                    .ok_or_else(|| format!("{pod} is not unschedulable"))?;
                if !u.reason.contains(text) {
                    return Err(format!(
                        "reason of {pod}: want {text:?} in it, got {:?}",
                        u.reason
                    ));
                }
            }
            NodeAnnotation(pod, key, value) => {
                let nc = self.claim_of(pod)?;
                // The plan's NodeClaim carries labels, taints and
                // requirements; annotations would be in the same output.
                let got = serde_json::to_value(nc).expect("claim")["annotations"][key].clone();
                if got != *value {
                    return Err(format!(
                        "{pod}'s NodeClaim: want annotation {key}={value}, got {got}"
                    ));
                }
            }
            Nodes(n) => {
                if self.nodes.len() != *n {
                    return Err(format!("want {n} nodes, got {}", self.nodes.len()));
                }
            }
            HasTaint(pod, want) => {
                let n = self.node_of(pod)?;
                let got: Vec<String> = n["spec"]["taints"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|t| {
                                format!(
                                    "{}={}:{}",
                                    t["key"].as_str().unwrap_or_default(),
                                    t["value"].as_str().unwrap_or_default(),
                                    t["effect"].as_str().unwrap_or_default()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if !got.iter().any(|t| t == want) {
                    return Err(format!("taints of {pod}'s node: want {want}, got {got:?}"));
                }
            }
            ClaimReq(pod, key, op, values) => {
                let nc = self.claim_of(pod)?;
                let want: BTreeSet<&str> = values.iter().copied().collect();
                let found = nc.requirements.iter().find(|r| {
                    let v = serde_json::to_value(r).expect("requirement");
                    v["key"] == *key && v["operator"] == *op
                });
                let Some(r) = found else {
                    return Err(format!(
                        "{pod}'s NodeClaim has no requirement {key} {op}; has {}",
                        serde_json::to_string(&nc.requirements).unwrap_or_default()
                    ));
                };
                let v = serde_json::to_value(r).expect("requirement");
                let got: BTreeSet<&str> = v["values"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if got != want {
                    return Err(format!(
                        "{pod}'s NodeClaim: {key} {op} {got:?}, want {want:?}"
                    ));
                }
            }
            Requests(pod, want) => {
                let nc = self.claim_of(pod)?;
                for (k, v) in want {
                    let got = nc.resources.requests.get(k);
                    if got != q(v) {
                        return Err(format!(
                            "{pod}'s NodeClaim requests {k}={}, want {v}",
                            got.to_k8s_string()
                        ));
                    }
                }
            }
            RequestCount(pod, n) => {
                let nc = self.claim_of(pod)?;
                let keys: Vec<&str> = nc
                    .resources
                    .requests
                    .iter()
                    .filter(|(_, v)| !v.is_zero())
                    .map(|(k, _)| k)
                    .collect();
                if keys.len() != *n {
                    return Err(format!(
                        "{pod}'s NodeClaim requests {keys:?}, want {n} resources"
                    ));
                }
            }
            TypesAtLeast(pod, n) => {
                let nc = self.claim_of(pod)?;
                if nc.instance_types.len() < *n {
                    return Err(format!(
                        "{pod}'s NodeClaim has {} instance types {:?}, want at least {n}",
                        nc.instance_types.len(),
                        nc.instance_types
                    ));
                }
            }
            TypesExactly(pod, want) => {
                let nc = self.claim_of(pod)?;
                let got: BTreeSet<&str> = nc.instance_types.iter().map(String::as_str).collect();
                let want: BTreeSet<&str> = want.iter().copied().collect();
                if got != want {
                    return Err(format!(
                        "{pod}'s NodeClaim instance types {got:?}, want {want:?}"
                    ));
                }
            }
            TypesArch(pod, arch) => {
                let nc = self.claim_of(pod)?;
                for t in nc.instance_types.iter() {
                    let e = catalog()
                        .get(t)
                        .ok_or_else(|| format!("{t} not in catalog"))?;
                    if e.info.architecture != *arch {
                        return Err(format!(
                            "{pod}'s NodeClaim lists {t} ({})",
                            e.info.architecture
                        ));
                    }
                }
            }
            TypesOffer(pod, zone, ct) => {
                let nc = self.claim_of(pod)?;
                for t in nc.instance_types.iter() {
                    let e = catalog()
                        .get(t)
                        .ok_or_else(|| format!("{t} not in catalog"))?;
                    let ok = e.offerings.iter().any(|o| {
                        (zone.is_empty() || o.zone == *zone)
                            && (ct.is_empty() || o.capacity_type.as_str() == *ct)
                    });
                    if !ok {
                        return Err(format!(
                            "{pod}'s NodeClaim lists {t}, which has no {ct} offering in {zone}"
                        ));
                    }
                }
            }
            TypesGpu(pod) => {
                let nc = self.claim_of(pod)?;
                for t in nc.instance_types.iter() {
                    let e = catalog()
                        .get(t)
                        .ok_or_else(|| format!("{t} not in catalog"))?;
                    if e.info.gpu.is_none() {
                        return Err(format!("{pod}'s NodeClaim lists {t}, which has no GPU"));
                    }
                }
            }
            TypesFit(pod) => {
                let nc = self.claim_of(pod)?;
                let cpu = nc.resources.requests.cpu();
                let mem = nc.resources.requests.memory();
                for t in nc.instance_types.iter() {
                    let e = catalog()
                        .get(t)
                        .ok_or_else(|| format!("{t} not in catalog"))?;
                    let cap_cpu = q(&e.info.vcpu.to_string());
                    let cap_mem = q(&format!("{}Mi", e.info.memory_mib));
                    if cpu >= cap_cpu || mem >= cap_mem {
                        return Err(format!(
                            "{pod}'s NodeClaim lists {t} ({} vCPU, {} MiB) for requests cpu={} memory={}",
                            e.info.vcpu,
                            e.info.memory_mib,
                            cpu.to_k8s_string(),
                            mem.to_k8s_string()
                        ));
                    }
                }
            }
            Cheapest(pod, a) => {
                let nc = self.claim_of(pod)?;
                let chosen = catalog()
                    .get(&nc.price.instance_type)
                    .ok_or_else(|| format!("{} not in catalog", nc.price.instance_type))?;
                let ct = nc.price.capacity_type.as_str();
                if a.cts.contains(&"spot") && ct != "spot" {
                    return Err(format!("{pod}'s node is {ct}; spot is allowed"));
                }
                let zone_ok = |z: &str| a.zones.is_empty() || a.zones.contains(&z);
                let mut cheaper = vec![];
                for e in &catalog().entries {
                    if (!a.arch.is_empty() && !a.arch.contains(&e.info.architecture.as_str()))
                        || e.info.vcpu < chosen.info.vcpu
                        || e.info.memory_mib < chosen.info.memory_mib
                    {
                        continue;
                    }
                    for o in &e.offerings {
                        if o.capacity_type.as_str() == ct
                            && zone_ok(&o.zone)
                            && o.price + 1e-9 < nc.price.min
                        {
                            cheaper.push(format!("{} {} {} ${}", e.info.name, o.zone, ct, o.price));
                        }
                    }
                }
                if !cheaper.is_empty() {
                    cheaper.truncate(5);
                    return Err(format!(
                        "{pod}'s node is {} {} at ${}; cheaper: {cheaper:?}",
                        nc.price.instance_type, ct, nc.price.min
                    ));
                }
                if !a.zones.is_empty() && !a.zones.contains(&nc.price.zone.as_str()) {
                    return Err(format!("{pod}'s node is in {}", nc.price.zone));
                }
            }
        }
        Ok(())
    }

    /// A short account of the plans, for failure messages.
    fn describe(&self) -> String {
        let mut out = String::new();
        for (i, plan) in self.plans.iter().enumerate() {
            out.push_str(&format!("    step {}:", i + 1));
            for nc in &plan.node_claims {
                out.push_str(&format!(
                    " [{} {} {} zones={:?} pods={} types={}]",
                    nc.name,
                    nc.price.instance_type,
                    nc.price.capacity_type.as_str(),
                    nc.zones,
                    nc.pods.len(),
                    nc.instance_types.len()
                ));
            }
            for en in &plan.existing_nodes {
                out.push_str(&format!(" [existing {} pods={}]", en.name, en.pods.len()));
            }
            if !plan.unschedulable.is_empty() {
                let first = &plan.unschedulable[0];
                let mut reason = first.reason.clone();
                reason.truncate(200);
                out.push_str(&format!(
                    " unschedulable={} (e.g. {}: {reason})",
                    plan.unschedulable.len(),
                    first.pod
                ));
            }
            out.push('\n');
        }
        out
    }
}

fn run_case(c: &Case) -> Result<(), String> {
    let mut w = World::default();
    w.opts.min_values_policy = c.min_values_policy;
    // the fake instance types hold 5 pods each
    w.add(node_class(
        "default",
        "al2023@latest",
        Some(json!({ "maxPods": 5 })),
    ));
    for (i, s) in c.steps.iter().enumerate() {
        for d in &s.docs {
            w.add(d.clone());
        }
        w.provision(i + 1)?;
        let errs: Vec<String> = s.checks.iter().filter_map(|ch| w.check(ch).err()).collect();
        if !errs.is_empty() {
            return Err(format!(
                "after step {}: {}\n{}",
                i + 1,
                errs.join("; "),
                w.describe()
            ));
        }
    }
    Ok(())
}

/// Runs a Describe/Context table of one Go file: every case without a
/// known difference must pass; the known differences are run and reported.
fn run_table(file: &str, context: &str, cases: Vec<Case>) {
    let mut failures = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &cases {
        let n = seen.entry(c.name).or_insert(0);
        *n += 1;
        let label = if *n > 1 {
            format!("{file}: {context} / {} (#{n})", c.name)
        } else {
            format!("{file}: {context} / {}", c.name)
        };
        let result = run_case(c);
        match (c.known_difference, result) {
            (None, Ok(())) => println!("ok: {label}"),
            (None, Err(e)) => failures.push(format!("  {label}: {e}")),
            (Some(d), Ok(())) => {
                println!("KNOWN DIFFERENCE NOW PASSES: {label} (was: {d})")
            }
            (Some(d), Err(e)) => {
                println!(
                    "known difference: {label}: {d}\n    {}",
                    e.replace('\n', "\n    ")
                )
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {context} cases behave differently from Karpenter:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// suite_test.go: Describe("Provisioning")

#[test]
fn provisioning() {
    let selectors: [(&str, &str); 5] = [
        (NODEPOOL, "default"),
        (ZONE, Z1),
        (ITYPE, DEFAULT),
        (ARCH, "arm64"),
        (OS, "linux"),
    ];
    let bad: [(&str, &str); 7] = [
        (NODEPOOL, "unknown"),
        (ZONE, "unknown"),
        (ITYPE, "unknown"),
        (ARCH, "unknown"),
        (OS, "unknown"),
        (CT, "unknown"),
        ("foo", "bar"),
    ];
    let by_selector = |prefix: &str, list: &[(&'static str, &'static str)]| -> Vec<Value> {
        list.iter()
            .enumerate()
            .flat_map(|(i, (k, v))| pod(&format!("{prefix}-{i}"), &p().node_selector(k, v)))
            .collect()
    };
    let by_affinity = |prefix: &str, list: &[(&'static str, &'static str)]| -> Vec<Value> {
        list.iter()
            .enumerate()
            .flat_map(|(i, (k, v))| {
                pod(&format!("{prefix}-{i}"), &p().node_req(req(k, "In", &[v])))
            })
            .collect()
    };
    let sidecar_case =
        |name: &'static str, main: &[(&'static str, &'static str)], init: Vec<Value>| {
            let mut t = p().req(main).lim(main);
            for c in init {
                t = t.init(c);
            }
            one(
                name,
                vec![nps(&[default_np()]), pod("p", &t)],
                vec![
                    Scheduled("p"),
                    Requests("p", vec![("cpu", "10.9"), ("memory", "4.9Gi")]),
                    TypesFit("p"),
                ],
            )
        };
    let cases = vec![
        one(
            "should provision nodes",
            vec![nps(&[default_np()]), pod("p", &p())],
            vec![Nodes(1), Scheduled("p")],
        ),
        one(
            "Should provision nodes for multiple pods",
            vec![nps(&[default_np()]), pods("p", 100, &p())],
            vec![Scheduled("p*")],
        ),
        one(
            "should ignore NodePools that are deleting",
            vec![nps(&[default_np().deleting()]), pod("p", &p())],
            vec![Nodes(0), NotScheduled("p")],
        ),
        one(
            "should mark pod as unschedulable if there are no valid nodepools",
            vec![nps(&[default_np().deleting()]), pod("p", &p())],
            vec![NotScheduled("p")],
        ),
        case(
            "should provision nodes for pods with supported node selectors",
            vec![
                step(
                    vec![nps(&[default_np()]), by_selector("ok", &selectors)],
                    vec![Scheduled("ok-*")],
                ),
                step(vec![by_selector("bad", &bad)], vec![NotScheduled("bad-*")]),
            ],
        ),
        case(
            "should provision nodes for pods with supported node affinities",
            vec![
                step(
                    vec![nps(&[default_np()]), by_affinity("ok", &selectors)],
                    vec![Scheduled("ok-*")],
                ),
                step(vec![by_affinity("bad", &bad)], vec![NotScheduled("bad-*")]),
            ],
        ),
        one(
            "should provision nodes for accelerators",
            vec![
                nps(&[default_np()]),
                pod("gpu-a", &p().lim(&[("nvidia.com/gpu", "1")])),
                pod("gpu-b", &p().lim(&[("aws.amazon.com/neuron", "1")])),
            ],
            vec![Scheduled("gpu-a"), Scheduled("gpu-b")],
        ),
        one(
            "should provision multiple nodes when maxPods is set",
            vec![
                vec![node_class("single-pod", "al2023@latest", Some(json!({ "maxPods": 1 })))],
                nps(&[default_np().node_class("single-pod")]),
                pods("p", 3, &p()),
            ],
            vec![Nodes(3), Scheduled("p*")],
        ),
        // The node is a `default-instance-type` (c5.xlarge, 5 pods) of the
        // NodePool, being deleted (finalizer), with three pods bound.
        one(
            "should schedule all pods on one inflight node when node is in deleting state",
            vec![
                nps(&[default_np()]),
                node(
                    "deleting",
                    &[(NODEPOOL, "default"), (ITYPE, DEFAULT), (ZONE, Z1), (CT, "on-demand"), (ARCH, "amd64"), (OS, "linux"), (HOST, "deleting")],
                    &[("cpu", "3920m"), ("memory", "6584Mi"), ("pods", "5")],
                    true,
                ),
                pods("bound", 3, &p().on("deleting")),
                pods("p", 2, &p()),
            ],
            vec![Nodes(2), Scheduled("p*"), NotOn("p*", "deleting")],
        ),
        sidecar_case(
            "should schedule based on the max resource requests of containers and initContainers with sidecar containers when initcontainer comes first",
            &[("cpu", "6"), ("memory", "2Gi")],
            vec![
                container("init", &[("cpu", "10"), ("memory", "4Gi")], &[("cpu", "10"), ("memory", "4Gi")]),
                sidecar("sidecar", &[("cpu", "4.9"), ("memory", "2.9Gi")]),
            ],
        ),
        sidecar_case(
            "should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are smaller than container resources",
            &[("cpu", "6"), ("memory", "2Gi")],
            vec![
                sidecar("sidecar", &[("cpu", "4.9"), ("memory", "2.9Gi")]),
                container("init", &[("cpu", "5"), ("memory", "1Gi")], &[("cpu", "5"), ("memory", "1Gi")]),
            ],
        ),
        sidecar_case(
            "should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are bigger than container resources",
            &[("cpu", "5"), ("memory", "1Gi")],
            vec![
                sidecar("sidecar", &[("cpu", "4.9"), ("memory", "2.9Gi")]),
                container("init", &[("cpu", "6"), ("memory", "2Gi")], &[("cpu", "6"), ("memory", "2Gi")]),
            ],
        ),
        one(
            "should schedule based on the pod level resources requests",
            vec![
                nps(&[default_np()]),
                pod(
                    "p",
                    &p().req(&[("cpu", "5"), ("memory", "1Gi")])
                        .lim(&[("cpu", "5"), ("memory", "1Gi")])
                        .pod_resources(&[("cpu", "9.9"), ("memory", "3.9Gi")], &[("cpu", "10"), ("memory", "4Gi")])
                        .init(container("init", &[("cpu", "6"), ("memory", "2Gi")], &[("cpu", "6"), ("memory", "2Gi")]))
                        .init(sidecar("sidecar", &[("cpu", "4"), ("memory", "2Gi")])),
                ),
            ],
            vec![
                Scheduled("p"),
                Requests("p", vec![("cpu", "9.9"), ("memory", "3.9Gi")]),
                TypesFit("p"),
            ],
        ),
    ];
    run_table(SUITE, "Provisioning", cases);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Resource Limits")

#[test]
fn resource_limits() {
    let spread = p()
        .labels(&[("app", "foo")])
        .anti(term(&[("app", "foo")], HOST))
        .cpu("1.5");
    let cases = vec![
        // `cluster.UpdateNodeClaim` of a NodeClaim of the NodePool with 100
        // CPUs: a node of the pool with 100 CPUs.
        one(
            "should not schedule when limits are exceeded",
            vec![
                nps(&[default_np().limits(json!({ "cpu": "20" }))]),
                node("big", &[(NODEPOOL, "default")], &[("cpu", "100")], false),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule if limits would be met",
            vec![nps(&[default_np().limits(json!({ "cpu": "2" }))]), pod("p", &p().cpu("1.75"))],
            vec![Scheduled("p")],
        ),
        one(
            "should partially schedule if limits would be exceeded",
            vec![nps(&[default_np().limits(json!({ "cpu": "3" }))]), pods("p", 2, &spread)],
            vec![ScheduledCount("p*", 1)],
        ),
        one(
            "should not schedule if limits would be exceeded",
            vec![nps(&[default_np().limits(json!({ "cpu": "2" }))]), pod("p", &p().cpu("2.1"))],
            vec![NotScheduled("p")],
        ),
        one(
            "should not schedule if limits would be exceeded (GPU)",
            vec![
                nps(&[default_np().limits(json!({ "pods": "1" }))]),
                pod("p", &p().lim(&[("nvidia.com/gpu", "1")])),
            ],
            vec![NotScheduled("p")],
        ),
        case(
            "should not schedule to a nodepool after a scheduling round if limits would be exceeded",
            vec![
                step(
                    vec![nps(&[default_np().limits(json!({ "cpu": "2" }))]), pod("p1", &p().cpu("1.75"))],
                    vec![Scheduled("p1")],
                ),
                step(vec![pod("p2", &p().cpu("1.75"))], vec![NotScheduled("p2")]),
            ],
        ),
        case(
            "should not schedule if limits would be exceeded (node)",
            vec![
                step(
                    vec![nps(&[default_np().limits(json!({ "nodes": "2" }))]), pod("p1", &spread)],
                    vec![Scheduled("p1")],
                ),
                step(vec![pod("p2", &spread)], vec![Scheduled("p2")]),
                step(vec![pod("p3", &spread)], vec![NotScheduled("p3")]),
            ],
        )
,
    ];
    run_table(SUITE, "Provisioning / Resource Limits", cases);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Daemonsets")

#[test]
fn daemonsets() {
    let two = &[("cpu", "2"), ("memory", "2Gi")];
    let one_cpu = || p().req(&[("cpu", "1"), ("memory", "1Gi")]);
    let small = req(CPU, "Lt", &["5"]);
    let large = req(CPU, "Gt", &["4"]);
    let cases = vec![
        one(
            "should account for daemonsets",
            vec![nps(&[c5_np()]), ds("ds", &p().req(two)), pod("p", &one_cpu())],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should account for daemonset hostports",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(two).host_port(8080)),
                pod("p", &one_cpu().host_port(8080)),
            ],
            vec![NotScheduled("p"), Nodes(0)],
        ),
        one(
            "should account for daemonsets (with startup taint)",
            vec![
                nps(&[c5_np().startup_taint(taint("foo.com/taint", "", "NoSchedule"))]),
                ds("ds", &p().req(two)),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should not schedule if daemonset overhead is too large",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(&[("cpu", "10000"), ("memory", "10000Gi")])),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should account for overhead using daemonset pod spec instead of daemonset spec",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(&[("cpu", "4"), ("memory", "4Gi")])),
                pod("ds-pod", &p().req(two).owned_by("DaemonSet", "ds")),
                pod("p", &one_cpu().node_selector(NODEPOOL, "default")),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should not schedule if resource requests are not defined and limits (requests) are too large",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(&[("cpu", "1")]).lim(&[("cpu", "10000"), ("memory", "10000Gi")])),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule based on the max resource requests of containers and initContainers",
            vec![
                nps(&[c5_np()]),
                ds(
                    "ds",
                    &p().req(&[("cpu", "1")])
                        .lim(&[("cpu", "10000"), ("memory", "1Gi")])
                        .init(container("init", &[("cpu", "3")], &[("cpu", "10000"), ("memory", "3Gi")])),
                ),
                pod("p", &p()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should not schedule if combined max resources are too large for any node",
            vec![
                nps(&[c5_np()]),
                ds(
                    "ds",
                    &p().req(&[("cpu", "1")])
                        .lim(&[("cpu", "10000"), ("memory", "1Gi")])
                        .init(container("init", &[("cpu", "1")], &[("cpu", "10000"), ("memory", "10000Gi")])),
                ),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should not schedule if initContainer resources are too large",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().init(container("init", &[("cpu", "10000"), ("memory", "10000Gi")], &[]))),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should be able to schedule pods if resource requests and limits are not defined",
            vec![nps(&[c5_np()]), ds("ds", &p()), pod("p", &p())],
            vec![Scheduled("p")],
        ),
        one(
            "should ignore daemonsets without matching tolerations",
            vec![
                nps(&[c5_np().taint(taint("foo", "bar", "NoSchedule"))]),
                ds("ds", &p().req(two)),
                pod("p", &one_cpu().tolerate(toleration("", "Exists", "", ""))),
            ],
            vec![NodeLabel("p", ITYPE, SMALL)],
        ),
        one(
            "should ignore daemonsets with an invalid selector",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(two).node_selector("node", "invalid")),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, SMALL)],
        ),
        one(
            "should ignore daemonsets when no instance types meet the daemonset requirements",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(two).node_req(req(ITYPE, "In", &["non-existent-instance-type"]))),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, SMALL)],
        ),
        one(
            "should account for daemonsets with a custom label nodeSelector that matches the nodepool",
            vec![
                nps(&[c5_np().labels(&[("purpose", "monitoring")])]),
                ds("ds", &p().req(two).node_selector("purpose", "monitoring")),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should filter out daemonsets based on instance type requirements",
            vec![
                nps(&[c5_np()]),
                ds("small", &p().cpu("1").node_req(small.clone())),
                ds("large", &p().cpu("10").node_req(large.clone())),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should account daemonsets with NotIn operator and unspecified key",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(two).node_req(req("foo", "NotIn", &["bar"]))),
                pod("p", &one_cpu().node_req(req(ZONE, "In", &[Z2]))),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        // The DaemonSet's own pod (bound by the DaemonSet controller, here
        // pending with its hostname affinity) requests less than the
        // template, as after a LimitRange.
        one(
            "should remove daemonset node hostname affinity when considering daemonset schedulability",
            vec![
                nps(&[c5_np().labels(&[("foo", "bar")])]),
                ds("ds", &p().req(&[("cpu", "4"), ("memory", "4Gi")]).node_req(req("foo", "In", &["bar"]))),
                pod(
                    "ds-pod",
                    &p().req(two)
                        .owned_by("DaemonSet", "ds")
                        .node_req(req(HOST, "In", &["node-name"])),
                ),
                pod("p", &one_cpu().node_selector("foo", "bar")),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should consider a daemonset schedulable with multiple node affinity terms",
            vec![
                nps(&[c5_np().labels(&[("foo", "bar")])]),
                ds(
                    "ds",
                    &p().req(two)
                        .node_term(vec![req("foo", "In", &["voo"])])
                        .node_term(vec![req("foo", "In", &["bar"])]),
                ),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should consider a daemonset schedulable with an incompatible node affinity preference",
            vec![
                nps(&[c5_np()]),
                ds("ds", &p().req(two).node_pref(1, vec![req("node", "In", &["invalid"])])),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should consider a daemonset schedulable with a PreferNoSchedule taint",
            vec![
                nps(&[c5_np().taint(taint("test", "", "PreferNoSchedule"))]),
                ds("ds", &p().req(two)),
                pod("p", &one_cpu()),
            ],
            vec![NodeLabel("p", ITYPE, DEFAULT)],
        ),
        one(
            "should not account for daemonset hostports when daemonset would not schedule on selected node",
            vec![
                nps(&[c5_np()]),
                ds("large", &p().req(&[("cpu", "4"), ("memory", "4Gi")]).node_req(large).host_port(8080)),
                ds("small", &p().req(two).node_req(small.clone()).host_port(8081)),
                pod("p", &one_cpu().node_req(small).host_port(8080)),
            ],
            vec![Scheduled("p"), NodeLabel("p", ITYPE, DEFAULT)],
        ),
    ];
    run_table(SUITE, "Provisioning / Daemonsets", cases);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Annotations"), Context("Labels"),
// Context("Taints")

#[test]
fn annotations_labels_taints() {
    let domains = |name: &'static str, k1: &'static str, k2: &'static str| {
        case(
            name,
            vec![
                step(
                    vec![
                        nps(&[np("first", vec![]).labels(&[(k1, "test-value")])]),
                        pod("p1", &p().node_req(req(k1, "In", &["test-value"]))),
                    ],
                    vec![Scheduled("p1"), NodeLabel("p1", k1, "test-value")],
                ),
                step(
                    vec![
                        nps(&[np("second", vec![]).labels(&[(k2, "test-value")])]),
                        pod("p2", &p().node_req(req(k2, "In", &["test-value"]))),
                    ],
                    vec![Scheduled("p2"), NodeLabel("p2", k2, "test-value")],
                ),
            ],
        )
    };
    let annotations = vec![one(
        "should annotate nodes",
        vec![
            nps(&[default_np().annotations(&[("karpenter.sh/do-not-disrupt", "true")])]),
            pod("p", &p()),
        ],
        vec![
            Scheduled("p"),
            NodeAnnotation("p", "karpenter.sh/do-not-disrupt", "true"),
        ],
    )];
    run_table(SUITE, "Provisioning / Annotations", annotations);

    let labels = vec![
        one(
            "should label nodes",
            vec![
                nps(&[np(
                    "default",
                    vec![
                        req("test-key-2", "In", &["test-value-2"]),
                        req("test-key-3", "NotIn", &["test-value-3"]),
                        req("test-key-4", "Lt", &["4"]),
                        req("test-key-5", "Gt", &["5"]),
                        req("test-key-6", "Exists", &[]),
                        req("test-key-7", "DoesNotExist", &[]),
                    ],
                )
                .labels(&[("test-key-1", "test-value-1")])]),
                pod("p", &p()),
            ],
            vec![
                Scheduled("p"),
                NodeLabel("p", NODEPOOL, "default"),
                NodeLabel("p", "test-key-1", "test-value-1"),
                NodeLabel("p", "test-key-2", "test-value-2"),
                LabelNot("p", "test-key-3", "test-value-3"),
                LabelNot("p", "test-key-4", "test-value-4"),
                LabelNot("p", "test-key-5", "test-value-5"),
                LabelNot("p", "test-key-6", ""),
                NoLabel("p", "test-key-7"),
            ],
        ),
        domains(
            "should label nodes with labels in the kubernetes domains",
            "kubernetes.io/test",
            "k8s.io/test",
        ),
        domains(
            "should label nodes with labels in the subdomain from kubernetes domains",
            "subdomain.kubernetes.io/test",
            "subdomain.k8s.io/test",
        ),
        one(
            "should not label nodes with well-known labels from requirements",
            vec![
                nps(&[np(
                    "default",
                    vec![
                        req("foo", "In", &["bar"]),
                        req("node.kubernetes.io/windows-build", "NotIn", &["test-value"]),
                    ],
                )]),
                pod("p", &p()),
            ],
            vec![
                Scheduled("p"),
                NodeLabel("p", "foo", "bar"),
                NoLabel("p", "node.kubernetes.io/windows-build"),
            ],
        ),
    ];
    run_table(SUITE, "Provisioning / Labels", labels);

    let taints = vec![one(
        "should schedule pods that tolerate taints",
        vec![
            nps(&[default_np().taint(taint("nvidia.com/gpu", "true", "NoSchedule"))]),
            pod(
                "equal",
                &p().tolerate(toleration("nvidia.com/gpu", "Equal", "true", "NoSchedule")),
            ),
            pod(
                "exists-effect",
                &p().tolerate(toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")),
            ),
            pod(
                "exists",
                &p().tolerate(toleration("nvidia.com/gpu", "Exists", "", "")),
            ),
            pod("all", &p().tolerate(toleration("", "Exists", "", ""))),
        ],
        vec![
            Scheduled("equal"),
            Scheduled("exists-effect"),
            Scheduled("exists"),
            Scheduled("all"),
        ],
    )];
    run_table(SUITE, "Provisioning / Taints", taints);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("NodeClaim Creation")

#[test]
fn nodeclaim_creation() {
    let small = &[("cpu", "1"), ("memory", "1Mi")];
    let cases = vec![
        // `Values: lo.Keys(instanceTypeMap)`: every instance type; here,
        // every type of the catalog that holds the pod (hundreds).
        one(
            "should create a nodeclaim request with expected requirements",
            vec![nps(&[default_np()]), pod("p", &p())],
            vec![Scheduled("p"), Nodes(1), ClaimReq("p", NODEPOOL, "In", vec!["default"]), TypesAtLeast("p", 300)],
        ),
        one(
            "should create a nodeclaim request with additional expected requirements",
            vec![
                nps(&[np(
                    "default",
                    vec![
                        req("custom-requirement-key", "In", &["value"]),
                        req("custom-requirement-key2", "In", &["value"]),
                    ],
                )]),
                pod("p", &p()),
            ],
            vec![
                Scheduled("p"),
                ClaimReq("p", NODEPOOL, "In", vec!["default"]),
                ClaimReq("p", "custom-requirement-key", "In", vec!["value"]),
                ClaimReq("p", "custom-requirement-key2", "In", vec!["value"]),
                TypesAtLeast("p", 300),
            ],
        ),
        one(
            "should create a nodeclaim request restricting instance types on architecture",
            vec![nps(&[np("default", vec![req(ARCH, "In", &["arm64"])])]), pod("p", &p())],
            vec![Scheduled("p"), ClaimReq("p", ARCH, "In", vec!["arm64"]), TypesArch("p", "arm64")],
        ),
        one(
            "should create a nodeclaim request restricting instance types based on pod resource requests",
            vec![
                nps(&[default_np()]),
                pod("p", &p().req(&[("nvidia.com/gpu", "1")]).lim(&[("nvidia.com/gpu", "1")])),
            ],
            vec![Scheduled("p"), TypesGpu("p")],
        ),
        one(
            "should create a nodeclaim with resource requests",
            vec![
                nps(&[default_np()]),
                pod(
                    "p",
                    &p().req(&[("cpu", "1"), ("memory", "1Mi"), ("nvidia.com/gpu", "1")])
                        .lim(&[("nvidia.com/gpu", "1")]),
                ),
            ],
            vec![
                Scheduled("p"),
                Nodes(1),
                RequestCount("p", 4),
                Requests("p", vec![("cpu", "1"), ("memory", "1Mi"), ("nvidia.com/gpu", "1"), ("pods", "1")]),
            ],
        ),
        one(
            "should create a nodeclaim with resource requests with daemon overhead",
            vec![nps(&[default_np()]), ds("ds", &p().req(small)), pod("p", &p().req(small))],
            vec![
                Scheduled("p"),
                Nodes(1),
                Requests("p", vec![("cpu", "2"), ("memory", "2Mi"), ("pods", "2")]),
            ],
        ),
        one(
            "should not double-count daemon overhead when multiple pods are scheduled to the same nodeclaim",
            vec![nps(&[default_np()]), ds("ds", &p().req(small)), pods("p", 2, &p().req(small))],
            vec![
                Scheduled("p-*"),
                Nodes(1),
                Requests("p-0", vec![("cpu", "3"), ("memory", "3Mi"), ("pods", "3")]),
            ],
        ),
    ];
    run_table(SUITE, "Provisioning / NodeClaim Creation", cases);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Volume Topology Requirements")
// (covered in depth elsewhere; ported briefly)

#[test]
fn volume_topology_requirements() {
    // BeforeEach: zones test-zone-2/3, WaitForFirstConsumer
    let sc = || storage_class("sc", &[Z2, Z3]);
    let zone = |z: &'static [&'static str]| req(ZONE, "In", z);
    let pv3 = || pv("pv", "sc", Some(req(ZONE, "In", &[Z3])));
    let np0 = || nps(&[default_np()]);
    let invalid_then_valid = |name: &'static str, docs: Vec<Vec<Value>>| {
        case(
            name,
            vec![
                step(docs, vec![NotScheduled("invalid")]),
                step(
                    vec![pod("valid", &p())],
                    vec![NotScheduled("invalid"), Scheduled("valid")],
                ),
            ],
        )
    };
    let cases = vec![
        one(
            "should not schedule if invalid pvc",
            vec![np0(), pod("p", &p().pvc("invalid"))],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule with an empty storage class if the pvc is bound",
            vec![np0(), pvc("claim", Some(""), Some("test-volume")), pv("test-volume", "", None), pod("p", &p().pvc("claim"))],
            vec![Scheduled("p")],
        ),
        one(
            "should not schedule with an empty storage class if the pvc is not bound",
            vec![np0(), pvc("claim", Some(""), None), pod("p", &p().pvc("claim"))],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule with a missing storage class if the pvc is bound",
            vec![
                np0(),
                pvc("claim", Some("missing-storage-class"), Some("test-volume")),
                pv("test-volume", "missing-storage-class", None),
                pod("p", &p().pvc("claim")),
            ],
            vec![Scheduled("p")],
        ),
        one(
            "should not schedule with a missing storage class if the pvc is not bound",
            vec![np0(), pvc("claim", Some("missing-storage-class"), None), pod("p", &p().pvc("claim"))],
            vec![NotScheduled("p")],
        ),
        invalid_then_valid(
            "should schedule valid pods when a pod with an invalid pvc is encountered (pvc)",
            vec![np0(), pod("invalid", &p().pvc("invalid"))],
        ),
        invalid_then_valid(
            "should schedule valid pods when a pod with an invalid pvc is encountered (storage class)",
            vec![np0(), pvc("claim", Some("invalid-storage-class"), None), pod("invalid", &p().pvc("claim"))],
        ),
        invalid_then_valid(
            "should schedule valid pods when a pod with an invalid pvc is encountered (volume name)",
            vec![np0(), pvc("claim", None, Some("invalid-volume-name")), pod("invalid", &p().pvc("claim"))],
        ),
        one(
            "should schedule to storage class zones if volume does not exist",
            vec![np0(), sc(), pvc("claim", Some("sc"), None), pod("p", &p().pvc("claim").node_req(zone(&[Z1, Z3])))],
            vec![NodeLabel("p", ZONE, Z3)],
        ),
        one(
            "should schedule to storage class zones if volume does not exist (ephemeral volume)",
            vec![np0(), sc(), pod("p", &p().ephemeral("sc").node_req(zone(&[Z1, Z3])))],
            vec![NodeLabel("p", ZONE, Z3)],
        ),
        one(
            "should not schedule if storage class zones are incompatible",
            vec![np0(), sc(), pvc("claim", Some("sc"), None), pod("p", &p().pvc("claim").node_req(zone(&[Z1])))],
            vec![NotScheduled("p")],
        ),
        one(
            "should not schedule if storage class zones are incompatible (ephemeral volume)",
            vec![np0(), sc(), pod("p", &p().ephemeral("sc").node_req(zone(&[Z1])))],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule to volume zones if volume already bound",
            vec![np0(), sc(), pv3(), pvc("claim", Some("sc"), Some("pv")), pod("p", &p().pvc("claim"))],
            vec![NodeLabel("p", ZONE, Z3)],
        ),
        // The claim of the generic ephemeral volume `e0` is `<pod>-e0`.
        one(
            "should schedule to volume zones if volume already bound (ephemeral volume)",
            vec![np0(), sc(), pv3(), pvc("p-e0", Some("sc"), Some("pv")), pod("p", &p().ephemeral("sc"))],
            vec![NodeLabel("p", ZONE, Z3)],
        ),
        one(
            "should not ignore hostname affinity when using non-local path volumes",
            vec![
                np0(),
                sc(),
                pv("pv", "sc", Some(req(HOST, "In", &["random-node-name"]))),
                pvc("claim", Some("sc"), Some("pv")),
                pod("p", &p().pvc("claim")),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should not schedule if volume zones are incompatible",
            vec![np0(), sc(), pv3(), pvc("claim", Some("sc"), Some("pv")), pod("p", &p().pvc("claim").node_req(zone(&[Z1])))],
            vec![NotScheduled("p")],
        ),
        one(
            "should not schedule if volume zones are incompatible (ephemeral volume)",
            vec![np0(), sc(), pv3(), pvc("p-e0", Some("sc"), Some("pv")), pod("p", &p().ephemeral("sc").node_req(zone(&[Z1])))],
            vec![NotScheduled("p")],
        ),
        one(
            "should not relax an added volume topology zone node-selector away",
            vec![
                np0(),
                sc(),
                pv3(),
                pvc("claim", Some("sc"), Some("pv")),
                pod(
                    "p",
                    &p().pvc("claim")
                        .node_req(req("example.com/label", "In", &["unsupported"]))
                        .node_term(vec![req(CT, "In", &["on-demand"])]),
                ),
            ],
            vec![NodeLabel("p", ZONE, Z3)],
        ),
    ];
    run_table(SUITE, "Provisioning / Volume Topology Requirements", cases);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Preferential Fallback")

#[test]
fn preferential_fallback() {
    let zone = |z: &'static str| req(ZONE, "In", &[z]);
    let required = vec![
        one(
            "should not relax the final term",
            vec![
                nps(&[np("default", vec![zone(Z1)])]),
                pod("p", &p().node_req(zone("invalid"))),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should relax multiple terms",
            vec![
                nps(&[default_np()]),
                pod(
                    "p",
                    &p().node_term(vec![zone("invalid")])
                        .node_term(vec![zone("invalid")])
                        .node_term(vec![zone(Z1)])
                        .node_term(vec![zone(Z2)]),
                ),
            ],
            vec![NodeLabel("p", ZONE, Z1)],
        ),
    ];
    run_table(
        SUITE,
        "Provisioning / Preferential Fallback / Required",
        required,
    );

    let invalid_prefs = || {
        p().node_pref(1, vec![zone("invalid")])
            .node_pref(1, vec![req(ITYPE, "In", &["invalid"])])
    };
    let preferences = vec![
        one(
            "should relax all node affinity terms",
            vec![nps(&[default_np()]), pod("p", &invalid_prefs())],
            vec![Scheduled("p")],
        ),
        one(
            "should relax to use lighter weights",
            vec![
                nps(&[np("default", vec![req(ZONE, "In", &[Z1, Z2])])]),
                pod(
                    "p",
                    &p().node_pref(100, vec![req(ITYPE, "In", &["test-zone-3"])])
                        .node_pref(50, vec![zone(Z2)])
                        .node_pref(1, vec![zone(Z1)]),
                ),
            ],
            vec![NodeLabel("p", ZONE, Z2)],
        ),
        one(
            "should tolerate PreferNoSchedule taint only after trying to relax Affinity terms",
            vec![
                nps(&[default_np().taint(taint("foo", "bar", "PreferNoSchedule"))]),
                pod("p", &invalid_prefs()),
            ],
            vec![Scheduled("p"), HasTaint("p", "foo=bar:PreferNoSchedule")],
        ),
    ];
    run_table(
        SUITE,
        "Provisioning / Preferential Fallback / Preferences",
        preferences,
    );
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("Multiple NodePools"),
// Context("StaticNodePool")

#[test]
fn multiple_and_static_nodepools() {
    // Karpenter's NodePool names are random; here the NodePool that must
    // not be chosen sorts first, so that name order cannot pick the right
    // one by chance.
    let multiple = vec![
        one(
            "should schedule to an explicitly selected NodePool",
            vec![
                nps(&[np("b-target", vec![]), np("a-other", vec![])]),
                pod("p", &p().node_selector(NODEPOOL, "b-target")),
            ],
            vec![NodeLabel("p", NODEPOOL, "b-target")],
        ),
        one(
            "should schedule to a NodePool by labels",
            vec![
                nps(&[
                    np("b-target", vec![]).labels(&[("foo", "bar")]),
                    np("a-other", vec![]),
                ]),
                pod("p", &p().node_selector("foo", "bar")),
            ],
            vec![NodeLabel("p", NODEPOOL, "b-target")],
        ),
        one(
            "should not match NodePool with PreferNoSchedule taint when other NodePool match",
            vec![
                nps(&[
                    np("a-tainted", vec![]).taint(taint("foo", "bar", "PreferNoSchedule")),
                    np("b-other", vec![]),
                ]),
                pod("p", &p()),
            ],
            vec![NodeLabel("p", NODEPOOL, "b-other")],
        ),
    ];
    run_table(SUITE, "Provisioning / Multiple NodePools", multiple);

    let weighted = vec![
        one(
            "should schedule to the nodepool with the highest priority always",
            vec![
                nps(&[np("a", vec![]), np("b", vec![]).weight(20), np("c", vec![]).weight(100)]),
                pods("p", 3, &p()),
            ],
            vec![NodeLabel("p-*", NODEPOOL, "c")],
        ),
        one(
            "should schedule to explicitly selected nodepool even if other nodePools are higher priority",
            vec![
                nps(&[np("a", vec![]), np("b", vec![]).weight(20), np("c", vec![]).weight(100)]),
                pod("p", &p().node_selector(NODEPOOL, "a")),
            ],
            vec![NodeLabel("p", NODEPOOL, "a")],
        ),
    ];
    run_table(
        SUITE,
        "Provisioning / Multiple NodePools / Weighted NodePools",
        weighted,
    );

    let static_pools = vec![
        one(
            "should not create NodeClaims for StaticNodePool",
            vec![nps(&[np("static", vec![]).replicas(2)]), pod("p", &p())],
            vec![NotScheduled("p")],
        ),
        one(
            "should still provision dynamic NodeClaims when there are both Static and Dynamic NodePools",
            vec![nps(&[np("b-dynamic", vec![]), np("a-static", vec![]).replicas(1)]), pod("p", &p())],
            vec![NodeLabel("p", NODEPOOL, "b-dynamic")],
        ),
    ];
    run_table(SUITE, "Provisioning / StaticNodePool", static_pools);
}

// ---------------------------------------------------------------------------
// Describe("Provisioning") / Context("MinValuesPolicy")
//
// MinValuesPolicy is Karpenter's `--min-values-policy` option, here
// `SchedulerOptions::min_values_policy` (`flotilla plan --min-values-policy`).
// The Strict cases expect the pod not to schedule (and its reason to name
// minValues); the BestEffort cases check where the pod goes, the
// `karpenter.sh/nodeclaim-min-values-relaxed` annotation and the relaxed
// `minValues` of the NodeClaim's requirements (the metric has no
// counterpart).
// The fake types `instance-type-1/2` (arm64, 4 CPU) are `a1.xlarge` and
// `m6g.xlarge`; `instance-type-3` does not exist.

#[test]
fn min_values_policy() {
    let types = &["a1.xlarge", "m6g.xlarge", "m6g.nonexistent"];
    let it_min = || np("default", vec![req_min(ITYPE, "In", types, 3)]).weight(100);
    let pod09 = || pod("p", &p().req(&[("cpu", "0.9"), ("memory", "0.9Gi")]));
    let relaxed = || NodeAnnotation("p", RELAXED, "true");
    let strict_it = vec![one(
        "should not schedule when minValues requirement is not met",
        vec![nps(&[it_min()]), pod09()],
        vec![NotScheduled("p"), Reason("p", "minValues")],
    )];
    run_table(
        SUITE,
        "Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to Strict",
        strict_it,
    );
    let best_effort_it = vec![
        one(
            "should schedule even when minValues requirement is not met",
            vec![nps(&[it_min()]), pod09()],
            vec![
                Scheduled("p"),
                TypesExactly("p", vec!["a1.xlarge", "m6g.xlarge"]),
                relaxed(),
                ClaimMinValues("p", ITYPE, Some(2)),
            ],
        )
        .best_effort(),
        one(
            "should relax minValues before falling back to other nodepools",
            vec![
                nps(&[
                    it_min(),
                    np("no-min", vec![req(ITYPE, "In", types)]).weight(10),
                ]),
                pod09(),
            ],
            vec![
                Scheduled("p"),
                NodeLabel("p", NODEPOOL, "default"),
                TypesExactly("p", vec!["a1.xlarge", "m6g.xlarge"]),
                relaxed(),
                ClaimMinValues("p", ITYPE, Some(2)),
            ],
        )
        .best_effort(),
        one(
            "should choose nodepool with higher weight when relaxing minValues",
            vec![
                nps(&[
                    it_min(),
                    np("lower", vec![req_min(ITYPE, "In", types, 3)]).weight(10),
                ]),
                pod09(),
            ],
            vec![
                Scheduled("p"),
                NodeLabel("p", NODEPOOL, "default"),
                TypesExactly("p", vec!["a1.xlarge", "m6g.xlarge"]),
                relaxed(),
            ],
        )
        .best_effort(),
    ];
    run_table(
        SUITE,
        "Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to BestEffort",
        best_effort_it,
    );
    // `instance-type-1` offered in two of the three zones: a1.xlarge
    // (us-west-2a and us-west-2c).
    let zone_min = || {
        np(
            "default",
            vec![
                req(ITYPE, "In", &["a1.xlarge"]),
                req_min(ZONE, "In", &[Z1, Z2, Z3], 3),
            ],
        )
    };
    let strict_zone = vec![one(
        "should not schedule when zone minValues requirement is not met",
        vec![nps(&[zone_min()]), pod09()],
        vec![NotScheduled("p"), Reason("p", "minValues")],
    )];
    run_table(
        SUITE,
        "Provisioning / MinValuesPolicy / with zone requirements / with MinValuesPolicy set to Strict",
        strict_zone,
    );
    let best_effort_zone = vec![one(
        "should schedule even when zone minValues requirement is not met",
        vec![nps(&[zone_min()]), pod09()],
        vec![
            Scheduled("p"),
            NodeLabel("p", ITYPE, "a1.xlarge"),
            relaxed(),
            ClaimMinValues("p", ZONE, Some(2)),
        ],
    )
    .best_effort()];
    run_table(
        SUITE,
        "Provisioning / MinValuesPolicy / with zone requirements / with MinValuesPolicy set to BestEffort",
        best_effort_zone,
    );
    let both = vec![one(
        "should schedule when minValues requirement is not met",
        vec![
            nps(&[np(
                "default",
                vec![
                    req_min(
                        ITYPE,
                        "In",
                        &["a1.xlarge", "a1.nonexistent", "a1.nonexistent2"],
                        3,
                    ),
                    req_min(ZONE, "In", &[Z1, Z2, Z3], 3),
                ],
            )
            .weight(100)]),
            pod09(),
        ],
        vec![
            Scheduled("p"),
            NodeLabel("p", ITYPE, "a1.xlarge"),
            TypesExactly("p", vec!["a1.xlarge"]),
            relaxed(),
            ClaimMinValues("p", ITYPE, Some(1)),
            ClaimMinValues("p", ZONE, Some(2)),
        ],
    )
    .best_effort()];
    run_table(
        SUITE,
        "Provisioning / MinValuesPolicy / with both instance type and zone requirements / with MinValuesPolicy set to BestEffort",
        both,
    );
}

// ---------------------------------------------------------------------------
// instance_selection_test.go: Describe("Instance Type Selection")
//
// The fake catalog (`InstanceTypesAssorted`) has every combination of CPU,
// memory, architecture, OS, zone and capacity type; here it is the whole
// us-west-2 catalog. The BeforeEach NodePool allows spot and on-demand,
// arm64 and amd64; cases that replace its requirements ("prov ...") drop
// both, and such a NodePool launches on-demand (see the module docs).

#[test]
fn instance_type_selection() {
    let base = || {
        vec![
            req(CT, "In", &["spot", "on-demand"]),
            req(ARCH, "In", &["arm64", "amd64"]),
        ]
    };
    let pool = || nps(&[np("default", base())]);
    let prov = |reqs: Vec<Value>| nps(&[np("default", reqs)]);
    let windows = || {
        vec![node_class(
            "default",
            "windows2022@latest",
            Some(json!({ "maxPods": 5 })),
        )]
    };
    let both_ct = &["spot", "on-demand"][..];
    let od = &["on-demand"][..];
    let any_arch = &["arm64", "amd64"][..];
    let cheapest = |a: &[&'static str], z: &[&'static str], c: &[&'static str]| {
        Cheapest("p", allowed(a, z, c))
    };
    let linux_only = "every instance type of the catalog is labelled kubernetes.io/os=linux (also under a Windows EC2NodeClass): a Windows requirement leaves no instance type and the pod is unschedulable";
    let mut cases = vec![
        one(
            "should schedule on one of the cheapest instances",
            vec![pool(), pod("p", &p())],
            vec![Scheduled("p"), cheapest(any_arch, &[], both_ct)],
        ),
        one(
            "should schedule on one of the cheapest instances (pod arch = amd64)",
            vec![pool(), pod("p", &p().node_req(req(ARCH, "In", &["amd64"])))],
            vec![cheapest(&["amd64"], &[], both_ct), TypesArch("p", "amd64")],
        ),
        one(
            "should schedule on one of the cheapest instances (pod arch = arm64)",
            vec![pool(), pod("p", &p().node_req(req(ARCH, "In", &["arm64"])))],
            vec![cheapest(&["arm64"], &[], both_ct), TypesArch("p", "arm64")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov arch = amd64)",
            vec![prov(vec![req(ARCH, "In", &["amd64"])]), pod("p", &p())],
            vec![cheapest(&["amd64"], &[], od), TypesArch("p", "amd64")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov arch = arm64)",
            vec![prov(vec![req(ARCH, "In", &["arm64"])]), pod("p", &p())],
            vec![cheapest(&["arm64"], &[], od), TypesArch("p", "arm64")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov os = windows)",
            vec![windows(), prov(vec![req(OS, "In", &["windows"])]), pod("p", &p())],
            vec![Scheduled("p"), cheapest(&[], &[], od)],
        )
        .differs(linux_only),
        one(
            "should schedule on one of the cheapest instances (pod os = windows)",
            vec![windows(), pool(), pod("p", &p().node_req(req(OS, "In", &["windows"])))],
            vec![Scheduled("p"), cheapest(any_arch, &[], both_ct)],
        )
        .differs(linux_only),
        one(
            "should schedule on one of the cheapest instances (prov os = windows)",
            vec![windows(), prov(vec![req(OS, "In", &["windows"])]), pod("p", &p())],
            vec![Scheduled("p"), cheapest(&[], &[], od)],
        )
        .differs(linux_only),
        one(
            "should schedule on one of the cheapest instances (pod os = linux)",
            vec![pool(), pod("p", &p().node_req(req(OS, "In", &["linux"])))],
            vec![cheapest(any_arch, &[], both_ct)],
        ),
        one(
            "should schedule on one of the cheapest instances (pod os = linux)",
            vec![pool(), pod("p", &p().node_req(req(OS, "In", &["linux"])))],
            vec![cheapest(any_arch, &[], both_ct)],
        ),
        one(
            "should schedule on one of the cheapest instances (prov zone = test-zone-2)",
            vec![prov(vec![req(ZONE, "In", &[Z2])]), pod("p", &p())],
            vec![cheapest(&[], &[Z2], od), NodeLabel("p", ZONE, Z2), TypesOffer("p", Z2, "")],
        ),
        one(
            "should schedule on one of the cheapest instances (pod zone = test-zone-2)",
            vec![pool(), pod("p", &p().node_req(req(ZONE, "In", &[Z2])))],
            vec![cheapest(any_arch, &[Z2], both_ct), NodeLabel("p", ZONE, Z2), TypesOffer("p", Z2, "")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov ct = spot)",
            vec![prov(vec![req(CT, "In", &["spot"])]), pod("p", &p())],
            vec![cheapest(&[], &[], &["spot"]), NodeLabel("p", CT, "spot"), TypesOffer("p", "", "spot")],
        ),
        one(
            "should schedule on one of the cheapest instances (pod ct = spot)",
            vec![pool(), pod("p", &p().node_req(req(CT, "In", &["spot"])))],
            vec![cheapest(any_arch, &[], &["spot"]), NodeLabel("p", CT, "spot"), TypesOffer("p", "", "spot")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov ct = ondemand, prov zone = test-zone-1)",
            vec![prov(vec![req(CT, "In", &["on-demand"]), req(ZONE, "In", &[Z1])]), pod("p", &p())],
            vec![cheapest(&[], &[Z1], od), TypesOffer("p", Z1, "on-demand")],
        ),
        one(
            "should schedule on one of the cheapest instances (pod ct = spot, pod zone = test-zone-1)",
            vec![
                pool(),
                pod("p", &p().node_req(req(CT, "In", &["spot"])).node_req(req(ZONE, "In", &[Z1]))),
            ],
            vec![cheapest(any_arch, &[Z1], &["spot"]), TypesOffer("p", Z1, "spot")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov ct = spot, pod zone = test-zone-2)",
            vec![prov(vec![req(CT, "In", &["spot"])]), pod("p", &p().node_req(req(ZONE, "In", &[Z2])))],
            vec![cheapest(&[], &[Z2], &["spot"]), TypesOffer("p", Z2, "spot")],
        ),
        one(
            "should schedule on one of the cheapest instances (prov ct = ondemand/test-zone-1/arm64/windows)",
            vec![
                windows(),
                prov(vec![
                    req(ARCH, "In", &["arm64"]),
                    req(OS, "In", &["windows"]),
                    req(CT, "In", &["on-demand"]),
                    req(ZONE, "In", &[Z1]),
                ]),
                pod("p", &p()),
            ],
            vec![Scheduled("p"), cheapest(&["arm64"], &[Z1], od), TypesOffer("p", Z1, "on-demand"), TypesArch("p", "arm64")],
        )
        .differs(linux_only),
        one(
            "should schedule on one of the cheapest instances (prov = spot/test-zone-2, pod = amd64/linux)",
            vec![
                prov(vec![req(ARCH, "In", &["amd64"]), req(OS, "In", &["linux"])]),
                pod("p", &p().node_req(req(CT, "In", &["spot"])).node_req(req(ZONE, "In", &[Z2]))),
            ],
            vec![Scheduled("p"), cheapest(&["amd64"], &[Z2], &["spot"]), TypesOffer("p", Z2, "spot"), TypesArch("p", "amd64")],
        )
        .differs("the NodePool says nothing about capacity type, so it launches on-demand only (the documented default, as Karpenter's AWS provider); a pod requiring spot is unschedulable. Karpenter's fake provider offers both"),
        one(
            "should schedule on one of the cheapest instances (pod ct = spot/test-zone-2/amd64/linux)",
            vec![
                pool(),
                pod(
                    "p",
                    &p().node_req(req(ARCH, "In", &["amd64"]))
                        .node_req(req(OS, "In", &["linux"]))
                        .node_req(req(CT, "In", &["spot"]))
                        .node_req(req(ZONE, "In", &[Z2])),
                ),
            ],
            vec![cheapest(&["amd64"], &[Z2], &["spot"]), TypesOffer("p", Z2, "spot"), TypesArch("p", "amd64")],
        ),
        // "remove all Arm instance types": a NodePool whose instance types
        // are amd64 only.
        one(
            "should not schedule if no instance type matches selector (pod arch = arm)",
            vec![
                nps(&[np("default", [base(), vec![req(ITYPE, "In", &[SMALL, DEFAULT])]].concat())]),
                pod("p", &p().node_req(req(ARCH, "In", &["arm64"]))),
            ],
            vec![NotScheduled("p"), Nodes(0)],
        ),
        // "remove all Arm instance types in zone-2": a1.large (arm64) is not
        // offered in us-west-2b, c5.large (amd64) is.
        one(
            "should not schedule if no instance type matches selector (pod arch = arm zone=test-zone-2)",
            vec![
                nps(&[np("default", [base(), vec![req(ITYPE, "In", &[SMALL, "a1.large"])]].concat())]),
                pod("p", &p().node_req(req(ARCH, "In", &["arm64"])).node_req(req(ZONE, "In", &[Z2]))),
            ],
            vec![NotScheduled("p"), Nodes(0)],
        ),
        one(
            "should not schedule if no instance type matches selector (prov arch = arm / pod zone=test-zone-2)",
            vec![
                nps(&[np("default", vec![req(ARCH, "In", &["arm64"]), req(ITYPE, "In", &[SMALL, "a1.large"])])]),
                pod("p", &p().node_req(req(ZONE, "In", &[Z2]))),
            ],
            vec![NotScheduled("p"), Nodes(0)],
        ),
    ];
    // "these values are constructed so that three of these pods can always
    // fit on at least one of our instance types": one case per size.
    for cpu in ["0.1", "1.0", "2", "2.5", "4", "8", "16"] {
        for mem in ["0.1Gi", "1.0Gi", "2Gi", "4Gi", "8Gi", "16Gi", "32Gi"] {
            let c = one(
                "should schedule on an instance with enough resources",
                vec![
                    pool(),
                    pods("p", 3, &p().req(&[("cpu", cpu), ("memory", mem)])),
                ],
                vec![Scheduled("p-*"), OneNode("p-*"), TypesFit("p-0")],
            );
            cases.push(if cpu == "1.0" && ["0.1Gi", "1.0Gi", "2Gi"].contains(&mem) {
                c.differs("three 1-CPU pods go to three t4g.micro spot NodeClaims (one pod each), cheaper than one node holding all three")
            } else {
                c
            });
        }
    }
    cases.push(one(
        "should schedule on cheaper on-demand instance even when spot price ordering would place other instance types first",
        vec![prov(vec![req(CT, "In", &["on-demand"])]), pod("p", &p())],
        vec![cheapest(&[], &[], od), NodeLabel("p", CT, "on-demand")],
    ));
    run_table(INSTANCE_SELECTION, "Instance Type Selection", cases);
}

// ---------------------------------------------------------------------------
// Describe("Instance Type Selection") / Context("MinValues")
//
// The fake types are arm64 m6g/m7g/m8g/a1 types of the sizes the Go test
// gives (1 CPU: medium, 2 CPU: large, 4 CPU: xlarge); their fake
// `karpenter/numerical-value` is the instance generation. Two pods of
// 0.9 CPU fit together only on the larger types.

#[test]
fn instance_type_selection_min_values() {
    let pods09 = || pods("p", 2, &p().req(&[("cpu", "0.9"), ("memory", "0.9Gi")]));
    let pool = |reqs: Vec<Value>| nps(&[np("default", reqs)]);
    let split = || {
        vec![
            Scheduled("p-*"),
            DiffNode("p-0", "p-1"),
            TypesAtLeast("p-0", 2),
        ]
    };
    let cases = vec![
        one(
            "should schedule respecting the minValues from instance-type requirements",
            vec![pool(vec![req_min(ITYPE, "In", &["m6g.medium", "m6g.large"], 2)]), pods09()],
            split(),
        ),
        one(
            "should schedule respecting the minValues in Gt operator",
            vec![
                pool(vec![req(ITYPE, "In", &["a1.medium", "m6g.medium", "m7g.large"]), req_min(GEN, "Gt", &["1"], 2)]),
                pods09(),
            ],
            split(),
        ),
        one(
            "scheduler should fail if the minValues in Gt operator is not satisfied",
            vec![
                pool(vec![req(ITYPE, "In", &["a1.medium", "m6g.xlarge"]), req_min(GEN, "Exists", &[], 2)]),
                pods("p", 2, &p().req(&[("cpu", "0.9"), ("memory", "0.9Gi")]).node_req(req(GEN, "Gt", &["1"]))),
            ],
            vec![NotScheduled("p-*")],
        ),
        one(
            "should schedule respecting the minValues in Lt operator",
            vec![
                pool(vec![req(ITYPE, "In", &["m6g.medium", "m7g.large", "m8g.xlarge"]), req_min(GEN, "Lt", &["8"], 2)]),
                pods09(),
            ],
            split(),
        ),
        one(
            "scheduler should fail if the minValues in Lt operator is not satisfied",
            vec![pool(vec![req(ITYPE, "In", &["m6g.large", "m8g.xlarge"]), req_min(GEN, "Lt", &["8"], 2)]), pods09()],
            vec![NotScheduled("p-*")],
        ),
        one(
            "should schedule considering the max of the minValues of In and NotIn operators in the instance-type requirements",
            vec![
                pool(vec![
                    req_min(ITYPE, "In", &["m6g.medium", "m6g.large", "m6g.xlarge"], 1),
                    req_min(ITYPE, "NotIn", &["m6g.xlarge"], 2),
                ]),
                pods09(),
            ],
            split(),
        ),
        one(
            "should schedule considering the max of the minValues of Gt and Lt operators.",
            vec![
                pool(vec![
                    req(ITYPE, "In", &["a1.medium", "m6g.medium", "m7g.large", "m8g.xlarge"]),
                    req_min(GEN, "Gt", &["1"], 1),
                    req_min(GEN, "Lt", &["8"], 2),
                ]),
                pods09(),
            ],
            split(),
        ),
        // "only 10 instance types": ten c5 / c6g types.
        one(
            "schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the requirement",
            vec![
                pool(vec![
                    req(
                        ITYPE,
                        "In",
                        &[
                            "c5.large", "c5.xlarge", "c5.2xlarge", "c5.4xlarge", "c5.9xlarge",
                            "c6g.medium", "c6g.large", "c6g.xlarge", "c6g.2xlarge", "c6g.4xlarge",
                        ],
                    ),
                    req_min(ITYPE, "Exists", &[], 11),
                ]),
                pod("p", &p()),
            ],
            vec![NotScheduled("p")],
        ),
        one(
            "should schedule and pick the max of minValues of InstanceTypes if multiple operators are used for the same requirement.",
            vec![
                pool(vec![
                    req_min(ITYPE, "Exists", &[], 1),
                    req_min(ITYPE, "In", &["m6g.medium", "m6g.large"], 2),
                ]),
                pods09(),
            ],
            split(),
        ),
        one(
            "should schedule and respect multiple requirement keys with minValues",
            vec![
                pool(vec![req_min(ARCH, "Exists", &[], 2), req_min(ITYPE, "In", &["m6g.medium", "c5.large"], 1)]),
                pods09(),
            ],
            split(),
        ),
    ];
    run_table(
        INSTANCE_SELECTION,
        "Instance Type Selection / MinValues",
        cases,
    );
}

#[test]
fn not_ported_cases_name_a_reason() {
    for (name, reason) in NOT_PORTED {
        assert!(!name.is_empty() && !reason.is_empty());
    }
    println!("{} It cases not ported", NOT_PORTED.len());
}

// ---------------------------------------------------------------------------
// Known differences left (6, all in instance_selection_test.go):
// * four Windows cases: every catalog type is labelled kubernetes.io/os=linux
//   (EC2 has no Windows arm64 AMI, so even a Windows EC2NodeClass could not
//   offer the arm64 types the "cheapest" checks count);
// * "prov = spot/test-zone-2, pod = amd64/linux": a NodePool that says
//   nothing about capacity type launches on-demand (Karpenter's AWS default;
//   its fake provider offers both);
// * "should schedule on an instance with enough resources" (3 of 49 sizes):
//   three 1-CPU pods go to three spot t4g NodeClaims, cheaper than one node.
//
// The `It`s not ported, with the reason (file: Describe / Context / It).

const NOT_PORTED: &[(&str, &str)] = &[
    (
        "suite_test.go: Provisioning / Batcher / should provision single pod if no other pod is received within the batch idle duration",
        "the provisioner's batching window (controller-runtime trigger and fake clock); Flotilla plans the documents it is given",
    ),
    (
        "suite_test.go: Provisioning / Batcher / should not extend the timeout if we receive the same pod within the batch idle duration",
        "the provisioner's batching window (BatchIdleDuration) is controller behaviour; no counterpart",
    ),
    (
        "suite_test.go: Provisioning / Batcher / should extend the timeout if we receive a new pod within the batch idle duration",
        "the provisioner's batching window (BatchIdleDuration) is controller behaviour; no counterpart",
    ),
    (
        "suite_test.go: Provisioning / should expect nodeclaim terminationGracePeriod to be the global value when the nodepool terminationGracePeriod is not set",
        "a global default terminationGracePeriod is a Karpenter package variable (no input); the plan's NodeClaims carry no spec.terminationGracePeriod",
    ),
    (
        "suite_test.go: Provisioning / should expect nodeclaim terminationGracePeriod to be the nil when the nodepool terminationGracePeriod and global terminationGracePeriod is not set",
        "the plan's NodeClaims carry no spec.terminationGracePeriod (Flotilla uses the NodePool's in disruption only)",
    ),
    (
        "suite_test.go: Provisioning / should respect terminationGracePeriod value set on the nodePool over global terminationGracePeriod",
        "a global default terminationGracePeriod is a Karpenter package variable (no input); the plan's NodeClaims carry no spec.terminationGracePeriod",
    ),
    (
        "suite_test.go: Provisioning / should mark podHealthyNodePoolScheduledTime if it is scheduled against a nodePool with NodeRegistrationHealthy=true",
        "cluster-state timestamps behind a metric (PodSchedulingSuccessTimeRegistrationHealthyCheck); no counterpart",
    ),
    (
        "suite_test.go: Provisioning / should not mark podHealthyNodePoolScheduledTime if it is scheduled against a nodePool with NodeRegistrationHealthy=False",
        "cluster-state timestamps behind a metric; no counterpart",
    ),
    (
        "suite_test.go: Provisioning / should not use a different NodePool hash on the NodeClaim if the NodePool changes during scheduling",
        "a race between Schedule and CreateNodeClaims inside the controller (the NodePool changed in between); a plan is made from one set of documents",
    ),
    (
        "suite_test.go: Provisioning / NodeClaim Creation / should create a nodeclaim request restricting instance types on operating system",
        "relies on the fake provider's `ios` operating system, which no EC2 instance type has (every type in the catalog is Linux)",
    ),
    (
        "suite_test.go: Provisioning / NodeClaim Creation / should create a nodeclaim request with the correct owner reference",
        "owner references of the NodeClaim object (API-server bookkeeping); the plan has no object metadata",
    ),
    (
        "suite_test.go: Provisioning / NodeClaim Creation / should create a nodeclaim request propagating the nodeClass reference",
        "the NodeClaim's spec.nodeClassRef is not part of the plan output (the launch stage reads it from the NodePool); a `karpenter.test.sh/TestNodeClass` has no counterpart",
    ),
    (
        "suite_test.go: Provisioning / Preferential Fallback / Ignore Preferences / should ignore node affinity preferences",
        "needs Karpenter's --preference-policy=Ignore option; Flotilla has no such option",
    ),
    (
        "instance_selection_test.go: Instance Type Selection / MinValues / schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the requirement after truncation",
        "sets the Go package variable scheduling.MaxInstanceTypes to 1 (the launch-time truncation of a NodeClaim's type list); no input for it. The CreateFleet truncation (60 types) keeps every minValues: launch::fleet test truncation_keeps_min_values",
    ),
];
