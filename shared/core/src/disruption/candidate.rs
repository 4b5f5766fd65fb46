//! Candidates: the nodes a NodePool owns, with what disruption needs to
//! know about each (price, age, the pods that would move, what blocks a
//! graceful disruption).

use std::collections::BTreeMap;

use crate::catalog::{ebs, Catalog};
use crate::labels;
use crate::model::{ClusterState, Node, NodeClaimObject, NodeOverlay, Pod};
use crate::resources::Resources;

use super::price::{node_cost, Cost};

/// One node a NodePool owns.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// Index into `ClusterState::nodes`.
    pub node: usize,
    /// Index into `ClusterState::node_pools`.
    pub pool: usize,
    /// Index into `ClusterState::node_claims`, if one names this node.
    pub claim: Option<usize>,
    /// What it costs; `None`: the catalog does not know its offering.
    pub cost: Option<Cost>,
    /// When it was launched (the NodeClaim's creation, else the node's).
    pub created_at: Option<i64>,
    /// Since when it has been in its current state (see `since`).
    pub since: Option<i64>,
    /// Indices into the node's pods of those a disruption moves (not
    /// DaemonSet, mirror or terminating pods).
    pub movable: Vec<usize>,
    /// Sum of the movable pods' requests.
    pub requests: Resources,
    /// Requests over allocatable, the largest of cpu and memory.
    pub utilization: f64,
    /// What blocks a graceful disruption (do-not-disrupt on the node or a
    /// pod), if anything. PDBs are checked as decisions use them up.
    pub blocker: Option<String>,
    /// What of [`Self::blocker`] is on the node or its NodeClaim: it blocks
    /// drift even where a terminationGracePeriod bounds the drain (pod
    /// blockers do not then).
    pub node_blocker: Option<String>,
    /// The v1alpha5 `karpenter.sh/do-not-consolidate` node annotation.
    pub do_not_consolidate: bool,
}

/// Whether a disruption moves this pod: DaemonSet pods stay (their
/// DaemonSet runs them on the replacement), mirror pods belong to the
/// kubelet, terminating pods are already going — except a StatefulSet's:
/// its controller recreates the pod (same name) only once the old one is
/// gone, so the pod still needs a place, and its node is not empty
/// (Karpenter's `pod.IsReschedulable`).
pub(crate) fn moves(pod: &Pod) -> bool {
    let owner = pod.owner.as_deref().unwrap_or_default();
    let daemon = owner.starts_with("DaemonSet/") || owner.starts_with("Node/");
    let mirror = pod.annotations.contains_key("kubernetes.io/config.mirror");
    let gone = pod.terminating && !owner.starts_with("StatefulSet/");
    !(daemon || mirror || gone)
}

/// A Go duration (`"90s"`, `"1h30m"`, `"2h"`, `"500ms"`) in whole seconds.
pub(crate) fn go_duration_secs(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let mult_ms: u64 = match &rest[..unit_len] {
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1_000,
            "ms" => 1,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(mult_ms)?)?;
        rest = &rest[unit_len..];
    }
    Some(total / 1000)
}

/// Until when (Unix seconds) the annotations of a pod that started at
/// `started_at` keep it from being evicted by a drain: `i64::MAX` for
/// `karpenter.sh/do-not-disrupt: "true"` (or the v1alpha5
/// `karpenter.sh/do-not-evict: "true"`), the start plus the duration for
/// the duration form (`"1h"`; `i64::MAX` without a start time), `None`
/// when neither annotation holds a value Karpenter honours. The drain waits
/// for such pods until the decision's deadline, as Karpenter's termination
/// does until `terminationGracePeriod`.
pub fn do_not_disrupt_until(
    annotations: &BTreeMap<String, String>,
    started_at: Option<i64>,
) -> Option<i64> {
    let mut until: Option<i64> = None;
    for key in [labels::DO_NOT_DISRUPT, labels::DO_NOT_EVICT] {
        let Some(v) = annotations.get(key) else {
            continue;
        };
        let t = if v == "true" {
            i64::MAX
        } else if let Some(secs) = go_duration_secs(v) {
            started_at.map_or(i64::MAX, |s| {
                s.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX))
            })
        } else {
            continue;
        };
        until = Some(until.map_or(t, |u| u.max(t)));
    }
    until
}

/// Why `pod` blocks a graceful disruption of its node at `now`:
/// `karpenter.sh/do-not-disrupt: "true"` (or the v1alpha5
/// `karpenter.sh/do-not-evict`), or a duration (`"1h"`) that has not
/// passed since the pod started.
pub(crate) fn pod_blocker(pod: &Pod, now: i64) -> Option<String> {
    for key in [labels::DO_NOT_DISRUPT, labels::DO_NOT_EVICT] {
        let Some(v) = pod.annotations.get(key) else {
            continue;
        };
        if v == "true" {
            return Some(format!(
                "pod {} has the annotation {key}: \"true\"",
                pod.key()
            ));
        }
        if let Some(secs) = go_duration_secs(v) {
            let until = pod
                .created_at
                .and_then(|t| t.checked_add(i64::try_from(secs).unwrap_or(i64::MAX)));
            match until {
                Some(u) if now >= u => {}
                Some(u) => {
                    return Some(format!(
                        "pod {} has the annotation {key}: {v:?} ({}s left)",
                        pod.key(),
                        u - now
                    ))
                }
                None => {
                    return Some(format!(
                        "pod {} has the annotation {key}: {v:?} and no start time",
                        pod.key()
                    ))
                }
            }
        }
    }
    None
}

fn node_blocker(node: &Node, claim: Option<&NodeClaimObject>) -> Option<String> {
    let flagged =
        |a: &BTreeMap<String, String>| a.get(labels::DO_NOT_DISRUPT).is_some_and(|v| v == "true");
    if flagged(&node.annotations) {
        return Some(format!(
            "node {} has the annotation {}: \"true\"",
            node.name,
            labels::DO_NOT_DISRUPT
        ));
    }
    if let Some(c) = claim.filter(|c| flagged(&c.annotations)) {
        return Some(format!(
            "NodeClaim {} has the annotation {}: \"true\"",
            c.name,
            labels::DO_NOT_DISRUPT
        ));
    }
    None
}

/// The NodeClaim naming each node (by `status.nodeName`, else by the
/// provider id).
fn claims_by_node(state: &ClusterState) -> BTreeMap<&str, usize> {
    let mut out: BTreeMap<&str, usize> = BTreeMap::new();
    let by_provider: BTreeMap<&str, &str> = state
        .nodes
        .iter()
        .filter_map(|n| n.provider_id.as_deref().map(|p| (p, n.name.as_str())))
        .collect();
    for (i, c) in state.node_claims.iter().enumerate() {
        let node = c.node_name.as_deref().or_else(|| {
            c.provider_id
                .as_deref()
                .and_then(|p| by_provider.get(p).copied())
        });
        if let Some(n) = node {
            out.entry(n).or_insert(i);
        }
    }
    out
}

/// Every node a NodePool of `state` owns (by its `karpenter.sh/nodepool` or
/// `karpenter.sh/provisioner-name` label, or a NodeClaim's), in node order.
/// Nodes of no (known) pool are never candidates.
pub(crate) fn candidates(
    state: &ClusterState,
    catalog: &Catalog,
    overlays: &[&NodeOverlay],
    since: &BTreeMap<String, i64>,
    now: i64,
) -> Vec<Candidate> {
    let pools: BTreeMap<&str, usize> = state
        .node_pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let claims = claims_by_node(state);
    let mut out = Vec::new();
    for (i, node) in state.nodes.iter().enumerate() {
        let claim = claims.get(node.name.as_str()).copied();
        let claim_obj = claim.and_then(|c| state.node_claims.get(c));
        let pool_name = node
            .nodepool()
            .or_else(|| claim_obj.and_then(|c| c.node_pool.as_deref()));
        let Some(&pool) = pool_name.and_then(|p| pools.get(p)) else {
            continue;
        };
        let movable: Vec<usize> = node
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| moves(p))
            .map(|(k, _)| k)
            .collect();
        let mut requests = Resources::new();
        for &k in &movable {
            requests.add_assign(&node.pods[k].requests);
        }
        let share = |name: &str| {
            let a = node.allocatable.get(name).millis();
            if a <= 0 {
                0.0
            } else {
                requests.get(name).millis() as f64 / a as f64
            }
        };
        let utilization = share("cpu").max(share("memory"));
        let created_at = claim_obj.and_then(|c| c.created_at).or(node.created_at);
        let node_blocker = node_blocker(node, claim_obj);
        let blocker = node_blocker.clone().or_else(|| {
            node.pods
                .iter()
                .filter(|p| !p.terminating)
                .find_map(|p| pod_blocker(p, now))
        });
        out.push(Candidate {
            node: i,
            pool,
            claim,
            cost: node_cost(catalog, overlays, &node.labels).map(|c| {
                let np = &state.node_pools[pool];
                let nc = np
                    .node_class
                    .as_ref()
                    .and_then(|n| state.node_classes.iter().find(|c| &c.name == n));
                c.with_volumes(ebs::node_class_hourly(&catalog.region, nc))
            }),
            created_at,
            since: since_of(
                node,
                claim_obj,
                since,
                state.node_pools[pool].disruption.consolidate_after_seconds,
            ),
            movable,
            requests,
            utilization,
            blocker,
            node_blocker,
            do_not_consolidate: node
                .annotations
                .get(labels::DO_NOT_CONSOLIDATE)
                .is_some_and(|v| v == "true"),
        });
    }
    out
}

/// Since when the node has been in its current state: what the pipeline
/// knows, else a NodeClaim's `Consolidatable` time less the NodePool's
/// `consolidateAfter` (`consolidate_after`), else the latest change the
/// documents show (the node's creation, its pods' creation and start).
/// `None`: nothing known (taken as long ago).
fn since_of(
    node: &Node,
    claim: Option<&NodeClaimObject>,
    known: &BTreeMap<String, i64>,
    consolidate_after: Option<u64>,
) -> Option<i64> {
    if let Some(&t) = known.get(&node.name) {
        return Some(t);
    }
    if let Some(t) = claim.and_then(|c| c.consolidatable_since) {
        // Karpenter's nodeclaim controller sets `Consolidatable=True` once
        // `consolidateAfter` has passed since the last pod event: the node
        // is consolidatable from `t` on, its last change at most `t` less
        // `consolidateAfter`.
        let after = consolidate_after.map_or(0, |a| i64::try_from(a).unwrap_or(i64::MAX));
        return Some(t.saturating_sub(after));
    }
    node.pods
        .iter()
        .filter_map(|p| p.created_at)
        .chain(node.created_at)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodTemplate;

    #[test]
    fn go_durations() {
        for (s, want) in [
            ("90s", Some(90)),
            ("1h30m", Some(5400)),
            ("2h", Some(7200)),
            ("1500ms", Some(1)),
            ("", None),
            ("h", None),
            ("5x", None),
            ("true", None),
            ("99999999999999999999h", None),
        ] {
            assert_eq!(go_duration_secs(s), want, "{s}");
        }
    }

    #[test]
    fn do_not_disrupt_until_reads_both_forms_and_both_keys() {
        let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<i64>, Option<i64>);
        let cases: [Case; 7] = [
            (&[], Some(100), None),
            (
                &[(labels::DO_NOT_DISRUPT, "true")],
                Some(100),
                Some(i64::MAX),
            ),
            (&[(labels::DO_NOT_EVICT, "true")], None, Some(i64::MAX)),
            (&[(labels::DO_NOT_DISRUPT, "1h")], Some(100), Some(3_700)),
            (&[(labels::DO_NOT_DISRUPT, "1h")], None, Some(i64::MAX)),
            (&[(labels::DO_NOT_DISRUPT, "false")], Some(100), None),
            (
                &[
                    (labels::DO_NOT_DISRUPT, "90m"),
                    (labels::DO_NOT_EVICT, "1h"),
                ],
                Some(0),
                Some(5_400),
            ),
        ];
        for (annotations, started, want) in cases {
            assert_eq!(
                do_not_disrupt_until(&a(annotations), started),
                want,
                "{annotations:?} started {started:?}"
            );
        }
    }

    #[test]
    fn do_not_disrupt_forms() {
        let mut p = Pod {
            name: "p".into(),
            created_at: Some(1_000),
            ..Pod::from(PodTemplate {
                namespace: "ns".into(),
                ..PodTemplate::default()
            })
        };
        assert_eq!(pod_blocker(&p, 2_000), None);
        p.annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
        assert!(pod_blocker(&p, 2_000).is_some_and(|w| w.contains("ns/p")));
        p.annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "1h".into());
        assert!(pod_blocker(&p, 1_000 + 3_599).is_some());
        assert_eq!(pod_blocker(&p, 1_000 + 3_600), None);
        p.annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "false".into());
        assert_eq!(pod_blocker(&p, 0), None);
        p.annotations.clear();
        p.annotations
            .insert(labels::DO_NOT_EVICT.into(), "true".into());
        assert!(pod_blocker(&p, 0).is_some());
    }

    #[test]
    fn daemon_mirror_and_terminating_pods_stay() {
        let base = Pod::default();
        assert!(moves(&base));
        let ds = Pod::from(PodTemplate {
            owner: Some("DaemonSet/kube-system/aws-node".into()),
            ..PodTemplate::default()
        });
        assert!(!moves(&ds));
        let mut mirror = Pod::default();
        mirror
            .annotations
            .insert("kubernetes.io/config.mirror".into(), "x".into());
        assert!(!moves(&mirror));
        let t = Pod {
            terminating: true,
            ..Pod::default()
        };
        assert!(!moves(&t));
    }

    /// A terminating StatefulSet pod still needs a place: its controller
    /// recreates it only once it is gone (Karpenter's
    /// `pod.IsReschedulable`), so it moves and its node is not empty.
    #[test]
    fn terminating_stateful_set_pods_move() {
        let mut ss = Pod::from(PodTemplate {
            owner: Some("StatefulSet/default/db".into()),
            ..PodTemplate::default()
        });
        assert!(moves(&ss));
        ss.terminating = true;
        assert!(moves(&ss));
        let rs = Pod {
            terminating: true,
            ..Pod::from(PodTemplate {
                owner: Some("ReplicaSet/default/web-5d4f".into()),
                ..PodTemplate::default()
            })
        };
        assert!(!moves(&rs));
    }
}
