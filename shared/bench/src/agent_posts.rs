//! The agent's posts for a generated cluster (the state-by-changes
//! benchmarks): its full resync, encoded by the agent's change stream
//! ([`ChangeStream`]) and cut in parts, then a steady-state post of changed
//! pods (half of them deleted, half new; templates only where intake may
//! not hold them, as the agent sends them). Each post's body is the
//! `POST /changes` request the agent builds, uncompressed. Used by the
//! `state` bench (in-memory store) and by `flotilla-tests`' `state_moto`
//! example (moto's DynamoDB), so both apply byte-identical posts.

use std::time::Instant;

use flotilla_core::state::stream::{ChangeStream, Observed, Part};
use flotilla_core::state::ObjectKey;
use serde_json::{json, Value};

use crate::cluster_docs::{self, Shape};

/// The cluster id the posts carry.
pub const CLUSTER: &str = "bench";
/// The principal the posts are made as (grant it the cluster).
pub const PRINCIPAL: &str = "bench";

/// The state bench's default cluster: 400 nodes, 20,000 bound pods of
/// 200 Deployments, 2,000 pending pods.
pub const DEFAULT_SHAPE: Shape = Shape {
    nodes: 400,
    bound_pods: 20_000,
    pending_pods: 2_000,
    apps: 200,
    seed: 7,
};

/// The bytes of changes per post the agent aims at: intake's body limit
/// less room for the envelope.
pub fn post_limit() -> usize {
    flotilla_service::Config::default().max_body_bytes - 64 * 1024
}

/// Sets `--flag N` pairs of `args` into the slot named by `flags`; an
/// unknown flag or a value that is not a count is an error naming it.
pub fn parse_counts(
    args: impl IntoIterator<Item = String>,
    flags: &mut [(&str, &mut usize)],
) -> Result<(), String> {
    let mut it = args.into_iter();
    while let Some(k) = it.next() {
        let slot = flags
            .iter_mut()
            .find(|(name, _)| *name == k)
            .ok_or_else(|| format!("unknown argument {k}"))?;
        let v = it.next().ok_or_else(|| format!("{k}: missing value"))?;
        *slot.1 = v.parse().map_err(|_| format!("{k}: not a count: {v}"))?;
    }
    Ok(())
}

/// A post's body around a part's changes (serialized), as the agent
/// builds it.
pub fn body(part: &Part, pending: usize) -> Vec<u8> {
    let mut out = serde_json::to_vec(&json!({"clusterId": CLUSTER,
        "cluster": {"name": CLUSTER, "endpoint": "https://bench.example.com", "caBundle": "YmVuY2g=",
                    "serviceCidr": "10.100.0.0/16", "kubernetesVersion": "1.33"},
        "sequence": part.sequence, "pendingPods": pending}))
    .unwrap_or_default();
    out.pop();
    out.extend_from_slice(b",\"changes\":");
    out.extend_from_slice(&part.changes);
    out.push(b'}');
    out
}

/// Bytes of `b` gzip-compressed (as the agent sends it).
pub fn gzip_len(b: &[u8]) -> usize {
    flotilla_service::codec::gzip(b).len()
}

/// The key of a generated document.
fn key(d: &Value) -> ObjectKey {
    ObjectKey::of(d).unwrap_or_else(|| ObjectKey(String::new()))
}

/// The agent's caches: every object of `shape` at version 1, except the
/// first `deleted` bound pods (gone) and `added` new bound pods. Documents
/// are made only when the stream asks (a million pods are never all held
/// as documents).
pub fn observed(
    shape: Shape,
    placed: &[(u32, u32)],
    deleted: usize,
    added: usize,
) -> Vec<Observed> {
    let mut out = Vec::new();
    let mut fixed = cluster_docs::pool_documents();
    fixed.extend((0..shape.nodes).map(cluster_docs::node));
    fixed.extend((0..shape.pending_pods).map(|i| cluster_docs::pending_pod(i % 20, i)));
    for d in fixed {
        out.push(Observed::of(key(&d), "1".into(), d));
    }
    let new = (0..added).map(|i| {
        let app = u32::try_from(i % shape.apps.max(1)).unwrap_or(0);
        let node = u32::try_from(i % shape.nodes.max(1)).unwrap_or(0);
        (shape.bound_pods + i, (app, node))
    });
    let bound = placed.iter().copied().enumerate().skip(deleted);
    for (i, at) in bound.chain(new) {
        let k = key(&cluster_docs::bound_pod(i, at));
        out.push(Observed {
            key: k,
            version: "1".into(),
            document: Box::new(move || cluster_docs::bound_pod(i, at)),
        });
    }
    out
}

/// The agent of a generated cluster: its change stream over the cluster.
pub struct Agent {
    shape: Shape,
    placed: Vec<(u32, u32)>,
    stream: ChangeStream,
}

/// A resync's posts.
pub struct Resync {
    pub bodies: Vec<Vec<u8>>,
    pub templates: usize,
    pub pod_rows: usize,
    pub encode_seconds: f64,
}

/// A steady-state post.
pub struct Delta {
    pub body: Vec<u8>,
    /// Posts the stream cut the changes into (the figures are for one).
    pub posts: usize,
    pub pod_rows: usize,
    pub deleted: usize,
    pub templates: usize,
    pub encode_seconds: f64,
}

impl Agent {
    pub fn new(shape: Shape) -> Agent {
        Agent {
            shape,
            placed: cluster_docs::placements(shape),
            stream: ChangeStream::new("bench".into()),
        }
    }

    /// The full resync's posts; the stream then counts them delivered.
    pub fn resync(&mut self) -> Resync {
        let t = Instant::now();
        let observed = observed(self.shape, &self.placed, 0, 0);
        let mut resync = self.stream.prepare(observed, post_limit(), true);
        let parts: Vec<Part> = (0..resync.parts())
            .filter_map(|i| resync.take_part(i))
            .collect();
        let pending = self.shape.pending_pods;
        let bodies = parts.iter().map(|p| body(p, pending)).collect();
        let out = Resync {
            bodies,
            templates: parts.iter().map(|p| p.templates).sum(),
            pod_rows: parts.iter().map(|p| p.pods).sum(),
            encode_seconds: t.elapsed().as_secs_f64(),
        };
        drop(parts);
        self.stream.delivered_all(resync);
        out
    }

    /// The first post of the changes after the resync: `changed` pods,
    /// half deleted and half new (`None` if nothing changed).
    pub fn delta(&mut self, changed: usize) -> Option<Delta> {
        let half = changed / 2;
        let now = observed(self.shape, &self.placed, half, changed - half);
        let t = Instant::now();
        let mut delta = self.stream.prepare(now, post_limit(), false);
        let part = delta.take_part(0)?;
        let encode_seconds = t.elapsed().as_secs_f64();
        Some(Delta {
            body: body(&part, self.shape.pending_pods),
            posts: delta.parts(),
            pod_rows: part.pods,
            deleted: part.deleted,
            templates: part.templates,
            encode_seconds,
        })
    }
}
