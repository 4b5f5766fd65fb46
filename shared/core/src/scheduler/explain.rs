//! Why a pod cannot be placed: refusal reasons and the messages that explain
//! them to users (their text is part of the output).

use crate::labels;
use crate::model::Taint;
use crate::requirements::Requirements;
use crate::resources::Resources;

use super::*;

/// Why a planned NodeClaim cannot take a pod. Trials are many and their
/// reasons are not shown (a pod's reasons come from the NodePools), so
/// they are kept as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimRefusal {
    Full,
    Taint,
    HostPort,
    Requirements,
    Topology,
    NoInstanceType,
    MinValues,
}

/// Why a pod is left unplaced when [`SchedulerOptions::max_node_claims`]
/// stops planning.
pub(super) const NODE_CLAIM_CAP: &str = "planning stopped at this simulation's NodeClaim cap";

pub(super) fn taint_string(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{:?}", t.key, t.effect)
    } else {
        format!("{}={}:{:?}", t.key, t.value, t.effect)
    }
}

pub(super) fn display_reqs(r: &Requirements) -> String {
    r.iter()
        .filter(|q| q.key != labels::HOSTNAME)
        .map(|q| q.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn incompatibility(e: &crate::requirements::Incompatibility, pool: &str) -> String {
    use crate::requirements::Incompatibility::*;
    match e {
        Undefined { key, incoming } => format!(
            "label {key:?} is not defined by NodePool {pool:?} (pod requires {incoming}; add it to the NodePool's requirements with Exists or to its labels)"
        ),
        Disjoint { key, incoming, existing } => {
            format!("{incoming} not allowed by NodePool {pool:?} ({existing}) on {key}")
        }
    }
}

impl Run<'_> {
    pub(super) fn explain_no_type(&self, pi: usize, reqs: &Requirements) -> String {
        let pool = &self.pools[pi];
        let name = &pool.np.name;
        // Find the requirement that rules out every type.
        for r in reqs.iter() {
            if r.key == labels::HOSTNAME || r.key == labels::NODEPOOL {
                continue;
            }
            let single = Requirements::from_iter_reqs([r.clone()]);
            let filter = pool.filter(&single);
            let any = pool
                .types
                .iter()
                .any(|t| t.requirements.intersects_ok(&single) && t.has_offering(&filter));
            if !any {
                return format!("no instance type in NodePool {name:?} satisfies {r}");
            }
        }
        format!(
            "no instance type in NodePool {name:?} satisfies all of {}",
            display_reqs(reqs)
        )
    }

    pub(super) fn explain_no_fit(
        &self,
        pi: usize,
        compatible: &[usize],
        requests: &Resources,
    ) -> String {
        let pool = &self.pools[pi];
        let name = &pool.np.name;
        for (res, want) in requests.iter() {
            let largest = compatible
                .iter()
                .map(|&i| pool.types[i].allocatable.get(res))
                .max()
                .unwrap_or_default();
            if want > largest {
                let overhead = pool.daemon_overhead.get(res);
                let ds = if overhead.is_zero() {
                    String::new()
                } else {
                    format!(" plus {overhead} daemonset overhead")
                };
                return if largest.is_zero() {
                    format!(
                        "no instance type in NodePool {name:?} has {res} (pod requests {}{ds})",
                        want - overhead
                    )
                } else {
                    format!(
                        "no instance type in NodePool {name:?} has {} {res}{ds} (largest allocatable: {largest})",
                        want - overhead
                    )
                };
            }
        }
        format!("no single instance type in NodePool {name:?} has room for {requests} together")
    }
}
