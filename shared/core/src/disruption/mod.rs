//! Disruption: which nodes to remove or replace now, and why — Karpenter
//! v1's disruption controller (`kubernetes-sigs/karpenter`
//! `pkg/controllers/disruption`) as a pure function.
//!
//! Input: the cluster state (`ClusterState`: nodes with their bound pods,
//! NodePools, PodDisruptionBudgets, NodeClaims), the catalog, and
//! [`DisruptOptions`] (the time of the decision, what the pipeline already
//! knows). Output: [`Disruptions`], the public `flotilla disrupt -o json`
//! format: the decisions the controller takes now and every candidate that
//! is blocked, with the reason.
//!
//! Order, as Karpenter's methods: forceful first (spot interruption,
//! expiry: not limited by budgets, PDBs or `do-not-disrupt`), then
//! emptiness (every empty node past `consolidateAfter`, within budgets),
//! drift (each drifted node whose pods fit elsewhere or on replacements),
//! then underutilized consolidation (`consolidation`). Every decision is
//! simulated on the state the earlier ones leave: removed nodes are no
//! destination, moved pods count where they went, replacements are nodes.

mod budget;
mod candidate;
mod consolidation;
mod decision;
mod drift;
pub mod hash;
mod pdb;
mod price;
mod readiness;
pub mod schedule;
mod simulate;

pub use candidate::do_not_disrupt_until;
pub use decision::{Blocked, Decision, Disruptions, Move, PriceChange};
pub use price::Cost;
pub use readiness::{pool_of, readiness, Readiness};

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::Catalog;
use crate::labels;
use crate::model::{ClusterState, DisruptionReason};
use crate::scheduler::{overlays_by_weight, SchedulerOptions};

use budget::Budgets;
use candidate::Candidate;
use pdb::Pdbs;
use simulate::{Sim, Work};

/// Nodes one decision removes at most: the disrupt stage writes a decision
/// and a marker per node in one DynamoDB transaction (at most 100 writes).
/// Larger sets without replacements are cut into several decisions.
pub const MAX_DECISION_NODES: usize = 99;

/// Knobs and pipeline knowledge that are not part of the documents.
#[derive(Debug, Clone, Default)]
pub struct DisruptOptions {
    /// When the decision is taken (Unix seconds).
    pub now: i64,
    /// The scheduler's options for replacements (reservation gate, ICE
    /// cache, reservation counters). Its `now` is set from [`Self::now`].
    pub scheduler: SchedulerOptions,
    /// Node name → since when (Unix seconds) the pipeline knows the node
    /// has been in its current state (its last pod change). Wins over what
    /// the documents show.
    pub since: BTreeMap<String, i64>,
    /// Nodes already being disrupted by decisions in flight, with their
    /// reason: neither candidates nor destinations, and counted against
    /// their NodePool's budgets.
    pub disrupting: BTreeMap<String, DisruptionReason>,
    /// Nodes with a spot interruption warning: replaced at once
    /// (`Interrupted`, forceful).
    pub interrupted: BTreeSet<String>,
    /// Nodes that pods are on their way to (Karpenter's nominated nodes):
    /// the replacements of decisions in flight, and nodes launched for
    /// pending pods that have not bound yet. Empty as the documents show
    /// them, they are neither candidates (an emptiness decision would
    /// remove the capacity the moving pods need) nor destinations (their
    /// room is spoken for); they do not count as disrupting.
    pub nominated: BTreeSet<String>,
}

/// The decisions to take at `opts.now`.
pub fn disrupt(state: &ClusterState, catalog: &Catalog, opts: &DisruptOptions) -> Disruptions {
    let mut run = Run::new(state, catalog, opts);
    run.forceful();
    run.hold_unready();
    run.emptiness();
    run.drift();
    if state.pending_pods.is_empty() {
        consolidation::underutilized(&mut run);
    } else {
        run.out.warnings.push(format!(
            "{} pending pods: underutilized consolidation waits until they are scheduled (it would take room they need)",
            state.pending_pods.len()
        ));
    }
    run.finish()
}

/// One disruption run's state.
pub(crate) struct Run<'a> {
    state: &'a ClusterState,
    catalog: &'a Catalog,
    opts: &'a DisruptOptions,
    cands: Vec<Candidate>,
    /// Per candidate: already in a decision of this run.
    taken: Vec<bool>,
    budgets: Budgets,
    pdbs: Pdbs<'a>,
    work: Work<'a>,
    blocked: BTreeMap<String, String>,
    out: Disruptions,
    /// Node name → candidate.
    by_node: BTreeMap<&'a str, usize>,
}

impl<'a> Run<'a> {
    fn new(state: &'a ClusterState, catalog: &'a Catalog, opts: &'a DisruptOptions) -> Run<'a> {
        let overlays = overlays_by_weight(&state.overlays);
        let cands = candidate::candidates(state, catalog, &overlays, &opts.since, opts.now);
        let mut out_nodes = vec![false; state.nodes.len()];
        let mut counted = vec![false; state.nodes.len()];
        // A node whose NodeClaim is being deleted is being deleted
        // (Karpenter's `StateNode.MarkedForDeletion`).
        let mut claim_deleting = vec![false; state.nodes.len()];
        for c in &cands {
            let claim = c.claim.and_then(|i| state.node_claims.get(i));
            claim_deleting[c.node] = claim.is_some_and(|cl| cl.deleting);
        }
        for (i, n) in state.nodes.iter().enumerate() {
            if opts.disrupting.contains_key(&n.name)
                || n.deleting
                || claim_deleting[i]
                || n.taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT)
            {
                out_nodes[i] = true;
                counted[i] = true;
            } else if opts.nominated.contains(&n.name) {
                out_nodes[i] = true;
            }
        }
        let (nodes, disrupting) = budget_counts(state, &cands, &counted);
        let mut warnings = Vec::new();
        let budgets = Budgets::new(
            &state.node_pools,
            &nodes,
            &disrupting,
            opts.now,
            &mut warnings,
        );
        let mut sched = opts.scheduler.clone();
        sched.now = Some(opts.now);
        let taken = cands.iter().map(|c| out_nodes[c.node]).collect();
        // Nodes not Ready or not initialized take no moved pods (Karpenter
        // refuses a decision that relies on an uninitialized node).
        for (i, n) in state.nodes.iter().enumerate() {
            let pool = readiness::pool_of(n, &state.node_pools);
            if !readiness::readiness(n, pool).is_ready() {
                out_nodes[i] = true;
            }
        }
        let by_node = cands
            .iter()
            .enumerate()
            .map(|(i, c)| (state.nodes[c.node].name.as_str(), i))
            .collect();
        // The pods of nodes already disrupting are being evicted: their
        // PDBs allow that many fewer evictions to this run.
        let mut pdbs = Pdbs::new(state);
        let draining = state.nodes.iter().zip(&counted).filter(|(_, &c)| c);
        pdbs.consume(draining.flat_map(|(n, _)| n.pods.iter().filter(|p| candidate::moves(p))));
        Run {
            state,
            catalog,
            opts,
            taken,
            budgets,
            pdbs,
            work: Work::new(state, catalog, &sched, out_nodes),
            cands,
            blocked: BTreeMap::new(),
            by_node,
            out: Disruptions {
                warnings,
                ..Disruptions::default()
            },
        }
    }

    fn node_name(&self, c: usize) -> &'a str {
        &self.state.nodes[self.cands[c].node].name
    }

    fn pool_name(&self, c: usize) -> &'a str {
        &self.state.node_pools[self.cands[c].pool].name
    }

    fn block(&mut self, c: usize, reason: String) {
        let name = self.node_name(c).to_string();
        self.blocked.entry(name).or_insert(reason);
    }

    /// Whether candidate `c` is past its NodePool's `consolidateAfter`
    /// and the pool's policy allows `reason` (Empty / Underutilized). A
    /// static NodePool's nodes never are (its replica count decides how
    /// many it has).
    fn consolidatable(&self, c: usize, reason: DisruptionReason) -> bool {
        let cand = &self.cands[c];
        let pool = &self.state.node_pools[cand.pool];
        if pool.replicas.is_some() {
            return false;
        }
        let d = &pool.disruption;
        let policy_ok = match d.consolidation_policy.as_deref() {
            Some("WhenEmptyOrUnderutilized" | "WhenUnderutilized") => true,
            Some("WhenEmpty") => reason == DisruptionReason::Empty,
            _ => false,
        };
        let Some(after) = d.consolidate_after_seconds else {
            return false;
        };
        policy_ok && !self.settling(c, after)
    }

    /// Whether candidate `c`'s pods changed less than `after` seconds (its
    /// NodePool's `consolidateAfter`) before now: it is still settling.
    fn settling(&self, c: usize, after: u64) -> bool {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        (self.cands[c].since).is_some_and(|s| s.saturating_add(after) > self.opts.now)
    }

    /// What blocks a graceful disruption of candidate `c` now (the
    /// do-not-disrupt annotations, a PodDisruptionBudget whose allowance,
    /// less what this run's decisions evict, does not cover its pods).
    fn graceful_blocker(&self, c: usize) -> Option<String> {
        if let Some(b) = &self.cands[c].blocker {
            return Some(b.clone());
        }
        self.pdbs.blocker(self.movable_pods(c))
    }

    /// The pods a disruption of candidate `c` evicts.
    fn movable_pods(&self, c: usize) -> impl Iterator<Item = &'a crate::model::Pod> + '_ {
        let node = &self.state.nodes[self.cands[c].node];
        self.cands[c].movable.iter().map(move |&k| &node.pods[k])
    }

    /// Candidate `c` joins a decision: out of the budgets and PDB
    /// allowances, no destination any more.
    fn take(&mut self, c: usize) {
        self.taken[c] = true;
        self.budgets.take(self.cands[c].pool, 1);
        let pods: Vec<&crate::model::Pod> = self.movable_pods(c).collect();
        self.pdbs.consume(pods);
        self.work.remove(self.cands[c].node);
    }

    /// Record a decision over candidates `cs` (one NodePool) with the
    /// simulation that placed their pods (`None`: nothing to move), and
    /// apply it to the working state.
    fn decide(&mut self, reason: DisruptionReason, cs: &[usize], sim: Option<Sim>) {
        let replaces = sim.as_ref().is_some_and(|s| !s.replacements.is_empty());
        if cs.len() <= MAX_DECISION_NODES || replaces {
            return self.decide_one(reason, cs, sim);
        }
        // Deletes only: each part carries the moves of its own nodes' pods.
        let node_of_pod = self.candidate_of_pod(cs);
        for part in cs.chunks(MAX_DECISION_NODES) {
            let sim = sim.as_ref().map(|s| {
                let mut s = s.clone();
                s.moves
                    .retain(|m| node_of_pod.get(&m.pod).is_some_and(|c| part.contains(c)));
                s
            });
            self.decide_one(reason, part, sim);
        }
    }

    /// The candidate of `cs` each of their movable pods (`namespace/name`)
    /// is bound on.
    fn candidate_of_pod(&self, cs: &[usize]) -> BTreeMap<String, usize> {
        cs.iter()
            .flat_map(|&c| {
                let node = &self.state.nodes[self.cands[c].node];
                self.cands[c]
                    .movable
                    .iter()
                    .map(move |&k| (node.pods[k].key(), c))
            })
            .collect()
    }

    /// One decision: remove the nodes of `cs` as `sim` says.
    fn decide_one(&mut self, reason: DisruptionReason, cs: &[usize], sim: Option<Sim>) {
        let Some(&first) = cs.first() else {
            return;
        };
        let pool = &self.state.node_pools[self.cands[first].pool];
        let mut nodes: Vec<String> = cs.iter().map(|&c| self.node_name(c).to_string()).collect();
        nodes.sort();
        let before = cs
            .iter()
            .filter_map(|&c| self.cands[c].cost)
            .fold(Cost::default(), std::ops::Add::add);
        for &c in cs {
            self.take(c);
        }
        let node_idx: Vec<usize> = cs.iter().map(|&c| self.cands[c].node).collect();
        let (moves, replacements, after) = match sim {
            Some(s) => {
                let after = s.cost();
                let s = self.work.apply(&node_idx, s);
                (s.moves, s.replacements, after)
            }
            None => (vec![], vec![], Cost::default()),
        };
        // A node that receives pods is no candidate any more in this run:
        // its pods are no longer what the candidate recorded.
        for m in &moves {
            if let Some(&c) = self.by_node.get(m.to.as_str()) {
                self.taken[c] = true;
            }
        }
        self.out.decisions.push(Decision {
            reason,
            node_pool: pool.name.clone(),
            nodes,
            replacements,
            moves,
            price: PriceChange::of(before, after),
            termination_grace_period_seconds: pool.disruption.termination_grace_period_seconds,
            detail: None,
        });
    }

    /// Spot interruptions, then expired nodes: replaced whatever blocks
    /// them (forceful), one decision each.
    fn forceful(&mut self) {
        for c in 0..self.cands.len() {
            if self.taken[c] {
                continue;
            }
            let name = self.node_name(c);
            let reason = if self.opts.interrupted.contains(name) {
                DisruptionReason::Interrupted
            } else if self.expired(c) {
                DisruptionReason::Expired
            } else {
                continue;
            };
            let node = self.cands[c].node;
            let sim = self.work.simulate(&[node]);
            for u in &sim.unschedulable {
                self.out.warnings.push(format!(
                    "{} node {name}: pod {} has nowhere to go: {}",
                    reason.as_str(),
                    u.pod,
                    u.reason
                ));
            }
            self.decide(reason, &[c], Some(sim));
        }
    }

    fn expired(&self, c: usize) -> bool {
        let cand = &self.cands[c];
        let claim_expiry = cand
            .claim
            .and_then(|i| self.state.node_claims.get(i))
            .and_then(|cl| cl.expire_after_seconds);
        let expire = claim_expiry.or(self.state.node_pools[cand.pool]
            .disruption
            .expire_after_seconds);
        match (expire, cand.created_at) {
            (Some(e), Some(t)) => {
                t.saturating_add(i64::try_from(e).unwrap_or(i64::MAX)) <= self.opts.now
            }
            _ => false,
        }
    }

    /// After the forceful decisions: candidates that are not Ready or not
    /// initialized are no candidates of graceful disruption (reported
    /// blocked, with why).
    fn hold_unready(&mut self) {
        for c in 0..self.cands.len() {
            if self.taken[c] {
                continue;
            }
            let node = &self.state.nodes[self.cands[c].node];
            let pool = &self.state.node_pools[self.cands[c].pool];
            if let Some(why) = readiness::readiness(node, Some(pool)).why() {
                let why = why.to_string();
                self.taken[c] = true;
                self.block(c, why);
            }
        }
    }

    /// Empty nodes (only DaemonSet pods left) past `consolidateAfter`: one
    /// decision per NodePool, dearest nodes first within the budget.
    fn emptiness(&mut self) {
        let mut by_pool: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for c in 0..self.cands.len() {
            if self.taken[c]
                || !self.cands[c].movable.is_empty()
                || !self.consolidatable(c, DisruptionReason::Empty)
            {
                continue;
            }
            if let Some(b) = self.graceful_blocker(c) {
                self.block(c, b);
                continue;
            }
            by_pool.entry(self.cands[c].pool).or_default().push(c);
        }
        for (pool, mut cs) in by_pool {
            cs.sort_by(|&a, &b| {
                let price = |c: usize| self.cands[c].cost.map_or(0.0, |k| k.dollars + k.reserved);
                price(b)
                    .total_cmp(&price(a))
                    .then_with(|| self.node_name(a).cmp(self.node_name(b)))
            });
            let room = self.budgets.remaining(pool, DisruptionReason::Empty);
            let keep = cs.len().min(room);
            for &c in &cs[keep..] {
                let why =
                    self.budgets
                        .blocked_reason(pool, self.pool_name(c), DisruptionReason::Empty);
                self.block(c, why);
            }
            cs.truncate(keep);
            self.decide(DisruptionReason::Empty, &cs, None);
        }
    }

    /// The order drifted candidates are taken in, Karpenter's
    /// (`Drift.ComputeCommands`): empty ones first (they need no
    /// replacement, and a non-empty node drained first could put its pods
    /// on them, to be moved again), then earliest drift first: the
    /// `lastTransitionTime` of a NodeClaim's `Drifted` condition, else the
    /// node's launch (its drift is found by Flotilla, no earlier than
    /// that); the name breaks ties.
    fn drift_order(&self, c: usize) -> (bool, i64, &'a str) {
        let cand = &self.cands[c];
        let since = cand
            .claim
            .and_then(|i| self.state.node_claims.get(i))
            .and_then(|cl| cl.drifted_since.filter(|_| cl.drifted))
            .or(cand.created_at)
            .unwrap_or(i64::MIN);
        (!cand.movable.is_empty(), since, self.node_name(c))
    }

    /// How long the drain of candidate `c` may be held up before it goes
    /// anyway: its NodeClaim's `terminationGracePeriod` (Karpenter copies
    /// the NodePool's at launch), else its NodePool's.
    fn grace_period(&self, c: usize) -> Option<u64> {
        let cand = &self.cands[c];
        cand.claim
            .and_then(|i| self.state.node_claims.get(i))
            .and_then(|cl| cl.termination_grace_period_seconds)
            .or(self.state.node_pools[cand.pool]
                .disruption
                .termination_grace_period_seconds)
    }

    /// Drifted nodes, empty ones first, then earliest drift first (see
    /// [`Self::drift_order`]), each replaced before it is drained;
    /// within budgets, PDBs and do-not-disrupt; blocked when a pod would
    /// fit nowhere. Drift is Karpenter's eventual disruption: where a
    /// terminationGracePeriod bounds the drain, do-not-disrupt pods and
    /// PDBs do not keep the node (the drain waits for them until that
    /// deadline); do-not-disrupt on the node or its NodeClaim still does.
    fn drift(&mut self) {
        // A static NodePool's drifted nodes are Karpenter's StaticDrift's
        // (a replacement from the template per node), which Flotilla does
        // not do: they are no candidates here.
        let mut drifted: Vec<(usize, String)> = (0..self.cands.len())
            .filter(|&c| !self.taken[c])
            .filter(|&c| self.state.node_pools[self.cands[c].pool].replicas.is_none())
            .filter_map(|c| {
                drift::drifted(self.state, self.catalog, &self.cands[c]).map(|w| (c, w))
            })
            .collect();
        drifted.sort_by_key(|(c, _)| self.drift_order(*c));
        for (c, why) in drifted {
            if self.taken[c] {
                continue; // it received an earlier decision's pods
            }
            let grace = self.grace_period(c);
            let blocker = match grace {
                Some(_) => self.cands[c].node_blocker.clone(),
                None => self.graceful_blocker(c),
            };
            if let Some(b) = blocker {
                self.block(c, b);
                continue;
            }
            let pool = self.cands[c].pool;
            if self.budgets.remaining(pool, DisruptionReason::Drifted) == 0 {
                let why =
                    self.budgets
                        .blocked_reason(pool, self.pool_name(c), DisruptionReason::Drifted);
                self.block(c, why);
                continue;
            }
            let sim = match grace {
                Some(_) => self.simulate_reschedulable(c),
                None => self.work.simulate(&[self.cands[c].node]),
            };
            if let Some(u) = sim.unschedulable.first() {
                let why = format!("drifted, but pod {} would fit nowhere: {}", u.pod, u.reason);
                self.block(c, why);
                continue;
            }
            let decided = self.out.decisions.len();
            self.decide(DisruptionReason::Drifted, &[c], Some(sim));
            for d in &mut self.out.decisions[decided..] {
                d.detail = Some(why.clone());
                d.termination_grace_period_seconds = grace;
            }
        }
    }

    /// Where the pods of candidate `c` that can be evicted now would go:
    /// those a do-not-disrupt annotation or a fully blocking PDB holds
    /// (see [`Pdbs::fully_block`]) wait for the drain's deadline, and no
    /// capacity is made for them, as Karpenter's simulation leaves out
    /// pods that are not `IsCurrentlyReschedulable`.
    fn simulate_reschedulable(&mut self, c: usize) -> Sim {
        let now = self.opts.now;
        let held: BTreeSet<String> = self
            .movable_pods(c)
            .filter(|p| candidate::pod_blocker(p, now).is_some() || self.pdbs.fully_block(p))
            .map(|p| p.key())
            .collect();
        let node = self.cands[c].node;
        self.work
            .simulate_leaving(&[node], &|p| held.contains(&p.key()))
    }

    fn finish(mut self) -> Disruptions {
        let decided: BTreeSet<&str> = self
            .out
            .decisions
            .iter()
            .flat_map(|d| d.nodes.iter().map(String::as_str))
            .collect();
        self.out.blocked = self
            .blocked
            .iter()
            .filter(|(n, _)| !decided.contains(n.as_str()))
            .map(|(n, r)| Blocked {
                node: n.clone(),
                reason: r.clone(),
            })
            .collect();
        self.out
    }
}

/// Per NodePool, the nodes its budgets count and those of them counted as
/// disrupting, Karpenter's way (`BuildDisruptionBudgetMapping`): nodes not
/// initialized are not counted at all; of the others, those disrupting
/// (`counted`: in flight, tainted `karpenter.sh/disrupted`, being deleted:
/// the node or its NodeClaim)
/// or not Ready count against the allowance.
fn budget_counts(
    state: &ClusterState,
    cands: &[Candidate],
    counted: &[bool],
) -> (Vec<usize>, Vec<usize>) {
    let n_pools = state.node_pools.len();
    let mut nodes = vec![0usize; n_pools];
    let mut disrupting = vec![0usize; n_pools];
    for c in cands {
        let node = &state.nodes[c.node];
        match readiness::readiness(node, state.node_pools.get(c.pool)) {
            Readiness::Uninitialized(_) => continue,
            Readiness::NotReady(_) => disrupting[c.pool] += 1,
            Readiness::Ready if counted[c.node] => disrupting[c.pool] += 1,
            Readiness::Ready => {}
        }
        nodes[c.pool] += 1;
    }
    (nodes, disrupting)
}

#[cfg(test)]
mod tests;
