//! Karpenter's topology test suite, ported as tables.
//!
//! Source: kubernetes-sigs/karpenter
//! `pkg/controllers/provisioning/scheduling/topology_test.go` (every `It`).
//! Each case is what a Karpenter user would try: Kubernetes documents
//! (Pods, NodePools `karpenter.sh/v1`, an EC2NodeClass, Nodes with their bound
//! pods) written as YAML, read by `flotilla_input::load` and planned by
//! `flotilla_core::scheduler::schedule` on the embedded us-west-2 catalog.
//!
//! Translation of Karpenter's test environment:
//!
//! * the fake cloud provider has three zones, `test-zone-1/2/3`; they are
//!   `us-west-2a/b/c` here, and every NodePool that does not restrict zones
//!   itself is given `topology.kubernetes.io/zone In [us-west-2a, us-west-2b,
//!   us-west-2c]` (us-west-2d stands for no fake zone);
//! * the fake instance types (4 CPU, 4Gi, 5 pods) are real EC2 types; the
//!   EC2NodeClass sets `kubelet.maxPods: 5` so that a node holds 5 pods as
//!   there; where a case relies on a node being full of CPU, it uses requests
//!   or an instance type that give the same effect;
//! * `ExpectProvisioned` followed by more `ExpectProvisioned` calls (a cluster
//!   that evolves) is a sequence of *steps*: after each step the plan's
//!   NodeClaims become `Node`s (labels of the NodeClaim, its zone, capacity
//!   type, instance type and architecture, allocatable of its cheapest type,
//!   taints) and the planned pods are bound to them (`spec.nodeName`), as
//!   `kubectl get nodes,pods -o yaml` would show them; pods left
//!   unschedulable stay pending into the next step (as in Karpenter's
//!   cluster) unless the Go test deletes them;
//! * `ExpectSkew` is computed the same way: bound pods (not terminating, not
//!   finished) in the namespace matching the selector, counted per node label
//!   (per node name for `kubernetes.io/hostname`).
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never failed.
//! Every other case must behave as in Karpenter.
//!
//! Tally: the Go file has 103 `It`s; 91 are ported (89 behave as in
//! Karpenter or differ on purpose, 2 are known differences; 82 and 9 when
//! first ported), 12 are in [`NOT_PORTED`]. The known differences left are
//! listed above [`NOT_PORTED`].
//! `cargo test -p flotilla-input --test karpenter_topology -- --nocapture`
//! prints each case's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use flotilla_core::catalog::Catalog;
use flotilla_core::plan::Plan;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_input::{load, Source};
use serde_json::{json, Value};

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
const ITYPE: &str = "node.kubernetes.io/instance-type";
/// `labels := map[string]string{"test": "test"}`
const TEST: &[(&str, &str)] = &[("test", "test")];
/// `affLabels := map[string]string{"security": "s2"}`
const S2: &[(&str, &str)] = &[("security", "s2")];

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

fn set(mut v: Value, k: &str, val: Value) -> Value {
    v[k] = val;
    v
}

/// A node selector requirement (`NodeSelectorRequirement`).
fn req(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({ "key": key, "operator": op })
    } else {
        json!({ "key": key, "operator": op, "values": values })
    }
}

/// A topology spread constraint: `DoNotSchedule`, selector `test: test`.
fn tsc(key: &str, max_skew: u32) -> Value {
    json!({
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": sel(TEST),
        "maxSkew": max_skew,
    })
}

fn anyway(t: Value) -> Value {
    set(t, "whenUnsatisfiable", json!("ScheduleAnyway"))
}

fn no_selector(mut t: Value) -> Value {
    t.as_object_mut().unwrap().remove("labelSelector");
    t
}

/// A pod affinity term.
fn term(kv: &[(&str, &str)], key: &str) -> Value {
    json!({ "labelSelector": sel(kv), "topologyKey": key })
}

fn weighted(w: u32, t: Value) -> Value {
    json!({ "weight": w, "podAffinityTerm": t })
}

fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Value {
    let mut t = json!({ "key": key, "operator": op });
    if !value.is_empty() {
        t["value"] = json!(value);
    }
    if !effect.is_empty() {
        t["effect"] = json!(effect);
    }
    t
}

fn taint(key: &str, value: &str, effect: &str) -> Value {
    json!({ "key": key, "value": value, "effect": effect })
}

// ---------------------------------------------------------------------------
// Pods (Karpenter's `test.UnschedulablePod(test.PodOptions{...})`)

#[derive(Clone, Default)]
struct P {
    ns: Option<&'static str>,
    labels: Vec<(&'static str, &'static str)>,
    cpu: Option<&'static str>,
    node_selector: Vec<(&'static str, &'static str)>,
    node_reqs: Vec<Value>,
    node_prefs: Vec<Value>,
    tsc: Vec<Value>,
    pod_aff: Vec<Value>,
    pod_anti: Vec<Value>,
    pod_aff_pref: Vec<Value>,
    pod_anti_pref: Vec<Value>,
    empty_affinity: bool,
    tolerations: Vec<Value>,
    node_name: Option<String>,
    phase: Option<&'static str>,
    terminating: bool,
    pvcs: Vec<&'static str>,
    owner: Option<Value>,
}

fn p() -> P {
    P::default()
}

impl P {
    fn labels(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.labels.extend_from_slice(kv);
        self
    }
    fn ns(mut self, ns: &'static str) -> Self {
        self.ns = Some(ns);
        self
    }
    fn cpu(mut self, cpu: &'static str) -> Self {
        self.cpu = Some(cpu);
        self
    }
    fn node_selector(mut self, k: &'static str, v: &'static str) -> Self {
        self.node_selector.push((k, v));
        self
    }
    fn node_req(mut self, r: Value) -> Self {
        self.node_reqs.push(r);
        self
    }
    fn node_pref(mut self, r: Value) -> Self {
        self.node_prefs.push(r);
        self
    }
    fn tsc(mut self, t: Value) -> Self {
        self.tsc.push(t);
        self
    }
    fn aff(mut self, t: Value) -> Self {
        self.pod_aff.push(t);
        self
    }
    fn anti(mut self, t: Value) -> Self {
        self.pod_anti.push(t);
        self
    }
    fn aff_pref(mut self, t: Value) -> Self {
        self.pod_aff_pref.push(t);
        self
    }
    fn anti_pref(mut self, t: Value) -> Self {
        self.pod_anti_pref.push(t);
        self
    }
    fn tolerate(mut self, t: Value) -> Self {
        self.tolerations.push(t);
        self
    }
    fn on(mut self, node: &str) -> Self {
        self.node_name = Some(node.to_string());
        self
    }
    fn phase(mut self, phase: &'static str) -> Self {
        self.phase = Some(phase);
        self
    }
    fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
    fn pvc(mut self, claim: &'static str) -> Self {
        self.pvcs.push(claim);
        self
    }
    fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.owner = Some(json!([{
            "apiVersion": if kind == "ReplicaSet" { "apps/v1" } else { "batch/v1" },
            "kind": kind, "name": name, "uid": format!("{name}-uid"), "controller": true,
        }]));
        self
    }

    fn build(&self, name: &str) -> Value {
        let mut meta = json!({ "name": name, "namespace": self.ns.unwrap_or("default") });
        if !self.labels.is_empty() {
            meta["labels"] = map(&self.labels);
        }
        if self.terminating {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:10Z");
        }
        if let Some(o) = &self.owner {
            meta["ownerReferences"] = o.clone();
        }
        let mut container =
            json!({ "name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2" });
        if let Some(cpu) = self.cpu {
            container["resources"] = json!({ "requests": { "cpu": cpu } });
        }
        let mut spec = json!({ "containers": [container] });
        if !self.node_selector.is_empty() {
            spec["nodeSelector"] = map(&self.node_selector);
        }
        let mut affinity = serde_json::Map::new();
        let mut node_aff = serde_json::Map::new();
        if !self.node_reqs.is_empty() {
            node_aff.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!({ "nodeSelectorTerms": [{ "matchExpressions": self.node_reqs }] }),
            );
        }
        if !self.node_prefs.is_empty() {
            node_aff.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                json!([{ "weight": 1, "preference": { "matchExpressions": self.node_prefs } }]),
            );
        }
        if !node_aff.is_empty() {
            affinity.insert("nodeAffinity".into(), Value::Object(node_aff));
        }
        for (field, req, pref) in [
            ("podAffinity", &self.pod_aff, &self.pod_aff_pref),
            ("podAntiAffinity", &self.pod_anti, &self.pod_anti_pref),
        ] {
            let mut m = serde_json::Map::new();
            if !req.is_empty() {
                m.insert(
                    "requiredDuringSchedulingIgnoredDuringExecution".into(),
                    json!(req),
                );
            }
            if !pref.is_empty() {
                m.insert(
                    "preferredDuringSchedulingIgnoredDuringExecution".into(),
                    json!(pref),
                );
            }
            if !m.is_empty() || self.empty_affinity {
                affinity.insert(field.into(), Value::Object(m));
            }
        }
        if !affinity.is_empty() {
            spec["affinity"] = Value::Object(affinity);
        }
        if !self.tsc.is_empty() {
            spec["topologySpreadConstraints"] = json!(self.tsc);
        }
        if !self.tolerations.is_empty() {
            spec["tolerations"] = json!(self.tolerations);
        }
        if !self.pvcs.is_empty() {
            spec["volumes"] = json!(self
                .pvcs
                .iter()
                .enumerate()
                .map(|(i, c)| json!({ "name": format!("v{i}"), "persistentVolumeClaim": { "claimName": c } }))
                .collect::<Vec<_>>());
        }
        let mut pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec });
        if let Some(n) = &self.node_name {
            pod["spec"]["nodeName"] = json!(n);
            pod["status"] = json!({ "phase": self.phase.unwrap_or("Running") });
        } else if let Some(ph) = self.phase {
            pod["status"] = json!({ "phase": ph });
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

// ---------------------------------------------------------------------------
// Karpenter objects and nodes

#[derive(Clone)]
struct Np {
    name: &'static str,
    reqs: Vec<Value>,
    labels: Vec<(&'static str, &'static str)>,
    taints: Vec<Value>,
    startup_taints: Vec<Value>,
    limits: Option<Value>,
}

/// `test.NodePool(...)` with the given requirements.
fn np(name: &'static str, reqs: Vec<Value>) -> Np {
    Np {
        name,
        reqs,
        labels: vec![],
        taints: vec![],
        startup_taints: vec![],
        limits: None,
    }
}

/// The suite's `nodePool` (BeforeEach): `karpenter.sh/capacity-type Exists`.
fn default_np() -> Np {
    np("default", vec![req(CT, "Exists", &[])])
}

/// The suite's `nodePool` with its requirements replaced.
fn default_with(reqs: Vec<Value>) -> Np {
    np("default", reqs)
}

impl Np {
    fn labels(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.labels.extend_from_slice(kv);
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
    fn build(&self) -> Value {
        let mut reqs = self.reqs.clone();
        if !reqs.iter().any(|r| r["key"] == ZONE) {
            // the fake cloud provider's three zones
            reqs.push(req(ZONE, "In", &[Z1, Z2, Z3]));
        }
        let mut spec = json!({
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": reqs,
        });
        if !self.taints.is_empty() {
            spec["taints"] = json!(self.taints);
        }
        if !self.startup_taints.is_empty() {
            spec["startupTaints"] = json!(self.startup_taints);
        }
        let mut template = json!({ "spec": spec });
        if !self.labels.is_empty() {
            template["metadata"] = json!({ "labels": map(&self.labels) });
        }
        let mut np = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": { "name": self.name },
            "spec": { "template": template },
        });
        if let Some(l) = &self.limits {
            np["spec"]["limits"] = l.clone();
        }
        np
    }
}

fn node_class(name: &str, kubelet: Option<Value>) -> Value {
    let mut nc = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": name },
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
        },
    });
    if let Some(k) = kubelet {
        nc["spec"]["kubelet"] = k;
    }
    nc
}

/// `test.Node(...)`: an existing node (not launched by this plan).
fn node(
    name: &str,
    labels: &[(&str, &str)],
    taints: Vec<Value>,
    allocatable_cpu: Option<&str>,
) -> Value {
    let mut n = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": map(labels) },
        "spec": {},
        "status": {},
    });
    if !taints.is_empty() {
        n["spec"]["taints"] = json!(taints);
    }
    if let Some(cpu) = allocatable_cpu {
        n["status"]["allocatable"] = json!({ "cpu": cpu });
        n["status"]["capacity"] = json!({ "cpu": cpu });
    }
    n
}

fn pv(name: &str, zone: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": name },
        "spec": {
            "capacity": { "storage": "10Gi" },
            "accessModes": ["ReadWriteOnce"],
            "csi": { "driver": "ebs.csi.aws.com", "volumeHandle": "vol-1" },
            "nodeAffinity": { "required": { "nodeSelectorTerms": [{ "matchExpressions": [req(ZONE, "In", &[zone])] }] } },
        },
    })
}

fn pvc(name: &str, volume: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeName": volume,
            "resources": { "requests": { "storage": "10Gi" } },
        },
    })
}

// ---------------------------------------------------------------------------
// Cases

/// What Karpenter asserts after a step.
#[derive(Clone, Debug)]
enum Check {
    /// `ExpectSkew(ns, {key, selector}).To(ConsistOf(want))`; `None`
    /// selector: every pod of the namespace; `""` namespace: all.
    Skew(
        &'static str,
        Option<Vec<(&'static str, &'static str)>>,
        &'static str,
        Vec<u32>,
    ),
    /// `ExpectSkew(...).ToNot(ContainElements(BeNumerically(">", max)))`
    SkewAtMost(&'static str, u32),
    /// `ExpectMaxSkew(...)` (largest minus smallest domain count) ≤ max.
    MaxSkew(&'static str, u32),
    /// Every pod matching the pattern (`name` or `prefix*`) is scheduled.
    Scheduled(&'static str),
    NotScheduled(&'static str),
    /// Exactly this many pods of the pattern are scheduled.
    ScheduledCount(&'static str, usize),
    /// The scheduled pods of the pattern share one node.
    OneNode(&'static str),
    SameNode(&'static str, &'static str),
    DiffNode(&'static str, &'static str),
    SameLabel(&'static str, &'static str, &'static str),
    DiffLabel(&'static str, &'static str, &'static str),
    /// Every pod of the pattern is on a node with this label value.
    NodeLabel(&'static str, &'static str, &'static str),
    /// Number of nodes in the cluster.
    Nodes(usize),
    /// The node of the pod carries exactly these taints (key=value:effect).
    NodeTaints(&'static str, Vec<&'static str>),
}

use Check::*;

fn skew(key: &'static str, want: &[u32]) -> Check {
    Skew(key, Some(TEST.to_vec()), "default", want.to_vec())
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Delete the bound pods whose node's `key` label is not `value`.
    DeleteBoundUnless(&'static str, &'static str),
    /// `ExpectDeleteAllUnscheduledPods`
    DeleteUnscheduled,
}

struct Step {
    before: Vec<Op>,
    docs: Vec<Value>,
    checks: Vec<Check>,
}

fn step(docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Step {
    Step {
        before: vec![],
        docs: docs.into_iter().flatten().collect(),
        checks,
    }
}

fn step_after(before: Vec<Op>, docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Step {
    Step {
        before,
        ..step(docs, checks)
    }
}

struct Case {
    /// The `It` text, verbatim.
    name: &'static str,
    steps: Vec<Step>,
    /// What Flotilla does instead of Karpenter, when it does.
    known_difference: Option<&'static str>,
}

fn case(name: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        steps,
        known_difference: None,
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
}

fn nps(list: &[Np]) -> Vec<Value> {
    list.iter().map(Np::build).collect()
}

// ---------------------------------------------------------------------------
// Running a case

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded("us-west-2").expect("embedded us-west-2 catalog"))
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
    /// NodePools, EC2NodeClasses, volumes: the last definition wins.
    objects: BTreeMap<(String, String, String), Value>,
    nodes: Vec<Value>,
    bound: Vec<Value>,
    pending: Vec<Value>,
    plans: Vec<Plan>,
}

impl World {
    fn node(&self, name: &str) -> Option<&Value> {
        self.nodes.iter().find(|n| n["metadata"]["name"] == name)
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::DeleteUnscheduled => self.pending.clear(),
            Op::DeleteBoundUnless(key, value) => {
                let keep: BTreeSet<String> = self
                    .nodes
                    .iter()
                    .filter(|n| n["metadata"]["labels"][key] == value)
                    .map(|n| {
                        n["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect();
                self.bound
                    .retain(|p| keep.contains(p["spec"]["nodeName"].as_str().unwrap_or_default()));
            }
        }
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
        let plan = schedule(&state, catalog(), &SchedulerOptions::default());
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
            if let Some(e) = catalog()
                .entries
                .iter()
                .find(|e| e.info.name == nc.price.instance_type)
            {
                labels
                    .entry(ARCH.into())
                    .or_insert_with(|| e.info.architecture.clone());
            }
            labels.insert("kubernetes.io/os".into(), "linux".into());
            labels.insert(HOST.into(), node_name.clone());
            labels.insert("karpenter.sh/nodepool".into(), nc.node_pool.clone());
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

    /// `ExpectSkew`: bound pods per domain.
    fn skew(
        &self,
        key: &str,
        selector: Option<&[(&str, &str)]>,
        ns: &str,
    ) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for p in &self.bound {
            if !ns.is_empty() && p["metadata"]["namespace"].as_str().unwrap_or("default") != ns {
                continue;
            }
            if !p["metadata"]["deletionTimestamp"].is_null()
                || matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            {
                continue;
            }
            if let Some(s) = selector {
                if !s.iter().all(|(k, v)| p["metadata"]["labels"][*k] == *v) {
                    continue;
                }
            }
            let n = p["spec"]["nodeName"].as_str().unwrap_or_default();
            let Some(node) = self.node(n) else { continue };
            let domain = if key == HOST {
                Some(n.to_string())
            } else {
                node["metadata"]["labels"][key].as_str().map(str::to_string)
            };
            if let Some(d) = domain {
                *counts.entry(d).or_insert(0) += 1;
            }
        }
        counts
    }

    fn check(&self, c: &Check) -> Result<(), String> {
        let sorted = |m: &BTreeMap<String, u32>| {
            let mut v: Vec<u32> = m.values().copied().collect();
            v.sort_unstable();
            v
        };
        let any = |pattern: &str| -> Result<(), String> {
            if self.bound_of(pattern).is_empty() && self.pending_of(pattern).is_empty() {
                Err(format!("no pod matches {pattern}"))
            } else {
                Ok(())
            }
        };
        match c {
            Skew(key, s, ns, want) => {
                let got = self.skew(key, s.as_deref(), ns);
                let mut want = want.clone();
                want.sort_unstable();
                if sorted(&got) != want {
                    return Err(format!("skew on {key}: want {want:?}, got {got:?}"));
                }
            }
            SkewAtMost(key, max) => {
                let got = self.skew(key, Some(TEST), "default");
                if got.values().any(|c| c > max) {
                    return Err(format!(
                        "skew on {key}: want every domain ≤ {max}, got {got:?}"
                    ));
                }
            }
            MaxSkew(key, max) => {
                let got = self.skew(key, Some(TEST), "default");
                let v = sorted(&got);
                let s = v.last().copied().unwrap_or(0) - v.first().copied().unwrap_or(0);
                if s > *max {
                    return Err(format!(
                        "max skew on {key}: want ≤ {max}, got {s} ({got:?})"
                    ));
                }
            }
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
            SameNode(a, b) | DiffNode(a, b) => {
                let (na, nb) = (self.node_of(a)?, self.node_of(b)?);
                let same = na["metadata"]["name"] == nb["metadata"]["name"];
                if same != matches!(c, SameNode(..)) {
                    return Err(format!(
                        "{a} on {}, {b} on {}: want {}",
                        na["metadata"]["name"],
                        nb["metadata"]["name"],
                        if same {
                            "different nodes"
                        } else {
                            "the same node"
                        }
                    ));
                }
            }
            SameLabel(a, b, key) | DiffLabel(a, b, key) => {
                let (na, nb) = (self.node_of(a)?, self.node_of(b)?);
                let (la, lb) = (
                    &na["metadata"]["labels"][key],
                    &nb["metadata"]["labels"][key],
                );
                if (la == lb) != matches!(c, SameLabel(..)) {
                    return Err(format!("{key}: {a} on {la}, {b} on {lb}"));
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
            }
            Nodes(n) => {
                if self.nodes.len() != *n {
                    return Err(format!("want {n} nodes, got {}", self.nodes.len()));
                }
            }
            NodeTaints(pod, want) => {
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
                if got != *want {
                    return Err(format!(
                        "taints of {pod}'s node: want {want:?}, got {got:?}"
                    ));
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
                    " [{} {} {} zones={:?} pods={}]",
                    nc.name,
                    nc.price.instance_type,
                    nc.price.capacity_type.as_str(),
                    nc.zones,
                    nc.pods.len()
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
    // the fake instance types hold 5 pods each
    w.add(node_class("default", Some(json!({ "maxPods": 5 }))));
    for (i, s) in c.steps.iter().enumerate() {
        for op in &s.before {
            w.apply(*op);
        }
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

/// Runs a Describe/Context table: every case without a known difference
/// must pass; the known differences are run and reported.
fn run_table(context: &str, cases: Vec<Case>) {
    let mut failures = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &cases {
        let n = seen.entry(c.name).or_insert(0);
        *n += 1;
        let label = if *n > 1 {
            format!("{context} / {} (#{n})", c.name)
        } else {
            format!("{context} / {}", c.name)
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
// Describe("Topology")

#[test]
fn topology() {
    let cases = vec![
        one(
            "should ignore unknown topology keys",
            vec![
                nps(&[default_np()]),
                pod("unknown-key", &p().labels(TEST).tsc(tsc("unknown", 1))),
                pod("plain", &p()),
            ],
            vec![NotScheduled("unknown-key"), Scheduled("plain")],
        ),
        one(
            "should not spread when a nil label selector is defined",
            vec![
                nps(&[default_np()]),
                pods("p", 2, &p().labels(TEST).tsc(no_selector(tsc(ZONE, 1)))),
            ],
            vec![Skew(ZONE, None, "default", vec![2])],
        ),
    ];
    run_table("Topology", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Zonal")

#[test]
fn zonal() {
    let spread = || p().labels(TEST).tsc(tsc(ZONE, 1));
    let big = || p().labels(TEST).cpu("1.1");
    let cases = vec![
        one(
            "should balance pods across zones (match labels)",
            vec![nps(&[default_np()]), pods("p", 4, &spread())],
            vec![skew(ZONE, &[1, 1, 2])],
        ),
        one(
            "should balance pods across zones (match expressions)",
            vec![
                nps(&[default_np()]),
                pods(
                    "p",
                    4,
                    &p().labels(TEST).tsc(set(
                        tsc(ZONE, 1),
                        "labelSelector",
                        json!({ "matchExpressions": [{ "key": "test", "operator": "In", "values": ["test"] }] }),
                    )),
                ),
            ],
            vec![skew(ZONE, &[1, 1, 2])],
        ),
        one(
            "should respect NodePool zonal constraints",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2, Z3])])]),
                pods("p", 4, &spread()),
            ],
            vec![skew(ZONE, &[1, 1, 2])],
        ),
        one(
            "should respect NodePool zonal constraints (subset) with requirements",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2])])]),
                pods("p", 4, &spread()),
            ],
            vec![skew(ZONE, &[2, 2])],
        ),
        one(
            "should respect NodePool zonal constraints (subset) with labels",
            vec![
                nps(&[default_np().labels(&[(ZONE, Z1)])]),
                pods("p", 4, &spread()),
            ],
            vec![skew(ZONE, &[4])],
        ),
        one(
            "should respect NodePool zonal constraints (subset) with requirements and labels",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2])]).labels(&[(ZONE, Z1)])]),
                pods("p", 4, &spread()),
            ],
            vec![skew(ZONE, &[4])],
        ),
        one(
            "should respect NodePool zonal constraints (subset) with labels across NodePools",
            vec![
                nps(&[
                    default_with(vec![req(ZONE, "In", &[Z1, Z2])]).labels(&[(ZONE, Z1)]),
                    np("nodepool-2", vec![]).labels(&[(ZONE, Z2)]),
                ]),
                pods("p", 4, &spread()),
            ],
            vec![skew(ZONE, &[2, 2])],
        ),
        case(
            "should respect NodePool zonal constraints (existing pod)",
            vec![
                step(
                    vec![nps(&[default_np()]), pod("first", &big().node_selector(ZONE, Z3))],
                    vec![Scheduled("first")],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2])])]),
                        pods("p", 6, &big().tsc(tsc(ZONE, 1))),
                    ],
                    vec![skew(ZONE, &[1, 2, 2])],
                ),
            ],
        ),
        case(
            "should schedule to the non-minimum domain if its all that's available",
            vec![
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z1])])]),
                        pod("a", &big().tsc(tsc(ZONE, 5))),
                    ],
                    vec![skew(ZONE, &[1])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z2])])]),
                        pod("b", &big().tsc(tsc(ZONE, 5))),
                    ],
                    vec![skew(ZONE, &[1, 1])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z3])])]),
                        pods("c", 10, &big().tsc(tsc(ZONE, 5))),
                    ],
                    vec![skew(ZONE, &[1, 1, 6])],
                ),
            ],
        ),
        case(
            "should only schedule to minimum domains if already violating max skew",
            vec![
                step(
                    vec![nps(&[default_np()]), pods("a", 9, &big().tsc(tsc(ZONE, 1)))],
                    vec![skew(ZONE, &[3, 3, 3])],
                ),
                step_after(
                    vec![Op::DeleteBoundUnless(ZONE, Z1)],
                    vec![pods("b", 3, &big().tsc(tsc(ZONE, 1)))],
                    vec![skew(ZONE, &[3, 1, 2])],
                ),
            ],
        ),
        case(
            "should not violate max-skew when unsat = do not schedule",
            vec![
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z1])])]),
                        pod("a", &big().tsc(tsc(ZONE, 1))),
                    ],
                    vec![skew(ZONE, &[1])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z2, Z3])])]),
                        pods("b", 10, &big().tsc(tsc(ZONE, 1))),
                    ],
                    vec![skew(ZONE, &[1, 2, 2])],
                ),
            ],
        ),
        case(
            "should not violate max-skew when unsat = do not schedule (discover domains)",
            vec![
                step(
                    vec![nps(&[default_with(vec![req(ZONE, "In", &[Z1])])]), pod("a", &big())],
                    vec![Scheduled("a")],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z2, Z3])])]),
                        pods("b", 10, &big().tsc(tsc(ZONE, 1))),
                    ],
                    vec![skew(ZONE, &[1, 2, 2])],
                ),
            ],
        ),
        one(
            "should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain",
            vec![
                nps(&[default_np()]),
                vec![
                    node("first", &[(ZONE, Z1)], vec![], None),
                    node("second", &[(ZONE, Z2)], vec![], None),
                    node("third", &[], vec![], None),
                ],
                pod("missing-labels", &p().on("first")),
                pod("pending", &p().labels(TEST)),
                pod("no-domain", &p().labels(TEST).on("third")),
                pod("wrong-namespace", &p().labels(TEST).ns("wrong-namespace").on("first")),
                pod("terminating", &p().labels(TEST).terminating()),
                pod("failed", &p().labels(TEST).on("first").phase("Failed")),
                pod("succeeded", &p().labels(TEST).on("first").phase("Succeeded")),
                pod("first-1", &p().labels(TEST).on("first")),
                pod("first-2", &p().labels(TEST).on("first")),
                pod("second-1", &p().labels(TEST).on("second")),
                pods("p", 2, &spread()),
            ],
            vec![skew(ZONE, &[2, 2, 1])],
        )
        .differs("plans the two pending pods Karpenter ignores (`pending`: not marked Unschedulable by kube-scheduler; `terminating`: deletionTimestamp set) onto the spread pods' NodeClaim in us-west-2c, so `pending` is counted there: a=2 b=1 c=3"),
        one(
            "should match all pods when labelSelector is not specified",
            vec![nps(&[default_np()]), pod("p", &p())],
            vec![Skew(ZONE, None, "default", vec![1])],
        ),
        one(
            "should handle interdependent selectors",
            vec![nps(&[default_np()]), pods("p", 5, &p().tsc(tsc(HOST, 1)))],
            vec![Scheduled("p*"), OneNode("p*")],
        ),
        one(
            "should respect minDomains constraints",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2])])]),
                pods("p", 3, &p().labels(TEST).tsc(set(tsc(ZONE, 1), "minDomains", json!(3)))),
            ],
            vec![skew(ZONE, &[1, 1])],
        ),
        one(
            "satisfied minDomains constraints (equal) should allow expected pod scheduling",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2, Z3])])]),
                pods("p", 11, &p().labels(TEST).tsc(set(tsc(ZONE, 1), "minDomains", json!(3)))),
            ],
            vec![skew(ZONE, &[4, 4, 3])],
        ),
        one(
            "satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling",
            vec![
                nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2, Z3])])]),
                pods("p", 11, &p().labels(TEST).tsc(set(tsc(ZONE, 1), "minDomains", json!(2)))),
            ],
            vec![skew(ZONE, &[4, 4, 3])],
        ),
    ];
    run_table("Topology / Zonal", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Hostname")

#[test]
fn hostname() {
    let app = |name: &'static str| {
        p().labels(&[("app", name)]).tsc(json!({
            "maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": sel(&[("app", name)]),
        }))
    };
    let cases = vec![
        one(
            "should balance pods across nodes",
            vec![
                nps(&[default_np()]),
                pods("p", 4, &p().labels(TEST).tsc(tsc(HOST, 1))),
            ],
            vec![skew(HOST, &[1, 1, 1, 1])],
        ),
        one(
            "should balance pods on the same hostname up to maxskew",
            vec![
                nps(&[default_np()]),
                pods("p", 4, &p().labels(TEST).tsc(tsc(HOST, 4))),
            ],
            vec![skew(HOST, &[4])],
        ),
        one(
            "balance multiple deployments with hostname topology spread",
            vec![
                nps(&[default_np()]),
                pods("app1", 2, &app("app1")),
                pods("app2", 2, &app("app2")),
            ],
            vec![Scheduled("app*"), Nodes(2)],
        ),
        one(
            "balance multiple deployments with hostname topology spread & varying arch",
            vec![
                nps(&[default_np()]),
                pods(
                    "app1",
                    2,
                    &app("app1").node_req(req(ARCH, "In", &["amd64"])),
                ),
                pods(
                    "app2",
                    2,
                    &app("app2").node_req(req(ARCH, "In", &["arm64"])),
                ),
            ],
            vec![Scheduled("app*"), Nodes(4)],
        ),
    ];
    run_table("Topology / Hostname", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("CapacityType")

#[test]
fn capacity_type() {
    let spread = || p().labels(TEST).tsc(tsc(CT, 1));
    let big = || p().labels(TEST).cpu("1.1");
    let cases = vec![
        one(
            "should balance pods across capacity types",
            vec![nps(&[default_np()]), pods("p", 4, &spread())],
            vec![skew(CT, &[2, 2])],
        ),
        one(
            "should respect NodePool capacity type constraints",
            vec![
                nps(&[default_with(vec![req(CT, "In", &["spot", "on-demand"])])]),
                pods("p", 4, &spread()),
            ],
            vec![skew(CT, &[2, 2])],
        ),
        case(
            "should not violate max-skew when unsat = do not schedule (capacity type)",
            vec![
                step(
                    vec![
                        nps(&[default_with(vec![req(CT, "In", &["spot"])])]),
                        pod("a", &big().tsc(tsc(CT, 1))),
                    ],
                    vec![skew(CT, &[1])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(CT, "In", &["on-demand"])])]),
                        pods("b", 5, &big().tsc(tsc(CT, 1))),
                    ],
                    vec![skew(CT, &[1, 2])],
                ),
            ],
        ),
        case(
            "should violate max-skew when unsat = schedule anyway (capacity type)",
            vec![
                step(
                    vec![
                        nps(&[default_with(vec![req(CT, "In", &["spot"])])]),
                        pod("a", &big().tsc(anyway(tsc(CT, 1)))),
                    ],
                    vec![skew(CT, &[1])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(CT, "In", &["on-demand"])])]),
                        pods("b", 5, &big().tsc(anyway(tsc(CT, 1)))),
                    ],
                    vec![skew(CT, &[1, 5])],
                ),
            ],
        ),
        one(
            "should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain",
            vec![
                nps(&[default_np()]),
                vec![
                    node("first", &[(CT, "spot")], vec![], None),
                    node("second", &[(CT, "on-demand")], vec![], None),
                    node("third", &[], vec![], None),
                ],
                pod("missing-labels", &p().on("first")),
                pod("pending", &p().labels(TEST)),
                pod("no-domain", &p().labels(TEST).on("third")),
                pod("wrong-namespace", &p().labels(TEST).ns("wrong-namespace").on("first")),
                pod("terminating", &p().labels(TEST).terminating()),
                pod("failed", &p().labels(TEST).on("first").phase("Failed")),
                pod("succeeded", &p().labels(TEST).on("first").phase("Succeeded")),
                pod("first-1", &p().labels(TEST).on("first")),
                pod("first-2", &p().labels(TEST).on("first")),
                pod("second-1", &p().labels(TEST).on("second")),
                pods("p", 2, &spread()),
            ],
            vec![skew(CT, &[2, 3])],
        )
        .differs("plans the two pending pods Karpenter ignores (`pending`: not marked Unschedulable by kube-scheduler; `terminating`: deletionTimestamp set) onto the spread pods' on-demand NodeClaim, so `pending` is counted there: on-demand=4 spot=2"),
        one(
            "should match all pods when labelSelector is not specified",
            vec![nps(&[default_np()]), pod("p", &p())],
            vec![Skew(CT, None, "default", vec![1])],
        ),
        one(
            "should handle interdependent selectors",
            vec![nps(&[default_np()]), pods("p", 5, &p().tsc(tsc(HOST, 1)))],
            vec![Scheduled("p*"), OneNode("p*")],
        ),
        case(
            "should balance pods across capacity-types (node required affinity constrained)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pod(
                            "od",
                            &p().labels(TEST)
                                .node_req(req(ZONE, "In", &[Z1]))
                                .node_req(req(CT, "In", &["on-demand"])),
                        ),
                    ],
                    vec![Scheduled("od")],
                ),
                step(
                    vec![pods(
                        "spot",
                        5,
                        &spread()
                            .node_req(req(ZONE, "In", &[Z2]))
                            .node_req(req(CT, "In", &["spot"])),
                    )],
                    vec![skew(CT, &[1, 5])],
                ),
            ],
        ),
        // `single-pod-instance-type` (a node with room for that pod only) is
        // a t3.micro: 2 vCPUs, so none of the 2-CPU pods fits beside it.
        case(
            "should balance pods across capacity-types (no constraints)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pod(
                            "od",
                            &p().labels(TEST)
                                .node_selector(ITYPE, "t3.micro")
                                .node_req(req(CT, "In", &["on-demand"])),
                        ),
                    ],
                    vec![Scheduled("od")],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(CT, "In", &["spot"])])]),
                        pods("spot", 5, &spread().cpu("2")),
                    ],
                    vec![skew(CT, &[1, 2])],
                ),
            ],
        ),
        case(
            "should balance pods across arch (no constraints)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pod(
                            "amd",
                            &p().labels(TEST)
                                .node_selector(ITYPE, "t3.micro")
                                .node_req(req(ARCH, "In", &["amd64"])),
                        ),
                    ],
                    vec![Scheduled("amd")],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ARCH, "In", &["arm64"])])]),
                        pods("arm", 5, &p().labels(TEST).cpu("2").tsc(tsc(ARCH, 1))),
                    ],
                    vec![skew(ARCH, &[1, 2])],
                ),
            ],
        ),
    ];
    run_table("Topology / CapacityType", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Combined Hostname and Zonal Topology")

#[test]
fn combined_hostname_and_zonal() {
    let zh = || p().labels(TEST).tsc(tsc(ZONE, 1)).tsc(tsc(HOST, 3));
    let ch = || p().labels(TEST).tsc(tsc(CT, 1)).tsc(tsc(HOST, 3));
    const SPREAD: &str = "capacity.spread.4-1";
    let cases = vec![
        case(
            "should spread pods while respecting both constraints (hostname and zonal)",
            vec![
                step(
                    vec![nps(&[default_np()]), pods("a", 2, &zh())],
                    vec![skew(ZONE, &[1, 1]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("b", 3, &zh())],
                    vec![skew(ZONE, &[2, 2, 1]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("c", 5, &zh())],
                    vec![skew(ZONE, &[4, 3, 3]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("d", 11, &zh())],
                    vec![skew(ZONE, &[7, 7, 7]), SkewAtMost(HOST, 3)],
                ),
            ],
        ),
        one(
            "should balance pods across NodePool requirements",
            vec![
                nps(&[
                    np(
                        "spot",
                        vec![
                            req(CT, "In", &["spot"]),
                            req(SPREAD, "In", &["2", "3", "4", "5"]),
                        ],
                    ),
                    np(
                        "on-demand",
                        vec![req(CT, "In", &["on-demand"]), req(SPREAD, "In", &["1"])],
                    ),
                ]),
                pods("p", 20, &p().labels(TEST).tsc(tsc(SPREAD, 1))),
            ],
            vec![
                Scheduled("p*"),
                skew(SPREAD, &[4, 4, 4, 4, 4]),
                skew(CT, &[4, 16]),
            ],
        ),
        one(
            "should spread pods while respecting both constraints",
            vec![
                nps(&[
                    default_with(vec![req(ZONE, "In", &[Z1, Z2])]),
                    np("nodepool-b", vec![req(ZONE, "In", &[Z3])]).limits(json!({ "cpu": "0" })),
                ]),
                pods(
                    "p",
                    10,
                    &p().labels(TEST).tsc(tsc(ZONE, 1)).tsc(anyway(tsc(HOST, 1))),
                ),
            ],
            vec![skew(ZONE, &[1, 1]), skew(HOST, &[1, 1])],
        ),
        case(
            "should spread pods while respecting both constraints",
            vec![
                step(
                    vec![nps(&[default_np()]), pods("a", 2, &ch())],
                    vec![skew(CT, &[1, 1]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("b", 3, &ch())],
                    vec![skew(CT, &[3, 2]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("c", 5, &ch())],
                    vec![skew(CT, &[5, 5]), SkewAtMost(HOST, 3)],
                ),
                step(
                    vec![pods("d", 11, &ch())],
                    vec![skew(CT, &[11, 10]), SkewAtMost(HOST, 3)],
                ),
            ],
        ),
    ];
    run_table("Topology / Combined Hostname and Zonal Topology", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("MatchLabelKeys")

#[test]
fn match_label_keys() {
    let t = || set(tsc(HOST, 1), "matchLabelKeys", json!(["test-label"]));
    let cases = vec![
        one(
            "should support matchLabelKeys",
            vec![
                nps(&[default_np()]),
                pods(
                    "a",
                    2,
                    &p().labels(TEST)
                        .labels(&[("test-label", "value-a")])
                        .tsc(t()),
                ),
                pods(
                    "b",
                    2,
                    &p().labels(TEST)
                        .labels(&[("test-label", "value-b")])
                        .tsc(t()),
                ),
            ],
            vec![skew(HOST, &[2, 2])],
        ),
        one(
            "should ignore unknown labels specified in matchLabelKeys",
            vec![
                nps(&[default_np()]),
                pods("p", 4, &p().labels(TEST).tsc(t())),
            ],
            vec![skew(HOST, &[1, 1, 1, 1])],
        ),
    ];
    run_table("Topology / MatchLabelKeys", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("NodeTaintsPolicy")

#[test]
fn node_taints_policy() {
    const LABEL: &str = "fake-label";
    let tainted = || vec![taint("taintname", "taintvalue", "NoSchedule")];
    let existing = || {
        vec![
            node("node1", &[(LABEL, "foo")], tainted(), Some("100m")),
            node("node2", &[(LABEL, "bar")], tainted(), Some("100m")),
        ]
    };
    let spread = |policy: &str| {
        p().labels(TEST)
            .tsc(set(tsc(LABEL, 1), "nodeTaintsPolicy", json!(policy)))
    };
    let discovered = || {
        nps(&[
            np(
                "default",
                vec![req(CT, "Exists", &[]), req(LABEL, "In", &["foo"])],
            ),
            np(
                "tainted",
                vec![req(CT, "Exists", &[]), req(LABEL, "In", &["bar"])],
            )
            .taint(taint("taint-key", "taint-value", "NoSchedule")),
        ])
    };
    let exclusive = |i: usize, domains: &[&str]| {
        np(
            ["nodepool-0", "nodepool-1"][i],
            vec![req(CT, "Exists", &[]), req(LABEL, "In", domains)],
        )
        .taint(taint(
            "taint-key",
            ["nodepool-0", "nodepool-1"][i],
            "NoSchedule",
        ))
    };
    let cases = vec![
        one(
            "should balance pods across a label (NodeTaintsPolicy=ignore)",
            vec![
                nps(&[default_np().labels(&[(LABEL, "baz")])]),
                existing(),
                pods("p", 5, &spread("Ignore").cpu("1")),
            ],
            vec![skew(LABEL, &[1])],
        ),
        one(
            "should balance pods across a label (NodeTaintsPolicy=honor)",
            vec![
                nps(&[default_np().labels(&[(LABEL, "baz")])]),
                existing(),
                pods("p", 5, &spread("Honor").cpu("1")),
            ],
            vec![skew(LABEL, &[5])],
        ),
        one(
            "should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)",
            vec![discovered(), pods("p", 2, &spread("Ignore"))],
            // Differs on purpose (issue "plans that hold on workloads we did
            // not write"): a domain that only a NodePool the pod cannot use
            // offers (here the tainted pool's `bar`) does not hold the
            // spread's minimum at zero; Karpenter places one pod (skew [1]).
            // The same rule keeps a tainted GPU pool's fourth zone from
            // blocking zone spreads over a three-zone default pool.
            vec![skew(LABEL, &[2])],
        ),
        one(
            "should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)",
            vec![discovered(), pods("p", 2, &spread("Honor"))],
            vec![skew(LABEL, &[2])],
        ),
        one(
            "should balance pods across a label when mutually exclusive NodePools (by taints) share domains (NodeTaintsPolicy=honor)",
            vec![
                nps(&[exclusive(0, &["foo", "bar"]), exclusive(1, &["foo", "baz"])]),
                pods(
                    "np0",
                    2,
                    &spread("Honor").tolerate(toleration("taint-key", "Equal", "nodepool-0", "NoSchedule")),
                ),
                pods(
                    "np1",
                    4,
                    &spread("Honor").tolerate(toleration("taint-key", "Equal", "nodepool-1", "NoSchedule")),
                ),
            ],
            vec![skew(LABEL, &[3, 2, 1])],
        ),
    ];
    run_table("Topology / NodeTaintsPolicy", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("NodeAffinityPolicy")

#[test]
fn node_affinity_policy() {
    const LABEL: &str = "fake-label";
    let setup = || {
        vec![
            nps(&[default_np().labels(&[(LABEL, "baz"), ("selector", "value")])]),
            vec![
                node(
                    "node1",
                    &[(LABEL, "foo"), ("selector", "mismatch")],
                    vec![],
                    Some("100m"),
                ),
                node(
                    "node2",
                    &[(LABEL, "bar"), ("selector", "mismatch")],
                    vec![],
                    Some("100m"),
                ),
            ],
        ]
    };
    let spread = |policy: &str| {
        p().labels(TEST)
            .cpu("1")
            .node_selector("selector", "value")
            .tsc(set(tsc(LABEL, 1), "nodeAffinityPolicy", json!(policy)))
    };
    let cases = vec![
        one(
            "should balance pods across a label (NodeAffinityPolicy=ignore)",
            [setup(), vec![pods("p", 5, &spread("Ignore"))]].concat(),
            vec![skew(LABEL, &[1])],
        ),
        one(
            "should balance pods across a label (NodeAffinityPolicy=honor)",
            [setup(), vec![pods("p", 5, &spread("Honor"))]].concat(),
            vec![skew(LABEL, &[5])],
        ),
    ];
    run_table("Topology / NodeAffinityPolicy", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Combined Zonal and Capacity Type Topology")

#[test]
fn combined_zonal_and_capacity_type() {
    let t = || p().labels(TEST).tsc(tsc(CT, 1)).tsc(tsc(ZONE, 1));
    let cases = vec![case(
        "should spread pods while respecting both constraints",
        vec![
            step(
                vec![nps(&[default_np()]), pods("a", 2, &t())],
                vec![SkewAtMost(CT, 1), SkewAtMost(ZONE, 1)],
            ),
            step(
                vec![pods("b", 3, &t())],
                vec![SkewAtMost(CT, 3), SkewAtMost(ZONE, 2)],
            ),
            step(
                vec![pods("c", 3, &t())],
                vec![SkewAtMost(CT, 5), SkewAtMost(ZONE, 4)],
            ),
            step(
                vec![pods("d", 11, &t())],
                vec![SkewAtMost(CT, 11), SkewAtMost(ZONE, 7)],
            ),
        ],
    )];
    run_table(
        "Topology / Combined Zonal and Capacity Type Topology",
        cases,
    );
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Combined Hostname, Zonal, and Capacity Type Topology")

#[test]
fn combined_hostname_zonal_and_capacity_type() {
    let t = || {
        p().labels(TEST)
            .tsc(tsc(CT, 1))
            .tsc(tsc(ZONE, 2))
            .tsc(tsc(HOST, 3))
    };
    const BATCHES: [&str; 14] = [
        "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14",
    ];
    let steps = (1..15)
        .map(|i| {
            let mut docs = vec![pods(BATCHES[i - 1], i, &t())];
            if i == 1 {
                docs.insert(0, nps(&[default_np()]));
            }
            step(
                docs,
                vec![
                    MaxSkew(CT, 1),
                    MaxSkew(ZONE, 2),
                    MaxSkew(HOST, 3),
                    Scheduled("b*"),
                ],
            )
        })
        .collect();
    let cases = vec![case(
        "should spread pods while respecting all constraints",
        steps,
    )];
    run_table(
        "Topology / Combined Hostname, Zonal, and Capacity Type Topology",
        cases,
    );
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Combined Zonal Topology and Node Affinity")

#[test]
fn combined_zonal_and_node_affinity() {
    let spread = || p().labels(TEST).tsc(tsc(ZONE, 1));
    let cases = vec![
        one(
            "should limit spread options by nodeSelector",
            vec![
                nps(&[default_np()]),
                pods("z1", 5, &spread().node_selector(ZONE, Z1)),
                pods("z2", 10, &spread().node_selector(ZONE, Z2)),
            ],
            vec![skew(ZONE, &[5, 10])],
        ),
        one(
            "should limit spread options by node requirements",
            vec![
                nps(&[default_np()]),
                pods("p", 10, &spread().node_req(req(ZONE, "In", &[Z1, Z2]))),
            ],
            vec![skew(ZONE, &[5, 5])],
        ),
        case(
            "should limit spread options by required node affinity",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pods("a", 6, &spread().node_req(req(ZONE, "In", &[Z1, Z2]))),
                    ],
                    vec![skew(ZONE, &[3, 3])],
                ),
                step(
                    vec![
                        nps(&[default_with(vec![req(ZONE, "In", &[Z1, Z2, Z3])])]),
                        pod("b", &spread().node_req(req(ZONE, "In", &[Z2, Z3]))),
                    ],
                    vec![skew(ZONE, &[3, 3, 1])],
                ),
                step(vec![pods("c", 5, &spread())], vec![skew(ZONE, &[4, 4, 4])]),
            ],
        ),
        one(
            "should not limit spread options by preferred node affinity",
            vec![
                nps(&[default_np()]),
                pods("p", 6, &spread().node_pref(req(ZONE, "In", &[Z1, Z2]))),
            ],
            vec![skew(ZONE, &[2, 2, 2])],
        ),
    ];
    run_table(
        "Topology / Combined Zonal Topology and Node Affinity",
        cases,
    );
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Combined Capacity Type Topology and Node Affinity")

#[test]
fn combined_capacity_type_and_node_affinity() {
    let cases = vec![
        one(
            "should limit spread options by nodeSelector",
            vec![
                nps(&[default_np()]),
                pods(
                    "spot",
                    5,
                    &p().labels(TEST)
                        .tsc(anyway(tsc(CT, 1)))
                        .node_selector(CT, "spot"),
                ),
                pods(
                    "od",
                    5,
                    &p().labels(TEST)
                        .tsc(anyway(tsc(CT, 1)))
                        .node_selector(CT, "on-demand"),
                ),
            ],
            vec![skew(CT, &[5, 5])],
        ),
        case(
            "should limit spread options by node affinity (capacity type)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pods(
                            "a",
                            3,
                            &p().labels(TEST)
                                .tsc(tsc(CT, 1))
                                .node_req(req(CT, "In", &["spot"])),
                        ),
                    ],
                    vec![skew(CT, &[3])],
                ),
                step(
                    vec![pod(
                        "b",
                        &p().labels(TEST).tsc(tsc(CT, 1)).node_req(req(
                            CT,
                            "In",
                            &["on-demand", "spot"],
                        )),
                    )],
                    vec![skew(CT, &[3, 1])],
                ),
                step(
                    vec![pods("c", 5, &p().labels(TEST).tsc(tsc(CT, 1)))],
                    vec![skew(CT, &[5, 4])],
                ),
            ],
        ),
    ];
    run_table(
        "Topology / Combined Capacity Type Topology and Node Affinity",
        cases,
    );
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("Pod Affinity/Anti-Affinity")

#[test]
fn pod_affinity() {
    let host_spread = || p().labels(TEST).tsc(tsc(HOST, 1));
    let s2_host_tsc = || {
        json!({
            "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": sel(S2), "maxSkew": 1,
        })
    };
    let self_aff = |key: &str| p().labels(S2).aff(term(S2, key));
    let zone_pods = |anti: &P| {
        [
            pod("zone1", &anti.clone().cpu("2").node_selector(ZONE, Z1)),
            pod("zone2", &anti.clone().cpu("2").node_selector(ZONE, Z2)),
            pod("zone3", &anti.clone().cpu("2").node_selector(ZONE, Z3)),
        ]
        .concat()
    };
    let zone_pods_s2 = zone_pods(&p().labels(S2));
    let zone_pods_anti = zone_pods(&p().anti(term(S2, ZONE)));
    let zone_pods_anti_pref = zone_pods(&p().anti_pref(weighted(10, term(S2, ZONE))));
    let db = &[("type", "db"), ("spread", "spread")];
    let web = &[("type", "web"), ("spread", "spread")];
    let cache = &[("type", "cache"), ("spread", "spread")];
    let ui = &[("type", "ui"), ("spread", "spread")];
    let anti_zone = || p().labels(S2).anti(term(S2, ZONE));
    let all_zones: Check = Skew(ZONE, None, "default", vec![]);
    let zone_skew = |want: &[u32]| match &all_zones {
        Skew(k, s, ns, _) => Skew(k, s.clone(), ns, want.to_vec()),
        _ => unreachable!(),
    };
    let separate_steps: Vec<Step> = (0..10)
        .map(|i| {
            const A1: [&str; 10] = [
                "r0-aff1", "r1-aff1", "r2-aff1", "r3-aff1", "r4-aff1", "r5-aff1", "r6-aff1",
                "r7-aff1", "r8-aff1", "r9-aff1",
            ];
            const A2: [&str; 10] = [
                "r0-aff2", "r1-aff2", "r2-aff2", "r3-aff2", "r4-aff2", "r5-aff2", "r6-aff2",
                "r7-aff2", "r8-aff2", "r9-aff2",
            ];
            let mut docs = vec![
                pod(A2[i], &p().anti(term(S2, HOST))),
                pod(A1[i], &p().labels(S2)),
            ];
            if i == 0 {
                docs.insert(0, nps(&[default_np()]));
            }
            step(docs, vec![DiffNode(A1[i], A2[i])])
        })
        .collect();
    // Differs on purpose: Karpenter records an open-zone NodeClaim in every
    // zone, so it places one pod per batch ([1], [1, 1], [1, 1, 1]);
    // Flotilla pins each NodeClaim to a free zone and places three at once.
    let anti_zone_batches: Vec<Step> = [
        ("a", &[1u32, 1, 1][..]),
        ("b", &[1, 1, 1]),
        ("c", &[1, 1, 1]),
        ("d", &[1, 1, 1]),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (prefix, want))| {
        let mut docs = vec![pods(prefix, 3, &anti_zone())];
        if i == 0 {
            docs.insert(0, nps(&[default_np()]));
        }
        let before = if i == 0 {
            vec![]
        } else {
            vec![Op::DeleteUnscheduled]
        };
        step_after(before, docs, vec![zone_skew(want)])
    })
    .collect();
    let mut empty = p();
    empty.empty_affinity = true;
    let cases = vec![
        one(
            "should schedule a pod with empty pod affinity and anti-affinity",
            vec![nps(&[default_np()]), pod("p", &empty)],
            vec![Scheduled("p")],
        ),
        one(
            "should respect pod affinity (hostname)",
            vec![
                nps(&[default_np()]),
                pods("spread", 10, &host_spread()),
                pod("aff1", &p().labels(S2)),
                pod("aff2", &p().aff(term(S2, HOST))),
            ],
            vec![SameNode("aff1", "aff2")],
        ),
        one(
            "should respect pod affinity (arch)",
            vec![
                nps(&[default_np()]),
                pod(
                    "aff1",
                    &p().labels(S2).tsc(s2_host_tsc()).cpu("2").node_selector(ARCH, "arm64"),
                ),
                pod("aff2", &p().labels(S2).tsc(s2_host_tsc()).cpu("1").aff(term(S2, ARCH))),
            ],
            vec![SameLabel("aff1", "aff2", ARCH), DiffNode("aff1", "aff2")],
        ),
        one(
            "should respect self pod affinity (hostname)",
            vec![nps(&[default_np()]), pods("p", 3, &self_aff(HOST))],
            vec![Scheduled("p*"), OneNode("p*")],
        ),
        case(
            "should respect self pod affinity for first empty topology domain only (hostname)",
            vec![
                step(
                    vec![nps(&[default_np()]), pods("a", 10, &self_aff(HOST))],
                    vec![OneNode("a*"), ScheduledCount("a*", 5)],
                ),
                step(vec![pods("b", 10, &self_aff(HOST))], vec![NotScheduled("b*")]),
            ],
        ),
        case(
            "should respect self pod affinity for first empty topology domain only (hostname/constrained zones)",
            vec![
                step(
                    vec![nps(&[default_np()]), pod("first", &self_aff(HOST).node_selector(ZONE, Z1))],
                    vec![Scheduled("first")],
                ),
                step(
                    vec![pods("p", 10, &self_aff(HOST).node_req(req(ZONE, "In", &[Z2, Z3])))],
                    vec![NotScheduled("p*")],
                ),
            ],
        ),
        one(
            "should respect self pod affinity (zone)",
            vec![nps(&[default_np()]), pods("p", 3, &self_aff(ZONE))],
            vec![Scheduled("p*"), OneNode("p*")],
        ),
        one(
            "should respect self pod affinity (zone w/ constraint)",
            vec![
                nps(&[default_np()]),
                pods("p", 3, &self_aff(ZONE).node_req(req(ZONE, "In", &[Z3]))),
            ],
            vec![Scheduled("p*"), OneNode("p*"), NodeLabel("p*", ZONE, Z3)],
        ),
        one(
            "should allow two nodes to be created when two pods with matching affinities have incompatible selectors",
            vec![
                nps(&[default_np()]),
                pod("pod1", &p().labels(&[("security", "s1")]).aff(term(&[("security", "s1")], ZONE)).node_req(req(ZONE, "In", &[Z2]))),
                pod("pod2", &p().labels(&[("security", "s1")]).aff(term(&[("security", "s1")], ZONE)).node_req(req(ZONE, "In", &[Z3]))),
            ],
            vec![NodeLabel("pod1", ZONE, Z2), NodeLabel("pod2", ZONE, Z3), Nodes(2)],
        ),
        one(
            "should allow violation of preferred pod affinity",
            vec![
                nps(&[default_np()]),
                pods("spread", 10, &host_spread()),
                pod("aff2", &p().aff_pref(weighted(50, term(S2, HOST)))),
            ],
            vec![Scheduled("aff2")],
        ),
        one(
            "should allow violation of preferred pod anti-affinity",
            vec![
                nps(&[default_np()]),
                pods("spread", 3, &p().labels(TEST).tsc(tsc(ZONE, 1))),
                pods("aff", 10, &p().anti_pref(weighted(50, term(TEST, ZONE)))),
            ],
            vec![Scheduled("aff*")],
        ),
        case("should separate nodes using simple pod anti-affinity on hostname", separate_steps),
        one(
            "should not violate pod anti-affinity on zone",
            vec![
                nps(&[default_np()]),
                zone_pods_s2.clone(),
                pod("aff", &p().anti(term(S2, ZONE))),
            ],
            vec![Scheduled("zone*"), NotScheduled("aff")],
        ),
        one(
            "should not violate pod anti-affinity on zone (other schedules first)",
            vec![
                nps(&[default_np()]),
                pod("target", &p().labels(S2).cpu("2")),
                pod("aff", &p().anti(term(S2, ZONE))),
            ],
            // Differs on purpose: Flotilla pins the target's NodeClaim to a
            // zone and places `aff` in another at once; Karpenter leaves the
            // target's zone open and `aff` for its next round.
            vec![Scheduled("target"), Scheduled("aff"), DiffLabel("target", "aff", ZONE)],
        ),
        one(
            "should not violate pod anti-affinity (arch)",
            vec![
                nps(&[default_np()]),
                pod(
                    "aff1",
                    &p().labels(S2).tsc(s2_host_tsc()).cpu("2").node_selector(ARCH, "arm64"),
                ),
                pod("aff2", &p().labels(S2).tsc(s2_host_tsc()).cpu("1").anti(term(S2, ARCH))),
            ],
            vec![DiffLabel("aff1", "aff2", ARCH)],
        ),
        one(
            "should violate preferred pod anti-affinity on zone (inverse)",
            vec![nps(&[default_np()]), zone_pods_anti_pref.clone(), pod("aff", &p().labels(S2))],
            vec![Scheduled("zone*"), Scheduled("aff")],
        ),
        one(
            "should not violate pod anti-affinity on zone (inverse)",
            vec![nps(&[default_np()]), zone_pods_anti.clone(), pod("aff", &p().labels(S2))],
            vec![Scheduled("zone*"), NotScheduled("aff")],
        ),
        case(
            "should not violate pod anti-affinity on zone (Schrödinger)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pod("anywhere", &p().anti(term(S2, ZONE)).cpu("2")),
                        pod("aff", &p().labels(S2)),
                    ],
                    // Differs on purpose: both at once, in pinned zones
                    // (Karpenter places `aff` in its next round).
                    vec![Scheduled("anywhere"), Scheduled("aff"), DiffLabel("anywhere", "aff", ZONE)],
                ),
                step(vec![], vec![Scheduled("aff"), DiffLabel("anywhere", "aff", ZONE)]),
            ],
        ),
        case(
            "should not violate pod anti-affinity on zone (inverse w/existing nodes)",
            vec![
                step(vec![nps(&[default_np()]), zone_pods_anti.clone()], vec![Scheduled("zone*")]),
                step(vec![pod("aff", &p().labels(S2))], vec![NotScheduled("aff")]),
            ],
        ),
        case(
            "should violate preferred pod anti-affinity on zone (inverse w/existing nodes)",
            vec![
                step(vec![nps(&[default_np()]), zone_pods_anti_pref.clone()], vec![Scheduled("zone*")]),
                step(vec![pod("aff", &p().labels(S2))], vec![Scheduled("aff")]),
            ],
        ),
        one(
            "should allow violation of a pod affinity preference with a conflicting required constraint",
            vec![
                nps(&[default_np()]),
                pods("p", 3, &host_spread().aff_pref(weighted(50, term(S2, HOST)))),
                pod("aff1", &p().labels(S2)),
            ],
            vec![
                Scheduled("p*"),
                Scheduled("aff1"),
                Skew(HOST, Some(TEST.to_vec()), "", vec![1, 1, 1]),
            ],
        ),
        case("should support pod anti-affinity with a zone topology", anti_zone_batches),
        one(
            "should not schedule pods with affinity to a non-existent pod",
            vec![nps(&[default_np()]), pods("p", 10, &p().aff(term(S2, ZONE)))],
            vec![NotScheduled("p*")],
        ),
        case(
            "should support pod affinity with zone topology (unconstrained target)",
            vec![
                step(
                    vec![
                        nps(&[default_np()]),
                        pods("aff", 10, &p().aff(term(S2, ZONE))),
                        pod("target", &p().labels(S2)),
                    ],
                    // Differs on purpose: Flotilla pins the target's
                    // NodeClaim to a zone (a required affinity term selects
                    // it), so the followers join it at once; Karpenter
                    // leaves the target's zone open and the followers for
                    // its next round.
                    vec![Scheduled("aff*"), zone_skew(&[11])],
                ),
                step(vec![], vec![Scheduled("aff*"), zone_skew(&[11])]),
            ],
        ),
        one(
            "should support pod affinity with zone topology (constrained target)",
            vec![
                nps(&[default_np()]),
                pods("aff", 10, &p().aff(term(S2, ZONE))),
                pod("target", &p().labels(S2).node_req(req(ZONE, "In", &[Z1]))),
            ],
            vec![zone_skew(&[11])],
        ),
        // Karpenter repeats this 50 times against its random map order;
        // Flotilla is deterministic, so once is the same test.
        one(
            "should handle multiple dependent affinities",
            vec![
                nps(&[default_np()]),
                pod("db", &p().labels(db)),
                pod("web", &p().labels(web).aff(term(db, HOST))),
                pod("cache", &p().labels(cache).aff(term(web, HOST))),
                pod("ui", &p().labels(ui).aff(term(cache, HOST))),
            ],
            vec![Scheduled("db"), Scheduled("web"), Scheduled("cache"), Scheduled("ui")],
        ),
        one(
            "should fail to schedule pods with unsatisfiable dependencies",
            vec![nps(&[default_np()]), pod("db", &p().labels(db).aff(term(web, HOST)))],
            vec![NotScheduled("db")],
        ),
        one(
            "should filter pod affinity topologies by namespace, no matching pods",
            vec![
                nps(&[default_np()]),
                pods("spread", 10, &host_spread()),
                pod("aff1", &p().labels(S2).ns("other-ns-no-match")),
                pod("aff2", &p().aff(term(S2, HOST))),
            ],
            vec![Scheduled("aff1"), NotScheduled("aff2")],
        ),
        one(
            "should filter pod affinity topologies by namespace, matching pods namespace list",
            vec![
                nps(&[default_np()]),
                pods("spread", 10, &host_spread()),
                pod("aff1", &p().labels(S2).ns("other-ns-list")),
                pod("aff2", &p().aff(set(term(S2, HOST), "namespaces", json!(["other-ns-list"])))),
            ],
            vec![SameNode("aff1", "aff2")],
        ),
        one(
            "should filter pod affinity topologies by namespace, empty namespace selector",
            vec![
                nps(&[default_np()]),
                pods("spread", 10, &host_spread()),
                pod("aff1", &p().labels(S2).ns("empty-ns-selector")),
                pod("aff2", &p().aff(set(term(S2, HOST), "namespaceSelector", json!({ "matchLabels": {} })))),
            ],
            vec![SameNode("aff1", "aff2")],
        ),
    ];
    run_table("Topology / Pod Affinity/Anti-Affinity", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology") / Context("DefaultConstraints")
//
// Only the case without cluster default constraints applies: Flotilla has no
// input for kube-scheduler's `defaultConstraints` (see NOT_PORTED).

#[test]
fn default_constraints() {
    let cases = vec![one(
        "should be a no-op when no default constraints are configured",
        vec![
            nps(&[default_np()]),
            pods("p", 3, &p().labels(TEST).owned_by("ReplicaSet", "rs")),
        ],
        vec![Scheduled("p*"), OneNode("p*")],
    )];
    run_table("Topology / DefaultConstraints", cases);
}

// ---------------------------------------------------------------------------
// Describe("Taints")

#[test]
fn taints() {
    let tainted = |key: &'static str, value: &'static str| {
        nps(&[default_np().taint(taint(key, value, "NoSchedule"))])
    };
    let cases = vec![
        one(
            "should taint nodes with NodePool taints",
            vec![
                tainted("test", "bar"),
                pod("p", &p().tolerate(toleration("", "Exists", "", "NoSchedule"))),
            ],
            vec![Scheduled("p"), NodeTaints("p", vec!["test=bar:NoSchedule"])],
        ),
        case(
            "should schedule pods that tolerate NodePool constraints",
            vec![
                step(
                    vec![
                        tainted("test-key", "test-value"),
                        pod("exists", &p().tolerate(toleration("test-key", "Exists", "", "NoSchedule"))),
                        pod(
                            "equal",
                            &p().tolerate(toleration("test-key", "Equal", "test-value", "NoSchedule")),
                        ),
                    ],
                    vec![Scheduled("exists"), Scheduled("equal")],
                ),
                step(
                    vec![
                        pod("missing", &p()),
                        pod("key-mismatch", &p().tolerate(toleration("invalid", "Exists", "", ""))),
                        pod(
                            "value-mismatch",
                            &p().tolerate(toleration("test-key", "Equal", "", "NoSchedule")),
                        ),
                    ],
                    vec![
                        NotScheduled("missing"),
                        NotScheduled("key-mismatch"),
                        NotScheduled("value-mismatch"),
                    ],
                ),
            ],
        ),
        one(
            "should provision nodes with taints and schedule pods if the taint is only a startup taint",
            vec![
                nps(&[default_np().startup_taint(taint("ignore-me", "nothing-to-see-here", "NoSchedule"))]),
                pod("p", &p()),
            ],
            vec![Scheduled("p")],
        ),
        // Karpenter's node has one taint, the one it is created with until it
        // registers; "no taints generated beyond the default" is a NodeClaim
        // without taints here.
        one(
            "should not generate taints for OpExists",
            vec![
                nps(&[default_np()]),
                pod("p", &p().tolerate(toleration("test-key", "Exists", "", "NoExecute"))),
            ],
            vec![Scheduled("p"), NodeTaints("p", vec![])],
        ),
    ];
    run_table("Taints", cases);
}

// ---------------------------------------------------------------------------
// Describe("Topology with Volume Requirements")

#[test]
fn topology_with_volume_requirements() {
    let app = &[("app", "test")];
    let t = || {
        p().labels(app).tsc(json!({
            "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": sel(app), "maxSkew": 1, "minDomains": 3,
        }))
    };
    let app_skew = |want: &[u32]| Skew(ZONE, Some(app.to_vec()), "default", want.to_vec());
    let cases = vec![case(
        "should schedule pod with PVC and TSC minDomains=3 when pods are spread across 3 zones",
        vec![
            step(
                vec![
                    nps(&[default_with(vec![req(CT, "In", &["on-demand"])])]),
                    vec![pv("test-pv", Z1), pvc("test-pvc", "test-pv")],
                    pods("initial", 3, &t()),
                ],
                vec![Scheduled("initial*"), app_skew(&[1, 1, 1])],
            ),
            step(
                vec![pod("with-pvc", &t().pvc("test-pvc"))],
                vec![
                    Scheduled("with-pvc"),
                    NodeLabel("with-pvc", ZONE, Z1),
                    app_skew(&[1, 1, 2]),
                ],
            ),
        ],
    )];
    run_table("Topology with Volume Requirements", cases);
}

#[test]
fn not_ported_cases_name_a_reason() {
    for (name, reason) in NOT_PORTED {
        assert!(!name.is_empty() && !reason.is_empty());
    }
    println!("{} It cases not ported", NOT_PORTED.len());
}

// ---------------------------------------------------------------------------
// Known differences left (2): "should only count running/scheduled pods with
// matching labels scheduled to nodes with a corresponding domain" (Zonal and
// CapacityType): Flotilla plans every pending pod given, also one that
// kube-scheduler has not marked Unschedulable (Karpenter ignores it), so
// that pod is counted where it is planned.
//
// The `It`s not ported, with the reason.

const NOT_PORTED: &[(&str, &str)] = &[
    (
        "Topology / should not spread an invalid label selector",
        "skipped by Karpenter itself on Kubernetes ≥ 1.24: the API server rejects the selector value, so no user can submit such a pod",
    ),
    (
        "Topology / DefaultConstraints / should apply default zonal spread to a pod that declares no constraints of its own",
        "needs cluster default topology spread constraints (kube-scheduler defaultConstraints via Karpenter's --scheduler-config); Flotilla has no input or option for them",
    ),
    (
        "Topology / DefaultConstraints / should apply default hostname spread to a pod that declares no constraints of its own",
        "needs cluster default topology spread constraints (--scheduler-config); not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should NOT apply the default to a pod that declares its own constraints",
        "needs cluster default topology spread constraints (--scheduler-config); not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should carry minDomains through a synthesized default",
        "needs cluster default topology spread constraints (--scheduler-config); not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should NOT schedule past a synthesized DoNotSchedule default that can't be satisfied",
        "needs cluster default topology spread constraints (--scheduler-config); not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should relax a synthesized ScheduleAnyway default when it can't be satisfied",
        "needs cluster default topology spread constraints (--scheduler-config); not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should not apply the default to a pod with no owner and no matching service",
        "needs cluster default topology spread constraints (--scheduler-config) to be configured; without them it is the no-op case, which is ported",
    ),
    (
        "Topology / DefaultConstraints / should count pre-existing cluster pods through the deduced selector",
        "needs cluster default topology spread constraints (--scheduler-config) and the selector kube-scheduler deduces from owners; not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should spread each workload independently",
        "needs cluster default topology spread constraints (--scheduler-config) and the per-owner deduced selector; not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should spread each Deployment revision independently",
        "needs cluster default topology spread constraints (--scheduler-config) and the per-ReplicaSet deduced selector; not modelled by Flotilla",
    ),
    (
        "Topology / DefaultConstraints / should deduce a selector from a matching service for a pod with no supported owner",
        "needs cluster default topology spread constraints (--scheduler-config) and Services (not an input kind of Flotilla)",
    ),
];
