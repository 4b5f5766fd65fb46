//! Intake: the cluster agent's entry point.
//!
//! `POST` a batch (the cluster's pending pods and the documents they need,
//! the same ones `flotilla plan` reads) → validated, stored in chunks, the
//! cluster's pending pointer moved to it, `BatchAccepted` put. `GET` the
//! cluster's NodeClaims, actions and last result.

use flotilla_ports::{Bus, Clock, Condition, Item, PortError, Store, Write};
use serde::{Deserialize, Serialize};

pub(crate) use crate::batches::put_accepted;
use crate::codec::{self, content_hash};
use crate::records::{
    BatchHeader, BatchResult, ClusterMeta, LaunchContext, NodeClaimRecord, SchedulerPointer,
};
use crate::{keys, Config, Result, ServiceError};

pub use crate::records::BatchRequest;
pub use crate::reports::{nodes_report, AckOutcome, AckRecord, NodesReport, ACK_FIELD};

/// Who is calling (from the Function URL's IAM request context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The caller's IAM principal ARN; `None` in local use.
    pub principal: Option<String>,
}

/// Which principals may act for which cluster. Deny by default: a cluster
/// absent from the map is refused (empty map: every cluster), so a stack
/// deployed without `ClusterPrincipals` lets nobody act until the operator
/// binds each cluster id to its agent's principal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Access {
    /// cluster id → principal ARNs (a trailing `*` matches a prefix, e.g.
    /// an assumed-role session).
    pub clusters: std::collections::BTreeMap<String, Vec<String>>,
}

impl Access {
    /// Also allow `principal` (an ARN, or a prefix ending in `*`) to act for
    /// `cluster`.
    #[must_use]
    pub fn allow(mut self, cluster: &str, principal: &str) -> Access {
        self.clusters
            .entry(cluster.to_string())
            .or_default()
            .push(principal.to_string());
        self
    }

    pub fn check(&self, caller: &Caller, cluster: &str) -> Result<()> {
        let Some(allowed) = self.clusters.get(cluster) else {
            return Err(ServiceError::Forbidden(format!(
                "no IAM principal may act for cluster {cluster:?}: map it to the agent's principal \
                 in the stack's ClusterPrincipals parameter (FLOTILLA_CLUSTER_PRINCIPALS), e.g. \
                 {{\"{cluster}\": [\"arn:aws:iam::<account>:role/<agent role>\"]}}"
            )));
        };
        let Some(principal) = caller.principal.as_deref() else {
            return Err(ServiceError::Forbidden(
                "request is not signed by an IAM principal".into(),
            ));
        };
        let ok = allowed.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => principal.starts_with(prefix),
            None => p == principal,
        });
        if ok {
            Ok(())
        } else {
            Err(ServiceError::Forbidden(format!(
                "{principal} may not act for cluster {cluster:?} (not among its principals in \
                 ClusterPrincipals, FLOTILLA_CLUSTER_PRINCIPALS)"
            )))
        }
    }
}

/// The cluster-name check: a deployment provisions one EKS cluster
/// ([`Config::cluster_name`]); a batch naming another is refused here, not
/// by IAM deep in launch (the launch role may only tag and launch for the
/// stack's cluster).
pub(crate) fn check_cluster_name(
    config: &Config,
    cluster_id: &str,
    meta: &ClusterMeta,
) -> Result<()> {
    match &config.cluster_name {
        Some(ours) if *ours != meta.name => Err(ServiceError::BadRequest(format!(
            "cluster.name {:?} of cluster {:?}: this Flotilla stack provisions EKS cluster {ours:?} \
             (its ClusterName parameter, FLOTILLA_CLUSTER_NAME); set the agent's \
             FLOTILLA_CLUSTER_NAME to {ours:?} or post to the stack deployed for {:?}",
            meta.name, cluster_id, meta.name
        ))),
        _ => Ok(()),
    }
}

/// The cluster registry entry (`CLUSTERS / <cluster>`): when the cluster
/// was first seen and the EKS cluster its batches name. A cluster id is
/// bound to that EKS cluster: `GET` refuses one registered for another EKS
/// cluster than this stack's (a table restored into another stack).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRegistration {
    #[serde(default)]
    pub first_seen: i64,
    /// Absent in entries written before the name was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// Refuse a cluster id registered for another EKS cluster than the stack's.
async fn check_registration<S: Store>(store: &S, config: &Config, cluster: &str) -> Result<()> {
    let Some(ours) = &config.cluster_name else {
        return Ok(());
    };
    let key = keys::registry(cluster);
    let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read cluster registry"))?
    else {
        return Ok(());
    };
    let reg: ClusterRegistration = codec::from_json(&key.to_string(), &item.body)?;
    match reg.cluster_name {
        Some(theirs) if theirs != *ours => Err(ServiceError::BadRequest(format!(
            "cluster id {cluster:?} is registered for EKS cluster {theirs:?}; this Flotilla stack \
             provisions EKS cluster {ours:?} (its ClusterName parameter, FLOTILLA_CLUSTER_NAME)"
        ))),
        _ => Ok(()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    pub cluster_id: String,
    pub batch_id: String,
    pub pending_pods: usize,
    /// The same content was already pending: nothing new was stored.
    pub deduplicated: bool,
    /// NodeClaims whose nodes this batch shows registered.
    pub registered: usize,
}

/// Kinds the launch stage needs again (small, no pods).
pub(crate) const CONTEXT_KINDS: &[&str] = &[
    "NodePool",
    "Provisioner",
    "EC2NodeClass",
    "AWSNodeTemplate",
    "NodeOverlay",
];

fn valid_cluster_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn validate_meta(m: &ClusterMeta) -> Result<()> {
    let bad =
        |field: &str, why: &str| Err(ServiceError::BadRequest(format!("cluster.{field}: {why}")));
    if m.name.is_empty()
        || m.name.len() > 100
        || !m
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return bad("name", "must be 1-100 characters of [A-Za-z0-9_-]");
    }
    if !m.endpoint.starts_with("https://")
        || m.endpoint.len() > 2048
        || m.endpoint
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'`$\\".contains(c))
    {
        return bad(
            "endpoint",
            "must be an https:// URL without quotes, spaces or shell characters",
        );
    }
    if m.ca_bundle.is_empty()
        || m.ca_bundle.len() > 64 * 1024
        || !m
            .ca_bundle
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=')
    {
        return bad("caBundle", "must be non-empty base64");
    }
    let Some(cidr) = &m.service_cidr else {
        return bad(
            "serviceCidr",
            "required (the node bootstrap needs the service CIDR)",
        );
    };
    {
        if cidr.is_empty()
            || cidr.len() > 64
            || !cidr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ".:/".contains(c))
        {
            return bad("serviceCidr", "must be a CIDR like 10.100.0.0/16");
        }
    }
    let mut parts = m.kubernetes_version.split('.');
    let ok = matches!((parts.next(), parts.next(), parts.next()), (Some(a), Some(b), None)
        if !a.is_empty() && !b.is_empty() && a.len() <= 3 && b.len() <= 3
            && a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit()));
    if !ok {
        return bad("kubernetesVersion", "must look like 1.33");
    }
    Ok(())
}

/// The cluster id and the cluster facts of a post.
pub(crate) fn validate_ids(cluster_id: &str, meta: &ClusterMeta) -> Result<()> {
    if !valid_cluster_id(cluster_id) {
        return Err(ServiceError::BadRequest(format!(
            "clusterId {:?}: must be 1-63 characters of [a-z0-9-], not starting or ending with '-'",
            cluster_id.chars().take(80).collect::<String>()
        )));
    }
    validate_meta(meta)
}

/// A posted body as `T` (a batch, a change post): within the body limit,
/// JSON errors naming the path (`what at <path>: ...`).
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    config: &Config,
    what: &str,
) -> Result<T> {
    if body.is_empty() {
        return Err(ServiceError::BadRequest("empty request body".into()));
    }
    if body.len() > config.max_body_bytes {
        return Err(ServiceError::BadRequest(format!(
            "request body is {} bytes; the limit is {} (split the {what})",
            body.len(),
            config.max_body_bytes
        )));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        ServiceError::BadRequest(format!("{what} at {path}: {}", e.inner()))
    })
}

/// Parse and fully validate a request body. Errors name the field (and,
/// for documents, the object).
pub fn parse_batch(
    body: &[u8],
    config: &Config,
) -> Result<(BatchRequest, flotilla_core::model::ClusterState)> {
    let req: BatchRequest = parse_body(body, config, "batch")?;
    validate_ids(&req.cluster_id, &req.cluster)?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": req.documents});
    let bytes = serde_json::to_vec(&list).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    let state = flotilla_input::load(&[flotilla_input::Source {
        name: "documents",
        bytes: &bytes,
    }])
    .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    let pods = state.pending_pods.len();
    if pods > config.max_pending_pods {
        return Err(ServiceError::BadRequest(format!(
            "documents: {pods} pending pods; the limit per batch is {}",
            config.max_pending_pods
        )));
    }
    if pods > 0 && state.node_pools.is_empty() {
        return Err(ServiceError::BadRequest(
            "documents: pending pods but no NodePool or Provisioner (nothing could be launched)"
                .into(),
        ));
    }
    Ok((req, state))
}

/// The documents of the kinds launch needs, and the PodDisruptionBudgets
/// disruption reads (small, like them; no pods), Lists flattened.
fn context_documents(docs: &[serde_json::Value]) -> Vec<serde_json::Value> {
    /// Kept for the disruption stage besides [`CONTEXT_KINDS`].
    const DISRUPTION_KINDS: &[&str] = &["PodDisruptionBudget"];
    let mut out = Vec::new();
    for d in docs {
        let kind = d.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if kind == "List" || kind.ends_with("List") {
            if let Some(items) = d.get("items").and_then(|i| i.as_array()) {
                out.extend(context_documents(items));
            }
        } else if CONTEXT_KINDS.contains(&kind) || DISRUPTION_KINDS.contains(&kind) {
            out.push(d.clone());
        }
    }
    out
}

/// Accept a batch: validate, store, move the pending pointer, put
/// `BatchAccepted`. Re-posting identical content while it is still pending
/// stores nothing new and puts the event again (the agent's retry).
pub async fn accept<S: Store, B: Bus, C: Clock>(
    store: &S,
    bus: &B,
    clock: &C,
    config: &Config,
    access: &Access,
    caller: &Caller,
    body: &[u8],
) -> Result<Accepted> {
    let (req, state) = parse_batch(body, config)?;
    access.check(caller, &req.cluster_id)?;
    check_cluster_name(config, &req.cluster_id, &req.cluster)?;
    let cluster = req.cluster_id.clone();
    let pending_pods = state.pending_pods.len();
    // Nodes carrying a NodeClaim's label have registered: record it now,
    // whether or not anything is pending (a batch without pending pods is
    // the agent's heartbeat, and the sweep ends NodeClaims that never
    // register).
    let registered = mark_registered(store, clock, &cluster, &state.nodes).await?;
    record_nodes(store, clock, &cluster, &state.nodes).await?;
    if pending_pods == 0 {
        // The heartbeat is the cluster's state for the disruption stage
        // (an emptied cluster posts nothing else).
        let context = LaunchContext {
            cluster: req.cluster.clone(),
            documents: context_documents(&req.documents),
        };
        crate::cluster_state::store_heartbeat(
            store,
            config,
            &req,
            &context,
            clock.now_millis(),
            clock.now_secs(),
        )
        .await?;
        return Ok(Accepted {
            cluster_id: cluster,
            batch_id: String::new(),
            pending_pods: 0,
            deduplicated: false,
            registered,
        });
    }
    let canonical = codec::to_json(&req);
    let hash = content_hash(&canonical);
    let now = clock.now_millis();
    let now_secs = clock.now_secs();

    let pointer_key = keys::scheduler(&cluster);
    let existing = store
        .get(&pointer_key)
        .await
        .map_err(ServiceError::port("read scheduler pointer"))?;
    if let Some(item) = existing {
        let p: SchedulerPointer = codec::from_json(&pointer_key.to_string(), &item.body)?;
        if let Some(pending) = p.pending.filter(|p| p.content_hash == hash) {
            put_accepted(bus, &cluster, &pending.batch_id).await?;
            return Ok(Accepted {
                cluster_id: cluster,
                batch_id: pending.batch_id,
                pending_pods,
                deduplicated: true,
                registered,
            });
        }
    }

    let batch_id = format!("{now:012x}-{}", &hash[..8]);
    let expires = Some(now_secs + config.retention_secs);
    let parts = codec::chunk_items(
        &canonical,
        |i| keys::batch_chunk(&cluster, &batch_id, i),
        expires,
    );
    let chunks = parts.len();
    crate::put_all(store, parts, "batch chunk").await?;
    let context = LaunchContext {
        cluster: req.cluster.clone(),
        documents: context_documents(&req.documents),
    };
    let mut ctx_item = Item::new(
        keys::context(&cluster, &batch_id),
        codec::gzip(&codec::to_json(&context)),
    );
    ctx_item.expires_at = expires;
    if ctx_item.body.len() > flotilla_ports::MAX_BODY_BYTES {
        return Err(ServiceError::BadRequest(
            "documents: the NodePools, EC2NodeClasses and NodeOverlays alone exceed 350 KB compressed"
                .into(),
        ));
    }
    let header = BatchHeader {
        batch_id: batch_id.clone(),
        content_hash: hash.clone(),
        chunks,
        accepted_at: now,
        pending_pods,
        state: None,
    };
    let mut header_item = Item::new(
        keys::batch_header(&cluster, &batch_id),
        codec::to_json(&header),
    );
    header_item.expires_at = expires;
    for item in [ctx_item, header_item] {
        store
            .write(Write::Put {
                item,
                condition: Condition::Always,
            })
            .await
            .map_err(ServiceError::port("store batch"))?;
    }

    crate::batches::make_pending(store, &cluster, &batch_id, &hash, now, now_secs).await?;

    register(store, &cluster, &req.cluster, now, now_secs).await?;

    put_accepted(bus, &cluster, &batch_id).await?;
    tracing::info!(cluster = %cluster, batch = %batch_id, pods = pending_pods, chunks, "batch accepted");
    Ok(Accepted {
        cluster_id: cluster,
        batch_id,
        pending_pods,
        deduplicated: false,
        registered,
    })
}

/// Enter the cluster in the registry (`CLUSTERS`) unless it is there.
pub(crate) async fn register<S: Store>(
    store: &S,
    cluster: &str,
    meta: &ClusterMeta,
    now: i64,
    now_secs: i64,
) -> Result<()> {
    let registration = ClusterRegistration {
        first_seen: now,
        cluster_name: Some(meta.name.clone()),
    };
    let mut reg = Item::new(keys::registry(cluster), codec::to_json(&registration));
    reg.expires_at = None;
    match store
        .write(Write::Put {
            item: reg,
            condition: Condition::Absent { now_secs },
        })
        .await
    {
        Ok(()) | Err(PortError::ConditionFailed(_)) => Ok(()),
        Err(e) => Err(ServiceError::port("register cluster")(e)),
    }
}

/// `Launched → Registered` for every node labelled with one of the
/// cluster's NodeClaims. Returns how many moved.
pub async fn mark_registered<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    cluster: &str,
    nodes: &[flotilla_core::model::Node],
) -> Result<usize> {
    let mut n = 0;
    for (node, name) in nodes.iter().filter_map(|node| {
        node.labels
            .get(crate::records::NODECLAIM_LABEL)
            .map(|claim| (node.name.as_str(), claim))
    }) {
        let Some((item, mut record)) =
            crate::nodeclaims::node_claim_item(store, cluster, name).await?
        else {
            continue;
        };
        if record.state != crate::records::NodeClaimState::Launched {
            continue;
        }
        record.state = crate::records::NodeClaimState::Registered;
        record
            .notes
            .insert(crate::records::NODE_NOTE.into(), node.to_string());
        record.updated_at = clock.now_millis();
        if crate::nodeclaims::update_claim(store, &item, &record).await? {
            n += 1;
        }
    }
    Ok(n)
}

/// Record the posted nodes as the cluster's [`NodesReport`] (only when the
/// list changed, never over a newer post's: version-checked).
pub async fn record_nodes<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    cluster: &str,
    nodes: &[flotilla_core::model::Node],
) -> Result<()> {
    let all = labelled(nodes);
    update_nodes_report(store, clock, cluster, |_| Some(all.clone())).await
}

/// NodeClaim name → node name, of the nodes carrying a NodeClaim's label.
fn labelled(nodes: &[flotilla_core::model::Node]) -> std::collections::BTreeMap<String, String> {
    nodes
        .iter()
        .filter_map(|n| {
            n.labels
                .get(crate::records::NODECLAIM_LABEL)
                .map(|claim| (claim.clone(), n.name.clone()))
        })
        .collect()
}

/// Record what a change post shows of the cluster's nodes: nodes added or
/// changed are registered ([`mark_registered`]) and, with the nodes
/// deleted, change the [`NodesReport`]; a completed resync (`full`)
/// replaces it.
pub(crate) async fn record_changed_nodes<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    cluster: &str,
    changes: &flotilla_core::state::Changes,
    full: Option<&flotilla_core::state::ClusterCache>,
) -> Result<()> {
    use flotilla_core::state::ClusterCache;
    let is_node = |k: &flotilla_core::state::ObjectKey| k.0.starts_with("Node//");
    let nodes_only = |objects: &mut dyn Iterator<
        Item = (&flotilla_core::state::ObjectKey, &serde_json::Value),
    >| {
        let cache = ClusterCache {
            objects: objects
                .filter(|(k, _)| is_node(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..ClusterCache::default()
        };
        flotilla_input::load_cache(cache)
            .map(|s| s.nodes)
            .map_err(|e| ServiceError::BadRequest(e.to_string()))
    };
    if let Some(full) = full {
        let nodes = nodes_only(&mut full.objects.iter())?;
        mark_registered(store, clock, cluster, &nodes).await?;
        return record_nodes(store, clock, cluster, &nodes).await;
    }
    let keyed: Vec<(flotilla_core::state::ObjectKey, serde_json::Value)> = changes
        .objects
        .iter()
        .filter_map(|d| flotilla_core::state::ObjectKey::of(d).map(|k| (k, d.clone())))
        .collect();
    let upserted = nodes_only(&mut keyed.iter().map(|(k, v)| (k, v)))?;
    let deleted: Vec<&str> = changes
        .deleted
        .iter()
        .filter(|k| is_node(k))
        .filter_map(|k| k.0.rsplit('/').next())
        .collect();
    if upserted.is_empty() && deleted.is_empty() {
        return Ok(());
    }
    mark_registered(store, clock, cluster, &upserted).await?;
    let added = labelled(&upserted);
    update_nodes_report(store, clock, cluster, |old| {
        let mut nodes = old.map(|o| o.nodes.clone()).unwrap_or_default();
        nodes.retain(|_, node| {
            !deleted.contains(&node.as_str()) && !upserted.iter().any(|n| n.name == *node)
        });
        nodes.extend(added.clone());
        Some(nodes)
    })
    .await
}

/// Write the [`NodesReport`] `f` makes of the stored one (`None`: leave
/// it), only when it changed; version-checked, a few tries.
async fn update_nodes_report<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    cluster: &str,
    f: impl Fn(Option<&NodesReport>) -> Option<std::collections::BTreeMap<String, String>>,
) -> Result<()> {
    let at = clock.now_millis();
    let key = keys::nodes(cluster);
    for _ in 0..4 {
        let current = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read nodes report"))?;
        let old: Option<NodesReport> = match &current {
            Some(item) => {
                let json = codec::gunzip(&key.to_string(), &item.body)?;
                Some(codec::from_json(&key.to_string(), &json)?)
            }
            None => None,
        };
        let Some(nodes) = f(old.as_ref()) else {
            return Ok(());
        };
        let condition = match (&current, &old) {
            (Some(item), Some(old)) => {
                if old.at > at || (old.nodes == nodes && !old.placeholder) {
                    return Ok(());
                }
                Condition::Version(item.version)
            }
            _ => Condition::Absent {
                now_secs: clock.now_secs(),
            },
        };
        let report = NodesReport {
            at,
            nodes,
            placeholder: false,
        };
        let mut item = Item::new(key.clone(), codec::gzip(&codec::to_json(&report)));
        item.version = current.as_ref().map_or(1, |i| i.version + 1);
        item.expires_at = None;
        match store.write(Write::Put { item, condition }).await {
            Ok(()) => return Ok(()),
            Err(PortError::ConditionFailed(_)) => continue,
            Err(e) => return Err(ServiceError::port("write nodes report")(e)),
        }
    }
    // Lost to concurrent posts four times: theirs are as new.
    Ok(())
}

/// One NodeClaim as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimView {
    pub name: String,
    pub node_pool: String,
    pub state: crate::records::NodeClaimState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints the node must carry (not the startup taints, which the
    /// node's own daemons remove).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<flotilla_core::model::Taint>,
    pub pods: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /clusters/<id>`: what the agent reads back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub cluster_id: String,
    pub node_claims: Vec<NodeClaimView>,
    /// Pending actions for the agent (cordon, drain, relabel), as stored;
    /// acknowledged ones ([`acknowledge`]) are left out.
    pub actions: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_result: Option<BatchResult>,
}

pub async fn cluster_view<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    config: &Config,
    access: &Access,
    caller: &Caller,
    cluster: &str,
) -> Result<ClusterView> {
    if !valid_cluster_id(cluster) {
        return Err(ServiceError::BadRequest(format!(
            "cluster id {:?} is not valid",
            cluster.chars().take(80).collect::<String>()
        )));
    }
    access.check(caller, cluster)?;
    check_registration(store, config, cluster).await?;
    let now_secs = clock.now_secs();
    let pk = keys::cluster_pk(cluster);
    let claims = store
        .query(&pk, keys::NODECLAIM_PREFIX)
        .await
        .map_err(ServiceError::port("query NodeClaims"))?;
    let mut node_claims = Vec::new();
    for item in claims.iter().filter(|i| i.is_live(now_secs)) {
        let r: NodeClaimRecord = codec::from_json(&item.key.to_string(), &item.body)?;
        node_claims.push(NodeClaimView {
            name: r.name,
            node_pool: r.plan.node_pool.clone(),
            state: r.state,
            instance_id: r.instance.as_ref().map(|i| i.instance_id.clone()),
            instance_type: r.instance.as_ref().map(|i| i.instance_type.clone()),
            zone: r.instance.as_ref().map(|i| i.zone.clone()),
            capacity_type: r.instance.as_ref().map(|i| i.capacity_type.clone()),
            labels: r.plan.labels.clone(),
            taints: r.plan.taints.clone(),
            pods: r.plan.pods.len(),
            reason: r.reason,
        });
    }
    let actions = store
        .query(&pk, keys::ACTION_PREFIX)
        .await
        .map_err(ServiceError::port("query actions"))?
        .into_iter()
        .filter(|i| i.is_live(now_secs))
        .map(|i| codec::from_json::<serde_json::Value>(&i.key.to_string(), &i.body))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .filter(|a| a.get(ACK_FIELD).is_none())
        .collect();
    let pointer = store
        .get(&keys::scheduler(cluster))
        .await
        .map_err(ServiceError::port("read scheduler pointer"))?;
    let mut last_result = None;
    if let Some(item) = pointer {
        let p: SchedulerPointer = codec::from_json("scheduler", &item.body)?;
        if let Some(b) = p.last_completed {
            let key = keys::result(cluster, &b);
            if let Some(r) = store
                .get(&key)
                .await
                .map_err(ServiceError::port("read batch result"))?
            {
                last_result = Some(codec::from_json(&key.to_string(), &r.body)?);
            }
        }
    }
    Ok(ClusterView {
        cluster_id: cluster.to_string(),
        node_claims,
        actions,
        last_result,
    })
}

/// Most acknowledgements in one request.
pub const MAX_ACKS: usize = 1_000;

/// One acknowledgement in `POST /clusters/<id>/actions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ack {
    /// The action's `id`, as `GET /clusters/<id>` listed it.
    pub id: String,
    pub outcome: AckOutcome,
    #[serde(default)]
    pub message: String,
}

/// The body of `POST /clusters/<id>/actions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AckRequest {
    pub acks: Vec<Ack>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckReport {
    /// Newly acknowledged.
    pub acknowledged: usize,
    /// Acknowledged before (a retry): unchanged.
    pub already: usize,
    /// No such live action (expired, or never stored).
    pub unknown: Vec<String>,
}

/// Parse and validate an acknowledgement body.
pub fn parse_acks(body: &[u8]) -> Result<AckRequest> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let req: AckRequest = serde_path_to_error::deserialize(de)
        .map_err(|e| ServiceError::BadRequest(format!("acks at {}: {}", e.path(), e.inner())))?;
    if req.acks.len() > MAX_ACKS {
        return Err(ServiceError::BadRequest(format!(
            "acks: {} entries; the limit is {MAX_ACKS}",
            req.acks.len()
        )));
    }
    for (i, a) in req.acks.iter().enumerate() {
        if a.id.is_empty() || a.id.len() > 64 || !a.id.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(ServiceError::BadRequest(format!(
                "acks[{i}].id: must be the hex id of an action"
            )));
        }
        if a.message.len() > 2048 {
            return Err(ServiceError::BadRequest(format!(
                "acks[{i}].message: at most 2048 bytes"
            )));
        }
    }
    Ok(req)
}

/// `POST /clusters/<id>/actions`: the agent reports what it applied. Each
/// action item is marked with an [`AckRecord`] (version-checked write) and
/// kept until its TTL, so `GET` stops listing it and the sweep, whose
/// writes are create-if-absent, never stores the same action again.
/// Idempotent: acknowledging twice keeps the first record.
pub async fn acknowledge<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    access: &Access,
    caller: &Caller,
    cluster: &str,
    body: &[u8],
) -> Result<AckReport> {
    if !valid_cluster_id(cluster) {
        return Err(ServiceError::BadRequest(format!(
            "cluster id {:?} is not valid",
            cluster.chars().take(80).collect::<String>()
        )));
    }
    access.check(caller, cluster)?;
    let req = parse_acks(body)?;
    let now_secs = clock.now_secs();
    let mut report = AckReport::default();
    for ack in &req.acks {
        let key = keys::action(cluster, &ack.id);
        let mut done = false;
        for _ in 0..8 {
            let Some(item) = store
                .get(&key)
                .await
                .map_err(ServiceError::port("read action"))?
                .filter(|i| i.is_live(now_secs))
            else {
                report.unknown.push(ack.id.clone());
                done = true;
                break;
            };
            let mut value: serde_json::Value = codec::from_json(&key.to_string(), &item.body)?;
            let Some(obj) = value.as_object_mut() else {
                return Err(ServiceError::Corrupt {
                    key: key.to_string(),
                    reason: "action is not a JSON object".into(),
                });
            };
            if obj.contains_key(ACK_FIELD) {
                report.already += 1;
                done = true;
                break;
            }
            let record = AckRecord {
                outcome: ack.outcome,
                message: ack.message.clone(),
                at: now_secs,
            };
            obj.insert(
                ACK_FIELD.into(),
                serde_json::to_value(&record).unwrap_or_default(),
            );
            let mut next = item.clone();
            next.version = item.version + 1;
            next.body = codec::to_json(&value);
            match store
                .write(Write::Put {
                    item: next,
                    condition: Condition::Version(item.version),
                })
                .await
            {
                Ok(()) => {
                    report.acknowledged += 1;
                    done = true;
                    break;
                }
                Err(PortError::ConditionFailed(_)) => continue,
                Err(e) => return Err(ServiceError::port("acknowledge action")(e)),
            }
        }
        if !done {
            return Err(ServiceError::Port {
                context: format!("acknowledge action {}", ack.id),
                source: PortError::Throttled("too much contention".into()),
            });
        }
    }
    tracing::info!(cluster = %cluster, acknowledged = report.acknowledged, already = report.already, unknown = report.unknown.len(), "actions acknowledged");
    Ok(report)
}

#[cfg(test)]
mod ack_tests {
    use std::sync::Arc;

    use flotilla_core::reservations::{Action, ActionKind};
    use flotilla_ports::Clock;
    use flotilla_sim::{ManualClock, MemStore};

    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn drain_action(node: &str) -> Action {
        Action {
            kind: ActionKind::Drain,
            node: node.into(),
            node_claim: None,
            reservation_id: "cr-1".into(),
            set_labels: Default::default(),
            remove_labels: vec![],
            deadline: 1_800_000_600,
            reason: "capacity block ends".into(),
        }
    }

    #[test]
    fn acknowledged_actions_leave_the_view_and_are_not_stored_again() {
        block_on(async {
            let store = Arc::new(MemStore::new());
            let clock = Arc::new(ManualClock::at_millis(1_800_000_000_000));
            let now = clock.now_secs();
            let actions = [drain_action("a"), drain_action("b")];
            let n = crate::actions::store_actions(&store, "demo", &actions, now, 3600)
                .await
                .expect("store");
            assert_eq!(n, 2);
            let agent = "arn:aws:sts::1:assumed-role/agent/x";
            let access = Access::default().allow("demo", agent);
            let caller = Caller {
                principal: Some(agent.into()),
            };
            let view = cluster_view(&store, &clock, &Config::default(), &access, &caller, "demo")
                .await
                .expect("view");
            assert_eq!(view.actions.len(), 2);
            let id = view.actions[0]["id"].as_str().expect("id").to_string();
            let body = serde_json::json!({"acks": [
                {"id": id, "outcome": "done", "message": "drained 3 pods"},
                {"id": "0123abcd", "outcome": "failed"}
            ]});
            let r = acknowledge(
                &store,
                &clock,
                &access,
                &caller,
                "demo",
                body.to_string().as_bytes(),
            )
            .await
            .expect("ack");
            assert_eq!(r.acknowledged, 1);
            assert_eq!(r.unknown, vec!["0123abcd".to_string()]);
            // A retry changes nothing.
            let r = acknowledge(
                &store,
                &clock,
                &access,
                &caller,
                "demo",
                body.to_string().as_bytes(),
            )
            .await
            .expect("ack again");
            assert_eq!((r.acknowledged, r.already), (0, 1));
            let view = cluster_view(&store, &clock, &Config::default(), &access, &caller, "demo")
                .await
                .expect("view");
            assert_eq!(view.actions.len(), 1);
            assert_ne!(view.actions[0]["id"].as_str(), Some(id.as_str()));
            // The sweep computing the same action again does not revive it.
            let n = crate::actions::store_actions(&store, "demo", &actions, now + 60, 3600)
                .await
                .expect("store");
            assert_eq!(n, 0);
            let view = cluster_view(&store, &clock, &Config::default(), &access, &caller, "demo")
                .await
                .expect("view");
            assert_eq!(view.actions.len(), 1);
        });
    }

    #[test]
    fn bad_acknowledgements_name_the_field_and_foreign_callers_are_refused() {
        let e = parse_acks(br#"{"acks": [{"id": "zz", "outcome": "done"}]}"#).unwrap_err();
        assert!(e.to_string().contains("acks[0].id"), "{e}");
        let e = parse_acks(br#"{"acks": [{"id": "ab", "outcome": "maybe"}]}"#).unwrap_err();
        assert!(e.to_string().contains("acks[0].outcome"), "{e}");
        let e = parse_acks(br#"{"acks": [], "extra": 1}"#).unwrap_err();
        assert!(e.to_string().contains("extra"), "{e}");
        block_on(async {
            let store = Arc::new(MemStore::new());
            let clock = Arc::new(ManualClock::at_millis(1_800_000_000_000));
            let mut access = Access::default();
            access.clusters.insert(
                "demo".into(),
                vec!["arn:aws:sts::1:assumed-role/agent/*".into()],
            );
            let other = Caller {
                principal: Some("arn:aws:sts::1:assumed-role/other/x".into()),
            };
            let e = acknowledge(&store, &clock, &access, &other, "demo", br#"{"acks": []}"#)
                .await
                .unwrap_err();
            assert!(matches!(e, ServiceError::Forbidden(_)), "{e}");
        });
    }
}

#[cfg(test)]
mod context_tests {
    use super::context_documents;
    use serde_json::json;

    #[test]
    fn the_context_keeps_pools_classes_overlays_and_pdbs_and_drops_the_rest() {
        let docs = vec![
            json!({"kind": "NodePool", "metadata": {"name": "a"}}),
            json!({"kind": "Pod", "metadata": {"name": "p"}}),
            json!({"kind": "List", "items": [
                json!({"kind": "EC2NodeClass", "metadata": {"name": "c"}}),
                json!({"kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"}}),
                json!({"kind": "Node", "metadata": {"name": "n"}}),
                json!({"kind": "PodList", "items": [json!({"kind": "PodDisruptionBudget",
                    "metadata": {"name": "db", "namespace": "data"}})]}),
            ]}),
            json!({"kind": "DaemonSet", "metadata": {"name": "d"}}),
            json!({"kind": "NodeOverlay", "metadata": {"name": "o"}}),
            json!({"metadata": {"name": "no kind"}}),
        ];
        let kept: Vec<String> = context_documents(&docs)
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap_or(""),
                    d["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                "NodePool/a",
                "EC2NodeClass/c",
                "PodDisruptionBudget/web",
                "PodDisruptionBudget/db",
                "NodeOverlay/o"
            ]
        );
    }
}
