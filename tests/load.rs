//! Load: 100 clusters post batches at once, and every event is handled
//! concurrently, as EventBridge fans out to Lambda. Twice: over the
//! in-memory store (what Flotilla's own code sustains) and over moto's
//! DynamoDB (real API shapes and conditions; moto applies one request at a
//! time, see `flotilla_tests::SERIAL_MOTO`, so its figures measure moto),
//! with the EC2 simulator and an in-memory bus.
//!
//! Checked: every batch accepted (202), none lost (each cluster's pods all
//! land on NodeClaims that launched), no duplicate launch (one live
//! instance per NodeClaim). Reported (one JSON line on stderr each, see them
//! with `cargo nextest run -p flotilla-tests --test load --no-capture`):
//! intake latency p50/p99, schedule and launch invocation latency p50/p99,
//! wall time from the first post to a quiet pipeline, and throughput.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_aws::DynamoStore;
use flotilla_ports::Store;
use flotilla_service::records::NodeClaimState;
use flotilla_sim::MemStore;
use flotilla_tests::{
    bridge, sample_batch, sim_ports, unique_name, url_request, Moto, SimPorts, SAMPLE_AGENT,
};

const CLUSTERS: usize = 100;
/// Subnets and security groups carry this discovery tag.
const DISCOVERY: &str = "load";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

#[derive(Default)]
struct Latencies {
    schedule: Vec<Duration>,
    launch: Vec<Duration>,
}

/// Runs the load over `store`; returns the figures.
async fn load<S: Store + Send + Sync + 'static>(
    store: S,
    label: &str,
    pods_per_batch: usize,
) -> serde_json::Value {
    let clusters: Vec<String> = (0..CLUSTERS).map(|i| format!("load-{i:03}")).collect();
    let mut ports = sim_ports(store, DISCOVERY);
    for c in &clusters {
        ports.access = ports.access.allow(c, SAMPLE_AGENT);
    }
    let p: Arc<SimPorts<S>> = Arc::new(ports);

    // Every cluster posts at once.
    let started = Instant::now();
    let posts: Vec<_> = clusters
        .iter()
        .map(|c| {
            let (p, body) = (
                p.clone(),
                sample_batch(c, DISCOVERY, pods_per_batch).to_string(),
            );
            tokio::spawn(async move {
                let t = Instant::now();
                let r =
                    flotilla_fn_intake::handle(&*p, &url_request("POST", "/batches", Some(body)))
                        .await;
                (r.status_code, r.body, t.elapsed())
            })
        })
        .collect();
    let mut intake = Vec::new();
    for t in posts {
        let (status, body, took) = t.await.expect("intake task");
        assert_eq!(status, 202, "{body:?}");
        intake.push(took);
    }
    let accepted = started.elapsed();

    // Every event handled concurrently until the bus is quiet.
    let lat = Arc::new(Mutex::new(Latencies::default()));
    for round in 0.. {
        assert!(round < 50, "the bus never went quiet");
        let events = p.bus.take();
        if events.is_empty() {
            break;
        }
        let tasks: Vec<_> = events
            .into_iter()
            .map(|e| {
                let (p, lat) = (p.clone(), lat.clone());
                tokio::spawn(async move {
                    let ev = bridge(&e);
                    let t = Instant::now();
                    let out = match e.detail_type.as_str() {
                        "BatchAccepted" | "PodsUnschedulable" => {
                            let clock = p.clock.clone();
                            let out = flotilla_fn_schedule::handle(&*p, &ev, move |ms| {
                                clock.advance_millis(i64::try_from(ms).unwrap_or(0));
                                std::future::ready(())
                            })
                            .await;
                            let took = t.elapsed();
                            lat.lock().expect("latencies").schedule.push(took);
                            out
                        }
                        "NodeClaimsPlanned" => {
                            let out = flotilla_fn_launch::handle(&*p, &ev).await;
                            let took = t.elapsed();
                            lat.lock().expect("latencies").launch.push(took);
                            out
                        }
                        other => panic!("unexpected event {other}"),
                    };
                    let out = out.expect("handler");
                    assert!(!out["failed"].is_string(), "{out}");
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("handler task");
        }
    }
    let quiet = started.elapsed();

    // No batch lost, nothing launched twice.
    let mut node_claims = 0;
    for c in &clusters {
        let claims = flotilla_service::schedule::node_claims(&p.store, c)
            .await
            .expect("claims");
        let mut pods: Vec<String> = claims
            .iter()
            .flat_map(|(_, r)| r.plan.pods.iter().cloned())
            .collect();
        pods.sort();
        pods.dedup();
        assert_eq!(pods.len(), pods_per_batch, "cluster {c}: {pods:?}");
        assert!(
            claims
                .iter()
                .all(|(_, r)| r.state == NodeClaimState::Launched),
            "cluster {c}: every NodeClaim launched"
        );
        node_claims += claims.len();
    }
    assert_eq!(
        p.ec2.live_instances().len(),
        node_claims,
        "one instance per NodeClaim"
    );

    intake.sort();
    let mut lat = std::mem::take(&mut *lat.lock().expect("latencies"));
    lat.schedule.sort();
    lat.launch.sort();
    let pods = CLUSTERS * pods_per_batch;
    let figures = serde_json::json!({
            "measure": "load",
            "clusters": CLUSTERS,
            "pods": pods,
            "nodeClaims": node_claims,
            "store": label,
            "intakeMsP50": percentile(&intake, 0.5),
            "intakeMsP99": percentile(&intake, 0.99),
            "allAcceptedMs": accepted.as_millis(),
            "scheduleInvocations": lat.schedule.len(),
            "scheduleMsP50": percentile(&lat.schedule, 0.5),
            "scheduleMsP99": percentile(&lat.schedule, 0.99),
            "launchInvocations": lat.launch.len(),
            "launchMsP50": percentile(&lat.launch, 0.5),
            "launchMsP99": percentile(&lat.launch, 0.99),
            "quietMs": quiet.as_millis(),
            "batchesPerSecond": (CLUSTERS as f64 / quiet.as_secs_f64() * 10.0).round() / 10.0,
            "podsPerSecond": (pods as f64 / quiet.as_secs_f64()).round(),
    });
    eprintln!("{figures}");
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_clusters_at_once_in_memory_no_batch_lost() {
    load(Arc::new(MemStore::new()), "memory", 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_clusters_at_once_on_moto_no_batch_lost() {
    let moto = Moto::start();
    let sdk = moto.config().await;
    let store = DynamoStore::new(&sdk, unique_name("flotilla"));
    store.create_table().await.expect("create table");
    load(store, "moto", 3).await;
}
