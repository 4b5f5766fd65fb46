//! Pods that topology alone keeps off every node, remembered until their
//! topology changes.
//!
//! A pod the queue could not place goes to the back and is tried again in
//! every pass, and a plan runs up to six passes (twice, where it forks
//! weights-first). A pod held by its topology (a zone spread whose only
//! open zone its required zone affinity rules out, say) fails each try the
//! same way, and finding that out asks its terms on every zone mask the
//! NodeClaims have had and builds a NodeClaim in every NodePool: 13 µs a
//! try, a quarter of the queue's time on `assorted` at 10,000 pods.
//!
//! Such a failure is remembered, for the pod and its twins (the pods of
//! its template, with the same volumes: a Deployment's pending replicas),
//! when nothing but topology could lift it:
//! topology refused the pod on every NodeClaim's zone mask (so steps 2 and
//! 4 of `add` tried none), and each NodePool refused a new NodeClaim for a
//! reason that lasts while topology does (its topology, a taint,
//! incompatible requirements, no types, a named host, or being unavailable:
//! not its limits, which narrowing NodeClaims give back). Existing nodes
//! only fill up. The next try of a twin fails the same way, with the same
//! reasons, while its relaxation, its topology stamp (`Topology::stamp`: the
//! counts of every group it counts in or is selected by) and the number of
//! zone masks the NodeClaims have had are the same; debug builds try it in
//! full anyway and check that.

use std::sync::Arc;

use super::explain::Refusal;
use super::index::PodIdx;
use super::pod_view::Relaxation;
use super::Run;

/// A template's last failure, while only topology could lift it.
#[derive(Clone)]
pub(super) struct Unplaceable<'a> {
    /// The pod that failed.
    pod: PodIdx,
    relax: Relaxation,
    stamp: u64,
    zone_masks: usize,
    reasons: Vec<Refusal<'a>>,
}

/// Whether a NodePool's refusal lasts while the pod's topology does.
fn lasts(r: &Refusal<'_>) -> bool {
    matches!(
        r,
        Refusal::Unavailable { .. }
            | Refusal::NoNodePool
            | Refusal::NoTypesLeft { .. }
            | Refusal::Taint { .. }
            | Refusal::Incompatible { .. }
            | Refusal::Hostname { .. }
            | Refusal::Topology { .. }
    )
}

impl<'a> Run<'a> {
    /// Pod `p`'s topology stamp (see `Topology::stamp`); 0 without topology.
    pub(super) fn topology_stamp(&self, p: PodIdx) -> u64 {
        if !self.topology.is_active() {
            return 0;
        }
        self.topology.stamp(&self.pods[p], &self.groups[p])
    }

    /// The reasons pod `p` or a twin failed for at its last try, when `p`
    /// would fail the same way now (at relaxation `r`). The stamp is asked
    /// only of a pod whose template has such a failure.
    pub(super) fn still_unplaceable(&self, p: PodIdx, r: &Relaxation) -> Option<Vec<Refusal<'a>>> {
        let u = self.unplaceable.get(&self.template_of(p))?;
        let same = u.zone_masks == self.hints.zone_masks().len()
            && u.relax == *r
            && self.volume[u.pod] == self.volume[p]
            && u.stamp == self.topology_stamp(p);
        same.then(|| u.reasons.clone())
    }

    /// The key of pod `p`'s twins: its template's address.
    fn template_of(&self, p: PodIdx) -> usize {
        Arc::as_ptr(&self.pods[p].template) as usize
    }

    /// Remembers pod `p`'s failure (at relaxation `r`, NodePools'
    /// `reasons`) when only topology could lift it: `zone_shut`, topology
    /// refused it on every NodeClaim's zone mask, and every reason lasts.
    /// Forgets an earlier one otherwise. (A failed try records nothing, so
    /// its topology stamp is the one it was tried at.)
    pub(super) fn note_unplaced(
        &mut self,
        p: PodIdx,
        r: &Relaxation,
        zone_shut: bool,
        reasons: &[Refusal<'a>],
    ) {
        let key = self.template_of(p);
        if !zone_shut || !reasons.iter().all(lasts) {
            self.unplaceable.remove(&key);
            return;
        }
        let memo = Unplaceable {
            pod: p,
            relax: r.clone(),
            stamp: self.topology_stamp(p),
            zone_masks: self.hints.zone_masks().len(),
            reasons: reasons.to_vec(),
        };
        self.unplaceable.insert(key, memo);
    }
}
