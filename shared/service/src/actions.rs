//! Actions for a cluster's agent (`ACTION#<id>`: drain a node, cordon it,
//! give a reservation slot back), stored by the sweep and the disruption
//! stage, fetched and acknowledged through intake.

use flotilla_core::reservations::Action;
use flotilla_ports::{Condition, Item, PortError, Store, Write};
use serde::{Deserialize, Serialize};

use crate::{codec, keys, Result, ServiceError};

/// An action as stored for the agent (`ACTION#<id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAction {
    pub id: String,
    #[serde(flatten)]
    pub action: Action,
    pub created_at: i64,
}

fn action_id(a: &Action) -> String {
    let key = format!(
        "{:?}/{}/{}/{}",
        a.kind, a.node, a.reservation_id, a.deadline
    );
    codec::content_hash(key.as_bytes())
}

/// Store actions for a cluster's agent (idempotent per action).
pub async fn store_actions<S: Store>(
    store: &S,
    cluster: &str,
    actions: &[Action],
    now_secs: i64,
    retention_secs: i64,
) -> Result<usize> {
    let mut n = 0;
    for a in actions {
        let id = action_id(a);
        let stored = StoredAction {
            id: id.clone(),
            action: a.clone(),
            created_at: now_secs,
        };
        let mut item = Item::new(keys::action(cluster, &id), codec::to_json(&stored));
        item.expires_at = Some(a.deadline.max(now_secs) + retention_secs);
        match store
            .write(Write::Put {
                item,
                condition: Condition::Absent { now_secs },
            })
            .await
        {
            Ok(()) => n += 1,
            Err(PortError::ConditionFailed(_)) => {}
            Err(e) => return Err(ServiceError::port("store action")(e)),
        }
    }
    Ok(n)
}
