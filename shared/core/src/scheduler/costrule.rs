//! The cost rule: a pod joins a planned NodeClaim only when growing it costs
//! no more than a node of the pod's own would (with a look-ahead for pods of one size).

use crate::labels;
use crate::model::{untolerated, Pod};
use crate::requirements::Requirements;

use super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::nodeclaim::{Claim, ZoneMask};
use super::nodeclaim::{Fit, JoinAnswer, JoinMemo};
use super::pools::{OfferingFilter, Pool, PoolOffering};
use super::typeset::TypeSet;
use super::Run;

/// Relative slack of the cost rule (see `Run::growth_pays`).
const COST_TOLERANCE: f64 = 1.02;

/// The cost rule's slack on NodePool `pool`: a growth passes when its
/// step is at most the pod's solo price times this.
pub(super) fn slack(pool: &Pool) -> f64 {
    COST_TOLERANCE + pool.tolerance()
}

/// Price per pod slot of pool type `t` for pods shaped like `pod` (price
/// over how many copies fit next to the daemonset overhead), and the copies.
pub(super) fn slot_price(pool: &Pool, t: usize, pod: &Pod) -> Option<(f64, usize)> {
    let ty = &pool.types[t];
    let copies = (ty.allocatable).copies_of(&pool.daemon_overhead, &pod.requests);
    (copies > 0).then(|| (pool.node_price(ty.price) / copies as f64, copies as usize))
}

/// The on-demand capacity type's bit (`CapacityType::bit`).
pub(super) const ON_DEMAND: u8 = 4;

/// The offerings a NodeClaim's price may take: zones (among the first 64
/// of the catalog's list, `PoolOffering::zone_bit`; all bits: any zone)
/// and capacity types, as bits.
#[derive(Debug, Clone, Copy)]
pub(super) struct OfferBits {
    zones: u64,
    capacity_types: u8,
}

impl OfferBits {
    /// Those `filter` allows.
    fn of_filter(filter: &OfferingFilter) -> OfferBits {
        OfferBits {
            zones: filter.zone_bits(),
            capacity_types: filter.capacity_types(),
        }
    }

    /// Those NodeClaim `claim` of `pool` allows.
    pub(super) fn of_claim(claim: &Claim, pool: &Pool) -> OfferBits {
        let zones = match claim.zone_mask {
            ZoneMask::Unrestricted => u64::MAX,
            ZoneMask::Bits(bits) => bits,
            ZoneMask::Unknown => pool.filter(&claim.requirements).zone_bits(),
        };
        OfferBits {
            zones,
            capacity_types: claim.capacity_types,
        }
    }

    /// These, narrowed by `reqs` where they name a zone or capacity type.
    fn narrowed(self, reqs: &Requirements, pool: &Pool) -> OfferBits {
        if !reqs.has_key(labels::ZONE) && !reqs.has_key(labels::CAPACITY_TYPE) {
            return self;
        }
        let other = OfferBits::of_filter(&pool.filter(reqs));
        OfferBits {
            zones: self.zones & other.zones,
            capacity_types: self.capacity_types & other.capacity_types,
        }
    }

    /// Those a pod's own requirements `pod_reqs` leave a NodeClaim that it
    /// joins, on the keys they name (zone, capacity type; `zones`: the
    /// catalog's, which every NodePool shares); `None` when they name
    /// neither. The fit narrows the NodeClaim to these or fewer, so
    /// pricing the grown NodeClaim at these bounds the step from below.
    pub(super) fn of_pod(pod_reqs: &Requirements, zones: &[String]) -> Option<OfferBits> {
        let zone = pod_reqs.has_key(labels::ZONE);
        let capacity_type = pod_reqs.has_key(labels::CAPACITY_TYPE);
        if !zone && !capacity_type {
            return None;
        }
        let filter = OfferingFilter::new(pod_reqs, zones);
        Some(OfferBits {
            zones: if zone { filter.zone_bits() } else { u64::MAX },
            capacity_types: if capacity_type {
                filter.capacity_types()
            } else {
                u8::MAX
            },
        })
    }

    /// Whether a pod whose requirements allow these holds a NodeClaim to
    /// on-demand and to none of its zones (see `growth_floor::HeldFloor`).
    pub(super) fn held_to_on_demand(pod: Option<OfferBits>) -> bool {
        pod.is_some_and(|o| o.zones == u64::MAX && o.capacity_types == ON_DEMAND)
    }

    /// Whether these meet some of `zones` (bits; `None`: not asked) and
    /// of `capacity_types`.
    pub(super) fn meets(self, zones: Option<u64>, capacity_types: u8) -> bool {
        zones.is_none_or(|z| self.zones & z != 0) && self.capacity_types & capacity_types != 0
    }

    /// The offerings both allow.
    fn meet(self, other: OfferBits) -> OfferBits {
        OfferBits {
            zones: self.zones & other.zones,
            capacity_types: self.capacity_types & other.capacity_types,
        }
    }

    fn allows(self, o: &PoolOffering) -> bool {
        let zone_ok = if o.zone_bit != 0 {
            self.zones & o.zone_bit != 0
        } else {
            self.zones == u64::MAX
        };
        zone_ok
            && self.capacity_types & o.capacity_type.bit() != 0
            && o.reservation.is_none()
            && o.available > 0
    }
}

/// What a node of pool type `t` costs (volumes included) at the offering a
/// fleet would take among those `bits` allow: the best capacity type (spot
/// before on-demand), then the cheapest; reserved offerings aside (a
/// NodeClaim outside a reservation never takes one). The type's preferred
/// price (`PoolType::price`) when none is allowed. Pool types are ordered
/// by their preferred price, the cheapest zone's spot where they have one:
/// a NodeClaim that its pods hold to on-demand, or to a dear zone, pays
/// more than that order says.
pub(super) fn offered_price(pool: &Pool, t: usize, bits: OfferBits) -> f64 {
    let ty = &pool.types[t];
    let best = (ty.by_preference.iter())
        .map(|&i| &ty.offerings[i as usize])
        .find(|o| bits.allows(o));
    pool.node_price(best.map_or(ty.price, |o| o.price))
}

impl Run<'_> {
    /// What the NodeClaims planned so far cost as they stand, volumes
    /// included: each at its cheapest type's offering its requirements
    /// allow. The price before the repack, as the cost rule sees it;
    /// `None` when a NodeClaim is in a capacity reservation (the plan
    /// prices its reserved offering, which this does not know).
    pub(super) fn planned_price(&self) -> Option<f64> {
        let claim_price = |claim: &Claim| {
            let pool = &self.pools[claim.pool];
            claim.reservation.is_none().then(|| {
                (claim.types.first()).map_or(0.0, |t| {
                    offered_price(pool, t, OfferBits::of_claim(claim, pool))
                })
            })
        };
        self.claims.iter().map(claim_price).sum()
    }

    /// The solo price of pod `p` (see `solo_price`), remembered per shape.
    pub(super) fn solo(
        &mut self,
        p: PodIdx,
        shape: Option<usize>,
        pod_reqs: &Requirements,
    ) -> Option<f64> {
        match shape.and_then(|s| self.hints.solo_price_cached(s)) {
            Some(cached) => cached,
            None => {
                let v = self.solo_price(p, pod_reqs);
                if let Some(s) = shape {
                    self.hints.remember_solo_price(s, v);
                }
                v
            }
        }
    }

    /// The price of the cheapest node that could run pod `p` alone (with its
    /// NodePool's daemonset overhead), in the first NodePool that can take
    /// it and whose limits are not spent (`Run::note_charge`): where the
    /// pod's own node would come from. Topology is ignored, so this is an
    /// estimate for the cost rule.
    pub(super) fn solo_price(&self, p: PodIdx, pod_reqs: &Requirements) -> Option<f64> {
        let pod = &self.pods[p];
        PoolIdx::enumerate(&self.pools).find_map(|(pi, pool)| {
            if self.spent[pi.get()]
                || untolerated(&pool.taints, &pod.tolerations).is_some()
                || !pool.requirements.compatible_ok(pod_reqs)
            {
                return None;
            }
            let reqs = pool.requirements.intersection(pod_reqs);
            let need = pool.daemon_overhead.plus(&pod.requests);
            let bits = OfferBits::of_filter(&pool.filter(&reqs));
            let mut best: Option<f64> = None;
            for &t in self.compatible_types(pi, &reqs).iter() {
                let ty = &pool.types[t];
                // Types come by their preferred price, which no offering
                // undercuts.
                if best.is_some_and(|b| pool.node_price(ty.price) >= b) {
                    break;
                }
                if need.fits_in(&ty.allocatable) {
                    let price = offered_price(pool, t, bits);
                    best = Some(best.map_or(price, |b| b.min(price)));
                }
            }
            best
        })
    }

    /// The cost rule: a pod joins an in-flight NodeClaim only if the claim's
    /// cheapest type grows in price by no more than a node of the pod's own
    /// would cost (2% tolerance, so linear price steps within a family
    /// count as equal). Karpenter keeps packing until no type fits, which
    /// drives NodeClaims to the largest, often least price-efficient, types.
    pub(super) fn joins_cheaply(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        fit: &Fit,
        solo: Option<f64>,
    ) -> bool {
        fit.types.first().is_none_or(|after| {
            let narrowed = fit.requirements.narrowing();
            self.growth_pays(c, p, pod_reqs, (after, Some(narrowed)), solo)
        })
    }

    /// Whether pod `p` may join NodeClaim `c`, as a threshold on its solo
    /// price (see `JoinAnswer::admits`): a cheap necessary condition for
    /// [`Self::joins_cheaply`] using resources only, from
    /// [`Self::join_answer`] remembered per NodeClaim (see `JoinMemo`).
    /// The answer depends on the pod's requirements (and so on its
    /// relaxation) only through the solo price, which it takes as a
    /// threshold, the zones and capacity types they allow (`pod_offers`,
    /// part of the key), and the best price per slot, cached per NodePool and size
    /// class: pods of one size and different requirements share it.
    pub(super) fn may_join_memo(
        &mut self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        pod_offers: Option<OfferBits>,
        pod_types: Option<&TypeSet>,
    ) -> JoinAnswer {
        let size = self.hints.size_class(p);
        let claim = &self.claims[c];
        let look_ahead = claim.size == Some(size);
        let key = JoinMemo {
            requests: self.hints.req_class(p),
            pod_offers: pod_offers.map(|o| (o.zones, o.capacity_types)),
            pod_types: pod_types.map_or(0, |s| s as *const TypeSet as usize),
            look_ahead: look_ahead.then_some(size),
            version: self.hints.version(c),
            size_left: if look_ahead {
                self.hints.size_left(size)
            } else {
                usize::MAX
            },
            epoch: self.hints.epoch(),
        };
        if let Some((memo, answer)) = claim.memo_answer() {
            // Fewer pods of the size waiting only makes the look-ahead pay
            // less: an answer other than `Always` stands as `size_left` falls.
            let same = JoinMemo {
                size_left: key.size_left,
                ..memo
            } == key;
            let stands = memo.size_left == key.size_left
                || (answer != JoinAnswer::Always && key.size_left < memo.size_left);
            if same && stands {
                return answer;
            }
        }
        let answer = self.join_answer(c, p, pod_reqs, pod_offers, pod_types);
        self.claims[c].memo = Some(key);
        self.claims[c].memo_answer = answer;
        answer
    }

    /// The cost rule on resources and the offerings the pod allows
    /// (`pod_offers`, see `OfferBits::of_pod`), for any solo price: the
    /// grown NodeClaim's cheapest type that holds it must pass the cost
    /// rule.
    pub(super) fn join_answer(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        pod_offers: Option<OfferBits>,
        pod_types: Option<&TypeSet>,
    ) -> JoinAnswer {
        let claim = &self.claims[c];
        let pod_requests = &self.pods[p].requests;
        if !claim
            .requests
            .fits_in_with(pod_requests, &claim.max_allocatable)
        {
            return JoinAnswer::Never;
        }
        let Some(before) = claim.types.first() else {
            return JoinAnswer::Always;
        };
        let requests = claim.requests.plus(pod_requests);
        let pool = &self.pools[claim.pool];
        let slack = slack(pool);
        let compact = requests.compact_request();
        let Some(after) = pool.first_holding(&claim.types, pod_types, &requests, compact) else {
            return JoinAnswer::Step {
                step: f64::INFINITY,
                slack,
            };
        };
        // At the NodeClaim's own offerings, less those the pod's own
        // requirements rule out: what the fit narrows beyond (topology's
        // zone, the pod's types) only makes the step dearer (see
        // `growth_pays`), so this bounds it.
        let step = self.step_to(c, before, after, |own| {
            pod_offers.map_or(own, |pod| own.meet(pod))
        });
        if self.slots_pay(c, p, pod_reqs, after, step, slack) {
            return JoinAnswer::Always;
        }
        JoinAnswer::Step { step, slack }
    }

    /// Whether NodeClaim `c` may grow to type `after.0` (its new cheapest,
    /// under the NodeClaim's requirements narrowed by `after.1`, what the
    /// pod adds) to take pod `p`: the price step, at the offerings the
    /// NodeClaim may take before and after (a pod that holds it to
    /// on-demand or to one zone pays for that), is no more than a node of the pod's own
    /// (`solo`, 2% slack), or, when every pod on the NodeClaim has this
    /// pod's size class, the step is no more than the pods of that size it
    /// makes room for (as many as still wait) would cost at the best price
    /// per pod slot any type offers. The second
    /// test looks ahead: growing a full `t4g.micro` to a `t4g.small` costs a
    /// bit more than one more micro, but the small then holds seven more pods
    /// for nothing.
    pub(super) fn growth_pays(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        after: (usize, Option<&Requirements>),
        solo: Option<f64>,
    ) -> bool {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let Some(before) = claim.types.first() else {
            return true;
        };
        let Some(solo) = solo else { return true };
        let slack = slack(pool);
        let step = self.claim_step(c, before, after);
        step <= solo * slack || self.slots_pay(c, p, pod_reqs, after.0, step, slack)
    }

    /// How much NodeClaim `c` grows in price from type `before` (at the
    /// offerings its requirements allow) to type `after.0` (at those its
    /// requirements narrowed by `after.1` allow).
    pub(super) fn claim_step(
        &self,
        c: ClaimIdx,
        before: usize,
        after: (usize, Option<&Requirements>),
    ) -> f64 {
        let pool = &self.pools[self.claims[c].pool];
        self.step_to(c, before, after.0, |own| {
            after.1.map_or(own, |narrowed| own.narrowed(narrowed, pool))
        })
    }

    /// How much NodeClaim `c` grows in price from type `before` (at the
    /// offerings it allows, `own`) to type `after` (at the offerings
    /// `grow(own)`). A NodeClaim in a capacity reservation is priced at
    /// the types' preferred prices.
    fn step_to(
        &self,
        c: ClaimIdx,
        before: usize,
        after: usize,
        grow: impl FnOnce(OfferBits) -> OfferBits,
    ) -> f64 {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        if claim.reservation.is_some() {
            return pool.types[after].price - pool.types[before].price;
        }
        let own = OfferBits::of_claim(claim, pool);
        let grown = grow(own);
        // A type without an offering the grown NodeClaim allows is priced
        // at the NodeClaim's own offerings (a growth floor's bound).
        let after_price = if pool.types[after].offerings.iter().any(|o| grown.allows(o)) {
            offered_price(pool, after, grown)
        } else {
            offered_price(pool, after, own)
        };
        after_price - offered_price(pool, before, own)
    }

    /// The look-ahead of [`Self::growth_pays`]: whether a price `step` to
    /// type `after` is within the pods of `p`'s size class it makes room
    /// for (as many as still wait) at the best price per pod slot.
    fn slots_pay(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        after: usize,
        step: f64,
        slack: f64,
    ) -> bool {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        // Slots are only meaningful when every pod on the claim has this
        // shape, and only worth buying if pods of the shape are left to fill them.
        let Some(s) = claim.size.filter(|s| self.hints.size_class(p) == *s) else {
            return false;
        };
        let pod = &self.pods[p];
        let Some((_, copies)) = slot_price(pool, after, pod) else {
            return false;
        };
        // Pods of this size the grown NodeClaim would take beyond what it
        // holds, this one included, as far as such pods are still waiting.
        let extra = copies
            .saturating_sub(claim.pods.len())
            .min(self.hints.size_left(s));
        self.best_slot_price(claim.pool, p, pod_reqs)
            .is_some_and(|best| step <= extra as f64 * best * slack)
    }

    /// The lowest price per pod slot for pods of `p`'s shape over the types
    /// of pool `pi` the pod may use; cached per (pool, size class).
    pub(super) fn best_slot_price(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
    ) -> Option<f64> {
        let size = self.hints.size_class(p);
        if let Some(hit) = self.hints.slot_price_cached(pi, size) {
            return hit;
        }
        let pool = &self.pools[pi];
        let reqs = pool.requirements.intersection(pod_reqs);
        let pod = &self.pods[p];
        let best = self
            .compatible_types(pi, &reqs)
            .iter()
            .filter_map(|&t| slot_price(pool, t, pod).map(|(price, _)| price))
            .min_by(f64::total_cmp);
        self.hints.remember_slot_price(pi, size, best);
        best
    }
}
