//! Karpenter's disruption suite (candidates and budgets), ported as tables.
//!
//! Source: kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/suite_test.go` (every `It`). Each case is
//! what a Karpenter user would try: Kubernetes documents (Nodes with their
//! bound Pods, NodeClaims `karpenter.sh/v1`, NodePools with disruption
//! budgets, PodDisruptionBudgets, DaemonSets, volumes) written as YAML, read
//! by `flotilla_input::load` and decided by `flotilla_core::disruption::disrupt`
//! at a fixed `now` on the embedded us-west-2 catalog — what
//! `flotilla disrupt -f cluster.yaml --now ...` prints. The conventions are
//! those of `karpenter_topology.rs` and `karpenter_provisioning.rs`:
//!
//! * `test-zone-1/2/3` are `us-west-2a/b/c`; every NodePool is given
//!   `topology.kubernetes.io/zone In [us-west-2a, us-west-2b, us-west-2c]`;
//! * the fake instance types are real EC2 types: `mostExpensiveInstance`
//!   (its first offering: on-demand, `test-zone-1`) is an on-demand
//!   `m5.8xlarge` in us-west-2a, `leastExpensiveInstance` an on-demand
//!   `t3.nano` there; a node's `status.allocatable` is the Go test's (32 CPU,
//!   100 pods where it gives one; the type's otherwise);
//! * `test.NodeClaimAndNode` is a `NodeClaim` and its `Node` (same labels
//!   and annotations, the NodeClaim's `status.nodeName` and `providerID`);
//!   `ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated` is a Ready node
//!   labelled `karpenter.sh/registered` and `karpenter.sh/initialized` and a
//!   NodeClaim with `Initialized=True`; a node only reconciled (not
//!   initialized) is registered without the `initialized` label;
//! * `test.NodePool()` has the CRD's defaults: `WhenEmptyOrUnderutilized`,
//!   `consolidateAfter: 0s`, one budget of `nodes: 10%`; everything is
//!   created a minute before the decision (`NOW`), as on Karpenter's fake
//!   clock nothing has aged;
//! * Karpenter's state that is not in documents maps onto
//!   [`DisruptOptions`]: `cluster.MarkForDeletion` and a command in the
//!   orchestration queue are `disrupting`, `cluster.NominateNodeForPod` is
//!   `nominated`;
//! * `NewCandidate(..., GracefulDisruptionClass)` is reached through
//!   consolidation (an empty node goes `Empty`, a node with a pod on the
//!   dear `m5.8xlarge` goes `Underutilized`), `EventualDisruptionClass`
//!   through drift (the NodeClaim's `Drifted=True` condition), and
//!   `SimulateScheduling` of a candidate through drift as well. A candidate
//!   Karpenter accepts must be disrupted; one it refuses must be in no
//!   decision — and where Flotilla reports why (`blocked`), the reason must
//!   name what the Go error names (the pod, the PDB, the annotation);
//! * `BuildDisruptionBudgetMapping`'s number for a NodePool (the allowance
//!   less the nodes disrupting) is read as how many of the pool's empty
//!   nodes one run removes, and from the budget sentence of those it holds
//!   back (`... of its 10 nodes`). Where the Go test's `nodes: 100%` would
//!   leave every candidate free whatever is counted, the case uses a
//!   percentage whose mapping is smaller than the candidates (`10%` or
//!   `30%`: a node counted wrongly changes the count), said in the case;
//! * the metrics of the `Metrics` Describe are read from the decisions: a
//!   `decision="delete"` is a decision without replacements, `replace` one
//!   with replacements, `consolidation_type="multi"` one over several nodes.
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never
//! failed. Every other case must behave as in Karpenter.
//!
//! Tally: the Go file has 58 `It`s; 48 are ported (44 behave as in
//! Karpenter, 4 are known differences; 41 and 7 when first ported), 10 are
//! in [`NOT_PORTED`]. `singlenodeconsolidation_test.go` has 5 `It`s, all
//! in [`NOT_PORTED`]: they sort hand-made `Candidate` structs by
//! price / `RescheduleDisruptionCost` and track timed-out NodePools across
//! runs, controller internals without a decision to compare (Flotilla
//! orders consolidation candidates by the money each wastes and has no
//! timeouts). See the
//! list above [`NOT_PORTED`] for the known differences left.
//!
//! `cargo test -p flotilla-input --test karpenter_disruption_suite -- --nocapture`
//! prints each case's status.

mod karpenter_disruption_common;

use flotilla_core::disruption::{disrupt, DisruptOptions, Disruptions};
use flotilla_core::model::DisruptionReason;
use karpenter_disruption_common::{
    catalog, check_not_ported, load_docs, map, node_class, node_class_ref, pdb, req, run_cases,
    Drifted, Empty, Np, Underutilized, CT, DEAR, DO_NOT_DISRUPT as DND, ITYPE, NODEPOOL, NOW, Z1,
    ZONE, ZONES,
};
use serde_json::{json, Value};

/// The Go file.
const SUITE: &str = "suite_test.go";

// ---------------------------------------------------------------------------
// Vocabulary (beside the common one: `Z1` is Karpenter's `test-zone-1`,
// `DEAR` its `mostExpensiveInstance`, `NOW` the decision's time)

/// `leastExpensiveInstance`.
const LEAST: &str = "t3.nano";
/// When every object was created: a minute before [`NOW`].
const CREATED: &str = "2026-11-30T11:59:00Z";
/// A deletion timestamp (`ExpectDeletionTimestampSet`, `Client.Delete` of an
/// object with a finalizer).
const DELETED: &str = "2026-11-30T11:59:30Z";

// ---------------------------------------------------------------------------
// Documents

/// `test.NodePool(...)` named `default`, the CRD's defaults written out
/// (`WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`, `nodes: 10%`).
fn np() -> Np {
    karpenter_disruption_common::np("default")
        .req(req(ZONE, "In", &ZONES))
        .policy("WhenEmptyOrUnderutilized")
        .consolidate_after("0s")
        .budget("10%")
}

/// `test.NodeClaimAndNode(...)`: a NodeClaim `nc-<name>` and its Node
/// `<name>`.
#[derive(Clone)]
struct Nc {
    name: String,
    /// Labels of both (the NodePool, instance type, capacity type, zone).
    labels: Vec<(String, String)>,
    /// `status.allocatable`.
    allocatable: Vec<(&'static str, &'static str)>,
    /// Annotations of the NodeClaim (`NodeClaimLinkedNode` copies them).
    annotations: Vec<(&'static str, &'static str)>,
    /// Extra Node labels.
    node_labels: Vec<(String, String)>,
    /// `ExpectMakeNodesAndNodeClaimsInitialized...` (else only reconciled).
    initialized: bool,
    ready: bool,
    drifted: bool,
    consolidatable: bool,
    /// `InstanceTerminating=True`.
    terminating_condition: bool,
    claim_deleting: bool,
    node_deleting: bool,
    /// `spec.terminationGracePeriod`.
    grace: Option<&'static str>,
    expire_after: Option<&'static str>,
    /// Without a NodeClaim (`ExpectApplied(node)` only).
    no_claim: bool,
    /// Without a Node (`ExpectApplied(nodeClaim)` only).
    no_node: bool,
}

/// A NodeClaim and Node of `mostExpensiveInstance` in NodePool `default`,
/// 32 CPU and 100 pods allocatable, initialized and Ready.
fn nc(name: &str) -> Nc {
    Nc {
        name: name.to_string(),
        labels: vec![
            (NODEPOOL.into(), "default".into()),
            (ITYPE.into(), DEAR.into()),
            (CT.into(), "on-demand".into()),
            (ZONE.into(), Z1.into()),
        ],
        allocatable: vec![("cpu", "32"), ("memory", "128Gi"), ("pods", "100")],
        annotations: vec![],
        node_labels: vec![],
        initialized: true,
        ready: true,
        drifted: false,
        consolidatable: false,
        terminating_condition: false,
        claim_deleting: false,
        node_deleting: false,
        grace: None,
        expire_after: None,
        no_claim: false,
        no_node: false,
    }
}

impl Nc {
    fn itype(mut self, t: &str) -> Self {
        self.set_label(ITYPE, Some(t));
        self
    }
    fn set_label(&mut self, k: &str, v: Option<&str>) {
        self.labels.retain(|(key, _)| key != k);
        if let Some(v) = v {
            self.labels.push((k.to_string(), v.to_string()));
        }
    }
    fn without(mut self, k: &str) -> Self {
        self.set_label(k, None);
        self
    }
    fn node_label(mut self, k: &str, v: &str) -> Self {
        self.node_labels.push((k.to_string(), v.to_string()));
        self
    }
    fn annotate(mut self, k: &'static str, v: &'static str) -> Self {
        self.annotations.push((k, v));
        self
    }
    fn drifted(mut self) -> Self {
        self.drifted = true;
        self
    }
    fn consolidatable(mut self) -> Self {
        self.consolidatable = true;
        self
    }
    fn grace(mut self, g: &'static str) -> Self {
        self.grace = Some(g);
        self
    }
    fn expire_after(mut self, e: &'static str) -> Self {
        self.expire_after = Some(e);
        self
    }
    fn not_initialized(mut self) -> Self {
        self.initialized = false;
        self
    }
    fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }
    fn terminating_condition(mut self) -> Self {
        self.terminating_condition = true;
        self
    }
    fn claim_deleting(mut self) -> Self {
        self.claim_deleting = true;
        self
    }
    fn node_deleting(mut self) -> Self {
        self.node_deleting = true;
        self
    }
    fn no_claim(mut self) -> Self {
        self.no_claim = true;
        self
    }
    fn no_node(mut self) -> Self {
        self.no_node = true;
        self
    }

    fn provider_id(&self) -> String {
        format!("aws:///{Z1}/i-{}", self.name)
    }

    fn docs(&self) -> Vec<Value> {
        let labels: Vec<(&str, &str)> = self
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut out = Vec::new();
        if !self.no_claim {
            let mut conditions = vec![
                json!({ "type": "Launched", "status": "True", "lastTransitionTime": CREATED }),
                json!({ "type": "Registered", "status": "True", "lastTransitionTime": CREATED }),
            ];
            if self.initialized {
                conditions.push(
                    json!({ "type": "Initialized", "status": "True", "lastTransitionTime": CREATED }),
                );
            }
            if self.drifted {
                conditions.push(
                    json!({ "type": "Drifted", "status": "True", "lastTransitionTime": CREATED }),
                );
            }
            if self.consolidatable {
                conditions.push(json!({ "type": "Consolidatable", "status": "True", "lastTransitionTime": CREATED }));
            }
            if self.terminating_condition {
                conditions.push(json!({ "type": "InstanceTerminating", "status": "True", "lastTransitionTime": CREATED }));
            }
            let mut spec = json!({
                "nodeClassRef": node_class_ref(),
                "requirements": [],
            });
            if let Some(g) = self.grace {
                spec["terminationGracePeriod"] = json!(g);
            }
            if let Some(e) = self.expire_after {
                spec["expireAfter"] = json!(e);
            }
            let mut status = json!({
                "providerID": self.provider_id(),
                "allocatable": map(&self.allocatable),
                "capacity": map(&self.allocatable),
                "conditions": conditions,
            });
            if !self.no_node {
                status["nodeName"] = json!(self.name);
            }
            let mut c = json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": format!("nc-{}", self.name),
                    "creationTimestamp": CREATED,
                    "labels": map(&labels),
                    "annotations": map(&self.annotations),
                    "finalizers": ["karpenter.sh/termination"],
                },
                "spec": spec,
                "status": status,
            });
            if self.claim_deleting {
                c["metadata"]["deletionTimestamp"] = json!(DELETED);
            }
            out.push(c);
        }
        if !self.no_node {
            let mut node_labels = labels.clone();
            node_labels.push(("kubernetes.io/hostname", self.name.as_str()));
            node_labels.push(("kubernetes.io/os", "linux"));
            node_labels.push(("kubernetes.io/arch", "amd64"));
            node_labels.push(("karpenter.sh/registered", "true"));
            if self.initialized {
                node_labels.push(("karpenter.sh/initialized", "true"));
            }
            for (k, v) in &self.node_labels {
                node_labels.push((k.as_str(), v.as_str()));
            }
            let mut n = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": self.name,
                    "creationTimestamp": CREATED,
                    "labels": map(&node_labels),
                    "annotations": map(&self.annotations),
                    "finalizers": ["karpenter.sh/termination"],
                },
                "spec": { "providerID": self.provider_id() },
                "status": {
                    "allocatable": map(&self.allocatable),
                    "capacity": map(&self.allocatable),
                    "conditions": [{
                        "type": "Ready",
                        "status": if self.ready { "True" } else { "False" },
                        "lastTransitionTime": CREATED,
                    }],
                },
            });
            if self.node_deleting {
                n["metadata"]["deletionTimestamp"] = json!(DELETED);
            }
            out.push(n);
        }
        out
    }
}

/// `test.Pod(...)` in namespace `default`.
#[derive(Clone)]
struct P {
    name: String,
    labels: Vec<(&'static str, &'static str)>,
    annotations: Vec<(&'static str, &'static str)>,
    /// (kind, name) of the controller.
    owner: Option<(&'static str, String)>,
    node: Option<String>,
    requests: Vec<(&'static str, &'static str)>,
    node_selector: Vec<(String, String)>,
    phase: &'static str,
    terminating: bool,
    pvc: Option<&'static str>,
}

fn pod(name: &str) -> P {
    P {
        name: name.to_string(),
        labels: vec![],
        annotations: vec![],
        owner: None,
        node: None,
        requests: vec![],
        node_selector: vec![],
        phase: "Running",
        terminating: false,
        pvc: None,
    }
}

impl P {
    fn on(mut self, node: &str) -> Self {
        self.node = Some(node.to_string());
        self
    }
    fn dnd(mut self) -> Self {
        self.annotations.push((DND, "true"));
        self
    }
    fn labels(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.labels.extend_from_slice(kv);
        self
    }
    fn owner(mut self, kind: &'static str, name: &str) -> Self {
        self.owner = Some((kind, name.to_string()));
        self
    }
    fn requests(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.requests.extend_from_slice(kv);
        self
    }
    fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.node_selector.push((k.to_string(), v.to_string()));
        self
    }
    fn phase(mut self, p: &'static str) -> Self {
        self.phase = p;
        self
    }
    fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
    fn pvc(mut self, claim: &'static str) -> Self {
        self.pvc = Some(claim);
        self
    }
    fn doc(&self) -> Value {
        let mut d = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": "default",
                "creationTimestamp": CREATED,
                "labels": map(&self.labels),
                "annotations": map(&self.annotations),
            },
            "spec": {
                "containers": [{
                    "name": "app",
                    "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2",
                    "resources": { "requests": map(&self.requests) },
                }],
            },
            "status": { "phase": self.phase, "startTime": CREATED },
        });
        if let Some((kind, name)) = &self.owner {
            let api = if *kind == "Node" { "v1" } else { "apps/v1" };
            d["metadata"]["ownerReferences"] = json!([{
                "apiVersion": api, "kind": kind, "name": name,
                "uid": format!("uid-{name}"), "controller": true,
            }]);
        }
        if let Some(n) = &self.node {
            d["spec"]["nodeName"] = json!(n);
        }
        if !self.node_selector.is_empty() {
            let sel: Vec<(&str, &str)> = self
                .node_selector
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            d["spec"]["nodeSelector"] = map(&sel);
        }
        if self.terminating {
            d["metadata"]["deletionTimestamp"] = json!(DELETED);
        }
        if let Some(c) = self.pvc {
            d["spec"]["volumes"] =
                json!([{ "name": "data", "persistentVolumeClaim": { "claimName": c } }]);
        }
        d
    }
}

/// `test.PodDisruptionBudget(test.PDBOptions{Labels: {test: value},
/// MaxUnavailable: 0})`.
fn blocking_pdb(name: &str) -> Value {
    pdb(name, PDB_LABELS, 0)
}

/// `test.DaemonSet()` named `ds`.
fn daemon_set() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": "ds", "namespace": "default" },
        "spec": {
            "selector": { "matchLabels": { "app": "ds" } },
            "template": {
                "metadata": { "labels": { "app": "ds" } },
                "spec": { "containers": [{ "name": "ds", "image": "pause" }] },
            },
        },
    })
}

/// `podLabels := map[string]string{"test": "value"}`
const PDB_LABELS: &[(&str, &str)] = &[("test", "value")];

// ---------------------------------------------------------------------------
// Checks

enum Check {
    /// A decision with this reason over exactly these nodes, with this many
    /// replacements (`None`: any).
    Decided(DisruptionReason, Vec<String>, Option<usize>),
    /// The node is in no decision.
    Kept(String),
    /// The node is listed under `blocked`, the reason containing each
    /// string.
    Blocked(String, Vec<String>),
    /// The node is not listed under `blocked`.
    NotBlocked(String),
    /// Nodes removed for this reason, all decisions together.
    Removed(DisruptionReason, usize),
    /// Decisions in all.
    Decisions(usize),
    /// The pod (`default/<name>`) moves to a replacement of a decision.
    MovesToReplacement(String),
}

use Check::*;

fn decided(reason: DisruptionReason, nodes: &[&str], replacements: Option<usize>) -> Check {
    Decided(
        reason,
        nodes.iter().map(|s| s.to_string()).collect(),
        replacements,
    )
}

fn kept(node: &str) -> Check {
    Kept(node.to_string())
}

fn blocked(node: &str, words: &[&str]) -> Check {
    Blocked(
        node.to_string(),
        words.iter().map(|s| s.to_string()).collect(),
    )
}

fn not_blocked(node: &str) -> Check {
    NotBlocked(node.to_string())
}

fn check(out: &Disruptions, c: &Check) -> Result<(), String> {
    let in_decision = |n: &str| out.decisions.iter().any(|d| d.nodes.iter().any(|x| x == n));
    match c {
        Decided(reason, nodes, repl) => {
            let mut want = nodes.clone();
            want.sort();
            let found = out.decisions.iter().any(|d| {
                d.reason == *reason
                    && d.nodes == want
                    && repl.is_none_or(|r| d.replacements.len() == r)
            });
            if found {
                Ok(())
            } else {
                Err(format!(
                    "expected a {} decision over {want:?} with {repl:?} replacements",
                    reason.as_str()
                ))
            }
        }
        Kept(n) => {
            if in_decision(n) {
                Err(format!("expected {n} in no decision"))
            } else {
                Ok(())
            }
        }
        Blocked(n, words) => match out.blocked.iter().find(|b| &b.node == n) {
            None => Err(format!("expected {n} blocked ({words:?})")),
            Some(b) => match words.iter().find(|w| !b.reason.contains(w.as_str())) {
                Some(w) => Err(format!("{n} blocked without {w:?}: {}", b.reason)),
                None => Ok(()),
            },
        },
        NotBlocked(n) => match out.blocked.iter().find(|b| &b.node == n) {
            Some(b) => Err(format!("expected {n} not blocked: {}", b.reason)),
            None => Ok(()),
        },
        Removed(reason, k) => {
            let n: usize = out
                .decisions
                .iter()
                .filter(|d| d.reason == *reason)
                .map(|d| d.nodes.len())
                .sum();
            if n == *k {
                Ok(())
            } else {
                Err(format!(
                    "expected {k} nodes removed {}, got {n}",
                    reason.as_str()
                ))
            }
        }
        Decisions(k) => {
            if out.decisions.len() == *k {
                Ok(())
            } else {
                Err(format!(
                    "expected {k} decisions, got {}",
                    out.decisions.len()
                ))
            }
        }
        MovesToReplacement(p) => {
            let key = format!("default/{p}");
            let ok = out.decisions.iter().any(|d| {
                d.moves
                    .iter()
                    .any(|m| m.pod == key && d.replacements.iter().any(|r| r.name == m.to))
            });
            if ok {
                Ok(())
            } else {
                Err(format!("expected {key} to move to a replacement"))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Cases

struct Case {
    /// The `It` text, verbatim.
    name: &'static str,
    docs: Vec<Value>,
    /// `cluster.MarkForDeletion` / a command in the queue.
    disrupting: Vec<&'static str>,
    /// `cluster.NominateNodeForPod`.
    nominated: Vec<&'static str>,
    checks: Vec<Check>,
    /// What Flotilla does instead of Karpenter, when it does.
    known_difference: Option<&'static str>,
}

fn case(name: &'static str, docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Case {
    Case {
        name,
        docs: docs.into_iter().flatten().collect(),
        disrupting: vec![],
        nominated: vec![],
        checks,
        known_difference: None,
    }
}

impl Case {
    fn differs(mut self, what: &'static str) -> Self {
        self.known_difference = Some(what);
        self
    }
    fn disrupting(mut self, nodes: &[&'static str]) -> Self {
        self.disrupting.extend_from_slice(nodes);
        self
    }
    fn nominated(mut self, nodes: &[&'static str]) -> Self {
        self.nominated.extend_from_slice(nodes);
        self
    }
}

fn describe(out: &Disruptions) -> String {
    let mut s = String::new();
    for d in &out.decisions {
        s.push_str(&format!(
            "  decision {} {:?} replacements {} moves {:?}\n",
            d.reason.as_str(),
            d.nodes,
            d.replacements.len(),
            d.moves
                .iter()
                .map(|m| format!("{}->{}", m.pod, m.to))
                .collect::<Vec<_>>()
        ));
    }
    for b in &out.blocked {
        s.push_str(&format!("  blocked {}: {}\n", b.node, b.reason));
    }
    for w in &out.warnings {
        s.push_str(&format!("  warning {w}\n"));
    }
    s
}

fn run_case(c: &Case) -> Result<(), String> {
    let mut docs = vec![node_class()];
    docs.extend(c.docs.iter().cloned());
    let state = load_docs("cluster.yaml", &docs)?;
    let opts = DisruptOptions {
        now: NOW,
        disrupting: c
            .disrupting
            .iter()
            .map(|n| (n.to_string(), Underutilized))
            .collect(),
        nominated: c.nominated.iter().map(|n| n.to_string()).collect(),
        ..DisruptOptions::default()
    };
    let out = disrupt(&state, catalog(), &opts);
    let errs: Vec<String> = c
        .checks
        .iter()
        .filter_map(|ch| check(&out, ch).err())
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("{}\n{}", errs.join("; "), describe(&out)))
    }
}

/// Runs a Describe table: every case without a known difference must
/// pass; the known differences are run and reported.
fn run_table(context: &str, cases: Vec<Case>) {
    let results = cases
        .iter()
        .map(|c| (c.name, c.known_difference, run_case(c)));
    run_cases(
        &format!("{SUITE}: {context} / "),
        &format!("{context} cases"),
        results,
    );
}

fn n(i: usize) -> String {
    format!("node-{i}")
}

// ---------------------------------------------------------------------------
// Describe("Simulate Scheduling")

#[test]
fn simulate_scheduling() {
    // BeforeEach: consolidateAfter 0s, WhenEmptyOrUnderutilized.
    let cases = vec![
        {
            // Ten nodes; all but node-0 marked for deletion; a 2-CPU pod on
            // node-0 (3 CPU each: one such pod per node). Its simulation is
            // reached through drift (node-0's NodeClaim drifted), with a
            // 100% budget so the nine nodes marked for deletion leave room.
            let mut docs = vec![vec![np().consolidate_after("Never").budget("100%").doc()]];
            for i in 0..10 {
                let mut c = nc(&n(i));
                c.allocatable = vec![("cpu", "3"), ("memory", "128Gi"), ("pods", "100")];
                if i == 0 {
                    c = c.drifted();
                }
                docs.push(c.docs());
            }
            docs.push(vec![pod("pod")
                .requests(&[("cpu", "2"), ("memory", "100Mi")])
                .on("node-0")
                .doc()]);
            case(
                "should allow pods on deleting nodes to reschedule to uninitialized nodes",
                docs,
                vec![
                    decided(Drifted, &["node-0"], Some(1)),
                    MovesToReplacement("pod".into()),
                ],
            )
            .disrupting(&[
                "node-1", "node-2", "node-3", "node-4", "node-5", "node-6", "node-7", "node-8",
                "node-9",
            ])
        },
        {
            // Ten drifted nodes, each with the pod of its partition
            // (test-partition=i, NodePool requirement test-partition
            // Exists), budget 3: three replacements, then the budget.
            let pool = np().consolidate_after("Never").budget("3").req(json!({
                "key": "test-partition", "operator": "Exists",
            }));
            let mut docs = vec![vec![pool.doc()]];
            for i in 0..10 {
                let mut c = nc(&n(i))
                    .drifted()
                    .expire_after("5m")
                    .node_label("test-partition", &i.to_string());
                c.allocatable = vec![("cpu", "3"), ("memory", "128Gi"), ("pods", "100")];
                docs.push(c.docs());
                docs.push(vec![pod(&format!("pod-{i}"))
                    .requests(&[("cpu", "100m"), ("memory", "100Mi")])
                    .node_selector("test-partition", &i.to_string())
                    .on(&n(i))
                    .doc()]);
            }
            let mut checks = vec![Removed(Drifted, 3), Decisions(3)];
            // Oldest first; all were created together, so by name.
            for i in 0..3 {
                checks.push(decided(Drifted, &[&n(i)], Some(1)));
                checks.push(MovesToReplacement(format!("pod-{i}")));
            }
            for i in 3..10 {
                checks.push(blocked(&n(i), &["disruption budget", "nodes: 3"]));
            }
            case(
                "should allow multiple replace operations to happen successively",
                docs,
                checks,
            )
        },
        {
            let storage_class = json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": { "name": "local-path" },
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            });
            let pv = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": { "name": "local-pv" },
                "spec": {
                    "capacity": { "storage": "10Gi" },
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local-path",
                    "local": { "path": "/mnt/local" },
                    "claimRef": { "namespace": "default", "name": "local-claim" },
                    "nodeAffinity": { "required": { "nodeSelectorTerms": [{
                        "matchExpressions": [{
                            "key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"],
                        }],
                    }]}},
                },
                "status": { "phase": "Bound" },
            });
            let pvc = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": { "name": "local-claim", "namespace": "default" },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local-path",
                    "volumeName": "local-pv",
                    "resources": { "requests": { "storage": "10Gi" } },
                },
                "status": { "phase": "Bound" },
            });
            case(
                "can replace node with a local PV (ignoring hostname affinity)",
                vec![
                    vec![np().doc(), storage_class, pv, pvc],
                    nc("node-0").consolidatable().docs(),
                    vec![pod("pod")
                        .labels(&[("app", "test")])
                        .owner("StatefulSet", "ss")
                        .pvc("local-claim")
                        .on("node-0")
                        .doc()],
                ],
                vec![
                    decided(Underutilized, &["node-0"], Some(1)),
                    MovesToReplacement("pod".into()),
                ],
            )
        },
    ];
    run_table("Simulate Scheduling", cases);
}

// ---------------------------------------------------------------------------
// Describe("BuildDisruptionBudgetMapping")

/// BeforeEach: ten initialized NodeClaims and Nodes of
/// `mostExpensiveInstance` (all empty: one run removes as many as the
/// mapping allows) in a NodePool with `budget`.
fn ten(budget: &str, edit: impl Fn(usize, Nc) -> Nc) -> Vec<Vec<Value>> {
    let mut docs = vec![vec![np().budget(budget).doc()]];
    for i in 0..10 {
        docs.push(edit(i, nc(&n(i))).docs());
    }
    docs
}

#[test]
fn build_disruption_budget_mapping() {
    let cases = vec![
        {
            // 100% in Go (mapping 10); 10% here: 1 of 10 counted, 2 if the
            // unmanaged node were counted (10% of 11 rounds up to 2).
            let mut docs = ten("10%", |_, c| c);
            docs.push(
                nc("unmanaged")
                    .without(NODEPOOL)
                    .no_claim()
                    .docs(),
            );
            case(
                "should not consider nodes that are not managed as part of disruption count",
                docs,
                vec![
                    Removed(Empty, 1),
                    blocked("node-9", &["of its 10 nodes"]),
                    kept("unmanaged"),
                    not_blocked("unmanaged"),
                ],
            )
        },
        {
            // 10% as above: an uninitialized eleventh node would make it 2.
            let mut docs = ten("10%", |_, c| c);
            docs.push(nc("uninitialized").not_initialized().docs());
            case(
                "should not consider nodes that are not initialized as part of disruption count",
                docs,
                vec![
                    Removed(Empty, 1),
                    blocked("node-9", &["nodes: 10% of 10 = 1", "of its 10 nodes"]),
                    kept("uninitialized"),
                ],
            )
        },
        {
            let mut docs = ten("10%", |_, c| c);
            docs.push(
                nc("terminating")
                    .not_initialized()
                    .terminating_condition()
                    .docs(),
            );
            case(
                "should not consider nodes that have the terminating status condition as part of disruption count",
                docs,
                vec![
                    Removed(Empty, 1),
                    blocked("node-9", &["nodes: 10% of 10 = 1", "of its 10 nodes"]),
                    kept("terminating"),
                ],
            )
        },
        case(
            "should not return a negative disruption value",
            ten("10%", |_, c| c.claim_deleting().node_deleting()),
            vec![Decisions(0)],
        ),
        // 100% in Go (mapping 8); 30% here: 3 less the 2 disrupting = 1
        // (3 or 2 if either were not counted).
        case(
            "should consider nodes with a deletion timestamp set and MarkedForDeletion to the disruption count",
            ten("30%", |i, c| {
                if i == 0 {
                    c.claim_deleting().node_deleting()
                } else {
                    c
                }
            }),
            vec![
                Removed(Empty, 1),
                kept("node-0"),
                kept("node-1"),
                blocked("node-9", &["nodes: 30% of 10 = 3", "2 of its 10 nodes are disrupting"]),
            ],
        )
        .disrupting(&["node-1"]),
        case(
            "should consider not ready nodes to the disruption count",
            ten("30%", |i, c| if i < 2 { c.not_ready() } else { c }),
            vec![
                Removed(Empty, 1),
                kept("node-0"),
                kept("node-1"),
                blocked("node-9", &["nodes: 30% of 10 = 3", "2 of its 10 nodes are disrupting"]),
            ],
        ),
    ];
    run_table("BuildDisruptionBudgetMapping", cases);
}

// ---------------------------------------------------------------------------
// Describe("Candidate Filtering")

/// `nodeClaim, node` of `mostExpensiveInstance` named `node` in NodePool
/// `default` (CRD defaults: consolidateAfter 0s, 10%), plus `extra`.
fn one_node(c: Nc, extra: Vec<Value>) -> Vec<Vec<Value>> {
    vec![vec![np().doc()], c.docs(), extra]
}

fn one_node_pool(pool: Np, c: Nc, extra: Vec<Value>) -> Vec<Vec<Value>> {
    vec![vec![pool.doc()], c.docs(), extra]
}

const NODE: &str = "node";

/// Karpenter refuses the candidate: in no decision, and reported with
/// `words`.
fn refused(words: &[&str]) -> Vec<Check> {
    vec![kept(NODE), blocked(NODE, words)]
}

/// Karpenter refuses the candidate for a reason Flotilla does not report.
fn refused_silently() -> Vec<Check> {
    vec![kept(NODE), not_blocked(NODE)]
}

#[test]
fn candidate_filtering() {
    let dnd_pod = || pod("pod").dnd().on(NODE).doc();
    let pdb_pod = || pod("pod").labels(PDB_LABELS).on(NODE).doc();
    let cases = vec![
        case(
            "should not consider candidates that have do-not-disrupt pods scheduled and no terminationGracePeriod",
            one_node(nc(NODE), vec![dnd_pod()]),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should not consider candidates that have do-not-disrupt mirror pods scheduled",
            one_node(nc(NODE), vec![pod("pod").dnd().owner("Node", NODE).on(NODE).doc()]),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should not consider candidates that have do-not-disrupt daemonset pods scheduled",
            one_node(
                nc(NODE),
                vec![daemon_set(), pod("pod").dnd().owner("DaemonSet", "ds").on(NODE).doc()],
            ),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for eventual disruption",
            one_node(nc(NODE).grace("300s").drifted(), vec![dnd_pod()]),
            vec![decided(Drifted, &[NODE], None)],
        ),
        case(
            "should consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for eventual disruption",
            one_node(nc(NODE).grace("300s").drifted(), vec![pdb_pod(), blocking_pdb("pdb")]),
            vec![decided(Drifted, &[NODE], None)],
        ),
        case(
            "should not consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for graceful disruption",
            one_node(nc(NODE).grace("300s"), vec![dnd_pod()]),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should not consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for graceful disruption",
            one_node(nc(NODE).grace("300s"), vec![pdb_pod(), blocking_pdb("pdb")]),
            refused(&["PodDisruptionBudget default/pdb"]),
        ),
        case(
            "should not consider candidates that have do-not-disrupt pods scheduled without a terminationGracePeriod set for eventual disruption",
            one_node(nc(NODE).drifted(), vec![dnd_pod()]),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should not consider candidates that have PDB-blocked pods scheduled without a terminationGracePeriod set for eventual disruption",
            one_node(nc(NODE).drifted(), vec![pdb_pod(), blocking_pdb("pdb")]),
            refused(&["PodDisruptionBudget default/pdb"]),
        ),
        case(
            "should consider candidates that have do-not-disrupt terminating pods",
            one_node(nc(NODE), vec![pod("pod").dnd().terminating().on(NODE).doc()]),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should consider candidates that have do-not-disrupt terminal pods",
            one_node(
                nc(NODE),
                vec![
                    pod("succeeded").dnd().phase("Succeeded").on(NODE).doc(),
                    pod("failed").dnd().phase("Failed").on(NODE).doc(),
                ],
            ),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should not consider candidates that have do-not-disrupt on nodes",
            one_node(nc(NODE).annotate(DND, "true"), vec![]),
            refused(&[DND]),
        ),
        case(
            "should not consider candidates that have multiple PDBs on the same pod",
            one_node(nc(NODE), vec![pdb_pod(), blocking_pdb("pdb1"), blocking_pdb("pdb2")]),
            refused(&["more than one PodDisruptionBudget", "default/pdb1", "default/pdb2"]),
        ),
        case(
            "should not consider candidates that have fully blocking PDBs",
            one_node(nc(NODE), vec![pdb_pod(), blocking_pdb("pdb")]),
            refused(&["PodDisruptionBudget default/pdb"]),
        ),
        case(
            "should not consider candidates that have fully blocking PDBs on daemonset pods",
            one_node(
                nc(NODE),
                vec![
                    daemon_set(),
                    pod("pod").labels(PDB_LABELS).owner("DaemonSet", "ds").on(NODE).doc(),
                    blocking_pdb("pdb"),
                ],
            ),
            refused(&["PodDisruptionBudget default/pdb"]),
        )
        .differs("documented (docs/disruption.md, PodDisruptionBudgets): PDBs do not limit the DaemonSet pods a disruption leaves on the node; Karpenter's CanEvictPods counts every active pod not owned by the node, DaemonSet pods included, so the empty node is deleted here"),
        case(
            "should consider candidates that have fully blocking PDBs on mirror pods",
            one_node(
                nc(NODE),
                vec![pod("pod").labels(PDB_LABELS).owner("Node", NODE).on(NODE).doc(), blocking_pdb("pdb")],
            ),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should not consider candidates that have do-not-disrupt pods without a terminationGracePeriod set for graceful disruption",
            one_node(nc(NODE), vec![dnd_pod()]),
            refused(&["pod default/pod", DND]),
        ),
        case(
            "should not consider candidates that have fully blocking PDBs without a terminationGracePeriod set for graceful disruption",
            one_node(nc(NODE), vec![pdb_pod(), blocking_pdb("pdb")]),
            refused(&["PodDisruptionBudget default/pdb"]),
        ),
        case(
            "should consider candidates that have fully blocking PDBs on terminal pods",
            one_node(
                nc(NODE),
                vec![
                    pod("succeeded").labels(PDB_LABELS).phase("Succeeded").on(NODE).doc(),
                    pod("failed").labels(PDB_LABELS).phase("Failed").on(NODE).doc(),
                    blocking_pdb("pdb"),
                ],
            ),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should consider candidates that have fully blocking PDBs on terminating pods",
            one_node(
                nc(NODE),
                vec![pod("pod").labels(PDB_LABELS).terminating().on(NODE).doc(), blocking_pdb("pdb")],
            ),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should not consider candidates that has just a Node representation",
            one_node(nc(NODE).no_claim(), vec![]),
            refused_silently(),
        )
        .differs("documented (docs/disruption.md, Candidates): a node is a candidate when its karpenter.sh/nodepool label names a NodePool among the inputs, with or without a NodeClaim (documents often carry none); Karpenter needs the NodeClaim (\"node isn't managed by karpenter\")"),
        case(
            "should not consider candidate that has just a NodeClaim representation",
            one_node(nc(NODE).no_node(), vec![]),
            vec![Decisions(0), not_blocked(NODE)],
        ),
        case(
            "should not consider candidates that are nominated",
            one_node(nc(NODE), vec![]),
            refused_silently(),
        )
        .nominated(&[NODE]),
        case(
            "should not consider candidates that are deleting",
            one_node(nc(NODE).claim_deleting(), vec![]),
            refused_silently(),
        ),
        case(
            "should not consider candidates that are MarkedForDeletion",
            one_node(nc(NODE), vec![]),
            refused_silently(),
        )
        .disrupting(&[NODE]),
        case(
            "should not consider candidates that aren't yet initialized",
            one_node(nc(NODE).not_initialized(), vec![]),
            refused(&["not initialized"]),
        ),
        case(
            "should not consider candidates that are not owned by a NodePool (no karpenter.sh/nodepool label)",
            one_node(nc(NODE).without(NODEPOOL), vec![]),
            refused_silently(),
        ),
        case(
            "should not consider candidates that are have a non-existent NodePool",
            // The NodePool `default` is not among the documents.
            vec![nc(NODE).docs()],
            refused_silently(),
        ),
        case(
            "should consider candidates that do not have the karpenter.sh/capacity-type label",
            one_node(nc(NODE).without(CT), vec![]),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should consider candidates that do not have the topology.kubernetes.io/zone label",
            one_node(nc(NODE).without(ZONE), vec![]),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should consider candidates that do not have the node.kubernetes.io/instance-type label",
            one_node(nc(NODE).without(ITYPE), vec![]),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should consider candidates that have an instance type that cannot be resolved",
            // A type the catalog does not know.
            one_node(nc(NODE).itype("fake-unknown.xlarge"), vec![]),
            vec![decided(Empty, &[NODE], Some(0))],
        ),
        case(
            "should not consider candidates that are actively being processed in the queue",
            one_node_pool(np(), nc(NODE), vec![]),
            refused_silently(),
        )
        .disrupting(&[NODE]),
    ];
    run_table("Candidate Filtering", cases);
}

// ---------------------------------------------------------------------------
// Describe("Metrics")

/// BeforeEach: WhenEmptyOrUnderutilized, consolidateAfter 0s, `nodes:
/// 100%`; three Consolidatable NodeClaims of `leastExpensiveInstance` with
/// 32 CPU and 100 pods.
fn metrics_pool() -> Vec<Value> {
    vec![np().budget("100%").doc()]
}

fn least(name: &str) -> Nc {
    nc(name).itype(LEAST).consolidatable()
}

#[test]
fn metrics() {
    let rs_pod = |name: &str| {
        pod(name)
            .labels(&[("app", "test")])
            .owner("ReplicaSet", "rs")
    };
    let cases = vec![
        case(
            "should fire metrics for single node empty disruption",
            vec![metrics_pool(), least("node-0").docs()],
            vec![decided(Empty, &["node-0"], Some(0)), Decisions(1)],
        ),
        {
            // node-0 drifted; node-1's Consolidatable condition cleared.
            let mut n1 = least("node-1");
            n1.consolidatable = false;
            case(
                "should fire metrics for single node delete disruption",
                vec![
                    metrics_pool(),
                    least("node-0").drifted().docs(),
                    n1.docs(),
                    vec![
                        pod("pod-0").on("node-0").doc(),
                        pod("pod-1").on("node-0").doc(),
                        pod("pod-2").on("node-1").doc(),
                        pod("pod-3").on("node-1").doc(),
                    ],
                ],
                vec![decided(Drifted, &["node-0"], Some(0)), kept("node-1")],
            )
        },
        case(
            "should fire metrics for single node replace disruption",
            vec![
                metrics_pool(),
                least("node-0").drifted().docs(),
                (0..4).map(|i| pod(&format!("pod-{i}")).on("node-0").doc()).collect(),
            ],
            vec![decided(Drifted, &["node-0"], Some(1)), Decisions(1)],
        ),
        case(
            "should fire metrics for multi-node empty disruption",
            vec![
                metrics_pool(),
                least("node-0").docs(),
                least("node-1").docs(),
                least("node-2").docs(),
            ],
            vec![
                decided(Empty, &["node-0", "node-1", "node-2"], Some(0)),
                Decisions(1),
            ],
        ),
        case(
            "should fire metrics for multi-node delete disruption",
            vec![
                metrics_pool(),
                least("node-0").docs(),
                least("node-1").docs(),
                least("node-2").docs(),
                vec![
                    rs_pod("pod-0").on("node-0").doc(),
                    rs_pod("pod-1").on("node-1").doc(),
                    rs_pod("pod-2").on("node-2").doc(),
                    // pods[3] is applied but never bound: pending.
                    rs_pod("pod-3").doc(),
                ],
            ],
            vec![Removed(Underutilized, 2), Decisions(1)],
        )
        .differs("documented (docs/disruption.md, Underutilized): while pods are pending, Underutilized consolidation waits (the Go test leaves pods[3] unbound; Karpenter simulates it along)"),
        case(
            "should fire metrics for multi-node replace disruption",
            vec![
                metrics_pool(),
                nc("node-0").consolidatable().docs(),
                nc("node-1").consolidatable().docs(),
                nc("node-2").consolidatable().docs(),
                vec![
                    rs_pod("pod-0").on("node-0").doc(),
                    rs_pod("pod-1").on("node-1").doc(),
                    rs_pod("pod-2").on("node-2").doc(),
                    rs_pod("pod-3").on("node-2").doc(),
                ],
            ],
            vec![
                decided(Underutilized, &["node-0", "node-1", "node-2"], Some(1)),
                Decisions(1),
            ],
        )
        .differs("documented (docs/disruption.md, Underutilized and How it differs): nodes whose pods fit into the room the others leave are deleted outright (node-0 and node-2, their pods onto node-1), and a node that received pods is not removed in the same run; Karpenter's multi-node pass replaces all three with one cheaper node"),
    ];
    run_table("Metrics", cases);
}

#[test]
fn not_ported_cases_name_a_reason() {
    check_not_ported(NOT_PORTED, "", "It cases");
}

// ---------------------------------------------------------------------------
// Known differences left (4, each a documented choice, docs/disruption.md):
// * Candidate Filtering / fully blocking PDBs on daemonset pods: PDBs do not
//   limit the DaemonSet pods a disruption leaves on the node, so the empty
//   node goes as Empty;
// * Candidate Filtering / just a Node representation: a node is a candidate
//   by its karpenter.sh/nodepool label, with or without a NodeClaim;
// * Metrics / multi-node delete disruption: the Go test leaves a pod
//   pending, and Underutilized consolidation waits while pods are pending;
// * Metrics / multi-node replace disruption: two nodes are deleted onto the
//   third (delete first; a node that received pods is not removed in the
//   same run) where Karpenter replaces all three with one cheaper node.
//
// The `It`s not ported, with the reason (file: Describe / It).

const NOT_PORTED: &[(&str, &str)] = &[
    (
        "suite_test.go: Simulate Scheduling / should ensure that we do not duplicate capacity for disrupted nodes with provisioning",
        "a race between the disruption controller's hung NodeClaim Create and the provisioner; Flotilla's pipeline writes a decision's replacements before it marks the nodes, and a disruption run is one pure function",
    ),
    (
        "suite_test.go: Disruption Taints / should remove taints from NodeClaims that were left tainted from a previous disruption action",
        "the controller removing its karpenter.sh/disrupted taint after a restart (controller mechanics; the pipeline untaints abandoned decisions itself)",
    ),
    (
        "suite_test.go: Disruption Taints / should add and remove taints from NodeClaims that fail to disrupt",
        "the orchestration queue tainting and untainting nodes when a replacement fails (controller mechanics)",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have a standard disruptionCost for a pod with no priority or disruptionCost specified",
        "EvictionCost orders Karpenter's consolidation candidates; Flotilla orders them by the money each saves (docs/disruption.md: saving per disruption), no counterpart",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have a higher disruptionCost for a pod with a positive deletion disruptionCost",
        "EvictionCost (pod-deletion-cost) has no counterpart: candidates are ordered by saving",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have a lower disruptionCost for a pod with a positive deletion disruptionCost",
        "EvictionCost (pod-deletion-cost) has no counterpart: candidates are ordered by saving",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have higher costs for higher deletion costs",
        "EvictionCost (pod-deletion-cost) has no counterpart: candidates are ordered by saving",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have a higher disruptionCost for a pod with a higher priority",
        "EvictionCost (pod priority) has no counterpart: candidates are ordered by saving",
    ),
    (
        "suite_test.go: Pod Eviction Cost / should have a lower disruptionCost for a pod with a lower priority",
        "EvictionCost (pod priority) has no counterpart: candidates are ordered by saving",
    ),
    (
        "singlenodeconsolidation_test.go: SingleNodeConsolidation / Candidate Shuffling / should sort candidates by savings ratio descending",
        "SortCandidates over hand-made Candidate structs (price / RescheduleDisruptionCost); Flotilla orders candidates by waste (price less what their pods' capacity could cost), docs/disruption.md Underutilized",
    ),
    (
        "singlenodeconsolidation_test.go: SingleNodeConsolidation / Candidate Shuffling / should prioritize nodepools that timed out in previous runs",
        "PreviouslyUnseenNodePools: state kept across runs after a timeout; Flotilla has no timeouts (each run is a pure function)",
    ),
    (
        "singlenodeconsolidation_test.go: SingleNodeConsolidation / Candidate Shuffling / should sort candidates by savings ratio with different disruption costs",
        "SortCandidates with hand-set RescheduleDisruptionCost values (eviction cost); no counterpart, candidates are ordered by waste",
    ),
    (
        "singlenodeconsolidation_test.go: SingleNodeConsolidation / Candidate Shuffling / should reset timed out nodepools when all nodepools are evaluated",
        "PreviouslyUnseenNodePools bookkeeping across runs; no timeouts, no counterpart",
    ),
    (
        "singlenodeconsolidation_test.go: SingleNodeConsolidation / Candidate Shuffling / should mark nodepools as timed out when timeout occurs",
        "SingleNodeConsolidationTimeoutDuration; Flotilla has no timeouts (a run's simulations are bounded instead: MAX_SPLIT_ATTEMPTS, MAX_SINGLE_MISSES)",
    ),
    (
        "suite_test.go: Metrics / should stop multi-node consolidation after context deadline is reached",
        "multi-node consolidation's context timeout; Flotilla has no timeouts (docs/disruption.md: deterministic, bounded simulations instead)",
    ),
];
