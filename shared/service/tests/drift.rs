//! Drift and readiness over the simulator, with the small cluster of
//! `tests/disruption.rs` beside it (its nodes report a `Ready` condition):
//! a change of the EC2NodeClass drifts the nodes the pipeline launched (the
//! NodeClaim records its hash at launch), and the drifted node is tainted
//! and drained only once its replacement's node is Ready.

mod common;

use std::collections::BTreeMap;

use common::*;
use flotilla_ports::Clock;
use flotilla_service::disruption::{self, ClusterDisruptReport};
use flotilla_service::intake;
use flotilla_service::records::{DisruptionRecord, DisruptionState, NodeClaimState};

/// The disruption schedule's period (EventBridge `rate(1 minute)`).
const PERIOD_SECS: i64 = 60;

#[derive(Debug, Clone)]
struct SimPod {
    name: String,
    cpu_m: i64,
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct SimNode {
    claim: String,
    instance: String,
    zone: String,
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

/// The cluster the agent watches.
struct Cluster {
    pool: serde_json::Value,
    class: serde_json::Value,
    nodes: BTreeMap<String, SimNode>,
    pending: Vec<SimPod>,
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
    }
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
            drain_outcome: "done",
            applied: Vec::new(),
            join_ready: true,
        }
    }

    fn documents(&self) -> Vec<serde_json::Value> {
        let mut docs = vec![self.pool.clone(), self.class.clone()];
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
                    "creationTimestamp": rfc3339(START_MS / 1000)},
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
                    zone: inst.zone.clone(),
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
                        let evicted = std::mem::take(&mut node.pods);
                        self.pending.extend(evicted);
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
