//! Zone shares: where a zone spread's unpinned pods should go when some of
//! the pods it counts are pinned to one zone.
//!
//! A StatefulSet whose claims are already bound to volumes in three zones,
//! with a zone spread (`DoNotSchedule`) over a NodePool of four, has a
//! valid placement: the replicas without a volume fill the fourth zone.
//! The queue alone does not find it. A replica without a volume goes to
//! the least loaded zone, ties to the first, so it takes a place in a
//! zone that a pinned replica needs; that replica then breaks the skew
//! wherever the others are, and stays pending. (Karpenter's scheduler
//! does the same; in a cluster the pod waits for a later round that never
//! comes, as the free replicas are bound by then.)
//!
//! So before the queue, per required zone spread that counts pods pinned
//! to one zone (by a bound volume, a node selector or the pod's required
//! node-affinity terms) and otherwise only its own owners, the owners that
//! may go to more than one zone are given a zone each by water-filling: one at a time, to the zone
//! whose count (existing pods, pinned pending pods and shares given so far)
//! is least, ties to the first zone. The share is added to the pod as its
//! heaviest preferred node-affinity term: the pod tries that zone first,
//! waits while the skew keeps it out (the pinned pods fill their zones in
//! the meantime), and is relaxed like any preference when the queue stalls,
//! so a share never leaves a pod pending that the queue would have placed.
//! A spread that also counts pods that are neither pinned nor its owners
//! gets no shares: the queue places those by price, so their zones cannot
//! be planned for.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::model::{ClusterState, Pod, PreferredNodeTerm, WhenUnsatisfiable};
use crate::requirements::{Requirement, Requirements};

use super::index::PodIdx;
use super::pod_view::{self, Relaxation};
use super::volumes::VolumeTerms;
use super::{all_nodes, volume_requirements, Prepared, Run, SchedulerOptions};

/// The weight of a share's preferred term: above the API's largest (100),
/// so it is the first preference the pod tries and the first dropped of
/// its node-affinity preferences.
const SHARE_WEIGHT: i32 = 101;

/// `pods`, with a zone share added to each unpinned owner of a required
/// zone spread that also counts pinned pods (see the module
/// documentation); `pods` as given when there is none.
pub(super) fn with_zone_shares<'p>(
    state: &ClusterState,
    pods: Cow<'p, [Pod]>,
    opts: &SchedulerOptions,
    prepared: &Prepared,
) -> Cow<'p, [Pod]> {
    if !pods
        .iter()
        .any(|p| required_zone_spreads(p).next().is_some())
        || !pods.iter().any(may_be_pinned)
    {
        return pods;
    }
    let mut errors = vec![None; pods.len()];
    let volume = volume_requirements(state, &pods, &mut errors);
    let zones: Vec<Option<Vec<String>>> = (pods.iter().zip(&volume).zip(&errors))
        // A pod that waits for its volumes is placed nowhere: no zone.
        .map(|((pod, v), e)| match e {
            Some(_) => Some(Vec::new()),
            None => allowed_zones(pod, v),
        })
        .collect();
    if !zones
        .iter()
        .any(|z| z.as_ref().is_some_and(|z| z.len() == 1))
    {
        return pods;
    }
    let nodes = all_nodes(state);
    let run = Run::new(state, &pods, &nodes, volume, opts, prepared, false);
    let shares = shares(&run, &zones);
    drop(run);
    if shares.iter().all(Option::is_none) {
        return pods;
    }
    let mut out = pods.into_owned();
    for (pod, share) in out.iter_mut().zip(shares) {
        if let Some(zone) = share {
            let weight = (pod.preferred_terms.iter().map(|t| t.weight))
                .fold(SHARE_WEIGHT, |a, w| a.max(w.saturating_add(1)));
            pod.preferred_terms.push(PreferredNodeTerm {
                weight,
                requirements: Requirements::from_iter_reqs([Requirement::in_values(
                    labels::ZONE,
                    [zone],
                )]),
            });
        }
    }
    Cow::Owned(out)
}

/// The pod's `DoNotSchedule` spreads on the zone key, by index.
fn required_zone_spreads(pod: &Pod) -> impl Iterator<Item = usize> + '_ {
    (pod.topology_spread.iter().enumerate())
        .filter(|(_, c)| {
            c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
                && c.topology_key == labels::ZONE
        })
        .map(|(i, _)| i)
}

/// Whether `pod` may be pinned to a zone: it has volumes, or its node
/// selector or a required node-affinity term names zones.
fn may_be_pinned(pod: &Pod) -> bool {
    !pod.pvc_names.is_empty()
        || pod.node_selector.get(labels::ZONE).is_some()
        || pod
            .required_terms
            .iter()
            .any(|t| t.get(labels::ZONE).is_some())
}

/// The zones `pod` may use whatever its relaxation, when its hard node
/// requirements name zones (`None`: any zone): node selector, required
/// node-affinity terms (OR'd) and its volumes' topology (`terms`).
fn allowed_zones(pod: &Pod, terms: &VolumeTerms) -> Option<Vec<String>> {
    let mut union: Vec<String> = Vec::new();
    for i in 0..terms.len(pod) {
        let r = Relaxation {
            required_term: i,
            ..Relaxation::default()
        };
        let reqs = pod_view::hard_requirements(pod, terms, &r);
        let zone = reqs.get(labels::ZONE)?;
        if zone.is_complement() {
            return None;
        }
        union.extend(zone.values().iter().cloned());
    }
    union.sort();
    union.dedup();
    Some(union)
}

/// Per pod, the zone share it is given, if any. `zones`: per pod, the
/// zones it may use (see [`allowed_zones`]; none for a pod that waits for
/// its volumes).
fn shares(run: &Run, zones: &[Option<Vec<String>>]) -> Vec<Option<String>> {
    // Pinned pending pods per spread group and zone; the groups that also
    // count pods whose zone the queue picks by price alone.
    let mut pinned: BTreeMap<usize, BTreeMap<&str, u32>> = BTreeMap::new();
    let mut unsteered: BTreeSet<usize> = BTreeSet::new();
    for (p, z) in PodIdx::all(run.pods.len()).zip(zones) {
        let pod = &run.pods[p];
        for gi in run.topology.spread_selecting(labels::ZONE, pod) {
            match z.as_deref() {
                Some([zone]) => *pinned.entry(gi).or_default().entry(zone).or_default() += 1,
                Some([]) => {}
                _ if run.owns_required_zone_spread(p, gi) => {}
                _ => {
                    unsteered.insert(gi);
                }
            }
        }
    }
    pinned.retain(|gi, _| !unsteered.contains(gi));
    let mut out: Vec<Option<String>> = vec![None; run.pods.len()];
    let mut levels: BTreeMap<usize, BTreeMap<&str, u32>> = BTreeMap::new();
    for p in PodIdx::all(run.pods.len()) {
        let Some(gi) = run.share_group(p, zones, &pinned) else {
            continue;
        };
        let level = levels.entry(gi).or_insert_with(|| {
            let pins = &pinned[&gi];
            (run.topology.spread_view(gi).counts.iter())
                .map(|(d, c)| {
                    let pinned = pins.get(d.as_str()).copied().unwrap_or(0);
                    (d.as_str(), c.saturating_add(pinned))
                })
                .collect()
        });
        let strict =
            pod_view::domain_requirements(&run.pods[p], &run.volume[p], &Relaxation::default());
        let reach = run.reachable_domains(p, strict);
        let allowed = |d: &str| {
            zones[p].as_ref().is_none_or(|z| z.iter().any(|x| x == d))
                && reach.get(labels::ZONE).is_none_or(|r| r.has(d))
        };
        let least = (level.iter_mut())
            .filter(|(d, _)| allowed(d))
            .min_by_key(|(_, c)| **c);
        if let Some((d, c)) = least {
            *c = c.saturating_add(1);
            out[p] = Some(d.to_string());
        }
    }
    out
}

impl Run<'_> {
    /// The spread group that decides pod `p`'s share: the first of its
    /// required zone spreads that counts pinned pods, when the pod itself
    /// may go to more than one zone.
    fn share_group(
        &self,
        p: PodIdx,
        zones: &[Option<Vec<String>>],
        pinned: &BTreeMap<usize, BTreeMap<&str, u32>>,
    ) -> Option<usize> {
        if zones[p].as_ref().is_some_and(|z| z.len() <= 1) {
            return None;
        }
        self.required_zone_groups(p)
            .into_iter()
            .find(|gi| pinned.contains_key(gi))
    }

    /// The groups of pod `p`'s required zone spreads.
    fn required_zone_groups(&self, p: PodIdx) -> Vec<usize> {
        required_zone_spreads(&self.pods[p])
            .filter_map(|i| self.groups[p].spread.get(i).copied())
            .collect()
    }

    /// Whether group `gi` is one of pod `p`'s required zone spreads.
    fn owns_required_zone_spread(&self, p: PodIdx, gi: usize) -> bool {
        self.required_zone_groups(p).contains(&gi)
    }
}
