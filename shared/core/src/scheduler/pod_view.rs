//! A pod's scheduling constraints at its current relaxation level.
//!
//! Karpenter treats preferences as requirements first and relaxes them one at
//! a time when the pod cannot be scheduled, in this order: move to the next
//! required node-affinity term, or the next combination of its volumes'
//! OR'd terms (see `VolumeTerms`); drop the heaviest preferred pod-affinity term;
//! the heaviest preferred pod-anti-affinity term; the heaviest preferred
//! node-affinity term; then every `ScheduleAnyway` topology spread.

use super::volumes::VolumeTerms;
use crate::model::{Pod, WhenUnsatisfiable};
use crate::requirements::Requirements;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Relaxation {
    /// The alternative in use: an index into the pod's required terms, or,
    /// when its volumes restrict nodes, into its `VolumeTerms`.
    pub required_term: usize,
    pub dropped_preferred_affinity: usize,
    pub dropped_preferred_anti_affinity: usize,
    pub dropped_preferred_node: usize,
    pub dropped_schedule_anyway: bool,
    /// `PreferNoSchedule` taints are tolerated (Karpenter's last step).
    pub tolerate_prefer_no_schedule: bool,
}

impl Relaxation {
    /// Applies the next relaxation; returns a description, or `None` when
    /// nothing is left to relax. `volume`: the alternatives of the pod's
    /// volumes. `prefer_no_schedule`: some NodePool or node carries a
    /// `PreferNoSchedule` taint (then tolerating it is the last step).
    pub fn relax(
        &mut self,
        pod: &Pod,
        volume: &VolumeTerms,
        prefer_no_schedule: bool,
    ) -> Option<&'static str> {
        if self.required_term + 1 < volume.len(pod) {
            self.required_term += 1;
            return Some(if volume.new_term_at(self.required_term) {
                "next required node affinity term"
            } else {
                "next volume topology term"
            });
        }
        if self.dropped_preferred_affinity < pod.preferred_pod_affinity.len() {
            self.dropped_preferred_affinity += 1;
            return Some("preferred pod affinity term");
        }
        if self.dropped_preferred_anti_affinity < pod.preferred_pod_anti_affinity.len() {
            self.dropped_preferred_anti_affinity += 1;
            return Some("preferred pod anti-affinity term");
        }
        if self.dropped_preferred_node < pod.preferred_terms.len() {
            self.dropped_preferred_node += 1;
            return Some("preferred node affinity term");
        }
        if !self.dropped_schedule_anyway
            && pod
                .topology_spread
                .iter()
                .any(|t| t.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
        {
            self.dropped_schedule_anyway = true;
            return Some("ScheduleAnyway topology spread");
        }
        if prefer_no_schedule && !self.tolerate_prefer_no_schedule {
            self.tolerate_prefer_no_schedule = true;
            return Some("PreferNoSchedule taints");
        }
        None
    }
}

fn by_weight_desc<T>(items: &[T], weight: impl Fn(&T) -> i32) -> Vec<&T> {
    let mut v: Vec<&T> = items.iter().collect();
    v.sort_by_key(|t| std::cmp::Reverse(weight(t)));
    v
}

/// Node requirements the pod imposes: nodeSelector ∩ the current
/// alternative (required term ∩ volume topology) ∩ the heaviest remaining
/// preferred term.
pub fn node_requirements(pod: &Pod, volume: &VolumeTerms, r: &Relaxation) -> Requirements {
    let mut reqs = hard_requirements(pod, volume, r);
    let preferred = by_weight_desc(&pod.preferred_terms, |t| t.weight);
    if let Some(t) = preferred.get(r.dropped_preferred_node) {
        reqs.add_all(&t.requirements);
    }
    reqs
}

/// [`node_requirements`] without the preferred term: what the pod needs
/// of a node at relaxation `r` whatever its preferences.
pub fn hard_requirements(pod: &Pod, volume: &VolumeTerms, r: &Relaxation) -> Requirements {
    let mut reqs = pod.node_selector.clone();
    let (term, volume) = volume.at(pod, r.required_term);
    if let Some(v) = volume {
        reqs.add_all(v);
    }
    if let Some(term) = term {
        reqs.add_all(term);
    }
    reqs
}

/// The requirements that decide which topology domains the pod may use
/// (Karpenter's strict pod requirements): nodeSelector ∩ the current
/// required term. Preferred terms and volumes do not narrow a spread's
/// domains (a volume pinned to one zone must not make `minDomains: 3`
/// count one domain).
pub fn domain_requirements(pod: &Pod, volume: &VolumeTerms, r: &Relaxation) -> Requirements {
    let mut reqs = pod.node_selector.clone();
    if let (Some(term), _) = volume.at(pod, r.required_term) {
        reqs.add_all(term);
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        LabelSelector, PodAffinityTerm, PodTemplate, PreferredNodeTerm, TopologySpreadConstraint,
        WeightedPodAffinityTerm,
    };
    use crate::requirements::Requirement;

    fn zone(z: &str) -> Requirements {
        Requirements::from_iter_reqs([Requirement::in_values(crate::labels::ZONE, [z])])
    }

    #[test]
    fn relaxation_order_matches_karpenter() {
        let term = PodAffinityTerm {
            label_selector: LabelSelector::default(),
            namespaces: vec![],
            all_namespaces: false,
            topology_key: crate::labels::ZONE.into(),
        };
        let pod = Pod::from(PodTemplate {
            required_terms: vec![zone("a"), zone("b")],
            preferred_terms: vec![
                PreferredNodeTerm {
                    weight: 1,
                    requirements: zone("x"),
                },
                PreferredNodeTerm {
                    weight: 10,
                    requirements: zone("y"),
                },
            ],
            preferred_pod_affinity: vec![WeightedPodAffinityTerm {
                weight: 1,
                term: term.clone(),
            }],
            preferred_pod_anti_affinity: vec![WeightedPodAffinityTerm { weight: 1, term }],
            topology_spread: vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: crate::labels::ZONE.into(),
                when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                label_selector: LabelSelector::default(),
                min_domains: None,
                node_affinity_policy: crate::model::InclusionPolicy::Honor,
                node_taints_policy: crate::model::InclusionPolicy::Ignore,
            }],
            ..PodTemplate::default()
        });
        let mut r = Relaxation::default();
        // Heaviest preferred (y) applies with the first required term (a).
        let none = VolumeTerms::default();
        let reqs = node_requirements(&pod, &none, &r);
        assert!(reqs.get(crate::labels::ZONE).unwrap().is_empty());
        let steps: Vec<_> = std::iter::from_fn(|| r.relax(&pod, &none, true)).collect();
        assert_eq!(
            steps,
            vec![
                "next required node affinity term",
                "preferred pod affinity term",
                "preferred pod anti-affinity term",
                "preferred node affinity term",
                "preferred node affinity term",
                "ScheduleAnyway topology spread",
                "PreferNoSchedule taints",
            ]
        );
        let reqs = node_requirements(&pod, &none, &r);
        assert!(reqs.allows(crate::labels::ZONE, "b"));
    }
}
