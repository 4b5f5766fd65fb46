//! Volume topology: the node requirements a pod's PersistentVolumeClaims
//! add, and the pods that must wait for their volumes (Karpenter's
//! `volumetopology.go`, with the kube-scheduler's unbound-immediate rule).
//!
//! * A bound claim adds its PersistentVolume's required node affinity; an
//!   unbound `WaitForFirstConsumer` claim adds its StorageClass's
//!   `allowedTopologies`. Terms are OR'd: the first term compatible with the
//!   pod's own node selector and required affinity is taken (Karpenter takes
//!   the first term whatever the pod asks, and can then find no node).
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

    /// The requirements `pod`'s volumes add, or why the pod waits.
    pub(crate) fn requirements(&self, pod: &Pod) -> Result<Requirements, String> {
        let mut reqs = Requirements::new();
        for claim in &pod.pvc_names {
            let terms = self.claim_terms(pod, claim)?;
            if let Some(t) = pick_term(pod, &reqs, &terms) {
                reqs.add_all(&t);
            }
        }
        Ok(reqs)
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
            let Some(pv) = self.volumes.get(pv_name.as_str()) else {
                return Err(format!(
                    "PersistentVolume {pv_name}, bound to claim {ns}/{claim}, does not exist: the pod waits for it"
                ));
            };
            if pv.deleting {
                return Err(format!(
                    "PersistentVolume {pv_name}, bound to claim {ns}/{claim}, is being deleted: the pod waits"
                ));
            }
            return Ok(pv
                .node_affinity
                .iter()
                .map(|t| {
                    if pv.local_or_host_path {
                        without_hostname(t)
                    } else {
                        t.clone()
                    }
                })
                .collect());
        }
        let class = match &pvc.storage_class {
            Some(name) if name.is_empty() => {
                return Err(format!(
                    "PersistentVolumeClaim {ns}/{claim} has no StorageClass and is not bound: the pod waits for a PersistentVolume"
                ))
            }
            Some(name) => match self.classes.get(name.as_str()) {
                Some(c) => Some(*c),
                None => {
                    return Err(format!(
                        "StorageClass {name} of claim {ns}/{claim} does not exist: the pod waits for it"
                    ))
                }
            },
            None => self.default_class,
        };
        let Some(class) = class else {
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
}

/// The first OR'd term compatible with what the pod asks (its node selector,
/// its first required affinity term and the volumes taken so far), else the
/// first term: the pod then fails with a reason that names the conflict.
fn pick_term(pod: &Pod, taken: &Requirements, terms: &[Requirements]) -> Option<Requirements> {
    let first = terms.first()?;
    let mut asked = pod.node_selector.clone();
    if let Some(t) = pod.required_terms.first() {
        asked.add_all(t);
    }
    asked.add_all(taken);
    Some(
        terms
            .iter()
            .find(|t| asked.intersects_ok(t))
            .unwrap_or(first)
            .clone(),
    )
}

fn without_hostname(t: &Requirements) -> Requirements {
    Requirements::from_iter_reqs(
        t.iter()
            .filter(|r| r.key != labels::HOSTNAME)
            .cloned()
            .collect::<Vec<_>>(),
    )
}
