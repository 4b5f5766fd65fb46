//! The one loader of a cluster's state: the schedule stage reads the batch
//! its event names through [`load`], the disruption stage the cluster's
//! newest stored batch through [`latest`]. (Where the state comes from may
//! change, e.g. for clusters of any size; the callers do not.)
//!
//! "Newest" is the newest of: the `STATE` pointer (moved by [`note_state`]
//! for every heartbeat intake stores, [`store_heartbeat`]),
//! and the `SCHEDULER` pointer's pending, running and last completed
//! batches; ordered by the batch header's `acceptedAt`.

use flotilla_core::model::ClusterState;
use flotilla_ports::{Condition, Item, PortError, Store, Write};

use crate::records::BatchRequest;
use crate::records::{BatchHeader, SchedulerPointer, StatePointer};
use crate::{codec, keys, Result, ServiceError};

/// A cluster's state as of one stored batch.
#[derive(Debug, Clone)]
pub struct LoadedState {
    pub batch_id: String,
    /// Unix ms the batch was accepted.
    pub accepted_at: i64,
    pub state: ClusterState,
}

/// The cluster state of stored batch `batch`: its documents, or the state
/// kept by changes that it names (see [`crate::changes`]).
pub async fn load<S: Store>(store: &S, cluster: &str, batch: &str) -> Result<ClusterState> {
    if let Some(h) = header(store, cluster, batch).await? {
        if let Some(state) = &h.state {
            let cache = crate::changes::load_state(store, cluster, state).await?;
            store_context(store, cluster, &h, &state.cluster, &cache).await?;
            return flotilla_input::load_cache(cache)
                .map_err(|e| ServiceError::BadRequest(e.to_string()));
        }
    }
    let req = load_batch(store, cluster, batch).await?;
    cluster_state(&req)
}

/// The launch context (`CONTEXT#<batch>`) of a batch over the state kept
/// by changes, written by the first reader of the state (idempotent: the
/// same state gives the same context).
async fn store_context<S: Store>(
    store: &S,
    cluster: &str,
    header: &BatchHeader,
    meta: &crate::records::ClusterMeta,
    cache: &flotilla_core::state::ClusterCache,
) -> Result<()> {
    let key = keys::context(cluster, &header.batch_id);
    if store
        .get(&key)
        .await
        .map_err(ServiceError::port("read launch context"))?
        .is_some()
    {
        return Ok(());
    }
    let documents = cache
        .objects
        .iter()
        .filter(|(k, _)| {
            let kind = k.0.split('/').next().unwrap_or("");
            crate::intake::CONTEXT_KINDS.contains(&kind) || kind == "PodDisruptionBudget"
        })
        .map(|(_, v)| v.clone())
        .collect();
    let context = crate::records::LaunchContext {
        cluster: meta.clone(),
        documents,
    };
    let mut item = Item::new(key, codec::gzip(&codec::to_json(&context)));
    item.expires_at =
        Some((header.accepted_at / 1000).saturating_add(crate::Config::default().retention_secs));
    if item.body.len() > flotilla_ports::MAX_BODY_BYTES {
        return Err(ServiceError::BadRequest(
            "the NodePools, EC2NodeClasses, NodeOverlays and PodDisruptionBudgets alone exceed 350 KB compressed"
                .into(),
        ));
    }
    match store
        .write(Write::Put {
            item,
            condition: Condition::Absent {
                now_secs: header.accepted_at / 1000,
            },
        })
        .await
    {
        Ok(()) | Err(PortError::ConditionFailed(_)) => Ok(()),
        Err(e) => Err(ServiceError::port("store launch context")(e)),
    }
}

/// The header of a stored batch; `None` when it is gone (expired).
async fn header<S: Store>(store: &S, cluster: &str, batch: &str) -> Result<Option<BatchHeader>> {
    let key = keys::batch_header(cluster, batch);
    match store
        .get(&key)
        .await
        .map_err(ServiceError::port("read batch header"))?
    {
        Some(item) => codec::from_json(&key.to_string(), &item.body).map(Some),
        None => Ok(None),
    }
}

/// The cluster's `STATE` pointer, with its item (for version checks).
async fn state_pointer<S: Store>(store: &S, cluster: &str) -> Result<Option<(Item, StatePointer)>> {
    let key = keys::state_pointer(cluster);
    match store
        .get(&key)
        .await
        .map_err(ServiceError::port("read state pointer"))?
    {
        Some(item) => {
            let p: StatePointer = codec::from_json(&key.to_string(), &item.body)?;
            Ok(Some((item, p)))
        }
        None => Ok(None),
    }
}

/// The id and acceptance time of the cluster's newest stored batch.
pub async fn latest_batch<S: Store>(store: &S, cluster: &str) -> Result<Option<(String, i64)>> {
    let mut candidates: Vec<String> = Vec::new();
    if let Some((_, p)) = state_pointer(store, cluster).await? {
        candidates.push(p.batch_id);
    }
    let pkey = keys::scheduler(cluster);
    if let Some(item) = store
        .get(&pkey)
        .await
        .map_err(ServiceError::port("read scheduler pointer"))?
    {
        let p: SchedulerPointer = codec::from_json(&pkey.to_string(), &item.body)?;
        candidates.extend(p.pending.map(|b| b.batch_id));
        candidates.extend(p.running.map(|b| b.batch_id));
        candidates.extend(p.last_completed);
    }
    candidates.sort();
    candidates.dedup();
    let mut best: Option<(String, i64)> = None;
    for batch in candidates {
        let Some(h) = header(store, cluster, &batch).await? else {
            continue;
        };
        // Ties (same millisecond) go to the larger id: deterministic.
        if best
            .as_ref()
            .is_none_or(|(id, at)| (h.accepted_at, &batch) > (*at, id))
        {
            best = Some((batch, h.accepted_at));
        }
    }
    Ok(best)
}

/// The cluster's newest stored state; `None` before its first stored batch.
pub async fn latest<S: Store>(store: &S, cluster: &str) -> Result<Option<LoadedState>> {
    let Some((batch_id, accepted_at)) = latest_batch(store, cluster).await? else {
        return Ok(None);
    };
    let state = load(store, cluster, &batch_id).await?;
    Ok(Some(LoadedState {
        batch_id,
        accepted_at,
        state,
    }))
}

/// Move the cluster's `STATE` pointer to a newly stored batch (intake
/// calls it for every batch it stores, heartbeats included). Only ever
/// forward: an older batch (a late retry) leaves a newer pointer alone.
pub async fn note_state<S: Store>(
    store: &S,
    cluster: &str,
    batch: &StatePointer,
    now_secs: i64,
) -> Result<()> {
    let key = keys::state_pointer(cluster);
    let (batch_id, accepted_at) = (batch.batch_id.as_str(), batch.accepted_at);
    let next = batch.clone();
    for _ in 0..8 {
        let (condition, version) = match state_pointer(store, cluster).await? {
            Some((item, p)) => {
                if (p.accepted_at, p.batch_id.as_str()) >= (accepted_at, batch_id) {
                    return Ok(());
                }
                (Condition::Version(item.version), item.version + 1)
            }
            None => (Condition::Absent { now_secs }, 1),
        };
        let mut item = Item::new(key.clone(), codec::to_json(&next));
        item.version = version;
        item.expires_at = None;
        match store.write(Write::Put { item, condition }).await {
            Ok(()) => return Ok(()),
            Err(PortError::ConditionFailed(_)) => continue,
            Err(e) => return Err(ServiceError::port("write state pointer")(e)),
        }
    }
    Err(ServiceError::port("write state pointer")(
        PortError::Throttled("the state pointer kept changing".into()),
    ))
}

/// A posted request serialized once: its canonical JSON and content hash.
struct Canonical {
    json: Vec<u8>,
    hash: String,
}

/// Store a posted cluster state that has no pending pods (the agent's
/// heartbeat) as a batch, without scheduling it: its chunks, its launch
/// context and its header exactly as intake stores a batch, then the
/// `STATE` pointer ([`note_state`]). The disruption stage decides on it
/// (an emptied cluster only ever posts heartbeats). Intake calls this for
/// posts without pending pods, with the launch context it builds for any
/// batch; idempotent (the batch id is the post time and the content hash).
/// Returns the batch id.
async fn store_state<S: Store>(
    store: &S,
    config: &crate::Config,
    cluster: &str,
    context: &crate::records::LaunchContext,
    posted: Canonical,
    now_ms: i64,
    now_secs: i64,
) -> Result<String> {
    let Canonical {
        json: canonical,
        hash,
    } = posted;
    let batch_id = format!("{now_ms:012x}-{}", &hash[..8.min(hash.len())]);
    let expires = Some(now_secs + config.retention_secs);
    let mut ctx_item = Item::new(
        keys::context(cluster, &batch_id),
        codec::gzip(&codec::to_json(context)),
    );
    ctx_item.expires_at = expires;
    if ctx_item.body.len() > flotilla_ports::MAX_BODY_BYTES {
        return Err(ServiceError::BadRequest(
            "documents: the NodePools, EC2NodeClasses and NodeOverlays alone exceed 350 KB compressed"
                .into(),
        ));
    }
    let mut writes = codec::chunk_items(
        &canonical,
        |i| keys::batch_chunk(cluster, &batch_id, i),
        expires,
    );
    let header = BatchHeader {
        batch_id: batch_id.clone(),
        content_hash: hash,
        chunks: writes.len(),
        accepted_at: now_ms,
        pending_pods: 0,
        state: None,
    };
    let mut header_item = Item::new(
        keys::batch_header(cluster, &batch_id),
        codec::to_json(&header),
    );
    header_item.expires_at = expires;
    // The header last: a reader finds every chunk it names.
    writes.push(ctx_item);
    writes.push(header_item);
    crate::put_all(store, writes, "cluster state").await?;
    let pointer = StatePointer {
        batch_id: batch_id.clone(),
        accepted_at: now_ms,
        content_hash: Some(header.content_hash),
    };
    note_state(store, cluster, &pointer, now_secs).await?;
    Ok(batch_id)
}

/// How long an unchanged heartbeat is not stored again: well inside the
/// disruption stage's `MAX_STATE_AGE_MS` (10 minutes), so a quiet cluster's
/// state stays fresh while its table writes drop from one full state a
/// minute to one every few minutes.
pub const HEARTBEAT_REFRESH_MS: i64 = 4 * 60_000;

/// Intake's path for a post without pending pods (the agent's heartbeat,
/// the only post an emptied cluster makes): [`store_state`], unless the
/// newest stored state has the same content and is younger than
/// [`HEARTBEAT_REFRESH_MS`]. Returns the id of the stored (or still
/// current) batch.
pub async fn store_heartbeat<S: Store>(
    store: &S,
    config: &crate::Config,
    req: &crate::records::BatchRequest,
    context: &crate::records::LaunchContext,
    now_ms: i64,
    now_secs: i64,
) -> Result<String> {
    let json = codec::to_json(req);
    let hash = codec::content_hash(&json);
    if let Some((_, p)) = state_pointer(store, &req.cluster_id).await? {
        let fresh = now_ms.saturating_sub(p.accepted_at) < HEARTBEAT_REFRESH_MS;
        if fresh && p.content_hash.as_deref() == Some(hash.as_str()) {
            return Ok(p.batch_id);
        }
    }
    let posted = Canonical { json, hash };
    store_state(
        store,
        config,
        &req.cluster_id,
        context,
        posted,
        now_ms,
        now_secs,
    )
    .await
}

/// Load a stored batch.
pub async fn load_batch<S: Store>(store: &S, cluster: &str, batch: &str) -> Result<BatchRequest> {
    let hkey = keys::batch_header(cluster, batch);
    let header_item = crate::required_item(
        store,
        &hkey,
        "batch header",
        "batch header missing (expired?)",
    )
    .await?;
    let header: BatchHeader = codec::from_json(&hkey.to_string(), &header_item.body)?;
    let mut compressed = Vec::new();
    for i in 0..header.chunks {
        let key = keys::batch_chunk(cluster, batch, i);
        let item = crate::required_item(store, &key, "batch chunk", "batch chunk missing").await?;
        compressed.extend_from_slice(&item.body);
    }
    codec::from_verified_gzip(&hkey.to_string(), &compressed, &header.content_hash)
}

/// Parse a batch's documents into the scheduler's model.
pub fn cluster_state(req: &BatchRequest) -> Result<ClusterState> {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": req.documents});
    let bytes = codec::to_json(&list);
    flotilla_input::load(&[flotilla_input::Source {
        name: "documents",
        bytes: &bytes,
    }])
    .map_err(|e| ServiceError::BadRequest(e.to_string()))
}

#[cfg(test)]
mod heartbeat_tests {
    use super::*;
    use crate::records::BatchRequest;
    use crate::records::LaunchContext;
    use flotilla_sim::{block_on, MemStore};

    fn request(pods_on_node: usize) -> BatchRequest {
        serde_json::from_value(serde_json::json!({
            "clusterId": "demo",
            "cluster": {"name": "demo", "endpoint": "https://example", "caBundle": "Y2E=",
                "serviceCidr": "10.100.0.0/16", "kubernetesVersion": "1.33"},
            "documents": [{"kind": "Node", "metadata": {"name": "n", "annotations": {"pods": pods_on_node.to_string()}}}]
        }))
        .expect("request")
    }

    #[test]
    fn an_unchanged_heartbeat_is_stored_again_only_once_the_stored_one_ages() {
        block_on(async {
            let store = MemStore::new();
            let config = crate::Config::default();
            let context = LaunchContext {
                cluster: request(0).cluster,
                documents: vec![],
            };
            let t0 = 1_800_000_000_000;
            let hb = |req: BatchRequest, ms: i64| {
                let (store, config, context) = (&store, &config, &context);
                async move { store_heartbeat(store, config, &req, context, ms, ms / 1000).await }
            };
            let first = hb(request(1), t0).await.expect("stored");
            // Same content within the refresh interval: the stored batch.
            let again = hb(request(1), t0 + 60_000).await.expect("kept");
            assert_eq!(again, first);
            // Changed content: stored at once.
            let changed = hb(request(2), t0 + 120_000).await.expect("stored");
            assert_ne!(changed, first);
            // Unchanged, but the stored one is as old as the interval.
            let later = t0 + 120_000 + HEARTBEAT_REFRESH_MS;
            let refreshed = hb(request(2), later).await.expect("stored");
            assert_ne!(refreshed, changed);
            assert_eq!(
                latest_batch(&store, "demo").await.expect("latest"),
                Some((refreshed, later))
            );
        });
    }
}
