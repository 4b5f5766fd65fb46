//! The cluster's state kept by changes (`POST /changes`).
//!
//! The agent sends what changed since the post intake last acknowledged
//! ([`flotilla_core::state::Changes`], pods as templates plus rows), each
//! post numbered in the agent's stream, and from time to time (and
//! whenever intake answers 409 "resync required") a full resync in parts.
//! Intake keeps, per cluster:
//!
//! - the head (`STATE#HEAD`, [`StateHead`]): the stream and the last post
//!   applied, the snapshot the state starts from and the deltas applied
//!   since, the resync parts received so far; every move is a
//!   version-checked write, so concurrent or repeated posts apply once;
//! - the blobs the head names (`STATE#SNAPSHOT|DELTA|PART#<id>#<n>`): gzip
//!   JSON in chunks, written before the head names them, never changed
//!   (ids carry the content hash), expiring after the retention period.
//!
//! Every applied post with pending pods becomes a batch over that state
//! ([`crate::records::BatchHeader::state`]) and puts `BatchAccepted`; every
//! applied post moves the `STATE` pointer, so the disruption stage loads
//! the newest state through the same loader ([`crate::cluster_state`]).
//! Every [`MAX_DELTAS`] deltas (or [`MAX_DELTA_BYTES`], or once the
//! snapshot is [`SNAPSHOT_REFRESH_MS`] old) intake folds them into a new
//! snapshot. Why DynamoDB and not S3: see `docs/pipeline.md`.

use std::collections::BTreeMap;

use flotilla_core::state::compact::template_namespace;
use flotilla_core::state::{
    admit, Admission, Changes, ClusterCache, Head, Sequence, StateError, TemplateIndex,
};
use flotilla_ports::{Bus, Clock, Condition, Item, PortError, Store, Write};
use serde::{Deserialize, Serialize};

use crate::codec::{self, content_hash};
use crate::intake::{Access, Caller};
use crate::records::{BatchHeader, ClusterMeta, StatePointer, StateRef, StoredBlob};
use crate::{keys, Config, Result, ServiceError};

/// Deltas kept over a snapshot before they are folded into a new one (the
/// default of [`Config::state_max_deltas`]).
pub const MAX_DELTAS: usize = 32;
/// Uncompressed bytes of deltas kept over a snapshot before folding.
pub const MAX_DELTA_BYTES: usize = 16 * 1024 * 1024;
/// A snapshot older than this is rewritten at the next post (its blobs
/// expire after the retention period).
pub const SNAPSHOT_REFRESH_MS: i64 = 6 * 3_600_000;

/// The body of `POST /changes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangeRequest {
    pub cluster_id: String,
    pub cluster: ClusterMeta,
    pub sequence: Sequence,
    /// Pending pods in the agent's cache once this post is applied: a post
    /// with any is scheduled.
    #[serde(default)]
    pub pending_pods: usize,
    pub changes: Changes,
}

/// The answer to a change post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangesAccepted {
    pub cluster_id: String,
    pub stream: String,
    pub seq: u64,
    /// `false` for a post already applied (a retry): nothing changed.
    pub applied: bool,
    /// Of a resync: the parts intake still waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_parts: Vec<u32>,
    /// The batch scheduled over the new state, if it has pending pods.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub batch_id: String,
}

/// `STATE#HEAD`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateHead {
    #[serde(default)]
    pub head: Head,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<StoredBlob>,
    /// When the snapshot was written (Unix ms).
    #[serde(default)]
    pub snapshot_at: i64,
    /// When the last post was applied (Unix ms): the acceptance time of
    /// its batch, strictly after the one before (two posts applied in one
    /// millisecond keep their order for the `STATE` pointer).
    #[serde(default)]
    pub applied_at: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deltas: Vec<StoredBlob>,
    /// The template index of the state (id → namespace: every template
    /// the snapshot and deltas hold), what a post's rows naming templates
    /// it does not carry are checked against. `None`: not known (a head
    /// written before intake kept one); such posts are then answered 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub templates: Option<StoredBlob>,
    /// The parts of the resync being received (`head.receiving`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<u32, StoredBlob>,
}

impl StateHead {
    fn state_ref(&self, cluster: &ClusterMeta) -> StateRef {
        StateRef {
            cluster: cluster.clone(),
            snapshot: self.snapshot.clone(),
            deltas: self.deltas.clone(),
        }
    }
}

/// Parse and validate a change post. Errors name the field (and object).
pub fn parse_changes(body: &[u8], config: &Config) -> Result<ChangeRequest> {
    let req: ChangeRequest = crate::intake::parse_body(body, config, "changes")?;
    crate::intake::validate_ids(&req.cluster_id, &req.cluster)?;
    if req.sequence.stream.is_empty() || req.sequence.stream.len() > 64 {
        return Err(ServiceError::BadRequest(
            "sequence.stream: must be 1-64 characters".into(),
        ));
    }
    // What can be checked alone is; rows may name templates intake holds
    // (checked against the state's template index when the post is
    // applied), except in a resync part, which carries all its templates.
    let needed = req
        .changes
        .validate_alone()
        .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    if let (Some(id), Some(_)) = (needed.first(), req.sequence.resync) {
        return Err(ServiceError::BadRequest(format!(
            "changes.templates: a resync part carries the templates its rows use ({id} is missing)"
        )));
    }
    flotilla_input::load_cache(alone(&req.changes, &needed))
        .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    Ok(req)
}

/// The post as a state of its own, for the loader's checks: a row whose
/// template the post does not carry gets a bare pod of its namespace as
/// template (its own fields are what is checked).
fn alone(
    changes: &Changes,
    needed: &std::collections::BTreeSet<flotilla_core::state::TemplateId>,
) -> ClusterCache {
    let mut cache = ClusterCache {
        templates: changes.templates.clone(),
        ..ClusterCache::default()
    };
    for doc in &changes.objects {
        if let Some(key) = flotilla_core::state::ObjectKey::of(doc) {
            cache.objects.insert(key, doc.clone());
        }
    }
    for row in &changes.pods {
        if needed.contains(&row.template) {
            cache
                .templates
                .entry(row.template.clone())
                .or_insert_with(|| {
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"namespace": row.namespace}, "spec": {"containers": []}})
                });
        }
        cache.pods.insert(row.key(), row.clone());
    }
    cache
}

/// Accept a change post: check its place in the stream, store it, move
/// the head, and schedule the new state when it has pending pods.
pub async fn accept_changes<S: Store, B: Bus, C: Clock>(
    store: &S,
    bus: &B,
    clock: &C,
    config: &Config,
    access: &Access,
    caller: &Caller,
    body: &[u8],
) -> Result<ChangesAccepted> {
    let req = parse_changes(body, config)?;
    access.check(caller, &req.cluster_id)?;
    crate::intake::check_cluster_name(config, &req.cluster_id, &req.cluster)?;
    let cluster = req.cluster_id.as_str();
    let json = codec::to_json(&req.changes);
    let hash = content_hash(&json);
    let expires = clock.now_secs().saturating_add(config.retention_secs);
    for _ in 0..8 {
        let (item, head) = read_head(store, cluster).await?;
        let admission = admit(&head.head, &req.sequence, &hash);
        let mut next = head.clone();
        next.head = head.head.after(&req.sequence, &admission, &hash);
        next.cluster = Some(req.cluster.clone());
        let mut full: Option<ClusterCache> = None;
        match &admission {
            Admission::Duplicate => return Ok(answer(&req, false, &head)),
            Admission::ResyncRequired { reason } => {
                return Err(ServiceError::ResyncRequired(reason.clone()))
            }
            Admission::Apply => {
                next.templates =
                    check_templates(store, cluster, &head, &req.changes, expires).await?;
                if !req.changes.is_empty() {
                    let id = blob_id(&req.sequence, &hash, None);
                    let blob = put_blob(store, cluster, "DELTA", &id, &json, expires).await?;
                    next.deltas.push(blob);
                }
            }
            Admission::Part { complete } => {
                let part = req.sequence.resync.map_or(0, |r| r.part);
                let same = head.head.receiving.as_ref().is_some_and(|rx| {
                    rx.stream == req.sequence.stream && rx.seq == req.sequence.seq
                });
                if !same {
                    next.parts.clear();
                }
                let id = blob_id(&req.sequence, &hash, Some(part));
                let blob = put_blob(store, cluster, "PART", &id, &json, expires).await?;
                next.parts.insert(part, blob);
                if *complete {
                    let cache = assemble_parts(store, cluster, &next.parts).await?;
                    next.snapshot = Some(put_snapshot(store, cluster, &cache, expires).await?);
                    next.templates =
                        Some(put_index(store, cluster, &cache.template_index(), expires).await?);
                    next.snapshot_at = clock.now_millis();
                    next.deltas.clear();
                    next.parts.clear();
                    full = Some(cache);
                }
            }
        }
        let applied = matches!(
            admission,
            Admission::Apply | Admission::Part { complete: true }
        );
        if applied {
            next.applied_at = clock.now_millis().max(head.applied_at.saturating_add(1));
        }
        if !write_head(store, cluster, item.as_ref(), &next, clock).await? {
            continue;
        }
        let mut out = answer(&req, true, &next);
        if applied {
            crate::intake::record_changed_nodes(store, clock, cluster, &req.changes, full.as_ref())
                .await?;
            out.batch_id = note_batch(store, bus, clock, config, &req, &next).await?;
            if full.is_none() {
                fold_deltas(store, clock, config, cluster, &next, expires).await?;
            }
        }
        return Ok(out);
    }
    Err(ServiceError::port(format!("state head of {cluster}"))(
        PortError::Throttled("the state head kept changing".into()),
    ))
}

fn answer(req: &ChangeRequest, applied: bool, head: &StateHead) -> ChangesAccepted {
    let missing_parts = head
        .head
        .receiving
        .as_ref()
        .filter(|rx| rx.stream == req.sequence.stream && rx.seq == req.sequence.seq)
        .map(|rx| rx.missing())
        .unwrap_or_default();
    ChangesAccepted {
        cluster_id: req.cluster_id.clone(),
        stream: req.sequence.stream.clone(),
        seq: req.sequence.seq,
        applied,
        missing_parts,
        batch_id: String::new(),
    }
}

/// `<stream>#<seq, 20 digits>[#<part>]#<hash>`.
fn blob_id(seq: &Sequence, hash: &str, part: Option<u32>) -> String {
    match part {
        Some(p) => format!("{}#{:020}#{p:05}#{hash}", seq.stream, seq.seq),
        None => format!("{}#{:020}#{hash}", seq.stream, seq.seq),
    }
}

/// The cluster's head with its item (`None` before the first post).
pub async fn read_head<S: Store>(store: &S, cluster: &str) -> Result<(Option<Item>, StateHead)> {
    let key = keys::state_head(cluster);
    match store
        .get(&key)
        .await
        .map_err(ServiceError::port("read state head"))?
    {
        Some(item) => {
            let head = codec::from_json(&key.to_string(), &item.body)?;
            Ok((Some(item), head))
        }
        None => Ok((None, StateHead::default())),
    }
}

/// Write the head over `current` (version-checked); `false` if another
/// post moved it first.
async fn write_head<S: Store, C: Clock>(
    store: &S,
    cluster: &str,
    current: Option<&Item>,
    next: &StateHead,
    clock: &C,
) -> Result<bool> {
    let mut item = Item::new(keys::state_head(cluster), codec::to_json(next));
    item.expires_at = None;
    let condition = match current {
        Some(c) => {
            item.version = c.version + 1;
            Condition::Version(c.version)
        }
        None => Condition::Absent {
            now_secs: clock.now_secs(),
        },
    };
    if item.body.len() > flotilla_ports::MAX_BODY_BYTES {
        return Err(ServiceError::BadRequest(format!(
            "the state head of {cluster} would exceed one item (too many resync parts)"
        )));
    }
    match store.write(Write::Put { item, condition }).await {
        Ok(()) => Ok(true),
        Err(PortError::ConditionFailed(_)) => Ok(false),
        Err(e) => Err(ServiceError::port("write state head")(e)),
    }
}

/// Store `json` gzip-compressed in chunks under `STATE#<kind>#<id>`.
async fn put_blob<S: Store>(
    store: &S,
    cluster: &str,
    kind: &str,
    id: &str,
    json: &[u8],
    expires: i64,
) -> Result<StoredBlob> {
    let items = codec::chunk_items(
        json,
        |i| keys::state_blob(cluster, kind, id, i),
        Some(expires),
    );
    let chunks = items.len();
    crate::put_all(store, items, "state blob").await?;
    Ok(StoredBlob {
        id: format!("{kind}#{id}"),
        chunks,
        bytes: json.len(),
        hash: content_hash(json),
    })
}

/// Read a blob back (hash-checked).
async fn get_blob<S: Store, T: serde::de::DeserializeOwned>(
    store: &S,
    cluster: &str,
    blob: &StoredBlob,
) -> Result<T> {
    let (kind, id) = blob.id.split_once('#').unwrap_or(("", blob.id.as_str()));
    let mut compressed = Vec::new();
    for i in 0..blob.chunks {
        let key = keys::state_blob(cluster, kind, id, i);
        let item =
            crate::required_item(store, &key, "state blob", "state chunk missing (expired?)")
                .await?;
        compressed.extend_from_slice(&item.body);
    }
    codec::from_verified_gzip(&format!("STATE#{}", blob.id), &compressed, &blob.hash)
}

/// Check that intake holds every template the post's rows name without
/// carrying it (a row naming one it does not hold: 409, the agent
/// resyncs); the state's template index after the post.
async fn check_templates<S: Store>(
    store: &S,
    cluster: &str,
    head: &StateHead,
    changes: &Changes,
    expires: i64,
) -> Result<Option<StoredBlob>> {
    let needed = changes
        .validate_alone()
        .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    if changes.templates.is_empty() && needed.is_empty() {
        return Ok(head.templates.clone());
    }
    let Some(blob) = &head.templates else {
        return match needed.first() {
            None => Ok(None),
            Some(id) => Err(ServiceError::ResyncRequired(format!(
                "template {id} is not in this post, and intake keeps no template index for this state"
            ))),
        };
    };
    let mut index: TemplateIndex = get_blob(store, cluster, blob).await?;
    changes
        .validate(|id| index.get(id).map(String::as_str))
        .map_err(|e| match e {
            StateError::MissingTemplate { .. } => ServiceError::ResyncRequired(e.to_string()),
            e => ServiceError::BadRequest(e.to_string()),
        })?;
    let before = index.len();
    for (id, t) in &changes.templates {
        index
            .entry(id.clone())
            .or_insert_with(|| template_namespace(t).to_string());
    }
    if index.len() == before {
        return Ok(Some(blob.clone()));
    }
    put_index(store, cluster, &index, expires).await.map(Some)
}

/// Store a template index (`STATE#TEMPLATES#<hash>`).
async fn put_index<S: Store>(
    store: &S,
    cluster: &str,
    index: &TemplateIndex,
    expires: i64,
) -> Result<StoredBlob> {
    let json = codec::to_json(index);
    let id = content_hash(&json);
    put_blob(store, cluster, "TEMPLATES", &id, &json, expires).await
}

async fn put_snapshot<S: Store>(
    store: &S,
    cluster: &str,
    cache: &ClusterCache,
    expires: i64,
) -> Result<StoredBlob> {
    let json = codec::to_json(cache);
    let id = content_hash(&json);
    put_blob(store, cluster, "SNAPSHOT", &id, &json, expires).await
}

/// The state a resync's parts make.
async fn assemble_parts<S: Store>(
    store: &S,
    cluster: &str,
    parts: &BTreeMap<u32, StoredBlob>,
) -> Result<ClusterCache> {
    let mut cache = ClusterCache::default();
    for blob in parts.values() {
        let changes: Changes = get_blob(store, cluster, blob).await?;
        cache.apply(&changes).map_err(|e| ServiceError::Corrupt {
            key: blob.id.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(cache)
}

/// The state a [`StateRef`] names: its snapshot with its deltas applied.
pub async fn load_state<S: Store>(
    store: &S,
    cluster: &str,
    state: &StateRef,
) -> Result<ClusterCache> {
    let mut cache: ClusterCache = match &state.snapshot {
        Some(s) => get_blob(store, cluster, s).await?,
        None => ClusterCache::default(),
    };
    for blob in &state.deltas {
        let changes: Changes = get_blob(store, cluster, blob).await?;
        cache.apply(&changes).map_err(|e| ServiceError::Corrupt {
            key: blob.id.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(cache)
}

/// Fold the deltas into a new snapshot when there are many or the
/// snapshot ages. Best effort: a head moved meanwhile keeps its deltas
/// (the next post folds them).
async fn fold_deltas<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    config: &Config,
    cluster: &str,
    head: &StateHead,
    expires: i64,
) -> Result<()> {
    let bytes: usize = head.deltas.iter().map(|d| d.bytes).sum();
    let stale = clock.now_millis().saturating_sub(head.snapshot_at) > SNAPSHOT_REFRESH_MS;
    if head.deltas.len() < config.state_max_deltas && bytes < MAX_DELTA_BYTES && !stale {
        return Ok(());
    }
    let Some(cluster_meta) = &head.cluster else {
        return Ok(());
    };
    let mut cache = load_state(store, cluster, &head.state_ref(cluster_meta)).await?;
    // Templates no row uses go: the agent sends a template again unless a
    // pod intake holds (and the post leaves alone) uses it.
    cache.drop_unused_templates();
    let snapshot = put_snapshot(store, cluster, &cache, expires).await?;
    let index = put_index(store, cluster, &cache.template_index(), expires).await?;
    let (item, current) = read_head(store, cluster).await?;
    // Another post moved the head meanwhile: its templates are not in this
    // index; the next post folds.
    if current.snapshot != head.snapshot
        || current.deltas != head.deltas
        || current.templates != head.templates
    {
        return Ok(());
    }
    let mut next = current.clone();
    next.snapshot = Some(snapshot);
    next.templates = Some(index);
    next.snapshot_at = clock.now_millis();
    next.deltas.clear();
    write_head(store, cluster, item.as_ref(), &next, clock).await?;
    Ok(())
}

/// Store a batch header over the new state, move the `STATE` pointer to
/// it, and, when the agent has pending pods, make it the cluster's pending
/// batch and put `BatchAccepted`. Returns the batch id when scheduled.
async fn note_batch<S: Store, B: Bus, C: Clock>(
    store: &S,
    bus: &B,
    clock: &C,
    config: &Config,
    req: &ChangeRequest,
    head: &StateHead,
) -> Result<String> {
    let now = head.applied_at;
    let now_secs = clock.now_secs();
    let cluster = req.cluster_id.as_str();
    let state = head.state_ref(&req.cluster);
    let hash = content_hash(&codec::to_json(&state));
    let batch_id = format!("{now:012x}-{}", &hash[..8]);
    let header = BatchHeader {
        batch_id: batch_id.clone(),
        content_hash: hash.clone(),
        chunks: 0,
        accepted_at: now,
        pending_pods: req.pending_pods,
        state: Some(state),
    };
    let mut item = Item::new(
        keys::batch_header(cluster, &batch_id),
        codec::to_json(&header),
    );
    item.expires_at = Some(now_secs.saturating_add(config.retention_secs));
    store
        .write(Write::Put {
            item,
            condition: Condition::Always,
        })
        .await
        .map_err(ServiceError::port("store batch header"))?;
    let pointer = StatePointer {
        batch_id: batch_id.clone(),
        accepted_at: now,
        content_hash: Some(hash.clone()),
    };
    crate::cluster_state::note_state(store, cluster, &pointer, now_secs).await?;
    crate::intake::register(store, cluster, &req.cluster, now, now_secs).await?;
    if req.pending_pods == 0 {
        return Ok(String::new());
    }
    crate::batches::make_pending(store, cluster, &batch_id, &hash, now, now_secs).await?;
    crate::batches::put_accepted(bus, cluster, &batch_id).await?;
    tracing::info!(cluster = %cluster, batch = %batch_id, seq = req.sequence.seq, pods = req.pending_pods, "changes scheduled");
    Ok(batch_id)
}

#[cfg(test)]
mod tests;
