//! Pods with a required pod affinity on `kubernetes.io/hostname`: only the
//! NodeClaims holding pods the term selects can take them (a new NodeClaim
//! only when the pod starts its group), so their steps 2-4 of `Run::add`
//! ask those NodeClaims, found by name, instead of walking the plan.

use super::explain::Unplaced;
use super::index::ClaimIdx;
use super::nodeclaim::{Fit, JoinAnswer};
use super::{Run, Trial};

impl<'a> Run<'a> {
    /// Maps each NodeClaim's name to it anew (after the NodeClaims were
    /// replaced).
    pub(super) fn index_claim_names(&mut self) {
        self.claim_by_name = (ClaimIdx::all(self.claims.len()))
            .map(|c| (self.claims[c].name.clone(), c))
            .collect();
    }

    /// The NodeClaims the pod's required hostname affinity terms leave it
    /// (see `Topology::affinity_hosts`), ascending; `None` when it has
    /// no such term but ones it may start itself.
    pub(super) fn near_targets(&self, t: &Trial) -> Option<Vec<ClaimIdx>> {
        let pod = &self.pods[t.p];
        let hosts = (self.topology).affinity_hosts(pod, &t.groups.groups, &t.pod_reqs)?;
        let mut near: Vec<ClaimIdx> = (hosts.iter())
            .filter_map(|h| {
                let c = self.claim_by_name.get(*h).copied()?;
                // The map is made anew wherever the NodeClaims are replaced.
                debug_assert_eq!(self.claims[c].name, *h);
                Some(c)
            })
            .collect();
        near.sort_unstable();
        Some(near)
    }

    /// Steps 2-4 of `add` over the NodeClaims `near` (ascending): the first
    /// that takes the pod within the cost rule; else a new NodeClaim
    /// (step 3, when the pod may start its group); else, once the queue
    /// allows it (`Run::patient`), the one whose price grows least.
    pub(super) fn join_near(&mut self, t: &Trial, near: &[ClaimIdx]) -> Result<(), Unplaced<'a>> {
        let p = t.p;
        let solo = self.solo(p, t.shape, &t.pod_reqs);
        // Step 2; the NodeClaims the cost rule refuses by resources alone
        // are kept for step 4 with that bound on their growth.
        let mut refused: Vec<(f64, ClaimIdx)> = Vec::new();
        for &c in near {
            if !self.may_hold_near(t, c) {
                continue;
            }
            if !self.pack {
                if let Some(bound) = self.cost_rule_refuses_near(t, c, solo) {
                    refused.push((bound, c));
                    continue;
                }
            }
            let Ok(fit) = self.try_claim(c, p, &t.pod_reqs, &t.groups) else {
                continue;
            };
            if self.pack || self.joins_cheaply(c, p, &t.pod_reqs, &fit, solo) {
                self.commit(c, p, fit);
                return Ok(());
            }
            refused.push((self.fit_step(c, &fit), c));
        }
        let reasons = match self.open_claim(t) {
            Ok(()) => return Ok(()),
            Err(reasons) => reasons,
        };
        if self.patient {
            self.deferred |= !refused.is_empty();
        } else if let Some((c, fit)) = self.least_growth(t, refused) {
            self.commit(c, p, fit);
            return Ok(());
        }
        Err(Unplaced::Refused(reasons))
    }

    /// Of the NodeClaims `refused` (each with a bound on its growth), the
    /// one that takes the pod for the least growth (the first of equals),
    /// with the fit: tried by their bounds, until a bound is above the
    /// least growth found.
    fn least_growth(
        &self,
        t: &Trial,
        mut refused: Vec<(f64, ClaimIdx)>,
    ) -> Option<(ClaimIdx, Fit)> {
        refused.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut least: Option<(f64, ClaimIdx, Fit)> = None;
        for (bound, c) in refused {
            if least.as_ref().is_some_and(|(step, _, _)| bound > *step) {
                break;
            }
            let Ok(fit) = self.try_claim(c, t.p, &t.pod_reqs, &t.groups) else {
                continue;
            };
            let step = self.fit_step(c, &fit);
            let better = least
                .as_ref()
                .is_none_or(|(s, lc, _)| (step, c) < (*s, *lc));
            if better {
                least = Some((step, c, fit));
            }
        }
        least.map(|(_, c, fit)| (c, fit))
    }

    /// Whether NodeClaim `c` may hold the pod: its NodePool's taints and
    /// its largest type's room allow it.
    fn may_hold_near(&self, t: &Trial, c: ClaimIdx) -> bool {
        let claim = &self.claims[c];
        let requests = &self.pods[t.p].requests;
        !t.groups.pool_blocked[claim.pool] && claim.may_hold(requests, requests.compact_request())
    }

    /// Whether the cost rule refuses the pod on NodeClaim `c` by resources
    /// alone (its answer per request class), and then the least its
    /// growth can cost: the trial need not be made.
    fn cost_rule_refuses_near(&mut self, t: &Trial, c: ClaimIdx, solo: Option<f64>) -> Option<f64> {
        match self.may_join_memo(c, t.p, &t.pod_reqs, t.pod_offers, None) {
            JoinAnswer::Step { step, slack } if solo.is_some_and(|s| step > s * slack) => {
                Some(step)
            }
            _ => None,
        }
    }

    /// How much NodeClaim `c`'s price grows to take a pod with `fit`.
    fn fit_step(&self, c: ClaimIdx, fit: &Fit) -> f64 {
        match (self.claims[c].types.first(), fit.types.first()) {
            (Some(before), Some(after)) => {
                self.claim_step(c, before, (after, Some(fit.requirements.narrowing())))
            }
            _ => 0.0,
        }
    }
}
