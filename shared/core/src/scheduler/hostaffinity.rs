//! Pods with a required pod affinity on `kubernetes.io/hostname`: only the
//! NodeClaims holding pods the term selects can take them (a new NodeClaim
//! only when the pod starts its group), so their steps 2-4 of `Run::add`
//! ask those NodeClaims, kept per term as pods are placed
//! ([`NearIndex`]), instead of walking the plan. A pod that none of them
//! took remembers their answers, and its next try asks only those that
//! changed ([`NearMemo`]).

use foldhash::HashMap;

use super::explain::Unplaced;
use super::index::{ClaimIdx, PodIdx};
use super::nodeclaim::{Fit, JoinAnswer};
use super::pod_view::Relaxation;
use super::{Run, Trial};
use crate::labels;

/// The NodeClaims each required hostname affinity term may join, kept as
/// pods are placed (no walk over the term's hosts by name per pod), and
/// what the pods that found none of them would take remember of that.
#[derive(Clone, Debug, Default)]
pub(super) struct NearIndex {
    /// Per topology group of such a term, once a pod asked it: the
    /// NodeClaims holding pods it selects, ascending.
    targets: HashMap<usize, Vec<ClaimIdx>>,
    /// Per NodeClaim, the [`Self::stamp`] of its last change.
    changed: Vec<u64>,
    /// How many pods were placed on NodeClaims so far.
    stamp: u64,
    /// Per pod that no target took, what it learnt (see [`NearMemo`]).
    memos: HashMap<PodIdx, NearMemo>,
}

/// What a pod that no NodeClaim of its one hostname affinity term took
/// learnt (a pod with no other topology group): the NodeClaims the cost
/// rule refused, with the bounds on their growth. A NodeClaim's answer
/// stands until a pod is placed on it: its trial reads the NodeClaim's
/// pods and requirements, the term's count on its hostname (only pods
/// placed there change it), the existing pods' anti-affinities (whose
/// counts only grow: a refusal stays one), and the pod's requests,
/// relaxation and solo price (the key). One thing more may change: where
/// topology pins the pod to the domain of a key with the most or fewest
/// pods (`Topology::pin_domains`) and neither the NodeClaim nor the pod
/// has chosen its domain of that key, the domain chosen moves with other
/// pods' placements; those NodeClaims are asked again (`recheck`). So the
/// next try asks only the NodeClaims changed since and those, and finds
/// what asking every one would.
#[derive(Clone, Debug)]
struct NearMemo {
    key: MemoKey,
    /// [`NearIndex::stamp`] when it was made.
    stamp: u64,
    /// The NodeClaims the cost rule refused, with their growth bounds.
    refused: RefusedRuns,
    /// The NodeClaims to ask again whether or not they change, ascending.
    recheck: Vec<ClaimIdx>,
}

/// NodeClaims the cost rule refused with the bounds on their growth, in
/// the order `least_growth` tries them (by bound, then NodeClaim): a memo
/// may hold thousands, and their bounds take few values (NodeClaims of a
/// type grow alike), so each value is kept once with how many follow.
#[derive(Clone, Debug, Default)]
struct RefusedRuns {
    /// Each bound and how many NodeClaims of `claims` have it.
    runs: Vec<(f64, u32)>,
    claims: Vec<u32>,
}

impl RefusedRuns {
    /// `None` past `u32` NodeClaims (the memo is then not kept).
    fn pack(mut refused: Vec<(f64, ClaimIdx)>) -> Option<RefusedRuns> {
        sort_by_bound(&mut refused);
        let mut out = RefusedRuns::default();
        for (bound, c) in refused {
            out.claims.push(u32::try_from(c.get()).ok()?);
            match out.runs.last_mut() {
                Some((b, n)) if b.total_cmp(&bound).is_eq() => *n += 1,
                _ => out.runs.push((bound, 1)),
            }
        }
        Some(out)
    }

    fn unpack(&self) -> Vec<(f64, ClaimIdx)> {
        let bounds = (self.runs.iter()).flat_map(|&(b, n)| std::iter::repeat_n(b, n as usize));
        let claims = self.claims.iter().map(|&c| ClaimIdx::new(c as usize));
        bounds.zip(claims).collect()
    }
}

/// Debug builds: what a try without its memo finds (see `Run::full_walk`).
#[cfg(debug_assertions)]
struct FullWalk {
    first: Option<ClaimIdx>,
    refused: Vec<(f64, ClaimIdx)>,
}

/// Debug builds: a try with its memo finds what `full` did: the same
/// first NodeClaim, or, when none takes the pod, the same refusals.
#[cfg(debug_assertions)]
fn check_memo(full: FullWalk, first: Option<ClaimIdx>, refused: &[(f64, ClaimIdx)]) {
    assert_eq!(
        full.first, first,
        "the memo passed a NodeClaim that takes the pod"
    );
    if first.is_none() {
        let mut remembered = refused.to_vec();
        remembered.sort_by_key(|a| a.1);
        assert_eq!(full.refused, remembered, "the memo's refusals differ");
    }
}

/// Sorts NodeClaims with bounds as `least_growth` tries them.
fn sort_by_bound(refused: &mut [(f64, ClaimIdx)]) {
    refused.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
}

/// Which of a pod's `near` NodeClaims a try asks (see [`NearMemo`]).
#[derive(Clone, Copy, Default)]
struct Asked<'m> {
    /// Only those changed after this stamp, and `recheck`.
    since: Option<u64>,
    recheck: &'m [ClaimIdx],
    /// The keys topology may pin for the pod: a NodeClaim that did not
    /// take it and has not chosen a domain of one of them goes to the
    /// next memo's `recheck`.
    pin_keys: &'m [String],
}

/// What a [`NearMemo`] holds under.
#[derive(Clone, Debug, PartialEq)]
struct MemoKey {
    group: usize,
    relaxation: Relaxation,
    solo: Option<f64>,
    epoch: u32,
}

/// The NodeClaims a pod's required hostname affinity terms leave it.
pub(super) struct NearTargets {
    /// Ascending.
    claims: Vec<ClaimIdx>,
    /// The one term's group, when the pod's answers may be remembered
    /// (see [`NearMemo`]).
    memo_group: Option<usize>,
}

impl NearIndex {
    /// The NodeClaims pod `p`'s memo asks again in any case (see
    /// [`NearMemo`]), if it has one.
    #[cfg(test)]
    pub(super) fn recheck_of(&self, p: PodIdx) -> Option<Vec<ClaimIdx>> {
        self.memos.get(&p).map(|m| m.recheck.clone())
    }

    /// Forgets the memos: only the queue's passes read them.
    pub(super) fn queue_done(&mut self) {
        self.memos = HashMap::default();
    }

    /// Forgets everything: the NodeClaims were replaced.
    fn clear(&mut self) {
        *self = NearIndex::default();
    }

    /// Whether a try asks NodeClaim `c` (see [`Asked`]).
    fn asks(&self, asked: Asked, c: ClaimIdx) -> bool {
        asked.since.is_none_or(|s| {
            self.changed.get(c.get()).is_some_and(|&at| at > s)
                || asked.recheck.binary_search(&c).is_ok()
        })
    }
}

impl<'a> Run<'a> {
    /// Maps each NodeClaim's name to it anew (after the NodeClaims were
    /// replaced).
    pub(super) fn index_claim_names(&mut self) {
        self.claim_by_name = (ClaimIdx::all(self.claims.len()))
            .map(|c| (self.claims[c].name.clone(), c))
            .collect();
        self.near.clear();
    }

    /// Notes pod `p` placed on NodeClaim `c` (after the topology recorded
    /// it): `c` changed, and joins the targets of the hostname affinity
    /// terms that select the pod.
    pub(super) fn near_placed(&mut self, c: ClaimIdx, p: PodIdx) {
        let near = &mut self.near;
        near.stamp += 1;
        if near.changed.len() <= c.get() {
            near.changed.resize(c.get() + 1, 0);
        }
        near.changed[c.get()] = near.stamp;
        if near.targets.is_empty() {
            return;
        }
        let host = &self.claims[c].name;
        for gi in self.topology.hostname_affinity_holding(&self.pods[p], host) {
            if let Some(targets) = near.targets.get_mut(&gi) {
                if let Err(at) = targets.binary_search(&c) {
                    targets.insert(at, c);
                }
            }
        }
    }

    /// Group `gi`'s targets (see [`NearIndex::targets`]), made from its
    /// hosts' names the first time.
    fn group_targets(&mut self, gi: usize) -> &[ClaimIdx] {
        let (topology, by_name) = (&self.topology, &self.claim_by_name);
        self.near.targets.entry(gi).or_insert_with(|| {
            let mut claims: Vec<ClaimIdx> = (topology.occupied_domains(gi))
                .filter_map(|h| by_name.get(h).copied())
                .collect();
            claims.sort_unstable();
            claims
        })
    }

    /// The NodeClaims the pod's required hostname affinity terms leave it
    /// (see `Topology::affinity_hosts`), ascending; `None` when it has
    /// no such term but ones it may start itself.
    pub(super) fn near_targets(&mut self, t: &Trial) -> Option<NearTargets> {
        let pod = &self.pods[t.p];
        if t.pod_reqs.get(labels::HOSTNAME).is_some() {
            return self.near_targets_named(t);
        }
        let terms: Vec<usize> = self.topology.hostname_affinity(&t.groups.groups).collect();
        let mut out: Option<Vec<ClaimIdx>> = None;
        for &gi in &terms {
            let occupied = self.topology.occupied_domains(gi).next().is_some();
            if !occupied && self.topology.group_selects(gi, pod) {
                continue;
            }
            let claims = self.group_targets(gi);
            out = Some(match out {
                None => claims.to_vec(),
                Some(mut prev) => {
                    prev.retain(|c| claims.binary_search(c).is_ok());
                    prev
                }
            });
        }
        let claims = out?;
        debug_assert_eq!(
            Some(&claims),
            self.near_targets_named(t).as_ref().map(|n| &n.claims)
        );
        let only_term = terms.len() == 1 && t.groups.groups.len() == 1;
        Some(NearTargets {
            claims,
            memo_group: only_term.then(|| terms[0]),
        })
    }

    /// [`Self::near_targets`] by the names of the terms' hosts: for a pod
    /// whose own requirements name hostnames.
    fn near_targets_named(&self, t: &Trial) -> Option<NearTargets> {
        let pod = &self.pods[t.p];
        let hosts = (self.topology).affinity_hosts(pod, &t.groups.groups, &t.pod_reqs)?;
        let mut claims: Vec<ClaimIdx> = (hosts.iter())
            .filter_map(|h| self.claim_by_name.get(*h).copied())
            .collect();
        claims.sort_unstable();
        Some(NearTargets {
            claims,
            memo_group: None,
        })
    }

    /// Steps 2-4 of `add` over the pod's `near` NodeClaims: the first
    /// that takes the pod within the cost rule; else a new NodeClaim
    /// (step 3, when the pod may start its group); else, once the queue
    /// allows it (`Run::patient`), the one whose price grows least.
    pub(super) fn join_near(&mut self, t: &Trial, near: NearTargets) -> Result<(), Unplaced<'a>> {
        let p = t.p;
        let solo = self.solo(p, t.shape, &t.pod_reqs);
        let key = near.memo_group.map(|group| MemoKey {
            group,
            relaxation: t.r.clone(),
            solo,
            epoch: self.hints.epoch(),
        });
        let memo = (self.near.memos.remove(&p)).filter(|m| key.as_ref() == Some(&m.key));
        let pin_keys = match (&key, t.groups.pins) {
            (Some(_), true) => self.topology.pin_keys_of(&self.pods[p], &t.groups.groups),
            _ => Vec::new(),
        };
        // Step 2; the NodeClaims the cost rule refuses by resources alone
        // are kept for step 4 with that bound on their growth.
        let (mut refused, old_recheck) = match &memo {
            Some(m) => (m.refused.unpack(), &m.recheck[..]),
            None => (Vec::new(), &[][..]),
        };
        let asked = Asked {
            since: memo.as_ref().map(|m| m.stamp),
            recheck: old_recheck,
            pin_keys: &pin_keys,
        };
        refused.retain(|&(_, c)| !self.near.asks(asked, c));
        #[cfg(debug_assertions)]
        let full = memo
            .is_some()
            .then(|| self.full_walk(t, solo, &near.claims));
        let mut recheck = Vec::new();
        let first = self.first_near(t, solo, &near.claims, asked, &mut refused, &mut recheck);
        #[cfg(debug_assertions)]
        if let Some(full) = full {
            check_memo(full, first.as_ref().map(|f| f.0), &refused);
        }
        if let Some((c, fit)) = first {
            self.commit(c, p, fit);
            return Ok(());
        }
        let reasons = match self.open_claim(t) {
            Ok(()) => return Ok(()),
            Err(reasons) => reasons,
        };
        if self.patient {
            self.deferred |= !refused.is_empty();
        } else if let Some((c, fit)) = self.least_growth(t, &mut refused) {
            self.commit(c, p, fit);
            return Ok(());
        }
        if let Some(key) = key {
            self.remember(p, key, refused, recheck);
        }
        Err(Unplaced::Refused(reasons))
    }

    /// Keeps what pod `p`'s try learnt for its next (see [`NearMemo`]).
    fn remember(
        &mut self,
        p: PodIdx,
        key: MemoKey,
        refused: Vec<(f64, ClaimIdx)>,
        recheck: Vec<ClaimIdx>,
    ) {
        if let Some(refused) = RefusedRuns::pack(refused) {
            let stamp = self.near.stamp;
            let memo = NearMemo {
                key,
                stamp,
                refused,
                recheck,
            };
            self.near.memos.insert(p, memo);
        }
    }

    /// The first of the NodeClaims `near` (ascending; those `asked`) that
    /// takes the pod within the cost rule, with the fit; those the rule
    /// refuses go to `refused` with the bound on their growth, and those a
    /// pin may answer otherwise later to `recheck`.
    fn first_near(
        &mut self,
        t: &Trial,
        solo: Option<f64>,
        near: &[ClaimIdx],
        asked: Asked,
        refused: &mut Vec<(f64, ClaimIdx)>,
        recheck: &mut Vec<ClaimIdx>,
    ) -> Option<(ClaimIdx, Fit)> {
        for &c in near {
            if !self.near.asks(asked, c) {
                continue;
            }
            if !self.may_hold_near(t, c) {
                continue;
            }
            if !self.pack {
                if let Some(bound) = self.cost_rule_refuses_near(t, c, solo) {
                    refused.push((bound, c));
                    continue;
                }
            }
            // Past the cost rule's answer by resources: a pin may decide.
            if !self.pin_settled(t, c, asked.pin_keys) {
                recheck.push(c);
            }
            let Ok(fit) = self.try_claim(c, t.p, &t.pod_reqs, &t.groups) else {
                continue;
            };
            if self.pack || self.joins_cheaply(c, t.p, &t.pod_reqs, &fit, solo) {
                return Some((c, fit));
            }
            refused.push((self.fit_step(c, &fit), c));
        }
        None
    }

    /// Whether NodeClaim `c` or the pod has one domain of each of
    /// `pin_keys` (no pin can choose another).
    fn pin_settled(&self, t: &Trial, c: ClaimIdx, pin_keys: &[String]) -> bool {
        let claim = &self.claims[c].requirements;
        let single = |r: Option<&crate::requirements::Requirement>| {
            r.is_some_and(|r| !r.is_complement() && r.len() <= 1)
        };
        (pin_keys.iter()).all(|k| single(t.pod_reqs.get(k)) || single(claim.get(k)))
    }

    /// Debug builds: what asking every NodeClaim of `near` finds (the
    /// first to take the pod, the refusals), to check a memo against.
    #[cfg(debug_assertions)]
    fn full_walk(&mut self, t: &Trial, solo: Option<f64>, near: &[ClaimIdx]) -> FullWalk {
        let mut refused = Vec::new();
        let first = self.first_near(
            t,
            solo,
            near,
            Asked::default(),
            &mut refused,
            &mut Vec::new(),
        );
        FullWalk {
            first: first.map(|f| f.0),
            refused,
        }
    }

    /// Of the NodeClaims `refused` (each with a bound on its growth), the
    /// one that takes the pod for the least growth (the first of equals),
    /// with the fit: tried by their bounds, until a bound is above the
    /// least growth found (or equal to it, past its NodeClaim).
    fn least_growth(&self, t: &Trial, refused: &mut [(f64, ClaimIdx)]) -> Option<(ClaimIdx, Fit)> {
        sort_by_bound(refused);
        let mut least: Option<(f64, ClaimIdx, Fit)> = None;
        for &(bound, c) in refused.iter() {
            // No NodeClaim from here on grows less, or as little with a
            // lower index.
            if least
                .as_ref()
                .is_some_and(|(step, lc, _)| (bound, c) > (*step, *lc))
            {
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
