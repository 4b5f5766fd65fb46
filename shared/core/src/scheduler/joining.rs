//! Step 2 of `Run::add`: the NodeClaims planned in this run that a pod
//! may join, walked with the speed hints (roomy lists, spread hints).

use std::collections::BTreeSet;
use std::rc::Rc;

use super::costrule::OfferBits;
use super::explain::ClaimRefusal;
use super::hints::{Refused, Roomy, SpreadHint};
use super::index::ClaimIdx;
use crate::labels;
use crate::model::untolerated;
use crate::requirements::Requirements;
use crate::resources::Compact;

use super::nodeclaim::{Claim, Fit, ZoneMask, ZonePin};
use super::typeset::TypeSet;
use super::zone_buckets::ZoneBuckets;
use super::{Run, Trial};

#[cfg(test)]
thread_local! {
    /// Tests: size classes' walks ask every NodeClaim (no `Walk::jump`).
    pub(super) static ASK_EACH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests: how many runs size classes' walks jumped.
    pub(super) static JUMPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether size classes' walks ask every NodeClaim (tests compare).
fn asks_each() -> bool {
    #[cfg(test)]
    return ASK_EACH.with(std::cell::Cell::get);
    #[cfg(not(test))]
    false
}

/// The walk over the NodeClaims that may have room for one pod (its
/// request class's [`Roomy`] list, or its size class's at its relaxation
/// for a pod without a shape), and what it learns on the way.
struct Walk {
    roomy: Roomy,
    /// The size class's spread hints at the pod's relaxation (see
    /// `Hints::spread_hint`), for a pod without a shape (their `roomy` is
    /// out, in the walk's).
    hints: Option<Box<SpreadHint>>,
    /// Buckets where a claim refused for a reason that may pass later.
    blocked: [bool; ZonePin::BUCKETS],
    /// NodeClaims whose trial refused the pod (ascending): step 4 would
    /// refuse it again.
    refused_claims: Vec<u32>,
    /// Per NodePool, the types the pod's requirements allow, when it
    /// names any (see `Run::compatible_set`), read when first asked.
    pod_types: Vec<Option<Rc<TypeSet>>>,
}

impl Walk {
    /// NodeClaim `c` (in zone bucket `bucket`) refused the pod. A refusal
    /// that only hardens (`hard`) moves the bucket's hint past `c` while
    /// nothing before it in the bucket may pass later.
    #[inline]
    fn refused(&mut self, bucket: usize, c: ClaimIdx, hard: bool) {
        if let Some(h) = self.hints.as_mut() {
            if !hard {
                self.blocked[bucket] = true;
            } else if !self.blocked[bucket] {
                h.first[bucket] = c.get() as u32 + 1;
            }
        }
    }

    /// The zone bucket in which to try roomy entry `k` (NodeClaim `claim`),
    /// or `None` when it is dead, pinned to a zone the pod may not use
    /// (`zones_limited`: the pod admits only `admitted_bits`), or before
    /// its bucket's spread hint (then dropped: the hints only grow). Learns
    /// the NodeClaim's pin on the way.
    #[inline]
    fn bucket_to_try(
        &mut self,
        k: usize,
        claim: &Claim,
        zones_limited: bool,
        admitted_bits: u64,
    ) -> Option<usize> {
        let roomy = &mut self.roomy;
        if roomy.dead[k] {
            return None;
        }
        let pin = roomy.pins[k];
        if zones_limited && pin != 0 && admitted_bits & (1u64 << (pin - 1)) == 0 {
            return None;
        }
        let c = roomy.list[k];
        // Known pins answer the hint without touching the NodeClaim.
        if let Some(h) = &self.hints {
            if pin != 0 && c < h.first[usize::from(pin)] {
                roomy.kill(k);
                return None;
            }
        }
        if let ZonePin::Bit(bit) = claim.zone_pin {
            // A bit's bucket is 1..=64.
            roomy.pins[k] = claim.zone_pin.bucket() as u8;
            if zones_limited && admitted_bits & bit == 0 {
                return None;
            }
        }
        match &self.hints {
            Some(h) => {
                let b = claim.zone_pin.bucket();
                if c < h.first[b] {
                    roomy.kill(k);
                    return None;
                }
                Some(b)
            }
            None => Some(0),
        }
    }

    /// Whether the NodeClaim of roomy entry `k` refused the walk's size
    /// class by the cost rule at its current `version` (only a size class's
    /// walk remembers: its pods share their solo price, and a refusal
    /// stands as fewer of them wait, see `Run::may_join_memo`).
    #[inline]
    fn parked(&self, k: usize, version: u32) -> bool {
        self.hints.is_some() && self.roomy.parked[k].holds_at(version)
    }

    /// Whether a size class's walk passes roomy entry `k`, parked at the
    /// NodeClaim's `version`, doing what `Run::walk_claims`'s checks would
    /// from the bucket the refusal kept, without touching the NodeClaim:
    /// at the same version it still holds the pod's requests, and its pin,
    /// if a zone bit, is in `Roomy::pins` (learnt on the way to the
    /// refusal), so a pod whose zones it is not in passes it on, a
    /// NodeClaim behind its bucket's hint is dropped, and the others
    /// refuse the pod in their bucket. A NodeClaim pinned to a zone past
    /// the first 64 is left to those checks.
    #[inline]
    fn pass_parked(
        &mut self,
        k: usize,
        version: u32,
        zones_limited: bool,
        admitted_bits: u64,
    ) -> bool {
        let Some(h) = self.hints.as_ref() else {
            return false;
        };
        let r = self.roomy.parked[k];
        let b = usize::from(r.bucket);
        if self.roomy.dead[k] || !r.holds_at(version) || b >= ZonePin::BUCKETS - 1 {
            return false;
        }
        if zones_limited && b != 0 && admitted_bits & (1u64 << (b - 1)) == 0 {
            return true;
        }
        if self.roomy.list[k] < h.first[b] {
            self.roomy.kill(k);
            return true;
        }
        let c = ClaimIdx::new(self.roomy.list[k] as usize);
        self.refused(b, c, true);
        true
    }

    /// The cost rule refused the pod on the NodeClaim of entry `k` (in
    /// zone bucket `bucket`) at its `version`; a request class's walk
    /// keeps `refused` (see `Refused`).
    #[inline]
    fn park(&mut self, k: usize, version: u32, bucket: usize, refused: Option<Refused>) {
        if self.hints.is_some() {
            self.roomy.parked[k] = Refused::at(version, bucket);
        } else if let Some(r) = refused {
            self.roomy.parked[k] = r;
        }
    }

    /// A size class's walk passed roomy entries `from..past`, NodeClaims
    /// the cost rule refuses the pod on by their growth (see
    /// `growth_index`), unasked: each bucket's hint moves as asking each
    /// would have moved it. Asked, a NodeClaim dead in the list or pinned
    /// to a zone the pod may not use (`zones_limited`: it admits only
    /// `admitted_bits`) is passed on, and any other refuses the pod for
    /// good in its bucket (too full, tainted, the cost rule), so a bucket
    /// the walk has not blocked moves past its last such NodeClaim of the
    /// run. Every NodeClaim's bucket must be free or a zone bit's.
    fn jump(
        &mut self,
        buckets: &ZoneBuckets,
        (from, past): (usize, usize),
        zones_limited: bool,
        admitted_bits: u64,
    ) {
        let Some(h) = self.hints.as_mut() else {
            return;
        };
        #[cfg(test)]
        JUMPS.with(|j| j.set(j.get() + 1));
        let run = &self.roomy.list[from..past];
        let (Some(&lo), Some(&hi)) = (run.first(), run.last()) else {
            return;
        };
        let dead = &self.roomy.dead[from..past];
        let live = |c: &u32| {
            let at = run.partition_point(|x| x < c);
            run.get(at) == Some(c) && !dead[at]
        };
        for b in buckets.used() {
            if self.blocked[b] || !bucket_admitted(b, zones_limited, admitted_bits) {
                continue;
            }
            if let Some(c) = buckets.in_range_rev(b, lo, hi).find(live) {
                h.first[b] = h.first[b].max(c + 1);
            }
        }
    }
}

/// Whether a pod may use zone bucket `b` (see `ZonePin::bucket`): the
/// free bucket always, a zone bit's when the pod's zones are not limited
/// (`zones_limited`) or it admits the zone (`admitted_bits`); the bucket of
/// zones past the 64th is told apart by name, so never here.
fn bucket_admitted(b: usize, zones_limited: bool, admitted_bits: u64) -> bool {
    match b {
        0 => true,
        b if b < ZonePin::BUCKETS - 1 => !zones_limited || admitted_bits & (1u64 << (b - 1)) != 0,
        _ => false,
    }
}

/// Pods without a shape: start at the lowest hint of the buckets the pod
/// may use (`any_zone`: every zone; else those of `admitted_bits`).
fn first_eligible(h: &SpreadHint, any_zone: bool, admitted_bits: u64) -> ClaimIdx {
    let eligible = |b: usize| {
        any_zone || b == 0 || b == ZonePin::BUCKETS - 1 || admitted_bits & (1 << (b - 1)) != 0
    };
    (0..ZonePin::BUCKETS)
        .filter(|&b| eligible(b))
        .map(|b| h.first[b])
        .min()
        .map_or(ClaimIdx::new(0), |c| ClaimIdx::new(c as usize))
}

impl Run<'_> {
    /// Step 2 of `add`: join a NodeClaim planned in this run if that costs
    /// no more than a node of its own would (its solo price, remembered
    /// per shape or per size class; see `joins_cheaply`). Otherwise
    /// returns the NodeClaims whose trial refused the pod (ascending):
    /// step 4 would refuse it again.
    pub(super) fn join_planned(&mut self, t: &Trial) -> Result<(), Vec<u32>> {
        let (p, shape) = (t.p, t.shape);
        // No walk when topology refuses the pod on every NodeClaim's zone:
        // its refusals would teach the hints nothing that holds.
        if self.zone_refuses_every_claim(p, &t.pod_reqs, &t.groups) {
            if let Some(s) = shape {
                self.hints
                    .set_claim_hint(s, ClaimIdx::new(self.claims.len()));
            }
            return Err(Vec::new());
        }
        let first = shape.map_or(ClaimIdx::new(0), |s| self.hints.claim_hint(s));
        let admitted_bits = self.zone_bits(&t.zones_admitted);
        let cls = self.hints.walk_class(p);
        // Pods without a shape: start at the lowest hint of the buckets
        // the pod may use, skip each bucket's known refusals.
        let size = self.hints.size_class(p);
        let mut hints = if shape.is_none() {
            Some(
                self.hints
                    .take_spread_hint(size, t.r)
                    .unwrap_or_else(SpreadHint::new),
            )
        } else {
            None
        };
        let (solo, mut roomy) = match hints.as_mut() {
            Some(h) => (
                *(h.solo).get_or_insert_with(|| self.solo_price(p, &t.pod_reqs)),
                std::mem::take(&mut h.roomy),
            ),
            None => (self.solo(p, shape, &t.pod_reqs), self.hints.take_roomy(cls)),
        };
        roomy.sync(self.claims.len());
        let first = match &hints {
            Some(h) => first_eligible(h, t.zones_admitted.is_none(), admitted_bits),
            None => first,
        };
        let mut walk = Walk {
            roomy,
            hints,
            blocked: [false; ZonePin::BUCKETS],
            refused_claims: Vec::new(),
            pod_types: Vec::new(),
        };
        let joined = self.walk_claims(t, solo, first, admitted_bits, &mut walk);
        walk.roomy.compact();
        match walk.hints {
            Some(mut h) => {
                h.roomy = walk.roomy;
                self.hints.put_spread_hint(size, t.r, h);
            }
            None => self.hints.put_roomy(cls, walk.roomy),
        }
        if let Some((c, fit)) = joined {
            self.commit(c, p, fit);
            if let Some(s) = shape {
                self.hints.set_claim_hint(s, c);
            }
            return Ok(());
        }
        if let Some(s) = shape {
            self.hints
                .set_claim_hint(s, ClaimIdx::new(self.claims.len()));
        }
        Err(walk.refused_claims)
    }

    /// The first NodeClaim from `first` on that takes the pod and passes
    /// the cost rule, with the fit; records refusals in `walk`.
    fn walk_claims(
        &mut self,
        t: &Trial,
        solo: Option<f64>,
        first: ClaimIdx,
        admitted_bits: u64,
        walk: &mut Walk,
    ) -> Option<(ClaimIdx, Fit)> {
        let p = t.p;
        let (pod_reqs, groups, zones_admitted) = (&t.pod_reqs, &t.groups, &t.zones_admitted);
        let pod = &self.pods[p];
        let compact = pod.requests.compact_request();
        let start = (walk.roomy.list).partition_point(|&c| (c as usize) < first.get());
        let (epoch, size) = (self.hints.epoch(), self.hints.size_class(p));
        // A size class's walk (pods without a shape) moves its hints on
        // each refusal: one that passes a run unasked moves them as asking
        // would have (see `Walk::jump`), which needs every NodeClaim's
        // bucket to be a zone bit's or free.
        if walk.hints.is_some() {
            self.zone_buckets.sync(&self.claims);
        }
        let jumps = walk.hints.is_none() || !(self.zone_buckets.has_other() || asks_each());
        let growth = (jumps.then(|| self.growth_query((compact, t.pod_offers), solo))).flatten();
        let mut next = start;
        while next < walk.roomy.list.len() {
            let k = next;
            next += 1;
            // Runs of NodeClaims whose growth the cost rule refuses are
            // passed whole (see `growth_index`): none would take the pod.
            if let Some(q) = &growth {
                if let Some(past) = self.past_growth_refusals(q, t, &walk.roomy.list, k) {
                    let zones_limited = zones_admitted.is_some();
                    #[cfg(debug_assertions)]
                    let before = walk.hints.as_ref().map(|h| h.first);
                    walk.jump(&self.zone_buckets, (k, past), zones_limited, admitted_bits);
                    #[cfg(debug_assertions)]
                    self.assert_jumped_as_asked(
                        walk,
                        before,
                        (k, past),
                        (zones_limited, admitted_bits),
                    );
                    next = past;
                    continue;
                }
            }
            // Dead entries refuse every pod of the list (every check below
            // passes them on alike, learning nothing).
            if walk.roomy.dead[k] {
                continue;
            }
            let c = ClaimIdx::new(walk.roomy.list[k] as usize);
            let version = self.hints.version(c);
            // A request class's walk passes a NodeClaim the cost rule
            // refused this pod's kind at its version without touching it
            // (every check below would pass it on alike, learning nothing).
            if walk.hints.is_none()
                && !walk.roomy.dead[k]
                && (walk.roomy.parked[k]).refuses(version, epoch, size, solo)
            {
                continue;
            }
            if walk.pass_parked(k, version, zones_admitted.is_some(), admitted_bits) {
                continue;
            }
            let claim = &self.claims[c];
            let Some(bucket) =
                walk.bucket_to_try(k, claim, zones_admitted.is_some(), admitted_bits)
            else {
                continue;
            };
            if !claim.may_hold(&pod.requests, compact) {
                walk.roomy.kill(k);
                walk.refused(bucket, c, true);
                walk.refused_claims.push(c.get() as u32);
                continue;
            }
            if let Some(ok) = zones_admitted {
                if self.pinned_elsewhere(c, ok, admitted_bits) {
                    continue;
                }
            }
            if groups.pool_blocked[claim.pool] {
                // A taint the pod does not tolerate (`try_claim`'s first
                // refusal). One it tolerates at no relaxation refuses
                // every pod of the walk's class: a size class's pods share
                // their relaxation, a walk class its tolerations.
                let always = walk.hints.is_some()
                    || untolerated(&self.pools[claim.pool].taints, &pod.tolerations).is_some();
                if always {
                    walk.roomy.kill(k);
                }
                walk.refused(bucket, c, always);
                walk.refused_claims.push(c.get() as u32);
                continue;
            }
            // A size class alike on the hostname: a NodeClaim whose
            // hostname spreads or anti-affinity refuse the pod refuses the
            // class for good (see `Hints::host_alike_in_size`).
            if walk.hints.is_some()
                && self.hints.host_alike_in_size(p)
                && !self.topology.admits_host(pod, &groups.groups, &claim.name)
            {
                walk.roomy.kill(k);
                walk.refused(bucket, c, true);
                walk.refused_claims.push(c.get() as u32);
                continue;
            }
            // A request class's walk learns nothing from how a trial
            // refuses (see the `Err(_)` arm below): one the pod's own
            // requirements decide is made without asking the rule.
            if walk.hints.is_none() && {
                let types = self.pod_types(walk, c, &t.pod_reqs);
                self.requirements_refuse(c, t.pod_offers, types.as_deref())
            } {
                walk.refused_claims.push(c.get() as u32);
                continue;
            }
            if !self.pack && self.cost_rule_refuses(walk, (k, bucket), c, (t, compact), solo) {
                walk.refused(bucket, c, true);
                continue;
            }
            match self.try_claim(c, p, pod_reqs, groups) {
                Ok(fit) => {
                    if self.pack || self.joins_cheaply(c, p, pod_reqs, &fit, solo) {
                        return Some((c, fit));
                    }
                    walk.refused(bucket, c, true);
                }
                Err(ClaimRefusal::Requirements | ClaimRefusal::HostPort)
                    if walk.hints.is_some() =>
                {
                    // A port taken stays taken and a NodeClaim's
                    // requirements only narrow, while a size class's pods
                    // share their ports, and their requirements at a
                    // relaxation: none of them can join `c`.
                    walk.roomy.kill(k);
                    walk.refused(bucket, c, true);
                    walk.refused_claims.push(c.get() as u32);
                }
                Err(_) => {
                    walk.refused(bucket, c, false);
                    walk.refused_claims.push(c.get() as u32);
                }
            }
        }
        None
    }

    /// `Walk::jump` over roomy entries `from..past` moved the hints from
    /// `before` as moving them entry by entry does (checked in debug
    /// builds, so every test that plans checks the zone buckets).
    #[cfg(debug_assertions)]
    fn assert_jumped_as_asked(
        &self,
        walk: &Walk,
        before: Option<[u32; ZonePin::BUCKETS]>,
        (from, past): (usize, usize),
        (zones_limited, admitted_bits): (bool, u64),
    ) {
        let (Some(mut expected), Some(h)) = (before, walk.hints.as_ref()) else {
            return;
        };
        for k in (from..past).filter(|&k| !walk.roomy.dead[k]) {
            let c = walk.roomy.list[k];
            let b = self.claims[ClaimIdx::new(c as usize)].zone_pin.bucket();
            if !walk.blocked[b] && bucket_admitted(b, zones_limited, admitted_bits) {
                expected[b] = expected[b].max(c + 1);
            }
        }
        assert_eq!(
            expected, h.first,
            "jump over {from}..{past} ({zones_limited})"
        );
    }

    /// Whether the cost rule refuses pod `p` (solo price `solo`) on
    /// NodeClaim `c` (the walk's roomy entry `k`, in zone bucket
    /// `bucket`): known from the walk's mark, or asked and then marked
    /// (see `Refused`).
    fn cost_rule_refuses(
        &mut self,
        walk: &mut Walk,
        (k, bucket): (usize, usize),
        c: ClaimIdx,
        (t, compact): (&Trial, Option<Compact>),
        solo: Option<f64>,
    ) -> bool {
        let version = self.hints.version(c);
        if walk.parked(k, version) {
            return true;
        }
        // The least the NodeClaim's growth costs refuses most pods that
        // do not fit its cheapest type, whatever their size: asked before
        // the rule's own answer, which is per request class.
        if let Some(bound) = self.growth_refuses(c, t.p, compact, solo) {
            #[cfg(debug_assertions)]
            self.assert_rule_refuses(walk, c, t, solo, bound);
            let size = self.claims[c].size;
            let refused = Refused::of_answer(version, self.hints.epoch(), size, bound);
            walk.park(k, version, bucket, refused);
            return true;
        }
        if let Some(_bound) = self.held_growth_refuses(c, t.p, (compact, t.pod_offers), solo) {
            #[cfg(debug_assertions)]
            self.assert_rule_refuses(walk, c, t, solo, _bound);
            // Held pods' refusal: not one for the request class.
            walk.park(k, version, bucket, None);
            return true;
        }
        let pod_types = self.pod_types(walk, c, &t.pod_reqs);
        let answer = self.may_join_memo(c, t.p, &t.pod_reqs, t.pod_offers, pod_types.as_deref());
        if answer.admits(solo) {
            return false;
        }
        self.learn_reach(c, t.p);
        // A request class's pods differ in the offerings their
        // requirements allow: only a refusal made without them holds for
        // every pod of the class (they only make the step dearer).
        let size = self.claims[c].size;
        let refused = (t.pod_offers.is_none() && pod_types.is_none())
            .then(|| Refused::of_answer(version, self.hints.epoch(), size, answer))
            .flatten();
        walk.park(k, version, bucket, refused);
        true
    }

    /// Whether a trial of a pod on NodeClaim `c` certainly fails by the
    /// pod's own requirements: the zones or capacity types they allow
    /// (`pod_offers`, see `OfferBits::of_pod`) meet none of the
    /// NodeClaim's (zones only when every zone has a bit, so the masks say
    /// all), or the types they allow (`pod_types`) none of its types.
    pub(super) fn requirements_refuse(
        &self,
        c: ClaimIdx,
        pod_offers: Option<OfferBits>,
        pod_types: Option<&TypeSet>,
    ) -> bool {
        let claim = &self.claims[c];
        if let Some(pod) = pod_offers {
            // Zone bits say all only while every zone has one.
            let zones = match claim.zone_mask {
                _ if self.pools[claim.pool].zones.len() > 64 => None,
                ZoneMask::Bits(bits) => Some(bits),
                _ => Some(u64::MAX),
            };
            if !pod.meets(zones, claim.capacity_types) {
                return true;
            }
        }
        pod_types.is_some_and(|types| !claim.types.intersects(types))
    }

    /// A growth floor refused the pod of `t` (solo price `solo`) on
    /// NodeClaim `c` by step `floor`: the rule's own answer refuses it too,
    /// by a step no cheaper (checked in debug builds, so every test that
    /// plans checks the floors).
    #[cfg(debug_assertions)]
    fn assert_rule_refuses(
        &self,
        walk: &mut Walk,
        c: ClaimIdx,
        t: &Trial,
        solo: Option<f64>,
        floor: super::nodeclaim::JoinAnswer,
    ) {
        use super::nodeclaim::JoinAnswer::Step;
        let pod_types = self.pod_types(walk, c, &t.pod_reqs);
        let answer = self.join_answer(c, t.p, &t.pod_reqs, t.pod_offers, pod_types.as_deref());
        assert!(
            !answer.admits(solo),
            "NodeClaim {c:?}: growth refused what the rule admits"
        );
        if let (Step { step: floor, .. }, Step { step, .. }) = (floor, answer) {
            assert!(floor <= step + 1e-12, "NodeClaim {c:?}: {floor} > {step}");
        }
    }

    /// The types of NodeClaim `c`'s pool that a pod of node requirements
    /// `pod_reqs` allows, kept in `walk`; `None` when it names none (but
    /// its hostname).
    fn pod_types(
        &self,
        walk: &mut Walk,
        c: ClaimIdx,
        pod_reqs: &Requirements,
    ) -> Option<Rc<TypeSet>> {
        if pod_reqs.keys().all(|k| k == labels::HOSTNAME) {
            return None;
        }
        let pi = self.claims[c].pool;
        if walk.pod_types.len() <= pi.get() {
            walk.pod_types.resize(pi.get() + 1, None);
        }
        let known = &mut walk.pod_types[pi.get()];
        Some(
            known
                .get_or_insert_with(|| self.compatible_set(pi, pod_reqs))
                .clone(),
        )
    }

    /// The zones of `zones_admitted` among the first 64 of the catalog's
    /// list, as bits. Every pool carries the catalog's zone list: one bit
    /// per zone.
    pub(super) fn zone_bits(&self, zones_admitted: &Option<BTreeSet<String>>) -> u64 {
        match (zones_admitted, self.pools.first()) {
            (Some(ok), Some(pool)) => pool
                .zones
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, z)| ok.contains(*z))
                .fold(0u64, |m, (i, _)| m | 1 << i),
            _ => 0,
        }
    }

    /// Whether NodeClaim `c` is pinned to a zone outside `ok` (the zones
    /// the pod's spread admits; `admitted_bits` as bits).
    fn pinned_elsewhere(&self, c: ClaimIdx, ok: &BTreeSet<String>, admitted_bits: u64) -> bool {
        match self.claims[c].zone_pin {
            ZonePin::Free => false,
            ZonePin::Bit(b) => admitted_bits & b == 0,
            ZonePin::Other => {
                let pinned = self.claims[c].requirements.get(labels::ZONE).and_then(|z| {
                    (!z.is_complement() && z.values().len() == 1)
                        .then(|| z.values().iter().next())
                        .flatten()
                });
                pinned.is_some_and(|z| !ok.contains(z))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirements;
    use crate::resources::Resources;
    use crate::scheduler::index::PoolIdx;
    use crate::scheduler::nodeclaim::JoinAnswer;

    fn claims(n: usize, pin: ZonePin) -> Vec<Claim> {
        (0..n)
            .map(|i| {
                let reqs = Requirements::default();
                let mut c = Claim::new(
                    PoolIdx::new(0),
                    format!("c{i}"),
                    reqs,
                    Resources::new(),
                    None,
                    Default::default(),
                );
                c.zone_pin = pin;
                c
            })
            .collect()
    }

    fn spread_walk(claims: usize) -> Walk {
        let mut roomy = Roomy::default();
        roomy.sync(claims);
        Walk {
            roomy,
            hints: Some(SpreadHint::new()),
            blocked: [false; ZonePin::BUCKETS],
            refused_claims: Vec::new(),
            pod_types: Vec::new(),
        }
    }

    /// A size class's walk drops the NodeClaims behind their bucket's hint
    /// (the hints only grow, so they would be skipped on every later walk),
    /// known pinned or not, and keeps those at or after it.
    #[test]
    fn a_spread_walk_drops_nodeclaims_behind_their_buckets_hint() {
        let zone_a = ZonePin::Bit(1);
        for pin in [ZonePin::Free, zone_a] {
            let cs = claims(10, pin);
            let mut walk = spread_walk(cs.len());
            if let Some(h) = walk.hints.as_mut() {
                h.first[pin.bucket()] = 6;
            }
            // Twice: the second pass finds the pins known.
            for _ in 0..2 {
                let tried: Vec<Option<usize>> = (0..cs.len())
                    .map(|k| walk.bucket_to_try(k, &cs[k], false, 0))
                    .collect();
                let expected: Vec<Option<usize>> = (0..cs.len())
                    .map(|k| (k >= 6).then_some(pin.bucket()))
                    .collect();
                assert_eq!(tried, expected);
            }
            walk.roomy.compact();
            assert_eq!(walk.roomy.list, vec![6, 7, 8, 9]);
        }
        // A request class's walk (no hints) drops nothing.
        let cs = claims(3, zone_a);
        let mut walk = spread_walk(cs.len());
        walk.hints = None;
        assert!((0..3).all(|k| walk.bucket_to_try(k, &cs[k], false, 0) == Some(0)));
        assert_eq!(walk.roomy.n_dead, 0);
    }

    /// A cost-rule refusal is remembered for the NodeClaim's version: a
    /// pod joining it (a new version) makes the rule ask again. Only a
    /// size class's walk remembers (a request class's pods differ in their
    /// solo price).
    #[test]
    fn a_cost_refusal_stands_until_the_nodeclaim_changes() {
        let mut walk = spread_walk(2);
        assert!(!walk.parked(0, 0));
        walk.park(0, 0, 0, None);
        assert!(walk.parked(0, 0));
        assert!(!walk.parked(1, 0), "only the refusing NodeClaim");
        assert!(!walk.parked(0, 1), "a pod joined: ask again");
        // The mark is the version plus one, 0 for none: at the last
        // version the rule is asked again (never a stale refusal).
        walk.park(1, u32::MAX, 0, None);
        assert!(!walk.parked(1, u32::MAX));

        // A request class's walk keeps the refusal it is given, with
        // what it depends on, and parks nothing.
        let mut walk = spread_walk(2);
        walk.hints = None;
        walk.park(0, 0, 0, None);
        assert!(!walk.parked(0, 0));
        let never = Refused::of_answer(3, 0, None, JoinAnswer::Never);
        walk.park(1, 3, 0, never);
        assert!(!walk.parked(1, 3));
        assert!(walk.roomy.parked[1].refuses(3, 0, 7, Some(1.0)));
        assert!(!walk.roomy.parked[1].refuses(4, 0, 7, Some(1.0)));
    }

    /// A size class's walk passes a parked NodeClaim from the refusal's
    /// bucket alone: not for a pod whose zones it is not in, dropped when
    /// behind its bucket's hint, else refused in its bucket (the hint
    /// moves past it); at another version, or pinned past the first 64
    /// zones, the checks ask the NodeClaim.
    #[test]
    fn a_parked_nodeclaim_is_passed_from_its_bucket() {
        let mut walk = spread_walk(4);
        let zone_b = ZonePin::Bit(1 << 1).bucket();
        walk.park(0, 7, zone_b, None);
        walk.park(1, 7, zone_b, None);
        walk.park(2, 7, 0, None);
        walk.park(3, 7, ZonePin::Other.bucket(), None);
        let only_zone_a = 1u64;
        assert!(
            walk.pass_parked(0, 7, true, only_zone_a),
            "not the pod's zone"
        );
        assert!(!walk.roomy.dead[0]);
        assert_eq!(walk.hints.as_ref().map(|h| h.first[zone_b]), Some(0));
        assert!(!walk.pass_parked(0, 8, false, 0), "a pod joined since");
        assert!(walk.pass_parked(0, 7, false, 0));
        assert_eq!(walk.hints.as_ref().map(|h| h.first[zone_b]), Some(1));
        assert!(walk.pass_parked(2, 7, false, 0));
        assert_eq!(walk.hints.as_ref().map(|h| h.first[0]), Some(3));
        assert!(!walk.pass_parked(3, 7, false, 0), "the checks ask it");
        // A hint past an entry drops it for good.
        if let Some(h) = walk.hints.as_mut() {
            h.first[zone_b] = 2;
        }
        assert!(walk.pass_parked(1, 7, false, 0));
        assert!(walk.roomy.dead[1]);
        // A request class's walk passes nothing this way.
        let mut walk = spread_walk(1);
        walk.hints = None;
        walk.park(0, 7, 0, None);
        assert!(!walk.pass_parked(0, 7, false, 0));
    }

    /// A request class's refusal holds for a pod only while nothing it
    /// depends on changed: the NodeClaim's version, the offering epoch,
    /// the look-ahead (a pod of the size class every pod on the NodeClaim
    /// has asks another question); and only for the solo prices the
    /// answer refuses, never one it admits, however close to the step.
    #[test]
    fn a_request_class_refusal_holds_only_where_the_rule_would_refuse() {
        let step = JoinAnswer::Step {
            step: 0.0416,
            slack: 1.02,
        };
        let r = Refused::of_answer(5, 2, Some(9), step).expect("a step refuses");
        struct Case {
            what: &'static str,
            version: u32,
            epoch: u32,
            size: usize,
            solo: Option<f64>,
            refuses: bool,
        }
        let case = |what, version, epoch, size, solo, refuses| Case {
            what,
            version,
            epoch,
            size,
            solo,
            refuses,
        };
        let cases = [
            case("as refused", 5, 2, 3, Some(0.01), true),
            case("a pod joined since", 6, 2, 3, Some(0.01), false),
            case("a reservation ran out since", 5, 3, 3, Some(0.01), false),
            case(
                "its pods' size class looks ahead",
                5,
                2,
                9,
                Some(0.01),
                false,
            ),
            case("a solo price the step admits", 5, 2, 3, Some(0.05), false),
            case("no solo price: the rule admits", 5, 2, 3, None, false),
        ];
        for c in cases {
            let got = r.refuses(c.version, c.epoch, c.size, c.solo);
            assert_eq!(got, c.refuses, "{}", c.what);
        }
        assert!(Refused::of_answer(5, 2, None, JoinAnswer::Always).is_none());
        let never = Refused::of_answer(5, 2, None, JoinAnswer::Never).expect("refuses all");
        assert!(never.refuses(5, 2, 9, Some(1e30)));
        // A size class the record cannot hold records nothing.
        let huge = Some(u32::MAX as usize);
        assert!(Refused::of_answer(5, 2, huge, JoinAnswer::Never).is_none());

        // Around the bound, a refusal is never one the rule would admit.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..20_000 {
            let (step, slack) = (10.0 * next(), 1.0 + 0.1 * next());
            let answer = JoinAnswer::Step { step, slack };
            let Some(r) = Refused::of_answer(0, 0, None, answer) else {
                continue;
            };
            let solo = step / slack * (1.0 + 2e-5 * (next() - 0.5));
            if r.refuses(0, 0, 0, Some(solo)) {
                assert!(!answer.admits(Some(solo)), "{step} {slack} {solo}");
            }
        }
    }
}
