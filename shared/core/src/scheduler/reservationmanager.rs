//! Capacity reservations during one run (Karpenter's `ReservationManager`):
//! instances left per reservation, pinning a new NodeClaim to one, and why a pod found none.

use crate::catalog::CapacityType;
use crate::labels;
use std::collections::VecDeque;

use crate::model::{CapacityReservation, NodePool, Pod};
use crate::plan::ReservationUse;
use crate::requirements::{Requirement, Requirements};

use super::explain::{Refusal, Unplaced};
use super::index::{PodIdx, PoolIdx};
use super::plan_output::offering_order;
use super::pools::PoolOffering;
use super::pools::{self, Pool};
use super::Run;

/// Reservation bookkeeping: O(1) per NodeClaim; an exhausted reservation
/// switches its offerings off once (`Run::take_reservation`).
#[derive(Clone)]
pub(super) struct Reservations<'a> {
    pub(super) all: &'a [crate::model::CapacityReservation],
    /// Instances available when the run started.
    pub(super) start: Vec<u32>,
    /// Instances left.
    pub(super) left: Vec<u32>,
    /// Where each reservation's offerings are: (pool, type, offering).
    pub(super) offerings: Vec<Vec<(PoolIdx, usize, usize)>>,
    /// Selected by at least one NodePool's NodeClass.
    pub(super) offered: Vec<bool>,
}

impl<'a> Reservations<'a> {
    /// The run's reservations (`available` instances each when it starts)
    /// and where the NodePools offer them.
    pub(super) fn new(all: &'a [CapacityReservation], pools: &[Pool], available: Vec<u32>) -> Self {
        let n_res = all.len();
        let mut res = Reservations {
            all,
            start: available.clone(),
            left: available,
            offerings: vec![vec![]; n_res],
            offered: vec![false; n_res],
        };
        for (pi, pool) in PoolIdx::enumerate(pools) {
            for &r in &pool.reservations {
                res.offered[r as usize] = true;
            }
            for (t, ty) in pool
                .types
                .iter()
                .enumerate()
                .filter(|(_, t)| t.has_reserved)
            {
                for (oi, o) in ty.offerings.iter().enumerate() {
                    if o.res_index != pools::NO_RESERVATION {
                        res.offerings[o.res_index as usize].push((pi, t, oi));
                    }
                }
            }
        }
        res
    }

    /// What the plan says about the reservations a NodePool offers: each
    /// one's instances available at the start and used, by id.
    pub(super) fn uses(&self) -> Vec<ReservationUse> {
        let mut reservations: Vec<ReservationUse> = (0..self.all.len())
            .filter(|&r| self.offered[r])
            .map(|r| {
                let cr = &self.all[r];
                ReservationUse {
                    id: cr.id.clone(),
                    instance_type: cr.instance_type.clone(),
                    zone: cr.availability_zone.clone(),
                    reservation_type: crate::reservations::reservation_type_label(
                        cr.reservation_type,
                    )
                    .to_string(),
                    instance_match_criteria: cr.instance_match_criteria.clone(),
                    available: self.start[r],
                    used: self.start[r] - self.left[r],
                }
            })
            .collect();
        reservations.sort_by(|a, b| a.id.cmp(&b.id));
        reservations
    }
}

/// Appends [`RESERVED_GATE_OFF`] to the reasons of the pods of `left`
/// that only reserved capacity could take.
pub(super) fn reserved_gate_off(
    left: &VecDeque<PodIdx>,
    pods: &[Pod],
    pools: &[NodePool],
    errors: &mut [Option<Unplaced>],
) {
    for &p in left {
        if errors[p].is_some() && needs_reserved(&pods[p], pools) {
            errors[p] = errors[p]
                .take()
                .map(|e| Unplaced::ReservedGateOff(Box::new(e)));
        }
    }
}

/// Appended to the reason of a pod that only reserved capacity could take
/// while the ReservedCapacity feature gate is off.
pub(super) const RESERVED_GATE_OFF: &str = " (the ReservedCapacity feature gate is off, so no reserved capacity is offered; flotilla plan --reserved-capacity turns it on)";

/// Whether `reqs` leave only reserved capacity: `capacity-type` allows
/// `reserved` and neither spot nor on-demand, or a reservation id or type
/// is asked for.
pub(super) fn only_reserved(reqs: &Requirements) -> bool {
    let ct = |v: &str| reqs.allows(labels::CAPACITY_TYPE, v);
    let asks = |k: &str| reqs.get(k).is_some_and(|r| !r.is_complement());
    (ct(labels::CAPACITY_TYPE_RESERVED)
        && !ct(CapacityType::Spot.as_str())
        && !ct(CapacityType::OnDemand.as_str()))
        || asks(labels::CAPACITY_RESERVATION_ID)
        || asks(labels::CAPACITY_RESERVATION_TYPE)
}

/// Whether only reserved capacity could take `pod`: it asks for it (node
/// selector, or every required affinity term), or every NodePool that
/// launches offers nothing else.
pub(super) fn needs_reserved(pod: &Pod, pools: &[crate::model::NodePool]) -> bool {
    let pod_only = only_reserved(&pod.node_selector)
        || (!pod.required_terms.is_empty()
            && pod
                .required_terms
                .iter()
                .all(|t| only_reserved(&pod.node_selector.intersection(t))));
    let mut launching = pools
        .iter()
        .filter(|np| np.unavailable.is_none())
        .peekable();
    pod_only || (launching.peek().is_some() && launching.all(|np| only_reserved(&np.requirements)))
}

impl<'a> Run<'a> {
    /// One more NodeClaim launches into reservation `r`. When that was its
    /// last instance, its offerings are switched off everywhere and the
    /// caches that depend on offerings are dropped (once per reservation).
    pub(super) fn take_reservation(&mut self, r: u32) {
        let r = r as usize;
        self.res.left[r] = self.res.left[r].saturating_sub(1);
        if self.res.left[r] > 0 {
            return;
        }
        for &(pi, t, oi) in &self.res.offerings[r] {
            std::sync::Arc::make_mut(&mut self.pools[pi].types)[t].offerings[oi].available = 0;
        }
        self.hints.offerings_changed();
    }

    /// Adds to a NodePool's reason the used-up reservations that are why
    /// the pod found no room: only when the pod, in this NodePool, may use
    /// nothing but reserved capacity (`capacity-type In [reserved]`, or a
    /// reservation id / type it requires), and only the reservations whose
    /// offering the pod could have taken (id, type, zone and instance type
    /// allowed, the pod fits the type).
    pub(super) fn note_exhausted(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        reason: Refusal<'a>,
    ) -> Refusal<'a> {
        let pool = &self.pools[pi];
        if pool.reservations.is_empty() || !pool.requirements.compatible_ok(pod_reqs) {
            return reason;
        }
        let merged = pool.requirements.intersection(pod_reqs);
        let filter = pool.filter(&merged);
        if !filter.reserved_only() {
            return reason;
        }
        let requests = pool.daemon_overhead.plus(&self.pods[p].requests);
        let exhausted: Vec<String> = pool
            .reservations
            .iter()
            .map(|&r| r as usize)
            .filter(|&r| self.res.left[r] == 0)
            .filter(|&r| {
                let held = filter.clone().holding(Some(r as u32));
                self.res.offerings[r].iter().any(|&(opi, t, oi)| {
                    let ty = &pool.types[t];
                    opi == pi
                        && held.allows(&ty.offerings[oi])
                        && requests.fits_in(&ty.allocatable)
                        && ty.requirements.intersects_ok(&merged)
                })
            })
            .map(|r| {
                let cr = &self.res.all[r];
                format!(
                    "{} ({} in {}: {} of {} available instances planned)",
                    cr.id,
                    cr.instance_type,
                    cr.availability_zone,
                    self.res.start[r] - self.res.left[r],
                    self.res.start[r]
                )
            })
            .collect();
        if exhausted.is_empty() {
            reason
        } else {
            Refusal::Exhausted {
                reason: Box::new(reason),
                reservations: exhausted,
            }
        }
    }

    /// Reserved offerings first: when one of `types` has an available
    /// reserved offering under `merged`, the new NodeClaim launches into the
    /// best of them (cheapest on-demand-equivalent price, then type and
    /// zone) and is pinned to it (capacity type, reservation id and type,
    /// zone, instance type); otherwise it is kept out of every reservation
    /// (`capacity-type NotIn [reserved]`), since only pinned NodeClaims are
    /// counted against a reservation.
    pub(super) fn reserve(
        &self,
        pi: PoolIdx,
        merged: &mut Requirements,
        types: Vec<usize>,
    ) -> Result<(Vec<usize>, Option<u32>), Refusal<'a>> {
        let pool = &self.pools[pi];
        if pool.reservations.is_empty()
            || !merged.allows(labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_RESERVED)
        {
            return Ok((types, None));
        }
        if let Some((t, o)) = self.best_reserved_offering(pi, merged, &types) {
            self.pin_to_reservation(pi, merged, t, o);
            return Ok((vec![t], Some(o.res_index)));
        }
        self.keep_out_of_reservations(pi, merged, types)
    }

    /// The best available reserved offering of `types` under `merged`
    /// (cheapest on-demand-equivalent price, then type and zone).
    fn best_reserved_offering(
        &self,
        pi: PoolIdx,
        merged: &Requirements,
        types: &[usize],
    ) -> Option<(usize, &PoolOffering)> {
        let pool = &self.pools[pi];
        let filter = pool.filter(merged);
        let mut best: Option<(usize, &PoolOffering)> = None;
        for &t in types.iter().filter(|&&t| pool.types[t].has_reserved) {
            for o in pool.types[t].offerings.iter().filter(|o| filter.allows(o)) {
                if o.capacity_type == CapacityType::Reserved
                    && best.is_none_or(|b| offering_order(pool, (t, o), b).is_lt())
                {
                    best = Some((t, o));
                }
            }
        }
        best
    }

    /// Pins a new NodeClaim to reserved offering `o` of type `t`: capacity
    /// type, reservation id and type, zone and instance type.
    fn pin_to_reservation(
        &self,
        pi: PoolIdx,
        merged: &mut Requirements,
        t: usize,
        o: &PoolOffering,
    ) {
        let pool = &self.pools[pi];
        let r = o
            .reservation
            .as_ref()
            .expect("reserved offerings have a reservation");
        merged.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_RESERVED],
        ));
        merged.add(Requirement::in_values(
            labels::CAPACITY_RESERVATION_ID,
            [r.id.as_str()],
        ));
        merged.add(Requirement::in_values(
            labels::CAPACITY_RESERVATION_TYPE,
            [crate::reservations::reservation_type_label(
                r.reservation_type,
            )],
        ));
        merged.add(Requirement::in_values(labels::ZONE, [o.zone.as_str()]));
        merged.add(Requirement::in_values(
            labels::INSTANCE_TYPE,
            [pool.types[t].name.as_str()],
        ));
    }

    /// Keeps a new NodeClaim out of every reservation
    /// (`capacity-type NotIn [reserved]`) and `types` to those with an
    /// offering left under it.
    fn keep_out_of_reservations(
        &self,
        pi: PoolIdx,
        merged: &mut Requirements,
        mut types: Vec<usize>,
    ) -> Result<(Vec<usize>, Option<u32>), Refusal<'a>> {
        let pool = &self.pools[pi];
        merged.add(Requirement::not_in(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_RESERVED],
        ));
        let filter = pool.filter(merged);
        types.retain(|&t| pool.types[t].has_offering(&filter));
        if types.is_empty() {
            return Err(Refusal::NoUnreservedType {
                pool: pool.np.name.as_str(),
                requirements: Box::new(merged.clone()),
            });
        }
        Ok((types, None))
    }
}
