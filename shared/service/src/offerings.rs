//! The catalog a run plans against, the offering cache and the price cache.
//!
//! Order of precedence: an `InstanceTypes` document in the batch (the
//! agent's own `describe-instance-types`), then (with `live_offerings`) the
//! region's offering snapshot from EC2 (DescribeInstanceTypes,
//! DescribeInstanceTypeOfferings, DescribeSpotPriceHistory) cached in the
//! table for [`MAX_AGE_SECS`], then the embedded catalog of the region.
//!
//! A live catalog's on-demand prices come from the AWS Price List API
//! ([`PriceList`]), cached in the table (`REGION#<r> / PRICES`) for
//! [`PRICES_MAX_AGE_SECS`]; types it lacks, and every type while it fails
//! (a failure is cached for [`PRICES_RETRY_SECS`]), are priced from the
//! embedded table. The catalog's `source` says how many prices came from
//! where ([`OnDemandPrices::summary`]). A region the embedded catalog does
//! not cover works as long as EC2 and the Price List answer.
//!
//! The cache is a head item (`REGION#<r> / OFFERINGS`: generation, chunk
//! count, fetch time) and gzip'd chunks under `OFFERINGS#<gen>#<n>`, each
//! within a DynamoDB item. A refresh writes the chunks of a new generation
//! first, then moves the head with a version check: readers never see half
//! a snapshot, and concurrent refreshes simply both succeed or one loses
//! the head race (its chunks expire).

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::embedded::{embedded_price_source, on_demand_prices};
use flotilla_core::catalog::live::{OfferingSnapshot, DYNAMODB_CHUNK_BYTES};
use flotilla_core::catalog::pricelist::OnDemandPrices;
use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::model::ClusterState;
use flotilla_ports::{Clock, Condition, Ec2, Item, PortError, PriceList, Store, Write};
use serde::{Deserialize, Serialize};

use crate::{codec, keys, Config, Result, ServiceError};

/// How long a snapshot is used before EC2 is asked again.
pub const MAX_AGE_SECS: i64 = 15 * 60;
/// Chunks outlive their generation by this much (readers of the old head).
pub const CHUNK_TTL_SECS: i64 = MAX_AGE_SECS + 3600;
/// How long Price List prices are used before the API is asked again
/// (AWS changes on-demand prices rarely).
pub const PRICES_MAX_AGE_SECS: i64 = 24 * 3600;
/// After a failed (or empty) Price List answer, how long the embedded table
/// is used before the API is asked again.
pub const PRICES_RETRY_SECS: i64 = 15 * 60;
/// The price cache item expires this long after it was written.
pub const PRICES_TTL_SECS: i64 = 2 * PRICES_MAX_AGE_SECS;

/// The cached answer of the Price List API for a region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PriceCache {
    fetched_at: i64,
    /// Type → USD/hour; empty when the call failed.
    #[serde(default)]
    prices: BTreeMap<String, f64>,
    /// Why the call gave no prices (then the embedded table is used until
    /// `fetched_at + PRICES_RETRY_SECS`).
    #[serde(default)]
    error: Option<String>,
}

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
    let prices = on_demand(store, ec2, clock, &config.region).await?;
    let mut live = snapshot.catalog(&prices.usd());
    if !live.skipped.is_empty() {
        tracing::debug!(
            skipped = live.skipped.len(),
            "instance types without an on-demand price left out"
        );
    }
    live.catalog.source = format!("{}; on-demand: {}", live.catalog.source, prices.summary());
    Ok(live.catalog)
}

/// The on-demand prices of `region`: the Price List API's (cached), with
/// the embedded table for the types it lacks, or for all while it fails.
/// Without an embedded table for the region a Price List failure is the
/// error (a retryable one fails the invocation, so the platform retries).
pub async fn on_demand<S: Store, P: PriceList, C: Clock>(
    store: &S,
    prices: &P,
    clock: &C,
    region: &str,
) -> Result<OnDemandPrices> {
    let now = clock.now_secs();
    let embedded = on_demand_prices(region)
        .ok()
        .zip(embedded_price_source(region).ok());
    let cached = read_price_cache(store, region).await;
    let cache = match cached {
        Some(c) if c.error.is_none() && now.saturating_sub(c.fetched_at) <= PRICES_MAX_AGE_SECS => {
            c
        }
        Some(c)
            if c.error.is_some()
                && embedded.is_some()
                && now.saturating_sub(c.fetched_at) <= PRICES_RETRY_SECS =>
        {
            c
        }
        _ => fetch_prices(store, prices, region, now, embedded.is_some()).await?,
    };
    let live = cache
        .error
        .is_none()
        .then_some((&cache.prices, cache.fetched_at));
    let table = embedded.as_ref().map(|(t, s)| (*t, s.description.as_str()));
    let merged = OnDemandPrices::merge(region, live, table);
    if merged.prices.is_empty() {
        return Err(ServiceError::BadRequest(format!(
            "catalog: no on-demand prices for {region}: the Price List API gave none ({}) and \
             the embedded catalog does not cover the region",
            cache.error.as_deref().unwrap_or("empty answer")
        )));
    }
    Ok(merged)
}

async fn read_price_cache<S: Store>(store: &S, region: &str) -> Option<PriceCache> {
    let key = keys::prices(region);
    match store.get(&key).await {
        Ok(Some(item)) => match codec::from_json(&key.to_string(), &item.body) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "price cache unreadable; asking the Price List API");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "price cache unavailable; asking the Price List API");
            None
        }
    }
}

/// Asks the Price List API and caches the answer, or the failure when the
/// embedded table can stand in (`fallback`); without one the failure is
/// returned.
async fn fetch_prices<S: Store, P: PriceList>(
    store: &S,
    prices: &P,
    region: &str,
    now: i64,
    fallback: bool,
) -> Result<PriceCache> {
    let cache = match prices.on_demand_prices(region).await {
        Ok(p) if !p.is_empty() => PriceCache {
            fetched_at: now,
            prices: p,
            error: None,
        },
        Ok(_) => PriceCache {
            fetched_at: now,
            prices: BTreeMap::new(),
            error: Some(format!("no products for regionCode {region}")),
        },
        Err(e) if !fallback => return Err(ServiceError::port("Pricing GetProducts")(e)),
        Err(e) => PriceCache {
            fetched_at: now,
            prices: BTreeMap::new(),
            error: Some(e.to_string()),
        },
    };
    match &cache.error {
        None => tracing::info!(region, prices = cache.prices.len(), "price cache refreshed"),
        Some(e) => {
            tracing::warn!(region, error = %e, "Price List API gave no prices; using the embedded table")
        }
    }
    let mut item = Item::new(keys::prices(region), codec::to_json(&cache));
    item.expires_at = Some(now.saturating_add(PRICES_TTL_SECS));
    let put = Write::Put {
        item,
        condition: Condition::Always,
    };
    if let Err(e) = store.write(put).await {
        tracing::warn!(error = %e, "price cache not written");
    }
    Ok(cache)
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
        let item =
            crate::required_item(store, &key, "offering cache chunk", "chunk missing").await?;
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

/// Live offerings the ICE cache marks unavailable.
pub async fn unavailable_offerings<S: Store>(
    store: &S,
    region: &str,
    now_secs: i64,
) -> Result<BTreeSet<(String, String, CapacityType)>> {
    let items = store
        .query(&keys::region_pk(region), keys::ICE_PREFIX)
        .await
        .map_err(ServiceError::port("query ICE cache"))?;
    let mut out = BTreeSet::new();
    for item in items.iter().filter(|i| i.is_live(now_secs)) {
        let rest = &item.key.sk[keys::ICE_PREFIX.len()..];
        let mut parts = rest.splitn(3, '#');
        if let (Some(t), Some(z), Some(ct)) = (parts.next(), parts.next(), parts.next()) {
            if let Some(ct) = CapacityType::parse(ct) {
                out.insert((t.to_string(), z.to_string(), ct));
            }
        }
    }
    Ok(out)
}
