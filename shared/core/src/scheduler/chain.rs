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

use super::repack::{type_maxima, CountTable, PackType, Packed};
use super::{Claim, Run, TypeSet};

/// Most pods the exact chain packing takes on.
const CHAIN_PODS: usize = 64;

/// Work limit: (slots + 1) × pairs of count vectors u <= v.
const CHAIN_WORK: usize = 30_000_000;

/// One NodeClaim a NodePool may launch (or, for the NodePool without
/// limits, any number of them): its pool and the types it may use, with
/// price and room per requested dimension.
struct Slot {
    pool: usize,
    cands: Vec<PackType>,
}

impl Run<'_> {
    /// See the module documentation.
    pub(super) fn repack_chain(&mut self, overlays: bool) {
        if overlays || self.topology.is_active() || self.claims.is_empty() {
            return;
        }
        if !self.pools.iter().any(|p| p.remaining.is_some()) {
            return;
        }
        // The packings choose types by price alone: not for minValues.
        if self.pools.iter().any(|p| !p.np.min_values.is_empty()) {
            return;
        }
        if self
            .claims
            .iter()
            .any(|c| c.reservation.is_some() || !c.host_ports.is_empty())
        {
            return;
        }
        let mut pods: Vec<usize> = self
            .claims
            .iter()
            .flat_map(|c| c.pods.iter().copied())
            .collect();
        pods.sort_unstable();
        if pods.is_empty() || pods.len() > CHAIN_PODS {
            return;
        }
        // Pods with resource requests only: every NodePool of the chain
        // takes them alike.
        let plain = pods.iter().all(|&p| {
            let pod = &self.pods[p];
            self.hints.shape[p].is_some()
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
        });
        if !plain {
            return;
        }
        let mut chain: Vec<usize> = Vec::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            if chain
                .last()
                .is_some_and(|&l| self.pools[l].np.weight <= pool.np.weight)
            {
                return;
            }
            if pods
                .iter()
                .any(|&p| untolerated_strict(&pool.taints, &self.pods[p].tolerations).is_some())
            {
                return;
            }
            chain.push(pi);
            if pool.remaining.is_none() {
                break;
            }
        }
        if self.claims.iter().any(|c| !chain.contains(&c.pool)) {
            return;
        }
        // Classes by requests.
        let mut class_of: BTreeMap<usize, usize> = BTreeMap::new();
        let mut classes: Vec<Vec<usize>> = Vec::new();
        for &p in &pods {
            let k = *class_of.entry(self.hints.req_class[p]).or_insert_with(|| {
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
        // The slots of every NodePool with limits, then the one without.
        let mut slots: Vec<Slot> = Vec::new();
        let mut open: Option<Slot> = None;
        for &pi in &chain {
            let pool = &self.pools[pi];
            let compatible = self.compatible_types(pi, &pool.requirements);
            let filter = pool.filter(&pool.requirements);
            let cand = |t: usize| self.candidate(pi, &filter, t, &dims);
            match &pool.remaining {
                None => {
                    open = Some(Slot {
                        pool: pi,
                        cands: compatible.iter().filter_map(|&t| cand(t)).collect(),
                    });
                }
                Some(lim) => {
                    // A NodePool never needs more NodeClaims than pods.
                    let mut charged = Resources::new();
                    for _ in 0..pods.len() {
                        let admitted: Vec<PackType> = compatible
                            .iter()
                            .filter(|&&t| lim.admits(&pool.types[t].capacity, &charged))
                            .filter_map(|&t| cand(t))
                            .collect();
                        if admitted.is_empty() {
                            break;
                        }
                        let mut charge = Resources::new();
                        for c in &admitted {
                            charge.max_assign(&pool.types[c.ty].capacity);
                        }
                        charged.add_assign(&charge);
                        charged.add_assign(&super::pools::Limits::one_node());
                        slots.push(Slot {
                            pool: pi,
                            cands: admitted,
                        });
                    }
                }
            }
        }
        let Some((cost, fills)) = chain_dp(&slots, open.as_ref(), &need, &counts) else {
            return;
        };
        let old: f64 = self.claims.iter().map(|c| self.claim_price(c)).sum();
        if cost >= old - 1e-9 {
            return;
        }
        // The new NodeClaims, each pool's old names first.
        let mut names: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for c in self.claims.iter().rev() {
            names.entry(c.pool).or_default().push(c.name.clone());
        }
        let mut next = vec![0usize; classes.len()];
        let mut out = Vec::with_capacity(fills.len());
        for (slot, fill) in fills {
            let s = slot.map_or_else(|| open.as_ref(), |i| slots.get(i));
            let Some(s) = s else {
                return;
            };
            let pi = s.pool;
            let pool = &self.pools[pi];
            let mut requests = pool.daemon_overhead.clone();
            let mut claim_pods = Vec::new();
            for (k, &n) in fill.iter().enumerate() {
                for &p in &classes[k][next[k]..next[k] + n] {
                    requests.add_assign(&self.pods[p].requests);
                    claim_pods.push(p);
                }
                next[k] += n;
            }
            let types = TypeSet::from_indices(
                s.cands
                    .iter()
                    .map(|c| c.ty)
                    .filter(|&t| requests.fits_in(&pool.types[t].allocatable)),
                pool.types.len(),
            );
            if types.first().is_none() {
                return;
            }
            let (max_allocatable, max_capacity) = type_maxima(pool, &types);
            let name = match names.get_mut(&pi).and_then(Vec::pop) {
                Some(n) => n,
                None => self.new_claim_name(pi),
            };
            let pool = &self.pools[pi];
            out.push(Claim::packed(
                pi,
                &pool.zones,
                &pool.requirements,
                name,
                Packed {
                    types,
                    requests,
                    pods: claim_pods,
                    max_allocatable,
                    max_capacity,
                },
            ));
        }
        self.claims = out;
    }
}

/// The cheapest contents of `slots` (in order, see the module
/// documentation) and of nodes of `open` for `counts[k]` pods of each class
/// needing `need[k]`: the price and, per node, its slot (`None`: `open`)
/// and pods per class. `None` when the table is too large or some pods fit
/// nowhere.
#[allow(clippy::type_complexity)]
fn chain_dp(
    slots: &[Slot],
    open: Option<&Slot>,
    need: &[Vec<i64>],
    counts: &[usize],
) -> Option<(f64, Vec<(Option<usize>, Vec<usize>)>)> {
    let k = counts.len();
    let mut states: usize = 1;
    let mut pairs: usize = 1;
    for &n in counts {
        states = states.checked_mul(n + 1)?;
        pairs = pairs.checked_mul((n + 1) * (n + 2) / 2)?;
    }
    // The table's work, and that of pricing every vector on every slot.
    let most_cands = slots
        .iter()
        .chain(open)
        .map(|s| s.cands.len())
        .max()
        .unwrap_or(0);
    if pairs.checked_mul(slots.len() + 1)? > CHAIN_WORK
        || states
            .checked_mul(slots.len() + 1)?
            .checked_mul(most_cands.max(1))?
            > CHAIN_WORK * 4
    {
        return None;
    }
    let table = CountTable::new(counts)?;
    let stride = &table.stride;
    let decode = |i: usize, out: &mut [usize]| table.decode(i, out);
    let unlimited = vec![usize::MAX; k];
    // Price of one node of a slot holding each vector.
    let node_prices = |s: &Slot| table.node_prices(&s.cands, need, &unlimited);
    // Every u <= v (u != 0), as indices, for the vector of index `i`.
    let subsets = |i: usize, v: &mut Vec<usize>, u: &mut Vec<usize>, out: &mut Vec<usize>| {
        out.clear();
        decode(i, v);
        u.iter_mut().for_each(|x| *x = 0);
        loop {
            let mut c = 0;
            while c < k {
                if u[c] < v[c] {
                    u[c] += 1;
                    break;
                }
                u[c] = 0;
                c += 1;
            }
            if c == k {
                break;
            }
            out.push(u.iter().zip(stride).map(|(a, s)| a * s).sum());
        }
    };
    let (mut v, mut u, mut subs) = (vec![0usize; k], vec![0usize; k], Vec::new());
    // The NodePool without limits: any number of nodes (first class left
    // always on the next node, as the repack's few-class table).
    let mut tail = vec![f64::INFINITY; states];
    let mut tail_choice = vec![0usize; states];
    tail[0] = 0.0;
    if let Some(open) = open {
        let prices = node_prices(open);
        for i in 1..states {
            subsets(i, &mut v, &mut u, &mut subs);
            let first = v.iter().position(|&n| n > 0).unwrap_or(0);
            for &ui in &subs {
                if (ui / stride[first]) % (counts[first] + 1) == 0 {
                    continue;
                }
                let c = prices[ui] + tail[i - ui];
                if c < tail[i] - 1e-12 {
                    tail[i] = c;
                    tail_choice[i] = ui;
                }
            }
        }
    }
    // Slots from the last back: best[s][v] = cheapest for v from slot s on.
    let mut best: Vec<Vec<f64>> = vec![Vec::new(); slots.len()];
    let mut choice: Vec<Vec<usize>> = vec![Vec::new(); slots.len()];
    for s in (0..slots.len()).rev() {
        let prices = node_prices(&slots[s]);
        let next: &[f64] = if s + 1 < slots.len() {
            &best[s + 1]
        } else {
            &tail
        };
        let mut b = vec![f64::INFINITY; states];
        let mut ch = vec![0usize; states];
        b[0] = 0.0;
        for i in 1..states {
            // Skipped only when it holds no pod of any class left.
            decode(i, &mut v);
            let holds_none = v
                .iter()
                .enumerate()
                .all(|(c, &n)| n == 0 || !prices[stride[c]].is_finite());
            if holds_none {
                b[i] = next[i];
                ch[i] = 0;
            }
            subsets(i, &mut v, &mut u, &mut subs);
            for &ui in &subs {
                let c = prices[ui] + next[i - ui];
                if c < b[i] - 1e-12 {
                    b[i] = c;
                    ch[i] = ui;
                }
            }
        }
        best[s] = b;
        choice[s] = ch;
    }
    let all = states - 1;
    let total = match best.first() {
        Some(b) => b[all],
        None => tail[all],
    };
    if !total.is_finite() {
        return None;
    }
    let mut fills = Vec::new();
    let mut i = all;
    for (s, ch) in choice.iter().enumerate() {
        let ui = ch[i];
        if ui != 0 {
            decode(ui, &mut u);
            fills.push((Some(s), u.clone()));
            i -= ui;
        }
    }
    while i > 0 {
        let ui = tail_choice[i];
        if ui == 0 {
            return None;
        }
        decode(ui, &mut u);
        fills.push((None, u.clone()));
        i -= ui;
    }
    Some((total, fills))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(pool: usize, cands: Vec<(f64, i64)>) -> Slot {
        Slot {
            pool,
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

    #[test]
    fn heavier_slots_fill_first_and_the_open_pool_takes_the_rest() {
        // One class of 5 pods. The heavier pool's one slot holds up to 2
        // (dear), the open pool 4 per node (cheap): the slot must still be
        // used before the open pool is.
        let slots = vec![slot(0, vec![(1.0, 1), (1.5, 2)])];
        let open = slot(1, vec![(0.5, 4)]);
        let (cost, fills) = chain_dp(&slots, Some(&open), &[vec![1]], &[5]).unwrap_or_default();
        // Slot: 1 pod at 1.0, the open pool 4 at 0.5.
        assert!((cost - 1.5).abs() < 1e-9, "{cost}");
        assert_eq!(fills[0], (Some(0), vec![1]));
        assert_eq!(fills[1], (None, vec![4]));
    }

    #[test]
    fn a_slot_that_holds_nothing_left_is_skipped() {
        // The first slot's types are too small for the pods.
        let slots = vec![slot(0, vec![(0.1, 1)]), slot(1, vec![(1.0, 10)])];
        let (cost, fills) = chain_dp(&slots, None, &[vec![2]], &[3]).unwrap_or_default();
        assert!((cost - 1.0).abs() < 1e-9, "{cost}");
        assert_eq!(fills, vec![(Some(1), vec![3])]);
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
        let (cost, fills) =
            chain_dp(&slots, Some(&open), &[vec![3], vec![1]], &[2, 2]).unwrap_or_default();
        assert!((cost - 1.9).abs() < 1e-9, "{cost} {fills:?}");
        let placed: Vec<usize> = fills.iter().fold(vec![0, 0], |mut acc, (_, f)| {
            acc[0] += f[0];
            acc[1] += f[1];
            acc
        });
        assert_eq!(placed, vec![2, 2]);
    }
}
