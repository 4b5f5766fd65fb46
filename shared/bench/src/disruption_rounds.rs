//! Consolidation to a fixed point, for the disruption quality report:
//! run a decider on a cluster, carry its decisions out
//! (`disruption_apply`), run it again on the result, until it decides
//! nothing (or a cap on rounds), checking the cluster after every round.
//! Two deciders: Flotilla's `flotilla_core::disruption::disrupt` (every
//! decision of a run is carried out, then the next run) and the
//! Karpenter-style baseline (`disruption_baseline::next`, one command per
//! round, as Karpenter's controller loop).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flotilla_core::catalog::Catalog;
use flotilla_core::disruption::{disrupt, Decision, DisruptOptions};
use flotilla_core::labels;
use flotilla_core::model::{ClusterState, Node};

use crate::disruption_apply::{apply, cluster_price, violations, Change};
use crate::disruption_baseline;
use crate::mixes::Rng;

/// Seconds between two rounds (the decisions' `now` advances by this).
pub const ROUND_SECONDS: i64 = 60;

/// What a run to the fixed point did.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rounds {
    /// Rounds that decided something (ours: `disrupt` runs; baseline:
    /// commands).
    pub rounds: usize,
    /// A round decided nothing before the cap: the fixed point.
    pub converged: bool,
    /// Nodes removed, over all rounds (a node replaced in round 1 and its
    /// replacement removed in round 3 count twice).
    pub nodes_disrupted: usize,
    /// Nodes removed, by reason (ours) or method (baseline).
    pub nodes_by_reason: BTreeMap<String, usize>,
    /// Replacement nodes launched.
    pub replacements: usize,
    /// Pods moved.
    pub pods_moved: usize,
    /// What the decisions claimed to save ($/h, sum of before − after).
    pub claimed_saving: f64,
    /// Decision time over all rounds (the decider only), seconds.
    pub decision_seconds: f64,
    /// The longest single round's decision time, seconds.
    pub max_round_seconds: f64,
    /// Decision time of each round (the last one: the run that decided
    /// nothing), seconds.
    pub round_seconds: Vec<f64>,
    /// Validity problems found after any round (`violations`), at most 10.
    pub violations: Vec<String>,
    /// Decisions that could not be carried out, at most 10.
    pub apply_errors: Vec<String>,
    /// The decisions one more run takes on the final state one hour later
    /// (0: stable). `None` when not converged.
    pub second_run_decisions: Option<usize>,
}

impl Rounds {
    fn violated(&mut self, state: &ClusterState, round: usize) {
        for v in violations(state) {
            if self.violations.len() < 10 {
                self.violations.push(format!("round {round}: {v}"));
            }
        }
    }
}

/// Carries out every decision of one `disrupt` run, in order. Replacements
/// are named `prefix` + their NodeClaim name; a later decision's moves to
/// an earlier decision's replacement (the engine simulates each decision
/// on the state the earlier ones leave) are pointed at that node.
pub fn apply_decisions(
    state: &mut ClusterState,
    catalog: &Catalog,
    decisions: &[Decision],
    now: i64,
    prefix: &str,
    rng: &mut Rng,
) -> Result<(), String> {
    let mut launched: BTreeMap<String, String> = BTreeMap::new();
    for (i, d) in decisions.iter().enumerate() {
        let mut change = Change::from_decision(d);
        let own: Vec<&str> = d.replacements.iter().map(|r| r.name.as_str()).collect();
        for (_, to) in &mut change.moves {
            if own.contains(&to.as_str()) {
                continue;
            }
            if let Some(node) = launched.get(to.as_str()) {
                *to = node.clone();
            }
        }
        apply(state, catalog, &change, now, prefix, rng).map_err(|e| {
            format!(
                "decision {i} ({} of {}): {e}",
                d.reason.as_str(),
                d.nodes.join(",")
            )
        })?;
        for r in &d.replacements {
            launched.insert(r.name.clone(), format!("{prefix}{}", r.name));
        }
    }
    Ok(())
}

/// Flotilla's decisions to a fixed point: `disrupt` at `now`, carry every
/// decision out, again at `now` + [`ROUND_SECONDS`], ..., at most
/// `max_rounds` runs that decide something.
pub fn ours(
    state: &mut ClusterState,
    catalog: &Catalog,
    now: i64,
    max_rounds: usize,
    rng: &mut Rng,
) -> Rounds {
    let mut r = Rounds::default();
    let mut at = now;
    loop {
        let opts = DisruptOptions {
            now: at,
            ..DisruptOptions::default()
        };
        let start = Instant::now();
        let out = disrupt(state, catalog, &opts);
        let secs = start.elapsed().as_secs_f64();
        r.decision_seconds += secs;
        r.max_round_seconds = r.max_round_seconds.max(secs);
        r.round_seconds.push(secs);
        if out.decisions.is_empty() {
            r.converged = true;
            break;
        }
        if r.rounds >= max_rounds {
            break;
        }
        r.rounds += 1;
        for d in &out.decisions {
            r.nodes_disrupted += d.nodes.len();
            *r.nodes_by_reason
                .entry(d.reason.as_str().to_string())
                .or_default() += d.nodes.len();
            r.replacements += d.replacements.len();
            r.pods_moved += d.moves.len();
            r.claimed_saving += d.price.total_before - d.price.total_after;
        }
        let prefix = format!("r{}-", r.rounds);
        if let Err(e) = apply_decisions(state, catalog, &out.decisions, at, &prefix, rng) {
            r.apply_errors.push(e);
            break;
        }
        r.violated(state, r.rounds);
        at += ROUND_SECONDS;
    }
    if r.converged {
        let opts = DisruptOptions {
            now: at + 3600,
            ..DisruptOptions::default()
        };
        r.second_run_decisions = Some(disrupt(state, catalog, &opts).decisions.len());
    }
    r
}

/// The baseline to a fixed point: one command per round, at most
/// `max_commands` commands and `time_limit` of decision time.
pub fn baseline(
    state: &mut ClusterState,
    catalog: &Catalog,
    now: i64,
    max_commands: usize,
    time_limit: Duration,
    rng: &mut Rng,
) -> Rounds {
    let mut r = Rounds::default();
    let mut at = now;
    loop {
        if r.rounds >= max_commands || r.decision_seconds >= time_limit.as_secs_f64() {
            break;
        }
        let start = Instant::now();
        let cmd = disruption_baseline::next(state, catalog, at);
        let secs = start.elapsed().as_secs_f64();
        r.decision_seconds += secs;
        r.max_round_seconds = r.max_round_seconds.max(secs);
        r.round_seconds.push(secs);
        let Some(cmd) = cmd else {
            r.converged = true;
            break;
        };
        r.rounds += 1;
        let removed = cmd.change.removed.len();
        r.nodes_disrupted += removed;
        *r.nodes_by_reason
            .entry(format!("{:?}", cmd.method))
            .or_default() += removed;
        r.replacements += cmd.change.replacements.len();
        r.pods_moved += cmd.change.moves.len();
        r.claimed_saving += cmd.price_before - cmd.price_after;
        let prefix = format!("b{}-", r.rounds);
        if let Err(e) = apply(state, catalog, &cmd.change, at, &prefix, rng) {
            r.apply_errors.push(format!("command {}: {e}", r.rounds));
            break;
        }
        r.violated(state, r.rounds);
        at += ROUND_SECONDS;
    }
    if r.converged {
        r.second_run_decisions =
            Some(disruption_baseline::next(state, catalog, at + 3600).map_or(0, |_| 1));
    }
    r
}

/// $/h of `state`, or NaN when a node cannot be priced.
pub fn price(catalog: &Catalog, state: &ClusterState) -> f64 {
    cluster_price(catalog, state).unwrap_or(f64::NAN)
}

/// Whether no consolidation may ever remove `node`: it carries
/// `karpenter.sh/do-not-disrupt` (or v1alpha5's `do-not-consolidate`), or
/// one of its pods (DaemonSets aside) carries `do-not-disrupt` (or
/// v1alpha5's `do-not-evict`). The fragmented benchmarks never remove
/// those annotations, so every fixed point keeps these nodes.
pub fn pinned(node: &Node) -> bool {
    let held =
        |a: &BTreeMap<String, String>, keys: &[&str]| keys.iter().any(|k| a.contains_key(*k));
    held(
        &node.annotations,
        &[labels::DO_NOT_DISRUPT, labels::DO_NOT_CONSOLIDATE],
    ) || node.pods.iter().any(|p| {
        !crate::fragmented::is_daemon_pod(p)
            && held(
                &p.annotations,
                &[labels::DO_NOT_DISRUPT, labels::DO_NOT_EVICT],
            )
    })
}

/// The input of the bound with pinned nodes (see [`pinned`]): those nodes
/// as they are (their pods bound, their room free for others), every
/// other node's pods (DaemonSet pods excepted) pending; and the pinned
/// nodes' count. Every fixed point pays for the pinned nodes and places
/// the pending pods on their room or on new nodes, so their price plus
/// this input's LP bound is a lower bound too, and a tighter one.
pub fn pods_beside_pinned(state: &ClusterState) -> (ClusterState, usize) {
    let (kept, gone): (Vec<&Node>, Vec<&Node>) = state.nodes.iter().partition(|n| pinned(n));
    let moving = ClusterState {
        nodes: gone.into_iter().cloned().collect(),
        ..state.clone()
    };
    let mut out = pods_only(&moving);
    out.nodes = kept.iter().map(|n| (*n).clone()).collect();
    (out, kept.len())
}

/// `state`'s bound pods (DaemonSet pods excepted) as pending pods of a
/// cluster without nodes: the input of a fresh plan and of the LP bound.
pub fn pods_only(state: &ClusterState) -> ClusterState {
    ClusterState {
        pending_pods: state
            .nodes
            .iter()
            .flat_map(|n| &n.pods)
            .filter(|p| !crate::fragmented::is_daemon_pod(p))
            .map(|p| {
                let mut q = p.clone();
                q.node_name = None;
                q
            })
            .collect(),
        nodes: vec![],
        node_pools: state.node_pools.clone(),
        node_classes: state.node_classes.clone(),
        daemon_sets: state.daemon_sets.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragmented::{build, Params, NOW};

    fn catalog() -> Catalog {
        Catalog::embedded("us-west-2").expect("embedded catalog")
    }

    #[test]
    fn ours_and_baseline_reach_valid_cheaper_fixed_points() {
        let c = catalog();
        let start = build(&Params::fixed(40, 1200, 3), &c).unwrap();
        let before = price(&c, &start);
        let mut s = start.clone();
        let ours = ours(&mut s, &c, NOW, 40, &mut Rng::new(1));
        assert!(ours.converged, "{ours:?}");
        assert!(ours.apply_errors.is_empty(), "{:?}", ours.apply_errors);
        assert!(ours.violations.is_empty(), "{:?}", ours.violations);
        assert_eq!(ours.second_run_decisions, Some(0));
        assert!(ours.rounds > 1, "budgets of 10% need several rounds");
        let after = price(&c, &s);
        assert!(after < before, "{after} < {before}");
        // What the decisions claimed is what carrying them out saved (each
        // decision's totals are rounded to 1e-6 $/h, and volume prices have
        // more decimals than that, so a few rounding steps add up).
        assert!(
            (before - after - ours.claimed_saving).abs() < 1e-4,
            "{before} {after} {}",
            ours.claimed_saving
        );
        let pods = |s: &ClusterState| pods_only(s).pending_pods.len();
        assert_eq!(pods(&s), pods(&start));

        let mut b = start.clone();
        let base = baseline(
            &mut b,
            &c,
            NOW,
            500,
            Duration::from_secs(120),
            &mut Rng::new(1),
        );
        assert!(base.converged && base.violations.is_empty(), "{base:?}");
        assert!(price(&c, &b) < before);
        assert_eq!(pods(&b), pods(&start));
    }

    #[test]
    fn pinned_nodes_stay_and_every_other_pod_is_pending_beside_them() {
        let c = catalog();
        let start = build(&Params::fixed(100, 3000, 1), &c).unwrap();
        let (beside, kept) = pods_beside_pinned(&start);
        // The fixed shape marks one pod do-not-disrupt per 100 nodes.
        assert_eq!(kept, 1);
        assert_eq!(beside.nodes.len(), 1);
        let node = &beside.nodes[0];
        assert!(pinned(node));
        assert!(node
            .pods
            .iter()
            .any(|p| p.annotations.contains_key(labels::DO_NOT_DISRUPT)));
        let all = pods_only(&start).pending_pods.len();
        let bound_there = pods_only(&beside).pending_pods.len();
        assert_eq!(beside.pending_pods.len() + bound_there, all);
        assert!(beside.pending_pods.iter().all(|p| p.node_name.is_none()));
        // A node annotated do-not-disrupt (or v1alpha5's do-not-consolidate)
        // is pinned too; DaemonSet pods never pin.
        let mut n = start.nodes[0].clone();
        n.pods.retain(crate::fragmented::is_daemon_pod);
        assert!(!pinned(&n));
        n.annotations
            .insert(labels::DO_NOT_CONSOLIDATE.into(), "true".into());
        assert!(pinned(&n));
    }
}
