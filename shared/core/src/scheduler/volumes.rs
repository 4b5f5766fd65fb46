//! Volume topology: the node requirements a pod's PersistentVolumeClaims
//! add, and the pods that must wait for their volumes (Karpenter's
//! `volumetopology.go`, with the kube-scheduler's unbound-immediate rule).
//!
//! * A bound claim adds its PersistentVolume's required node affinity; an
//!   unbound `WaitForFirstConsumer` claim adds its StorageClass's
//!   `allowedTopologies`. Terms are OR'd, and every combination is kept, as
//!   Karpenter keeps them: one term per volume, crossed with each of the
//!   pod's required node-affinity terms, the disjoint combinations pruned
//!   (see [`VolumeTerms`]). The scheduler walks them as it walks the pod's
//!   own OR'd terms: the first is used until the pod fails, then the next.
//! * `kubernetes.io/hostname` of a `local` or `hostPath` volume is dropped,
//!   as Karpenter does (a new node cannot be that host). Any other volume
//!   pinned to a host (a CSI driver's local volume) keeps it: only that
//!   node can run the pod.
//! * The pod waits (unschedulable, with the reason) when a claim is missing,
//!   being deleted or `Lost`, its bound volume is missing or being deleted,
//!   it names a StorageClass that is missing,
//!   or it is unbound and its StorageClass binds `Immediate`ly: the volume
//!   is provisioned, in a zone of the provisioner's choosing, before the pod
//!   can be placed. Other pods are not affected.

use std::collections::HashMap;

use crate::labels;
use crate::model::{
    ClusterState, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass, VolumeBindingMode,
};
use crate::requirements::Requirements;

/// Claims, volumes and classes by name, built once per plan (a lookup per
/// claim, not a scan: a StatefulSet of 10,000 replicas has 10,000 claims).
pub(crate) struct VolumeTopology<'a> {
    claims: HashMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    volumes: HashMap<&'a str, &'a PersistentVolume>,
    classes: HashMap<&'a str, &'a StorageClass>,
    default_class: Option<&'a StorageClass>,
}

impl<'a> VolumeTopology<'a> {
    pub(crate) fn new(state: &'a ClusterState) -> Self {
        // Later definitions win, as the loader's de-duplication does.
        let claims = state
            .pvcs
            .iter()
            .map(|c| ((c.namespace.as_str(), c.name.as_str()), c))
            .collect();
        let volumes = state.pvs.iter().map(|v| (v.name.as_str(), v)).collect();
        let classes = state
            .storage_classes
            .iter()
            .map(|s| (s.name.as_str(), s))
            .collect();
        VolumeTopology {
            claims,
            volumes,
            classes,
            default_class: state.storage_classes.iter().find(|s| s.is_default),
        }
    }

    /// The node-requirement alternatives `pod`'s volumes make, or why the
    /// pod waits.
    pub(crate) fn requirements(&self, pod: &Pod) -> Result<VolumeTerms, String> {
        let mut volumes = Vec::new();
        for claim in &pod.pvc_names {
            let terms = self.claim_terms(pod, claim)?;
            if !terms.is_empty() {
                volumes.push(terms);
            }
        }
        Ok(VolumeTerms::combine(pod, &volumes))
    }

    /// The OR'd node terms one claim allows (empty: anywhere).
    fn claim_terms(&self, pod: &Pod, claim: &str) -> Result<Vec<Requirements>, String> {
        let ns = pod.namespace.as_str();
        let Some(pvc) = self.claims.get(&(ns, claim)) else {
            return Err(format!(
                "PersistentVolumeClaim {ns}/{claim} does not exist: the pod waits for it"
            ));
        };
        if pvc.deleting {
            return Err(format!(
                "PersistentVolumeClaim {ns}/{claim} is being deleted: the pod waits for it"
            ));
        }
        if pvc.lost {
            return Err(format!(
                "PersistentVolumeClaim {ns}/{claim} is Lost (its PersistentVolume is gone): the pod waits for it"
            ));
        }
        if let Some(pv_name) = &pvc.volume_name {
            return self.bound_volume_terms(ns, claim, pv_name);
        }
        self.unbound_claim_terms(ns, claim, pvc)
    }

    /// The node terms of the PersistentVolume `pv_name` a claim is bound to.
    fn bound_volume_terms(
        &self,
        ns: &str,
        claim: &str,
        pv_name: &str,
    ) -> Result<Vec<Requirements>, String> {
        let Some(pv) = self.volumes.get(pv_name) else {
            return Err(format!(
                "PersistentVolume {pv_name}, bound to claim {ns}/{claim}, does not exist: the pod waits for it"
            ));
        };
        if pv.deleting {
            return Err(format!(
                "PersistentVolume {pv_name}, bound to claim {ns}/{claim}, is being deleted: the pod waits"
            ));
        }
        Ok(pv
            .node_affinity
            .iter()
            .map(|t| {
                if pv.local_or_host_path {
                    without_hostname(t)
                } else {
                    t.clone()
                }
            })
            .collect())
    }

    /// The node terms of an unbound claim: its `WaitForFirstConsumer`
    /// StorageClass's `allowedTopologies`.
    fn unbound_claim_terms(
        &self,
        ns: &str,
        claim: &str,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Vec<Requirements>, String> {
        let Some(class) = self.claim_storage_class(ns, claim, pvc)? else {
            return Ok(vec![]);
        };
        if class.binding_mode == VolumeBindingMode::Immediate {
            return Err(format!(
                "PersistentVolumeClaim {ns}/{claim} is not bound yet and StorageClass {} binds Immediate: the pod waits until its volume is provisioned",
                class.name
            ));
        }
        Ok(class.allowed_topologies.clone())
    }

    /// The StorageClass an unbound claim names, else the default one.
    fn claim_storage_class(
        &self,
        ns: &str,
        claim: &str,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Option<&'a StorageClass>, String> {
        match &pvc.storage_class {
            Some(name) if name.is_empty() => Err(format!(
                "PersistentVolumeClaim {ns}/{claim} has no StorageClass and is not bound: the pod waits for a PersistentVolume"
            )),
            Some(name) => match self.classes.get(name.as_str()) {
                Some(c) => Ok(Some(*c)),
                None => Err(format!(
                    "StorageClass {name} of claim {ns}/{claim} does not exist: the pod waits for it"
                )),
            },
            None => Ok(self.default_class),
        }
    }
}

/// Most combinations of volume terms kept per required node-affinity term
/// of the pod: the first ones in order (see [`combinations`]).
pub(crate) const MAX_COMBINATIONS: usize = 64;

/// One alternative a pod may be placed by: one of its required
/// node-affinity terms (an index into `Pod::required_terms`; none when the
/// pod has none) with one term of each of its volumes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Alternative {
    term: usize,
    volume: Requirements,
}

/// The node-requirement alternatives of a pod and its volumes, walked by
/// `Relaxation::required_term` (Karpenter's volume-requirement alternatives,
/// `volumetopology.go`, tried under each of the pod's required terms).
///
/// The pod's required terms in their order (a pod without any has one,
/// empty), and under each the combinations of one term per volume: the
/// first volume's term order outermost, then the next volume's. A
/// combination disjoint with the pod's node selector and that required term
/// (or with itself, two volumes in different zones) is pruned; when every
/// combination under a term is, the first term of each volume is kept, and
/// the pod fails there with a reason that names the conflict. At most
/// [`MAX_COMBINATIONS`] per required term.
///
/// Empty (the default): the volumes require nothing, and the pod's own
/// required terms are walked as they are. Spread domains never see the
/// volume part (see `pod_view::domain_requirements`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VolumeTerms {
    alternatives: Vec<Alternative>,
}

impl VolumeTerms {
    /// The alternatives of `pod` and its volumes' OR'd terms (one list per
    /// volume that restricts nodes, in the pod's claim order).
    pub(crate) fn combine(pod: &Pod, volumes: &[Vec<Requirements>]) -> VolumeTerms {
        if volumes.is_empty() {
            return VolumeTerms::default();
        }
        let mut alternatives = Vec::new();
        for term in 0..pod.required_terms.len().max(1) {
            let mut asked = pod.node_selector.clone();
            if let Some(t) = pod.required_terms.get(term) {
                asked.add_all(t);
            }
            alternatives.extend(
                combinations(&asked, volumes)
                    .into_iter()
                    .map(|volume| Alternative { term, volume }),
            );
        }
        if alternatives.iter().all(|a| a.volume.is_empty()) {
            // Terms that only named the host of a local volume: nothing.
            return VolumeTerms::default();
        }
        VolumeTerms { alternatives }
    }

    /// How many alternatives the pod has (at least one).
    pub(crate) fn len(&self, pod: &Pod) -> usize {
        if self.alternatives.is_empty() {
            pod.required_terms.len().max(1)
        } else {
            self.alternatives.len()
        }
    }

    /// The `i`-th alternative: the pod's required term and the volumes'
    /// requirements (either may be none).
    pub(crate) fn at<'a>(
        &'a self,
        pod: &'a Pod,
        i: usize,
    ) -> (Option<&'a Requirements>, Option<&'a Requirements>) {
        if self.alternatives.is_empty() {
            return (pod.required_terms.get(i), None);
        }
        match self.alternatives.get(i) {
            Some(a) => (pod.required_terms.get(a.term), Some(&a.volume)),
            None => (None, None),
        }
    }

    /// Whether the `i`-th alternative uses another required term of the pod
    /// than the one before it.
    pub(crate) fn new_term_at(&self, i: usize) -> bool {
        let term = |j: usize| self.alternatives.get(j).map(|a| a.term);
        i == 0 || self.alternatives.is_empty() || term(i - 1) != term(i)
    }

    /// No volume restricts the pod's nodes.
    pub(crate) fn is_empty(&self) -> bool {
        self.alternatives.is_empty()
    }

    /// The label keys the volumes' requirements read.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &String> {
        self.alternatives.iter().flat_map(|a| a.volume.keys())
    }
}

/// The combinations of one term per volume that intersect `asked` and one
/// another, the first volume's term order outermost, without repeats. At
/// most [`MAX_COMBINATIONS`]: after each volume the first ones in that
/// order are kept. None intersects: the first term of each volume alone.
fn combinations(asked: &Requirements, volumes: &[Vec<Requirements>]) -> Vec<Requirements> {
    let mut partial = vec![Requirements::new()];
    for terms in volumes {
        let mut next: Vec<Requirements> = Vec::new();
        'partial: for p in &partial {
            let mut with = asked.clone();
            with.add_all(p);
            for t in terms {
                if !with.intersects_ok(t) {
                    continue;
                }
                let mut c = p.clone();
                c.add_all(t);
                if !next.contains(&c) {
                    next.push(c);
                }
                if next.len() == MAX_COMBINATIONS {
                    break 'partial;
                }
            }
        }
        if next.is_empty() {
            let mut first = Requirements::new();
            for t in volumes.iter().filter_map(|terms| terms.first()) {
                first.add_all(t);
            }
            return vec![first];
        }
        partial = next;
    }
    partial
}

fn without_hostname(t: &Requirements) -> Requirements {
    Requirements::from_iter_reqs(
        t.iter()
            .filter(|r| r.key != labels::HOSTNAME)
            .cloned()
            .collect::<Vec<_>>(),
    )
}
