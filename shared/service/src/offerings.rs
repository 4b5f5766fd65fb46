//! The catalog a run plans against, and the offering cache.
//!
//! Order of precedence: an `InstanceTypes` document in the batch (the
//! agent's own `describe-instance-types`), then (with `live_offerings`) the
//! region's offering snapshot from EC2 (DescribeInstanceTypes,
//! DescribeInstanceTypeOfferings, DescribeSpotPriceHistory) cached in the
//! table for [`MAX_AGE_SECS`], then the embedded catalog of the region.
//!
//! The cache is a head item (`REGION#<r> / OFFERINGS`: generation, chunk
//! count, fetch time) and gzip'd chunks under `OFFERINGS#<gen>#<n>`, each
//! within a DynamoDB item. A refresh writes the chunks of a new generation
//! first, then moves the head with a version check: readers never see half
//! a snapshot, and concurrent refreshes simply both succeed or one loses
//! the head race (its chunks expire).

use flotilla_core::catalog::embedded::on_demand_prices;
use flotilla_core::catalog::live::{OfferingSnapshot, DYNAMODB_CHUNK_BYTES};
use flotilla_core::catalog::Catalog;
use flotilla_core::model::ClusterState;
use flotilla_ports::{Clock, Condition, Ec2, Item, PortError, Store, Write};
use serde::{Deserialize, Serialize};

use crate::{codec, keys, Config, Result, ServiceError};

/// How long a snapshot is used before EC2 is asked again.
pub const MAX_AGE_SECS: i64 = 15 * 60;
/// Chunks outlive their generation by this much (readers of the old head).
pub const CHUNK_TTL_SECS: i64 = MAX_AGE_SECS + 3600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    generation: String,
    chunks: usize,
    fetched_at: i64,
}

fn catalog_error(e: impl std::fmt::Display) -> ServiceError {
    ServiceError::BadRequest(format!("catalog: {e}"))
}

pub async fn catalog<S: Store, E: Ec2, C: Clock>(
    store: &S,
    ec2: &E,
    clock: &C,
    config: &Config,
    state: &ClusterState,
) -> Result<Catalog> {
    if let Some(infos) = &state.instance_types {
        return Catalog::from_infos(&config.region, infos.clone()).map_err(catalog_error);
    }
    if !config.live_offerings {
        return Catalog::embedded(&config.region).map_err(catalog_error);
    }
    let snapshot = snapshot(store, ec2, clock, &config.region).await?;
    let on_demand = on_demand_prices(&config.region).map_err(catalog_error)?;
    let live = snapshot.catalog(on_demand);
    if !live.skipped.is_empty() {
        tracing::debug!(
            skipped = live.skipped.len(),
            "instance types without an on-demand price left out"
        );
    }
    Ok(live.catalog)
}

/// The cached snapshot if fresh, else a new one from EC2 (stored).
pub async fn snapshot<S: Store, E: Ec2, C: Clock>(
    store: &S,
    ec2: &E,
    clock: &C,
    region: &str,
) -> Result<OfferingSnapshot> {
    let now = clock.now_secs();
    let head_key = keys::offerings_head(region);
    let head_item = store
        .get(&head_key)
        .await
        .map_err(ServiceError::port("read offering cache head"))?;
    if let Some(item) = &head_item {
        let head: Head = codec::from_json(&head_key.to_string(), &item.body)?;
        if now - head.fetched_at <= MAX_AGE_SECS {
            match read_chunks(store, region, &head).await {
                Ok(s) => return Ok(s),
                // A chunk expired or is damaged: refresh below.
                Err(e) => tracing::warn!(error = %e, "offering cache unreadable; refreshing"),
            }
        }
    }
    let fresh = fetch(ec2, region, now).await?;
    let generation = format!("{now:x}");
    let chunks = fresh.to_chunks(DYNAMODB_CHUNK_BYTES);
    for (i, c) in chunks.iter().enumerate() {
        let mut item = Item::new(keys::offerings_chunk(region, &generation, i), c.clone());
        item.expires_at = Some(now + CHUNK_TTL_SECS);
        store
            .write(Write::Put {
                item,
                condition: Condition::Always,
            })
            .await
            .map_err(ServiceError::port("write offering cache chunk"))?;
    }
    let head = Head {
        generation,
        chunks: chunks.len(),
        fetched_at: now,
    };
    let (condition, version) = match &head_item {
        Some(i) => (Condition::Version(i.version), i.version + 1),
        None => (Condition::Absent { now_secs: now }, 1),
    };
    let mut item = Item::new(head_key, codec::to_json(&head));
    item.version = version;
    match store.write(Write::Put { item, condition }).await {
        Ok(()) | Err(PortError::ConditionFailed(_)) => {}
        Err(e) => return Err(ServiceError::port("write offering cache head")(e)),
    }
    tracing::info!(
        region,
        types = fresh.types.len(),
        offerings = fresh.offerings.len(),
        spot_prices = fresh.spot_prices.len(),
        chunks = chunks.len(),
        "offering cache refreshed"
    );
    Ok(fresh)
}

async fn read_chunks<S: Store>(store: &S, region: &str, head: &Head) -> Result<OfferingSnapshot> {
    let mut parts = Vec::with_capacity(head.chunks);
    for i in 0..head.chunks {
        let key = keys::offerings_chunk(region, &head.generation, i);
        let item = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read offering cache chunk"))?
            .ok_or_else(|| ServiceError::Corrupt {
                key: key.to_string(),
                reason: "chunk missing".into(),
            })?;
        parts.push(item.body);
    }
    OfferingSnapshot::from_chunks(&parts).map_err(|e| ServiceError::Corrupt {
        key: keys::offerings_head(region).to_string(),
        reason: e.to_string(),
    })
}

async fn fetch<E: Ec2>(ec2: &E, region: &str, now: i64) -> Result<OfferingSnapshot> {
    let types = ec2
        .describe_instance_types()
        .await
        .map_err(ServiceError::port("DescribeInstanceTypes"))?;
    let offerings = ec2
        .describe_instance_type_offerings()
        .await
        .map_err(ServiceError::port("DescribeInstanceTypeOfferings"))?;
    let spot_prices = ec2
        .describe_spot_prices()
        .await
        .map_err(ServiceError::port("DescribeSpotPriceHistory"))?;
    Ok(OfferingSnapshot {
        region: region.to_string(),
        fetched_at: now,
        types,
        offerings,
        spot_prices,
    })
}
