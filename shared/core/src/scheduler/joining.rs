//! Step 2 of `Run::add`: the NodeClaims planned in this run that a pod
//! may join, walked with the speed hints (roomy lists, spread hints).

use super::*;

impl Run<'_> {
    /// Step 2 of `add`: join a NodeClaim planned in this run if that costs
    /// no more than a node of its own would (`solo`, see `joins_cheaply`).
    /// Otherwise returns the NodeClaims whose trial refused the pod
    /// (ascending): step 4 would refuse it again.
    pub(super) fn join_planned(&mut self, t: &Trial, solo: Option<f64>) -> Result<(), Vec<u32>> {
        let (p, shape) = (t.p, t.shape);
        let (pod_reqs, groups, zones_admitted) = (&t.pod_reqs, &t.groups, &t.zones_admitted);
        let (pod, r) = (&self.pods[p], t.r);
        let first = shape.map_or(0, |s| self.hints.claim_hint[s]);
        // Every pool carries the catalog's zone list: one bit per zone.
        let admitted_bits = match (zones_admitted, self.pools.first()) {
            (Some(ok), Some(pool)) => pool
                .zones
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, z)| ok.contains(*z))
                .fold(0u64, |m, (i, _)| m | 1 << i),
            _ => 0,
        };
        let cls = self.hints.req_class[p];
        let mut roomy = std::mem::take(&mut self.hints.roomy[cls]);
        roomy.sync(self.claims.len());
        // Pods without a shape: start at the lowest hint of the buckets
        // the pod may use, skip each bucket's known refusals.
        let size = self.hints.size[p];
        let mut hints = if shape.is_none() && *r == Relaxation::default() {
            Some(
                self.hints.spread_hint[size]
                    .take()
                    .unwrap_or_else(|| Box::new([0; ZonePin::BUCKETS])),
            )
        } else {
            None
        };
        let first = match &hints {
            Some(h) => {
                let eligible = |b: usize| {
                    zones_admitted.is_none()
                        || b == 0
                        || b == ZonePin::BUCKETS - 1
                        || admitted_bits & (1 << (b - 1)) != 0
                };
                (0..ZonePin::BUCKETS)
                    .filter(|&b| eligible(b))
                    .map(|b| h[b] as usize)
                    .min()
                    .unwrap_or(0)
            }
            None => first,
        };
        // Buckets where a claim refused for a reason that may pass later.
        let mut blocked = [false; ZonePin::BUCKETS];
        let start = roomy.list.partition_point(|&c| (c as usize) < first);
        let mut joined = None;
        // NodeClaims whose trial refused the pod (ascending): step 4 would
        // refuse it again.
        let mut refused_claims: Vec<u32> = Vec::new();
        for k in start..roomy.list.len() {
            if roomy.dead[k] {
                continue;
            }
            if zones_admitted.is_some() && roomy.pins[k] != 0 && admitted_bits & roomy.pins[k] == 0
            {
                continue;
            }
            let c = roomy.list[k] as usize;
            // Known pins answer the hint without touching the NodeClaim.
            if let Some(h) = &hints {
                if roomy.pins[k] != 0 && c < h[ZonePin::Bit(roomy.pins[k]).bucket()] as usize {
                    continue;
                }
            }
            let claim = &self.claims[c];
            if let ZonePin::Bit(b) = claim.zone_pin {
                roomy.pins[k] = b;
            }
            let bucket = match &hints {
                Some(h) => {
                    let b = claim.zone_pin.bucket();
                    if c < h[b] as usize {
                        continue;
                    }
                    b
                }
                None => 0,
            };
            // A refusal that only hardens moves the bucket's hint past `c`
            // while nothing before it in the bucket may pass later.
            let mut refused = |hints: &mut Option<Box<[u32; ZonePin::BUCKETS]>>, hard: bool| {
                if let Some(h) = hints.as_mut() {
                    if !hard {
                        blocked[bucket] = true;
                    } else if !blocked[bucket] {
                        h[bucket] = c as u32 + 1;
                    }
                }
            };
            if !claim
                .requests
                .fits_in_with(&pod.requests, &claim.max_allocatable)
            {
                roomy.kill(k);
                refused(&mut hints, true);
                refused_claims.push(c as u32);
                continue;
            }
            if let Some(ok) = zones_admitted {
                match self.claims[c].zone_pin {
                    ZonePin::Free => {}
                    ZonePin::Bit(b) => {
                        if admitted_bits & b == 0 {
                            continue;
                        }
                    }
                    ZonePin::Other => {
                        let pinned = self.claims[c].requirements.get(labels::ZONE).and_then(|z| {
                            (!z.is_complement() && z.values().len() == 1)
                                .then(|| z.values().iter().next())
                                .flatten()
                        });
                        if pinned.is_some_and(|z| !ok.contains(z)) {
                            continue;
                        }
                    }
                }
            }
            if !self.pack && !self.may_join_memo(c, p, pod_reqs, solo, r) {
                refused(&mut hints, true);
                continue;
            }
            match self.try_claim(c, p, pod_reqs, groups) {
                Ok(fit) => {
                    if self.pack || self.joins_cheaply(c, p, pod_reqs, &fit, solo) {
                        joined = Some((c, fit));
                        break;
                    }
                    refused(&mut hints, true);
                }
                Err(_) => {
                    refused(&mut hints, false);
                    refused_claims.push(c as u32);
                }
            }
        }
        if let Some(h) = hints {
            self.hints.spread_hint[size] = Some(h);
        }
        roomy.compact();
        self.hints.roomy[cls] = roomy;
        if let Some((c, fit)) = joined {
            self.commit(c, p, fit);
            if let Some(s) = shape {
                self.hints.claim_hint[s] = c;
            }
            return Ok(());
        }
        if let Some(s) = shape {
            self.hints.claim_hint[s] = self.claims.len();
        }
        Err(refused_claims)
    }
}
