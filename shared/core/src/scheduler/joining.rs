//! Step 2 of `Run::add`: the NodeClaims planned in this run that a pod
//! may join, walked with the speed hints (roomy lists, spread hints).

use std::collections::BTreeSet;

use super::hints::{Roomy, SpreadHint};
use super::index::ClaimIdx;
use crate::labels;

use super::nodeclaim::{Claim, Fit, ZonePin};
use super::{Relaxation, Run, Trial};

/// The walk over the NodeClaims that may have room for one pod (its
/// request class's [`Roomy`] list), and what it learns on the way.
struct Walk {
    roomy: Roomy,
    /// The size class's spread hints (see `Hints::spread_hint`), for a pod
    /// without a shape at no relaxation.
    hints: Option<SpreadHint>,
    /// Buckets where a claim refused for a reason that may pass later.
    blocked: [bool; ZonePin::BUCKETS],
    /// NodeClaims whose trial refused the pod (ascending): step 4 would
    /// refuse it again.
    refused_claims: Vec<u32>,
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
                h[bucket] = c.get() as u32 + 1;
            }
        }
    }

    /// The zone bucket in which to try roomy entry `k` (NodeClaim `claim`),
    /// or `None` when it is dead, pinned to a zone the pod may not use
    /// (`zones_limited`: the pod admits only `admitted_bits`), or before
    /// its bucket's spread hint. Learns the NodeClaim's pin on the way.
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
        if zones_limited && roomy.pins[k] != 0 && admitted_bits & roomy.pins[k] == 0 {
            return None;
        }
        let c = roomy.list[k];
        // Known pins answer the hint without touching the NodeClaim.
        if let Some(h) = &self.hints {
            if roomy.pins[k] != 0 && c < h[ZonePin::Bit(roomy.pins[k]).bucket()] {
                return None;
            }
        }
        if let ZonePin::Bit(b) = claim.zone_pin {
            roomy.pins[k] = b;
        }
        match &self.hints {
            Some(h) => {
                let b = claim.zone_pin.bucket();
                (c >= h[b]).then_some(b)
            }
            None => Some(0),
        }
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
        .map(|b| h[b])
        .min()
        .map_or(ClaimIdx::new(0), |c| ClaimIdx::new(c as usize))
}

impl Run<'_> {
    /// Step 2 of `add`: join a NodeClaim planned in this run if that costs
    /// no more than a node of its own would (`solo`, see `joins_cheaply`).
    /// Otherwise returns the NodeClaims whose trial refused the pod
    /// (ascending): step 4 would refuse it again.
    pub(super) fn join_planned(&mut self, t: &Trial, solo: Option<f64>) -> Result<(), Vec<u32>> {
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
        let cls = self.hints.req_class(p);
        let mut roomy = self.hints.take_roomy(cls);
        roomy.sync(self.claims.len());
        // Pods without a shape: start at the lowest hint of the buckets
        // the pod may use, skip each bucket's known refusals.
        let size = self.hints.size_class(p);
        let hints = if shape.is_none() && *t.r == Relaxation::default() {
            Some(
                self.hints
                    .take_spread_hint(size)
                    .unwrap_or_else(|| Box::new([0; ZonePin::BUCKETS])),
            )
        } else {
            None
        };
        let first = match &hints {
            Some(h) => first_eligible(h, t.zones_admitted.is_none(), admitted_bits),
            None => first,
        };
        let mut walk = Walk {
            roomy,
            hints,
            blocked: [false; ZonePin::BUCKETS],
            refused_claims: Vec::new(),
        };
        let joined = self.walk_claims(t, solo, first, admitted_bits, &mut walk);
        if let Some(h) = walk.hints {
            self.hints.put_spread_hint(size, h);
        }
        walk.roomy.compact();
        self.hints.put_roomy(cls, walk.roomy);
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
        for k in start..walk.roomy.list.len() {
            let c = ClaimIdx::new(walk.roomy.list[k] as usize);
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
            if !self.pack && !self.may_join_memo(c, p, pod_reqs, solo) {
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
                Err(_) => {
                    walk.refused(bucket, c, false);
                    walk.refused_claims.push(c.get() as u32);
                }
            }
        }
        None
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
