//! What the agent reports, as stored: the nodes of the cluster that carry
//! a NodeClaim (`CLUSTER#<c> / NODES`) and its acknowledgements of actions.
//! Intake writes them; the sweep and the disruption stage read them.

use serde::{Deserialize, Serialize};

use flotilla_ports::Store;

use crate::{codec, keys, Result, ServiceError};

/// `CLUSTER#<c> / NODES`: the cluster's nodes that carry a NodeClaim's
/// label, as the agent's newest post showed them. The sweep drains a
/// leaked instance whose node is listed before terminating it, and takes a
/// node missing from the list for gone from the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodesReport {
    /// Unix ms of the post the list is from.
    pub at: i64,
    /// NodeClaim name → node name.
    pub nodes: std::collections::BTreeMap<String, String>,
    /// Written by the sweep, not the agent: when it first found this
    /// stack's instances of a cluster the agent never reported on (the
    /// sweep waits a while for the agent before collecting them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub placeholder: bool,
}

/// The cluster's last [`NodesReport`]; `None` before the agent's first
/// post.
pub async fn nodes_report<S: Store>(store: &S, cluster: &str) -> Result<Option<NodesReport>> {
    let key = keys::nodes(cluster);
    let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read nodes report"))?
    else {
        return Ok(None);
    };
    let json = codec::gunzip(&key.to_string(), &item.body)?;
    codec::from_json(&key.to_string(), &json).map(Some)
}

/// The field an acknowledged action item carries (its [`AckRecord`]).
pub const ACK_FIELD: &str = "ack";

/// What the agent did with an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AckOutcome {
    /// Applied (node cordoned, drained, relabelled).
    Done,
    /// Gave up (e.g. the deadline passed with pods a PodDisruptionBudget kept).
    Failed,
    /// Nothing to do (the node is gone, or the kind is not the agent's).
    Skipped,
}

/// What an acknowledged action item records under [`ACK_FIELD`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AckRecord {
    pub outcome: AckOutcome,
    pub message: String,
    /// Unix seconds.
    pub at: i64,
}
