//! A Karpenter-style consolidation baseline (benchmark only, not product
//! code), written from Karpenter v1's disruption docs and
//! `kubernetes-sigs/karpenter` `pkg/controllers/disruption`, with
//! Flotilla's scheduler (`flotilla_core::scheduler::schedule`) as the
//! oracle for "the pods fit", as Karpenter uses its own scheduler.
//!
//! One command per round, the first method that finds one:
//!
//! 1. **Emptiness**: every candidate with only DaemonSet pods is deleted
//!    (within the budget).
//! 2. **Multi-node consolidation**: the candidates with pods, sorted by
//!    disruption cost (fewest pods, then oldest, then name), at most 100
//!    (and at most the budget); a binary search for the largest prefix (of
//!    at least two) whose pods schedule on the remaining nodes plus at most
//!    ONE new NodeClaim. A replacement must be cheaper than the prefix, no
//!    spot-to-spot replacement (Karpenter's `SpotToSpotConsolidation` gate
//!    is off by default), and instance types of the prefix are kept only
//!    if cheaper than the cheapest node of that type in it
//!    (`filterOutSameType`).
//! 3. **Single-node consolidation**: the same candidates one at a time, in
//!    the same order: the first whose pods fit elsewhere (delete) or on
//!    one cheaper node (replace).
//!
//! Candidates: nodes of a NodePool with `WhenEmptyOrUnderutilized` (only
//! emptiness for `WhenEmpty`) past `consolidateAfter`, without
//! `karpenter.sh/do-not-disrupt` on the node or any of its pods, and whose
//! pods' PDBs all allow a disruption. Karpenter's time limits (1 min
//! multi-node, 3 min single-node) are not applied: the baseline always
//! finishes its search.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::labels;
use flotilla_core::model::{ClusterState, IntOrPercent, Node, Pod};
use flotilla_core::plan::{NodeClaimPlan, Plan};
use flotilla_core::scheduler::{schedule, SchedulerOptions};

use crate::disruption_apply::{node_price, Change};
use crate::fragmented::is_daemon_pod;

/// Karpenter's cap on multi-node consolidation candidates.
pub const MAX_MULTI_CANDIDATES: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Method {
    Emptiness,
    MultiNode,
    SingleNode,
}

/// One consolidation command.
#[derive(Debug, Clone)]
pub struct Command {
    pub method: Method,
    pub change: Change,
    /// $/hour of the removed nodes and of the replacement.
    pub price_before: f64,
    pub price_after: f64,
}

/// A candidate node.
struct Candidate<'a> {
    node: &'a Node,
    price: f64,
    pods: usize,
    created: i64,
}

/// The PDB `ns/name`s that allow no disruption now.
fn exhausted_pdbs(state: &ClusterState) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for pdb in &state.pdbs {
        let total = state
            .nodes
            .iter()
            .flat_map(|n| &n.pods)
            .filter(|p| p.namespace == pdb.namespace && pdb.selector.matches(&p.labels))
            .count();
        let allowed = match (
            pdb.disruptions_allowed,
            pdb.max_unavailable,
            pdb.min_available,
        ) {
            (Some(a), _, _) => a as usize,
            (None, Some(m), _) => m.of(total, true),
            (None, None, Some(m)) => total.saturating_sub(m.of(total, true)),
            (None, None, None) => total,
        };
        if allowed == 0 {
            out.insert(pdb.key());
        }
    }
    out
}

fn blocked_by_pod(state: &ClusterState, exhausted: &BTreeSet<String>, p: &Pod) -> bool {
    if is_daemon_pod(p) {
        return false;
    }
    if p.annotations.contains_key(labels::DO_NOT_DISRUPT)
        || p.annotations.contains_key(labels::DO_NOT_EVICT)
    {
        return true;
    }
    let covering: Vec<_> = state
        .pdbs
        .iter()
        .filter(|b| b.namespace == p.namespace && b.selector.matches(&p.labels))
        .collect();
    // Karpenter cannot evict a pod covered by several PDBs.
    covering.len() > 1 || covering.iter().any(|b| exhausted.contains(&b.key()))
}

/// The candidates of `state` at `now`: (empty ones, ones with pods sorted
/// by disruption cost), and the budget (nodes that may go now).
fn candidates<'a>(
    state: &'a ClusterState,
    catalog: &Catalog,
    now: i64,
) -> (Vec<Candidate<'a>>, Vec<Candidate<'a>>, usize) {
    let exhausted = exhausted_pdbs(state);
    let mut empty = Vec::new();
    let mut busy = Vec::new();
    let mut budget = usize::MAX;
    for np in &state.node_pools {
        let pool_nodes = state
            .nodes
            .iter()
            .filter(|n| n.nodepool() == Some(np.name.as_str()))
            .count();
        for b in np
            .disruption
            .budgets
            .iter()
            .filter(|b| b.schedule.is_none())
        {
            let n = match b.nodes {
                IntOrPercent::Int(n) => n as usize,
                p => p.of(pool_nodes, false),
            };
            budget = budget.min(n);
        }
    }
    for n in &state.nodes {
        let Some(np) = n
            .nodepool()
            .and_then(|name| state.node_pools.iter().find(|p| p.name == name))
        else {
            continue;
        };
        let policy = np.disruption.consolidation_policy.as_deref();
        if n.unschedulable
            || n.annotations.contains_key(labels::DO_NOT_DISRUPT)
            || n.annotations.contains_key(labels::DO_NOT_CONSOLIDATE)
        {
            continue;
        }
        let since = n
            .pods
            .iter()
            .filter_map(|p| p.created_at)
            .chain(n.created_at)
            .max()
            .unwrap_or(i64::MIN);
        let after = np.disruption.consolidate_after_seconds.unwrap_or(0) as i64;
        if now.saturating_sub(since) < after {
            continue;
        }
        if n.pods.iter().any(|p| blocked_by_pod(state, &exhausted, p)) {
            continue;
        }
        let Ok(price) = node_price(catalog, n) else {
            continue;
        };
        let pods = n.pods.iter().filter(|p| !is_daemon_pod(p)).count();
        let c = Candidate {
            node: n,
            price,
            pods,
            created: n.created_at.unwrap_or(0),
        };
        if pods == 0 {
            if matches!(
                policy,
                Some("WhenEmpty") | Some("WhenEmptyOrUnderutilized") | None
            ) {
                empty.push(c);
            }
        } else if matches!(policy, Some("WhenEmptyOrUnderutilized") | None) {
            busy.push(c);
        }
    }
    empty.sort_by(|a, b| a.node.name.cmp(&b.node.name));
    busy.sort_by(|a, b| {
        a.pods
            .cmp(&b.pods)
            .then(a.created.cmp(&b.created))
            .then_with(|| a.node.name.cmp(&b.node.name))
    });
    (empty, busy, budget)
}

/// Price of instance type `ty` for `claim` (its cheapest offering in the
/// claim's zones and capacity types): (price, zone, capacity type).
fn option_price(
    catalog: &Catalog,
    claim: &NodeClaimPlan,
    ty: &str,
    capacity: &[CapacityType],
) -> Option<(f64, String, CapacityType)> {
    catalog
        .get(ty)?
        .offerings
        .iter()
        .filter(|o| {
            o.available > 0
                && o.reservation.is_none()
                && claim.zones.contains(&o.zone)
                && capacity.contains(&o.capacity_type)
        })
        .map(|o| (o.price, o.zone.clone(), o.capacity_type))
        .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
}

/// Karpenter's `computeConsolidation` for `cands`: schedules their pods on
/// the other nodes; a command when they all fit with no new NodeClaim
/// (delete) or one cheaper one (replace).
fn compute(
    state: &ClusterState,
    catalog: &Catalog,
    cands: &[&Candidate],
    multi: bool,
    opts: &SchedulerOptions,
) -> Option<Command> {
    let removed: BTreeSet<&str> = cands.iter().map(|c| c.node.name.as_str()).collect();
    let sim = ClusterState {
        pending_pods: cands
            .iter()
            .flat_map(|c| c.node.pods.iter().filter(|p| !is_daemon_pod(p)))
            .map(|p| Pod {
                node_name: None,
                ..p.clone()
            })
            .collect(),
        nodes: state
            .nodes
            .iter()
            .filter(|n| !removed.contains(n.name.as_str()))
            .cloned()
            .collect(),
        node_pools: state.node_pools.clone(),
        node_classes: state.node_classes.clone(),
        daemon_sets: state.daemon_sets.clone(),
        storage_classes: state.storage_classes.clone(),
        pvcs: state.pvcs.clone(),
        pvs: state.pvs.clone(),
        overlays: state.overlays.clone(),
        instance_types: state.instance_types.clone(),
        capacity_reservations: state.capacity_reservations.clone(),
        ..Default::default()
    };
    let plan: Plan = schedule(&sim, catalog, opts);
    if !plan.unschedulable.is_empty() || plan.node_claims.len() > 1 {
        return None;
    }
    let before: f64 = cands.iter().map(|c| c.price).sum();
    let names: Vec<String> = removed.iter().map(|s| s.to_string()).collect();
    let Some(claim) = plan.node_claims.first() else {
        return Some(Command {
            method: if multi {
                Method::MultiNode
            } else {
                Method::SingleNode
            },
            change: Change::from_plan(names, &plan),
            price_before: before,
            price_after: 0.0,
        });
    };
    // Spot-to-spot needs the SpotToSpotConsolidation gate (off by default).
    let all_spot = cands.iter().all(|c| {
        c.node.labels.get(labels::CAPACITY_TYPE).map(String::as_str)
            == Some(labels::CAPACITY_TYPE_SPOT)
    });
    let allows_spot = claim.capacity_types.contains(&CapacityType::Spot);
    if all_spot && allows_spot {
        return None;
    }
    // An OD → [OD, spot] replacement is launched as spot (Karpenter adds
    // the requirement so a spot shortage does not launch a dearer OD node).
    let capacity: Vec<CapacityType> = if allows_spot {
        vec![CapacityType::Spot]
    } else {
        claim.capacity_types.clone()
    };
    let mut max_price = before;
    if multi {
        // filterOutSameType: a type of the candidates stays an option only
        // if cheaper than the cheapest candidate of that type.
        let mut by_type: BTreeMap<&str, f64> = BTreeMap::new();
        for c in cands {
            if let Some(t) = c.node.labels.get(labels::INSTANCE_TYPE) {
                let e = by_type.entry(t).or_insert(c.price);
                *e = e.min(c.price);
            }
        }
        for t in claim.instance_types.iter() {
            if let Some(p) = by_type.get(t.as_str()) {
                max_price = max_price.min(*p);
            }
        }
    }
    let best = claim
        .instance_types
        .iter()
        .filter_map(|t| option_price(catalog, claim, t, &capacity).map(|p| (t, p)))
        .filter(|(_, p)| p.0 < max_price - 1e-9)
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then_with(|| a.0.cmp(b.0)))?;
    let (ty, (price, zone, ct)) = best;
    let mut replacement = claim.clone();
    replacement.price.min = price;
    replacement.price.instance_type = ty.clone();
    replacement.price.zone = zone.clone();
    replacement.price.capacity_type = ct;
    replacement.zones = vec![zone];
    replacement.capacity_types = vec![ct];
    let mut change = Change::from_plan(names, &plan);
    change.replacements = vec![replacement];
    Some(Command {
        method: if multi {
            Method::MultiNode
        } else {
            Method::SingleNode
        },
        change,
        price_before: before,
        price_after: price,
    })
}

/// The command Karpenter would take next in `state` at `now`, if any.
pub fn next(state: &ClusterState, catalog: &Catalog, now: i64) -> Option<Command> {
    let opts = SchedulerOptions {
        now: Some(now),
        ..SchedulerOptions::default()
    };
    let (empty, busy, budget) = candidates(state, catalog, now);
    if budget == 0 {
        return None;
    }
    if !empty.is_empty() {
        let take: Vec<&Candidate> = empty.iter().take(budget).collect();
        return Some(Command {
            method: Method::Emptiness,
            change: Change {
                removed: take.iter().map(|c| c.node.name.clone()).collect(),
                ..Change::default()
            },
            price_before: take.iter().map(|c| c.price).sum(),
            price_after: 0.0,
        });
    }
    // Multi-node: binary search over prefixes of 2..=n.
    let multi: Vec<&Candidate> = busy.iter().take(MAX_MULTI_CANDIDATES.min(budget)).collect();
    if multi.len() >= 2 {
        let (mut lo, mut hi) = (1usize, multi.len() - 1);
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            match compute(state, catalog, &multi[..=mid], true, &opts) {
                Some(cmd) => {
                    best = Some(cmd);
                    lo = mid + 1;
                }
                None => {
                    if mid == 0 {
                        break;
                    }
                    hi = mid - 1;
                }
            }
        }
        if best.is_some() {
            return best;
        }
    }
    // Single-node, in disruption-cost order.
    busy.iter()
        .find_map(|c| compute(state, catalog, &[c], false, &opts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption_apply::{apply, cluster_price, violations};
    use crate::fragmented::{self, build, Params, NOW};
    use crate::mixes::Rng;
    use flotilla_core::model::*;
    use flotilla_core::{Quantity, Resources};

    fn catalog() -> Catalog {
        Catalog::embedded("us-west-2").expect("embedded catalog")
    }

    /// A node of `ty` in us-west-2a on-demand with `pods` pods of
    /// (cpu millis, memory MiB).
    fn node(c: &Catalog, np: &NodePool, i: usize, ty: &str, pods: &[(i64, i64)]) -> Node {
        let ds = fragmented::daemon_set();
        let mut rng = Rng::new(i as u64);
        let name = format!("n{i}");
        let mut n = fragmented::launched_node(
            np,
            c,
            &c.get(ty).unwrap().info,
            "us-west-2a",
            CapacityType::OnDemand,
            &name,
            NOW - 3600 - i as i64,
            &ds,
            &mut rng,
        );
        for (k, (cpu, mem)) in pods.iter().enumerate() {
            n.pods.push(Pod {
                name: format!("p{i}-{k}"),
                node_name: Some(name.clone()),
                created_at: Some(NOW - 3600),
                ..Pod::from(PodTemplate {
                    namespace: "default".into(),
                    requests: Resources::new()
                        .with("cpu", Quantity::from_millis(*cpu))
                        .with("memory", Quantity::from_mib(*mem))
                        .with("pods", Quantity::from_units(1)),
                    ..PodTemplate::default()
                })
            });
        }
        n
    }

    fn cluster(c: &Catalog, nodes: &[(&str, &[(i64, i64)])]) -> ClusterState {
        let np = fragmented::node_pool(100, &c.zones[..3]);
        ClusterState {
            nodes: nodes
                .iter()
                .enumerate()
                .map(|(i, (ty, pods))| node(c, &np, i, ty, pods))
                .collect(),
            node_pools: vec![np],
            daemon_sets: vec![fragmented::daemon_set()],
            ..Default::default()
        }
    }

    #[test]
    fn empty_nodes_go_first() {
        let c = catalog();
        let s = cluster(
            &c,
            &[
                ("m5.xlarge", &[(500, 512)]),
                ("m5.xlarge", &[]),
                ("m5.large", &[]),
            ],
        );
        let cmd = next(&s, &c, NOW).unwrap();
        assert_eq!(cmd.method, Method::Emptiness);
        assert_eq!(cmd.change.removed, vec!["n1".to_string(), "n2".to_string()]);
    }

    #[test]
    fn multi_node_deletes_the_largest_prefix_that_fits() {
        let c = catalog();
        // Two lightly used m5.xlarge fit on the half-empty m5.2xlarge.
        let s = cluster(
            &c,
            &[
                ("m5.2xlarge", &[(2000, 4096), (1000, 1024)]),
                ("m5.xlarge", &[(500, 512)]),
                ("m5.xlarge", &[(1000, 1024)]),
            ],
        );
        let cmd = next(&s, &c, NOW).unwrap();
        assert_eq!(cmd.method, Method::MultiNode);
        assert_eq!(cmd.change.removed, vec!["n1".to_string(), "n2".to_string()]);
        assert!(cmd.change.replacements.is_empty());
        assert_eq!(cmd.change.moves.len(), 2);
        assert!(cmd.change.moves.iter().all(|(_, to)| to == "n0"));
    }

    #[test]
    fn single_node_replaces_with_a_cheaper_node() {
        let c = catalog();
        // One big node with a small pod: replaced by a cheaper (spot) one.
        let s = cluster(&c, &[("m5.4xlarge", &[(500, 512)])]);
        let cmd = next(&s, &c, NOW).unwrap();
        assert_eq!(cmd.method, Method::SingleNode);
        assert_eq!(cmd.change.replacements.len(), 1);
        let r = &cmd.change.replacements[0];
        assert_eq!(r.price.capacity_type, CapacityType::Spot);
        assert!(cmd.price_after < cmd.price_before);
        // Carried out, the cluster is cheaper and valid, and the baseline
        // then stops (the replacement is spot: no spot-to-spot).
        let mut s2 = s.clone();
        let mut rng = Rng::new(1);
        let before = cluster_price(&c, &s2).unwrap();
        apply(&mut s2, &c, &cmd.change, NOW, "r1-", &mut rng).unwrap();
        assert!(cluster_price(&c, &s2).unwrap() < before);
        assert!(violations(&s2).is_empty());
        assert!(next(&s2, &c, NOW).is_none());
    }

    #[test]
    fn do_not_disrupt_and_pdbs_block() {
        let c = catalog();
        let mut s = cluster(&c, &[("m5.4xlarge", &[(500, 512)]), ("m5.xlarge", &[])]);
        s.nodes[1]
            .annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
        s.nodes[0].pods[1]
            .annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
        assert!(next(&s, &c, NOW).is_none());
        s.nodes[0].pods[1].annotations.clear();
        s.nodes[0].pods[1].labels.insert("app".into(), "a".into());
        s.pdbs.push(PodDisruptionBudget {
            namespace: "default".into(),
            name: "a".into(),
            selector: LabelSelector {
                match_labels: [("app".to_string(), "a".to_string())].into(),
                match_expressions: vec![],
            },
            min_available: Some(IntOrPercent::Int(1)),
            max_unavailable: None,
            disruptions_allowed: None,
        });
        assert!(next(&s, &c, NOW).is_none());
        s.pdbs[0].min_available = Some(IntOrPercent::Int(0));
        assert!(next(&s, &c, NOW).is_some());
    }

    #[test]
    fn baseline_rounds_keep_fragmented_clusters_valid_and_cheaper() {
        let c = catalog();
        let mut s = build(&Params::fixed(30, 600, 5).with_budget(100), &c).unwrap();
        let start = cluster_price(&c, &s).unwrap();
        let mut rng = Rng::new(9);
        let mut rounds = 0;
        while let Some(cmd) = next(&s, &c, NOW) {
            assert!(cmd.price_after < cmd.price_before, "{:?}", cmd.method);
            let before = cluster_price(&c, &s).unwrap();
            apply(
                &mut s,
                &c,
                &cmd.change,
                NOW,
                &format!("r{rounds}-"),
                &mut rng,
            )
            .unwrap();
            assert!(violations(&s).is_empty(), "{:?}", violations(&s));
            assert!(cluster_price(&c, &s).unwrap() < before);
            rounds += 1;
            assert!(rounds < 60);
        }
        assert!(rounds > 0);
        assert!(cluster_price(&c, &s).unwrap() < start * 0.9);
    }
}
