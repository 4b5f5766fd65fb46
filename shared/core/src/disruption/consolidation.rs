//! Underutilized consolidation: remove nodes whose pods fit elsewhere, or
//! replace several nodes by fewer or cheaper ones.
//!
//! Karpenter tries multi-node consolidation over at most 100 candidates
//! (binary search on a prefix, one replacement at most, a 1-minute
//! timeout), then single nodes one by one (3 minutes), and on large
//! clusters often finishes neither. Here, deterministically and with a
//! bounded number of scheduling simulations:
//!
//! 1. **Delete.** A resource sketch (cpu, memory, pod slots, taints and
//!    node selectors; first fit into the fullest other node) picks, emptiest
//!    first, the nodes whose pods fit into the room the others leave; the
//!    scheduler verifies the whole set, and the largest prefix that places
//!    every pod on existing nodes is removed (binary search, like
//!    Karpenter's).
//! 2. **Replace.** The rest, most wasteful first (price minus the least
//!    the pool's capacity for their pods could cost), in prefixes of
//!    halving size: the scheduler packs each prefix's pods onto the room
//!    left and the fewest new NodeClaims (first fit, as Karpenter's
//!    simulation does); when that is acceptable, its own cost rule (repack,
//!    exact small packings) may find cheaper NodeClaims within the same
//!    count, or, when a node of the set is not spot, on up to
//!    [`SPLIT_MAX`] NodeClaims per node and [`MAX_DECISION_REPLACEMENTS`]
//!    per decision (a split, taken only when it saves
//!    [`SPLIT_MIN_SAVING`] of the set's price more than the packing). The
//!    smallest prefix that captures 99% of the best saving is
//!    taken (repeated while a prefix saves) — saving per disruption, not
//!    disruption for its own sake.
//! 3. **Single nodes**, most wasteful first, only where a saving is
//!    possible at all (the pods fit in other nodes' room by the sketch, or
//!    the pool's cheapest capacity for them costs less than the node),
//!    each simulated Karpenter's way (first fit, at most one new
//!    NodeClaim), at most [`MAX_SINGLE_MISSES`] simulations that save
//!    nothing. Where the pods' cheapest capacity would save
//!    [`SPLIT_MIN_SAVING`], also split (Karpenter's split fallback, opt-in
//!    there as `MAX_CONSOLIDATION_REPLACEMENTS`): first fit onto nodes
//!    priced under the one replacement's price, then half and a quarter of
//!    it, then the cost rule's own plan, taken when it saves
//!    [`SPLIT_MIN_SAVING`] of the node's price more
//!    than the one replacement; at most [`MAX_SPLIT_ATTEMPTS`] splits per
//!    run, and none after [`MAX_SPLIT_MISSES`] in a row found nothing.
//!
//! Every decision saves at least `MIN_RELATIVE_SAVING` of what it removes;
//! replacements keep only instance types cheaper than what they replace,
//! so whatever EC2 launches saves. Spot-to-spot replacement (any node
//! removed is spot and a replacement is): every spot replacement cut to
//! its [`SPOT_TO_SPOT_MIN_TYPES`] cheapest types, the dearest of each list
//! summing to less than the nodes removed (see `spot_to_spot_types`); for
//! one node and one replacement that is Karpenter's rule. Karpenter also
//! merges several spot nodes into one without any such check, and its
//! merges lock pods into large spot nodes no later decision can shrink;
//! with the check, merges and splits of spot nodes both save whatever EC2
//! launches, so nothing they launch is consolidated again at once.

use std::collections::BTreeMap;

use crate::catalog::{CapacityType, Offering};
use crate::labels;
use crate::model::{untolerated, DisruptionReason, Node, Pod};
use crate::plan::NodeClaimPlan;
use crate::scheduler::labels_satisfy;

use super::price::{Cost, UnitPrices};
use super::simulate::{replacement_cost, Ask, Sim};
use super::Run;

/// Single-node simulations that find no saving before the search stops.
pub const MAX_SINGLE_MISSES: usize = 48;
/// Karpenter's `MinInstanceTypesForSpotToSpotConsolidation`.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;
/// Replace passes per run (each takes one decision, or stops the search).
const MAX_REPLACE_ROUNDS: usize = 8;
/// Share of the best saving the chosen replace set must reach.
const GOOD_ENOUGH: f64 = 0.99;
/// New NodeClaims a split may launch per node it removes.
pub const SPLIT_MAX: usize = 100;
/// New NodeClaims one decision may launch. The pipeline's decision record
/// names each replacement (at most 63 characters: 1,000 names take 66 KB
/// of a 400 KB DynamoDB item; their plans are stored beside it) and one
/// run of its stage writes their NodeClaim records; a larger split is
/// taken over several decisions and runs.
pub const MAX_DECISION_REPLACEMENTS: usize = 1_000;
// The names (63 characters, quoted, comma-separated) stay well inside one
// item.
const _: () = assert!(MAX_DECISION_REPLACEMENTS * (63 + 3) < 100 * 1024);
/// Share of the removed nodes' price a split must save.
pub const SPLIT_MIN_SAVING: f64 = 0.05;
/// Price limits a split tries (each half the one before).
const SPLIT_LADDER: usize = 3;
/// Single-node splits tried per run (Karpenter's
/// `consolidation-split-max-attempts`: each costs [`SPLIT_LADDER`] + 1
/// simulations); the next run tries the next ones.
pub const MAX_SPLIT_ATTEMPTS: usize = 32;
/// Split attempts in a row that find no split before a run stops trying
/// (candidates come most wasteful first: on a consolidated cluster every
/// attempt fails, and each costs [`SPLIT_LADDER`] + 1 simulations).
pub const MAX_SPLIT_MISSES: usize = 8;

pub(crate) fn underutilized(run: &mut Run) {
    let units: Vec<UnitPrices> = run
        .state
        .node_pools
        .iter()
        .map(|p| UnitPrices::of(run.catalog, p, run.opts.scheduler.reserved_capacity))
        .collect();
    let mut eligible: Vec<usize> = Vec::new();
    for c in 0..run.cands.len() {
        let cand = &run.cands[c];
        if run.taken[c]
            || cand.movable.is_empty()
            || cand.cost.is_none()
            || cand.do_not_consolidate
            || !run.consolidatable(c, DisruptionReason::Underutilized)
        {
            continue;
        }
        if let Some(b) = run.graceful_blocker(c) {
            run.block(c, b);
            continue;
        }
        eligible.push(c);
    }
    block_by_budget(run, &eligible);
    eligible.retain(|&c| !run.blocked.contains_key(run.node_name(c)));
    // A node still under its NodePool's consolidateAfter (its pods changed
    // recently) receives no moved pod: Karpenter's consolidation
    // simulations (`IsConsolidationSimulation`) skip it as a destination,
    // so consolidation does not pile pods onto a node that is settling.
    // Replacements are new nodes and are not held back.
    for c in 0..run.cands.len() {
        let after = (run.state.node_pools[run.cands[c].pool].disruption)
            .consolidate_after_seconds
            .filter(|&a| a > 0);
        if after.is_some_and(|a| run.settling(c, a)) {
            let node = run.cands[c].node;
            run.work.remove(node);
        }
    }
    let waste = |run: &Run, c: usize| {
        let cost = run.cands[c].cost.unwrap_or_default();
        cost.dollars + cost.reserved * 1e-3 - pods_bound(run, &units, c)
    };
    let mut by_waste = eligible.clone();
    by_waste.sort_by(|&a, &b| {
        waste(run, b)
            .total_cmp(&waste(run, a))
            .then_with(|| run.node_name(a).cmp(run.node_name(b)))
    });

    delete_pass(run, &eligible);
    // Each replace decision leaves the rest to repack again: what one run
    // leaves behind, the next would find (churn), so repeat until none.
    for _ in 0..MAX_REPLACE_ROUNDS {
        if !replace_pass(run, &by_waste, &units) {
            break;
        }
    }
    single_pass(run, &by_waste, &units);
    block_by_pdb(run, &eligible);
    block_by_budget(run, &eligible);
}

/// Report the candidates of `cs` still free whose pods the
/// PodDisruptionBudgets no longer allow to evict: the decisions of this
/// run used up what they allowed.
fn block_by_pdb(run: &mut Run, cs: &[usize]) {
    for &c in cs {
        if run.taken[c] {
            continue;
        }
        if let Some(why) = run.graceful_blocker(c) {
            run.block(c, why);
        }
    }
}

/// Report the candidates of `cs` still free in a NodePool whose
/// Underutilized budget allows no more disruptions now (a scheduled
/// `nodes: "0"`, or used up by this run): blocked by the budget.
fn block_by_budget(run: &mut Run, cs: &[usize]) {
    for &c in cs {
        let pool = run.cands[c].pool;
        if run.taken[c] || run.budgets.remaining(pool, DisruptionReason::Underutilized) > 0 {
            continue;
        }
        let why =
            run.budgets
                .blocked_reason(pool, run.pool_name(c), DisruptionReason::Underutilized);
        run.block(c, why);
    }
}

/// Candidates of `order` still free, in order, as many per NodePool as
/// its Underutilized budget allows and whose pods' PodDisruptionBudgets
/// each allow an eviction now (Karpenter's per-node rule: the drains of
/// the nodes removed together evict through the Eviction API, one at a
/// time as each PDB allows): any subset of the list may be removed at
/// once.
fn admissible(run: &Run, order: &[usize]) -> Vec<usize> {
    let mut per_pool: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for &c in order {
        if run.taken[c] {
            continue;
        }
        let pool = run.cands[c].pool;
        let n = per_pool.entry(pool).or_insert(0);
        if *n < run.budgets.remaining(pool, DisruptionReason::Underutilized)
            && run.pdbs.blocker(run.movable_pods(c)).is_none()
        {
            *n += 1;
            out.push(c);
        }
    }
    out
}

/// Take the candidates `cs` with `sim`, one decision per NodePool.
fn decide_grouped(run: &mut Run, cs: &[usize], sim: Sim) {
    let mut pools: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &c in cs {
        pools.entry(run.cands[c].pool).or_default().push(c);
    }
    if pools.len() == 1 {
        run.decide(DisruptionReason::Underutilized, cs, Some(sim));
        return;
    }
    // Split the joint simulation: each pool's decision carries the moves
    // of its own nodes' pods (deletes only: no replacements to split).
    let node_of_pod = run.candidate_of_pod(cs);
    let mut first = true;
    for (_, group) in pools {
        let mut part = sim.clone();
        part.moves
            .retain(|m| node_of_pod.get(&m.pod).is_some_and(|c| group.contains(c)));
        if !first {
            part.replacements.clear();
        }
        first = false;
        run.decide(DisruptionReason::Underutilized, &group, Some(part));
    }
}

/// Dense room for the sketch: cpu millis, memory bytes, pod slots.
#[derive(Clone, Copy)]
struct Room([i64; 3]);

fn dense(r: &crate::Resources) -> Room {
    Room([
        r.cpu().millis(),
        r.memory().millis() / 1000,
        r.pods().millis() / 1000,
    ])
}

/// Whether `pod` may run on `node` as far as the sketch checks.
fn sketch_allows(pod: &Pod, node: &Node) -> bool {
    if node.unschedulable || untolerated(&node.taints, &pod.tolerations).is_some() {
        return false;
    }
    if labels_satisfy(&node.labels, &pod.node_selector).is_err() {
        return false;
    }
    pod.required_terms.is_empty()
        || pod
            .required_terms
            .iter()
            .any(|t| labels_satisfy(&node.labels, t).is_ok())
}

/// Pass 1: remove whole nodes whose pods fit into the others' room.
fn delete_pass(run: &mut Run, eligible: &[usize]) {
    let mut order: Vec<usize> = eligible.to_vec();
    // Emptiest first; between equally used nodes, the one with fewer pods
    // to move (Karpenter orders candidates by price per disruption cost,
    // which counts the pods evicted).
    order.sort_by(|&a, &b| {
        run.cands[a]
            .utilization
            .total_cmp(&run.cands[b].utilization)
            .then_with(|| run.cands[a].movable.len().cmp(&run.cands[b].movable.len()))
            .then_with(|| run.node_name(a).cmp(run.node_name(b)))
    });
    // Emptiest first into the budgets and PDB allowances.
    let order = admissible(run, &order);
    let chosen = sketch_deletes(run, &order);
    if chosen.is_empty() {
        return;
    }
    // The largest prefix the scheduler places on existing nodes alone.
    let nodes =
        |k: usize| -> Vec<usize> { chosen[..k].iter().map(|&c| run.cands[c].node).collect() };
    let full = nodes(chosen.len());
    let sim = run.work.simulate(&full);
    if sim.all_placed() && sim.replacements.is_empty() {
        decide_grouped(run, &chosen, sim);
        return;
    }
    let (mut lo, mut hi) = (0usize, chosen.len());
    let mut best: Option<(usize, Sim)> = None;
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        let ns = nodes(mid);
        let sim = run.work.simulate(&ns);
        if sim.all_placed() && sim.replacements.is_empty() {
            lo = mid;
            best = Some((mid, sim));
        } else {
            hi = mid;
        }
    }
    if let Some((k, sim)) = best {
        let cs = chosen[..k].to_vec();
        decide_grouped(run, &cs, sim);
    }
}

/// The sketch's picks, in `order`: nodes whose movable pods all fit (first
/// fit, fullest node first) into nodes that are neither removed nor
/// themselves picked; a node that received pods is no longer removable.
fn sketch_deletes(run: &Run, order: &[usize]) -> Vec<usize> {
    let n_nodes = run.state.nodes.len();
    let mut room: Vec<Room> = (0..n_nodes)
        .map(|i| {
            let n = run.work.node(i);
            let mut used = crate::Resources::new();
            for p in &n.pods {
                used.add_assign(&p.requests);
            }
            dense(&n.allocatable.minus(&used))
        })
        .collect();
    let mut dest: Vec<usize> = (0..n_nodes).filter(|&i| !run.work.is_out(i)).collect();
    let fill = |r: &Room, n: &Node| {
        let a = dense(&n.allocatable);
        1.0 - (r.0[0] as f64 / a.0[0].max(1) as f64)
    };
    dest.sort_by(|&a, &b| {
        fill(&room[b], run.work.node(b))
            .total_cmp(&fill(&room[a], run.work.node(a)))
            .then(a.cmp(&b))
    });
    let mut removed = vec![false; n_nodes];
    let mut pinned = vec![false; n_nodes];
    let mut chosen = Vec::new();
    for &c in order {
        let cand = &run.cands[c];
        if pinned[cand.node] {
            continue;
        }
        let node = &run.state.nodes[cand.node];
        let mut pods: Vec<&Pod> = cand.movable.iter().map(|&k| &node.pods[k]).collect();
        pods.sort_by_key(|p| std::cmp::Reverse(dense(&p.requests).0));
        let mut trial = room.clone();
        let mut used_dest = Vec::new();
        let mut ok = true;
        for p in pods {
            let need = dense(&p.requests);
            let hit = dest.iter().copied().find(|&d| {
                d != cand.node
                    && !removed[d]
                    && (0..3).all(|k| trial[d].0[k] >= need.0[k])
                    && sketch_allows(p, run.work.node(d))
            });
            match hit {
                Some(d) => {
                    for k in 0..3 {
                        trial[d].0[k] -= need.0[k];
                    }
                    used_dest.push(d);
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            room = trial;
            removed[cand.node] = true;
            for d in used_dest {
                pinned[d] = true;
            }
            chosen.push(c);
        }
    }
    chosen
}

/// The decision cost of candidates `cs`.
fn cost_of(run: &Run, cs: &[usize]) -> Cost {
    cs.iter()
        .filter_map(|&c| run.cands[c].cost)
        .fold(Cost::default(), std::ops::Add::add)
}

/// Why a simulation of candidates is not taken.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rejected {
    /// Pods left over, too many NodeClaims, or too small a saving.
    NoSaving,
    /// Spot-to-spot without Karpenter's flexibility: so many instance
    /// types of a spot replacement cost less than the nodes removed.
    SpotToSpot { cheaper: usize },
}

impl Rejected {
    /// The `blocked` sentence for a single node, when the reason is worth
    /// reporting (Karpenter's `Unconsolidatable` event).
    fn sentence(self) -> Option<String> {
        match self {
            Rejected::NoSaving => None,
            Rejected::SpotToSpot { cheaper } => Some(format!(
                "spot-to-spot consolidation needs at least {SPOT_TO_SPOT_MIN_TYPES} cheaper instance types; {cheaper} found"
            )),
        }
    }
}

/// Check and shape a replacing simulation of candidates `cs`: every pod
/// placed, at most [`split_cap`] NodeClaims (a split saving
/// [`SPLIT_MIN_SAVING`]), a saving, spot-to-spot only with the
/// flexibility above; replacement types narrowed to cheaper ones.
fn acceptable(run: &Run, cs: &[usize], mut sim: Sim) -> Result<Sim, Rejected> {
    if !sim.all_placed() || sim.replacements.len() > split_cap(cs.len()) {
        return Err(Rejected::NoSaving);
    }
    let before = cost_of(run, cs);
    let after = sim.cost();
    if !before.worth_replacing_by(after) {
        return Err(Rejected::NoSaving);
    }
    if sim.replacements.len() > cs.len()
        && before.dollars - after.dollars < before.dollars * SPLIT_MIN_SAVING
    {
        return Err(Rejected::NoSaving);
    }
    let spot_candidate = cs.iter().any(|&c| on_spot(run, c));
    let spot_replacement = sim
        .replacements
        .iter()
        .any(|r| r.price.capacity_type == CapacityType::Spot);
    let n = sim.replacements.len().max(1) as f64;
    let spare = (before.dollars - after.dollars).max(0.0) / n;
    // Spot-to-spot: what the replacements may cost whatever types EC2
    // picks from their lists.
    let mut worst = 0.0;
    let mut cheaper = usize::MAX;
    for r in &mut sim.replacements {
        if spot_candidate && r.price.capacity_type == CapacityType::Spot {
            narrow(run, r, f64::INFINITY);
            cheaper = cheaper.min(cheaper_types(run, r, before.dollars - before.volumes));
            let Some(dearest) = spot_to_spot_types(run, r) else {
                return Err(Rejected::SpotToSpot { cheaper });
            };
            worst += dearest + r.volume_price;
            continue;
        }
        let cap = if r.price.capacity_type == CapacityType::Reserved {
            f64::INFINITY
        } else {
            r.price.min + spare
        };
        if !narrow(run, r, cap) {
            return Err(Rejected::NoSaving);
        }
        worst += replacement_cost(r).dollars;
    }
    if spot_candidate && spot_replacement && worst >= before.dollars - 1e-9 {
        return Err(Rejected::SpotToSpot { cheaper });
    }
    Ok(sim)
}

/// How many of replacement `r`'s instance types cost less than `price`
/// $/h (the instances it replaces).
fn cheaper_types(run: &Run, r: &NodeClaimPlan, price: f64) -> usize {
    r.instance_types
        .iter()
        .filter(|t| offering_price(run, r, t).is_some_and(|p| p < price - 1e-9))
        .count()
}

/// Karpenter's spot-to-spot flexibility for a spot replacement `r` of
/// spot capacity: its list cut to the [`SPOT_TO_SPOT_MIN_TYPES`] cheapest
/// types (so the instance EC2 launches is one of them and is not itself
/// consolidated at once), if it has that many; the price of the dearest
/// of them. Karpenter asks for 15 types cheaper than the one node it
/// replaces; with several replacements (a split) the sum of these
/// dearest prices must stay under the removed node's, so the decision
/// saves whatever EC2 launches (for one replacement that is Karpenter's
/// rule).
fn spot_to_spot_types(run: &Run, r: &mut NodeClaimPlan) -> Option<f64> {
    // Karpenter keeps max(15, the types minValues needs).
    let keep = SPOT_TO_SPOT_MIN_TYPES.max(min_values_prefix(run, r, &r.instance_types)?);
    if r.instance_types.len() < keep {
        return None;
    }
    let cut: Vec<String> = r.instance_types.iter().take(keep).cloned().collect();
    let dearest = cut
        .iter()
        .filter_map(|t| offering_price(run, r, t))
        .max_by(f64::total_cmp)?;
    r.instance_types = cut.into();
    Some(dearest)
}

/// Where the pods of `nodes` (the nodes of `cs`) go if they are replaced:
/// first the scheduler packing the fewest NodeClaims (Karpenter's first
/// fit, [`Ask::packed`]); when that is
/// acceptable, also the scheduler's own cost rule, which may place them on
/// cheaper (smaller) NodeClaims and is taken when it is acceptable too and
/// cheaper. A packing that needs too many NodeClaims or saves nothing is
/// not tried the costlier way (spreading needs more NodeClaims still), nor
/// one that launches nothing.
fn judge(run: &mut Run, cs: &[usize], nodes: &[usize], units: &[UnitPrices]) -> Option<Sim> {
    let packed = run.work.simulate_as(nodes, Ask::packed(cs.len()));
    let best = acceptable(run, cs, packed).ok();
    if best.as_ref().is_some_and(|p| p.replacements.is_empty()) {
        return best; // nothing launched: nothing cheaper to find
    }
    let cap = if may_split(run, cs, units) {
        split_cap(cs.len())
    } else if best.is_some() {
        cs.len()
    } else {
        return None;
    };
    let spread = run.work.simulate_as(nodes, Ask::cheapest(cap));
    let spread = acceptable(run, cs, spread).ok();
    // A split (more NodeClaims than nodes) must beat the packing by
    // SPLIT_MIN_SAVING of what is removed: nodes are not churned into
    // more for a small difference.
    let margin = match &spread {
        Some(s) if s.replacements.len() > cs.len() => cost_of(run, cs).dollars * SPLIT_MIN_SAVING,
        _ => 0.0,
    };
    cheaper(best, spread, margin)
}

/// NodeClaims a split of `nodes` nodes may launch.
fn split_cap(nodes: usize) -> usize {
    nodes
        .saturating_mul(SPLIT_MAX)
        .min(MAX_DECISION_REPLACEMENTS.max(nodes))
}

/// The price of `sim`'s dearest replacement, when it places every pod, as
/// the scheduler's new-node price limit reads node prices (instance at its
/// offering plus volumes; not [`Cost`], which counts reserved capacity
/// free).
fn dearest_replacement(sim: &Sim) -> Option<f64> {
    if !sim.all_placed() {
        return None;
    }
    sim.replacements
        .iter()
        .map(|r| r.price.min + r.volume_price)
        .max_by(f64::total_cmp)
}

/// The pods of `nodes` (the nodes of `cs`) packed first fit onto up to
/// [`SPLIT_MAX`] NodeClaims per node, each priced under a ladder of
/// limits (`top`, then half and a quarter of it): as few and as large
/// replacements as the saving allows (Karpenter's split fallback limits
/// new capacity to the candidate's price the same way, once); then as the
/// scheduler's cost rule plans them. The cheapest acceptable one.
fn ladder(run: &mut Run, cs: &[usize], nodes: &[usize], top: f64) -> Option<Sim> {
    let mut best = None;
    let mut limit = top;
    for _ in 0..SPLIT_LADDER {
        let ask = Ask::packed_under(split_cap(cs.len()), limit);
        let sim = run.work.simulate_as(nodes, ask);
        best = cheaper(best, acceptable(run, cs, sim).ok(), 0.0);
        limit /= 2.0;
    }
    // And the cost rule's own plan (what `plan` would launch for them).
    let sim = run
        .work
        .simulate_as(nodes, Ask::cheapest(split_cap(cs.len())));
    cheaper(best, acceptable(run, cs, sim).ok(), 0.0)
}

/// Whether replacing `cs` by more NodeClaims than nodes is worth a
/// simulation: one of them is not spot (spot nodes split one by one in the
/// single pass, where spot-to-spot flexibility allows), and the pools'
/// cheapest capacity for their pods would save [`SPLIT_MIN_SAVING`].
fn may_split(run: &Run, cs: &[usize], units: &[UnitPrices]) -> bool {
    let all_spot = cs.iter().all(|&c| on_spot(run, c));
    let bound: f64 = cs.iter().map(|&c| pods_bound(run, units, c)).sum();
    !all_spot && worth_splitting(cost_of(run, cs).dollars, bound)
}

/// Whether candidate `c`'s node runs on spot capacity.
fn on_spot(run: &Run, c: usize) -> bool {
    run.state.nodes[run.cands[c].node]
        .labels
        .get(labels::CAPACITY_TYPE)
        .is_some_and(|v| v == labels::CAPACITY_TYPE_SPOT)
}

/// The least its NodePool's capacity for candidate `c`'s pods could cost.
fn pods_bound(run: &Run, units: &[UnitPrices], c: usize) -> f64 {
    units[run.cands[c].pool].lower_bound(&run.cands[c].requests)
}

/// The cheaper of two acceptable simulations: `b` only when it costs
/// `margin` $/h less than `a` (and `a` on a tie).
fn cheaper(a: Option<Sim>, b: Option<Sim>, margin: f64) -> Option<Sim> {
    match (a, b) {
        (Some(a), Some(b)) if b.cost().dollars < a.cost().dollars - margin - 1e-9 => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// Whether capacity for pods that could cost as little as `bound` $/h
/// would save [`SPLIT_MIN_SAVING`] of `price`: a split may be worth it.
fn worth_splitting(price: f64, bound: f64) -> bool {
    price - bound >= price * SPLIT_MIN_SAVING
}

/// Keep only `r`'s instance types that launch strictly below `cap` $/h
/// wherever EC2 launches them ([`launch_price`]; cheapest first, as plan
/// lists them), and when its price assumes spot but on-demand is allowed
/// too, only spot: if spot runs out the launch fails instead of replacing
/// with dearer on-demand capacity (Karpenter's rule). Whether the
/// replacement still holds: the type it was priced at is kept, and the
/// types left keep its `minValues` (Karpenter's
/// `RemoveInstanceTypeOptionsByPriceAndMinValues` refuses the
/// consolidation otherwise).
fn narrow(run: &Run, r: &mut NodeClaimPlan, cap: f64) -> bool {
    if r.price.capacity_type == CapacityType::Spot && r.capacity_types.len() > 1 {
        r.capacity_types = vec![CapacityType::Spot];
        for req in &mut r.requirements {
            if req.key == labels::CAPACITY_TYPE {
                req.values = vec![labels::CAPACITY_TYPE_SPOT.to_string()];
            }
        }
    }
    if !cap.is_finite() {
        return true;
    }
    let keep: Vec<String> = r
        .instance_types
        .iter()
        .filter(|t| launch_price(run, r, t).is_some_and(|p| p < cap - 1e-9))
        .cloned()
        .collect();
    let priced = keep.contains(&r.price.instance_type);
    r.instance_types = keep.into();
    priced && min_values_prefix(run, r, &r.instance_types).is_some()
}

/// The offerings of type `t` that replacement `r` allows (capacity types,
/// zones; reserved capacity aside); none when the catalog lacks `t`.
fn allowed_offerings<'c>(
    run: &Run<'c>,
    r: &'c NodeClaimPlan,
    t: &str,
) -> impl Iterator<Item = &'c Offering> {
    let offerings = run.catalog.get(t).map_or(&[][..], |e| &e.offerings[..]);
    offerings.iter().filter(|o| {
        r.capacity_types.contains(&o.capacity_type)
            && o.capacity_type != CapacityType::Reserved
            && (r.zones.is_empty() || r.zones.contains(&o.zone))
    })
}

/// The cheapest offering of type `t` that replacement `r` allows.
fn offering_price(run: &Run, r: &NodeClaimPlan, t: &str) -> Option<f64> {
    (allowed_offerings(run, r, t).map(|o| o.price)).min_by(f64::total_cmp)
}

/// What type `t` may cost when replacement `r` launches as it (Karpenter's
/// `Offerings.WorstLaunchPrice`): of the offerings `r` allows (capacity
/// types, zones; reserved capacity aside), those of the capacity type
/// launched first (spot, else on-demand), the dearest. EC2 picks the zone,
/// so a type only launches cheaper than the nodes it replaces when it does
/// in every zone the replacement allows.
fn launch_price(run: &Run, r: &NodeClaimPlan, t: &str) -> Option<f64> {
    [CapacityType::Spot, CapacityType::OnDemand]
        .into_iter()
        .find_map(|ct| {
            (allowed_offerings(run, r, t))
                .filter(|o| o.capacity_type == ct)
                .map(|o| o.price)
                .max_by(f64::total_cmp)
        })
}

/// How many of `types` (in their order) replacement `r` needs to keep
/// every `minValues` of its NodePool's requirements (Karpenter's
/// `InstanceTypes.SatisfiesMinValues`); `Some(0)` without `minValues`,
/// `None` when all of them do not.
fn min_values_prefix(run: &Run, r: &NodeClaimPlan, types: &[String]) -> Option<usize> {
    let Some(pool) = run.state.node_pools.iter().find(|p| p.name == r.node_pool) else {
        return Some(0);
    };
    let floors: Vec<(&str, usize)> = (pool.min_values.iter())
        .map(|(k, &m)| (k.as_str(), m as usize))
        .collect();
    if floors.is_empty() {
        return Some(0);
    }
    let mut seen: Vec<std::collections::BTreeSet<String>> = vec![Default::default(); floors.len()];
    for (i, t) in types.iter().enumerate() {
        let Some(e) = run.catalog.get(t) else {
            continue;
        };
        let values = e.info.label_values();
        for ((key, _), set) in floors.iter().zip(&mut seen) {
            match *key {
                labels::ZONE => set.extend(
                    (e.offerings.iter())
                        .filter(|o| r.zones.is_empty() || r.zones.contains(&o.zone))
                        .map(|o| o.zone.clone()),
                ),
                labels::CAPACITY_TYPE => set.extend(
                    (e.offerings.iter())
                        .filter(|o| r.capacity_types.contains(&o.capacity_type))
                        .map(|o| o.capacity_type.as_str().to_string()),
                ),
                _ => set.extend(
                    (values.iter())
                        .filter(|(k, _)| k == key)
                        .map(|(_, v)| v.clone()),
                ),
            }
        }
        if floors
            .iter()
            .zip(&seen)
            .all(|((_, m), set)| set.len() >= *m)
        {
            return Some(i + 1);
        }
    }
    None
}

/// Pass 2: replace prefixes of the most wasteful nodes.
fn replace_pass(run: &mut Run, by_waste: &[usize], units: &[UnitPrices]) -> bool {
    let mut list = admissible(run, by_waste);
    list.truncate(super::MAX_DECISION_NODES);
    if list.len() < 2 {
        return false;
    }
    // Halving down to the most wasteful node alone: a set whose saving
    // that one node already captures is not taken (the others would be
    // replaced for nothing; Karpenter's multi-node consolidation, which
    // may launch one NodeClaim only, would leave them to single-node
    // consolidation of that node).
    let mut sizes = Vec::new();
    let mut k = list.len();
    while k >= 1 {
        sizes.push(k);
        k /= 2;
    }
    let mut tried: Vec<(usize, f64, Sim)> = Vec::new();
    for k in sizes {
        let cs = &list[..k];
        let nodes: Vec<usize> = cs.iter().map(|&c| run.cands[c].node).collect();
        if let Some(sim) = judge(run, cs, &nodes, units) {
            let saving = cost_of(run, cs).dollars - sim.cost().dollars;
            tried.push((k, saving, sim));
        }
    }
    let best = tried.iter().map(|t| t.1).fold(f64::NEG_INFINITY, f64::max);
    if !best.is_finite() {
        return false;
    }
    // The smallest set reaching GOOD_ENOUGH of the best saving.
    tried.sort_by_key(|t| t.0);
    let pick = tried
        .iter()
        .position(|t| t.1 >= best * GOOD_ENOUGH - 1e-9)
        .unwrap_or(0);
    let (k, _, sim) = tried.swap_remove(pick);
    let cs = list[..k].to_vec();
    decide_grouped(run, &cs, sim);
    true
}

/// Pass 3: single nodes, most wasteful first.
fn single_pass(run: &mut Run, by_waste: &[usize], units: &[UnitPrices]) {
    let mut misses = 0;
    let mut splits = Splits::default();
    for &c in by_waste {
        if misses >= MAX_SINGLE_MISSES {
            break;
        }
        let Some(worth) = single_worth_trying(run, c, units) else {
            continue;
        };
        let (best, rejected) = single(run, c, worth, &mut splits);
        match best {
            Some(sim) => run.decide(DisruptionReason::Underutilized, &[c], Some(sim)),
            None => {
                misses += 1;
                if let Some(why) = rejected {
                    run.block(c, why);
                }
            }
        }
    }
}

/// Why a single-node simulation of a candidate is worth running.
#[derive(Clone, Copy)]
struct SingleWorth {
    /// A replacement may save (else only a delete may).
    may_replace: bool,
    /// The bound on what its pods cost elsewhere (`pods_bound`).
    bound: f64,
}

/// Whether a single-node simulation of candidate `c` is worth running:
/// free, within its budget and PDBs (blocked when an earlier decision of
/// the run used a PDB up), and a saving possible at all.
fn single_worth_trying(run: &mut Run, c: usize, units: &[UnitPrices]) -> Option<SingleWorth> {
    let pool = run.cands[c].pool;
    if run.taken[c] || run.budgets.remaining(pool, DisruptionReason::Underutilized) == 0 {
        return None;
    }
    if let Some(why) = run.graceful_blocker(c) {
        run.block(c, why);
        return None;
    }
    let cost = run.cands[c].cost.unwrap_or_default();
    let bound = pods_bound(run, units, c);
    let may_replace =
        cost.reserved > 0.0 || bound < cost.dollars * (1.0 - super::price::MIN_RELATIVE_SAVING);
    if !may_replace && sketch_deletes(run, &[c]).is_empty() {
        return None;
    }
    Some(SingleWorth { may_replace, bound })
}

/// Split attempts of one single pass: how many, and how many in a row
/// found no split.
#[derive(Default)]
struct Splits {
    attempts: usize,
    misses: usize,
}

/// The best single-node consolidation of candidate `c` (Karpenter's way,
/// then a split when worth it), or why a reportable rule refused it.
fn single(
    run: &mut Run,
    c: usize,
    worth: SingleWorth,
    splits: &mut Splits,
) -> (Option<Sim>, Option<String>) {
    let SingleWorth { may_replace, bound } = worth;
    let cost = run.cands[c].cost.unwrap_or_default();
    let node = run.cands[c].node;
    let sim = run.work.simulate_as(&[node], Ask::packed(1));
    let top = dearest_replacement(&sim).unwrap_or(cost.dollars);
    let one = acceptable(run, &[c], sim);
    let rejected = one.as_ref().err().and_then(|r| r.sentence());
    let best = match one.ok() {
        Some(sim) if sim.replacements.is_empty() || !may_replace => Some(sim),
        one if splits.attempts >= MAX_SPLIT_ATTEMPTS
            || splits.misses >= MAX_SPLIT_MISSES
            || !worth_splitting(cost.dollars, bound) =>
        {
            one
        }
        one => {
            // A split replaces a single replacement only when it saves
            // SPLIT_MIN_SAVING more: one node is not churned into
            // several for a small difference.
            splits.attempts += 1;
            let s = ladder(run, &[c], &[node], top.min(cost.dollars));
            let best = cheaper(one, s, cost.dollars * SPLIT_MIN_SAVING);
            let split = best.as_ref().is_some_and(|b| b.replacements.len() > 1);
            splits.misses = if split { 0 } else { splits.misses + 1 };
            best
        }
    };
    (best, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_launches_at_most_split_max_per_node_and_the_decision_cap() {
        // (nodes removed, NodeClaims a split may launch): 100 per node up
        // to the decision's cap (the pipeline's record names each one), and
        // never fewer than one per node removed.
        let cases = [
            (1, SPLIT_MAX),
            (3, 3 * SPLIT_MAX),
            (10, MAX_DECISION_REPLACEMENTS),
            (99, MAX_DECISION_REPLACEMENTS),
            (2 * MAX_DECISION_REPLACEMENTS, 2 * MAX_DECISION_REPLACEMENTS),
        ];
        for (nodes, want) in cases {
            assert_eq!(split_cap(nodes), want, "{nodes} nodes");
        }
    }
}
