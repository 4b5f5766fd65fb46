//! The disruption stage over the simulator, with a small cluster beside it
//! (nodes join for launched NodeClaims, a kube-scheduler binds pods first
//! fit, the agent applies and acknowledges actions and posts the cluster's
//! state): an emptied cluster scales down, an underutilized pair is
//! replaced by one cheaper node (replacement registered before any taint),
//! a failed replacement abandons, a refused drain abandons and untaints, a
//! redelivered run is a no-op, a spot interruption launches the
//! replacement at once, a changed EC2NodeClass drifts the nodes launched
//! from it (the NodeClaim records its hash at launch) and a drifted node is
//! tainted only once its replacement's node is Ready (nodes report a
//! `Ready` condition); and the disruption model test (module `model`):
//! random pod churn, runs, redeliveries and faults with the stage's
//! invariants checked after every step.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use flotilla_core::catalog::CapacityType;
use flotilla_ports::{Clock, Store};
use flotilla_service::disruption::{self, ClusterDisruptReport};
use flotilla_service::records::{DisruptionRecord, DisruptionState, NodeClaimState};
use flotilla_service::sweep::Ec2Notice;
use flotilla_service::{intake, keys};

/// The disruption schedule's period (EventBridge `rate(1 minute)`).
const PERIOD_SECS: i64 = 60;

#[derive(Debug, Clone)]
struct SimPod {
    name: String,
    cpu_m: i64,
    annotations: BTreeMap<String, String>,
    /// Its `app` label (what PodDisruptionBudgets select).
    app: String,
}

#[derive(Debug, Clone)]
struct SimNode {
    claim: String,
    instance: String,
    instance_type: String,
    zone: String,
    capacity_type: String,
    labels: BTreeMap<String, String>,
    cpu_m: i64,
    memory_mib: i64,
    taints: Vec<String>,
    unschedulable: bool,
    pods: Vec<SimPod>,
    created: i64,
    /// The node's `Ready` condition.
    ready: bool,
}

/// `maxUnavailable` of the PDB (of `pdbs`) selecting pods of `app`.
fn pdb_max(pdbs: &[serde_json::Value], app: &str) -> Option<u64> {
    pdbs.iter()
        .find(|d| d["spec"]["selector"]["matchLabels"]["app"].as_str() == Some(app))
        .and_then(|d| d["spec"]["maxUnavailable"].as_u64())
}

/// The simulated Eviction API: `pod` may be evicted while its PDB's
/// unavailable pods (pending: evicted, not yet running elsewhere) stay
/// within what it allows.
fn eviction_allowed(pdbs: &[serde_json::Value], pending: &[SimPod], pod: &SimPod) -> bool {
    let Some(max) = pdb_max(pdbs, &pod.app) else {
        return true;
    };
    let unavailable = pending.iter().filter(|p| p.app == pod.app).count();
    (unavailable as u64) < max
}

/// The cluster the agent watches.
struct Cluster {
    pool: serde_json::Value,
    class: serde_json::Value,
    nodes: BTreeMap<String, SimNode>,
    pending: Vec<SimPod>,
    /// PodDisruptionBudgets (`policy/v1` documents) the agent sends.
    pdbs: Vec<serde_json::Value>,
    /// Pods evicted through the (simulated) Eviction API, by name.
    evicted: BTreeSet<String>,
    /// Pods with `karpenter.sh/do-not-disrupt` that left with their node
    /// (the node, the pod): evicted by whatever removed it.
    lost_protected: Vec<(String, String)>,
    /// How the agent acknowledges drains: `done` or `failed` (a PDB kept
    /// the pods past the deadline).
    drain_outcome: &'static str,
    /// (action kind, node, simulated second) as the agent applied them.
    applied: Vec<(String, String, i64)>,
    /// Whether nodes join Ready.
    join_ready: bool,
}

fn pod(name: &str, cpu_m: i64) -> SimPod {
    SimPod {
        name: name.into(),
        cpu_m,
        annotations: BTreeMap::new(),
        app: "web".into(),
    }
}

/// Whether the agent's drain holds `pod` back at `now`: its
/// `karpenter.sh/do-not-disrupt` (the agent's `protected_at`; the pods here
/// started at `START_MS`). `i64::MIN`: whether it carries the annotation.
fn protected(pod: &SimPod, now: i64) -> bool {
    let until =
        flotilla_core::disruption::do_not_disrupt_until(&pod.annotations, Some(START_MS / 1000));
    until.is_some_and(|t| now < t)
}

fn rfc3339(secs: i64) -> String {
    // Days since the epoch → civil date (Howard Hinnant's algorithm).
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
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
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Cluster {
    /// A NodePool of on-demand `types` with `disruption` settings.
    fn new(types: &[&str], disruption: serde_json::Value) -> Cluster {
        let docs = node_pool_and_class();
        let mut pool = docs[0].clone();
        pool["spec"]["template"]["spec"]["requirements"] = serde_json::json!([
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}
        ]);
        pool["spec"]["disruption"] = disruption;
        Cluster {
            pool,
            class: docs[1].clone(),
            nodes: BTreeMap::new(),
            pending: Vec::new(),
            pdbs: Vec::new(),
            evicted: BTreeSet::new(),
            lost_protected: Vec::new(),
            drain_outcome: "done",
            applied: Vec::new(),
            join_ready: true,
        }
    }

    fn set_types(&mut self, types: &[&str], capacity_types: &[&str]) {
        self.pool["spec"]["template"]["spec"]["requirements"] = serde_json::json!([
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}
        ]);
    }

    fn documents(&self) -> Vec<serde_json::Value> {
        let mut docs = vec![self.pool.clone(), self.class.clone()];
        docs.extend(self.pdbs.iter().cloned());
        let pod_doc = |p: &SimPod, node: Option<&str>| {
            let mut spec = serde_json::json!({"containers": [{"name": "app", "image": "app",
                "resources": {"requests": {"cpu": format!("{}m", p.cpu_m), "memory": "512Mi"}}}]});
            let mut status = serde_json::json!({"phase": "Pending"});
            if let Some(n) = node {
                spec["nodeName"] = serde_json::json!(n);
                status =
                    serde_json::json!({"phase": "Running", "startTime": rfc3339(START_MS / 1000)});
            }
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": p.name, "namespace": "default", "annotations": p.annotations,
                    "labels": {"app": p.app}, "creationTimestamp": rfc3339(START_MS / 1000)},
                "spec": spec, "status": status
            })
        };
        for (name, n) in &self.nodes {
            let taints: Vec<serde_json::Value> = n
                .taints
                .iter()
                .map(|k| serde_json::json!({"key": k, "effect": "NoSchedule"}))
                .collect();
            docs.push(serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": n.labels, "creationTimestamp": rfc3339(n.created)},
                "spec": {"providerID": format!("aws:///{}/{}", n.zone, n.instance),
                    "unschedulable": n.unschedulable, "taints": taints},
                "status": {"allocatable": {"cpu": format!("{}m", n.cpu_m),
                    "memory": format!("{}Mi", n.memory_mib), "pods": "58"},
                    "conditions": [{"type": "Ready",
                        "status": if n.ready { "True" } else { "False" }}]}
            }));
            for p in &n.pods {
                docs.push(pod_doc(p, Some(name)));
            }
        }
        for p in &self.pending {
            docs.push(pod_doc(p, None));
        }
        docs
    }

    /// Nodes join for launched NodeClaims (named after their instance);
    /// nodes of instances that ended leave, their pods pending again.
    async fn join_and_leave(&mut self, p: &SimPorts) {
        let live: BTreeMap<String, flotilla_ports::Instance> = p
            .ec2
            .live_instances()
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| !live.contains_key(&n.instance))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some(n) = self.nodes.remove(&k) {
                for p in n.pods.iter().filter(|p| protected(p, i64::MIN)) {
                    self.lost_protected.push((k.clone(), p.name.clone()));
                }
                self.pending.extend(n.pods);
            }
        }
        for c in claims(p).await {
            let Some(inst) = c.instance.as_ref() else {
                continue;
            };
            if !c.state.is_live() || !live.contains_key(&inst.instance_id) {
                continue;
            }
            let name = format!("ip-{}", inst.instance_id);
            if self.nodes.contains_key(&name) {
                continue;
            }
            let info = &p
                .ec2
                .catalog()
                .get(&inst.instance_type)
                .expect("launched type in the catalog")
                .info;
            let mut labels = c.plan.labels.clone();
            for (k, v) in [
                ("kubernetes.io/hostname", name.as_str()),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("node.kubernetes.io/instance-type", &inst.instance_type),
                ("topology.kubernetes.io/zone", &inst.zone),
                ("karpenter.sh/capacity-type", &inst.capacity_type),
                ("karpenter.sh/nodepool", &c.plan.node_pool),
            ] {
                labels.insert(k.to_string(), v.to_string());
            }
            let vcpu = i64::from(info.vcpu);
            self.nodes.insert(
                name,
                SimNode {
                    claim: c.name.clone(),
                    instance: inst.instance_id.clone(),
                    instance_type: inst.instance_type.clone(),
                    zone: inst.zone.clone(),
                    capacity_type: inst.capacity_type.clone(),
                    labels,
                    cpu_m: vcpu * 1000
                        - flotilla_core::allocatable::kube_reserved_cpu_millis(info.vcpu),
                    memory_mib: i64::try_from(info.memory_mib).unwrap_or(0) * 8 / 10,
                    taints: vec![],
                    unschedulable: false,
                    pods: vec![],
                    created: p.clock.now_secs(),
                    ready: self.join_ready,
                },
            );
        }
    }

    /// The kube-scheduler: pending pods first fit onto schedulable,
    /// untainted nodes with room, in name order.
    fn bind(&mut self) {
        let mut left = Vec::new();
        for pod in std::mem::take(&mut self.pending) {
            let slot = self.nodes.values_mut().find(|n| {
                let used: i64 = n.pods.iter().map(|p| p.cpu_m).sum();
                !n.unschedulable && n.taints.is_empty() && used + pod.cpu_m <= n.cpu_m
            });
            match slot {
                Some(n) => n.pods.push(pod),
                None => left.push(pod),
            }
        }
        self.pending = left;
        // Running again: no longer unavailable.
        self.evicted
            .retain(|n| self.pending.iter().any(|p| &p.name == n));
    }

    /// The agent: apply and acknowledge the actions for its nodes.
    async fn act(&mut self, p: &SimPorts) {
        let view = try_view(p, CLUSTER).await.expect("view");
        let mut acks = Vec::new();
        let now = p.clock.now_secs();
        for a in &view.actions {
            let (Some(id), Some(kind), Some(target)) =
                (a["id"].as_str(), a["kind"].as_str(), a["node"].as_str())
            else {
                continue;
            };
            let Some(node) = self.nodes.get_mut(target) else {
                continue;
            };
            let mut outcome = "done";
            match kind {
                "taint" => {
                    if !node.taints.iter().any(|t| t == "karpenter.sh/disrupted") {
                        node.taints.push("karpenter.sh/disrupted".into());
                    }
                }
                "untaint" => {
                    node.taints.retain(|t| t != "karpenter.sh/disrupted");
                    node.unschedulable = false;
                }
                "cordon" => node.unschedulable = true,
                "drain" => {
                    node.unschedulable = true;
                    if self.drain_outcome == "failed" {
                        outcome = "failed";
                    } else {
                        // As the agent's drain (`plan.rs`): pods with
                        // do-not-disrupt are never evicted, only waited
                        // for until the deadline (then the drain failed).
                        // Each eviction goes through the Eviction API,
                        // which answers 429 while the pod's PDB has all
                        // the pods it allows unavailable; the agent
                        // (`apply.rs`, `Eviction::Blocked`) tries again
                        // next round, until the deadline.
                        let (kept, evict): (Vec<SimPod>, Vec<SimPod>) =
                            std::mem::take(&mut node.pods)
                                .into_iter()
                                .partition(|p| protected(p, now));
                        node.pods = kept;
                        for pod in evict {
                            if eviction_allowed(&self.pdbs, &self.pending, &pod) {
                                self.evicted.insert(pod.name.clone());
                                self.pending.push(pod);
                            } else {
                                node.pods.push(pod);
                            }
                        }
                        if !node.pods.is_empty() {
                            if now < a["deadline"].as_i64().unwrap_or(i64::MAX) {
                                continue; // not acknowledged: looked at again
                            }
                            outcome = "failed";
                        }
                    }
                }
                _ => continue,
            }
            self.applied
                .push((kind.to_string(), target.to_string(), now));
            acks.push(serde_json::json!({"id": id, "outcome": outcome}));
        }
        if !acks.is_empty() {
            let body = serde_json::json!({"acks": acks}).to_string();
            intake::acknowledge(
                &p.store,
                &p.clock,
                &p.access,
                &agent(),
                CLUSTER,
                body.as_bytes(),
            )
            .await
            .expect("acks");
        }
        self.bind();
    }

    /// The agent posts the cluster (a batch when pods are pending, else a
    /// heartbeat, which intake stores as the cluster's state).
    async fn post(&self, p: &SimPorts) {
        post(p, &batch(self.documents())).await;
        drain(p, 1).await;
    }

    /// Launch and join for the pending pods.
    async fn settle_pending(&mut self, p: &SimPorts) {
        for _ in 0..4 {
            if self.pending.is_empty() {
                return;
            }
            self.post(p).await;
            self.join_and_leave(p).await;
            self.bind();
        }
    }

    fn price(&self, p: &SimPorts) -> f64 {
        self.nodes
            .values()
            .map(|n| {
                p.ec2
                    .catalog()
                    .get(&n.instance_type)
                    .and_then(|e| {
                        e.offerings.iter().find(|o| {
                            o.zone == n.zone && o.capacity_type.as_str() == n.capacity_type
                        })
                    })
                    .map_or(0.0, |o| o.price)
            })
            .sum()
    }
}

async fn run(p: &SimPorts) -> ClusterDisruptReport {
    let r = disruption::disrupt(&p.store, &p.ec2, &p.bus, &p.clock, &p.config)
        .await
        .expect("disruption run");
    let mine = r
        .clusters
        .into_iter()
        .find(|c| c.cluster_id == CLUSTER)
        .expect("the cluster is registered");
    assert!(mine.errors.is_empty(), "{:?}", mine.errors);
    mine
}

async fn decisions(p: &SimPorts) -> Vec<DisruptionRecord> {
    disruption::decisions(&p.store, CLUSTER, p.clock.now_secs())
        .await
        .expect("decisions")
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// One minute of the world: time passes, nodes join and leave, the agent
/// acts and posts, events are delivered, the disruption stage runs, its
/// events are delivered.
async fn minute(p: &SimPorts, c: &mut Cluster) -> ClusterDisruptReport {
    p.clock.advance_secs(PERIOD_SECS);
    c.join_and_leave(p).await;
    c.act(p).await;
    c.post(p).await;
    let r = run(p).await;
    drain(p, 1).await;
    r
}

#[tokio::test]
async fn an_emptied_cluster_scales_down_within_consolidate_after_and_one_period() {
    let p = world();
    let consolidate_after = 120;
    let mut c = Cluster::new(
        &["m5.large", "m5.xlarge"],
        serde_json::json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": format!("{consolidate_after}s")}),
    );
    c.pending = (0..2).map(|i| pod(&format!("web-{i}"), 1500)).collect();
    c.settle_pending(&p).await;
    assert!(c.pending.is_empty(), "pods bound: {:?}", c.pending);
    let launched = c.nodes.len();
    assert!(launched >= 1);
    c.post(&p).await;
    // Nothing is empty: nothing happens, however long.
    for _ in 0..4 {
        let r = minute(&p, &mut c).await;
        assert!(r.started.is_empty(), "{r:?}");
    }
    // The deployment scales to zero; the agent posts the emptied cluster.
    for n in c.nodes.values_mut() {
        n.pods.clear();
    }
    p.clock.advance_secs(7); // not on a period boundary
    c.post(&p).await;
    let emptied_at = p.clock.now_secs();
    let mut decided_at = None;
    let mut gone_at = None;
    for _ in 0..10 {
        let r = minute(&p, &mut c).await;
        if !r.started.is_empty() && decided_at.is_none() {
            decided_at = Some(p.clock.now_secs());
            assert_eq!(r.tainted.len(), launched, "{r:?}");
            assert_eq!(r.drained.len(), launched, "{r:?}");
        }
        if p.ec2.live_instances().is_empty() {
            gone_at = Some(p.clock.now_secs());
            break;
        }
    }
    let decided = decided_at.expect("an Empty decision") - emptied_at;
    let gone = gone_at.expect("the instances terminated") - emptied_at;
    eprintln!(
        "emptied cluster: Empty decision (taint + drain) {decided} s after the post, instances terminated {gone} s after (consolidateAfter {consolidate_after} s, period {PERIOD_SECS} s)"
    );
    assert!(
        decided <= consolidate_after + PERIOD_SECS,
        "decided after {decided} s"
    );
    // Terminated at the first run after the agent acknowledged the drain.
    assert!(
        gone <= consolidate_after + 2 * PERIOD_SECS,
        "terminated after {gone} s"
    );
    assert!(claims_in(&p, NodeClaimState::Deleted).await.len() >= launched);
    let done = decisions(&p).await;
    assert!(
        done.iter().all(|d| d.state == DisruptionState::Done),
        "{done:?}"
    );
    // Nothing left to do: later runs start nothing.
    for _ in 0..3 {
        assert!(minute(&p, &mut c).await.started.is_empty());
    }
}

/// Two r5.xlarge, each with a pod too big to join the other: a c5.2xlarge
/// (allowed once the pool widens) carries both for less.
async fn underutilized_pair(p: &SimPorts) -> Cluster {
    let mut c = Cluster::new(
        &["r5.xlarge"],
        serde_json::json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
            "budgets": [{"nodes": "100%"}]}),
    );
    c.pending = vec![pod("a", 2500)];
    c.settle_pending(p).await;
    c.pending = vec![pod("b", 2500)];
    c.settle_pending(p).await;
    assert_eq!(c.nodes.len(), 2, "two nodes: {:?}", c.nodes.keys());
    assert!(c.nodes.values().all(|n| n.instance_type == "r5.xlarge"));
    c.set_types(&["r5.xlarge", "c5.2xlarge"], &["on-demand"]);
    c
}

#[tokio::test]
async fn an_underutilized_pair_is_replaced_by_one_cheaper_node_replacement_first() {
    let p = world();
    let mut c = underutilized_pair(&p).await;
    let before = c.price(&p);
    let old: Vec<String> = c.nodes.keys().cloned().collect();
    let mut started = None;
    for _ in 0..12 {
        let r = minute(&p, &mut c).await;
        if !r.started.is_empty() {
            started.get_or_insert(r);
        }
        if old.iter().all(|n| !c.nodes.contains_key(n)) && c.pending.is_empty() {
            break;
        }
    }
    let started = started.expect("a decision");
    assert_eq!(started.replacements_launched.len(), 1, "{started:?}");
    let d = decisions(&p).await;
    assert_eq!(d.len(), 1, "{d:?}");
    let d = &d[0];
    assert_eq!(d.state, DisruptionState::Done, "{d:?}");
    assert!(d.price_after < d.price_before, "{d:?}");
    let mut nodes: Vec<String> = d.node_names().map(str::to_string).collect();
    nodes.sort();
    assert_eq!(nodes, old);
    // Replace, then drain: no taint or drain before the replacement's node
    // joined and its NodeClaim registered.
    let replacement = &d.replacement_names[0];
    let rec = claims(&p)
        .await
        .into_iter()
        .find(|r| &r.name == replacement)
        .expect("replacement record");
    assert_eq!(rec.state, NodeClaimState::Registered);
    let joined = c
        .nodes
        .values()
        .find(|n| &n.claim == replacement)
        .map(|n| n.created)
        .expect("the replacement's node");
    let first_disruptive = c
        .applied
        .iter()
        .filter(|(k, n, _)| (k == "taint" || k == "drain") && old.contains(n))
        .map(|(_, _, t)| *t)
        .min()
        .expect("taint and drain applied");
    assert!(
        first_disruptive > joined,
        "tainted at {first_disruptive}, replacement joined at {joined}"
    );
    // The pods moved to the replacement; the cluster costs less.
    assert_eq!(c.nodes.len(), 1);
    assert!(c.pending.is_empty());
    let after = c.price(&p);
    assert!(after < before, "{after} !< {before}");
    assert_eq!(p.ec2.live_instances().len(), 1);
    // The old NodeClaims ended.
    for n in &d.nodes {
        let r = claims(&p)
            .await
            .into_iter()
            .find(|r| r.name == n.node_claim)
            .expect("record");
        assert_eq!(r.state, NodeClaimState::Deleted);
    }
}

#[tokio::test]
async fn a_failed_replacement_abandons_without_touching_the_old_nodes() {
    let p = world();
    let mut c = underutilized_pair(&p).await;
    for z in ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"] {
        p.ec2
            .set_capacity("c5.2xlarge", z, CapacityType::OnDemand, 0);
    }
    let old: Vec<String> = c.nodes.keys().cloned().collect();
    let mut abandoned = Vec::new();
    for _ in 0..4 {
        let r = minute(&p, &mut c).await;
        abandoned.extend(r.abandoned);
        if !abandoned.is_empty() {
            break;
        }
    }
    assert_eq!(abandoned.len(), 1, "the decision is abandoned");
    let d = decisions(&p).await;
    let d = d.iter().find(|d| d.id == abandoned[0]).expect("decision");
    assert_eq!(d.state, DisruptionState::Abandoned);
    assert!(!d.tainted, "never tainted");
    assert!(
        d.outcome.as_deref().unwrap_or("").contains("replacement"),
        "{d:?}"
    );
    // The old nodes serve on, untouched.
    for n in &old {
        assert!(c.nodes.contains_key(n), "{n} gone");
        assert!(c.nodes[n].taints.is_empty() && !c.nodes[n].unschedulable);
    }
    assert!(c
        .applied
        .iter()
        .all(|(k, n, _)| !old.contains(n) || k == "untaint"));
    // Its markers are released: the nodes may be disrupted again later.
    let markers = p
        .store
        .dump()
        .into_iter()
        .filter(|i| i.key.sk.starts_with(keys::DISRUPTING_PREFIX))
        .map(|i| {
            (
                i.key.sk.clone(),
                String::from_utf8_lossy(&i.body).to_string(),
            )
        })
        .collect::<Vec<_>>();
    assert!(markers.is_empty(), "{markers:?} {:?}", decisions(&p).await);
}

#[tokio::test]
async fn a_refused_drain_abandons_and_untaints() {
    let p = world();
    let mut c = underutilized_pair(&p).await;
    c.drain_outcome = "failed";
    let old: Vec<String> = c.nodes.keys().cloned().collect();
    let mut abandoned = Vec::new();
    let mut untainted = Vec::new();
    for _ in 0..12 {
        let r = minute(&p, &mut c).await;
        abandoned.extend(r.abandoned);
        untainted.extend(r.untainted);
        if !abandoned.is_empty() {
            break;
        }
    }
    assert_eq!(abandoned.len(), 1, "abandoned");
    untainted.sort();
    assert_eq!(untainted, old);
    // The agent applies the untaint: back in service, still running.
    minute(&p, &mut c).await;
    for n in &old {
        let node = c.nodes.get(n).expect("still there");
        assert!(node.taints.is_empty() && !node.unschedulable, "{node:?}");
    }
    assert_eq!(
        p.ec2.live_instances().len(),
        3,
        "two old nodes and the replacement"
    );
}

#[tokio::test]
async fn a_redelivered_or_repeated_run_writes_nothing_twice() {
    let p = world();
    let mut c = underutilized_pair(&p).await;
    p.clock.advance_secs(PERIOD_SECS);
    c.join_and_leave(&p).await;
    c.post(&p).await;
    let first = run(&p).await;
    assert_eq!(first.started.len(), 1, "{first:?}");
    let store = p.store.dump();
    let events = p.bus.len();
    // The same run again (redelivered), at the same instant.
    let again = run(&p).await;
    assert!(
        again.started.is_empty() && again.replacements_launched.is_empty(),
        "{again:?}"
    );
    assert_eq!(p.store.dump(), store, "a redelivered run changed the table");
    assert_eq!(p.bus.len(), events, "a redelivered run put events");
    // Two runs at once: still one decision, one replacement.
    p.clock.advance_secs(1);
    let (a, b) = tokio::join!(run(&p), run(&p));
    assert!(a.started.is_empty() && b.started.is_empty());
    drain(&p, 2).await;
    assert_eq!(decisions(&p).await.len(), 1);
    let replacements = claims(&p)
        .await
        .into_iter()
        .filter(|r| !c.nodes.values().any(|n| n.claim == r.name))
        .count();
    assert_eq!(replacements, 1);
    assert_eq!(p.ec2.live_instances().len(), 3);
}

#[tokio::test]
async fn a_spot_interruption_launches_the_replacement_at_once() {
    let p = world();
    let mut c = Cluster::new(
        &["m5.large"],
        serde_json::json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h"}),
    );
    c.set_types(
        &["m5.large", "m5.xlarge", "c5.large", "c5.xlarge"],
        &["spot"],
    );
    c.pending = vec![pod("a", 1000)];
    c.settle_pending(&p).await;
    assert_eq!(c.nodes.len(), 1);
    let (node, victim) = c
        .nodes
        .iter()
        .map(|(k, n)| (k.clone(), n.instance.clone()))
        .next()
        .expect("node");
    c.post(&p).await;
    let notice = Ec2Notice::SpotInterruption {
        instance_id: victim.clone(),
    };
    let first = notice_sweep(&p, &notice).await.expect("notice");
    assert_eq!(first.actions, 2, "cordon and drain");
    // EventBridge delivers it again, a little later: nothing twice.
    p.clock.advance_secs(3);
    let again = notice_sweep(&p, &notice).await.expect("notice");
    assert_eq!(again.actions, 0, "{again:?}");
    let r = run(&p).await;
    assert_eq!(r.started.len(), 1, "{r:?}");
    assert_eq!(r.replacements_launched.len(), 1, "{r:?}");
    assert_eq!(r.tainted, vec![node.clone()], "forceful: tainted at once");
    assert_eq!(r.drained, vec![node.clone()]);
    let d = decisions(&p).await;
    assert_eq!(
        d[0].reason,
        flotilla_core::model::DisruptionReason::Interrupted
    );
    drain(&p, 1).await;
    // The replacement is launching before EC2 reclaims the instance.
    let replacement = &d[0].replacement_names[0];
    let rec = claims(&p)
        .await
        .into_iter()
        .find(|r| &r.name == replacement)
        .expect("replacement");
    assert_eq!(rec.state, NodeClaimState::Launched);
    // EC2 reclaims it; the pod lands on the replacement.
    p.ec2.interrupt_spot(&victim);
    for _ in 0..3 {
        minute(&p, &mut c).await;
    }
    assert!(!c.nodes.contains_key(&node));
    assert!(c.pending.is_empty(), "{:?}", c.pending);
    assert!(c.nodes.values().any(|n| &n.claim == replacement));
    let d = decisions(&p).await;
    assert_eq!(d[0].state, DisruptionState::Done, "{d:?}");
    let item = p.store.peek(&keys::interrupted(CLUSTER, &rec.name));
    assert!(item.is_none(), "no note for the replacement");
}

async fn notice_sweep(
    p: &SimPorts,
    notice: &Ec2Notice,
) -> Result<flotilla_service::sweep::SweepReport, flotilla_service::ServiceError> {
    flotilla_service::sweep::on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, notice)
        .await
}

// ---------------------------------------------------------------------------
// The disruption model test: random sequences of pod churn, disruption runs
// (one at a time, or two at once with every event delivered twice), clock
// jumps past the state's freshness, sweeps, drains the agent refuses,
// replacement capacity running dry and do-not-disrupt pods, over the
// cluster above. After every step: no pod lost or duplicated, the budget
// (`nodes: "1"`) never exceeded by decisions in flight, no graceful decision
// started on a node holding a do-not-disrupt pod, no node of a graceful
// decision terminated before every replacement of it joined. After the run
// settles: every pod bound, no decision stuck, no instance without a live
// NodeClaim (no leak). `PROPTEST_CASES` sets the number of cases.

// Drift and readiness: a change of the EC2NodeClass drifts the nodes the
// pipeline launched (the NodeClaim records its hash at launch), and the
// drifted node is tainted and drained only once its replacement's node is
// Ready.

/// The NodeClaims of the world, by name.
async fn claim(p: &SimPorts, name: &str) -> flotilla_service::records::NodeClaimRecord {
    claims(p)
        .await
        .into_iter()
        .find(|r| r.name == name)
        .expect("NodeClaim record")
}

/// A cluster of one node launched by the pipeline for one pod, with an
/// EC2NodeClass whose spec the test then changes.
async fn one_node(p: &SimPorts) -> Cluster {
    let mut c = Cluster::new(
        &["m5.large", "m5.xlarge"],
        serde_json::json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h",
            "budgets": [{"nodes": "100%"}]}),
    );
    c.pending = vec![pod("web-0", 1500)];
    c.settle_pending(p).await;
    assert!(c.pending.is_empty(), "pod bound: {:?}", c.pending);
    assert_eq!(c.nodes.len(), 1);
    c
}

#[tokio::test]
async fn a_changed_ec2nodeclass_drifts_the_nodes_launched_from_it() {
    let p = world();
    let mut c = one_node(&p).await;
    let old = c.nodes.values().next().expect("node").claim.clone();
    let rec = claim(&p, &old).await;
    assert!(rec.nodeclass_hash.is_some(), "{rec:?}");
    assert!(rec.nodepool_hash.is_some(), "{rec:?}");
    // Unchanged: nothing drifts.
    for _ in 0..3 {
        let r = minute(&p, &mut c).await;
        assert!(r.started.is_empty(), "{r:?}");
    }
    // The EC2NodeClass changes (its tags are part of its hash).
    c.class["spec"]["tags"] = serde_json::json!({"team": "payments"});
    let r = minute(&p, &mut c).await;
    assert_eq!(r.started.len(), 1, "{r:?}");
    let d = decisions(&p).await;
    assert_eq!(d[0].reason.as_str(), "Drifted", "{d:?}");
    assert_eq!(d[0].node_names().collect::<Vec<_>>().len(), 1);
    // The replacement records the class's new hash.
    let replacement = claim(&p, &d[0].replacement_names[0]).await;
    assert_ne!(replacement.nodeclass_hash, rec.nodeclass_hash);
    assert!(replacement.nodeclass_hash.is_some());
}

#[tokio::test]
async fn old_nodes_are_tainted_only_once_the_replacement_is_ready() {
    let p = world();
    let mut c = one_node(&p).await;
    let old_node = c.nodes.keys().next().expect("node").clone();
    c.class["spec"]["tags"] = serde_json::json!({"team": "payments"});
    c.join_ready = false;
    let mut id = None;
    let mut joined_not_ready = 0;
    for _ in 0..6 {
        let r = minute(&p, &mut c).await;
        if let Some(s) = r.started.first() {
            id = Some(s.clone());
        }
        let replacement_joined = c.nodes.keys().any(|n| n != &old_node);
        if replacement_joined {
            joined_not_ready += 1;
        }
        assert!(
            !c.applied
                .iter()
                .any(|(k, n, _)| k == "taint" && n == &old_node),
            "tainted while the replacement is NotReady: {:?}",
            c.applied
        );
    }
    let id = id.expect("a Drifted decision");
    assert!(joined_not_ready >= 2, "the replacement joined");
    let d: Vec<DisruptionRecord> = decisions(&p).await;
    let rec = d.iter().find(|r| r.id == id).expect("decision");
    assert_eq!(rec.state, DisruptionState::Replacing, "{rec:?}");
    let replacement = claim(&p, &rec.replacement_names[0]).await;
    assert_eq!(replacement.state, NodeClaimState::Registered);
    // The replacement turns Ready: the old node is tainted, drained, gone.
    for n in c.nodes.values_mut() {
        n.ready = true;
    }
    let ready_at = p.clock.now_secs();
    for _ in 0..6 {
        minute(&p, &mut c).await;
        if !c.nodes.contains_key(&old_node) {
            break;
        }
    }
    let tainted = c
        .applied
        .iter()
        .find(|(k, n, _)| k == "taint" && n == &old_node)
        .map(|(_, _, t)| *t)
        .expect("tainted once Ready");
    assert!(
        tainted > ready_at,
        "tainted at {tainted}, Ready at {ready_at}"
    );
    assert!(!c.nodes.contains_key(&old_node), "the old node is gone");
    let done = decisions(&p).await;
    let rec = done.iter().find(|r| r.id == id).expect("decision");
    assert_eq!(rec.state, DisruptionState::Done, "{rec:?}");
}

/// Karpenter's AMI drift: the EC2NodeClass selects `al2023@latest`; once
/// a newer AMI is released (and the cached resolution expired), the node
/// running the older image drifts and is replaced gracefully: the
/// replacement launches on the new AMI and joins first, then the old node
/// is tainted, drained and terminated. The NodeClaim records the AMI,
/// subnet and security groups its instance was launched with.
#[tokio::test]
async fn a_newer_ami_drifts_the_nodes_running_the_older_one() {
    let p = world();
    let mut c = one_node(&p).await;
    let (old_node, old) = c.nodes.iter().next().expect("node");
    let (old_node, old) = (old_node.clone(), old.clone());
    let rec = claim(&p, &old.claim).await;
    let inst = rec.instance.as_ref().expect("launched");
    let ec2 = p.ec2.instance_record(&old.instance).expect("instance");
    assert_eq!(inst.image_id.as_deref(), Some(ec2.image_id.as_str()));
    assert_eq!(inst.subnet_id.as_deref(), Some(ec2.subnet_id.as_str()));
    let template = p
        .ec2
        .launch_template(&ec2.launch_template)
        .expect("template");
    assert_eq!(inst.security_group_ids, template.security_group_ids);
    assert!(!inst.security_group_ids.is_empty());
    // EC2 failing to describe the AMIs (throttled, or a permission
    // missing) leaves the status unknown for that run: the run goes on
    // without cloud-provider drift (`run` asserts it reports no error).
    p.ec2.faults().fail_next(
        flotilla_sim::faults::ops::EC2_DESCRIBE_IMAGES,
        flotilla_ports::PortError::Throttled("RequestLimitExceeded".into()),
    );
    let r = minute(&p, &mut c).await;
    assert!(r.started.is_empty(), "{r:?}");
    // Nothing changes: nothing drifts.
    for _ in 0..3 {
        let r = minute(&p, &mut c).await;
        assert!(r.started.is_empty(), "{r:?}");
    }
    // A newer release of the AMI the node runs.
    let current = p
        .ec2
        .images()
        .into_iter()
        .find(|i| i.id == ec2.image_id)
        .expect("the node's AMI");
    let newer = flotilla_core::ec2::Image {
        id: "ami-0newer000000000".into(),
        name: current.name.replace("-v20251101", "-v20251201"),
        creation_date: "2025-12-01T08:00:00.000Z".into(),
        ..current.clone()
    };
    assert_ne!(newer.name, current.name);
    p.ec2.add_image(newer.clone());
    let released = p.clock.now_secs();
    let mut id = None;
    for _ in 0..8 {
        let r = minute(&p, &mut c).await;
        if let Some(s) = r.started.first() {
            id = Some(s.clone());
            break;
        }
    }
    let id = id.expect("a Drifted decision once the cached resolution expired");
    assert!(p.clock.now_secs() - released <= 6 * PERIOD_SECS);
    let d = decisions(&p).await;
    let rec = d.iter().find(|r| r.id == id).expect("decision");
    assert_eq!(rec.reason.as_str(), "Drifted", "{rec:?}");
    assert_eq!(rec.node_names().collect::<Vec<_>>(), [old_node.as_str()]);
    let replacement_claim = rec.replacement_names[0].clone();
    for _ in 0..8 {
        minute(&p, &mut c).await;
        if !c.nodes.contains_key(&old_node) {
            break;
        }
    }
    assert!(!c.nodes.contains_key(&old_node), "the old node is gone");
    let replacement = claim(&p, &replacement_claim).await;
    let new_inst = replacement.instance.as_ref().expect("replacement launched");
    assert_eq!(new_inst.image_id.as_deref(), Some(newer.id.as_str()));
    // Graceful: the replacement joined before the old node was tainted.
    let joined = c
        .nodes
        .values()
        .find(|n| n.claim == replacement_claim)
        .expect("the replacement's node")
        .created;
    let tainted = c
        .applied
        .iter()
        .find(|(k, n, _)| k == "taint" && n == &old_node)
        .map(|(_, _, t)| *t)
        .expect("the old node was tainted");
    assert!(joined < tainted, "joined {joined}, tainted {tainted}");
    let done = decisions(&p).await;
    let rec = done.iter().find(|r| r.id == id).expect("decision");
    assert_eq!(rec.state, DisruptionState::Done, "{rec:?}");
    // The replacement runs the newest AMI: nothing drifts any more.
    for _ in 0..6 {
        let r = minute(&p, &mut c).await;
        assert!(r.started.is_empty(), "{r:?}");
    }
}

/// Two replicas of one PodDisruptionBudget (`maxUnavailable: 1`) on a
/// drifted node: the node is disrupted (Karpenter's rule: the PDB still
/// allows an eviction), and its drain evicts them one at a time, the second
/// refused (429) until the first runs again on the replacement.
#[tokio::test]
async fn a_drain_evicts_one_replica_at_a_time_under_a_pdb() {
    let p = world();
    let mut c = Cluster::new(
        &["m5.large", "m5.xlarge"],
        serde_json::json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h",
            "budgets": [{"nodes": "100%"}]}),
    );
    c.pdbs = vec![serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    })];
    c.pending = vec![pod("web-0", 700), pod("web-1", 700)];
    c.settle_pending(&p).await;
    assert_eq!(c.nodes.len(), 1, "both replicas on one node");
    let old_node = c.nodes.keys().next().expect("node").clone();
    c.class["spec"]["tags"] = serde_json::json!({"team": "payments"});
    let mut refused_seen = false;
    for _ in 0..12 {
        minute(&p, &mut c).await;
        let pending_web = c.pending.iter().filter(|p| p.app == "web").count();
        assert!(
            pending_web <= 1,
            "two replicas unavailable: {:?}",
            c.pending
        );
        // One replica moved while the other still waits on the old node:
        // its eviction was refused (both go at once without the PDB).
        let on = |moved: bool| -> usize {
            (c.nodes.iter())
                .filter(|(name, _)| (*name != &old_node) == moved)
                .map(|(_, n)| n.pods.len())
                .sum()
        };
        refused_seen |= on(false) == 1 && on(true) + pending_web == 1;
        if !c.nodes.contains_key(&old_node) {
            break;
        }
    }
    assert!(
        refused_seen,
        "the second eviction waited for the first replica"
    );
    assert!(!c.nodes.contains_key(&old_node), "the drifted node is gone");
    c.settle_pending(&p).await;
    let running: usize = c.nodes.values().map(|n| n.pods.len()).sum();
    assert_eq!(running, 2, "both replicas run on the replacement");
    let d = decisions(&p).await;
    assert!(
        d.iter()
            .any(|r| r.reason.as_str() == "Drifted" && r.state == DisruptionState::Done),
        "{d:?}"
    );
}

mod model {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    const DND: &str = "karpenter.sh/do-not-disrupt";

    #[derive(Debug, Clone)]
    enum Op {
        /// `n` pending pods of `cpu_m` and app [`APPS`]`[app]`
        /// (do-not-disrupt when `dnd`); the pipeline launches and the
        /// scheduler binds them.
        Add {
            n: usize,
            cpu_m: i64,
            dnd: bool,
            app: usize,
        },
        /// Up to `n` pods of node number `pick` are deleted (scale down).
        Remove {
            pick: usize,
            n: usize,
        },
        /// One minute of the world (agent, post, disruption run, events).
        Minute,
        /// Two disruption runs at once, every event delivered twice.
        Concurrent,
        /// The agent stops posting for 11 minutes; a run then starts
        /// nothing (the state is stale).
        Silence,
        Sweep,
        /// The agent's drains fail (a PDB held the pods) or succeed.
        Refuse(bool),
        /// The replacement types' capacity runs dry, or comes back.
        Drought(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1..4usize, prop_oneof![Just(250i64), Just(700), Just(1500), Just(2500)], proptest::bool::weighted(0.2), 0..APPS.len())
                .prop_map(|(n, cpu_m, dnd, app)| Op::Add { n, cpu_m, dnd, app }),
            3 => (any::<usize>(), 1..4usize).prop_map(|(pick, n)| Op::Remove { pick, n }),
            6 => Just(Op::Minute),
            2 => Just(Op::Concurrent),
            1 => Just(Op::Silence),
            1 => Just(Op::Sweep),
            1 => any::<bool>().prop_map(Op::Refuse),
            1 => any::<bool>().prop_map(Op::Drought),
        ]
    }

    const TYPES: [&str; 4] = ["m5.large", "m5.xlarge", "c5.xlarge", "c5.2xlarge"];
    /// The pods' apps and the `maxUnavailable` of each app's
    /// PodDisruptionBudget (`None`: no PDB).
    const APPS: [(&str, Option<u32>); 3] = [("api", Some(1)), ("web", Some(2)), ("batch", None)];

    fn pdb_doc(app: &str, max_unavailable: u32) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": "default"},
            "spec": {"maxUnavailable": max_unavailable,
                "selector": {"matchLabels": {"app": app}}}
        })
    }
    const ZONES: [&str; 4] = ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"];

    struct Model {
        p: SimPorts,
        c: Cluster,
        /// Every pod that exists (added, not deleted).
        pods: BTreeSet<String>,
        next: usize,
        /// NodeClaims whose node ever joined.
        joined: BTreeSet<String>,
        /// Per graceful decision started: the pods on its nodes then, with
        /// their app (what its drain evicts).
        evicts: BTreeMap<String, Vec<(String, String)>>,
    }

    impl Model {
        async fn new() -> Model {
            let p = world();
            let mut c = Cluster::new(
                &TYPES,
                serde_json::json!({"consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}),
            );
            c.pdbs = APPS
                .iter()
                .filter_map(|(app, max)| max.map(|m| pdb_doc(app, m)))
                .collect();
            let mut m = Model {
                p,
                c,
                pods: BTreeSet::new(),
                next: 0,
                joined: BTreeSet::new(),
                evicts: BTreeMap::new(),
            };
            m.add(3, 700, false, 0).await;
            m
        }

        async fn add(&mut self, n: usize, cpu_m: i64, dnd: bool, app: usize) {
            for _ in 0..n {
                let mut pod = pod(&format!("p{}", self.next), cpu_m);
                pod.app = APPS[app % APPS.len()].0.to_string();
                self.next += 1;
                if dnd {
                    pod.annotations.insert(DND.into(), "true".into());
                }
                self.pods.insert(pod.name.clone());
                self.c.pending.push(pod);
            }
            self.c.settle_pending(&self.p).await;
            self.note_joined();
        }

        fn note_joined(&mut self) {
            self.joined
                .extend(self.c.nodes.values().map(|n| n.claim.clone()));
        }

        /// The disruption run's decisions started: none graceful on a node
        /// with a do-not-disrupt pod (the cluster as just posted); what
        /// each graceful one evicts is noted for [`Self::check`].
        async fn check_started(&mut self, started: &[String]) {
            let all = decisions(&self.p).await;
            for id in started {
                let Some(d) = all.iter().find(|d| &d.id == id) else {
                    continue;
                };
                if d.reason.is_forceful() {
                    continue;
                }
                self.check_allowance_left(d, &all);
                let mut evicts = Vec::new();
                for n in d.node_names() {
                    let dnd = self.c.nodes.get(n).is_some_and(|node| {
                        node.pods.iter().any(|p| p.annotations.contains_key(DND))
                    });
                    assert!(
                        !dnd,
                        "decision {id} disrupts {n}, which holds a do-not-disrupt pod"
                    );
                    let pods = self.c.nodes.get(n).into_iter().flat_map(|n| &n.pods);
                    evicts.extend(pods.map(|p| (p.name.clone(), p.app.clone())));
                }
                self.evicts.insert(id.clone(), evicts);
            }
        }

        /// Graceful decision `d` started only while each PDB covering its
        /// nodes' pods had allowance left: fewer than it allows of its pods
        /// on the nodes of the other decisions in flight (`all`).
        fn check_allowance_left(&self, d: &DisruptionRecord, all: &[DisruptionRecord]) {
            let app_pods = |n: &str| -> Vec<String> {
                let pods = self.c.nodes.get(n).into_iter().flat_map(|n| &n.pods);
                pods.map(|p| p.app.clone()).collect()
            };
            let others = all
                .iter()
                .filter(|o| o.id != d.id && !o.state.is_final())
                .flat_map(|o| o.node_names());
            let busy: Vec<String> = others.flat_map(app_pods).collect();
            let mine: BTreeSet<String> = d.node_names().flat_map(app_pods).collect();
            for (app, max) in APPS {
                let Some(max) = max else { continue };
                let used = busy.iter().filter(|a| a.as_str() == app).count();
                assert!(
                    !mine.contains(app) || used < max as usize,
                    "decision {} started with PodDisruptionBudget default/{app} used up ({used} of {max}): {all:?}",
                    d.id
                );
            }
        }

        /// PodDisruptionBudgets: no PDB ever has more pods unavailable
        /// (evicted through the Eviction API, not yet running again) than
        /// it allows. And no do-not-disrupt pod left with a node
        /// that a graceful decision removed (the drain waits for such pods
        /// and gives up at its deadline).
        fn check_pdbs_and_do_not_disrupt(&self, all: &[DisruptionRecord]) {
            for (app, max) in APPS {
                let Some(max) = max else { continue };
                let down: Vec<&SimPod> = self
                    .c
                    .pending
                    .iter()
                    .filter(|p| p.app == app && self.c.evicted.contains(&p.name))
                    .collect();
                assert!(
                    down.len() <= max as usize,
                    "PodDisruptionBudget default/{app} (maxUnavailable {max}): evicted pods unavailable {down:?}"
                );
            }
            for (node, pod) in &self.c.lost_protected {
                let graceful = all
                    .iter()
                    .filter(|d| !d.reason.is_forceful())
                    .find(|d| d.node_names().any(|n| n == node));
                assert!(
                    graceful.is_none(),
                    "do-not-disrupt pod {pod} evicted with node {node} by {graceful:?}"
                );
            }
        }

        async fn step(&mut self, op: &Op) {
            match op {
                Op::Add { n, cpu_m, dnd, app } => self.add(*n, *cpu_m, *dnd, *app).await,
                Op::Remove { pick, n } => {
                    let names: Vec<String> = self.c.nodes.keys().cloned().collect();
                    if let Some(name) = names.get(pick % names.len().max(1)) {
                        if let Some(node) = self.c.nodes.get_mut(name) {
                            for _ in 0..*n {
                                if let Some(p) = node.pods.pop() {
                                    self.pods.remove(&p.name);
                                }
                            }
                        }
                    }
                }
                Op::Minute => {
                    let r = minute(&self.p, &mut self.c).await;
                    self.check_started(&r.started).await;
                }
                Op::Concurrent => {
                    let p = &self.p;
                    p.clock.advance_secs(PERIOD_SECS);
                    self.c.join_and_leave(p).await;
                    self.c.act(p).await;
                    self.c.post(p).await;
                    let (a, b) = tokio::join!(run(p), run(p));
                    drain(p, 2).await;
                    let mut started = a.started.clone();
                    started.extend(b.started.iter().cloned());
                    self.check_started(&started).await;
                }
                Op::Silence => {
                    self.p.clock.advance_secs(11 * 60);
                    let r = run(&self.p).await;
                    assert!(r.started.is_empty(), "a decision on a stale state: {r:?}");
                    drain(&self.p, 1).await;
                }
                Op::Sweep => {
                    sweep(&self.p).await;
                    drain(&self.p, 1).await;
                }
                Op::Refuse(on) => self.c.drain_outcome = if *on { "failed" } else { "done" },
                Op::Drought(on) => {
                    for t in TYPES {
                        for z in ZONES {
                            if *on {
                                self.p.ec2.set_capacity(t, z, CapacityType::OnDemand, 0);
                            } else {
                                self.p.ec2.clear_capacity(t, z, CapacityType::OnDemand);
                            }
                        }
                    }
                }
            }
            self.note_joined();
        }

        /// The invariants that hold after every step.
        async fn check(&self) {
            // No pod lost or duplicated.
            let mut seen: Vec<&str> = self
                .c
                .nodes
                .values()
                .flat_map(|n| n.pods.iter())
                .chain(self.c.pending.iter())
                .map(|p| p.name.as_str())
                .collect();
            seen.sort();
            let n = seen.len();
            seen.dedup();
            assert_eq!(n, seen.len(), "a pod is in two places");
            let seen: BTreeSet<String> = seen.into_iter().map(str::to_string).collect();
            assert_eq!(seen, self.pods, "pods lost or invented");
            let all = decisions(&self.p).await;
            self.check_pdbs_and_do_not_disrupt(&all);
            // A decision being replaced can still read its replacements'
            // plans: every chunk its record names is stored (with a TTL).
            for d in all.iter().filter(|d| d.state == DisruptionState::Replacing) {
                let Some(at) = &d.replacement_plans else {
                    assert!(d.replacement_names.is_empty(), "{d:?}");
                    continue;
                };
                for i in 0..at.chunks as usize {
                    let key = keys::replacements(CLUSTER, &d.id, &at.blob, i);
                    let item = self.p.store.get(&key).await.expect("read chunk");
                    assert!(
                        item.is_some_and(|i| i.expires_at.is_some()),
                        "decision {} lost replacement chunk {i}",
                        d.id
                    );
                }
            }
            // The budget: one node disrupting at a time, for any reason.
            let in_flight: usize = all
                .iter()
                .filter(|d| !d.state.is_final())
                .map(|d| d.nodes.len())
                .sum();
            assert!(
                in_flight <= 1,
                "{in_flight} nodes disrupting, budget 1: {all:?}"
            );
            // Replace, then drain: no graceful decision terminates its
            // nodes before all its replacements joined. (A decision that
            // was abandoned terminated nothing: its node may since have
            // gone by another decision, e.g. emptied and removed.)
            let live: BTreeSet<String> = self
                .p
                .ec2
                .live_instances()
                .into_iter()
                .map(|i| i.id)
                .collect();
            let terminated = |d: &&DisruptionRecord| {
                matches!(
                    d.state,
                    DisruptionState::Terminating | DisruptionState::Done
                )
            };
            for d in all
                .iter()
                .filter(|d| !d.reason.is_forceful())
                .filter(terminated)
            {
                let gone = d
                    .nodes
                    .iter()
                    .any(|n| n.instance_id.as_ref().is_some_and(|i| !live.contains(i)));
                if gone {
                    for r in d.replacement_names() {
                        assert!(
                            self.joined.contains(r),
                            "decision {} terminated a node before replacement {r} joined",
                            d.id,
                        );
                    }
                }
            }
        }

        /// Faults off, an hour of minutes: everything settles.
        async fn settle(&mut self) {
            self.c.drain_outcome = "done";
            self.step(&Op::Drought(false)).await;
            for _ in 0..40 {
                self.step(&Op::Minute).await;
                if self.c.pending.is_empty()
                    && decisions(&self.p).await.iter().all(|d| d.state.is_final())
                {
                    break;
                }
            }
            self.c.settle_pending(&self.p).await;
            self.check().await;
            assert!(
                self.c.pending.is_empty(),
                "pods left pending: {:?}",
                self.c.pending
            );
            let all = decisions(&self.p).await;
            assert!(
                all.iter().all(|d| d.state.is_final()),
                "a decision is stuck: {all:?}"
            );
            // No leak: every live instance belongs to a live NodeClaim.
            let live_claims: BTreeSet<String> = claims(&self.p)
                .await
                .into_iter()
                .filter(|c| c.state.is_live())
                .filter_map(|c| c.instance.map(|i| i.instance_id))
                .collect();
            for i in self.p.ec2.live_instances() {
                assert!(live_claims.contains(&i.id), "instance {} leaked", i.id);
            }
        }
    }

    async fn run_ops(ops: &[Op]) {
        let mut m = Model::new().await;
        m.check().await;
        for op in ops {
            m.step(op).await;
            m.check().await;
        }
        m.settle().await;
    }

    /// Found by the model: pods leave a node, the replacement types run dry,
    /// a minute passes, more pods leave.
    #[tokio::test]
    async fn a_drought_between_decisions_never_terminates_before_the_replacement_joined() {
        run_ops(&[
            Op::Remove { pick: 12627, n: 1 },
            Op::Drought(true),
            Op::Minute,
            Op::Remove {
                pick: 14448057502975462460,
                n: 2,
            },
        ])
        .await;
    }

    fn fixed_seed() -> proptest::test_runner::RngSeed {
        match std::env::var("PROPTEST_RNG_SEED") {
            Ok(_) => ProptestConfig::default().rng_seed,
            Err(_) => proptest::test_runner::RngSeed::Fixed(7),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(8),
            max_shrink_iters: 64,
            failure_persistence: None,
            // A CI run depends on the code alone; `PROPTEST_RNG_SEED=<n>`
            // explores other cases.
            rng_seed: fixed_seed(),
            ..ProptestConfig::default()
        })]

        #[test]
        fn disruption_keeps_its_invariants(ops in proptest::collection::vec(op(), 4..14)) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            rt.block_on(async {
                let mut m = Model::new().await;
                m.check().await;
                for op in &ops {
                    m.step(op).await;
                    m.check().await;
                }
                m.settle().await;
            });
        }
    }
}
