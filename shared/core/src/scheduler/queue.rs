//! The queue and its relaxation (Karpenter's `Queue` and `Preferences`):
//! pods are tried largest first; one that fits nowhere waits, and when a
//! pass over the queue places nothing, the waiting pods are relaxed.

use std::collections::VecDeque;

use crate::model::{Pod, Taint};

use super::explain::Unplaced;
use super::index::PodIdx;
use super::{Relaxation, Run};

/// Where the queue ended.
pub(super) struct QueueEnd<'a> {
    /// The pods left unplaced, in queue order.
    pub(super) left: VecDeque<PodIdx>,
    /// Each pod's relaxation at the end.
    pub(super) relax: Vec<Relaxation>,
    /// Why each pod left is unplaced.
    pub(super) errors: Vec<Option<Unplaced<'a>>>,
    /// Planning stopped at [`super::SchedulerOptions::max_node_claims`].
    pub(super) capped: bool,
    /// The weights-first run where it first took another step than this
    /// one (see [`Run::fork`]): `None` if it never would have.
    pub(super) weights_first: Option<Fork<'a>>,
}

/// The queue part way through a pass: what [`Run::drain`] goes on from.
#[derive(Clone)]
pub(super) struct Draining<'a> {
    /// The pods this pass has not tried yet, in order.
    queue: VecDeque<PodIdx>,
    /// The pods this pass did not place, in queue order.
    waiting: VecDeque<PodIdx>,
    /// Whether this pass placed any pod.
    progress: bool,
    /// Each pod's relaxation.
    relax: Vec<Relaxation>,
    /// Why each pod is unplaced, if it is.
    errors: Vec<Option<Unplaced<'a>>>,
}

/// The weights-first run (`Run::join_heavier` on) taken from the run
/// without it at the first pod where they part: the same steps until then,
/// so it goes on from a copy instead of planning those pods again.
pub(super) struct Fork<'a> {
    pub(super) run: Box<Run<'a>>,
    pub(super) draining: Draining<'a>,
}

/// The pods without a reason yet (`errors`), largest first: cpu, then
/// memory, then name for a total order.
pub(super) fn largest_first(pods: &[Pod], errors: &[Option<Unplaced>]) -> VecDeque<PodIdx> {
    let mut order: Vec<PodIdx> = PodIdx::all(pods.len())
        .filter(|&p| errors[p].is_none())
        .collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&pods[a].requests, &pods[b].requests);
        pb.cpu()
            .cmp(&pa.cpu())
            .then_with(|| pb.memory().cmp(&pa.memory()))
            .then_with(|| pods[a].namespace.cmp(&pods[b].namespace))
            .then_with(|| pods[a].name.cmp(&pods[b].name))
    });
    order.into_iter().collect()
}

impl<'a> Run<'a> {
    /// The queue: a pod that fits nowhere goes to the back as it is. When a
    /// full pass places nothing, every waiting pod has one preference relaxed
    /// and the passes go on; when nothing is left to relax, the rest are
    /// unschedulable. (Karpenter relaxes a pod at its first failure, so a pod
    /// tried before the pods it prefers to be near loses that preference.)
    pub(super) fn drain_queue(
        &mut self,
        queue: VecDeque<PodIdx>,
        errors: Vec<Option<Unplaced<'a>>>,
        max_node_claims: Option<usize>,
    ) -> QueueEnd<'a> {
        let draining = Draining {
            waiting: VecDeque::with_capacity(queue.len()),
            queue,
            progress: false,
            relax: vec![Relaxation::default(); self.pods.len()],
            errors,
        };
        self.drain(draining, max_node_claims)
    }

    /// [`Run::drain_queue`] from part way through a pass.
    pub(super) fn drain(
        &mut self,
        mut d: Draining<'a>,
        max_node_claims: Option<usize>,
    ) -> QueueEnd<'a> {
        let pods = self.pods;
        let prefer_no_schedule = self.prefer_no_schedule();
        let mut weights_first = None;
        self.patient = true;
        let capped = loop {
            self.deferred = false;
            let capped = self.pass(&mut d, max_node_claims, &mut weights_first);
            if d.waiting.is_empty() || capped {
                break capped;
            }
            // A pass that placed nothing lets the next one join NodeClaims
            // at a price (step 4 of `add`) before any pod is relaxed; one
            // that placed pods makes the next wait again.
            // (Only a patient pass defers.)
            let deferred = self.deferred;
            self.patient = d.progress || !deferred;
            if !d.progress && !deferred {
                let mut relaxed = false;
                for &p in &d.waiting {
                    relaxed |= d.relax[p]
                        .relax(&pods[p], &self.volume[p], prefer_no_schedule)
                        .is_some();
                }
                if !relaxed {
                    break false;
                }
            }
            let next = VecDeque::with_capacity(d.waiting.len());
            d.queue = std::mem::replace(&mut d.waiting, next);
            d.progress = false;
        };
        self.patient = false;
        self.hints.queue_done();
        self.near.queue_done();
        QueueEnd {
            left: d.waiting,
            relax: d.relax,
            errors: d.errors,
            capped,
            weights_first,
        }
    }

    /// Tries the pods of `d.queue` in order, until the NodeClaim cap
    /// (whether it stopped there). Where the run forks (see
    /// [`Run::fork`]), the weights-first run goes to `weights_first`.
    fn pass(
        &mut self,
        d: &mut Draining<'a>,
        max_node_claims: Option<usize>,
        weights_first: &mut Option<Fork<'a>>,
    ) -> bool {
        loop {
            if max_node_claims.is_some_and(|m| self.claims.len() > m) {
                // One NodeClaim too many: the pods not tried yet stay
                // unplaced; the plan only tells its caller "over the cap".
                for q in d.queue.drain(..) {
                    d.errors[q] = Some(Unplaced::NodeClaimCap);
                    d.waiting.push_back(q);
                }
                return true;
            }
            let Some(p) = d.queue.pop_front() else {
                return false;
            };
            let placed = self.add(p, &d.relax[p]);
            if let Some(run) = self.fork.take() {
                // The weights-first run placed `p`; its queue goes on
                // from here as this one's does.
                let mut draining = d.clone();
                draining.errors[p] = None;
                draining.progress = true;
                *weights_first = Some(Fork { run, draining });
            }
            match placed {
                Ok(()) => {
                    d.errors[p] = None;
                    d.progress = true;
                }
                Err(e) => {
                    d.errors[p] = Some(e);
                    d.waiting.push_back(p);
                }
            }
        }
    }

    /// Whether any NodePool or existing node has a `PreferNoSchedule`
    /// taint (then tolerating them is a relaxation step).
    fn prefer_no_schedule(&self) -> bool {
        let is_prefer = |t: &Taint| t.effect == crate::model::TaintEffect::PreferNoSchedule;
        self.pools.iter().any(|p| p.taints.iter().any(is_prefer))
            || self.existing.iter().any(|e| e.taints.iter().any(is_prefer))
    }
}
