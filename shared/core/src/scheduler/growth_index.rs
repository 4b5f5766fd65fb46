//! NodeClaims indexed by what their growth refuses, so that a pod's walk
//! over the NodeClaims planned so far jumps past the runs of NodeClaims
//! the cost rule would refuse it on without asking each.
//!
//! The cost rule refuses a pod on a NodeClaim whose cheapest type has no
//! room left for it when the least the NodeClaim's growth costs in a
//! resource the pod lacks room in is more than the pod's solo price
//! allows, or when no type within the pod's price level of the step grid
//! leaves the room it needs ([`GrowthFloor`], `Run::growth_refuses`). Every NodeClaim of a large
//! plan is asked that by every request class's first walk: with the
//! number of Deployments growing with the cluster, those walks were
//! `O(pods × NodeClaims)`. Here each NodeClaim is a leaf of a segment tree
//! over the NodeClaim indices holding its floor's room, its steps per
//! unit of the rule's slack and its reach per price level; an inner node
//! holds its leaves' largest room, least step and largest reach per
//! resource. A subtree whose largest room in some resource is less than
//! the pod needs, and whose least step in that resource is more than the
//! pod's solo price allows, or whose largest reach at the pod's level is
//! less than it needs in some resource, refuses the pod on every
//! NodeClaim under it, so the walk passes it whole. For pods held to
//! on-demand, a node also holds its leaves' least on-demand base and
//! steps (`HeldBound`), read by their walks only.
//!
//! A leaf is set when the rule makes a NodeClaim's floor (some walk asked
//! it) and cleared when a pod joins the NodeClaim; a new offering epoch
//! clears them all. So the index costs a path update per floor made and
//! per pod placed, and knows what earlier walks (of any class) learnt.
//!
//! Only refusals the rule itself makes are skipped: a NodeClaim without a
//! known floor never is, and NodeClaims whose pods are all of the pod's
//! size class (the rule's look-ahead, which the floor does not answer) are
//! kept per size class and walked whatever the tree says. Passing a
//! NodeClaim unasked changes nothing a request class's walk learns, so its
//! plans are the same; a size class's walk (pods without a shape) moves its
//! zone buckets' hints on each refusal, and one that passes a run moves
//! them as asking each NodeClaim would have (`Walk::jump`, with the
//! NodeClaims of each zone bucket from [`super::zone_buckets`]), so its
//! plans are the same too.

use super::costrule::{self, OfferBits};
use super::growth_floor::{GrowthFloor, Reach, StepGrid, LEVELS};
use super::index::ClaimIdx;
use super::{Run, Trial};
use crate::resources::{Compact, COMPACT};

/// A solo price is compared with a step per unit of slack a little above
/// it, so that a pass is a refusal the rule's own `step > solo × slack`
/// makes whatever the rounding of the division.
const MARGIN: f64 = 1e-9;

/// The question a pod asks the index: its compact requests and solo
/// price.
#[derive(Clone, Copy, Debug)]
pub(super) struct GrowthQuery {
    need: [i64; COMPACT],
    /// The solo price, raised by [`MARGIN`].
    solo: f64,
    /// The step grid's level of `solo` (`None`: past the grid).
    level: Option<usize>,
    /// Whether the pod is held to on-demand (see `HeldFloor`).
    on_demand: bool,
    /// The solo price as asked (for the debug builds' check).
    #[cfg(debug_assertions)]
    asked: f64,
}

impl GrowthQuery {
    /// `None` for a price the comparison cannot use (negative or not a
    /// number): the walk then asks every NodeClaim.
    pub(super) fn new(
        need: [i64; COMPACT],
        solo: f64,
        grid: &StepGrid,
        on_demand: bool,
    ) -> Option<GrowthQuery> {
        let raised = solo * (1.0 + MARGIN);
        (solo.is_finite() && solo >= 0.0).then_some(GrowthQuery {
            need,
            solo: raised,
            level: grid.level(raised),
            on_demand,
            #[cfg(debug_assertions)]
            asked: solo,
        })
    }
}

/// See the module doc.
#[derive(Clone, Debug, Default)]
pub(super) struct GrowthIndex {
    /// Leaves: `cap..2 × cap` (a power of two); node `v`'s children are
    /// `2v` and `2v + 1`.
    cap: usize,
    /// Per node, its leaves' largest room and least growth step (see
    /// [`Bound`]).
    bound: Vec<Bound>,
    /// Per node, its leaves' least steps for pods held to on-demand (see
    /// [`HeldBound`]), read by those pods' walks only.
    held: Vec<HeldBound>,
    /// Per level, then per node, the largest reach per resource (node `v`
    /// at level `k` is `reach[k × 2 cap + v]`): a walk asks one level, so
    /// it reads one run of this, not every level of each node it passes.
    /// Empty until a leaf has a reach (most plans learn none, and at
    /// `LEVELS` entries per node it is most of the index's memory).
    reach: Vec<[i64; COMPACT]>,
    /// Per leaf, whether its reach is known (not open), and how many are.
    reached: Vec<bool>,
    reaches: usize,
    /// NodeClaims `0..len` have leaves.
    len: usize,
    /// The offering epoch the leaves were set at.
    epoch: u32,
    /// Per size class, the NodeClaims whose first pod had it (ascending):
    /// those whose pods are all of the class are among them.
    same_size: Vec<Vec<u32>>,
}

/// A node's largest room per resource (its leaves') and least growth step
/// per unit of slack per resource: one cache line, read together.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(align(64))]
struct Bound {
    room: [i64; COMPACT],
    step: [f64; COMPACT],
}

/// A node's least base and steps per unit of slack, per resource, for
/// pods held to on-demand (its leaves' `HeldFloor`s).
#[derive(Clone, Copy, Debug, PartialEq)]
struct HeldBound {
    base: f64,
    step: [f64; COMPACT],
}

/// A leaf no held pod passes by its on-demand steps: none known.
const OPEN_HELD: HeldBound = HeldBound {
    base: f64::NEG_INFINITY,
    step: [f64::NEG_INFINITY; COMPACT],
};

/// A leaf no pod passes: no floor known.
const OPEN: Bound = Bound {
    room: [i64::MAX; COMPACT],
    step: [f64::NEG_INFINITY; COMPACT],
};
const OPEN_REACH: [i64; COMPACT] = [i64::MAX; COMPACT];

impl GrowthIndex {
    /// NodeClaim `c` changed (a pod joined it): its floor is not known
    /// until asked again.
    pub(super) fn claim_changed(&mut self, c: usize) {
        self.put(c, (OPEN, OPEN_HELD), None);
    }

    /// NodeClaim `c` took its first pod, of size class `size`.
    pub(super) fn first_pod(&mut self, c: usize, size: usize) {
        if self.same_size.len() <= size {
            self.same_size.resize(size + 1, Vec::new());
        }
        let list = &mut self.same_size[size];
        let at = list.partition_point(|&x| (x as usize) < c);
        if list.get(at) != Some(&(c as u32)) {
            list.insert(at, c as u32);
        }
    }

    /// Makes the index current for a walk over `claims` NodeClaims at
    /// offering epoch `epoch`: new NodeClaims get leaves that pass
    /// nothing, and a new epoch (every floor changes with the offerings)
    /// forgets every floor.
    pub(super) fn sync(&mut self, claims: usize, epoch: u32) {
        if epoch != self.epoch || claims < self.len {
            *self = GrowthIndex {
                epoch,
                same_size: std::mem::take(&mut self.same_size),
                ..GrowthIndex::default()
            };
        }
        if claims > self.cap || self.bound.is_empty() {
            let cap = claims.next_power_of_two().max(64);
            let mut bound = vec![OPEN; 2 * cap];
            let mut held = vec![OPEN_HELD; 2 * cap];
            for i in 0..self.len {
                bound[cap + i] = self.bound[self.cap + i];
                held[cap + i] = self.held[self.cap + i];
            }
            let reach = self.reach_at(cap);
            self.reached.resize(cap, false);
            let reaches = !reach.is_empty();
            (self.cap, self.bound, self.held, self.reach) = (cap, bound, held, reach);
            for v in (1..cap).rev() {
                self.pull(v, (true, reaches));
            }
        }
        self.len = self.len.max(claims);
    }

    /// The leaves' reaches laid out for `cap` leaves (inner nodes open, to
    /// be pulled): empty while no leaf has one.
    fn reach_at(&self, cap: usize) -> Vec<[i64; COMPACT]> {
        if self.reach.is_empty() {
            return Vec::new();
        }
        let mut reach = vec![OPEN_REACH; LEVELS * 2 * cap];
        for i in 0..self.len {
            for k in 0..LEVELS {
                reach[k * 2 * cap + cap + i] = self.reach[self.at(k, self.cap + i)];
            }
        }
        reach
    }

    /// NodeClaim `c`'s floor at its NodePool's slack, made at offering
    /// epoch `epoch`: its leaf, if that is the index's epoch.
    pub(super) fn set_at(&mut self, epoch: u32, c: usize, floor: &GrowthFloor, slack: f64) {
        if epoch == self.epoch {
            self.set(c, floor, slack);
        }
    }

    /// NodeClaim `c`'s floor at its NodePool's slack (see
    /// `costrule::slack`), made at the index's epoch.
    pub(super) fn set(&mut self, c: usize, floor: &GrowthFloor, slack: f64) {
        if slack.is_finite() && slack > 0.0 {
            let bound = Bound {
                room: *floor.room().quantities(),
                step: floor.steps().map(|s| s / slack),
            };
            let held = floor.on_demand().map_or(OPEN_HELD, |h| HeldBound {
                base: h.base / slack,
                step: h.steps.map(|s| s / slack),
            });
            self.put(c, (bound, held), floor.reach());
        }
    }

    /// Where node `v`'s reach at level `k` is in `reach`.
    #[inline]
    fn at(&self, k: usize, v: usize) -> usize {
        k * 2 * self.cap + v
    }

    /// Leaf `c` becomes `bound` (and its held bound) and `reach` (`None`:
    /// open), and the nodes above it follow; the reaches only where one
    /// changed.
    fn put(&mut self, c: usize, (bound, held): (Bound, HeldBound), reach: Option<&Reach>) {
        if c >= self.len {
            return;
        }
        let v = self.cap + c;
        if reach.is_some() && self.reach.is_empty() {
            self.reach = vec![OPEN_REACH; LEVELS * 2 * self.cap];
        }
        let reach_moves = match reach {
            None => self.reached[c],
            Some(reach) => {
                !self.reached[c] || (0..LEVELS).any(|k| self.reach[self.at(k, v)] != reach[k])
            }
        };
        if self.bound[v] == bound && self.held[v] == held && !reach_moves {
            return;
        }
        self.bound[v] = bound;
        self.held[v] = held;
        if reach_moves {
            for k in 0..LEVELS {
                let at = self.at(k, v);
                self.reach[at] = reach.map_or(OPEN_REACH, |r| r[k]);
            }
            match (self.reached[c], reach.is_some()) {
                (false, true) => self.reaches += 1,
                (true, false) => self.reaches -= 1,
                _ => {}
            }
            self.reached[c] = reach.is_some();
        }
        let (mut v, mut moves) = (v / 2, (true, reach_moves));
        while v >= 1 && (moves.0 || moves.1) {
            moves = self.pull(v, moves);
            v /= 2;
        }
    }

    /// Node `v` from its children: its rooms and steps, and its reaches if
    /// `moves.1`; whether each changed (a node that did not leaves the
    /// nodes above it as they are).
    fn pull(&mut self, v: usize, moves: (bool, bool)) -> (bool, bool) {
        let (l, r) = (2 * v, 2 * v + 1);
        let mut changed = (false, false);
        if moves.0 {
            let (left, right) = (self.bound[l], self.bound[r]);
            let mut bound = left;
            let (left_held, right_held) = (self.held[l], self.held[r]);
            let mut held = left_held;
            held.base = held.base.min(right_held.base);
            for d in 0..COMPACT {
                bound.room[d] = bound.room[d].max(right.room[d]);
                bound.step[d] = bound.step[d].min(right.step[d]);
                held.step[d] = held.step[d].min(right_held.step[d]);
            }
            changed.0 = self.bound[v] != bound || self.held[v] != held;
            self.bound[v] = bound;
            self.held[v] = held;
        }
        if moves.1 {
            for k in 0..LEVELS {
                let (left, right) = (self.reach[self.at(k, l)], self.reach[self.at(k, r)]);
                let mut reach = left;
                for d in 0..COMPACT {
                    reach[d] = reach[d].max(right[d]);
                }
                let at = self.at(k, v);
                changed.1 |= self.reach[at] != reach;
                self.reach[at] = reach;
            }
        }
        changed
    }

    /// Whether every NodeClaim under node `v` refuses the pod: all by
    /// their steps, all by their reaches, or (a held pod) all by their
    /// on-demand steps.
    #[inline]
    fn refuses(&self, v: usize, q: &GrowthQuery) -> bool {
        let bound = &self.bound[v];
        (0..COMPACT).any(|d| q.need[d] > bound.room[d] && q.solo < bound.step[d])
            || (q.on_demand && {
                let held = &self.held[v];
                q.solo < held.base
                    || (0..COMPACT).any(|d| q.need[d] > bound.room[d] && q.solo < held.step[d])
            })
            || q.level.is_some_and(|k| {
                // No reaches (none learnt): every NodeClaim's reach is open.
                (self.reach.get(self.at(k, v)))
                    .is_some_and(|reach| (0..COMPACT).any(|d| q.need[d] > reach[d]))
            })
    }

    /// The first NodeClaim from `from` on that the index does not know to
    /// refuse a pod asking `q` of size class `size` (`len` when none is).
    pub(super) fn next_open(&self, from: usize, q: &GrowthQuery, size: usize) -> usize {
        let open = self.next_unrefused(from, q);
        if open == from {
            return open;
        }
        let same = self.same_size.get(size).map_or(&[][..], |l| &l[..]);
        let at = same.partition_point(|&x| (x as usize) < from);
        same.get(at).map_or(open, |&x| open.min(x as usize))
    }

    fn next_unrefused(&self, from: usize, q: &GrowthQuery) -> usize {
        if from >= self.len {
            return from;
        }
        let mut v = self.cap + from;
        if !self.refuses(v, q) {
            return from;
        }
        'right: loop {
            // Every NodeClaim under `v` refuses: on to the subtree right
            // of it.
            while v % 2 == 1 {
                v /= 2;
                if v == 0 {
                    return self.len;
                }
            }
            v += 1;
            if self.refuses(v, q) {
                continue 'right;
            }
            while v < self.cap {
                v *= 2;
                if self.refuses(v, q) {
                    v += 1;
                    if self.refuses(v, q) {
                        continue 'right;
                    }
                }
            }
            return (v - self.cap).min(self.len);
        }
    }
}

impl Run<'_> {
    /// The question a pod (compact requests `compact`, solo price `solo`)
    /// asks the growth index on its walk, with the index made current;
    /// `None` when the cost rule is not asked (a packing run) or cannot
    /// refuse by growth (no compact requests or solo price).
    pub(super) fn growth_query(
        &mut self,
        (compact, offers): (Option<Compact>, Option<OfferBits>),
        solo: Option<f64>,
    ) -> Option<GrowthQuery> {
        if self.pack {
            return None;
        }
        let on_demand = OfferBits::held_to_on_demand(offers);
        let mut q = GrowthQuery::new(*compact?.quantities(), solo?, &self.step_grid, on_demand)?;
        (self.growth_index).sync(self.claims.len(), self.hints.epoch());
        // No leaf has a reach: the walk asks none.
        if self.growth_index.reaches == 0 {
            q.level = None;
        }
        Some(q)
    }

    /// Where a walk over `list` (NodeClaim indices, ascending) goes on from
    /// entry `k` for trial `t` asking `q`: the first entry past the run of
    /// NodeClaims from entry `k` on that the index knows to refuse the pod,
    /// `None` when entry `k`'s NodeClaim is not known to.
    pub(super) fn past_growth_refusals(
        &mut self,
        q: &GrowthQuery,
        t: &Trial,
        list: &[u32],
        k: usize,
    ) -> Option<usize> {
        let c = *list.get(k)? as usize;
        let open = (self.growth_index).next_open(c, q, self.hints.size_class(t.p));
        if open == c {
            return None;
        }
        let past = k + list[k..].partition_point(|&x| (x as usize) < open);
        #[cfg(debug_assertions)]
        self.assert_refused_by_growth(&list[k..past], t, q);
        Some(past)
    }

    /// Every NodeClaim of `claims`, passed by a walk, is one the cost rule
    /// refuses pod `p` on by its growth (checked in debug builds, so every
    /// test that plans checks the index).
    #[cfg(debug_assertions)]
    fn assert_refused_by_growth(&mut self, claims: &[u32], t: &Trial, q: &GrowthQuery) {
        let compact = self.pods[t.p].requests.compact_request();
        let solo = Some(q.asked);
        for &c in claims {
            let c = ClaimIdx::new(c as usize);
            let refused = self.growth_refuses(c, t.p, compact, solo).is_some()
                || (self.held_growth_refuses(c, t.p, (compact, t.pod_offers), solo)).is_some();
            assert!(refused, "NodeClaim {} passed but not refused", c.get());
        }
    }

    /// NodeClaim `c`'s floor was made (at the run's epoch): its leaf.
    pub(super) fn floor_made(&mut self, c: ClaimIdx, floor: &GrowthFloor) {
        let slack = costrule::slack(&self.pools[self.claims[c].pool]);
        (self.growth_index).set_at(self.hints.epoch(), c.get(), floor, slack);
    }
}

#[cfg(test)]
mod tests {
    use super::super::growth_floor::HeldFloor;
    use super::*;

    /// A leaf's floor: its room, its price steps per resource and its
    /// reach per level.
    type Leaf = ([i64; COMPACT], [f64; COMPACT], Reach);

    fn grid() -> StepGrid {
        StepGrid::from_base(0.04)
    }

    fn index_of(leaves: &[Leaf]) -> GrowthIndex {
        let mut index = GrowthIndex::default();
        index.sync(leaves.len(), 0);
        for (c, (room, steps, reach)) in leaves.iter().enumerate() {
            index.set(c, &GrowthFloor::for_test(*room, *steps, *reach), 1.0);
        }
        index
    }

    /// The first leaf from `from` on that does not refuse, by asking each.
    fn by_hand(leaves: &[Leaf], from: usize, q: &GrowthQuery) -> usize {
        (from..leaves.len())
            .find(|&c| {
                let (room, steps, reach) = &leaves[c];
                let by_step = (0..COMPACT).any(|d| q.need[d] > room[d] && q.solo < steps[d]);
                let by_reach = grid()
                    .level(q.solo)
                    .is_some_and(|k| (0..COMPACT).any(|d| q.need[d] > reach[k][d]));
                !(by_step || by_reach)
            })
            .unwrap_or(leaves.len())
    }

    /// A random leaf: rooms in steps of 500, reach growing by level.
    fn random_leaf(draw: &mut impl FnMut(u64) -> u64) -> Leaf {
        let room = [0; COMPACT].map(|_| draw(5) as i64 * 500);
        let steps = [0.0; COMPACT].map(|_| match draw(4) {
            0 => f64::INFINITY,
            1 => -0.01,
            k => k as f64 * 0.05,
        });
        let mut reach = [room; LEVELS];
        let mut at = room;
        for level in &mut reach {
            at = at.map(|r| r + draw(3) as i64 * 500);
            *level = at;
        }
        (room, steps, reach)
    }

    #[test]
    fn the_walk_lands_where_asking_each_nodeclaim_would() {
        let mut draw = crate::scheduler::test_draws(7);
        let mut by_reach = 0;
        for round in 0..200 {
            let n = 1 + draw(300) as usize;
            let leaves: Vec<Leaf> = (0..n).map(|_| random_leaf(&mut draw)).collect();
            let index = index_of(&leaves);
            for _ in 0..20 {
                let need = [0; COMPACT].map(|_| draw(6) as i64 * 400);
                let q = GrowthQuery::new(need, draw(4) as f64 * 0.04, &grid(), false)
                    .expect("a finite price");
                let from = draw(n as u64 + 1) as usize;
                assert_eq!(
                    index.next_unrefused(from, &q),
                    by_hand(&leaves, from, &q),
                    "round {round}, from {from}, {q:?}"
                );
                let (room, steps, reach) = &leaves[from.min(n - 1)];
                let by_step = (0..COMPACT).any(|d| q.need[d] > room[d] && q.solo < steps[d]);
                let k = q.level.expect("a level");
                by_reach += usize::from(!by_step && (0..COMPACT).any(|d| q.need[d] > reach[k][d]));
            }
        }
        assert!(
            by_reach > 100,
            "{by_reach} leaves refused by their reach alone"
        );
    }

    /// Pods held to on-demand and others walk an index of leaves some of
    /// which have on-demand steps: each lands where asking each leaf
    /// (its steps and reach, and a held pod's on-demand base and steps)
    /// would.
    #[test]
    fn a_held_pod_lands_where_asking_each_nodeclaim_would() {
        let mut draw = crate::scheduler::test_draws(11);
        let mut by_held = 0;
        for round in 0..200 {
            let n = 1 + draw(300) as usize;
            let leaves: Vec<(Leaf, Option<HeldFloor>)> = (0..n)
                .map(|_| {
                    let leaf = random_leaf(&mut draw);
                    let held = (draw(3) != 0).then(|| HeldFloor {
                        base: draw(4) as f64 * 0.03 - 0.01,
                        steps: leaf.1.map(|s| s + draw(3) as f64 * 0.05),
                    });
                    (leaf, held)
                })
                .collect();
            let mut index = GrowthIndex::default();
            index.sync(n, 0);
            for (c, ((room, steps, reach), held)) in leaves.iter().enumerate() {
                let floor = GrowthFloor::for_test(*room, *steps, *reach).with_on_demand(*held);
                index.set(c, &floor, 1.0);
            }
            let plain: Vec<Leaf> = leaves.iter().map(|(leaf, _)| *leaf).collect();
            for _ in 0..20 {
                let need = [0; COMPACT].map(|_| draw(6) as i64 * 400);
                let on_demand = draw(2) == 0;
                let q = GrowthQuery::new(need, draw(4) as f64 * 0.04, &grid(), on_demand)
                    .expect("a finite price");
                let from = draw(n as u64 + 1) as usize;
                let expected = (from..n)
                    .find(|&c| {
                        let refused = by_hand(&plain, c, &q) != c;
                        let ((room, _, _), held) = &leaves[c];
                        let held_refuses = q.on_demand
                            && held.is_some_and(|h| {
                                q.solo < h.base
                                    || (0..COMPACT)
                                        .any(|d| q.need[d] > room[d] && q.solo < h.steps[d])
                            });
                        by_held += usize::from(!refused && held_refuses);
                        !(refused || held_refuses)
                    })
                    .unwrap_or(n);
                assert_eq!(
                    index.next_unrefused(from, &q),
                    expected,
                    "round {round}, from {from}, {q:?}"
                );
            }
        }
        assert!(by_held > 100, "{by_held} leaves refused by on-demand alone");
    }

    #[test]
    fn a_nodeclaim_of_the_pods_size_class_is_walked_whatever_its_floor() {
        let full = ([0; COMPACT], [1.0; COMPACT], [[0; COMPACT]; LEVELS]);
        let mut index = index_of(&[full; 10]);
        index.first_pod(6, 3);
        let q = GrowthQuery::new([100; COMPACT], 0.1, &grid(), false).expect("a finite price");
        assert_eq!(index.next_open(0, &q, 3), 6);
        assert_eq!(index.next_open(7, &q, 3), 10);
        assert_eq!(index.next_open(0, &q, 2), 10);
    }

    #[test]
    fn a_changed_nodeclaim_new_ones_and_a_new_epoch_refuse_nothing_until_set() {
        let full = ([0; COMPACT], [1.0; COMPACT], [[0; COMPACT]; LEVELS]);
        let mut index = index_of(&[full; 3]);
        let q = GrowthQuery::new([1; COMPACT], 0.0, &grid(), false).expect("a finite price");
        assert_eq!(index.next_open(0, &q, 0), 3);
        index.claim_changed(1);
        assert_eq!(index.next_open(0, &q, 0), 1);
        index.sync(200, 0);
        assert_eq!(index.next_open(2, &q, 0), 3);
        index.set(1, &GrowthFloor::for_test(full.0, full.1, full.2), 1.0);
        assert_eq!(index.next_open(0, &q, 0), 3);
        index.sync(200, 1);
        assert_eq!(index.next_open(0, &q, 0), 0);
    }

    #[test]
    fn a_price_the_comparison_cannot_use_asks_every_nodeclaim() {
        assert!(GrowthQuery::new([0; COMPACT], f64::NAN, &grid(), false).is_none());
        assert!(GrowthQuery::new([0; COMPACT], -1.0, &grid(), false).is_none());
        assert!(GrowthQuery::new([0; COMPACT], f64::INFINITY, &grid(), false).is_none());
    }

    /// A price past the grid's last level (or a grid without levels) is
    /// weighed by the steps alone.
    #[test]
    fn a_price_past_the_grid_is_weighed_by_the_steps_alone() {
        let open_steps = (
            [0; COMPACT],
            [f64::NEG_INFINITY; COMPACT],
            [[0; COMPACT]; LEVELS],
        );
        let index = index_of(&[open_steps; 4]);
        let top = grid().price(LEVELS - 1);
        let within = GrowthQuery::new([1; COMPACT], top / 2.0, &grid(), false).expect("a price");
        assert_eq!(index.next_open(0, &within, 0), 4);
        let past = GrowthQuery::new([1; COMPACT], top * 2.0, &grid(), false).expect("a price");
        assert_eq!(index.next_open(0, &past, 0), 0);
        let none = StepGrid::from_base(f64::INFINITY);
        let q = GrowthQuery::new([1; COMPACT], 0.01, &none, false).expect("a price");
        assert_eq!(index.next_open(0, &q, 0), 0);
    }
}
