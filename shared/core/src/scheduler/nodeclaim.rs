//! The NodeClaim being planned (Karpenter's `NodeClaim` in its scheduling
//! package): what it holds, whether a pod may join it, a new one for a pod.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::model::Pod;
use crate::requirements::{Requirement, Requirements};
use crate::resources::{Compact, Resources};

use super::explain::ClaimRefusal;
use super::explain::{display_reqs, Refusal};
use super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::podtopology::ActiveTopology;
use super::pools::{self};
use super::typeset::TypeSet;
use super::{min_values, MinValuesPolicy, Run, Trial};

#[derive(Clone)]
pub(super) struct Claim {
    pub(super) pool: PoolIdx,
    pub(super) name: String,
    pub(super) requirements: Requirements,
    /// The pool's types that can still hold every pod.
    pub(super) types: TypeSet,
    pub(super) requests: Resources,
    pub(super) pods: Vec<PodIdx>,
    pub(super) host_ports: BTreeSet<(String, i32)>,
    /// Component-wise max allocatable over `types` (cheap rejection).
    pub(super) max_allocatable: Resources,
    /// `requests.compact_room(&max_allocatable)`, kept with them: the
    /// cheap rejection for compact requests (see [`Claim::may_hold`]).
    pub(super) compact_room: Option<Compact>,
    /// Component-wise max capacity over `types` (charged against limits).
    pub(super) max_capacity: Resources,
    /// The size class every pod on this NodeClaim has, if they share one.
    pub(super) size: Option<usize>,
    /// Whether any pod has joined yet.
    pub(super) used: bool,
    /// The capacity reservation it launches into (index into
    /// `ClusterState::capacity_reservations`). Such a NodeClaim is pinned to
    /// the reservation's one type and zone, so no pod can make it drop its
    /// reserved offering (the RFC's rule); one that is not in a
    /// reservation never takes a reserved offering.
    pub(super) reservation: Option<u32>,
    /// The last `join_answer` question for this NodeClaim, and its
    /// answer.
    pub(super) memo: Option<JoinMemo>,
    pub(super) memo_answer: JoinAnswer,
    /// Whether the requirements pin the NodeClaim to one zone.
    pub(super) zone_pin: ZonePin,
    /// The zones the requirements allow, as bits.
    pub(super) zone_mask: ZoneMask,
    /// The capacity types the requirements allow, as bits
    /// (`pools::capacity_type_bits`).
    pub(super) capacity_types: u8,
    /// Per key, the distinct values its types must keep (the NodePool's
    /// `minValues`, lowered where the BestEffort policy relaxed them).
    pub(super) min_values: BTreeMap<String, u32>,
    /// Whether the BestEffort policy lowered a `minValues`.
    pub(super) min_values_relaxed: bool,
}

/// A NodeClaim's zone requirement, for the spread pre-check in `Run::add`.
#[derive(Clone, Copy)]
pub(super) enum ZonePin {
    /// Not pinned to one zone.
    Free,
    /// Pinned to the zone of this bit of the catalog's zone list.
    Bit(u64),
    /// Pinned to a zone outside the first 64 of the list.
    Other,
}

impl ZonePin {
    /// Buckets of `bucket`: free, one per zone bit, other.
    pub(super) const BUCKETS: usize = 66;

    /// Whether the requirements pin one zone.
    pub(super) fn pinned(self) -> bool {
        !matches!(self, ZonePin::Free)
    }

    pub(super) fn bucket(self) -> usize {
        match self {
            ZonePin::Free => 0,
            ZonePin::Bit(b) => 1 + b.trailing_zeros() as usize,
            ZonePin::Other => Self::BUCKETS - 1,
        }
    }

    pub(super) fn of(reqs: &Requirements, zones: &[String]) -> ZonePin {
        let Some(z) = reqs.get(labels::ZONE) else {
            return ZonePin::Free;
        };
        if z.is_complement() || z.values().len() != 1 {
            return ZonePin::Free;
        }
        let Some(v) = z.values().iter().next() else {
            return ZonePin::Free;
        };
        match zones.iter().position(|x| x == v) {
            Some(i) if i < 64 => ZonePin::Bit(1 << i),
            _ => ZonePin::Other,
        }
    }
}

/// The zones a NodeClaim's zone requirement allows, for the affinity
/// pre-check in `Run::try_claim` (see `ActiveTopology::affinity_zone_bits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ZoneMask {
    /// No zone requirement.
    Unrestricted,
    /// These bits of the catalog's zone list (every value is among the
    /// first 64 of the list).
    Bits(u64),
    /// Not known as bits: the requirement itself answers.
    Unknown,
}

impl ZoneMask {
    pub(super) fn of(reqs: &Requirements, zones: &[String]) -> ZoneMask {
        let Some(z) = reqs.get(labels::ZONE) else {
            return ZoneMask::Unrestricted;
        };
        if z.is_complement() {
            return ZoneMask::Unknown;
        }
        let mut bits = 0u64;
        for v in z.values() {
            match zones.iter().position(|x| x == v) {
                Some(i) if i < 64 => bits |= 1 << i,
                _ => return ZoneMask::Unknown,
            }
        }
        ZoneMask::Bits(bits)
    }
}

impl Claim {
    /// An empty NodeClaim of pool `pi` named `name` with `requirements`
    /// (its pods join by `commit`), holding only the daemonsets' `requests`.
    pub(super) fn new(
        pi: PoolIdx,
        name: String,
        requirements: Requirements,
        requests: Resources,
        reservation: Option<u32>,
        (min_values, min_values_relaxed): (BTreeMap<String, u32>, bool),
    ) -> Claim {
        let capacity_types = super::pools::capacity_type_bits(&requirements);
        let mut claim = Claim {
            pool: pi,
            name,
            requirements,
            types: TypeSet::default(),
            requests,
            pods: vec![],
            host_ports: BTreeSet::new(),
            compact_room: None,
            max_allocatable: Resources::new(),
            max_capacity: Resources::new(),
            size: None,
            used: false,
            reservation,
            memo: None,
            memo_answer: JoinAnswer::Never,
            zone_pin: ZonePin::Free,
            zone_mask: ZoneMask::Unknown,
            capacity_types,
            min_values,
            min_values_relaxed,
        };
        claim.refresh_room();
        claim
    }

    /// Whether a pod of `requests` (`compact`: their compact form) fits
    /// the NodeClaim's largest type with what it holds:
    /// `self.requests.fits_in_with(requests, &self.max_allocatable)`.
    #[inline]
    pub(super) fn may_hold(&self, requests: &Resources, compact: Option<Compact>) -> bool {
        match (compact, self.compact_room) {
            (Some(c), Some(room)) => c.fits_in(&room),
            _ => self.requests.fits_in_with(requests, &self.max_allocatable),
        }
    }

    /// Recomputes `compact_room` after `requests` or `max_allocatable`
    /// changed.
    pub(super) fn refresh_room(&mut self) {
        self.compact_room = self.requests.compact_room(&self.max_allocatable);
    }

    pub(super) fn memo_answer(&self) -> Option<(JoinMemo, JoinAnswer)> {
        self.memo.map(|m| (m, self.memo_answer))
    }
}

/// A `Run::join_answer` question and everything its answer depends on:
/// the pod's request class; the offerings its requirements allow; its size class (requests, NodePools and
/// types) when every pod on the NodeClaim has it, the look-ahead case, and
/// then the pods of the size class still waiting; the NodeClaim's version
/// (see `Hints::version`);
/// and the run's offering epoch (reservations running out change prices).
/// The answer holds for any solo price (see `JoinAnswer`), so pods of one
/// size and different requirements share it (where those allow the same
/// zones and capacity types). Consecutive pods mostly have
/// the same requests (they are sorted by size), so one entry per NodeClaim
/// spares pods that may not use the placement hints (topology spread)
/// re-walking every NodeClaim's type list.
#[derive(Clone, Copy, PartialEq)]
pub(super) struct JoinMemo {
    pub(super) requests: usize,
    /// The zones and capacity types the pod's own requirements allow
    /// (`OfferBits::of_pod`), when they name any.
    pub(super) pod_offers: Option<(u64, u8)>,
    /// The types the pod's requirements allow (`Run::compatible_set`, by
    /// address: a run keeps each set until the offering epoch moves on),
    /// 0 when it names none.
    pub(super) pod_types: usize,
    pub(super) look_ahead: Option<usize>,
    pub(super) version: u32,
    pub(super) size_left: usize,
    pub(super) epoch: u32,
}

/// Whether a pod of some size may join a NodeClaim, as a function of the
/// pod's solo price (see `Run::join_answer`): the cost rule's answer only
/// grows with the solo price, so it is a threshold on it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum JoinAnswer {
    /// The pod does not fit the NodeClaim's largest type.
    Never,
    /// At any solo price (no type chosen yet, or the look-ahead pays).
    Always,
    /// When the price step to the cheapest type holding the grown
    /// NodeClaim is within the solo price times `slack` (infinite when no
    /// type holds it).
    Step { step: f64, slack: f64 },
}

impl JoinAnswer {
    /// The answer for a pod whose solo price is `solo` (`None`: unknown,
    /// which the cost rule does not hold against a pod).
    pub(super) fn admits(self, solo: Option<f64>) -> bool {
        match self {
            JoinAnswer::Never => false,
            JoinAnswer::Always => true,
            JoinAnswer::Step { step, slack } => solo.is_none_or(|s| step <= s * slack),
        }
    }
}

/// The outcome of trying one placement: the new requirements and types.
pub(super) struct Fit {
    pub(super) requirements: FitRequirements,
    pub(super) types: TypeSet,
}

/// A fit's requirements: whole when they had to be built (a new NodeClaim,
/// or topology pinned a domain), else only what the pod narrows, applied
/// to the NodeClaim's own at commit: a trial the cost rule then refuses
/// copies nothing.
pub(super) enum FitRequirements {
    Whole(Requirements),
    Narrowed(Requirements),
}

impl FitRequirements {
    /// What the fit narrows the NodeClaim's requirements to on the keys it
    /// names (all of them when whole), as a filter reads them.
    pub(super) fn narrowing(&self) -> &Requirements {
        match self {
            FitRequirements::Whole(r) | FitRequirements::Narrowed(r) => r,
        }
    }

    /// Requirements `base` (the NodeClaim's) become on commit.
    fn apply_to(self, base: &mut Requirements) {
        match self {
            FitRequirements::Whole(r) => *base = r,
            FitRequirements::Narrowed(changed) => {
                for r in changed.iter() {
                    base.replace(r.clone());
                }
            }
        }
    }
}

/// Keys that decide which offerings of a type a NodeClaim may take.
pub(super) const OFFERING_KEYS: [&str; 4] = [
    labels::ZONE,
    labels::CAPACITY_TYPE,
    labels::CAPACITY_RESERVATION_ID,
    labels::CAPACITY_RESERVATION_TYPE,
];

/// [`narrowing`] of `base` to `base ∩ extra`, then each of `added` in
/// order (as [`Requirements::add`] applies them), built without that
/// intersection: only keys `extra` or `added` name can narrow.
pub(super) fn narrowed(
    base: &Requirements,
    extra: &Requirements,
    added: &[Requirement],
) -> Requirements {
    let narrow = |key: &str| -> Option<Requirement> {
        Requirements::added_on(base.intersection_on(extra, key), added, key)
            .filter(|c| Some(c) != base.get(key))
    };
    let mut out: Vec<Requirement> = extra.iter().filter_map(|r| narrow(&r.key)).collect();
    for (i, r) in added.iter().enumerate() {
        let seen = extra.has_key(&r.key) || added[..i].iter().any(|a| a.key == r.key);
        if !seen {
            out.extend(narrow(&r.key));
        }
    }
    Requirements::from_iter_reqs(out)
}

/// The requirements of `merged` that differ from `base`'s on the same key
/// (`merged` is `base` intersected with more: it never drops a key).
pub(super) fn narrowing(base: &Requirements, merged: &Requirements) -> Requirements {
    // Both are sorted by key: one walk.
    let mut old = base.iter().peekable();
    Requirements::from_iter_reqs(
        merged
            .iter()
            .filter(|r| {
                while old.next_if(|b| b.key < r.key).is_some() {}
                old.next_if(|b| b.key == r.key) != Some(*r)
            })
            .cloned()
            .collect::<Vec<_>>(),
    )
}

/// Whether a DaemonSet on nodes of type `ty` holds a host port `pod` asks for.
pub(super) fn daemon_port_conflict(pod: &Pod, ty: &pools::PoolType) -> bool {
    daemon_holds_any(&pod.host_ports, ty)
}

/// Whether a DaemonSet on nodes of type `ty` holds one of the host `ports`
/// (a pod's, or all a NodeClaim's pods').
pub(super) fn daemon_holds_any<'p>(
    ports: impl IntoIterator<Item = &'p (String, i32)>,
    ty: &pools::PoolType,
) -> bool {
    !ty.daemon_ports.is_empty() && ports.into_iter().any(|hp| ty.daemon_ports.contains(hp))
}

impl<'a> Run<'a> {
    /// Step 3 of `add`: a new NodeClaim from the heaviest NodePool that
    /// can take the pod; otherwise each NodePool's reason.
    pub(super) fn open_claim(&mut self, t: &Trial) -> Result<(), Vec<Refusal<'a>>> {
        let p = t.p;
        let (pod_reqs, groups) = (&t.pod_reqs, &t.groups);
        let mut reasons = self.unavailable_pools.clone();
        if self.pools.is_empty() && reasons.is_empty() {
            reasons.push(Refusal::NoNodePool);
        }
        for pi in PoolIdx::all(self.pools.len()) {
            // A heavier NodePool out of room under its limits still takes
            // the pod on a NodeClaim it already has, whatever the cost rule
            // says: weights rank NodePools before price, and those claims
            // are charged against the limits already (their largest type).
            // Off, it is only noted that it would have (see
            // `Run::heavier_would_join`).
            if (self.join_heavier || !self.heavier_would_join)
                && pi.get() > 0
                && self.pools[pi].np.weight < self.pools[0].np.weight
            {
                if let Some((c, fit)) = self.join_heavier_limited(pi, p, pod_reqs, groups) {
                    if self.join_heavier {
                        self.commit(c, p, fit);
                        return Ok(());
                    }
                    self.fork(c, p, fit);
                    self.heavier_would_join = true;
                }
            }
            match self.try_new(pi, p, pod_reqs, groups) {
                Ok((claim, fit)) => {
                    let reservation = claim.reservation;
                    let c = ClaimIdx::new(self.claims.len());
                    if self.pools[pi].remaining.is_some() {
                        self.limited_claims[pi.get()].push(c);
                        self.charged[pi.get()].add_assign(&pools::Limits::one_node());
                        self.charged[pi.get()].add_assign(&claim.max_capacity);
                    }
                    self.claim_by_name.insert(claim.name.clone(), c);
                    self.claims.push(claim);
                    self.commit(c, p, fit);
                    // The charge grew (`commit` sets the types); narrowing
                    // only lowers it.
                    self.note_charge(pi);
                    if let Some(r) = reservation {
                        self.take_reservation(r);
                    }
                    return Ok(());
                }
                Err(e) => reasons.push(self.note_exhausted(pi, p, pod_reqs, e)),
            }
        }
        Err(reasons)
    }

    /// Where the weights-first run first takes another step than this one
    /// (it joins `p` to the heavier NodePool's NodeClaim `c`): a copy of
    /// this run with `join_heavier` on that has done so, in `Run::fork`
    /// for the queue to take (see `queue::Fork`). Until here both runs
    /// took the same steps (with `join_heavier` off, step 3 asks the same
    /// question and only notes the answer), so the copy is the run the
    /// weights-first plan would have made up to here.
    fn fork(&mut self, c: ClaimIdx, p: PodIdx, fit: Fit) {
        let mut fork = Box::new(self.clone());
        fork.join_heavier = true;
        fork.commit(c, p, fit);
        self.fork = Some(fork);
    }

    /// Step 4 of `add`: never lose a pod to the cost rule: the first
    /// NodeClaim that takes it (but those of `refused`, ascending, which
    /// refused it already), with the fit.
    pub(super) fn any_claim_taking(&self, t: &Trial, refused: &[u32]) -> Option<(ClaimIdx, Fit)> {
        let p = t.p;
        let (pod_reqs, groups) = (&t.pod_reqs, &t.groups);
        let any_claim = if groups.affinity_unmet {
            0
        } else {
            self.claims.len()
        };
        if any_claim == 0 || self.zone_refuses_every_claim(p, pod_reqs, groups) {
            return None;
        }
        let mut known = refused.iter().peekable();
        // A NodeClaim none of whose types the pod's requirements allow
        // would refuse it (no instance type): its trial is skipped.
        let allowed: Vec<TypeSet> = PoolIdx::all(self.pools.len())
            .map(|pi| self.types_allowing(pi, pod_reqs))
            .collect();
        for c in ClaimIdx::all(any_claim) {
            if known.next_if(|&&k| k as usize == c.get()).is_some() {
                continue;
            }
            if !self.claims[c]
                .types
                .intersects(&allowed[self.claims[c].pool])
            {
                continue;
            }
            if let Ok(fit) = self.try_claim(c, p, pod_reqs, groups) {
                return Some((c, fit));
            }
        }
        None
    }

    /// A NodeClaim of a NodePool heavier than `pi` and with limits that
    /// can take pod `p` (heaviest NodePool first, then creation order);
    /// see step 3 of `add`.
    pub(super) fn join_heavier_limited(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Option<(ClaimIdx, Fit)> {
        let weight = self.pools[pi].np.weight;
        let heavier: Vec<PoolIdx> = PoolIdx::all(pi.get())
            .filter(|&h| self.pools[h].np.weight > weight && self.pools[h].remaining.is_some())
            .collect();
        if heavier.is_empty() {
            return None;
        }
        let requests = &self.pods[p].requests;
        let compact = requests.compact_request();
        for h in heavier {
            for &c in &self.limited_claims[h.get()] {
                if !self.claims[c].may_hold(requests, compact) {
                    continue;
                }
                if let Ok(fit) = self.try_claim(c, p, pod_reqs, groups) {
                    return Some((c, fit));
                }
            }
        }
        None
    }

    /// Tries pod `p` on planned NodeClaim `c`: the NodeClaim's requirements
    /// and instance types should it join, or why it may not.
    pub(super) fn try_claim(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<Fit, ClaimRefusal> {
        let claim = &self.claims[c];
        if let Some(refusal) = self.cheap_refusal(claim, p, pod_reqs, groups) {
            return Err(refusal);
        }
        // Only the keys the pod (or topology) narrowed need checking: every
        // type of the claim already intersects the claim's requirements.
        // The NodeClaim's merged requirements are built only for a fit.
        let (changed, merged) = self.claim_narrowing(c, p, pod_reqs, groups)?;
        let types = self.types_fitting(claim, &self.pods[p], &changed)?;
        let requirements = match merged {
            Some(m) => FitRequirements::Whole(m),
            None => FitRequirements::Narrowed(changed),
        };
        Ok(Fit {
            requirements,
            types,
        })
    }

    /// The refusals of pod `p` on `claim` that need nothing built (taints,
    /// pod affinity, room, topology on hostname and zone, host ports,
    /// requirements): `None` when the pod may still fit.
    fn cheap_refusal(
        &self,
        claim: &Claim,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Option<ClaimRefusal> {
        let pod = &self.pods[p];
        if groups.pool_blocked[claim.pool] {
            return Some(ClaimRefusal::Taint);
        }
        if groups.affinity_unmet {
            return Some(ClaimRefusal::Topology);
        }
        if !claim
            .requests
            .fits_in_with(&pod.requests, &claim.max_allocatable)
        {
            return Some(ClaimRefusal::Full);
        }
        // Topology on hostname (a NodeClaim's only hostname is its name)
        // and on zone, before anything is built.
        if !self.topology.admits_host(pod, &groups.groups, &claim.name)
            || !self.zone_topology_admits(claim, p, pod_reqs, groups)
        {
            return Some(ClaimRefusal::Topology);
        }
        if pod
            .host_ports
            .iter()
            .any(|hp| claim.host_ports.contains(hp))
        {
            return Some(ClaimRefusal::HostPort);
        }
        if groups.affinity_zones.is_some() && !affinity_zone_admits(claim, groups) {
            return Some(ClaimRefusal::Topology);
        }
        if !claim.requirements.compatible_ok(pod_reqs) {
            return Some(ClaimRefusal::Requirements);
        }
        None
    }

    /// The instance types of `claim` that still hold its pods and `pod`
    /// once the requirements in `changed` narrow it (offerings, DaemonSet
    /// host ports and `minValues` included).
    fn types_fitting(
        &self,
        claim: &Claim,
        pod: &Pod,
        changed: &Requirements,
    ) -> Result<TypeSet, ClaimRefusal> {
        let pool = &self.pools[claim.pool];
        let requests = claim.requests.plus(&pod.requests);
        let offerings_change = changed
            .iter()
            .any(|r| OFFERING_KEYS.contains(&r.key.as_str()));
        let offering_reqs = if offerings_change {
            Requirements::from_iter_reqs(OFFERING_KEYS.iter().filter_map(|k| {
                changed
                    .get(k)
                    .or_else(|| claim.requirements.get(k))
                    .cloned()
            }))
        } else {
            Requirements::default()
        };
        let filter = pool.filter(&offering_reqs).holding(claim.reservation);
        let mut candidates = std::borrow::Cow::Borrowed(&claim.types);
        for r in changed.iter() {
            let allowed = self.types_intersecting(claim.pool, r);
            candidates = std::borrow::Cow::Owned(candidates.intersect(&allowed));
            if candidates.is_empty() {
                return Err(ClaimRefusal::NoInstanceType);
            }
        }
        let compact = requests.compact_request();
        let mut types = pool.holding(&candidates, &requests, compact);
        // The type itself is looked at only when the pod asks for host
        // ports some DaemonSet of the NodePool could hold, or the
        // offerings change: most trials stay in the bit sets.
        let ports = pool.daemons_may_hold(&pod.host_ports);
        if ports || offerings_change {
            types = types.filter(|t| {
                (!ports || !daemon_port_conflict(pod, &pool.types[t]))
                    && (!offerings_change || pool.types[t].has_offering(&filter))
            });
        }
        if types.is_empty() {
            return Err(ClaimRefusal::NoInstanceType);
        }
        if claim.reservation.is_none() && !min_values::met(pool, types.iter(), &claim.min_values) {
            return Err(ClaimRefusal::MinValues);
        }
        Ok(types)
    }

    /// Whether topology admits NodeClaim `claim` for pod `p` on the zone
    /// key alone: a necessary condition for [`Self::claim_narrowing`],
    /// answered once per zone mask in a trial (`groups` is the trial's).
    fn zone_topology_admits(
        &self,
        claim: &Claim,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> bool {
        !self.topology.is_active() || self.zone_mask_admits(claim.zone_mask, p, pod_reqs, groups)
    }

    /// Whether topology admits pod `p` on the zone key alone on a
    /// NodeClaim whose zone requirement is `mask` (`Unknown`: yes).
    fn zone_mask_admits(
        &self,
        mask: ZoneMask,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> bool {
        if mask == ZoneMask::Unknown || self.topology.key_free(&groups.groups, labels::ZONE) {
            return true;
        }
        let known = groups
            .zone_verdicts
            .borrow()
            .iter()
            .find(|(m, _)| *m == mask)
            .map(|&(_, ok)| ok);
        if let Some(ok) = known {
            return ok;
        }
        // The NodeClaim's zone requirement, from its bits.
        let pod_zones = pod_reqs.get(labels::ZONE);
        let node = match (mask, self.pools.first()) {
            (ZoneMask::Bits(m), Some(pool)) => {
                (self.hints).with_zone_requirement(m, &pool.zones, |zones| {
                    Requirement::meet(Some(zones), pod_zones)
                })
            }
            (ZoneMask::Bits(_), None) => return true,
            _ => Requirement::meet(None, pod_zones),
        };
        let ok = self.topology.admits_on_key(
            &self.pods[p],
            &groups.groups,
            &groups.domains,
            labels::ZONE,
            node,
        );
        groups.zone_verdicts.borrow_mut().push((mask, ok));
        ok
    }

    /// Whether topology refuses pod `p` on the zone key alone on every
    /// NodeClaim of the run (on every zone mask one has had): no trial
    /// can pass, none need be made.
    pub(super) fn zone_refuses_every_claim(
        &self,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> bool {
        self.topology.is_active()
            && (self.hints.zone_masks().iter())
                .all(|&m| !self.zone_mask_admits(m, p, pod_reqs, groups))
    }

    /// What placing pod `p` on NodeClaim `c` narrows (see [`narrowing`]),
    /// and the merged requirements when topology had to build them (it
    /// pins anti-affinity domains).
    fn claim_narrowing(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<(Requirements, Option<Requirements>), ClaimRefusal> {
        let (base, pod) = (&self.claims[c].requirements, &self.pods[p]);
        if !self.topology.is_active() {
            return Ok((narrowed(base, pod_reqs, &[]), None));
        }
        let (g, domains) = (&groups.groups, &groups.domains);
        if groups.pins {
            let merged = self
                .topology
                .add_requirements_over(pod, g, domains, base, pod_reqs)
                .map_err(|_| ClaimRefusal::Topology)?;
            return Ok((narrowing(base, &merged), Some(merged)));
        }
        let added = self
            .topology
            .added_over(pod, g, domains, base, pod_reqs)
            .map_err(|_| ClaimRefusal::Topology)?;
        Ok((narrowed(base, pod_reqs, &added), None))
    }

    pub(super) fn try_new(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<(Claim, Fit), Refusal<'a>> {
        let pool = &self.pools[pi];
        let name = pool.np.name.as_str();
        let pod = &self.pods[p];
        self.pool_refusal(pi, p, pod_reqs, groups)?;
        let n = self.claim_counter.get(&pi).copied().unwrap_or(0) + 1;
        let claim_name = format!("{name}-{n}");
        let mut reqs = pool.requirements.clone();
        reqs.add(Requirement::in_values(
            labels::HOSTNAME,
            [claim_name.as_str()],
        ));
        let mut merged = reqs.intersection(pod_reqs);
        if self.topology.is_active() {
            merged = self
                .topology
                .add_requirements(pod, &groups.groups, &groups.domains, &merged)
                .map_err(|conflict| Refusal::Topology {
                    pool: name,
                    conflict: Box::new(conflict.on_new_node()),
                })?;
        }
        let types = self.types_for_new(pi, p, &merged)?;
        let (types, reservation) = self.reserve(pi, &mut merged, types)?;
        let (min_values, min_values_relaxed) = match reservation {
            Some(_) => (BTreeMap::new(), false),
            None => self.min_values_floor(pi, &types)?,
        };
        let claim = Claim::new(
            pi,
            claim_name,
            reqs,
            pool.daemon_overhead.clone(),
            reservation,
            (min_values, min_values_relaxed),
        );
        Ok((
            claim,
            Fit {
                requirements: FitRequirements::Whole(merged),
                types: TypeSet::from_indices(types, pool.types.len()),
            },
        ))
    }

    /// Why NodePool `pi` cannot launch a node for pod `p` at all, whatever
    /// the instance type (step 3 of `add`).
    fn pool_refusal(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<(), Refusal<'a>> {
        let pool = &self.pools[pi];
        let name = pool.np.name.as_str();
        let pod = &self.pods[p];
        // Karpenter drops such a NodePool before scheduling, with this
        // message.
        if pool.types.is_empty() {
            return Err(Refusal::NoTypesLeft {
                pool: name,
                requirements: display_reqs(&pool.requirements),
            });
        }
        if let Some(t) = groups.blocking_taint(&pool.taints, pod) {
            return Err(Refusal::Taint {
                pool: name,
                taint: Box::new(t.clone()),
            });
        }
        if let Err(error) = pool.requirements.compatible(pod_reqs) {
            return Err(Refusal::Incompatible {
                pool: name,
                error: Box::new(error),
            });
        }
        // A new node's hostname is not known in advance (Karpenter gives
        // NodeClaims a placeholder): a pod that names hosts (a volume pinned
        // to one, or its own affinity) can only go to an existing node.
        if let Some(h) = pod_reqs
            .get(labels::HOSTNAME)
            .filter(|h| !h.is_complement())
        {
            return Err(Refusal::Hostname {
                hosts: Box::new(h.clone()),
            });
        }
        Ok(())
    }

    /// The types of pool `pi` a new NodeClaim with `merged` for pod `p`
    /// may become: compatible, with room for the pod and the daemonsets,
    /// no DaemonSet on its host ports, within the NodePool's limits.
    fn types_for_new(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        merged: &Requirements,
    ) -> Result<Vec<usize>, Refusal<'a>> {
        let pool = &self.pools[pi];
        let name = pool.np.name.as_str();
        let pod = &self.pods[p];
        let requests = pool.daemon_overhead.plus(&pod.requests);
        let compatible = self.compatible_types(pi, merged);
        if compatible.is_empty() {
            return Err(self.no_type_reason(pi, merged));
        }
        let fitting = self.fitting_types(pi, p, &compatible, &requests);
        if fitting.is_empty() {
            return Err(self.explain_no_fit(pi, &compatible, &requests));
        }
        // Types whose DaemonSets hold none of the pod's host ports (the
        // usual case: no DaemonSet binds a host port) leave it as it is.
        let conflict = |&i: &usize| daemon_port_conflict(pod, &pool.types[i]);
        let fitting: std::borrow::Cow<[usize]> =
            if !pool.daemons_may_hold(&pod.host_ports) || !fitting.iter().any(conflict) {
                std::borrow::Cow::Borrowed(&fitting)
            } else {
                let free: Vec<usize> = fitting.iter().copied().filter(|i| !conflict(i)).collect();
                if free.is_empty() {
                    return Err(Refusal::DaemonSetHostPort {
                        pool: name,
                        ports: pod.host_ports.clone(),
                    });
                }
                std::borrow::Cow::Owned(free)
            };
        let fitting = self.under_price_limit(pi, fitting)?;
        self.within_limits(pi, fitting)
    }

    /// `fitting` without the types at or above the run's new-node price
    /// limit ([`super::SchedulerOptions::new_node_price_limit`]); prices
    /// within 1e-6 of it (the plan's rounding) count as at it.
    fn under_price_limit<'f>(
        &self,
        pi: PoolIdx,
        fitting: std::borrow::Cow<'f, [usize]>,
    ) -> Result<std::borrow::Cow<'f, [usize]>, Refusal<'a>> {
        let Some(limit) = self.price_limit else {
            return Ok(fitting);
        };
        let pool = &self.pools[pi];
        let under: Vec<usize> = (fitting.iter().copied())
            .filter(|&i| pool.node_price(pool.types[i].price) < limit - 1e-6)
            .collect();
        if under.is_empty() {
            return Err(Refusal::PriceLimit {
                pool: pool.np.name.as_str(),
                limit,
            });
        }
        Ok(std::borrow::Cow::Owned(under))
    }

    /// Why pool `pi` has no instance type for `merged`, remembered per
    /// requirements (hostname aside) since the answer is asked again.
    fn no_type_reason(&self, pi: PoolIdx, merged: &Requirements) -> Refusal<'a> {
        let mut key = merged.clone();
        key.remove(labels::HOSTNAME);
        if let Some(reason) = self.hints.no_type_reason_cached(pi, &key) {
            return reason;
        }
        let reason = self.explain_no_type(pi, merged);
        self.hints.remember_no_type_reason(pi, key, reason.clone());
        reason
    }

    /// The types of `fitting` a new NodeClaim of pool `pi` may take within
    /// the NodePool's remaining limits, or the limit it would exceed.
    fn within_limits(
        &self,
        pi: PoolIdx,
        fitting: std::borrow::Cow<[usize]>,
    ) -> Result<Vec<usize>, Refusal<'a>> {
        let pool = &self.pools[pi];
        let Some(lim) = &pool.remaining else {
            return Ok(fitting.into_owned());
        };
        let charged = &self.charged[pi.get()];
        debug_assert_eq!(charged, &self.charged_summed(pi));
        let after = lim.after(charged);
        // A NodePool at its limits admits no type: no need to ask each.
        let admitted: Vec<usize> = if after.admits(&pool.capacity_floor) {
            (fitting.iter().copied())
                .filter(|&i| after.admits(&pool.types[i].capacity))
                .collect()
        } else {
            Vec::new()
        };
        if admitted.is_empty() {
            let exceeded = lim
                .exceeded(&pool.types[fitting[0]].capacity, charged)
                .map(|(k, q)| (k.to_string(), q));
            return Err(Refusal::Limits {
                pool: pool.np.name.as_str(),
                exceeded,
            });
        }
        Ok(admitted)
    }

    /// The `minValues` floors of a new NodeClaim of pool `pi` over `types`,
    /// and whether they were relaxed: the NodePool's own when the types
    /// meet them; under BestEffort, lowered to what the types offer;
    /// under Strict, the pod's reason.
    pub(super) fn min_values_floor(
        &self,
        pi: PoolIdx,
        types: &[usize],
    ) -> Result<(BTreeMap<String, u32>, bool), Refusal<'a>> {
        let pool = &self.pools[pi];
        let mut floor = pool.np.min_values.clone();
        let short = min_values::shortfalls(pool, types.iter().copied(), &floor);
        if short.is_empty() {
            return Ok((floor, false));
        }
        if self.min_values_policy == MinValuesPolicy::Strict {
            return Err(Refusal::MinValues {
                pool: pool.np.name.as_str(),
                short,
            });
        }
        for s in &short {
            floor.insert(s.key.clone(), s.have);
        }
        Ok((floor, true))
    }

    /// Pool `pi`'s charge changed: once its limits admit no type (not its
    /// smallest capacity), it is spent for the rest of the run, and the
    /// solo prices, asked of the first NodePool that takes a pod, are
    /// asked again (a pod's own node now comes from a NodePool behind it).
    pub(super) fn note_charge(&mut self, pi: PoolIdx) {
        let pool = &self.pools[pi];
        let Some(lim) = &pool.remaining else {
            return;
        };
        if self.spent[pi.get()]
            || lim
                .after(&self.charged[pi.get()])
                .admits(&pool.capacity_floor)
        {
            return;
        }
        self.spent[pi.get()] = true;
        self.hints.solo_prices_changed();
    }

    /// Resources charged against pool `pi`'s limits (it has some) by this
    /// run's NodeClaims: those of `limited_claims`, which while the queue
    /// runs (the only time new NodeClaims are opened) are every NodeClaim
    /// of a NodePool with limits. Summed: `Run::charged` keeps it.
    pub(super) fn charged_summed(&self, pi: PoolIdx) -> Resources {
        debug_assert_eq!(
            self.limited_claims[pi.get()].len(),
            (self.claims.iter()).filter(|c| c.pool == pi).count()
        );
        let mut r = Resources::new();
        for c in self.limited_claims[pi.get()]
            .iter()
            .map(|&c| &self.claims[c])
        {
            r.add_assign(&c.max_capacity);
            r.add_assign(&pools::Limits::one_node());
        }
        r
    }

    pub(super) fn commit(&mut self, c: ClaimIdx, p: PodIdx, fit: Fit) {
        let pod = &self.pods[p];
        let size = self.hints.size_class(p);
        self.hints.placed(p);
        self.hints.claim_changed(c);
        self.growth_index.claim_changed(c.get());
        let claim = &mut self.claims[c];
        if !claim.used {
            self.growth_index.first_pod(c.get(), size);
        }
        claim.size = if claim.used && claim.size != Some(size) {
            None
        } else {
            Some(size)
        };
        claim.used = true;
        let pool = &self.pools[claim.pool];
        if claim.pods.is_empty() {
            *self.claim_counter.entry(claim.pool).or_default() += 1;
        }
        fit.requirements.apply_to(&mut claim.requirements);
        claim.zone_pin = ZonePin::of(&claim.requirements, &pool.zones);
        self.zone_buckets.moved(c.get(), claim.zone_pin.bucket());
        claim.zone_mask = ZoneMask::of(&claim.requirements, &pool.zones);
        claim.capacity_types = super::pools::capacity_type_bits(&claim.requirements);
        self.hints.remember_zone_mask(claim.zone_mask);
        let types_changed = fit.types.len() != claim.types.len();
        claim.types = fit.types;
        claim.requests.add_assign(&pod.requests);
        claim.pods.push(p);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        if types_changed {
            // The maxima are remembered per type set: NodeClaims of pods of
            // one kind start from, and narrow through, the same sets, so
            // this is a lookup far more often than a pass over the types.
            let before = std::mem::take(&mut claim.max_capacity);
            (claim.max_allocatable, claim.max_capacity) =
                self.hints.type_maxima(claim.pool, pool, &claim.types);
            if pool.remaining.is_some() {
                // Exact: `before` is part of the sum.
                let charged = &mut self.charged[claim.pool.get()];
                *charged = charged.minus(&before);
                charged.add_assign(&claim.max_capacity);
            }
        }
        claim.refresh_room();
        let taints = &self.pools[claim.pool].taints;
        self.topology
            .record(pod, &self.groups[p].inverse, &claim.requirements, taints);
        self.near_placed(c, p);
    }
}

/// Whether `claim` may still land in a zone the pod's required pod
/// affinity admits (`groups.affinity_zones` is set).
fn affinity_zone_admits(claim: &Claim, groups: &ActiveTopology) -> bool {
    match claim.zone_mask {
        ZoneMask::Unrestricted => true,
        ZoneMask::Bits(m) => m & groups.affinity_zone_bits != 0,
        ZoneMask::Unknown => match claim.requirements.get(labels::ZONE) {
            Some(z) if !z.is_complement() => groups.affinity_zone_ok(z.values().iter()),
            _ => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{narrowed, narrowing, JoinAnswer, ZoneMask};
    use crate::labels;
    use crate::requirements::{Operator, Requirement, Requirements};

    /// A remembered cost-rule answer is a threshold on the solo price: the
    /// step must be within the solo price times the slack; an unknown solo
    /// price never holds a pod back, a pod that does not fit never joins.
    #[test]
    fn join_answers_hold_for_every_solo_price() {
        let step = JoinAnswer::Step {
            step: 0.10,
            slack: 1.02,
        };
        let no_type = JoinAnswer::Step {
            step: f64::INFINITY,
            slack: 1.02,
        };
        let cases = [
            (JoinAnswer::Never, None, false),
            (JoinAnswer::Never, Some(1e9), false),
            (JoinAnswer::Always, Some(0.0), true),
            (JoinAnswer::Always, None, true),
            (step, Some(0.05), false),
            (step, Some(0.0981), true),
            (step, Some(0.2), true),
            (step, None, true),
            (no_type, Some(1e9), false),
            (no_type, None, true),
        ];
        for (answer, solo, admits) in cases {
            assert_eq!(answer.admits(solo), admits, "{answer:?} at {solo:?}");
        }
    }

    /// A NodeClaim's zone requirement as bits of the catalog's zone list:
    /// only a plain value list of known zones is a mask.
    #[test]
    fn zone_masks_name_exactly_the_zones_a_claim_allows() {
        let zones: Vec<String> = ["z-a", "z-b", "z-c"].map(String::from).to_vec();
        let zone = |op, v: &[&str]| {
            Requirements::from_iter_reqs([Requirement::new(labels::ZONE, op, v).unwrap()])
        };
        let cases = [
            (Requirements::default(), ZoneMask::Unrestricted),
            (zone(Operator::In, &["z-a", "z-c"]), ZoneMask::Bits(0b101)),
            (zone(Operator::In, &["z-b"]), ZoneMask::Bits(0b010)),
            (zone(Operator::In, &["z-b", "z-x"]), ZoneMask::Unknown),
            (zone(Operator::NotIn, &["z-a"]), ZoneMask::Unknown),
            (zone(Operator::Exists, &[]), ZoneMask::Unknown),
        ];
        for (reqs, want) in cases {
            assert_eq!(ZoneMask::of(&reqs, &zones), want, "{reqs:?}");
        }
    }

    /// A seeded random requirement set over few keys and values, every
    /// operator, so that keys overlap and narrow often.
    fn random_reqs(seed: &mut u64, max: usize) -> Vec<Requirement> {
        let mut next = |n: u64| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) % n
        };
        let keys = ["a", "b", "c", "d"];
        let values = ["1", "2", "3", "4", "5"];
        let ops = [
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Gt,
            Operator::Lt,
        ];
        (0..next(max as u64 + 1))
            .filter_map(|_| {
                let key = keys[next(4) as usize];
                let op = ops[next(6) as usize];
                let vals: Vec<&str> = match op {
                    Operator::Exists | Operator::DoesNotExist => vec![],
                    Operator::Gt | Operator::Lt => vec![values[next(5) as usize]],
                    _ => (0..1 + next(3)).map(|_| values[next(5) as usize]).collect(),
                };
                Requirement::new(key, op, &vals).ok()
            })
            .collect()
    }

    /// `narrowed` (no intersection built) answers as `narrowing` of the
    /// intersection `Requirements::add` builds, on random requirements.
    #[test]
    fn narrowed_is_narrowing_of_the_merged_requirements() {
        let mut seed = 7u64;
        for _ in 0..5000 {
            let base = Requirements::from_iter_reqs(random_reqs(&mut seed, 4));
            let extra = Requirements::from_iter_reqs(random_reqs(&mut seed, 3));
            let added = random_reqs(&mut seed, 3);
            let mut merged = base.intersection(&extra);
            for r in &added {
                merged.add(r.clone());
            }
            assert_eq!(
                narrowed(&base, &extra, &added),
                narrowing(&base, &merged),
                "{base:?} {extra:?} {added:?}"
            );
        }
    }
}
