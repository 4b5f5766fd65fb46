//! The records the stages keep in the store, and their state machines.

use std::collections::BTreeMap;

use flotilla_core::plan::NodeClaimPlan;
use serde::{Deserialize, Serialize};

/// `CLUSTER#<c> / SCHEDULER`: the batching window and the scheduling lease
/// of one cluster. Changed only with version-checked writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerPointer {
    /// The newest accepted batch not yet scheduled (a newer batch replaces
    /// it: it holds the same pods, more recently observed).
    pub pending: Option<PendingBatch>,
    /// The batch being scheduled and until when its lease holds.
    pub running: Option<RunningBatch>,
    /// The last batch whose scheduling finished.
    pub last_completed: Option<String>,
    /// Re-schedules of `last_completed` after failed launches (bounded, so
    /// a launch that can never succeed does not loop).
    #[serde(default)]
    pub rearms: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingBatch {
    pub batch_id: String,
    pub content_hash: String,
    /// Unix ms the first batch of this window was accepted.
    pub first_at: i64,
    /// Unix ms this batch was accepted.
    pub last_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningBatch {
    pub batch_id: String,
    pub lease_until: i64,
    /// Names this run's NodeClaims: the same across a crashed run's
    /// takeover (idempotent writes), new for every fresh run of a batch
    /// (a re-schedule after a failed launch gets new NodeClaims).
    #[serde(default)]
    pub run_id: String,
}

/// `CLUSTER#<c> / BATCH#<b>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchHeader {
    pub batch_id: String,
    pub content_hash: String,
    pub chunks: usize,
    pub accepted_at: i64,
    pub pending_pods: usize,
}

/// The cluster facts the launch stage needs (for the bootstrap user data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterMeta {
    /// The EKS cluster name.
    pub name: String,
    /// API server endpoint, `https://...`.
    pub endpoint: String,
    /// Base64 CA bundle.
    pub ca_bundle: String,
    #[serde(default)]
    pub service_cidr: Option<String>,
    /// e.g. `1.33`: picks the EKS-optimized AMI.
    pub kubernetes_version: String,
}

/// `CLUSTER#<c> / CONTEXT#<b>`: what launching a NodeClaim of batch `b`
/// needs besides the NodeClaim itself: the cluster, and the NodePool,
/// EC2NodeClass and NodeOverlay documents (no pods, so it is small).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchContext {
    pub cluster: ClusterMeta,
    pub documents: Vec<serde_json::Value>,
}

/// `CLUSTER#<c> / RESULT#<b>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchResult {
    pub batch_id: String,
    pub finished_at: i64,
    pub pending_pods: usize,
    pub node_claims: Vec<String>,
    /// (pod, reason), at most [`BatchResult::MAX_LISTED`].
    pub unschedulable: Vec<(String, String)>,
    pub unschedulable_total: usize,
    pub warnings: Vec<String>,
}

impl BatchResult {
    pub const MAX_LISTED: usize = 1_000;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeClaimState {
    /// Persisted by schedule; not launched yet.
    Pending,
    /// A launch invocation holds the lease and may be calling CreateFleet.
    Launching,
    /// An instance exists.
    Launched,
    /// A node with the NodeClaim's label joined the cluster.
    Registered,
    /// The launch gave up; the pods went back to the next batch.
    Failed,
    /// The instance is gone (terminated, interrupted, or never registered).
    Deleted,
}

impl NodeClaimState {
    /// Still holding (or about to hold) capacity.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            NodeClaimState::Pending
                | NodeClaimState::Launching
                | NodeClaimState::Launched
                | NodeClaimState::Registered
        )
    }

    /// The state machine's legal moves.
    pub fn can_become(self, next: NodeClaimState) -> bool {
        use NodeClaimState::*;
        matches!(
            (self, next),
            (Pending, Launching)
                | (Launching, Launching)
                | (Launching, Launched)
                | (Launching, Failed)
                | (Pending, Failed)
                | (Launched, Registered)
                | (Launched, Deleted)
                | (Registered, Deleted)
                | (Launching, Deleted)
        )
    }
}

/// The instance behind a launched NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchedInstanceRecord {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub launched_at: i64,
}

/// `CLUSTER#<c> / NODECLAIM#<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimRecord {
    pub name: String,
    pub cluster_id: String,
    pub batch_id: String,
    pub state: NodeClaimState,
    pub plan: NodeClaimPlan,
    /// The NodeClass the NodePool references.
    pub node_class: String,
    /// Capacity reservation whose counter this NodeClaim holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Until when the current launch attempt holds the NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<LaunchedInstanceRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Launch attempts made (CreateFleet calls).
    #[serde(default)]
    pub attempts: u32,
    /// Free-form annotations (e.g. the interruption notice that ended it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, String>,
    /// `Failed`, and its `PodsUnschedulable` (which has the batch scheduled
    /// again) not put yet: the launch's redelivery or the sweep puts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unannounced: bool,
}

/// Label put on every node Flotilla launches, naming its NodeClaim, so the
/// next batch's Node list tells which NodeClaims registered.
pub const NODECLAIM_LABEL: &str = "flotilla.io/nodeclaim";

/// The [`NodeClaimRecord::notes`] entry holding the name of the node that
/// registered for the NodeClaim.
pub const NODE_NOTE: &str = "node";

impl NodeClaimRecord {
    /// The node actions address: the registered node's name, else (not
    /// registered yet) the NodeClaim's, which the agent resolves through
    /// the node's [`NODECLAIM_LABEL`].
    pub fn node_name(&self) -> &str {
        self.notes
            .get(NODE_NOTE)
            .map_or(self.name.as_str(), String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_never_revives_a_finished_claim() {
        use NodeClaimState::*;
        for s in [Failed, Deleted] {
            for n in [Pending, Launching, Launched, Registered, Failed, Deleted] {
                assert!(!s.can_become(n), "{s:?} -> {n:?}");
            }
        }
        assert!(Pending.can_become(Launching));
        assert!(!Pending.can_become(Launched));
        assert!(Launched.can_become(Registered));
    }
}
