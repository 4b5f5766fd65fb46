//! The cost rule: a pod joins a planned NodeClaim only when growing it costs
//! no more than a node of the pod's own would (with a look-ahead for pods of one size).

use crate::model::{untolerated, Pod};
use crate::requirements::Requirements;

use super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::nodeclaim::{Fit, JoinMemo};
use super::pools::Pool;
use super::Run;

/// Relative slack of the cost rule (see `Run::growth_pays`).
pub(super) const COST_TOLERANCE: f64 = 1.02;

/// Price per pod slot of pool type `t` for pods shaped like `pod` (price
/// over how many copies fit next to the daemonset overhead), and the copies.
pub(super) fn slot_price(pool: &Pool, t: usize, pod: &Pod) -> Option<(f64, usize)> {
    let ty = &pool.types[t];
    let room = ty.allocatable.minus(&pool.daemon_overhead);
    let copies = pod
        .requests
        .iter()
        .map(|(name, q)| room.get(name).millis() / q.millis().max(1))
        .min()
        .unwrap_or(0);
    (copies > 0).then(|| (pool.node_price(ty.price) / copies as f64, copies as usize))
}

impl Run<'_> {
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
    /// it; topology is ignored, so this is an estimate for the cost rule.
    pub(super) fn solo_price(&self, p: PodIdx, pod_reqs: &Requirements) -> Option<f64> {
        let pod = &self.pods[p];
        PoolIdx::enumerate(&self.pools).find_map(|(pi, pool)| {
            if untolerated(&pool.taints, &pod.tolerations).is_some()
                || !pool.requirements.compatible_ok(pod_reqs)
            {
                return None;
            }
            let reqs = pool.requirements.intersection(pod_reqs);
            let need = pool.daemon_overhead.plus(&pod.requests);
            self.compatible_types(pi, &reqs)
                .iter()
                .map(|&t| &pool.types[t])
                .find(|t| need.fits_in(&t.allocatable))
                .map(|t| pool.node_price(t.price))
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
        fit.types
            .first()
            .is_none_or(|after| self.growth_pays(c, p, pod_reqs, after, solo))
    }

    /// [`Self::may_join_cheaply`], remembered per NodeClaim (see
    /// `JoinMemo`). The answer depends on the pod's requirements (and so on
    /// its relaxation) only through the solo price, which is in the key,
    /// and the best price per slot, cached per NodePool and size class: a
    /// relaxed pod is answered from the memo too.
    pub(super) fn may_join_memo(
        &mut self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        solo: Option<f64>,
    ) -> bool {
        let size = self.hints.size_class(p);
        let claim = &self.claims[c];
        let key = JoinMemo {
            size,
            solo: solo.map(f64::to_bits),
            version: claim.version,
            size_left: if claim.size == Some(size) {
                self.hints.size_left(size)
            } else {
                usize::MAX
            },
            epoch: self.hints.epoch(),
        };
        if let Some((memo, answer)) = claim.memo_answer() {
            // Fewer pods of the size waiting only makes growth pay less, so
            // a "no" stands as `size_left` falls.
            let same = JoinMemo {
                size_left: key.size_left,
                ..memo
            } == key;
            if same
                && (memo.size_left == key.size_left || (!answer && key.size_left < memo.size_left))
            {
                return answer;
            }
        }
        let answer = self.may_join_cheaply(c, p, pod_reqs, solo);
        self.claims[c].memo = Some(key);
        self.claims[c].memo_yes = answer;
        answer
    }

    /// A cheap necessary condition for [`Self::joins_cheaply`] using
    /// resources only: the first (cheapest) remaining type that holds the
    /// grown NodeClaim must pass the cost rule.
    pub(super) fn may_join_cheaply(
        &self,
        c: ClaimIdx,
        p: PodIdx,
        pod_reqs: &Requirements,
        solo: Option<f64>,
    ) -> bool {
        let claim = &self.claims[c];
        let pod_requests = &self.pods[p].requests;
        if !claim
            .requests
            .fits_in_with(pod_requests, &claim.max_allocatable)
        {
            return false;
        }
        let requests = claim.requests.plus(pod_requests);
        let pool = &self.pools[claim.pool];
        let (Some(before), Some(solo)) = (claim.types.first(), solo) else {
            return true;
        };
        // Types are sorted by price: past the step the plain cost rule
        // allows, only the look-ahead rule (same size class) can still pass.
        let cheap_limit = pool.types[before].price + solo * (COST_TOLERANCE + pool.tolerance());
        let look_ahead = claim.size == Some(self.hints.size_class(p));
        for t in claim.types.iter() {
            if !look_ahead && pool.types[t].price > cheap_limit {
                return false;
            }
            if requests.fits_in(&pool.types[t].allocatable) {
                return self.growth_pays(c, p, pod_reqs, t, Some(solo));
            }
        }
        false
    }

    /// Whether NodeClaim `c` may grow to type `after` (its new cheapest) to
    /// take pod `p`: the price step is no more than a node of the pod's own
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
        after: usize,
        solo: Option<f64>,
    ) -> bool {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let Some(before) = claim.types.first() else {
            return true;
        };
        let Some(solo) = solo else { return true };
        let slack = COST_TOLERANCE + pool.tolerance();
        if pool.types[after].price - pool.types[before].price <= solo * slack {
            return true;
        }
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
        let step = pool.types[after].price - pool.types[before].price;
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
