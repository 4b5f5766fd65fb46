//! The whole pipeline in process over the simulator: intake → schedule →
//! launch → sweep, with duplicate and concurrent delivery, crashes between
//! side effects and capacity errors.

mod common;

use std::collections::BTreeSet;

use common::*;
use flotilla_core::catalog::CapacityType;
use flotilla_ports::{Clock, InstanceState, PortError};
use flotilla_service::records::NodeClaimState;
use flotilla_sim::ops;

fn every_pod_on_one_claim(claims: &[flotilla_service::records::NodeClaimRecord], n: usize) {
    let mut seen = BTreeSet::new();
    for c in claims {
        for p in &c.plan.pods {
            assert!(seen.insert(p.clone()), "pod {p} on two NodeClaims");
        }
    }
    assert_eq!(seen.len(), n, "every pod on exactly one NodeClaim");
}

#[tokio::test]
async fn batch_to_running_instances() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 30, "500m", "1Gi"));
    let accepted = post(&p, &batch(docs)).await;
    assert_eq!(accepted.pending_pods, 30);
    drain(&p, 1).await;

    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert!(!launched.is_empty());
    assert_eq!(
        claims(&p).await.len(),
        launched.len(),
        "all NodeClaims launched"
    );
    every_pod_on_one_claim(&launched, 30);
    let instances = p.ec2.live_instances();
    assert_eq!(
        instances.len(),
        launched.len(),
        "one instance per NodeClaim"
    );
    for c in &launched {
        let id = &c.instance.as_ref().expect("instance").instance_id;
        let i = instances
            .iter()
            .find(|i| &i.id == id)
            .expect("instance exists");
        assert_eq!(i.tags.get("karpenter.sh/nodeclaim"), Some(&c.name));
        assert_eq!(
            i.tags.get("flotilla.io/cluster-id").map(String::as_str),
            Some(CLUSTER)
        );
        assert_eq!(c.plan.labels.get("flotilla.io/nodeclaim"), Some(&c.name));
    }
    // The launch template carries user data that names the NodeClaim.
    let names = p.ec2.launch_template_names();
    assert!(!names.is_empty());
    let lt = p.ec2.launch_template(&names[0]).expect("template");
    assert_eq!(lt.iam_instance_profile, "flotilla-nodes");
}

#[tokio::test]
async fn duplicate_delivery_launches_nothing_twice() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 12, "1", "2Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 3).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert_eq!(p.ec2.live_instances().len(), launched.len());
    assert_eq!(
        p.ec2.create_fleet_calls(),
        launched.len(),
        "one CreateFleet per NodeClaim"
    );
    every_pod_on_one_claim(&launched, 12);
}

#[tokio::test]
async fn reposted_pending_pods_ride_the_in_flight_node_claims() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 10, "1", "2Gi"));
    post(&p, &batch(docs.clone())).await;
    drain(&p, 1).await;
    let before = p.ec2.live_instances().len();
    // The agent posts the same pods again (still Pending: the nodes have
    // not registered yet), with one new pod.
    docs.extend(pods("late", 1, "100m", "128Mi"));
    p.clock.advance_millis(5_000);
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let after = p.ec2.live_instances().len();
    assert!(
        after <= before + 1,
        "re-posting pending pods must not launch them again ({before} → {after})"
    );
    let all = claims(&p).await;
    every_pod_on_one_claim(&all, 11);
}

#[tokio::test]
async fn a_newer_batch_supersedes_the_pending_one() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 4, "1", "2Gi"));
    post(&p, &batch(docs.clone())).await;
    docs.extend(pods("more", 4, "1", "2Gi"));
    p.clock.advance_millis(200);
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    // One scheduling run: only the newer batch's NodeClaims exist.
    let all = claims(&p).await;
    let batches: BTreeSet<&str> = all.iter().map(|c| c.batch_id.as_str()).collect();
    assert_eq!(batches.len(), 1, "{batches:?}");
    every_pod_on_one_claim(&all, 8);
}

#[tokio::test]
async fn crash_after_create_fleet_adopts_the_instance() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 1, "1", "2Gi"));
    post(&p, &batch(docs)).await;
    // CreateFleet succeeds but the caller sees a timeout; the lease is
    // released and the redelivery must not launch a second instance.
    p.ec2.faults().fail_after_effect_next(
        ops::EC2_CREATE_FLEET,
        PortError::Unavailable("timeout".into()),
    );
    for _ in 0..(1 + flotilla_service::launch::MAX_TRANSIENT_RETRIES) {
        p.ec2.faults().fail_after_effect_next(
            ops::EC2_CREATE_FLEET,
            PortError::Unavailable("timeout".into()),
        );
    }
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert_eq!(launched.len(), 1);
    // The simulator honours the client token, so the retries with the same
    // token return the same instance; the adoption check covers the rest.
    assert_eq!(p.ec2.live_instances().len(), 1, "no duplicate instance");
}

#[tokio::test]
async fn insufficient_capacity_is_cached_and_routed_around() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 1, "3", "6Gi"));
    post(&p, &batch(docs.clone())).await;
    // Find what the plan wants first, by planning on a twin world.
    let twin = world();
    post(&twin, &batch(docs)).await;
    drain(&twin, 1).await;
    let first = twin.ec2.live_instances()[0].clone();
    // No spot capacity for that type anywhere.
    for z in ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"] {
        p.ec2
            .set_capacity(&first.instance_type, z, CapacityType::Spot, 0);
    }
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert_eq!(launched.len(), 1);
    let inst = launched[0].instance.as_ref().expect("instance");
    assert!(
        inst.instance_type != first.instance_type || inst.capacity_type != "spot",
        "launched into the exhausted pool"
    );
    let ice = flotilla_service::schedule::unavailable_offerings(
        &p.store,
        "us-west-2",
        p.clock.now_secs(),
    )
    .await
    .expect("ice");
    assert!(ice
        .iter()
        .any(|(t, _, ct)| t == &first.instance_type && *ct == CapacityType::Spot));
}

#[tokio::test]
async fn sweep_ends_unregistered_and_vanished_instances_and_leaks() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 6, "2", "4Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert!(launched.len() >= 2);
    // One instance disappears.
    let gone = launched[0]
        .instance
        .as_ref()
        .expect("i")
        .instance_id
        .clone();
    p.ec2.set_instance_state(&gone, InstanceState::Terminated);
    let r = sweep(&p).await;
    assert_eq!(r.deleted, vec![launched[0].name.clone()]);
    // Nobody registers: after 15 minutes the rest are terminated.
    p.clock.advance_millis(16 * 60_000);
    let r = sweep(&p).await;
    assert_eq!(r.registration_timeouts.len(), launched.len() - 1);
    assert!(p.ec2.live_instances().is_empty());
    let deleted = claims_in(&p, NodeClaimState::Deleted).await;
    assert_eq!(deleted.len(), launched.len());
    // A timed-out NodeClaim says what to check first: the node role mapping.
    let timed_out = deleted
        .iter()
        .find(|c| c.name != launched[0].name)
        .expect("a timed-out NodeClaim");
    let reason = timed_out.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("access entry") && reason.contains("aws-auth"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_delivery_of_the_same_events_launches_once() {
    let p = std::sync::Arc::new(world());
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 20, "1", "2Gi"));
    post(&p, &batch(docs)).await;
    for _ in 0..20 {
        let events = p.bus.take();
        if events.is_empty() {
            break;
        }
        for e in events {
            let tasks: Vec<_> = (0..6)
                .map(|_| {
                    let p = p.clone();
                    let e = e.clone();
                    tokio::spawn(async move {
                        // A lost race is fine; the platform would redeliver.
                        let _ = deliver(&p, &e).await;
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
        }
    }
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    every_pod_on_one_claim(&launched, 20);
    assert_eq!(
        p.ec2.live_instances().len(),
        launched.len(),
        "no duplicate instance"
    );
}

#[tokio::test]
async fn registered_nodes_survive_the_registration_timeout() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 4, "2", "4Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert!(!launched.is_empty());
    // The agent's heartbeat: no pending pods, the new nodes with their
    // NodeClaim label.
    let nodes: Vec<serde_json::Value> = launched
        .iter()
        .map(|c| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("ip-{}", c.name), "labels": {"flotilla.io/nodeclaim": c.name}},
                "status": {"allocatable": {"cpu": "8", "memory": "30Gi", "pods": "58"}}
            })
        })
        .collect();
    let accepted = post(&p, &batch(nodes)).await;
    assert_eq!(accepted.pending_pods, 0);
    assert_eq!(accepted.registered, launched.len());
    assert!(p.bus.take().is_empty(), "a heartbeat schedules nothing");
    p.clock.advance_millis(16 * 60_000);
    let r = sweep(&p).await;
    assert!(r.registration_timeouts.is_empty(), "{r:?}");
    assert_eq!(p.ec2.live_instances().len(), launched.len());
    assert_eq!(
        claims_in(&p, NodeClaimState::Registered).await.len(),
        launched.len()
    );
}

#[tokio::test]
async fn ec2_notices_drain_interrupted_nodes_and_end_terminated_ones() {
    use flotilla_service::sweep::{on_ec2_notice, Ec2Notice};
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 4, "2", "4Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    let a = launched[0].instance.clone().expect("instance");
    let notice = Ec2Notice::parse(
        "EC2 Spot Instance Interruption Warning",
        &serde_json::json!({"instance-id": a.instance_id, "instance-action": "terminate"}),
    )
    .expect("parsed");
    let r = on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &notice)
        .await
        .expect("notice");
    assert_eq!(r.actions, 2, "cordon + drain");
    // Delivered twice: the same actions, stored once.
    let r = on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &notice)
        .await
        .expect("notice");
    assert_eq!(r.actions, 0);
    let ice = flotilla_service::schedule::unavailable_offerings(
        &p.store,
        "us-west-2",
        p.clock.now_secs(),
    )
    .await
    .expect("ice");
    assert!(ice.contains(&(a.instance_type.clone(), a.zone.clone(), CapacityType::Spot)));
    // Then EC2 terminates it.
    p.ec2
        .set_instance_state(&a.instance_id, InstanceState::Terminated);
    let notice = Ec2Notice::parse(
        "EC2 Instance State-change Notification",
        &serde_json::json!({"instance-id": a.instance_id, "state": "terminated"}),
    )
    .expect("parsed");
    let r = on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &notice)
        .await
        .expect("notice");
    assert_eq!(r.deleted, vec![launched[0].name.clone()]);
    assert!(Ec2Notice::parse("EC2 AMI Available", &serde_json::json!({})).is_none());
}

#[tokio::test]
async fn thousand_pods_in_memory_timing() {
    // The same 1,000-pod flow as tests/pipeline_moto.rs, all in memory:
    // what the stages cost without a network (printed for the README).
    let p = world();
    let mut docs = node_pool_and_class();
    for (i, (cpu, mem)) in [
        ("250m", "512Mi"),
        ("1", "2Gi"),
        ("2", "4Gi"),
        ("500m", "3Gi"),
    ]
    .iter()
    .enumerate()
    {
        docs.extend(pods(&format!("app{i}"), 250, cpu, mem));
    }
    let started = std::time::Instant::now();
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let elapsed = started.elapsed();
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    every_pod_on_one_claim(&launched, 1000);
    eprintln!(
        "{{\"measure\":\"intake-to-createfleet\",\"pods\":1000,\"nodeClaims\":{},\"totalMs\":{},\"store\":\"memory\"}}",
        launched.len(),
        elapsed.as_millis()
    );
}

#[tokio::test]
async fn launches_that_can_never_succeed_fail_a_bounded_number_of_times() {
    // No subnets, security groups or AMIs: every launch fails.
    let p = world_with(|b| b.without_defaults());
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 3, "1", "2Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let failed = claims_in(&p, NodeClaimState::Failed).await;
    assert!(!failed.is_empty());
    assert!(
        failed
            .iter()
            .all(|c| c.reason.as_deref().is_some_and(|r| r.contains("subnet"))),
        "{failed:?}"
    );
    // The first run plus at most MAX_REARMS re-schedules.
    let runs: BTreeSet<String> = failed
        .iter()
        .map(|c| c.name.rsplit('-').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        runs.len() as u32,
        1 + flotilla_service::schedule::MAX_REARMS,
        "{runs:?}"
    );
    assert_eq!(p.ec2.create_fleet_calls(), 0);
    // The last failures are reported: every pod unschedulable, with why.
    let results = p
        .store
        .dump()
        .into_iter()
        .filter(|i| i.key.sk.starts_with("RESULT#"))
        .map(|i| {
            serde_json::from_slice::<flotilla_service::records::BatchResult>(&i.body)
                .expect("result")
        })
        .collect::<Vec<_>>();
    let reported: BTreeSet<&str> = results
        .iter()
        .flat_map(|r| r.unschedulable.iter())
        .filter(|(_, why)| why.contains("launch failed") && why.contains("subnet"))
        .map(|(pod, _)| pod.as_str())
        .collect();
    assert_eq!(reported.len(), 3, "{results:?}");
}

#[tokio::test]
async fn a_failed_schedule_run_is_taken_over_by_the_redelivery() {
    let p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 3, "1", "2Gi"));
    let accepted = post(&p, &batch(docs)).await;
    let events = p.bus.take();
    assert_eq!(events.len(), 1);
    // The run fails part-way (the ICE cache query is throttled): the
    // invocation fails and EventBridge redelivers the same event.
    p.store
        .faults()
        .fail_next(ops::STORE_QUERY, PortError::Throttled("slow down".into()));
    assert!(deliver(&p, &events[0]).await.is_err());
    assert!(claims(&p).await.is_empty());
    deliver(&p, &events[0]).await.expect("redelivery");
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    every_pod_on_one_claim(&launched, 3);
    let pointer = p
        .store
        .peek(&flotilla_service::keys::scheduler(CLUSTER))
        .expect("pointer");
    let pointer: flotilla_service::records::SchedulerPointer =
        serde_json::from_slice(&pointer.body).expect("pointer json");
    assert_eq!(pointer.last_completed, Some(accepted.batch_id));
    assert_eq!(pointer.running, None);
}

#[tokio::test]
async fn a_failure_notice_the_launch_could_not_put_is_put_by_the_sweep() {
    // No subnets: every launch fails. The bus refuses the first notice.
    let faults = flotilla_sim::Faults::new();
    let mut p = world_with(|b| b.without_defaults());
    p.bus = std::sync::Arc::new(flotilla_sim::MemBus::with_faults(faults.clone()));
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 1, "1", "2Gi"));
    post(&p, &batch(docs)).await;
    let accepted = p.bus.take();
    for e in &accepted {
        deliver(&p, e).await.expect("scheduled");
    }
    let planned = p.bus.take();
    assert_eq!(planned.len(), 1);
    faults.script(
        ops::BUS_PUT,
        flotilla_sim::Phase::BeforeEffect,
        PortError::Unavailable("injected".into()),
    );
    assert!(deliver(&p, &planned[0]).await.is_err());
    let failed = claims_in(&p, NodeClaimState::Failed).await;
    assert_eq!(failed.len(), 1);
    assert!(failed[0].unannounced, "{failed:?}");
    assert!(p.bus.take().is_empty());

    // EventBridge gave up on the launch event: the sweep says it.
    let report = sweep(&p).await;
    assert_eq!(report.announced, vec![failed[0].name.clone()]);
    let notices = p.bus.take();
    assert!(
        notices
            .iter()
            .any(|e| e.detail_type == "PodsUnschedulable" && e.detail.contains(&failed[0].name)),
        "{notices:?}"
    );
    assert!(claims(&p).await.iter().all(|c| !c.unannounced));
    assert!(sweep(&p).await.announced.is_empty());
    // A late redelivery of the launch event says nothing twice.
    deliver(&p, &planned[0]).await.expect("redelivered");
    assert!(p.bus.take().is_empty());
}
