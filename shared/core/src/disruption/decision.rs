//! The disruption decision: the public `flotilla disrupt -o json` format.
//!
//! Stability: fields are only ever added. Field names are camelCase; lists
//! are in a deterministic order (decisions in the order they are taken:
//! forceful first, then Empty, Drifted, Underutilized; nodes, moves and
//! blocked entries sorted by name).

use serde::Serialize;

use super::price::{round6, Cost};
use crate::model::DisruptionReason;
use crate::plan::NodeClaimPlan;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruptions {
    pub decisions: Vec<Decision>,
    pub blocked: Vec<Blocked>,
    /// Non-fatal findings. Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One disruption: remove `nodes`, launching `replacements` first.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub reason: DisruptionReason,
    pub node_pool: String,
    /// Names of the nodes removed, sorted.
    pub nodes: Vec<String>,
    /// NodeClaims to launch before the nodes are drained, shaped exactly
    /// like `flotilla plan`'s `nodeClaims`.
    pub replacements: Vec<NodeClaimPlan>,
    /// Where each evicted pod goes (DaemonSet pods are not moved), sorted
    /// by pod.
    pub moves: Vec<Move>,
    pub price: PriceChange,
    /// How long a drain may be blocked before the nodes go anyway (the
    /// NodePool's `terminationGracePeriod`). Omitted when unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<u64>,
    /// Why, in words, where the reason alone does not say (a drifted
    /// node: what no longer matches). Omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// `namespace/name`
    pub pod: String,
    /// An existing node, or a replacement NodeClaim's name.
    pub to: String,
}

/// $/hour of the removed nodes and of the replacements. Reserved capacity
/// counts $0 (pre-paid). `before` / `after` are the instances (their
/// meaning since the first release); the EBS volumes are beside them, and
/// the decision compares the totals.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PriceChange {
    pub before: f64,
    pub after: f64,
    /// $/hour of the removed nodes' EBS volumes.
    pub volumes_before: f64,
    /// $/hour of the replacements' EBS volumes (their `volumePrice`).
    pub volumes_after: f64,
    /// `before + volumesBefore`.
    pub total_before: f64,
    /// `after + volumesAfter`.
    pub total_after: f64,
}

impl PriceChange {
    /// The figures of `before` and `after` (see [`Cost::reported`]).
    pub fn of(before: Cost, after: Cost) -> PriceChange {
        PriceChange {
            before: before.reported(),
            after: after.reported(),
            volumes_before: round6(before.volumes),
            volumes_after: round6(after.volumes),
            total_before: round6(before.dollars),
            total_after: round6(after.dollars),
        }
    }
}

/// A candidate that cannot be disrupted now.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct Blocked {
    pub node: String,
    /// A sentence naming what blocks it: the pod annotation, the PDB
    /// `ns/name`, the budget, the pod that fits nowhere.
    pub reason: String,
}
