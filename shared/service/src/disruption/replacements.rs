//! A decision's replacement plans, stored beside its record.
//!
//! A split may launch hundreds of replacement NodeClaims and a plan takes
//! 1-3 KB of JSON, more than one DynamoDB item holds, so the record keeps
//! only their names ([`DisruptionRecord::replacement_names`]) and the
//! plans are stored as gzip JSON cut in `REPLACEMENTS#<id>#<blob>#<nnnn>`
//! items, written (unconditionally: a key's content never changes) before
//! the record. `blob` is the plans' content hash (checked on reading), so two runs
//! that plan one decision differently never mix their chunks; the chunks
//! of a run that lost the race to start it expire with their TTL.
//!
//! The plans are read only while the decision is `Replacing` (to write the
//! replacement NodeClaims), which ends within
//! [`super::REPLACEMENT_TIMEOUT_MS`]; they live [`PLANS_TTL_SECS`].

use flotilla_ports::{Item, Store};

use crate::records::{DisruptionRecord, Replacement, ReplacementPlans};
use crate::{codec, keys, Result, ServiceError};

/// How long stored replacement plans live (a decision reads them while
/// `Replacing`, at most [`super::REPLACEMENT_TIMEOUT_MS`]).
pub const PLANS_TTL_SECS: i64 = 24 * 3600;

/// The plans of `plans` as stored for decision `id`: where the record
/// finds them, and the items that hold them.
pub(super) fn stored(
    cluster: &str,
    id: &str,
    plans: &[Replacement],
    now_secs: i64,
) -> (ReplacementPlans, Vec<Item>) {
    let json = codec::to_json(&plans);
    let blob = codec::content_hash(&json);
    let expires = now_secs.saturating_add(PLANS_TTL_SECS);
    let items = codec::chunk_items(
        &json,
        |i| keys::replacements(cluster, id, &blob, i),
        Some(expires),
    );
    let chunks = u32::try_from(items.len()).unwrap_or(u32::MAX);
    (ReplacementPlans { blob, chunks }, items)
}

/// Write the chunks (before the record that names them).
pub(super) async fn write<S: Store>(store: &S, items: Vec<Item>) -> Result<()> {
    crate::put_all(store, items, "replacement plans").await
}

/// The replacements of `record`, in order: inline (records written before
/// the plans were stored apart) or read from their chunks (hash-checked).
/// `None`: a chunk is gone (expired).
pub(super) async fn read<S: Store>(
    store: &S,
    record: &DisruptionRecord,
    now_secs: i64,
) -> Result<Option<Vec<Replacement>>> {
    let Some(at) = &record.replacement_plans else {
        return Ok(Some(record.replacements.clone()));
    };
    let mut compressed = Vec::new();
    for i in 0..at.chunks as usize {
        let key = keys::replacements(&record.cluster_id, &record.id, &at.blob, i);
        let item = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read replacement plans"))?
            .filter(|item| item.is_live(now_secs));
        let Some(item) = item else {
            return Ok(None);
        };
        compressed.extend_from_slice(&item.body);
    }
    let key = keys::replacements(&record.cluster_id, &record.id, &at.blob, 0).to_string();
    let plans: Vec<Replacement> = codec::from_verified_gzip(&key, &compressed, &at.blob)?;
    let names = plans.iter().map(|r| r.plan.name.as_str());
    if !names.eq(record.replacement_names.iter().map(String::as_str)) {
        return Err(ServiceError::Corrupt {
            key,
            reason: format!(
                "the stored plans do not name decision {}'s replacements",
                record.id
            ),
        });
    }
    Ok(Some(plans))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::model::DisruptionReason;
    use flotilla_sim::MemStore;

    /// A replacement whose plan lists `types` instance types (1-3 KB
    /// each, as a split's are).
    fn replacement(i: usize, types: usize) -> Replacement {
        let names: Vec<String> = (0..types).map(|t| format!("m{t}g.{i}xlarge")).collect();
        let plan = serde_json::json!({
            "name": format!("default-{i}-0123abcd"),
            "nodePool": "default",
            "instanceTypes": names,
            "capacityTypes": ["on-demand"],
            "zones": ["us-west-2a"],
            "requirements": [],
            "labels": {"karpenter.sh/nodepool": "default"},
            "taints": [],
            "resources": {"requests": {}, "allocatable": {}},
            "pods": [format!("default/p-{i}")],
            "price": {"min": 0.1, "instanceType": "m6g.large", "zone": "us-west-2a", "capacityType": "on-demand"},
        });
        Replacement {
            plan: serde_json::from_value(plan).expect("plan"),
            node_class: "default".into(),
            nodepool_hash: None,
            nodeclass_hash: None,
            reservation_size: None,
        }
    }

    fn record(plans: &[Replacement], at: Option<ReplacementPlans>) -> DisruptionRecord {
        let mut r = super::super::sample_record(DisruptionReason::Underutilized);
        r.replacement_names = plans.iter().map(|r| r.plan.name.clone()).collect();
        r.replacement_plans = at;
        r
    }

    #[tokio::test]
    async fn plans_larger_than_an_item_are_stored_in_chunks_and_read_back() {
        let store = MemStore::new();
        // 600 replacements of 60 types: far over one item as JSON.
        let plans: Vec<Replacement> = (0..600).map(|i| replacement(i, 60)).collect();
        assert!(codec::to_json(&plans).len() > flotilla_ports::MAX_BODY_BYTES);
        let (at, items) = stored("c", "d1", &plans, 100);
        assert!(items
            .iter()
            .all(|i| i.body.len() <= flotilla_ports::MAX_BODY_BYTES));
        write(&store, items.clone()).await.expect("write");
        // Written twice (a retried run): the same items.
        write(&store, items).await.expect("rewrite");
        let r = record(&plans, Some(at.clone()));
        assert!(codec::to_json(&r).len() < flotilla_ports::MAX_BODY_BYTES);
        assert_eq!(
            read(&store, &r, 100).await.expect("read"),
            Some(plans.clone())
        );
        // Another run's plans of the same decision are another blob.
        let other: Vec<Replacement> = (0..600).map(|i| replacement(i, 59)).collect();
        let (at2, items2) = stored("c", "d1", &other, 100);
        assert_ne!(at2.blob, at.blob);
        write(&store, items2).await.expect("write other");
        assert_eq!(
            read(&store, &r, 100).await.expect("read"),
            Some(plans.clone())
        );
        // After their TTL the plans are gone, not corrupt.
        let later = 100 + PLANS_TTL_SECS + 1;
        assert_eq!(read(&store, &r, later).await.expect("read"), None);
    }

    #[tokio::test]
    async fn plans_that_name_other_replacements_or_fail_their_hash_are_corrupt_and_inline_ones_are_read(
    ) {
        let store = MemStore::new();
        let plans: Vec<Replacement> = (0..3).map(|i| replacement(i, 4)).collect();
        let (at, items) = stored("c", "d1", &plans, 0);
        write(&store, items).await.expect("write");
        let mut r = record(&plans, Some(at));
        r.replacement_names.reverse();
        assert!(matches!(
            read(&store, &r, 0).await,
            Err(ServiceError::Corrupt { .. })
        ));
        // A chunk whose content is not what the record's hash names.
        r.replacement_names.reverse();
        assert!(read(&store, &r, 0).await.is_ok());
        let at = r.replacement_plans.clone().expect("stored");
        // (The same replacements, another EC2NodeClass: only the hash
        // tells them apart.)
        let mut tampered = plans.clone();
        tampered[0].node_class = "other".into();
        let other = codec::gzip(&codec::to_json(&tampered));
        let key = keys::replacements("c", "d1", &at.blob, 0);
        write(&store, vec![Item::new(key, other)])
            .await
            .expect("overwrite");
        assert!(matches!(
            read(&store, &r, 0).await,
            Err(ServiceError::Corrupt { .. })
        ));
        // A record of the earlier form holds its plans inline.
        let mut old = record(&[], None);
        old.replacements = plans.clone();
        assert_eq!(read(&store, &old, 0).await.expect("read"), Some(plans));
        assert_eq!(old.replacement_names().count(), 3);
    }
}
