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
    /// Set for a batch over the state kept by changes: the state to load
    /// (its `chunks` are 0; see `changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateRef>,
}

/// A cluster state kept by changes, as of one post: the snapshot and the
/// deltas applied over it, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateRef {
    pub cluster: ClusterMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<StoredBlob>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deltas: Vec<StoredBlob>,
}

/// A JSON body stored gzip-compressed in chunks (`STATE#<kind>#<id>#n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredBlob {
    pub id: String,
    pub chunks: usize,
    /// Uncompressed bytes.
    pub bytes: usize,
    /// [`crate::codec::content_hash`] of the uncompressed JSON.
    pub hash: String,
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
    /// The AMI it was launched with (`None`: not known, e.g. an instance
    /// adopted, or recorded before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The subnet it was launched into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// Its security groups (sorted; empty: not known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
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
    /// The NodePool's template hash when this NodeClaim was planned
    /// (`karpenter.sh/nodepool-hash`): the disruption engine reports the
    /// node drifted when the pool's current hash differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodepool_hash: Option<String>,
    /// The EC2NodeClass's hash when this NodeClaim was planned
    /// (`karpenter.k8s.aws/ec2nodeclass-hash`): a change of the node class
    /// drifts the node as a change of the NodePool's template does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodeclass_hash: Option<String>,
}

/// Label put on every node Flotilla launches, naming its NodeClaim, so the
/// next batch's Node list tells which NodeClaims registered.
pub const NODECLAIM_LABEL: &str = "flotilla.io/nodeclaim";

/// The [`NodeClaimRecord::notes`] entry holding the name of the node that
/// registered for the NodeClaim.
pub const NODE_NOTE: &str = "node";
/// The note on a disruption decision's replacement NodeClaim: the
/// decision's id. Its pods are bound on the nodes it replaces, so a failed
/// launch puts no `PodsUnschedulable` (the disruption stage abandons the
/// decision instead; re-planning would launch capacity nobody needs).
pub const DISRUPTION_NOTE: &str = "disruption";

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

/// `CLUSTER#<c> / STATE`: the newest stored batch of a cluster, whatever
/// posted it (a batch with pending pods, or a heartbeat once intake stores
/// those): the disruption stage's cluster state. Moved forward only
/// (version-checked, newer `acceptedAt` wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatePointer {
    pub batch_id: String,
    /// Unix ms the batch was accepted.
    pub accepted_at: i64,
    /// The batch's content hash (absent in pointers written before it was
    /// recorded): an unchanged heartbeat is not stored again while the
    /// stored one is fresh ([`crate::cluster_state::store_heartbeat`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

/// Where a disruption decision is (see `docs/pipeline.md`, "Disruption").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DisruptionState {
    /// Replacement NodeClaims written and announced; waiting until every
    /// one is `Registered` (graceful reasons only).
    Replacing,
    /// Taint and drain actions stored for the agent; waiting until each
    /// node is drained (acknowledged, gone from the agent's report, or the
    /// deadline passed).
    Draining,
    /// Instances being terminated and their NodeClaims ended.
    Terminating,
    /// Finished (final).
    Done,
    /// Given up: a replacement failed or never registered, or a graceful
    /// drain was refused; tainted nodes get `Untaint` actions (final).
    Abandoned,
}

impl DisruptionState {
    pub fn is_final(self) -> bool {
        matches!(self, DisruptionState::Done | DisruptionState::Abandoned)
    }

    /// The state machine's legal moves.
    pub fn can_become(self, next: DisruptionState) -> bool {
        use DisruptionState::*;
        matches!(
            (self, next),
            (Replacing, Draining)
                | (Replacing, Abandoned)
                | (Draining, Terminating)
                | (Draining, Abandoned)
                | (Terminating, Done)
        )
    }
}

/// One node of a decision, and what the pipeline knows of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptedNode {
    pub node: String,
    /// Its NodeClaim (ours: the pipeline disrupts no other node).
    pub node_claim: String,
    /// The instance to terminate once drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// `CLUSTER#<c> / DISRUPTION#<id>`: one decision of the disruption engine
/// being carried out. Written only if absent, together with one
/// `DISRUPTING#<node>` marker per node (one transaction), so two
/// overlapping runs never start two decisions for one node; every later
/// change is version-checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionRecord {
    /// Content hash of (reason, sorted nodes, replacement names).
    pub id: String,
    pub cluster_id: String,
    /// The batch whose cluster state the decision was taken on (its
    /// `CONTEXT#` launches the replacements).
    pub batch_id: String,
    pub reason: flotilla_core::model::DisruptionReason,
    pub node_pool: String,
    pub nodes: Vec<DisruptedNode>,
    /// The replacement NodeClaims' stored names. Their plans are stored
    /// beside the record (see [`ReplacementPlans`]): a split may launch
    /// hundreds, more than one item holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacement_names: Vec<String>,
    /// Where the replacements' plans are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement_plans: Option<ReplacementPlans>,
    /// Replacement NodeClaims, as they are written (`Pending`): the form
    /// of records written before [`ReplacementPlans`] (new decisions leave
    /// it empty; such a record keeps it when it is updated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<Replacement>,
    pub state: DisruptionState,
    /// `price.before` / `price.after` of the decision ($/h).
    pub price_before: f64,
    pub price_after: f64,
    /// Seconds a blocked drain may last (the NodePool's
    /// `terminationGracePeriod`); `None`: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_seconds: Option<u64>,
    /// Unix ms.
    pub created_at: i64,
    pub updated_at: i64,
    /// Unix seconds: when the drain started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_started: Option<i64>,
    /// Unix seconds: the drain's deadline (the actions' deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    /// Taint actions were stored (an abandoned decision untaints).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tainted: bool,
    /// Why it ended (abandoned), or a note on how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// A decision's replacement plans (`Vec<Replacement>` as gzip JSON), cut
/// in `chunks` items `REPLACEMENTS#<id>#<blob>#<nnnn>`. `blob` is the
/// plans' content hash (checked when they are read), so two runs that plan
/// one decision differently never mix their chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplacementPlans {
    pub blob: String,
    pub chunks: u32,
}

/// A replacement NodeClaim of a decision: everything its record is written
/// from, so that a later run writes exactly the same record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// The plan, under its stored name.
    pub plan: NodeClaimPlan,
    pub node_class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodepool_hash: Option<String>,
    /// The EC2NodeClass's hash at planning time (see
    /// [`NodeClaimRecord::nodeclass_hash`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodeclass_hash: Option<String>,
    /// The size of the capacity reservation it targets (its counter's
    /// bound), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_size: Option<i64>,
}

impl DisruptionRecord {
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.node.as_str())
    }

    /// The replacement NodeClaims' names (of either form of the record).
    pub fn replacement_names(&self) -> impl Iterator<Item = &str> {
        let inline = self.replacements.iter().map(|r| r.plan.name.as_str());
        self.replacement_names
            .iter()
            .map(String::as_str)
            .chain(inline)
    }
}

/// `CLUSTER#<c> / DISRUPTING#<node>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptingMarker {
    pub decision: String,
    pub reason: flotilla_core::model::DisruptionReason,
}

/// Which EC2 notice an `INTERRUPTED#` item records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InterruptionKind {
    /// Spot interruption warning (2 minutes).
    Spot,
    /// Interruptible capacity reservation reclaimed (2 minutes).
    Reservation,
    /// Rebalance recommendation: replaced only when the NodePool opts in
    /// with [`REPLACE_ON_REBALANCE`].
    Rebalance,
}

/// NodePool annotation: `"true"` replaces a node at once on an EC2
/// rebalance recommendation (otherwise it is only cordoned).
pub const REPLACE_ON_REBALANCE: &str = "flotilla.io/replace-on-rebalance";

/// `CLUSTER#<c> / INTERRUPTED#<nodeclaim>`: written once per NodeClaim by
/// the sweep's notice handler (create-if-absent); its deadline names the
/// actions stored with it, so a redelivered notice stores the same ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionRecord {
    pub node_claim: String,
    pub instance_id: String,
    pub kind: InterruptionKind,
    /// Unix seconds the notice was handled first.
    pub at: i64,
    /// Unix seconds: the deadline of the cordon/drain actions stored.
    pub deadline: i64,
}

/// `CLUSTER#<c> / NODETIMES`: per node, a digest of its pods and since when
/// (Unix seconds) the disruption stage has seen it so. A node whose pods
/// changed restarts its `consolidateAfter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTimes {
    pub nodes: BTreeMap<String, NodeTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTime {
    pub digest: String,
    pub since: i64,
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

    #[test]
    fn a_decision_moves_forward_only_and_finishes_once() {
        use DisruptionState::*;
        let all = [Replacing, Draining, Terminating, Done, Abandoned];
        for s in [Done, Abandoned] {
            assert!(s.is_final());
            for n in all {
                assert!(!s.can_become(n), "{s:?} -> {n:?}");
            }
        }
        // Nothing goes back, and termination is never abandoned half-way.
        assert!(!Draining.can_become(Replacing));
        assert!(!Terminating.can_become(Abandoned));
        assert!(!Replacing.can_become(Terminating));
        assert!(Replacing.can_become(Draining) && Draining.can_become(Terminating));
    }
}

/// The request body of `POST /batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchRequest {
    pub cluster_id: String,
    pub cluster: ClusterMeta,
    /// Kubernetes objects (or `List`s of them): pending pods, NodePools or
    /// Provisioners, EC2NodeClasses, Nodes with their pods, DaemonSets,
    /// StorageClasses, PVCs/PVs, NodeOverlays.
    pub documents: Vec<serde_json::Value>,
}
