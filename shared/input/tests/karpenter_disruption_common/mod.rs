//! What the ports of Karpenter's disruption tests share.
//!
//! All four (`karpenter_disruption_consolidation.rs`,
//! `karpenter_disruption_suite.rs`, `karpenter_disruption_drift.rs`,
//! `karpenter_disruption_emptiness.rs`) use the vocabulary (zones, labels,
//! the clock), the document helpers ([`map`], [`req`], [`node_class`],
//! [`pdb_in`]), the NodePool builder [`Np`] (each port sets its Go suite's
//! `BeforeEach` settings on top), the embedded [`catalog`], [`load_docs`]
//! and the table runner ([`run_cases`], [`check_not_ported`]).
//!
//! `karpenter_disruption_emptiness.rs` and `karpenter_disruption_drift.rs`
//! also share Karpenter's disruption test fixtures (`test.NodeClaimAndNode`,
//! `test.Pod`, `test.PodDisruptionBudget`) as Kubernetes documents, one
//! `flotilla_core::disruption::disrupt` run per `ExpectSingletonReconciled`
//! step, and the checks the Go tests make, read from the decisions (the
//! consolidation and suite ports keep their own: their Go suites build
//! different nodes and pods and check other things).
//!
//! Conventions of the emptiness and drift ports (beside those of
//! `karpenter_topology.rs` and `karpenter_provisioning.rs`: `test-zone-1`
//! is `us-west-2a`, every NodePool is given `topology.kubernetes.io/zone
//! In [us-west-2a, us-west-2b, us-west-2c]`, a NodePool without a
//! capacity-type requirement launches on-demand):
//!
//! * the fake `leastExpensiveInstance` / `leastExpensiveSpotInstance` is
//!   `c5.large` (the fake catalog's "small" type) on demand / on spot, the
//!   fake `mostExpensiveInstance` is `m5.8xlarge` (32 vCPU, as the Go
//!   NodeClaims' 32-CPU allocatable). A node's allocatable is what the Go
//!   NodeClaim's `status.allocatable` says (32 CPU and 100 pods unless the
//!   case says otherwise), its price that of its instance type's offering;
//! * `test.NodeClaimAndNode` is a Node with its NodeClaim (linked by
//!   `status.nodeName` and the provider ID), both created at [`CREATED`]
//!   (nodes made later in a Go test a second later each), Ready;
//!   `ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated` is the
//!   `karpenter.sh/registered` and `karpenter.sh/initialized` labels and
//!   the NodeClaim's `Launched`, `Registered`, `Initialized` conditions;
//!   `StatusConditions().SetTrue(Consolidatable / Drifted)` is that
//!   condition with `lastTransitionTime` [`NOW`] (the Go clock when the test
//!   runs), unless the case gives another time;
//! * `ExpectSingletonReconciled(disruptionController)` is one `disrupt` run
//!   at [`NOW`] (plus whatever `env.Clock.Step` added). Karpenter's
//!   controller starts one command per reconcile, the first method that
//!   finds one; a Flotilla run takes every decision a series of reconciles
//!   would, each on the state the earlier ones leave (docs/disruption.md).
//!   So a Go test that reconciles once and then checks what happened is
//!   checked against the run's **first** decision ([`Check::First`]); what
//!   the Go test expects to be left alone by that reconcile but would be
//!   taken by Karpenter's next one is not asserted to be left alone;
//! * `ExpectObjectReconciled(queue, ...)` (executing the command) and
//!   `ExpectNodeClaimsCascadeDeletion` are the decision itself: a node
//!   "not found" afterwards is a node in a decision; "the NodeClaim count
//!   is 2" after a drift of one node with a pod is one replacement;
//! * pods without an owner are `test.Pod()`'s (bare pods: they move like
//!   any other); `test.ReplicaSet()`, `test.DaemonSet()`,
//!   `test.StatefulSet()` owners are owner references of that kind.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use flotilla_core::catalog::Catalog;
use flotilla_core::disruption::{disrupt, DisruptOptions, Disruptions};
use flotilla_core::model::{ClusterState, DisruptionReason};
use flotilla_input::{load, Source};
use serde_json::{json, Value};

// Not every port names every reason (as `dead_code` above: each port
// compiles the module on its own).
#[allow(unused_imports)]
pub use DisruptionReason::{Drifted, Empty, Underutilized};

pub const Z1: &str = "us-west-2a";
pub const Z2: &str = "us-west-2b";
pub const Z3: &str = "us-west-2c";
/// Karpenter's `test-zone-1`, `test-zone-2`, `test-zone-3`.
pub const ZONES: [&str; 3] = [Z1, Z2, Z3];
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const HOST: &str = "kubernetes.io/hostname";
pub const CT: &str = "karpenter.sh/capacity-type";
pub const ITYPE: &str = "node.kubernetes.io/instance-type";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const OD: &str = "on-demand";
pub const SPOT: &str = "spot";
/// The fake `leastExpensiveInstance` (and `leastExpensiveSpotInstance`).
pub const CHEAP: &str = "c5.large";
/// The fake `mostExpensiveInstance`.
pub const DEAR: &str = "m5.8xlarge";

/// 2026-11-30T12:00:00Z: the Go test clock when the case runs.
pub const NOW: i64 = 1_796_040_000;
/// When the case's nodes and NodeClaims were created (ten minutes before
/// [`NOW`]: younger than any `consolidateAfter` of 1h, older than 30s).
pub const CREATED: i64 = NOW - 600;

pub fn ts(t: i64) -> String {
    const DAY: i64 = 86_400;
    // days since 1970-01-01 to a civil date (Howard Hinnant's algorithm)
    let (days, secs) = (t.div_euclid(DAY), t.rem_euclid(DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// A string map (labels, annotations, a selector).
pub fn map(kv: &[(&str, &str)]) -> Value {
    Value::Object(
        kv.iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect(),
    )
}

/// A node selector requirement (without values: `Exists`,
/// `DoesNotExist`).
pub fn req(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({ "key": key, "operator": op })
    } else {
        json!({ "key": key, "operator": op, "values": values })
    }
}

// ---------------------------------------------------------------------------
// NodePools (`test.NodePool`)

/// A NodePool: what `np` gives (limits of 2000 CPU, the three zones unless
/// the requirements name zones) with each port's `BeforeEach` settings on
/// top.
#[derive(Clone)]
pub struct Np {
    pub name: String,
    pub reqs: Vec<Value>,
    /// `spec.disruption.consolidateAfter` (`None`: the CRD default, 0s).
    pub consolidate_after: Option<&'static str>,
    /// `spec.disruption.consolidationPolicy` (`None`: the CRD default).
    pub policy: Option<&'static str>,
    /// `spec.disruption.budgets` (`None`: the CRD default, 10%).
    pub budgets: Option<Vec<Value>>,
    pub expire_after: Option<&'static str>,
    pub termination_grace_period: Option<&'static str>,
    /// `spec.replicas`: a static NodePool.
    pub replicas: Option<u32>,
    /// `spec.weight`.
    pub weight: Option<u32>,
    /// The template refers to the EC2NodeClass `default`.
    pub node_class: bool,
    /// `spec.limits.cpu` (`None`: no limits).
    pub cpu_limit: Option<&'static str>,
    /// A NodePool without a zone requirement is given the three zones.
    pub default_zones: bool,
}

pub fn np(name: &str) -> Np {
    Np {
        name: name.to_string(),
        reqs: vec![],
        consolidate_after: None,
        policy: None,
        budgets: None,
        expire_after: None,
        termination_grace_period: None,
        replicas: None,
        weight: None,
        node_class: true,
        cpu_limit: Some("2000"),
        default_zones: true,
    }
}

/// A budget of `nodes` for every reason, always active.
pub fn budget(nodes: &str) -> Value {
    json!({ "nodes": nodes })
}

impl Np {
    pub fn consolidate_after(mut self, d: &'static str) -> Self {
        self.consolidate_after = Some(d);
        self
    }
    pub fn when_empty(self) -> Self {
        self.policy("WhenEmpty")
    }
    pub fn policy(mut self, p: &'static str) -> Self {
        self.policy = Some(p);
        self
    }
    pub fn budgets(mut self, b: Vec<Value>) -> Self {
        self.budgets = Some(b);
        self
    }
    /// One budget of `nodes`, always active.
    pub fn budget(self, nodes: &str) -> Self {
        self.budgets(vec![budget(nodes)])
    }
    pub fn expire_after(mut self, d: &'static str) -> Self {
        self.expire_after = Some(d);
        self
    }
    pub fn termination_grace_period(mut self, d: &'static str) -> Self {
        self.termination_grace_period = Some(d);
        self
    }
    pub fn req(mut self, r: Value) -> Self {
        self.reqs.push(r);
        self
    }
    /// These requirements instead of those given so far.
    pub fn reqs(mut self, reqs: Vec<Value>) -> Self {
        self.reqs = reqs;
        self
    }
    pub fn replicas(mut self, r: u32) -> Self {
        self.replicas = Some(r);
        self
    }
    pub fn weight(mut self, w: u32) -> Self {
        self.weight = Some(w);
        self
    }
    pub fn without_node_class(mut self) -> Self {
        self.node_class = false;
        self
    }
    pub fn without_limits(mut self) -> Self {
        self.cpu_limit = None;
        self
    }
    /// No zone requirement unless one is given.
    pub fn without_default_zones(mut self) -> Self {
        self.default_zones = false;
        self
    }
    pub fn doc(&self) -> Value {
        let mut reqs = self.reqs.clone();
        if self.default_zones && !reqs.iter().any(|r| r["key"] == ZONE) {
            reqs.push(req(ZONE, "In", &ZONES));
        }
        let mut spec = json!({ "requirements": reqs });
        if self.node_class {
            spec["nodeClassRef"] = node_class_ref();
        }
        if let Some(e) = self.expire_after {
            spec["expireAfter"] = json!(e);
        }
        if let Some(t) = self.termination_grace_period {
            spec["terminationGracePeriod"] = json!(t);
        }
        let mut disruption = serde_json::Map::new();
        if let Some(c) = self.consolidate_after {
            disruption.insert("consolidateAfter".into(), json!(c));
        }
        if let Some(p) = self.policy {
            disruption.insert("consolidationPolicy".into(), json!(p));
        }
        if let Some(b) = &self.budgets {
            disruption.insert("budgets".into(), json!(b));
        }
        let mut np = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": { "name": self.name },
            "spec": {
                "template": { "spec": spec },
                "disruption": Value::Object(disruption),
            },
        });
        if let Some(l) = self.cpu_limit {
            np["spec"]["limits"] = json!({ "cpu": l });
        }
        if let Some(r) = self.replicas {
            np["spec"]["replicas"] = json!(r);
        }
        if let Some(w) = self.weight {
            np["spec"]["weight"] = json!(w);
        }
        np
    }
}

/// A NodePool's or NodeClaim's reference to [`node_class`].
pub fn node_class_ref() -> Value {
    json!({ "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" })
}

/// The EC2NodeClass every NodePool refers to.
pub fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default" },
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test" } }],
        },
    })
}

// ---------------------------------------------------------------------------
// Nodes with their NodeClaims (`test.NodeClaimAndNode`)

/// A NodeClaim status condition: `Some(true)` True, `Some(false)` False,
/// `None` absent.
#[derive(Clone)]
pub struct Nc {
    pub name: String,
    pub pool: String,
    pub itype: &'static str,
    pub capacity_type: &'static str,
    pub zone: &'static str,
    pub cpu: &'static str,
    pub pods: Option<&'static str>,
    pub created: i64,
    pub node_annotations: Vec<(&'static str, &'static str)>,
    /// `Consolidatable`: status and lastTransitionTime.
    pub consolidatable: Option<(bool, i64)>,
    /// `Drifted`: status and lastTransitionTime.
    pub drifted: Option<(bool, i64)>,
    /// The NodeClaim's `spec.terminationGracePeriod`.
    pub termination_grace_period: Option<&'static str>,
}

/// A node of `pool` on the fake `mostExpensiveInstance`, on demand, in
/// test-zone-1, 32 CPU and 100 pods allocatable.
pub fn nc(name: &str, pool: &str) -> Nc {
    Nc {
        name: name.to_string(),
        pool: pool.to_string(),
        itype: DEAR,
        capacity_type: "on-demand",
        zone: Z1,
        cpu: "32",
        pods: Some("100"),
        created: CREATED,
        node_annotations: vec![],
        consolidatable: None,
        drifted: None,
        termination_grace_period: None,
    }
}

impl Nc {
    /// On the fake `leastExpensiveInstance` (on demand).
    pub fn cheap(mut self) -> Self {
        self.itype = CHEAP;
        self
    }
    /// On the fake `leastExpensiveSpotInstance`.
    pub fn cheap_spot(mut self) -> Self {
        self.itype = CHEAP;
        self.capacity_type = "spot";
        self
    }
    pub fn itype(mut self, t: &'static str) -> Self {
        self.itype = t;
        self
    }
    pub fn cpu(mut self, cpu: &'static str) -> Self {
        self.cpu = cpu;
        self
    }
    pub fn no_pods_allocatable(mut self) -> Self {
        self.pods = None;
        self
    }
    pub fn created(mut self, t: i64) -> Self {
        self.created = t;
        self
    }
    pub fn annotate(mut self, k: &'static str, v: &'static str) -> Self {
        self.node_annotations.push((k, v));
        self
    }
    pub fn consolidatable(mut self) -> Self {
        self.consolidatable = Some((true, NOW));
        self
    }
    pub fn consolidatable_false(mut self) -> Self {
        self.consolidatable = Some((false, NOW));
        self
    }
    pub fn drifted(mut self) -> Self {
        self.drifted = Some((true, NOW));
        self
    }
    pub fn drifted_at(mut self, t: i64) -> Self {
        self.drifted = Some((true, t));
        self
    }
    pub fn drifted_false(mut self) -> Self {
        self.drifted = Some((false, NOW));
        self
    }
    pub fn claim_termination_grace_period(mut self, d: &'static str) -> Self {
        self.termination_grace_period = Some(d);
        self
    }

    fn provider_id(&self) -> String {
        // a stable fake instance id per node name
        let h = self.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        format!("aws:///{}/i-0{h:016x}", self.zone)
    }

    /// The Node and its NodeClaim.
    pub fn docs(&self) -> Vec<Value> {
        let labels = map(&[
            (NODEPOOL, &self.pool),
            (ITYPE, self.itype),
            (CT, self.capacity_type),
            (ZONE, self.zone),
            ("kubernetes.io/hostname", &self.name),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("karpenter.sh/registered", "true"),
            ("karpenter.sh/initialized", "true"),
        ]);
        let mut alloc = json!({ "cpu": self.cpu });
        if let Some(p) = self.pods {
            alloc["pods"] = json!(p);
        }
        let created = ts(self.created);
        let mut node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": self.name, "creationTimestamp": created, "labels": labels },
            "spec": { "providerID": self.provider_id() },
            "status": {
                "allocatable": alloc,
                "capacity": alloc,
                "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": created }],
            },
        });
        if !self.node_annotations.is_empty() {
            node["metadata"]["annotations"] = map(&self.node_annotations);
        }
        let mut conditions = vec![];
        for t in ["Launched", "Registered", "Initialized"] {
            conditions.push(json!({ "type": t, "status": "True", "lastTransitionTime": created, "reason": t, "message": "" }));
        }
        for (t, c) in [
            ("Consolidatable", self.consolidatable),
            ("Drifted", self.drifted),
        ] {
            if let Some((s, at)) = c {
                let status = if s { "True" } else { "False" };
                conditions.push(json!({ "type": t, "status": status, "lastTransitionTime": ts(at), "reason": t, "message": "" }));
            }
        }
        let mut spec = json!({
            "nodeClassRef": node_class_ref(),
            "requirements": [],
        });
        if let Some(t) = self.termination_grace_period {
            spec["terminationGracePeriod"] = json!(t);
        }
        let claim = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": format!("{}-claim", self.name),
                "creationTimestamp": created,
                "labels": map(&[(NODEPOOL, &self.pool), (ITYPE, self.itype), (CT, self.capacity_type), (ZONE, self.zone)]),
            },
            "spec": spec,
            "status": {
                "nodeName": self.name,
                "providerID": self.provider_id(),
                "allocatable": alloc,
                "conditions": conditions,
            },
        });
        vec![node, claim]
    }
}

/// `test.NodeClaimsAndNodes(n, ...)`: `prefix-0` .. `prefix-(n-1)`.
pub fn ncs(prefix: &str, n: usize, f: impl Fn(Nc) -> Nc, pool: &str) -> Vec<Nc> {
    (0..n)
        .map(|i| f(nc(&format!("{prefix}-{i}"), pool)))
        .collect()
}

// ---------------------------------------------------------------------------
// Pods (`test.Pod`)

#[derive(Clone, Default)]
pub struct P {
    pub name: String,
    /// `spec.nodeName`; `None`: pending.
    pub node: Option<String>,
    pub cpu: Option<&'static str>,
    pub labels: Vec<(&'static str, &'static str)>,
    pub annotations: Vec<(&'static str, &'static str)>,
    /// Owner kind and name (`ReplicaSet`, `DaemonSet`, `StatefulSet`).
    pub owner: Option<(&'static str, &'static str)>,
    /// `metadata.deletionTimestamp` set (evicted, still there).
    pub terminating: bool,
    /// `status.startTime`.
    pub started: Option<i64>,
}

pub fn pod(name: &str) -> P {
    P {
        name: name.to_string(),
        ..P::default()
    }
}

impl P {
    pub fn on(mut self, node: &str) -> Self {
        self.node = Some(node.to_string());
        self
    }
    pub fn cpu(mut self, c: &'static str) -> Self {
        self.cpu = Some(c);
        self
    }
    pub fn label(mut self, k: &'static str, v: &'static str) -> Self {
        self.labels.push((k, v));
        self
    }
    pub fn annotate(mut self, k: &'static str, v: &'static str) -> Self {
        self.annotations.push((k, v));
        self
    }
    pub fn owned(mut self, kind: &'static str, name: &'static str) -> Self {
        self.owner = Some((kind, name));
        self
    }
    /// Owned by `test.ReplicaSet()`, labelled `app: test`.
    pub fn rs(self) -> Self {
        self.owned("ReplicaSet", "test-rs").label("app", "test")
    }
    pub fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
    pub fn started(mut self, t: i64) -> Self {
        self.started = Some(t);
        self
    }
    pub fn doc(&self) -> Value {
        let mut meta =
            json!({ "name": self.name, "namespace": "default", "creationTimestamp": ts(CREATED) });
        if !self.labels.is_empty() {
            meta["labels"] = map(&self.labels);
        }
        if !self.annotations.is_empty() {
            meta["annotations"] = map(&self.annotations);
        }
        if let Some((kind, name)) = self.owner {
            meta["ownerReferences"] = json!([{
                "apiVersion": "apps/v1", "kind": kind, "name": name,
                "uid": format!("00000000-0000-4000-8000-{:012}", name.len()),
                "controller": true, "blockOwnerDeletion": true,
            }]);
        }
        if self.terminating {
            meta["deletionTimestamp"] = json!(ts(NOW));
        }
        let mut c =
            json!({ "name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2" });
        if let Some(cpu) = self.cpu {
            c["resources"] = json!({ "requests": { "cpu": cpu } });
        }
        let mut spec = json!({ "containers": [c] });
        if let Some(n) = &self.node {
            spec["nodeName"] = json!(n);
        }
        let mut status = json!({
            "phase": if self.node.is_some() { "Running" } else { "Pending" },
            "conditions": [{ "type": "Ready", "status": if self.node.is_some() { "True" } else { "False" } }],
        });
        if self.node.is_none() {
            status["conditions"] =
                json!([{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable" }]);
        }
        if let Some(t) = self.started {
            status["startTime"] = json!(ts(t));
        }
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status })
    }
}

/// `test.DaemonSet()`.
pub fn daemon_set(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "selector": { "matchLabels": { "ds": name } },
            "template": {
                "metadata": { "labels": { "ds": name } },
                "spec": { "containers": [{ "name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2" }] },
            },
        },
    })
}

/// `test.PodDisruptionBudget(test.PDBOptions{Labels, MaxUnavailable})`.
pub fn pdb(name: &str, labels: &[(&str, &str)], max_unavailable: i64) -> Value {
    pdb_in("default", name, labels, max_unavailable, None)
}

/// A PodDisruptionBudget in namespace `ns`; with `allowed`, the status
/// of one healthy pod and that many disruptions allowed.
pub fn pdb_in(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    max_unavailable: i64,
    allowed: Option<u32>,
) -> Value {
    let mut d = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "selector": { "matchLabels": map(labels) }, "maxUnavailable": max_unavailable },
    });
    if let Some(a) = allowed {
        d["status"] = json!({ "disruptionsAllowed": a, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1 });
    }
    d
}

// ---------------------------------------------------------------------------
// Cases

/// What a Go test asserts after a reconcile.
#[derive(Clone, Debug)]
pub enum Check {
    /// The run's first decision: its reason, exactly these nodes, and (when
    /// given) this many replacements.
    First(DisruptionReason, Vec<String>, Option<usize>),
    /// The node is in a decision, with one of these reasons and (when
    /// given) a decision of this many replacements.
    Removed(&'static str, Vec<DisruptionReason>, Option<usize>),
    /// The node is in no decision.
    Kept(&'static str),
    /// The node is in no decision and listed as blocked with a reason
    /// containing this text.
    Blocked(&'static str, &'static str),
    /// No decision at all.
    Nothing,
    /// This many decisions.
    Decisions(usize),
    /// This many nodes removed over all decisions, each decision of this
    /// reason.
    RemovedCount(usize, DisruptionReason),
    /// Every decision removes exactly one node.
    OneNodePerDecision,
    /// No decision launches a replacement.
    NoReplacements,
    /// In every NodePool whose name starts with the prefix, this many nodes
    /// removed.
    PerPool(&'static str, usize),
    /// Every node whose name starts with the prefix that is not removed is
    /// listed as blocked with a reason containing this text.
    RestBlocked(&'static str, &'static str),
}

/// One `ExpectSingletonReconciled`: the documents the cluster holds then,
/// the clock, what the Go test checks afterwards.
pub struct Step {
    pub docs: Vec<Value>,
    pub now: i64,
    pub checks: Vec<Check>,
}

pub struct Case {
    /// The Go `It` path under the file's `Describe`, verbatim.
    pub name: &'static str,
    pub steps: Vec<Step>,
    pub known_difference: Option<&'static str>,
}

/// The documents of a case: NodePools, nodes with their NodeClaims, pods,
/// anything else (DaemonSets, PDBs).
pub fn docs(nps: &[Np], nodes: &[Nc], pods: &[P], other: Vec<Value>) -> Vec<Value> {
    let mut out = vec![node_class()];
    out.extend(nps.iter().map(Np::doc));
    out.extend(nodes.iter().flat_map(Nc::docs));
    out.extend(pods.iter().map(P::doc));
    out.extend(other);
    out
}

/// One reconcile at [`NOW`].
pub fn one(name: &'static str, docs: Vec<Value>, checks: Vec<Check>) -> Case {
    Case {
        name,
        steps: vec![Step {
            docs,
            now: NOW,
            checks,
        }],
        known_difference: None,
    }
}

pub fn steps(name: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        steps,
        known_difference: None,
    }
}

impl Case {
    pub fn differs(mut self, why: &'static str) -> Self {
        self.known_difference = Some(why);
        self
    }
}

pub fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded("us-west-2").expect("embedded us-west-2 catalog"))
}

/// The documents as one YAML stream.
pub fn yaml(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(d).expect("yaml"));
    }
    out
}

/// `flotilla_input::load` of the documents, read as one source `name`.
pub fn load_docs(name: &str, docs: &[Value]) -> Result<ClusterState, String> {
    let text = yaml(docs);
    load(&[Source {
        name,
        bytes: text.as_bytes(),
    }])
    .map_err(|e| format!("load failed: {e}"))
}

/// `disrupt` over the documents at `now`.
pub fn run(docs: &[Value], now: i64) -> Result<Disruptions, String> {
    let state = load_docs("case.yaml", docs)?;
    let opts = DisruptOptions {
        now,
        ..DisruptOptions::default()
    };
    Ok(disrupt(&state, catalog(), &opts))
}

fn describe(d: &Disruptions) -> String {
    let mut out = String::new();
    for x in &d.decisions {
        out.push_str(&format!(
            "    decision {:?} pool {} nodes {:?} replacements {} moves {} ({})\n",
            x.reason,
            x.node_pool,
            x.nodes,
            x.replacements.len(),
            x.moves.len(),
            x.detail.as_deref().unwrap_or("")
        ));
    }
    for b in &d.blocked {
        out.push_str(&format!("    blocked {}: {}\n", b.node, b.reason));
    }
    for w in &d.warnings {
        out.push_str(&format!("    warning: {w}\n"));
    }
    out
}

fn check(d: &Disruptions, docs: &[Value], c: &Check) -> Result<(), String> {
    let removed: BTreeMap<&str, (DisruptionReason, usize)> = d
        .decisions
        .iter()
        .flat_map(|x| {
            x.nodes
                .iter()
                .map(move |n| (n.as_str(), (x.reason, x.replacements.len())))
        })
        .collect();
    let blocked = |n: &str| d.blocked.iter().find(|b| b.node == n);
    match c {
        Check::First(reason, nodes, repl) => {
            let Some(x) = d.decisions.first() else {
                return Err("no decision".into());
            };
            let want: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
            let have: BTreeSet<&str> = x.nodes.iter().map(String::as_str).collect();
            if x.reason != *reason || want != have {
                return Err(format!(
                    "first decision is {:?} of {:?}, expected {reason:?} of {want:?}",
                    x.reason, x.nodes
                ));
            }
            if let Some(r) = repl {
                if x.replacements.len() != *r {
                    return Err(format!(
                        "first decision has {} replacements, expected {r}",
                        x.replacements.len()
                    ));
                }
            }
        }
        Check::Removed(node, reasons, repl) => match removed.get(node) {
            None => return Err(format!("{node} is not removed")),
            Some((r, n)) => {
                if !reasons.contains(r) {
                    return Err(format!("{node} removed as {r:?}, expected {reasons:?}"));
                }
                if let Some(want) = repl {
                    if n != want {
                        return Err(format!(
                            "{node} removed with {n} replacements, expected {want}"
                        ));
                    }
                }
            }
        },
        Check::Kept(node) => {
            if let Some((r, _)) = removed.get(node) {
                return Err(format!("{node} removed as {r:?}, expected to stay"));
            }
        }
        Check::Blocked(node, text) => {
            if let Some((r, _)) = removed.get(node) {
                return Err(format!("{node} removed as {r:?}, expected blocked"));
            }
            match blocked(node) {
                Some(b) if b.reason.contains(text) => {}
                Some(b) => {
                    return Err(format!(
                        "{node} blocked by {:?}, expected {text:?}",
                        b.reason
                    ))
                }
                None => return Err(format!("{node} not listed as blocked")),
            }
        }
        Check::Nothing => {
            if !d.decisions.is_empty() {
                return Err(format!("{} decisions, expected none", d.decisions.len()));
            }
        }
        Check::Decisions(n) => {
            if d.decisions.len() != *n {
                return Err(format!("{} decisions, expected {n}", d.decisions.len()));
            }
        }
        Check::RemovedCount(n, reason) => {
            if removed.len() != *n {
                return Err(format!("{} nodes removed, expected {n}", removed.len()));
            }
            if let Some(x) = d.decisions.iter().find(|x| x.reason != *reason) {
                return Err(format!("a decision is {:?}, expected {reason:?}", x.reason));
            }
        }
        Check::NoReplacements => {
            if let Some(x) = d.decisions.iter().find(|x| !x.replacements.is_empty()) {
                return Err(format!(
                    "the decision over {:?} launches {} replacements",
                    x.nodes,
                    x.replacements.len()
                ));
            }
        }
        Check::OneNodePerDecision => {
            if let Some(x) = d.decisions.iter().find(|x| x.nodes.len() != 1) {
                return Err(format!("a decision removes {:?}", x.nodes));
            }
        }
        Check::PerPool(prefix, n) => {
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for doc in docs.iter().filter(|v| v["kind"] == "NodePool") {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                if name.starts_with(prefix) {
                    per.insert(name.to_string(), 0);
                }
            }
            for x in &d.decisions {
                if let Some(c) = per.get_mut(&x.node_pool) {
                    *c += x.nodes.len();
                }
            }
            if let Some((p, c)) = per.iter().find(|(_, c)| **c != *n) {
                return Err(format!("NodePool {p}: {c} nodes removed, expected {n}"));
            }
        }
        Check::RestBlocked(prefix, text) => {
            for doc in docs.iter().filter(|v| v["kind"] == "Node") {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                if !name.starts_with(prefix) || removed.contains_key(name) {
                    continue;
                }
                match blocked(name) {
                    Some(b) if b.reason.contains(text) => {}
                    Some(b) => {
                        return Err(format!(
                            "{name} blocked by {:?}, expected {text:?}",
                            b.reason
                        ))
                    }
                    None => return Err(format!("{name} neither removed nor blocked")),
                }
            }
        }
    }
    Ok(())
}

fn run_case(c: &Case) -> Result<(), String> {
    for (i, s) in c.steps.iter().enumerate() {
        let d = run(&s.docs, s.now)?;
        let errs: Vec<String> = s
            .checks
            .iter()
            .filter_map(|ch| check(&d, &s.docs, ch).err())
            .collect();
        if !errs.is_empty() {
            return Err(format!(
                "after reconcile {}: {}\n{}",
                i + 1,
                errs.join("; "),
                describe(&d)
            ));
        }
    }
    Ok(())
}

/// Runs the cases of one Go `Describe`/`Context`: every case without a
/// known difference must pass; the known differences are run and reported.
pub fn run_table(file: &str, cases: Vec<Case>) {
    let results = cases
        .iter()
        .map(|c| (c.name, c.known_difference, run_case(c)));
    run_cases(&format!("{file}: "), "cases", results);
}

/// Reports a table's results, each case (its name, its known difference,
/// what running it gave) labelled `prefix` and its name: every case
/// without a known difference must pass (else the test fails, counting the
/// failures among the table's `what`); the known differences are reported.
pub fn run_cases<N: std::fmt::Display>(
    prefix: &str,
    what: &str,
    results: impl IntoIterator<Item = (N, Option<&'static str>, Result<(), String>)>,
) {
    let mut failures = Vec::new();
    let mut count = 0;
    for (name, known_difference, result) in results {
        count += 1;
        let label = format!("{prefix}{name}");
        match (known_difference, result) {
            (None, Ok(())) => println!("ok: {label}"),
            (None, Err(e)) => failures.push(format!("  {label}: {e}")),
            (Some(d), Ok(())) => println!("KNOWN DIFFERENCE NOW PASSES: {label} (was: {d})"),
            (Some(d), Err(e)) => println!(
                "known difference: {label}: {d}\n    {}",
                e.replace('\n', "\n    ")
            ),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} {what} behave differently from Karpenter:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The `NOT_PORTED` list of a port: every name starts with `prefix` and
/// every reason is given; prints how many `what` are not ported.
pub fn check_not_ported(not_ported: &[(&str, &str)], prefix: &str, what: &str) {
    for (name, reason) in not_ported {
        assert!(!name.is_empty() && name.starts_with(prefix) && !reason.is_empty());
    }
    println!("{} {what} not ported", not_ported.len());
}

/// Node names as owned strings.
pub fn names(ns: &[&str]) -> Vec<String> {
    ns.iter().map(|s| s.to_string()).collect()
}
