//! The cluster state kept by changes, end to end over the in-memory store:
//! the agent's full resync of a generated cluster (encoded by the agent's
//! change stream, cut in parts, posted to intake's change service and
//! applied), a steady-state post of changed pods (half of them deleted,
//! half new; templates only where intake may not hold them, as the agent
//! sends them), and the schedule stage loading the state and planning the
//! pending pods. One JSON line of figures per step. The same posts over
//! moto's DynamoDB: `flotilla-tests`' `state_moto` example.
//!
//! `state [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--plan 0|1]`

use std::time::Instant;

use flotilla_bench::agent_posts::{self, gzip_len, Agent, CLUSTER, DEFAULT_SHAPE, PRINCIPAL};
use flotilla_bench::cluster_docs::Shape;
use flotilla_bench::measure::{peak_rss_kib, restart_peak_rss};
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_service::changes::accept_changes;
use flotilla_service::intake::{Access, Caller};
use flotilla_sim::{block_on, ManualClock, MemBus, MemStore};
use serde_json::json;

struct Args {
    shape: Shape,
    changed: usize,
    plan: bool,
}

fn args() -> Args {
    let mut shape = DEFAULT_SHAPE;
    let (mut changed, mut plan) = (1_000, 1);
    let parsed = agent_posts::parse_counts(
        std::env::args().skip(1),
        &mut [
            ("--nodes", &mut shape.nodes),
            ("--pods", &mut shape.bound_pods),
            ("--pending", &mut shape.pending_pods),
            ("--apps", &mut shape.apps),
            ("--changed", &mut changed),
            ("--plan", &mut plan),
        ],
    );
    if let Err(e) = parsed {
        eprintln!("{e}\nusage: state [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--plan 0|1]");
        std::process::exit(2)
    }
    Args {
        shape,
        changed,
        plan: plan == 1,
    }
}

fn rss() -> f64 {
    peak_rss_kib().map_or(0.0, |k| k as f64 / 1024.0)
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
            principal: Some(PRINCIPAL.into()),
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

    // The agent's resync.
    let mut agent = Agent::new(shape);
    let resync = agent.resync();
    let bodies = resync.bodies;
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let gz: usize = bodies.iter().map(|b| gzip_len(b)).sum();
    println!(
        "{}",
        json!({"step": "resync-encode", "nodes": shape.nodes, "boundPods": shape.bound_pods,
            "pendingPods": shape.pending_pods, "templates": resync.templates, "podRows": resync.pod_rows,
            "parts": bodies.len(), "bytes": bytes, "gzipBytes": gz, "seconds": resync.encode_seconds,
            "peakRssMib": rss()})
    );

    let intake = Intake {
        store: MemStore::new(),
        bus: MemBus::new(),
        clock: ManualClock::at_millis(1_800_000_000_000),
        config: flotilla_service::Config::default(),
        access: Access::default().allow(CLUSTER, PRINCIPAL),
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
    let Some(delta) = agent.delta(a.changed) else {
        eprintln!("no delta");
        std::process::exit(1)
    };
    let post = delta.body;
    let t = Instant::now();
    let out = intake.post(&post);
    println!(
        "{}",
        json!({"step": "delta", "changedPods": a.changed, "posts": delta.posts,
            "podRows": delta.pod_rows, "deleted": delta.deleted, "templates": delta.templates,
            "bytes": post.len(), "gzipBytes": gzip_len(&post),
            "encodeSeconds": delta.encode_seconds, "applySeconds": t.elapsed().as_secs_f64(), "applied": out.applied})
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
