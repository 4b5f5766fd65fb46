//! The cluster state kept by changes, end to end over the in-memory store:
//! the agent's full resync of a generated cluster (encoded by the agent's
//! change stream, cut in parts, posted to intake's change service and
//! applied), a steady-state post of changed pods (half of them deleted,
//! half new; templates only where intake may not hold them, as the agent
//! sends them), and the schedule stage loading the state and planning the
//! pending pods. One JSON line of figures per step.
//!
//! `state [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--plan 0|1]`

use std::time::Instant;

use flotilla_bench::cluster_docs::{self, Shape};
use flotilla_bench::measure::{peak_rss_kib, restart_peak_rss};
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_core::state::stream::{ChangeStream, Observed, Part};
use flotilla_core::state::ObjectKey;
use flotilla_service::changes::accept_changes;
use flotilla_service::intake::{Access, Caller};
use flotilla_sim::{block_on, ManualClock, MemBus, MemStore};
use serde_json::{json, Value};

const CLUSTER: &str = "bench";

struct Args {
    shape: Shape,
    changed: usize,
    plan: bool,
}

fn args() -> Args {
    let mut a = Args {
        shape: Shape {
            nodes: 400,
            bound_pods: 20_000,
            pending_pods: 2_000,
            apps: 200,
            seed: 7,
        },
        changed: 1_000,
        plan: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: state [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--plan 0|1]");
            std::process::exit(2)
        });
        match k.as_str() {
            "--nodes" => a.shape.nodes = v,
            "--pods" => a.shape.bound_pods = v,
            "--pending" => a.shape.pending_pods = v,
            "--apps" => a.shape.apps = v,
            "--changed" => a.changed = v,
            "--plan" => a.plan = v == 1,
            _ => {
                eprintln!("unknown argument {k}");
                std::process::exit(2)
            }
        }
    }
    a
}

fn rss() -> f64 {
    peak_rss_kib().map_or(0.0, |k| k as f64 / 1024.0)
}

/// A post's body around a part's changes (serialized), as the agent
/// builds it.
fn body(part: &Part, pending: usize) -> Vec<u8> {
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

fn gzip_len(b: &[u8]) -> usize {
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
fn observed(shape: Shape, placed: &[(u32, u32)], deleted: usize, added: usize) -> Vec<Observed> {
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

struct Intake {
    store: MemStore,
    bus: MemBus,
    clock: ManualClock,
    config: flotilla_service::Config,
    access: Access,
}

impl Intake {
    fn post(&self, body: &[u8]) -> flotilla_service::changes::ChangesAccepted {
        self.clock.advance_millis(100);
        let caller = Caller {
            principal: Some("bench".into()),
        };
        block_on(accept_changes(
            &self.store,
            &self.bus,
            &self.clock,
            &self.config,
            &self.access,
            &caller,
            body,
        ))
        .unwrap_or_else(|e| {
            eprintln!("intake refused a post: {e}");
            std::process::exit(1)
        })
    }
}

fn main() {
    let a = args();
    let shape = a.shape;
    let limit = flotilla_service::Config::default().max_body_bytes - 64 * 1024;

    // The agent's resync.
    let placed = cluster_docs::placements(shape);
    let mut stream = ChangeStream::new("bench".into());
    let t = Instant::now();
    let mut resync = stream.prepare(observed(shape, &placed, 0, 0), limit, true);
    let parts: Vec<Part> = (0..resync.parts())
        .filter_map(|i| resync.take_part(i))
        .collect();
    let templates: usize = parts.iter().map(|p| p.templates).sum();
    let rows: usize = parts.iter().map(|p| p.pods).sum();
    let bodies: Vec<Vec<u8>> = parts.iter().map(|p| body(p, shape.pending_pods)).collect();
    drop(parts);
    let encode_s = t.elapsed().as_secs_f64();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let gz: usize = bodies.iter().map(|b| gzip_len(b)).sum();
    println!(
        "{}",
        json!({"step": "resync-encode", "nodes": shape.nodes, "boundPods": shape.bound_pods,
            "pendingPods": shape.pending_pods, "templates": templates, "podRows": rows,
            "parts": bodies.len(), "bytes": bytes, "gzipBytes": gz, "seconds": encode_s, "peakRssMib": rss()})
    );

    let intake = Intake {
        store: MemStore::new(),
        bus: MemBus::new(),
        clock: ManualClock::at_millis(1_800_000_000_000),
        config: flotilla_service::Config::default(),
        access: Access::default().allow(CLUSTER, "bench"),
    };
    let t = Instant::now();
    let mut batch = String::new();
    for b in &bodies {
        batch = intake.post(b).batch_id;
    }
    drop(bodies);
    println!(
        "{}",
        json!({"step": "resync-apply", "seconds": t.elapsed().as_secs_f64(), "batch": batch, "peakRssMib": rss()})
    );

    stream.delivered_all(resync);

    // A steady-state post: half the changed pods deleted, half new.
    let half = a.changed / 2;
    let now = observed(shape, &placed, half, a.changed - half);
    let t = Instant::now();
    let mut delta = stream.prepare(now, limit, false);
    let Some(changes) = delta.take_part(0) else {
        eprintln!("no delta");
        std::process::exit(1)
    };
    let encode_s = t.elapsed().as_secs_f64();
    let post = body(&changes, shape.pending_pods);
    let t = Instant::now();
    let out = intake.post(&post);
    println!(
        "{}",
        json!({"step": "delta", "changedPods": a.changed, "posts": delta.parts(),
            "podRows": changes.pods, "deleted": changes.deleted, "templates": changes.templates,
            "bytes": post.len(), "gzipBytes": gzip_len(&post),
            "encodeSeconds": encode_s, "applySeconds": t.elapsed().as_secs_f64(), "applied": out.applied})
    );
    batch = if out.batch_id.is_empty() {
        batch
    } else {
        out.batch_id
    };

    // The schedule stage: load the state, plan the pending pods. Its own
    // peak: what it adds to the process (the store it reads stands for
    // DynamoDB).
    let stage_base = restart_peak_rss();
    let stage_mib = || {
        stage_base
            .zip(peak_rss_kib())
            .map(|(base, peak)| peak.saturating_sub(base) as f64 / 1024.0)
    };
    let t = Instant::now();
    let state = block_on(flotilla_service::cluster_state::load(
        &intake.store,
        CLUSTER,
        &batch,
    ))
    .unwrap_or_else(|e| {
        eprintln!("loading the state: {e}");
        std::process::exit(1)
    });
    let load_s = t.elapsed().as_secs_f64();
    let bound: usize = state.nodes.iter().map(|n| n.pods.len()).sum();
    println!(
        "{}",
        json!({"step": "load", "seconds": load_s, "nodes": state.nodes.len(), "boundPods": bound,
            "pendingPods": state.pending_pods.len(), "peakRssMib": rss(), "stagePeakMib": stage_mib()})
    );
    if a.plan {
        let catalog = Catalog::embedded("us-west-2").unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        });
        let t = Instant::now();
        let plan = schedule(&state, &catalog, &SchedulerOptions::default());
        println!(
            "{}",
            json!({"step": "plan", "seconds": t.elapsed().as_secs_f64(), "scheduled": plan.summary.scheduled,
                "nodeClaims": plan.summary.node_claims,
                "onExistingNodes": plan.existing_nodes.iter().map(|e| e.pods.len()).sum::<usize>(),
                "loadAndPlanSeconds": load_s + t.elapsed().as_secs_f64(),
                "peakRssMib": rss(), "stagePeakMib": stage_mib()})
        );
    }
}
