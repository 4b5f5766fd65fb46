//! The least a NodeClaim's growth costs: what the cost rule refuses a pod
//! on by resources and price alone, asked alike by pods of every size
//! (the rule's own answer, `Run::may_join_memo`, is asked per request
//! class).
//!
//! A pod that needs more of a resource than a NodeClaim's cheapest type
//! has left grows the NodeClaim to a type with more of it. Two bounds
//! follow from the types' floors ([`TypeFloors`]), and each refuses a pod
//! only where the rule would:
//! - per resource, the least step to any type with more of it than the
//!   cheapest type has (`GrowthFloor::steps`), the types priced at the
//!   offerings the NodeClaim allows where those are spot, on-demand or
//!   both in a zone set with a table ([`Priced`]): an on-demand NodeClaim,
//!   or one held to dear zones, grows at those prices;
//! - per price level of a fixed grid ([`StepGrid`]), the most room in each
//!   resource of any type whose step is within the level
//!   (`GrowthFloor::reach`): a pod that needs more than that in some
//!   resource grows the NodeClaim by more than the level, so one whose
//!   solo price the level covers is refused. This one answers the pods
//!   that need more than the next type up has left, where every type
//!   with more of the resource is dearer than the first. It is made for
//!   the pods that share no answer with others (the only pod of their
//!   size, see `Run::learn_reach`): pods that each have their own size
//!   walked every NodeClaim, refused one by one.
//! - for a pod asking for more GPUs (or another resource past the compact
//!   ones) than the cheapest type has left, the same reach over the types
//!   with more of such a resource (`Run::beyond_reach`): the grown type is
//!   one of them. Roomy types without GPUs within a GPU pod's price kept
//!   the reach over every type from refusing it, so every GPU pod of its
//!   own size asked the rule itself on every NodeClaim (2.9 of the rule's
//!   3.5 million answers at `--random` 50,000 pods, for 2% of the pods).
//! - for a pod held to on-demand on a NodeClaim that allows spot too, the
//!   same steps at on-demand prices, and the least on-demand price of any
//!   of its types over the price now ([`HeldFloor`]): such a pod pays
//!   for on-demand even where it fits, so the steps at the NodeClaim's own
//!   prices (spot) never refused it.

use crate::resources::{Compact, BEYOND, COMPACT};

use super::costrule::{offered_price, slack, OfferBits, ON_DEMAND};
use super::index::{ClaimIdx, PodIdx};
use super::nodeclaim::{JoinAnswer, ZoneMask};
use super::pools::Pool;
use super::typeset::TypeSet;
use super::Run;

/// Price levels of the [`StepGrid`].
pub(super) const LEVELS: usize = 24;

/// Each level of the [`StepGrid`] is this much dearer than the one below:
/// a pod is weighed at the first level at or above its solo price, so a
/// refusal the rule makes by less than this factor may go unseen.
const RATIO: f64 = 1.5;

/// The price levels (per unit of the cost rule's slack) at which growth
/// floors tell the room their NodeClaims reach: from the least floor of
/// any type of any NodePool (no pod's solo price is below it), each
/// [`RATIO`] times the one before. One grid for every NodePool, so that
/// the growth index compares leaves of all of them.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepGrid {
    prices: [f64; LEVELS],
}

impl StepGrid {
    pub(super) fn of(floors: &[TypeFloors]) -> StepGrid {
        let base = (floors.iter())
            .flat_map(|f| f.floor.iter().copied())
            .filter(|&p| p.is_finite() && p > 0.0)
            .fold(f64::INFINITY, f64::min);
        StepGrid::from_base(base)
    }

    /// The grid whose first level is `base` (none when it is infinite).
    pub(super) fn from_base(base: f64) -> StepGrid {
        let mut prices = [f64::INFINITY; LEVELS];
        let mut price = base;
        for level in &mut prices {
            *level = price;
            price *= RATIO;
        }
        StepGrid { prices }
    }

    /// The first level at or above `price` (per unit of slack); `None`
    /// past the last level or for a price that is not a number.
    pub(super) fn level(&self, price: f64) -> Option<usize> {
        if price.is_nan() {
            return None;
        }
        let k = self.prices.partition_point(|&g| g < price);
        (k < LEVELS && self.prices[k].is_finite()).then_some(k)
    }

    /// Level `k`'s price (per unit of slack).
    pub(super) fn price(&self, k: usize) -> f64 {
        self.prices[k]
    }
}

/// Per NodePool, each type's floor: the least a node of the type costs at
/// any offering outside a reservation, volumes included (no
/// [`offered_price`] of the type is below it); and from each type on (in
/// the NodePool's order), the least floor and the most of each compact
/// resource, so that a walk over a NodeClaim's types in that order stops
/// once no later type can change what it found (see
/// `Run::make_growth_floor`); and each type's compact allocatable, for a
/// floor's reach.
pub(super) struct TypeFloors {
    pub(super) floor: Vec<f64>,
    later: Vec<Later>,
    /// Per type, its compact allocatable (`i64::MAX` as in [`Later`]).
    most: Vec<[i64; COMPACT]>,
    /// The types with some [`KNOWN`](crate::resources::KNOWN) resource past the compact ones (an
    /// accelerator, pod ENIs, EFA), how much of each, and the most of each
    /// from each type on.
    beyond: TypeSet,
    beyond_most: Vec<[i64; BEYOND]>,
    beyond_later: Vec<[i64; BEYOND]>,
    /// The zone sets (bits, ascending; the last is every zone of the
    /// NodePool's offerings) with tables in `priced`.
    sets: Vec<u64>,
    /// Per [`Priced`] table: each type's floor at those offerings, and the
    /// least from each type on. A NodeClaim held to on-demand or pinned to
    /// a zone pays those prices, which may be well above the least of any
    /// offering.
    priced: Vec<PricedFloors>,
}

/// Floors at some offerings: per type, and the least from each type on.
struct PricedFloors {
    floor: Vec<f64>,
    least: Vec<f64>,
}

/// The capacity types (bits) a [`Priced`] tells apart: spot, on-demand,
/// both (the floors leave reserved offerings out).
const PRICED_CAPACITY: [u8; 3] = [2, ON_DEMAND, 6];

/// Pools of at most this many zones keep a [`Priced`] table for every set
/// of their zones (a NodeClaim whose pods spread over two of three zones);
/// larger ones for every zone and each one alone.
const EVERY_ZONE_SET_UP_TO: usize = 4;

/// The zone sets (bits, ascending) that get [`Priced`] tables: every
/// zone, each one alone, and with few zones every set of them.
fn zone_sets(zones: &[u64]) -> Vec<u64> {
    let every = zones.iter().fold(0, |m, z| m | z);
    let mut sets: Vec<u64> = if zones.len() <= EVERY_ZONE_SET_UP_TO {
        (1..1u64 << zones.len())
            .map(|pick| {
                (zones.iter().enumerate())
                    .filter(|(i, _)| pick & 1 << i != 0)
                    .fold(0, |m, (_, z)| m | z)
            })
            .collect()
    } else {
        zones.iter().copied().chain([every]).collect()
    };
    sets.sort_unstable();
    sets.dedup();
    sets
}

/// Per [`Priced`] table (capacity types of [`PRICED_CAPACITY`], then each
/// zone set of `sets`), each type's floor at those offerings: the least
/// price of any of them outside a reservation, or its list price when it
/// has none (as `costrule::offered_price` prices it). One pass over the
/// offerings.
fn priced_floors(pool: &Pool, sets: &[u64]) -> Vec<PricedFloors> {
    let every = sets.last().copied().unwrap_or(0);
    let n = pool.types.len();
    let mut least = vec![vec![f64::INFINITY; n]; PRICED_CAPACITY.len() * sets.len()];
    for (t, ty) in pool.types.iter().enumerate() {
        for o in ty.offerings.iter().filter(|o| o.reservation.is_none()) {
            let bit = o.capacity_type.bit();
            for (k, _) in (PRICED_CAPACITY.iter().enumerate()).filter(|(_, &ct)| ct & bit != 0) {
                for (i, &set) in sets.iter().enumerate() {
                    // A zone past the 64th (no bit) counts only in every zone.
                    let here = o.zone_bit & set != 0 || (o.zone_bit == 0 && set == every);
                    if here {
                        let l = &mut least[k * sets.len() + i][t];
                        *l = l.min(o.price);
                    }
                }
            }
        }
    }
    (least.into_iter())
        .map(|table| {
            let floor: Vec<f64> = (table.iter().zip(pool.types.iter()))
                .map(|(&l, ty)| pool.node_price(if l.is_finite() { l } else { ty.price }))
                .collect();
            let mut least = floor.clone();
            for t in (0..n.saturating_sub(1)).rev() {
                least[t] = least[t].min(least[t + 1]);
            }
            PricedFloors { floor, least }
        })
        .collect()
}

/// Over the types from one on: the least floor, and the most of each
/// compact resource (`i64::MAX` when a type the compact lists do not
/// decide is among them).
#[derive(Clone, Copy)]
struct Later {
    least: f64,
    most: [i64; COMPACT],
}

impl Later {
    /// Over no type.
    const NONE: Later = Later {
        least: f64::INFINITY,
        most: [i64::MIN; COMPACT],
    };
}

impl TypeFloors {
    pub(super) fn of(pools: &[Pool]) -> Vec<TypeFloors> {
        pools.iter().map(TypeFloors::of_pool).collect()
    }

    fn of_pool(pool: &Pool) -> TypeFloors {
        let floor: Vec<f64> = (pool.types.iter())
            .map(|ty| {
                let offered = (ty.offerings.iter())
                    .filter(|o| o.reservation.is_none())
                    .map(|o| o.price);
                pool.node_price(offered.fold(ty.price, f64::min))
            })
            .collect();
        let most_of = |t: usize| {
            let most = pool.compact_allocatable.get(t).copied().flatten();
            most.map_or([i64::MAX; COMPACT], |a| *a.quantities())
        };
        let mut later = vec![Later::NONE; floor.len()];
        let mut acc = Later::NONE;
        for t in (0..floor.len()).rev() {
            acc.least = acc.least.min(floor[t]);
            for (m, a) in acc.most.iter_mut().zip(most_of(t)) {
                *m = (*m).max(a);
            }
            later[t] = acc;
        }
        let most = (0..floor.len()).map(most_of).collect();
        let beyond_most: Vec<[i64; BEYOND]> = (pool.types.iter())
            .map(|ty| ty.allocatable.beyond_compact())
            .collect();
        let beyond = TypeSet::from_indices(
            (beyond_most.iter().enumerate())
                .filter(|(_, b)| b.iter().any(|&q| q > 0))
                .map(|(t, _)| t),
            pool.types.len(),
        );
        let mut beyond_later = beyond_most.clone();
        for t in (0..beyond_later.len().saturating_sub(1)).rev() {
            let next = beyond_later[t + 1];
            for (m, n) in beyond_later[t].iter_mut().zip(next) {
                *m = (*m).max(n);
            }
        }
        let zones: Vec<u64> = (pool.types.iter())
            .flat_map(|ty| ty.offerings.iter().map(|o| o.zone_bit))
            .filter(|&b| b != 0)
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        let sets = zone_sets(&zones);
        let priced = priced_floors(pool, &sets);
        TypeFloors {
            floor,
            later,
            most,
            beyond,
            beyond_most,
            beyond_later,
            sets,
            priced,
        }
    }

    /// How a NodeClaim of zone mask `mask` and capacity types `capacity`
    /// (bits) is priced (see [`Priced`]).
    pub(super) fn priced(&self, mask: &ZoneMask, capacity: u8) -> Priced {
        let Some(ct) = PRICED_CAPACITY.iter().position(|&ct| ct == capacity & 6) else {
            return Priced(None);
        };
        let every = self.sets.last().copied().unwrap_or(0);
        let allowed = match mask {
            ZoneMask::Unrestricted => every,
            ZoneMask::Bits(bits) => bits & every,
            ZoneMask::Unknown => return Priced(None),
        };
        let set = self.sets.binary_search(&allowed).ok();
        Priced(set.map(|i| ct * self.sets.len() + i))
    }

    /// How a NodeClaim of zone mask `mask` and capacity types `capacity`
    /// that a pod holds to on-demand grows (see [`HeldFloor`]): at the
    /// on-demand table of its zones, when it allows spot and on-demand
    /// and its zones have a table.
    pub(super) fn held_to_on_demand(&self, mask: &ZoneMask, capacity: u8) -> Option<Priced> {
        if capacity & 6 != 6 {
            return None;
        }
        let held = self.priced(mask, ON_DEMAND);
        held.0.is_some().then_some(held)
    }

    /// Type `t`'s floor where `priced`.
    pub(super) fn floor_at(&self, priced: Priced, t: usize) -> f64 {
        let table = priced.0.and_then(|i| self.priced.get(i));
        table.map_or(self.floor[t], |p| p.floor[t])
    }

    /// The least floor of the types from `t` on, where `priced`.
    fn least_from(&self, priced: Priced, t: usize) -> f64 {
        let table = priced.0.and_then(|i| self.priced.get(i));
        table.map_or(self.later[t].least, |p| p.least[t])
    }

    /// Per [`KNOWN`](crate::resources::KNOWN) resource past the compact ones, the least floor
    /// (where `priced`) of the types of `types` with more of it than
    /// `before` has (infinite when none has).
    fn least_beyond(&self, types: &TypeSet, priced: Priced, before: usize) -> [f64; BEYOND] {
        let have = self.beyond_most[before];
        let mut least = [f64::INFINITY; BEYOND];
        for t in types.iter_in_all(Some(&self.beyond), &[]) {
            let (from, later) = (self.least_from(priced, t), &self.beyond_later[t]);
            if (0..BEYOND).all(|e| least[e] <= from || later[e] <= have[e]) {
                break;
            }
            let price = self.floor_at(priced, t);
            for e in (0..BEYOND).filter(|&e| self.beyond_most[t][e] > have[e]) {
                least[e] = least[e].min(price);
            }
        }
        least
    }

    /// Whether no type from `t` on lowers a `least` price of a resource
    /// already found, or has more of one than `have`.
    fn settled(
        &self,
        priced: Priced,
        t: usize,
        least: &[f64; COMPACT],
        have: &[i64; COMPACT],
    ) -> bool {
        let (later, from) = (&self.later[t], self.least_from(priced, t));
        (0..COMPACT).all(|d| least[d] <= from || later.most[d] <= have[d])
    }
}

/// Where a NodeClaim's types are priced for its floor: at their least
/// offering of exactly the offerings it allows, when those are one of the
/// capacity types of [`PRICED_CAPACITY`] in a zone set with a table (see
/// [`zone_sets`]; an index into `TypeFloors::priced`: per capacity type,
/// each of `TypeFloors::sets`); otherwise (`None`) at their least
/// offering anywhere.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Priced(Option<usize>);

/// What growing a NodeClaim costs at the least, for pods that do not fit
/// its cheapest type (see [`Run::growth_refuses`]), at one version of the
/// NodeClaim and one offering epoch. A pod that needs more of a resource
/// than `room` leaves grows the NodeClaim to a type with more of it than
/// the cheapest has, whose price step from the NodeClaim's price now is at
/// least `steps` of that resource; and one that needs more of a resource
/// than `reach` holds at a level of the [`StepGrid`] grows it by more than
/// the level's price (times the slack). The reach is made once the rule
/// itself refuses a pod the steps do not, and that pod is the only one of
/// its size (`Run::learn_reach`): pods of a size share the rule's own
/// answer, which is remembered, so the reach is not worth its walk over
/// the NodeClaim's types for them; and a floor the rule admits a pod on
/// changes with it.
#[derive(Clone, Debug)]
pub(super) struct GrowthFloor {
    version: u32,
    epoch: u32,
    room: Compact,
    steps: [f64; COMPACT],
    /// Per [`KNOWN`](crate::resources::KNOWN) resource past the compact ones, what the cheapest type
    /// has left of it (past the NodeClaim's pods' requests) and the least
    /// step to a type with more than the cheapest has: a pod asking for a
    /// GPU grows a NodeClaim without one left to a type with more.
    beyond_room: [i64; BEYOND],
    beyond_steps: [f64; BEYOND],
    /// The NodeClaim's price now and its compact requests (the head of
    /// them, when it has GPUs), for its reach.
    now: f64,
    used: Compact,
    reach: Option<Box<Reach>>,
    /// The reach over the types with more of some resource past the
    /// compact ones than the cheapest has (see `Run::beyond_reach`), for
    /// pods that need more of one than it has left; `None` until asked.
    beyond_reach: Option<Box<Reach>>,
    /// What growing the NodeClaim costs at the least for a pod held to
    /// on-demand (see [`HeldFloor`]); `None` unless the NodeClaim allows
    /// spot and on-demand in a zone set with a table.
    on_demand: Option<HeldFloor>,
}

/// The least a pod held to on-demand (and to no zone) grows a NodeClaim
/// that also allows spot by: the cost rule prices the grown type at the
/// NodeClaim's on-demand offerings (a type without one at its own), so
/// every step is at least `base`, the least on-demand floor of its types
/// from the cheapest on, less its price now; and, per resource the pod
/// needs more of than the cheapest type has left, at least `steps`, the
/// least on-demand floor of a type with more of it, less the price now.
/// Priced at the NodeClaim's own offerings, these pods joined no
/// NodeClaim and were refused on each by the rule itself.
#[derive(Clone, Copy, Debug)]
pub(super) struct HeldFloor {
    pub(super) base: f64,
    pub(super) steps: [f64; COMPACT],
}

/// The dearest of `steps` over the resources a pod needs more of (`need`)
/// than the cheapest type leaves (`room`): the grown type has more of
/// each (minus infinity when the pod fits).
fn dearest_step<const N: usize>(need: &[i64; N], room: &[i64; N], steps: &[f64; N]) -> f64 {
    (0..N)
        .filter(|&d| need[d] > room[d])
        .map(|d| steps[d])
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Per level of the [`StepGrid`] and per resource, the most room any of a
/// NodeClaim's types leaves whose step per unit of slack is at most the
/// level's price (at least what its cheapest type leaves).
pub(super) type Reach = [[i64; COMPACT]; LEVELS];

impl GrowthFloor {
    /// Per resource, the least a step to a type with more of it costs.
    pub(super) fn steps(&self) -> [f64; COMPACT] {
        self.steps
    }

    /// What the NodeClaim's cheapest type has left.
    pub(super) fn room(&self) -> &Compact {
        &self.room
    }

    /// See [`Reach`]; `None` until asked.
    pub(super) fn reach(&self) -> Option<&Reach> {
        self.reach.as_deref()
    }

    /// Whether the cost rule refuses a pod needing `need` at solo price
    /// `solo` on the NodeClaim by its steps (at its NodePool's `slack`),
    /// as a step no dearer than the rule's own.
    fn refuses_by_steps(&self, need: &[i64; COMPACT], solo: f64, slack: f64) -> Option<JoinAnswer> {
        let step = dearest_step(need, self.room.quantities(), &self.steps);
        (step > solo * slack).then_some(JoinAnswer::Step { step, slack })
    }

    /// Whether the cost rule refuses a pod held to on-demand (and to no
    /// zone) needing `need` at solo price `solo` (see [`HeldFloor`]).
    fn refuses_held(&self, need: &[i64; COMPACT], solo: f64, slack: f64) -> Option<JoinAnswer> {
        let held = self.on_demand.as_ref()?;
        let step = held
            .base
            .max(dearest_step(need, self.room.quantities(), &held.steps));
        (step > solo * slack).then_some(JoinAnswer::Step { step, slack })
    }

    /// See [`HeldFloor`]; `None` when not made.
    pub(super) fn on_demand(&self) -> Option<&HeldFloor> {
        self.on_demand.as_ref()
    }

    /// Whether the cost rule refuses a pod needing `need` of the [`KNOWN`](crate::resources::KNOWN)
    /// resources past the compact ones at solo price `solo` on the
    /// NodeClaim by the steps to types with more of those than its
    /// cheapest has.
    fn refuses_beyond(&self, need: &[i64; BEYOND], solo: f64, slack: f64) -> Option<JoinAnswer> {
        let step = dearest_step(need, &self.beyond_room, &self.beyond_steps);
        (step > solo * slack).then_some(JoinAnswer::Step { step, slack })
    }

    /// Whether a pod asking `need` of the resources past the compact ones
    /// needs more of one than the cheapest type has left: the grown type
    /// has more of it.
    fn lacks_beyond(&self, need: &[i64; BEYOND]) -> bool {
        (0..BEYOND).any(|e| need[e] > self.beyond_room[e])
    }

    /// Whether a pod needing `need` that does not fit the reach at level
    /// `k` is refused: its step is more than the level's price (times
    /// `slack`).
    fn refuses_by_reach(
        reach: &Reach,
        need: &[i64; COMPACT],
        k: usize,
        slack: f64,
        grid: &StepGrid,
    ) -> Option<JoinAnswer> {
        (0..COMPACT)
            .any(|d| need[d] > reach[k][d])
            .then(|| JoinAnswer::Step {
                step: grid.price(k) * slack,
                slack,
            })
    }

    #[cfg(test)]
    pub(super) fn for_test(
        room: [i64; COMPACT],
        steps: [f64; COMPACT],
        reach: Reach,
    ) -> GrowthFloor {
        GrowthFloor {
            version: 0,
            epoch: 0,
            room: Compact::for_test(room),
            steps,
            beyond_room: [i64::MAX; BEYOND],
            beyond_steps: [f64::NEG_INFINITY; BEYOND],
            now: 0.0,
            used: Compact::for_test([0; COMPACT]),
            reach: Some(Box::new(reach)),
            beyond_reach: None,
            on_demand: None,
        }
    }

    #[cfg(test)]
    pub(super) fn with_on_demand(self, on_demand: Option<HeldFloor>) -> GrowthFloor {
        GrowthFloor { on_demand, ..self }
    }
}

impl Run<'_> {
    /// Whether the cost rule refuses pod `p` (compact requests `pod`,
    /// solo price `solo`) on NodeClaim `c` by the least its growth costs
    /// (see [`GrowthFloor`]): a pod that needs more than its cheapest type
    /// has left, and no look-ahead. `Some` carries the step bound (for
    /// the caller's refusal record); only ever a refusal the rule itself
    /// would make.
    pub(super) fn growth_refuses(
        &mut self,
        c: ClaimIdx,
        p: PodIdx,
        pod: Option<Compact>,
        solo: Option<f64>,
    ) -> Option<JoinAnswer> {
        let solo = solo?;
        if self.claims[c].size == Some(self.hints.size_class(p)) {
            return None;
        }
        // Requests past the compact resources (a GPU): the grown type
        // holds their compact head too, and more of those it asks past
        // what the cheapest type has.
        let (need, beyond) = match pod {
            Some(pod) => (*pod.quantities(), None),
            None => {
                let requests = &self.pods[p].requests;
                (
                    *requests.compact_head().quantities(),
                    Some(requests.beyond_compact()),
                )
            }
        };
        let slack = slack(&self.pools[self.claims[c].pool]);
        let grid = self.step_grid;
        let level = grid.level(solo);
        let floor = self.growth_floor(c)?;
        if let Some(refused) = beyond.and_then(|b| floor.refuses_beyond(&b, solo, slack)) {
            return Some(refused);
        }
        let need = &need;
        if let Some(refused) = floor.refuses_by_steps(need, solo, slack) {
            return Some(refused);
        }
        // A pod that needs more GPUs than the cheapest type has left grows
        // the NodeClaim to a type with more: the reach over those, where
        // it was made.
        let reach = match beyond {
            Some(b) if floor.lacks_beyond(&b) => floor.beyond_reach.as_deref(),
            _ => None,
        };
        let reach = reach.or(floor.reach.as_deref())?;
        GrowthFloor::refuses_by_reach(reach, need, level?, slack, &grid)
    }

    /// Whether the cost rule refuses pod `p` (compact requests `pod`,
    /// solo price `solo`), held to on-demand by its requirements
    /// (`offers`, see `OfferBits::held_to_on_demand`), on NodeClaim `c` by
    /// the least its growth at on-demand prices costs (see [`HeldFloor`]);
    /// no look-ahead. Only ever a refusal the rule itself would make, but
    /// not one for the pod's request class: its other pods may not be held.
    pub(super) fn held_growth_refuses(
        &mut self,
        c: ClaimIdx,
        p: PodIdx,
        (pod, offers): (Option<Compact>, Option<OfferBits>),
        solo: Option<f64>,
    ) -> Option<JoinAnswer> {
        let (solo, pod) = (solo?, pod?);
        if !OfferBits::held_to_on_demand(offers)
            || self.claims[c].size == Some(self.hints.size_class(p))
        {
            return None;
        }
        let slack = slack(&self.pools[self.claims[c].pool]);
        let floor = self.growth_floor(c)?;
        floor.refuses_held(pod.quantities(), solo, slack)
    }

    /// The cost rule refused pod `p` on NodeClaim `c` where its floor's
    /// steps did not: when `p` is the only pod of its size, the floor's
    /// reach is made (if the floor is current and has none) and given to
    /// the growth index, so that later pods it refuses are passed unasked;
    /// for a pod that needs more GPUs (or other resources past the compact
    /// ones) than the cheapest type has left, the reach over the types
    /// with more (`Run::beyond_reach`), which its walk asks.
    pub(super) fn learn_reach(&mut self, c: ClaimIdx, p: PodIdx) {
        if !self.hints.alone_in_size(p) {
            return;
        }
        let (version, epoch) = (self.hints.version(c), self.hints.epoch());
        let Some(Some(floor)) = self.growth.get(c.get()) else {
            return;
        };
        if floor.version != version || floor.epoch != epoch {
            return;
        }
        let requests = &self.pods[p].requests;
        if requests.compact_request().is_none() && floor.lacks_beyond(&requests.beyond_compact()) {
            if floor.beyond_reach.is_none() {
                let reach = self.beyond_reach(c, floor.now, &floor.used);
                if let Some(Some(floor)) = self.growth.get_mut(c.get()) {
                    floor.beyond_reach = reach.map(Box::new);
                }
            }
            return;
        }
        if floor.reach.is_some() {
            return;
        }
        let (now, used, room) = (floor.now, floor.used, floor.room);
        let floors = &self.type_floors[self.claims[c].pool.get()];
        let reach = self.reach(c, floors, now, (&used, &room));
        let slack = slack(&self.pools[self.claims[c].pool]);
        if let Some(Some(floor)) = self.growth.get_mut(c.get()) {
            floor.reach = Some(Box::new(reach));
            (self.growth_index).set_at(epoch, c.get(), floor, slack);
        }
    }

    /// NodeClaim `c`'s [`GrowthFloor`] now, made when its version or the
    /// offering epoch moved on; `None` for a NodeClaim without types, in a
    /// reservation (priced otherwise), or whose requests or cheapest type
    /// are not compact.
    fn growth_floor(&mut self, c: ClaimIdx) -> Option<&GrowthFloor> {
        let (version, epoch) = (self.hints.version(c), self.hints.epoch());
        let known = self.growth.get(c.get()).and_then(Option::as_ref);
        if !known.is_some_and(|f| f.version == version && f.epoch == epoch) {
            let floor = self.make_growth_floor(c, version, epoch)?;
            self.floor_made(c, &floor);
            if self.growth.len() <= c.get() {
                self.growth.resize(c.get() + 1, None);
            }
            self.growth[c.get()] = Some(floor);
        }
        self.growth.get(c.get())?.as_ref()
    }

    pub(super) fn make_growth_floor(
        &self,
        c: ClaimIdx,
        version: u32,
        epoch: u32,
    ) -> Option<GrowthFloor> {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let before = claim.types.first()?;
        if claim.reservation.is_some() {
            return None;
        }
        let have = (*pool.compact_allocatable.get(before)?)?;
        // A grown type holds the NodeClaim's requests past the compact
        // ones too (its GPUs): that only narrows the types, so floors
        // over every type still bound the step.
        let used = claim.requests.compact_head();
        let room = claim
            .requests
            .compact_room(&pool.types[before].allocatable)?;
        let now = offered_price(pool, before, OfferBits::of_claim(claim, pool));
        let floors = &self.type_floors[claim.pool.get()];
        let priced = floors.priced(&claim.zone_mask, claim.capacity_types);
        let held = floors.held_to_on_demand(&claim.zone_mask, claim.capacity_types);
        let h = have.quantities();
        let mut least = [f64::INFINITY; COMPACT];
        let mut least_held = [f64::INFINITY; COMPACT];
        for t in claim.types.iter().filter(|&t| t != before) {
            let held_settled = held.is_none_or(|held| floors.settled(held, t, &least_held, h));
            if floors.settled(priced, t, &least, h) && held_settled {
                break;
            }
            let price = floors.floor_at(priced, t);
            let held_price = held.map_or(f64::INFINITY, |held| floors.floor_at(held, t));
            let more = pool.compact_allocatable.get(t).copied().flatten();
            for d in 0..COMPACT {
                // A type the compact lists do not decide may hold anything.
                if more.is_none_or(|a| a.quantities()[d] > h[d]) {
                    least[d] = least[d].min(price);
                    least_held[d] = least_held[d].min(held_price);
                }
            }
        }
        let on_demand = held.map(|held| HeldFloor {
            // The grown type is one of the NodeClaim's, from its cheapest on.
            base: floors.least_from(held, before) - now,
            steps: least_held.map(|l| l - now),
        });
        let mut beyond_room = floors.beyond_most[before];
        for (r, u) in beyond_room.iter_mut().zip(claim.requests.beyond_compact()) {
            *r = r.saturating_sub(u).max(0);
        }
        let beyond_steps = floors
            .least_beyond(&claim.types, priced, before)
            .map(|l| l - now);
        Some(GrowthFloor {
            version,
            epoch,
            room,
            steps: least.map(|l| l - now),
            beyond_room,
            beyond_steps,
            now,
            used,
            reach: None,
            beyond_reach: None,
            on_demand,
        })
    }

    /// NodeClaim `c`'s [`Reach`] at price `now`, requests `used` and room
    /// `room` in its cheapest type: per level, the most room in each
    /// resource of any of its types whose floor is within the level's
    /// step of `now`; at least `room`. Its types come in the NodePool's
    /// order, which the floors mostly follow: each is counted at the level
    /// of the least floor from it on (`Later::least`), at or below its
    /// own, so a type out of order only widens the reach, as rounding
    /// does; the walk ends past the last level.
    pub(super) fn reach(
        &self,
        c: ClaimIdx,
        floors: &TypeFloors,
        now: f64,
        (used, room): (&Compact, &Compact),
    ) -> Reach {
        let types = self.claims[c].types.iter();
        self.levelled_room(c, floors, now, types, (used, *room.quantities()))
    }

    /// NodeClaim `c`'s reach (see [`Self::reach`]) over the types with
    /// more of some resource past the compact ones than its cheapest type
    /// has, its requests `used` and price `now`: per level, the most room
    /// in each compact resource of any of those whose floor is within the
    /// level's step of `now`, and none (`i64::MIN`) at a level none is
    /// within. A pod that needs more of such a resource than the cheapest
    /// type has left grows the NodeClaim to one of them. `None` for a
    /// NodeClaim without types.
    pub(super) fn beyond_reach(&self, c: ClaimIdx, now: f64, used: &Compact) -> Option<Reach> {
        let claim = &self.claims[c];
        let floors = &self.type_floors[claim.pool.get()];
        let have = floors.beyond_most[claim.types.first()?];
        let types = (claim.types.iter_in_all(Some(&floors.beyond), &[]))
            .filter(|&t| (0..BEYOND).any(|e| floors.beyond_most[t][e] > have[e]));
        Some(self.levelled_room(c, floors, now, types, (used, [i64::MIN; COMPACT])))
    }

    /// Per level, the most room past `used` in each compact resource of
    /// any of `types` (NodeClaim `c`'s, in its order) whose floor is
    /// within the level's step of `now`, and at least `least`.
    fn levelled_room(
        &self,
        c: ClaimIdx,
        floors: &TypeFloors,
        now: f64,
        types: impl Iterator<Item = usize>,
        (used, least): (&Compact, [i64; COMPACT]),
    ) -> Reach {
        let claim = &self.claims[c];
        let priced = floors.priced(&claim.zone_mask, claim.capacity_types);
        let slack = slack(&self.pools[claim.pool]);
        let limit = |k: usize| (now + self.step_grid.price(k) * slack) * (1.0 + LIMIT_MARGIN);
        let mut most = [[i64::MIN; COMPACT]; LEVELS];
        let (mut k, mut below) = (0, limit(0));
        'types: for t in types {
            let least = floors.least_from(priced, t);
            while least.partial_cmp(&below).is_none_or(|o| o.is_gt()) {
                k += 1;
                if k == LEVELS {
                    break 'types;
                }
                below = limit(k);
            }
            for (m, a) in most[k].iter_mut().zip(floors.most[t]) {
                *m = (*m).max(a);
            }
        }
        let (used, mut acc) = (used.quantities(), least);
        most.map(|level| {
            for d in 0..COMPACT {
                acc[d] = acc[d].max(level[d].saturating_sub(used[d]));
            }
            acc
        })
    }
}

/// A reach's price limit is raised by this much, so that no type whose
/// step is within a level is left out by the rounding of the sum.
const LIMIT_MARGIN: f64 = 1e-9;
