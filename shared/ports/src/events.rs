//! The bus port and the event contracts between the stages.
//!
//! Every Flotilla event is `source = "flotilla"` with one of the detail
//! types below; details carry ids only (an EventBridge entry is at most
//! 256 KB), the data they point to is in the store. Consumers must accept
//! every event more than once, out of order and concurrently.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::PortResult;

/// `source` of every event Flotilla puts.
pub const SOURCE: &str = "flotilla";

/// EventBridge PutEvents takes at most 10 entries per call.
pub const MAX_PUT_ENTRIES: usize = 10;

/// An EventBridge entry is at most 256 KB (detail type, detail, source,
/// resources together); details are kept far below.
pub const MAX_DETAIL_BYTES: usize = 64 * 1024;

/// At most this many NodeClaim names per `NodeClaimsPlanned` event.
pub const NODE_CLAIMS_PER_EVENT: usize = 50;

/// One event to put on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub detail_type: String,
    /// JSON.
    pub detail: String,
}

pub trait Bus: Send + Sync {
    /// Put the events (any number: adapters split into PutEvents calls and
    /// retry entries EventBridge reports as failed). At-least-once.
    fn put(&self, events: Vec<Event>) -> impl Future<Output = PortResult<()>> + Send;
}

impl<B: Bus + ?Sized> Bus for std::sync::Arc<B> {
    fn put(&self, events: Vec<Event>) -> impl Future<Output = PortResult<()>> + Send {
        (**self).put(events)
    }
}

/// The stage-to-stage events (`detail-type` → detail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "detail-type", content = "detail")]
pub enum FlotillaEvent {
    /// intake → schedule: a batch is stored and its debounce window is open.
    #[serde(rename = "BatchAccepted")]
    BatchAccepted(BatchAccepted),
    /// schedule → launch: these NodeClaims are persisted as `Pending`.
    #[serde(rename = "NodeClaimsPlanned")]
    NodeClaimsPlanned(NodeClaimsPlanned),
    /// launch → intake/agent: a NodeClaim could not be launched; its pods go
    /// back to the next batch.
    #[serde(rename = "PodsUnschedulable")]
    PodsUnschedulable(PodsUnschedulable),
}

impl FlotillaEvent {
    pub fn detail_type(&self) -> &'static str {
        match self {
            FlotillaEvent::BatchAccepted(_) => "BatchAccepted",
            FlotillaEvent::NodeClaimsPlanned(_) => "NodeClaimsPlanned",
            FlotillaEvent::PodsUnschedulable(_) => "PodsUnschedulable",
        }
    }

    /// The bus entry for this event.
    pub fn to_event(&self) -> Event {
        let detail = match self {
            FlotillaEvent::BatchAccepted(d) => serde_json::to_string(d),
            FlotillaEvent::NodeClaimsPlanned(d) => serde_json::to_string(d),
            FlotillaEvent::PodsUnschedulable(d) => serde_json::to_string(d),
        }
        // Plain structs of strings and integers always serialize.
        .unwrap_or_default();
        Event {
            detail_type: self.detail_type().to_string(),
            detail,
        }
    }

    /// Parse a bus entry back (detail type + JSON detail).
    pub fn from_parts(detail_type: &str, detail: &serde_json::Value) -> Result<Self, String> {
        let wrapped = serde_json::json!({ "detail-type": detail_type, "detail": detail });
        serde_json::from_value(wrapped).map_err(|e| format!("{detail_type}: {e}"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchAccepted {
    pub cluster_id: String,
    pub batch_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimsPlanned {
    pub cluster_id: String,
    pub batch_id: String,
    pub node_claims: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodsUnschedulable {
    pub cluster_id: String,
    pub node_claim: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_bus_entries() {
        let e = FlotillaEvent::NodeClaimsPlanned(NodeClaimsPlanned {
            cluster_id: "prod".into(),
            batch_id: "b1".into(),
            node_claims: vec!["default-abc-0".into()],
        });
        let entry = e.to_event();
        assert_eq!(entry.detail_type, "NodeClaimsPlanned");
        let detail: serde_json::Value = serde_json::from_str(&entry.detail).unwrap();
        assert_eq!(detail["clusterId"], "prod");
        assert_eq!(
            FlotillaEvent::from_parts("NodeClaimsPlanned", &detail).unwrap(),
            e
        );
    }

    #[test]
    fn unknown_detail_type_and_typo_fields_are_rejected() {
        let d = serde_json::json!({"clusterId": "a", "batchId": "b"});
        assert!(FlotillaEvent::from_parts("BatchAccepted", &d).is_ok());
        assert!(FlotillaEvent::from_parts("BatchAcepted", &d).is_err());
        let typo = serde_json::json!({"clusterId": "a", "batchID": "b"});
        let err = FlotillaEvent::from_parts("BatchAccepted", &typo).unwrap_err();
        assert!(err.contains("batchID"), "{err}");
    }
}
