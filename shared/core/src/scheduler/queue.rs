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
}

/// One pass over the queue.
struct Pass {
    /// The pods it did not place, in queue order.
    waiting: VecDeque<PodIdx>,
    /// Whether it placed any pod.
    progress: bool,
    /// Whether it stopped at the NodeClaim cap.
    capped: bool,
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
        mut queue: VecDeque<PodIdx>,
        mut errors: Vec<Option<Unplaced<'a>>>,
        max_node_claims: Option<usize>,
    ) -> QueueEnd<'a> {
        let pods = self.pods;
        let mut relax = vec![Relaxation::default(); pods.len()];
        let prefer_no_schedule = self.prefer_no_schedule();
        let mut capped;
        loop {
            let pass = self.pass(&mut queue, &relax, &mut errors, max_node_claims);
            let (waiting, progress) = (pass.waiting, pass.progress);
            capped = pass.capped;
            if waiting.is_empty() || capped {
                queue = waiting;
                break;
            }
            if !progress {
                let mut relaxed = false;
                for &p in &waiting {
                    relaxed |= relax[p]
                        .relax(&pods[p], &self.volume[p], prefer_no_schedule)
                        .is_some();
                }
                if !relaxed {
                    queue = waiting;
                    break;
                }
            }
            queue = waiting;
        }
        QueueEnd {
            left: queue,
            relax,
            errors,
            capped,
        }
    }

    /// Tries every pod of `queue` once, in order.
    fn pass(
        &mut self,
        queue: &mut VecDeque<PodIdx>,
        relax: &[Relaxation],
        errors: &mut [Option<Unplaced<'a>>],
        max_node_claims: Option<usize>,
    ) -> Pass {
        let over_cap = |run: &Run| max_node_claims.is_some_and(|m| run.claims.len() > m);
        let mut waiting = VecDeque::with_capacity(queue.len());
        let mut progress = false;
        let mut capped = false;
        while let Some(p) = queue.pop_front() {
            match self.add(p, &relax[p]) {
                Ok(()) => {
                    errors[p] = None;
                    progress = true;
                }
                Err(e) => {
                    errors[p] = Some(e);
                    waiting.push_back(p);
                }
            }
            if over_cap(self) {
                // One NodeClaim too many: the pods not tried yet stay
                // unplaced; the plan only tells its caller "over the cap".
                capped = true;
                for q in queue.drain(..) {
                    errors[q] = Some(Unplaced::NodeClaimCap);
                    waiting.push_back(q);
                }
                break;
            }
        }
        Pass {
            waiting,
            progress,
            capped,
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
