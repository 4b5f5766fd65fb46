//! Exact packing of a few pods over NodePools with weights and limits.
//!
//! The repack leaves NodePools with limits alone: a different packing
//! charges them differently. For a small plan (at most `CHAIN_PODS` pods
//! with nothing but resource requests) the cheapest plan that respects
//! weights and limits is found exactly instead:
//!
//! * the *chain* is the NodePools in weight order, strictly decreasing, up
//!   to the first without limits (lighter ones can never be used);
//! * a NodePool with limits can launch a fixed sequence of NodeClaims
//!   (*slots*): each may use the types whose capacity fits what its limits
//!   leave, and is charged the largest of them (Karpenter's rule, as
//!   `Run::try_new` charges); the sequence ends when no type fits;
//! * a slot is used only when every heavier slot is used, unless a heavier
//!   slot holds no type for any pod still to place: a lighter NodePool only
//!   gets pods the heavier ones cannot launch a NodeClaim for (weights);
//! * a dynamic programme over (slot, pods left per class) finds the cheapest
//!   contents; the NodePool without limits at the end of the chain takes the
//!   rest, exactly as the repack's few-class packing does.
//!
//! The new NodeClaims replace the plan's when they cost less.

use std::collections::BTreeMap;

use crate::model::untolerated_strict;
use crate::resources::Resources;

use super::index::{PodIdx, PoolIdx};
use super::pools::Limits;
use super::repack::{type_maxima, CountTable, CoverTable, PackType, Packed};
use super::{Claim, Run, TypeSet};

/// Most pods the exact chain packing takes on.
const CHAIN_PODS: usize = 64;

/// Work limit: (slots + 1) × pairs of count vectors u <= v.
const CHAIN_WORK: usize = 30_000_000;

/// One NodeClaim a NodePool may launch (or, for the NodePool without
/// limits, any number of them): its pool and the types it may use, with
/// price and room per requested dimension.
struct Slot {
    pool: PoolIdx,
    cands: Vec<PackType>,
}

/// The pods of a chain packing by class (identical requests): the resource
/// dimensions they request and, per class, its pods, its request per
/// dimension and how many pods there are.
struct ChainClasses {
    pods: Vec<Vec<PodIdx>>,
    dims: Vec<String>,
    need: Vec<Vec<i64>>,
    counts: Vec<usize>,
}

/// The slots of the chain's NodePools with limits, in order, and the
/// NodePool without limits at its end (if any).
struct ChainSlots {
    limited: Vec<Slot>,
    open: Option<Slot>,
}

/// The cheapest contents of a chain's slots (see [`chain_dp`]): its price
/// and its nodes.
#[derive(Debug, Default, PartialEq)]
struct ChainPlan {
    cost: f64,
    nodes: Vec<ChainNode>,
}

/// A node of a chain packing: its slot (`None`: the NodePool without
/// limits) and its pods per class.
#[derive(Debug, Default, PartialEq)]
struct ChainNode {
    slot: Option<usize>,
    fill: Vec<usize>,
}

/// The pods of one node of a chain packing and their requests, the
/// daemonsets included.
struct NodePods {
    requests: Resources,
    pods: Vec<PodIdx>,
}

impl Run<'_> {
    /// See the module documentation.
    pub(super) fn repack_chain(&mut self, overlays: bool) {
        if !self.chain_applies(overlays) {
            return;
        }
        let Some(pods) = self.chain_pods() else {
            return;
        };
        let Some(chain) = self.weight_chain(&pods) else {
            return;
        };
        if self.claims.iter().any(|c| !chain.contains(&c.pool)) {
            return;
        }
        let classes = self.chain_classes(&pods);
        let slots = self.chain_slots(&chain, &classes.dims, pods.len());
        let open = slots.open.as_ref();
        let Some(plan) = chain_dp(&slots.limited, open, &classes.need, &classes.counts) else {
            return;
        };
        let old: f64 = self.claims.iter().map(|c| self.claim_price(c)).sum();
        if plan.cost >= old - 1e-9 {
            return;
        }
        if let Some(claims) = self.chain_claims(plan, &slots, &classes.pods) {
            self.claims = claims;
            self.index_claim_names();
        }
    }

    /// Whether the plan may be packed again over the chain: some NodePool
    /// has limits, none has minValues (the packings choose types by price
    /// alone), no overlays or topology, and no NodeClaim has a capacity
    /// reservation or host ports.
    fn chain_applies(&self, overlays: bool) -> bool {
        if overlays || self.topology.is_active() || self.claims.is_empty() {
            return false;
        }
        if !self.pools.iter().any(|p| p.remaining.is_some()) {
            return false;
        }
        if self.pools.iter().any(|p| !p.np.min_values.is_empty()) {
            return false;
        }
        !self
            .claims
            .iter()
            .any(|c| c.reservation.is_some() || !c.host_ports.is_empty())
    }

    /// The plan's pods (sorted) when there are at most `CHAIN_PODS` of them
    /// and all are plain.
    fn chain_pods(&self) -> Option<Vec<PodIdx>> {
        let mut pods: Vec<PodIdx> = self
            .claims
            .iter()
            .flat_map(|c| c.pods.iter().copied())
            .collect();
        pods.sort_unstable();
        if pods.is_empty() || pods.len() > CHAIN_PODS {
            return None;
        }
        pods.iter().all(|&p| self.plain_pod(p)).then_some(pods)
    }

    /// Whether pod `p` has resource requests only: every NodePool of the
    /// chain takes it alike.
    fn plain_pod(&self, p: PodIdx) -> bool {
        let pod = &self.pods[p];
        self.hints.shape(p).is_some()
            && pod.topology_spread.is_empty()
            && pod.host_ports.is_empty()
            && pod.node_selector.is_empty()
            && pod.required_terms.is_empty()
            && pod.preferred_terms.is_empty()
            && pod.pod_anti_affinity.is_empty()
            && pod.preferred_pod_anti_affinity.is_empty()
            && pod.pod_affinity.is_empty()
            && pod.preferred_pod_affinity.is_empty()
            && pod.topology_spread.is_empty()
            && self.volume[p].is_empty()
    }

    /// The chain: the NodePools in weight order, strictly decreasing, up to
    /// the first without limits; `None` when two weigh the same or one
    /// does not tolerate some of `pods`.
    fn weight_chain(&self, pods: &[PodIdx]) -> Option<Vec<PoolIdx>> {
        let mut chain: Vec<PoolIdx> = Vec::new();
        for (pi, pool) in PoolIdx::enumerate(&self.pools) {
            if chain
                .last()
                .is_some_and(|&l| self.pools[l].np.weight <= pool.np.weight)
            {
                return None;
            }
            if pods
                .iter()
                .any(|&p| untolerated_strict(&pool.taints, &self.pods[p].tolerations).is_some())
            {
                return None;
            }
            chain.push(pi);
            if pool.remaining.is_none() {
                break;
            }
        }
        Some(chain)
    }

    /// `pods` by class of requests, with what each class needs per
    /// requested dimension.
    fn chain_classes(&self, pods: &[PodIdx]) -> ChainClasses {
        let mut class_of: BTreeMap<usize, usize> = BTreeMap::new();
        let mut classes: Vec<Vec<PodIdx>> = Vec::new();
        for &p in pods {
            let k = *class_of.entry(self.hints.req_class(p)).or_insert_with(|| {
                classes.push(vec![]);
                classes.len() - 1
            });
            classes[k].push(p);
        }
        let mut dims: Vec<String> = Vec::new();
        for c in &classes {
            for (name, _) in self.pods[c[0]].requests.iter() {
                if !dims.iter().any(|d| d == name) {
                    dims.push(name.to_string());
                }
            }
        }
        let need: Vec<Vec<i64>> = classes
            .iter()
            .map(|c| {
                let r = &self.pods[c[0]].requests;
                dims.iter().map(|d| r.get(d).millis()).collect()
            })
            .collect();
        let counts: Vec<usize> = classes.iter().map(Vec::len).collect();
        ChainClasses {
            pods: classes,
            dims,
            need,
            counts,
        }
    }

    /// The slots of every NodePool of `chain` with limits (at most `pods`
    /// each: a NodePool never needs more NodeClaims than pods), then the
    /// one without; candidates sized in `dims`.
    fn chain_slots(&self, chain: &[PoolIdx], dims: &[String], pods: usize) -> ChainSlots {
        let mut slots = ChainSlots {
            limited: Vec::new(),
            open: None,
        };
        for &pi in chain {
            match &self.pools[pi].remaining {
                None => {
                    let pool = &self.pools[pi];
                    let compatible = self.compatible_types(pi, &pool.requirements);
                    let filter = pool.filter(&pool.requirements);
                    slots.open = Some(Slot {
                        pool: pi,
                        cands: (compatible.iter())
                            .filter_map(|&t| self.candidate(pi, &filter, t, dims))
                            .collect(),
                    });
                }
                Some(lim) => slots
                    .limited
                    .extend(self.limited_slots(pi, lim, dims, pods)),
            }
        }
        slots
    }

    /// The NodeClaims NodePool `pi` with limits `lim` can launch one after
    /// another (at most `most`): each may use the types whose capacity fits
    /// what the limits leave, and is charged the largest of them.
    fn limited_slots(&self, pi: PoolIdx, lim: &Limits, dims: &[String], most: usize) -> Vec<Slot> {
        let pool = &self.pools[pi];
        let compatible = self.compatible_types(pi, &pool.requirements);
        let filter = pool.filter(&pool.requirements);
        let mut slots = Vec::new();
        let mut charged = Resources::new();
        for _ in 0..most {
            let after = lim.after(&charged);
            let admitted: Vec<PackType> = compatible
                .iter()
                .filter(|&&t| after.admits(&pool.types[t].capacity))
                .filter_map(|&t| self.candidate(pi, &filter, t, dims))
                .collect();
            if admitted.is_empty() {
                break;
            }
            let mut charge = Resources::new();
            for c in &admitted {
                charge.max_assign(&pool.types[c.ty].capacity);
            }
            charged.add_assign(&charge);
            charged.add_assign(&Limits::one_node());
            slots.push(Slot {
                pool: pi,
                cands: admitted,
            });
        }
        slots
    }

    /// The NodeClaims of `plan` (pods of class `k` taken in order from
    /// `classes[k]`), each NodePool's old names first; `None` when a node's
    /// slot is unknown or no type holds its pods.
    fn chain_claims(
        &mut self,
        plan: ChainPlan,
        slots: &ChainSlots,
        classes: &[Vec<PodIdx>],
    ) -> Option<Vec<Claim>> {
        let mut names: BTreeMap<PoolIdx, Vec<String>> = BTreeMap::new();
        for c in self.claims.iter().rev() {
            names.entry(c.pool).or_default().push(c.name.clone());
        }
        let mut next = vec![0usize; classes.len()];
        let mut out = Vec::with_capacity(plan.nodes.len());
        for node in plan.nodes {
            let slot = node
                .slot
                .map_or_else(|| slots.open.as_ref(), |i| slots.limited.get(i))?;
            let pods = self.node_pods(slot.pool, &node.fill, classes, &mut next);
            out.push(self.chain_claim(slot, pods, &mut names)?);
        }
        Some(out)
    }

    /// The pods of a node of pool `pi` holding `fill[k]` more pods of each
    /// class `classes[k]` (from `next[k]` on, which advances), and their
    /// requests plus the pool's daemonsets.
    fn node_pods(
        &self,
        pi: PoolIdx,
        fill: &[usize],
        classes: &[Vec<PodIdx>],
        next: &mut [usize],
    ) -> NodePods {
        let mut requests = self.pools[pi].daemon_overhead.clone();
        let mut pods = Vec::new();
        for (k, &n) in fill.iter().enumerate() {
            for &p in &classes[k][next[k]..next[k] + n] {
                requests.add_assign(&self.pods[p].requests);
                pods.push(p);
            }
            next[k] += n;
        }
        NodePods { requests, pods }
    }

    /// The NodeClaim of `slot` holding `pods`, named from `names` (a new
    /// name when its NodePool has none left); `None` when no type of the
    /// slot holds the pods.
    fn chain_claim(
        &mut self,
        slot: &Slot,
        pods: NodePods,
        names: &mut BTreeMap<PoolIdx, Vec<String>>,
    ) -> Option<Claim> {
        let pi = slot.pool;
        let pool = &self.pools[pi];
        let NodePods { requests, pods } = pods;
        let types = TypeSet::from_indices(
            slot.cands
                .iter()
                .map(|c| c.ty)
                .filter(|&t| requests.fits_in(&pool.types[t].allocatable)),
            pool.types.len(),
        );
        // No type holds the pods: no NodeClaim.
        types.first()?;
        let (max_allocatable, max_capacity) = type_maxima(pool, &types);
        let name = match names.get_mut(&pi).and_then(Vec::pop) {
            Some(n) => n,
            None => self.new_claim_name(pi),
        };
        let pool = &self.pools[pi];
        Some(Claim::packed(
            pi,
            &pool.zones,
            &pool.requirements,
            name,
            Packed {
                types,
                requests,
                pods,
                max_allocatable,
                max_capacity,
            },
        ))
    }
}

/// The cheapest contents of `slots` (in order, see the module
/// documentation) and of nodes of `open` for `counts[k]` pods of each class
/// needing `need[k]`: the price and, per node, its slot and pods per class.
/// `None` when the table is too large or some pods fit nowhere.
fn chain_dp(
    slots: &[Slot],
    open: Option<&Slot>,
    need: &[Vec<i64>],
    counts: &[usize],
) -> Option<ChainPlan> {
    if !chain_affordable(slots, open, counts) {
        return None;
    }
    let dp = ChainDp {
        table: CountTable::new(counts)?,
        need,
        counts,
        unlimited: vec![usize::MAX; counts.len()],
    };
    let mut walk = SubsetWalk::new(counts.len());
    let tail = match open {
        Some(open) => dp.open_covers(open, &mut walk),
        None => CoverTable::new(dp.table.states),
    };
    // Slots from the last back: by_slot[s] covers every vector from slot s on.
    let mut by_slot: Vec<CoverTable> = (0..slots.len()).map(|_| CoverTable::default()).collect();
    for s in (0..slots.len()).rev() {
        let next = by_slot.get(s + 1).map_or(&tail.best, |c| &c.best);
        let covers = dp.slot_covers(&slots[s], next, &mut walk);
        by_slot[s] = covers;
    }
    let all = dp.table.states - 1;
    let cost = by_slot.first().map_or(tail.best[all], |c| c.best[all]);
    if !cost.is_finite() {
        return None;
    }
    let nodes = dp.nodes(&by_slot, &tail, &mut walk.u)?;
    Some(ChainPlan { cost, nodes })
}

/// Whether the chain table is within `CHAIN_WORK`: (slots + 1) × pairs of
/// count vectors u <= v, and pricing every vector on every slot; false
/// when that overflows.
fn chain_affordable(slots: &[Slot], open: Option<&Slot>, counts: &[usize]) -> bool {
    let within = || -> Option<bool> {
        let mut states: usize = 1;
        let mut pairs: usize = 1;
        for &n in counts {
            states = states.checked_mul(n + 1)?;
            pairs = pairs.checked_mul((n + 1) * (n + 2) / 2)?;
        }
        let most_cands = (slots.iter().chain(open))
            .map(|s| s.cands.len())
            .max()
            .unwrap_or(0);
        Some(
            pairs.checked_mul(slots.len() + 1)? <= CHAIN_WORK
                && states
                    .checked_mul(slots.len() + 1)?
                    .checked_mul(most_cands.max(1))?
                    <= CHAIN_WORK * 4,
        )
    };
    within().unwrap_or(false)
}

/// The count vectors of a chain packing and what each class of pods needs.
struct ChainDp<'a> {
    table: CountTable,
    need: &'a [Vec<i64>],
    counts: &'a [usize],
    /// No cap on pods per node, per class.
    unlimited: Vec<usize>,
}

impl ChainDp<'_> {
    /// The covers of every vector by nodes of the NodePool without limits:
    /// any number of nodes, the first class left always on the next node
    /// (as the repack's few-class table).
    fn open_covers(&self, open: &Slot, walk: &mut SubsetWalk) -> CoverTable {
        let (table, stride) = (&self.table, &self.table.stride);
        let prices = table.node_prices(&open.cands, self.need, &self.unlimited);
        let mut tail = CoverTable::new(table.states);
        for i in 1..table.states {
            walk.walk(table, i);
            let first = walk.v.iter().position(|&n| n > 0).unwrap_or(0);
            for &ui in &walk.subs {
                if (ui / stride[first]) % (self.counts[first] + 1) == 0 {
                    continue;
                }
                tail.offer(i, ui, prices[ui]);
            }
        }
        tail
    }

    /// The covers of every vector from `slot` on, given `next`, the
    /// cheapest from the following slot on: the slot holds a node, or is
    /// skipped when it holds no pod of any class left.
    fn slot_covers(&self, slot: &Slot, next: &[f64], walk: &mut SubsetWalk) -> CoverTable {
        let (table, stride) = (&self.table, &self.table.stride);
        let prices = table.node_prices(&slot.cands, self.need, &self.unlimited);
        let mut covers = CoverTable::new(table.states);
        let (b, ch) = (&mut covers.best, &mut covers.choice);
        for i in 1..table.states {
            walk.walk(table, i);
            let holds_none =
                (walk.v.iter().enumerate()).all(|(c, &n)| n == 0 || !prices[stride[c]].is_finite());
            if holds_none {
                b[i] = next[i];
                ch[i] = 0;
            }
            for &ui in &walk.subs {
                let c = prices[ui] + next[i - ui];
                if c < b[i] - 1e-12 {
                    b[i] = c;
                    ch[i] = ui;
                }
            }
        }
        covers
    }

    /// The nodes of the cheapest plan for all pods: each slot's node where
    /// it holds one, then the open NodePool's; `None` if the choices do not
    /// reach the empty vector. `u` is scratch.
    fn nodes(
        &self,
        by_slot: &[CoverTable],
        tail: &CoverTable,
        u: &mut [usize],
    ) -> Option<Vec<ChainNode>> {
        let mut nodes = Vec::new();
        let mut i = self.table.states - 1;
        for (s, covers) in by_slot.iter().enumerate() {
            let ui = covers.choice[i];
            if ui != 0 {
                self.table.decode(ui, u);
                nodes.push(ChainNode {
                    slot: Some(s),
                    fill: u.to_vec(),
                });
                i -= ui;
            }
        }
        while i > 0 {
            let ui = tail.choice[i];
            if ui == 0 {
                return None;
            }
            self.table.decode(ui, u);
            nodes.push(ChainNode {
                slot: None,
                fill: u.to_vec(),
            });
            i -= ui;
        }
        Some(nodes)
    }
}

/// Scratch for walking count vectors: a vector `v`, a vector `u <= v`, and
/// the indices of every nonzero `u <= v`.
struct SubsetWalk {
    v: Vec<usize>,
    u: Vec<usize>,
    subs: Vec<usize>,
}

impl SubsetWalk {
    /// Scratch for vectors of `k` classes.
    fn new(k: usize) -> SubsetWalk {
        SubsetWalk {
            v: vec![0usize; k],
            u: vec![0usize; k],
            subs: Vec::new(),
        }
    }

    /// Decodes the vector of index `i` into `v` and lists every `u <= v`
    /// (`u != 0`), as indices, in `subs`.
    fn walk(&mut self, table: &CountTable, i: usize) {
        self.subs.clear();
        table.decode(i, &mut self.v);
        self.u.iter_mut().for_each(|x| *x = 0);
        while next_below(&mut self.u, &self.v) {
            let ui = self.u.iter().zip(&table.stride).map(|(a, s)| a * s).sum();
            self.subs.push(ui);
        }
    }
}

/// Advances `u` to the next vector `u <= v` (odometer over the classes);
/// false when there is none.
fn next_below(u: &mut [usize], v: &[usize]) -> bool {
    for (x, &most) in u.iter_mut().zip(v) {
        if *x < most {
            *x += 1;
            return true;
        }
        *x = 0;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(pool: usize, cands: Vec<(f64, i64)>) -> Slot {
        Slot {
            pool: PoolIdx::new(pool),
            cands: cands
                .into_iter()
                .enumerate()
                .map(|(t, (p, c))| PackType {
                    ty: t,
                    price: p,
                    room: vec![c],
                })
                .collect(),
        }
    }

    fn node(slot: Option<usize>, fill: Vec<usize>) -> ChainNode {
        ChainNode { slot, fill }
    }

    #[test]
    fn heavier_slots_fill_first_and_the_open_pool_takes_the_rest() {
        // One class of 5 pods. The heavier pool's one slot holds up to 2
        // (dear), the open pool 4 per node (cheap): the slot must still be
        // used before the open pool is.
        let slots = vec![slot(0, vec![(1.0, 1), (1.5, 2)])];
        let open = slot(1, vec![(0.5, 4)]);
        let ChainPlan { cost, nodes } =
            chain_dp(&slots, Some(&open), &[vec![1]], &[5]).unwrap_or_default();
        // Slot: 1 pod at 1.0, the open pool 4 at 0.5.
        assert!((cost - 1.5).abs() < 1e-9, "{cost}");
        assert_eq!(nodes[0], node(Some(0), vec![1]));
        assert_eq!(nodes[1], node(None, vec![4]));
    }

    #[test]
    fn a_slot_that_holds_nothing_left_is_skipped() {
        // The first slot's types are too small for the pods.
        let slots = vec![slot(0, vec![(0.1, 1)]), slot(1, vec![(1.0, 10)])];
        let ChainPlan { cost, nodes } =
            chain_dp(&slots, None, &[vec![2]], &[3]).unwrap_or_default();
        assert!((cost - 1.0).abs() < 1e-9, "{cost}");
        assert_eq!(nodes, vec![node(Some(1), vec![3])]);
        // Without an open pool and with too little room, nothing fits.
        assert!(chain_dp(&slots, None, &[vec![2]], &[6]).is_none());
    }

    #[test]
    fn two_classes_split_between_pools_at_the_least_price() {
        // Two pods of 3 units and two of 1. The slot (4 units, 1.0) must be
        // used; it cannot take both 3-unit pods, so at least one goes to the
        // open pool, whose 2-unit node (0.4) cannot hold it: one 6-unit node
        // (0.9) takes what the slot leaves, whichever split.
        let slots = vec![slot(0, vec![(1.0, 4)])];
        let open = slot(1, vec![(0.4, 2), (0.9, 6)]);
        let ChainPlan { cost, nodes } =
            chain_dp(&slots, Some(&open), &[vec![3], vec![1]], &[2, 2]).unwrap_or_default();
        assert!((cost - 1.9).abs() < 1e-9, "{cost} {nodes:?}");
        let placed: Vec<usize> = nodes.iter().fold(vec![0, 0], |mut acc, n| {
            acc[0] += n.fill[0];
            acc[1] += n.fill[1];
            acc
        });
        assert_eq!(placed, vec![2, 2]);
    }
}
