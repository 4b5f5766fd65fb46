//! What to do with what intake sends back (pure): actions (cordon, drain,
//! relabel) and the labels and taints of newly registered nodes.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::reservations::{Action, ActionKind};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::docs::{NODECLAIM_LABEL, REGISTERED_LABEL};

/// `GET /clusters/<id>` (intake's `ClusterView`), the parts the agent uses.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub cluster_id: String,
    #[serde(default)]
    pub node_claims: Vec<NodeClaimView>,
    /// Parsed one by one ([`parse_actions`]): one bad entry does not hide
    /// the others.
    #[serde(default)]
    pub actions: Vec<Value>,
    #[serde(default)]
    pub last_result: Option<LastResult>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastResult {
    pub batch_id: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimView {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub instance_id: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

/// An action as intake stores it: the core [`Action`] plus its id.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingAction {
    pub id: String,
    #[serde(flatten)]
    pub action: Action,
    /// Unix seconds the sweep stored it.
    #[serde(default)]
    pub created_at: i64,
}

/// The actions of a view; malformed ones are returned as errors naming
/// their index.
pub fn parse_actions(view: &ClusterView) -> (Vec<PendingAction>, Vec<String>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for (i, a) in view.actions.iter().enumerate() {
        match serde_json::from_value::<PendingAction>(a.clone()) {
            Ok(p) => ok.push(p),
            Err(e) => bad.push(format!("actions[{i}]: {e}")),
        }
    }
    (ok, bad)
}

/// The acknowledgement outcomes intake accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AckOutcome {
    Done,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub id: String,
    pub outcome: AckOutcome,
    pub message: String,
}

/// A node as the planner sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub provider_id: Option<String>,
    /// For optimistic concurrency on patches that replace the taint list.
    pub resource_version: Option<String>,
}

/// A pod as the drain sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Not a DaemonSet pod, not a mirror pod, not finished.
    pub evictable: bool,
    /// Being deleted (already evicted): waited for, not evicted again.
    pub terminating: bool,
    /// Until when (Unix seconds) `karpenter.sh/do-not-disrupt` keeps it
    /// from eviction (`flotilla_core::disruption::do_not_disrupt_until`):
    /// a drain waits for it (it may finish, or its annotation lapse) and
    /// never evicts it; past the drain's deadline the node goes anyway.
    pub do_not_disrupt_until: Option<i64>,
}

impl PodFacts {
    fn protected_at(&self, now_secs: i64) -> bool {
        self.do_not_disrupt_until.is_some_and(|t| now_secs < t)
    }
}

/// After the steps: acknowledge, or look again next round.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ack(AckOutcome, String),
    Wait(String),
}

/// The steps for one action.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionPlan {
    pub id: String,
    pub kind: ActionKind,
    /// The node resolved from the action's node or NodeClaim name.
    pub node: Option<String>,
    /// JSON merge patch for the node.
    pub patch: Option<Value>,
    /// Pods to evict (namespace, name).
    pub evict: Vec<(String, String)>,
    /// What to report once `patch` succeeded and `evict` is empty.
    pub outcome: Outcome,
}

/// The node an action or NodeClaim names: by node name, then by the
/// NodeClaim label, then by the instance id in the provider id.
pub fn resolve_node<'a>(
    nodes: &'a [NodeFacts],
    name: &str,
    node_claim: Option<&str>,
    instance_id: Option<&str>,
) -> Option<&'a NodeFacts> {
    nodes
        .iter()
        .find(|n| n.name == name)
        .or_else(|| {
            nodes.iter().find(|n| {
                n.labels
                    .get(NODECLAIM_LABEL)
                    .is_some_and(|c| c == name || Some(c.as_str()) == node_claim)
            })
        })
        .or_else(|| {
            let id = instance_id?;
            nodes.iter().find(|n| {
                n.provider_id
                    .as_deref()
                    .is_some_and(|p| p.rsplit('/').next() == Some(id))
            })
        })
}

fn cordon_patch() -> Value {
    json!({"spec": {"unschedulable": true}})
}

/// The taint a disruption decision puts on the nodes it drains.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

fn is_disrupted_taint(t: &Taint) -> bool {
    t.key == DISRUPTED_TAINT && t.effect == "NoSchedule"
}

/// A merge patch replacing the node's taint list by `taints` (only over the
/// version read, when known: another writer's change is not lost).
fn taints_patch(node: &NodeFacts, taints: Vec<&Taint>) -> Value {
    let mut patch = json!({"spec": {"taints": taints}});
    if let Some(rv) = &node.resource_version {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    patch
}

/// The nodes the view's drain actions name, as [`plan_action`] resolves
/// them: the only nodes whose pods a round reads.
pub fn drained_nodes(view: &ClusterView, nodes: &[NodeFacts]) -> BTreeSet<String> {
    parse_actions(view)
        .0
        .iter()
        .filter(|a| a.action.kind == ActionKind::Drain)
        .filter_map(|a| {
            let act = &a.action;
            resolve_node(nodes, &act.node, act.node_claim.as_deref(), None)
        })
        .map(|n| n.name.clone())
        .collect()
}

/// Plan one action at `now_secs` (Unix seconds).
pub fn plan_action(
    a: &PendingAction,
    nodes: &[NodeFacts],
    pods: &[PodFacts],
    now_secs: i64,
) -> ActionPlan {
    let act = &a.action;
    let mut plan = ActionPlan {
        id: a.id.clone(),
        kind: act.kind,
        node: None,
        patch: None,
        evict: vec![],
        outcome: Outcome::Wait(String::new()),
    };
    if act.kind == ActionKind::FreeReservation {
        plan.outcome = Outcome::Ack(
            AckOutcome::Skipped,
            "freeing a reservation is the sweep's job".into(),
        );
        return plan;
    }
    let Some(node) = resolve_node(nodes, &act.node, act.node_claim.as_deref(), None) else {
        plan.outcome = if now_secs >= act.deadline {
            Outcome::Ack(
                AckOutcome::Skipped,
                format!("no node {} in the cluster", act.node),
            )
        } else {
            Outcome::Wait(format!("node {} has not registered", act.node))
        };
        return plan;
    };
    plan.node = Some(node.name.clone());
    match act.kind {
        ActionKind::Cordon => {
            if !node.unschedulable {
                plan.patch = Some(cordon_patch());
            }
            plan.outcome = Outcome::Ack(AckOutcome::Done, format!("cordoned {}", node.name));
        }
        ActionKind::Drain => {
            if !node.unschedulable {
                plan.patch = Some(cordon_patch());
            }
            let left: Vec<&PodFacts> = pods
                .iter()
                .filter(|p| p.node == node.name && p.evictable)
                .collect();
            if left.is_empty() {
                plan.outcome = Outcome::Ack(AckOutcome::Done, format!("drained {}", node.name));
            } else if now_secs >= act.deadline {
                let mut names: Vec<String> = left
                    .iter()
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect();
                names.sort();
                plan.outcome = Outcome::Ack(
                    AckOutcome::Failed,
                    format!(
                        "deadline passed with {} pods left on {}: {}",
                        names.len(),
                        node.name,
                        names.join(", ")
                    ),
                );
            } else {
                plan.evict = left
                    .iter()
                    .filter(|p| !p.terminating && !p.protected_at(now_secs))
                    .map(|p| (p.namespace.clone(), p.name.clone()))
                    .collect();
                plan.evict.sort();
                let protected = left.iter().filter(|p| p.protected_at(now_secs)).count();
                plan.outcome = Outcome::Wait(format!(
                    "{} pods to evict from {}, {protected} with karpenter.sh/do-not-disrupt waited for",
                    plan.evict.len(),
                    node.name
                ));
            }
        }
        ActionKind::Relabel => {
            let mut labels = serde_json::Map::new();
            for (k, v) in &act.set_labels {
                if node.labels.get(k) != Some(v) {
                    labels.insert(k.clone(), Value::String(v.clone()));
                }
            }
            for k in &act.remove_labels {
                if node.labels.contains_key(k) && !act.set_labels.contains_key(k) {
                    labels.insert(k.clone(), Value::Null);
                }
            }
            if !labels.is_empty() {
                plan.patch = Some(json!({"metadata": {"labels": labels}}));
            }
            plan.outcome = Outcome::Ack(AckOutcome::Done, format!("relabelled {}", node.name));
        }
        ActionKind::Taint => {
            if !node.taints.iter().any(is_disrupted_taint) {
                let added = Taint {
                    key: DISRUPTED_TAINT.into(),
                    value: String::new(),
                    effect: "NoSchedule".into(),
                };
                let all: Vec<&Taint> = node.taints.iter().chain([&added]).collect();
                plan.patch = Some(taints_patch(node, all));
            }
            plan.outcome = Outcome::Ack(
                AckOutcome::Done,
                format!("tainted {} {DISRUPTED_TAINT}:NoSchedule", node.name),
            );
        }
        ActionKind::Untaint => {
            let kept: Vec<&Taint> = node
                .taints
                .iter()
                .filter(|t| !is_disrupted_taint(t))
                .collect();
            let mut patch = serde_json::Map::new();
            if kept.len() != node.taints.len() {
                if let Value::Object(p) = taints_patch(node, kept) {
                    patch = p;
                }
            }
            if node.unschedulable {
                // The drain cordoned it: back in service.
                let spec = patch.entry("spec").or_insert_with(|| json!({}));
                spec["unschedulable"] = Value::Bool(false);
            }
            if !patch.is_empty() {
                plan.patch = Some(Value::Object(patch));
            }
            plan.outcome = Outcome::Ack(
                AckOutcome::Done,
                format!(
                    "removed {DISRUPTED_TAINT} from {} and uncordoned it",
                    node.name
                ),
            );
        }
        ActionKind::FreeReservation => {}
    }
    plan
}

/// A registration patch for a node that joined for a NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePatch {
    pub node: String,
    pub node_claim: String,
    pub patch: Value,
}

/// Labels and taints of each newly registered node's NodeClaim: missing
/// labels added, missing taints appended (kept taints untouched), and the
/// node marked [`REGISTERED_LABEL`] so that a taint someone removed later
/// is not put back.
pub fn plan_registrations(claims: &[NodeClaimView], nodes: &[NodeFacts]) -> Vec<NodePatch> {
    let mut out = Vec::new();
    for c in claims
        .iter()
        .filter(|c| c.state == "Launched" || c.state == "Registered")
    {
        let Some(node) = resolve_node(nodes, &c.name, Some(&c.name), c.instance_id.as_deref())
        else {
            continue;
        };
        if node.labels.contains_key(REGISTERED_LABEL) {
            continue;
        }
        let mut labels = serde_json::Map::new();
        for (k, v) in &c.labels {
            if node.labels.get(k) != Some(v) {
                labels.insert(k.clone(), Value::String(v.clone()));
            }
        }
        if node.labels.get(NODECLAIM_LABEL) != Some(&c.name) {
            labels.insert(NODECLAIM_LABEL.into(), Value::String(c.name.clone()));
        }
        labels.insert(REGISTERED_LABEL.into(), Value::String("true".into()));
        let mut patch = json!({"metadata": {"labels": labels}});
        let missing: Vec<&Taint> = c
            .taints
            .iter()
            .filter(|t| {
                !node
                    .taints
                    .iter()
                    .any(|n| n.key == t.key && n.effect == t.effect)
            })
            .collect();
        if !missing.is_empty() {
            let all: Vec<&Taint> = node.taints.iter().chain(missing).collect();
            patch["spec"] = json!({"taints": all});
            // The taint list is replaced whole: only over the version read.
            if let Some(rv) = &node.resource_version {
                patch["metadata"]["resourceVersion"] = Value::String(rv.clone());
            }
        }
        out.push(NodePatch {
            node: node.name.clone(),
            node_claim: c.name.clone(),
            patch,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action_json(kind: &str, node: &str, deadline: i64) -> Value {
        json!({
            "id": "a1", "kind": kind, "node": node, "reservationId": "cr-1",
            "deadline": deadline, "reason": "capacity block ends", "createdAt": 100,
            "setLabels": {"karpenter.sh/capacity-type": "on-demand"},
            "removeLabels": ["karpenter.k8s.aws/capacity-reservation-id"]
        })
    }

    fn action(kind: &str, node: &str, deadline: i64) -> PendingAction {
        serde_json::from_value(action_json(kind, node, deadline)).expect("action")
    }

    fn node(name: &str) -> NodeFacts {
        let mut labels = BTreeMap::new();
        labels.insert(NODECLAIM_LABEL.to_string(), format!("{name}-claim"));
        labels.insert("karpenter.sh/capacity-type".into(), "reserved".into());
        labels.insert(
            "karpenter.k8s.aws/capacity-reservation-id".into(),
            "cr-1".into(),
        );
        NodeFacts {
            name: name.into(),
            labels,
            taints: vec![],
            unschedulable: false,
            provider_id: Some(format!("aws:///us-west-2a/i-{name}")),
            resource_version: Some("7".into()),
        }
    }

    fn pod(name: &str, node: &str, evictable: bool) -> PodFacts {
        PodFacts {
            namespace: "default".into(),
            name: name.into(),
            node: node.into(),
            evictable,
            terminating: false,
            do_not_disrupt_until: None,
        }
    }

    #[test]
    fn the_stored_action_shape_parses_and_bad_entries_are_named() {
        let view: ClusterView = serde_json::from_value(json!({
            "clusterId": "demo",
            "nodeClaims": [{"name": "c1", "nodePool": "default", "state": "Launched",
                "instanceId": "i-1", "labels": {"a": "b"}, "pods": 3}],
            "actions": [
                {"id": "ab", "kind": "drain", "node": "n1", "reservationId": "cr", "deadline": 5,
                 "reason": "r", "createdAt": 1},
                {"id": "cd", "kind": "explode"}
            ],
            "lastResult": {"batchId": "b1", "finishedAt": 1, "pendingPods": 0, "nodeClaims": [],
                "unschedulable": [], "unschedulableTotal": 0, "warnings": []}
        }))
        .expect("view");
        let (ok, bad) = parse_actions(&view);
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].action.kind, ActionKind::Drain);
        assert_eq!(bad.len(), 1);
        assert!(bad[0].starts_with("actions[1]"), "{bad:?}");
        assert_eq!(view.last_result.unwrap().batch_id, "b1");
    }

    #[test]
    fn only_the_nodes_drains_name_have_their_pods_read() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let view: ClusterView = serde_json::from_value(json!({
            "clusterId": "demo", "nodeClaims": [],
            "actions": [
                action_json("drain", "n1-claim", 5),
                action_json("cordon", "n2", 5),
                action_json("drain", "ghost", 5),
                {"id": "cd", "kind": "explode"}
            ]
        }))
        .expect("view");
        let drained: Vec<String> = drained_nodes(&view, &nodes).into_iter().collect();
        assert_eq!(drained, ["n1"]);
    }

    #[test]
    fn cordon_patches_once_and_resolves_nodeclaim_names() {
        let nodes = vec![node("n1")];
        let p = plan_action(&action("cordon", "n1-claim", 1000), &nodes, &[], 10);
        assert_eq!(p.node.as_deref(), Some("n1"));
        assert_eq!(p.patch, Some(json!({"spec": {"unschedulable": true}})));
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        let mut cordoned = nodes.clone();
        cordoned[0].unschedulable = true;
        let p = plan_action(&action("cordon", "n1", 1000), &cordoned, &[], 10);
        assert_eq!(p.patch, None);
        // Not registered yet: wait until the deadline, then skip.
        let p = plan_action(&action("cordon", "ghost", 1000), &nodes, &[], 10);
        assert!(matches!(p.outcome, Outcome::Wait(_)));
        let p = plan_action(&action("cordon", "ghost", 1000), &nodes, &[], 1000);
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Skipped, _)));
    }

    #[test]
    fn drain_evicts_only_movable_pods_and_finishes_when_they_are_gone() {
        let nodes = vec![node("n1"), node("n2")];
        let pods = vec![
            pod("web-1", "n1", true),
            pod("ds-1", "n1", false),
            pod("web-0", "n1", true),
            pod("other", "n2", true),
        ];
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &pods, 10);
        assert_eq!(p.patch, Some(json!({"spec": {"unschedulable": true}})));
        assert_eq!(
            p.evict,
            vec![
                ("default".to_string(), "web-0".to_string()),
                ("default".to_string(), "web-1".to_string())
            ]
        );
        assert!(matches!(p.outcome, Outcome::Wait(_)));
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &pods[1..2], 10);
        assert!(p.evict.is_empty());
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        // Evicted pods still terminating: waited for, not evicted again.
        let mut going = pods.clone();
        going[0].terminating = true;
        going[2].terminating = true;
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &going, 10);
        assert!(p.evict.is_empty());
        assert!(matches!(p.outcome, Outcome::Wait(_)));
        // A do-not-disrupt pod is waited for, never evicted; once its
        // annotation lapses it is evicted like the others.
        let mut kept = pods.clone();
        kept[0].do_not_disrupt_until = Some(500);
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &kept, 10);
        assert_eq!(p.evict, vec![("default".to_string(), "web-0".to_string())]);
        match &p.outcome {
            Outcome::Wait(m) => assert!(m.contains("1 with karpenter.sh/do-not-disrupt"), "{m}"),
            o => panic!("{o:?}"),
        }
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &kept, 500);
        assert_eq!(p.evict.len(), 2);
        // Past the deadline with pods a PDB kept: reported as failed.
        let p = plan_action(&action("drain", "n1", 1000), &nodes, &pods, 1000);
        assert!(p.evict.is_empty());
        match p.outcome {
            Outcome::Ack(AckOutcome::Failed, m) => assert!(m.contains("default/web-0"), "{m}"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn relabel_sets_and_removes_only_what_differs() {
        let nodes = vec![node("n1")];
        let p = plan_action(&action("relabel", "n1", 0), &nodes, &[], 10);
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"labels": {
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.k8s.aws/capacity-reservation-id": null
            }}}))
        );
        let mut done = nodes.clone();
        done[0]
            .labels
            .insert("karpenter.sh/capacity-type".into(), "on-demand".into());
        done[0]
            .labels
            .remove("karpenter.k8s.aws/capacity-reservation-id");
        let p = plan_action(&action("relabel", "n1", 0), &done, &[], 10);
        assert_eq!(p.patch, None);
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        let p = plan_action(&action("freeReservation", "n1", 0), &nodes, &[], 10);
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Skipped, _)));
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
        }
    }

    #[test]
    fn taint_appends_the_disrupted_taint_once_keeping_the_others() {
        let mut n = node("n1");
        n.taints = vec![taint("dedicated", "NoSchedule")];
        let p = plan_action(&action("taint", "n1", 1000), &[n.clone()], &[], 10);
        assert_eq!(
            p.patch,
            Some(json!({
                "spec": {"taints": [
                    {"key": "dedicated", "effect": "NoSchedule"},
                    {"key": DISRUPTED_TAINT, "effect": "NoSchedule"}
                ]},
                "metadata": {"resourceVersion": "7"}
            }))
        );
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        // Already tainted: nothing to patch, acknowledged again.
        n.taints.push(taint(DISRUPTED_TAINT, "NoSchedule"));
        let p = plan_action(&action("taint", "n1", 1000), &[n.clone()], &[], 10);
        assert_eq!(p.patch, None);
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        // A NoExecute taint of the same key is another taint: ours is added.
        n.taints = vec![taint(DISRUPTED_TAINT, "NoExecute")];
        let p = plan_action(&action("taint", "n1", 1000), &[n], &[], 10);
        assert_eq!(
            p.patch
                .as_ref()
                .map(|v| v["spec"]["taints"].as_array().map(Vec::len)),
            Some(Some(2))
        );
        // A node not registered yet: wait, then skip at the deadline.
        let p = plan_action(&action("taint", "ghost", 1000), &[node("n1")], &[], 10);
        assert!(matches!(p.outcome, Outcome::Wait(_)));
    }

    #[test]
    fn untaint_removes_only_the_disrupted_taint_and_uncordons() {
        let mut n = node("n1");
        n.taints = vec![
            taint("dedicated", "NoSchedule"),
            taint(DISRUPTED_TAINT, "NoSchedule"),
        ];
        n.unschedulable = true;
        let p = plan_action(&action("untaint", "n1", 0), &[n.clone()], &[], 10);
        assert_eq!(
            p.patch,
            Some(json!({
                "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}],
                    "unschedulable": false},
                "metadata": {"resourceVersion": "7"}
            }))
        );
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
        // Only cordoned (the drain had not tainted it yet).
        n.taints.pop();
        let p = plan_action(&action("untaint", "n1", 0), &[n.clone()], &[], 10);
        assert_eq!(p.patch, Some(json!({"spec": {"unschedulable": false}})));
        // Nothing of ours left: no patch, done.
        n.unschedulable = false;
        let p = plan_action(&action("untaint", "n1", 0), &[n], &[], 10);
        assert_eq!(p.patch, None);
        assert!(matches!(p.outcome, Outcome::Ack(AckOutcome::Done, _)));
    }

    #[test]
    fn registered_nodes_get_their_nodeclaim_labels_and_taints_once() {
        let mut n = node("n1");
        n.labels.remove(NODECLAIM_LABEL);
        n.taints = vec![Taint {
            key: "node.kubernetes.io/not-ready".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        }];
        let claim = NodeClaimView {
            name: "c1".into(),
            state: "Launched".into(),
            instance_id: Some("i-n1".into()),
            labels: [("team".to_string(), "a".to_string())].into(),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoSchedule".into(),
            }],
        };
        let pending = NodeClaimView {
            state: "Pending".into(),
            name: "c2".into(),
            ..claim.clone()
        };
        let patches = plan_registrations(&[claim.clone(), pending], &[n.clone()]);
        assert_eq!(patches.len(), 1);
        assert_eq!(
            patches[0].patch,
            json!({
                "metadata": {"labels": {"team": "a", NODECLAIM_LABEL: "c1", REGISTERED_LABEL: "true"},
                    "resourceVersion": "7"},
                "spec": {"taints": [
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
                ]}
            })
        );
        n.labels.insert(REGISTERED_LABEL.into(), "true".into());
        assert!(plan_registrations(&[claim], &[n]).is_empty());
    }
}
