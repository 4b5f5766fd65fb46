//! The cluster state kept by changes, end to end over the in-memory store:
//! the agent's full resync of a generated cluster (encoded, cut in parts,
//! posted to intake's change service and applied), a steady-state post of
//! changed pods, and the schedule stage loading the state and planning
//! the pending pods. One JSON line of figures per step.
//!
//! `state [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--plan 0|1]`

use std::time::Instant;

use flotilla_bench::cluster_docs::{self, Shape};
use flotilla_bench::measure::peak_rss_kib;
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_core::state::{compact, Changes, ObjectKey, PodRow, Resync, Sequence};
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

fn body(seq: Sequence, pending: usize, changes: &Changes) -> Vec<u8> {
    serde_json::to_vec(&json!({"clusterId": CLUSTER,
        "cluster": {"name": CLUSTER, "endpoint": "https://bench.example.com", "caBundle": "YmVuY2g=",
                    "serviceCidr": "10.100.0.0/16", "kubernetesVersion": "1.33"},
        "sequence": seq, "pendingPods": pending, "changes": changes}))
    .unwrap_or_default()
}

fn gzip_len(b: &[u8]) -> usize {
    flotilla_service::codec::gzip(b).len()
}

/// The agent's encoding of every document: objects whole, pods as rows
/// over templates.
fn encode(shape: Shape) -> Changes {
    let mut c = Changes::default();
    cluster_docs::for_each_document(shape, |d| {
        if d["kind"] == "Pod" {
            if let Some((id, t, row)) = PodRow::split(d) {
                c.templates.entry(id).or_insert(t);
                c.pods.push(row);
            }
        } else {
            c.objects.push(d);
        }
    });
    c
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
    let t = Instant::now();
    let all = encode(shape);
    let (templates, rows) = (all.templates.len(), all.pods.len());
    let parts = all.split(limit);
    let n = parts.len() as u32;
    let bodies: Vec<Vec<u8>> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let seq = Sequence {
                stream: "bench-1".into(),
                seq: 1,
                resync: Some(Resync {
                    part: i as u32,
                    parts: n,
                }),
            };
            body(seq, shape.pending_pods, p)
        })
        .collect();
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

    // A steady-state post: half the changed pods deleted, half new.
    let t = Instant::now();
    let mut delta = Changes::default();
    for i in 0..a.changed / 2 {
        let doc = cluster_docs::pod(
            i % shape.apps.max(1),
            shape.bound_pods + i,
            Some(&cluster_docs::node_name(i % shape.nodes.max(1))),
        );
        if let Some((id, t, row)) = PodRow::split(doc) {
            delta.templates.entry(id).or_insert(t);
            delta.pods.push(row);
        }
        let old = cluster_docs::pod(0, i, None);
        let key = old["metadata"]["namespace"]
            .as_str()
            .zip(old["metadata"]["name"].as_str());
        if let Some((ns, name)) = key {
            delta.deleted.push(ObjectKey::pod(ns, name));
        }
    }
    let post = body(
        Sequence {
            stream: "bench-1".into(),
            seq: 2,
            resync: None,
        },
        shape.pending_pods,
        &delta,
    );
    let encode_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = intake.post(&post);
    println!(
        "{}",
        json!({"step": "delta", "changedPods": a.changed, "bytes": post.len(), "gzipBytes": gzip_len(&post),
            "encodeSeconds": encode_s, "applySeconds": t.elapsed().as_secs_f64(), "applied": out.applied,
            "digest": format!("{:x}", compact::digest(&Value::from(post.len())))})
    );
    batch = if out.batch_id.is_empty() {
        batch
    } else {
        out.batch_id
    };

    // The schedule stage: load the state, plan the pending pods.
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
            "pendingPods": state.pending_pods.len(), "peakRssMib": rss()})
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
                "peakRssMib": rss()})
        );
    }
}
