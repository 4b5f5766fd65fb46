//! Why a pod cannot be placed: typed refusal reasons, and the messages
//! that explain them to users (their text is part of the output).

use std::fmt;

use crate::labels;
use crate::model::{NodePool, Taint};
use crate::quantity::Quantity;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::index::PoolIdx;
use super::reservationmanager::RESERVED_GATE_OFF;
use super::topology::TopologyConflict;
use super::{min_values, Run};

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

/// Why a NodePool (or the run) cannot take a pod on a new NodeClaim: one
/// part of an unschedulable pod's reason. Built on every refused attempt,
/// so it carries data; the sentence (part of the output: users and tests
/// compare it) is made only when it is shown.
#[derive(Debug, Clone)]
pub(super) enum Refusal<'a> {
    /// The NodePool launches nothing now (`why`).
    Unavailable { pool: &'a str, why: &'a str },
    /// Neither a NodePool nor an existing node can take the pod.
    NoNodePool,
    /// The NodePool's requirements left no instance type (Karpenter drops
    /// such a NodePool before scheduling, with this message).
    NoTypesLeft { pool: &'a str, requirements: String },
    /// The NodePool's nodes carry a taint the pod does not tolerate.
    Taint { pool: &'a str, taint: Box<Taint> },
    /// The pod's requirements and the NodePool's disagree.
    Incompatible {
        pool: &'a str,
        error: Box<crate::requirements::Incompatibility>,
    },
    /// The pod names hosts (`kubernetes.io/hostname`): no new node can be one.
    Hostname { hosts: Box<Requirement> },
    /// Topology rules out every node of the NodePool.
    Topology {
        pool: &'a str,
        conflict: Box<TopologyConflict>,
    },
    /// One requirement rules out every instance type.
    NoTypeSatisfies {
        pool: &'a str,
        requirement: Box<Requirement>,
    },
    /// The requirements together rule out every instance type.
    NoTypeSatisfiesAll {
        pool: &'a str,
        requirements: Box<Requirements>,
    },
    /// No instance type has any of `resource`; `requested` is the pod's,
    /// `overhead` the daemonsets'.
    NoResource {
        pool: &'a str,
        resource: String,
        requested: Quantity,
        overhead: Quantity,
    },
    /// No instance type has enough of `resource`.
    TooLittle {
        pool: &'a str,
        resource: String,
        requested: Quantity,
        overhead: Quantity,
        largest: Quantity,
    },
    /// Each resource fits some type, but no type fits them all.
    NoRoomTogether {
        pool: &'a str,
        requests: Box<Resources>,
    },
    /// A DaemonSet holds one of the pod's host ports on every type that fits.
    DaemonSetHostPort {
        pool: &'a str,
        ports: Vec<(String, i32)>,
    },
    /// The NodePool's limits admit no type that fits (`exceeded`: the first
    /// limit the first such type breaks).
    Limits {
        pool: &'a str,
        exceeded: Option<(String, Quantity)>,
    },
    /// Every type that fits costs at least the simulation's new-node price
    /// limit (consolidation's split simulations).
    PriceLimit { pool: &'a str, limit: f64 },
    /// No type has an offering outside every capacity reservation.
    NoUnreservedType {
        pool: &'a str,
        requirements: Box<Requirements>,
    },
    /// The types left cannot keep the NodePool's `minValues` (Strict policy).
    MinValues {
        pool: &'a str,
        short: Vec<min_values::Shortfall>,
    },
    /// `reason`, and the used-up capacity reservations behind it.
    Exhausted {
        reason: Box<Refusal<'a>>,
        reservations: Vec<String>,
    },
}

impl fmt::Display for Refusal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unavailable { pool, why } => {
                write!(f, "NodePool {pool:?} launches nothing: {why}")
            }
            Refusal::NoNodePool => f.write_str(
                "no NodePool or Provisioner in the inputs, and no existing node fits",
            ),
            Refusal::NoTypesLeft { pool, requirements } => write!(
                f,
                "NodePool {pool:?}: nodepool requirements filtered out all available instance types ({requirements})"
            ),
            Refusal::Taint { pool, taint } => write!(
                f,
                "NodePool {pool:?} has taint {} that the pod does not tolerate",
                taint_string(taint)
            ),
            Refusal::Incompatible { pool, error } => {
                write!(f, "NodePool {pool:?}: {}", incompatibility(error, pool))
            }
            Refusal::Hostname { hosts } => write!(
                f,
                "the pod must run on {} {:?} (kubernetes.io/hostname), which no new node can be",
                if hosts.len() == 1 { "node" } else { "one of the nodes" },
                hosts.values()
            ),
            Refusal::Topology { pool, conflict } => write!(f, "NodePool {pool:?}: {conflict}"),
            Refusal::NoTypeSatisfies { pool, requirement } => write!(
                f,
                "no instance type in NodePool {pool:?} satisfies {requirement}"
            ),
            Refusal::NoTypeSatisfiesAll { pool, requirements } => write!(
                f,
                "no instance type in NodePool {pool:?} satisfies all of {}",
                display_reqs(requirements)
            ),
            Refusal::NoResource {
                pool,
                resource,
                requested,
                overhead,
            } => write!(
                f,
                "no instance type in NodePool {pool:?} has {resource} (pod requests {requested}{})",
                daemonset_note(*overhead)
            ),
            Refusal::TooLittle {
                pool,
                resource,
                requested,
                overhead,
                largest,
            } => write!(
                f,
                "no instance type in NodePool {pool:?} has {requested} {resource}{} (largest allocatable: {largest})",
                daemonset_note(*overhead)
            ),
            Refusal::NoRoomTogether { pool, requests } => write!(
                f,
                "no single instance type in NodePool {pool:?} has room for {requests} together"
            ),
            Refusal::DaemonSetHostPort { pool, ports } => write!(
                f,
                "NodePool {pool:?}: a DaemonSet on every instance type that fits holds a host port the pod asks for ({})",
                host_ports_list(ports)
            ),
            Refusal::Limits { pool, exceeded } => write!(
                f,
                "NodePool {pool:?} limits{} would be exceeded by every instance type that fits the pod",
                limit_detail(exceeded)
            ),
            Refusal::PriceLimit { pool, limit } => write!(
                f,
                "NodePool {pool:?}: every instance type that fits the pod costs ${limit:.4}/h or more, the most a replacement may cost here"
            ),
            Refusal::NoUnreservedType { pool, requirements } => write!(
                f,
                "NodePool {pool:?}: no instance type satisfies {}",
                display_reqs(requirements)
            ),
            Refusal::MinValues { pool, short } => {
                f.write_str(&min_values::strict_reason(pool, short))
            }
            Refusal::Exhausted {
                reason,
                reservations,
            } => write!(
                f,
                "{reason} (capacity reservations exhausted: {})",
                reservations.join(", ")
            ),
        }
    }
}

/// Host ports as `proto/port`, comma-separated.
fn host_ports_list(ports: &[(String, i32)]) -> String {
    ports
        .iter()
        .map(|(proto, port)| format!("{proto}/{port}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first limit exceeded, as ` (resource: quantity)`, or nothing.
fn limit_detail(exceeded: &Option<(String, Quantity)>) -> String {
    exceeded
        .as_ref()
        .map(|(k, q)| format!(" ({k}: {q})"))
        .unwrap_or_default()
}

/// The NodePools that launch nothing now, with why (named in every
/// unschedulable pod's reason).
pub(super) fn unavailable_pools(pools: &[NodePool]) -> Vec<Refusal<'_>> {
    pools
        .iter()
        .filter_map(|np| {
            np.unavailable.as_ref().map(|why| Refusal::Unavailable {
                pool: np.name.as_str(),
                why: why.as_str(),
            })
        })
        .collect()
}

/// What the daemonsets add to a pod's request of one resource, as said
/// after it (nothing when they add nothing).
fn daemonset_note(overhead: Quantity) -> String {
    if overhead.is_zero() {
        String::new()
    } else {
        format!(" plus {overhead} daemonset overhead")
    }
}

/// Why a pod is left unplaced: the reason the plan shows for it.
#[derive(Debug, Clone)]
pub(super) enum Unplaced<'a> {
    /// Its volumes are not ready: it waits.
    Volume(String),
    /// Every NodePool refused it (in NodePool order, joined by "; ").
    Refused(Vec<Refusal<'a>>),
    /// Planning stopped at [`SchedulerOptions::max_node_claims`].
    NodeClaimCap,
    /// Only reserved capacity could take it and the ReservedCapacity
    /// feature gate is off.
    ReservedGateOff(Box<Unplaced<'a>>),
}

impl fmt::Display for Unplaced<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unplaced::Volume(why) => f.write_str(why),
            Unplaced::Refused(reasons) => {
                for (i, r) in reasons.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{r}")?;
                }
                Ok(())
            }
            Unplaced::NodeClaimCap => f.write_str(NODE_CLAIM_CAP),
            Unplaced::ReservedGateOff(why) => write!(f, "{why}{RESERVED_GATE_OFF}"),
        }
    }
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

impl<'a> Run<'a> {
    /// Why no type of pool `pi` satisfies `reqs`: the requirement that
    /// rules out every type, or all of them together.
    pub(super) fn explain_no_type(&self, pi: PoolIdx, reqs: &Requirements) -> Refusal<'a> {
        let pool = &self.pools[pi];
        let name = pool.np.name.as_str();
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
                return Refusal::NoTypeSatisfies {
                    pool: name,
                    requirement: Box::new(r.clone()),
                };
            }
        }
        Refusal::NoTypeSatisfiesAll {
            pool: name,
            requirements: Box::new(reqs.clone()),
        }
    }

    /// Why none of pool `pi`'s `compatible` types has room for `requests`
    /// (the pod's and the daemonsets').
    pub(super) fn explain_no_fit(
        &self,
        pi: PoolIdx,
        compatible: &[usize],
        requests: &Resources,
    ) -> Refusal<'a> {
        let pool = &self.pools[pi];
        let name = pool.np.name.as_str();
        for (res, want) in requests.iter() {
            let largest = compatible
                .iter()
                .map(|&i| pool.types[i].allocatable.get(res))
                .max()
                .unwrap_or_default();
            if want > largest {
                let overhead = pool.daemon_overhead.get(res);
                return if largest.is_zero() {
                    Refusal::NoResource {
                        pool: name,
                        resource: res.to_string(),
                        requested: want - overhead,
                        overhead,
                    }
                } else {
                    Refusal::TooLittle {
                        pool: name,
                        resource: res.to_string(),
                        requested: want - overhead,
                        overhead,
                        largest,
                    }
                };
            }
        }
        Refusal::NoRoomTogether {
            pool: name,
            requests: Box::new(requests.clone()),
        }
    }
}
