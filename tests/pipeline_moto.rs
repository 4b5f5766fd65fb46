//! End to end through the four Lambda handlers, in process: DynamoDB is a
//! real local API (moto on loopback), EC2 is the simulator (moto ignores
//! CreateFleet's ClientToken), the bus is in memory and the clock manual.
//!
//! Also measures the latency from the intake POST to the last CreateFleet
//! for 1,000 pending pods (printed; see the README's figures).

use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_aws::DynamoStore;
use flotilla_service::records::{NodeClaimRecord, NodeClaimState};
use flotilla_tests::{
    bridge, events_dir, sample_batch, sim_ports, unique_name, url_request, Moto, SimPorts,
};

type MotoPorts = SimPorts<DynamoStore>;

const CLUSTER: &str = "demo";

async fn ports(moto: &Moto) -> MotoPorts {
    let sdk = moto.config().await;
    let store = DynamoStore::new(&sdk, unique_name("flotilla"));
    store.create_table().await.expect("create table");
    sim_ports(store, CLUSTER)
}

fn batch(pods: usize) -> serde_json::Value {
    sample_batch(CLUSTER, CLUSTER, pods)
}

/// Route every event on the bus to its handler until the bus is quiet.
async fn drain(p: &MotoPorts, copies: usize) {
    for _ in 0..100 {
        let events = p.bus.take();
        if events.is_empty() {
            return;
        }
        for e in &events {
            let ev = bridge(e);
            for _ in 0..copies {
                let out = match e.detail_type.as_str() {
                    "BatchAccepted" | "PodsUnschedulable" => {
                        let clock = p.clock.clone();
                        flotilla_fn_schedule::handle(p, &ev, move |ms| {
                            clock.advance_millis(i64::try_from(ms).unwrap_or(0));
                            std::future::ready(())
                        })
                        .await
                    }
                    "NodeClaimsPlanned" => flotilla_fn_launch::handle(p, &ev).await,
                    other => panic!("unexpected event {other}"),
                };
                let out = out.expect("handler");
                assert!(
                    !out["failed"].is_string() && out.get("dropped").is_none(),
                    "{out}"
                );
            }
        }
    }
    panic!("the bus never went quiet");
}

async fn claims(p: &MotoPorts) -> Vec<NodeClaimRecord> {
    flotilla_service::schedule::node_claims(&p.store, CLUSTER)
        .await
        .expect("claims")
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_through_the_handlers_to_instances_and_back() {
    let moto = Moto::start();
    let p = ports(&moto).await;
    let body = batch(40).to_string();
    let resp = flotilla_fn_intake::handle(&p, &url_request("POST", "/batches", Some(body))).await;
    assert_eq!(resp.status_code, 202, "{:?}", resp.body);
    // Delivered twice: nothing launches twice.
    drain(&p, 2).await;
    let all = claims(&p).await;
    assert!(!all.is_empty());
    assert!(all.iter().all(|c| c.state == NodeClaimState::Launched));
    assert_eq!(p.ec2.live_instances().len(), all.len());
    assert_eq!(p.ec2.create_fleet_calls(), all.len());

    // The agent reads the NodeClaims back.
    let resp = flotilla_fn_intake::handle(&p, &url_request("GET", "/clusters/demo", None)).await;
    assert_eq!(resp.status_code, 200);
    let view: serde_json::Value =
        serde_json::from_str(resp.body.as_deref().unwrap_or("")).expect("json");
    assert_eq!(view["nodeClaims"].as_array().map(Vec::len), Some(all.len()));
    assert!(view["nodeClaims"][0]["instanceId"]
        .as_str()
        .is_some_and(|i| i.starts_with("i-")));

    // The sweep, via its handler and the sample schedule event.
    let sched: EventBridgeEvent<serde_json::Value> = serde_json::from_slice(
        &std::fs::read(events_dir().join("sweep-schedule.json"))
            .expect("events/sweep-schedule.json"),
    )
    .expect("schedule event");
    p.clock.advance_millis(16 * 60_000);
    let out = flotilla_fn_sweep::handle(&p, &sched).await.expect("sweep");
    assert_eq!(
        out["registrationTimeouts"].as_array().map(Vec::len),
        Some(all.len()),
        "{out}"
    );
    assert!(p.ec2.live_instances().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_get_a_400_naming_the_field() {
    let moto = Moto::start();
    let p = ports(&moto).await;
    let mut b = batch(1);
    b["documents"][0]["spec"]["template"]["spec"]["requirments"] = serde_json::json!([]);
    let resp =
        flotilla_fn_intake::handle(&p, &url_request("POST", "/batches", Some(b.to_string()))).await;
    assert_eq!(resp.status_code, 400);
    let body = resp.body.unwrap_or_default();
    assert!(body.contains("requirments"), "{body}");
    assert!(p.bus.published().is_empty(), "nothing accepted");
    let resp =
        flotilla_fn_intake::handle(&p, &url_request("POST", "/batches", Some("{".into()))).await;
    assert_eq!(resp.status_code, 400);
    let resp = flotilla_fn_intake::handle(&p, &url_request("DELETE", "/batches", None)).await;
    assert_eq!(resp.status_code, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_pods_from_intake_to_create_fleet() {
    let moto = Moto::start();
    let p = Arc::new(ports(&moto).await);
    let body = batch(1000).to_string();
    let started = Instant::now();
    let resp = flotilla_fn_intake::handle(&*p, &url_request("POST", "/batches", Some(body))).await;
    assert_eq!(resp.status_code, 202);
    let intake = started.elapsed();
    // Schedule (the batching window is simulated by the manual clock: add
    // the 1 s idle window for wall time in production).
    for e in p.bus.take() {
        let clock = p.clock.clone();
        flotilla_fn_schedule::handle(&*p, &bridge(&e), move |ms| {
            clock.advance_millis(i64::try_from(ms).unwrap_or(0));
            std::future::ready(())
        })
        .await
        .expect("schedule");
    }
    let scheduled = started.elapsed();
    // Launch: one invocation per NodeClaimsPlanned event, concurrently, as
    // EventBridge fans them out to Lambda.
    let events = p.bus.take();
    let tasks: Vec<_> = events
        .into_iter()
        .map(|e| {
            let p = p.clone();
            tokio::spawn(async move { flotilla_fn_launch::handle(&*p, &bridge(&e)).await })
        })
        .collect();
    let invocations = tasks.len();
    for t in tasks {
        let out = t.await.expect("task").expect("launch");
        assert!(!out["failed"].is_string(), "{out}");
    }
    let total = started.elapsed();
    let all = claims(&p).await;
    let pods: usize = all.iter().map(|c| c.plan.pods.len()).sum();
    assert_eq!(pods, 1000);
    assert!(all.iter().all(|c| c.state == NodeClaimState::Launched));
    assert_eq!(p.ec2.live_instances().len(), all.len());
    eprintln!(
        "{{\"measure\":\"intake-to-createfleet\",\"pods\":1000,\"nodeClaims\":{},\"launchInvocations\":{invocations},\"intakeMs\":{},\"scheduledMs\":{},\"totalMs\":{},\"store\":\"moto\"}}",
        all.len(),
        intake.as_millis(),
        scheduled.as_millis(),
        total.as_millis()
    );
}
