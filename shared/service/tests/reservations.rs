//! Capacity reservations across concurrent scheduling runs: the counter in
//! the store is the source of truth, so however many clusters race for a
//! reservation of N instances, exactly N NodeClaims hold it.

mod common;

use std::sync::Arc;

use common::*;
use flotilla_service::intake::Access;
use flotilla_service::records::NodeClaimState;
use flotilla_service::{Config, Ports};
use flotilla_sim::{Ec2Sim, ManualClock, MemBus, MemStore};

const RESERVATION: &str = "cr-0123456789abcdef0";

fn reserved_batch(cluster: &str, count: usize) -> Vec<u8> {
    let mut docs = vec![
        serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "reserved-first"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge", "m5.2xlarge"]}
                ]
            }}}
        }),
        serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole-demo",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
                "capacityReservationSelectorTerms": [{"id": RESERVATION}]
            }
        }),
    ];
    // Each pod needs most of an m5.xlarge: one pod per NodeClaim.
    docs.extend(pods(&format!("{cluster}-job"), count, "3", "10Gi"));
    let mut body: serde_json::Value = serde_json::from_slice(&batch(docs)).expect("json");
    body["clusterId"] = serde_json::json!(cluster);
    serde_json::to_vec(&body).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clusters_never_overbook_a_reservation() {
    const N: u32 = 3;
    const CLUSTERS: usize = 6;
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let ec2 = Arc::new(
        Ec2Sim::builder("us-west-2")
            .cluster(CLUSTER)
            .clock(clock.clone())
            .capacity_reservation(flotilla_sim::ec2::odcr(
                RESERVATION,
                "m5.xlarge",
                "us-west-2a",
                N,
            ))
            .build()
            .expect("simulator"),
    );
    let store = Arc::new(MemStore::new());
    let world = |i: usize| Ports {
        store: store.clone(),
        ec2: ec2.clone(),
        bus: Arc::new(MemBus::new()),
        clock: clock.clone(),
        config: Config {
            region: "us-west-2".into(),
            reserved_capacity: true,
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            ..Config::default()
        },
        access: Access::default().allow(&format!("c{i}"), AGENT),
    };
    let worlds: Vec<Arc<SimPorts>> = (0..CLUSTERS).map(|i| Arc::new(world(i))).collect();
    for (i, p) in worlds.iter().enumerate() {
        try_post(p, &reserved_batch(&format!("c{i}"), 2))
            .await
            .expect("accepted");
    }
    // Every cluster schedules at the same moment.
    clock.advance_millis(20_000);
    let tasks: Vec<_> = worlds
        .iter()
        .map(|p| {
            let p = p.clone();
            tokio::spawn(async move {
                for e in p.bus.take() {
                    deliver(&p, &e).await.expect("schedule");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let mut reserved = 0;
    let mut total = 0;
    for i in 0..CLUSTERS {
        let claims = flotilla_service::schedule::node_claims(&store, &format!("c{i}"))
            .await
            .expect("claims");
        for (_, c) in claims {
            assert_eq!(c.state, NodeClaimState::Pending);
            total += c.plan.pods.len();
            if c.reservation.is_some() {
                assert_eq!(
                    c.plan
                        .labels
                        .get("karpenter.sh/capacity-type")
                        .map(String::as_str),
                    Some("reserved")
                );
                reserved += 1;
            }
        }
    }
    assert_eq!(total, CLUSTERS * 2, "every pod planned");
    assert_eq!(reserved, N, "exactly N NodeClaims hold the reservation");
    let counter =
        flotilla_ports::Store::get(&*store, &flotilla_service::keys::reservation(RESERVATION))
            .await
            .expect("get")
            .expect("counter");
    assert_eq!(counter.counter, i64::from(N));
}

#[tokio::test]
async fn node_claims_planned_into_a_reservation_launch_into_it() {
    let p = reserved_world(flotilla_sim::ec2::odcr(
        RESERVATION,
        "m5.xlarge",
        "us-west-2a",
        2,
    ));
    let ec2 = p.ec2.clone();
    let mut body: serde_json::Value =
        serde_json::from_slice(&reserved_batch(CLUSTER, 3)).expect("json");
    body["clusterId"] = serde_json::json!(CLUSTER);
    post(&p, &serde_json::to_vec(&body).expect("json")).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert_eq!(launched.len(), 3, "{:?}", claims(&p).await);
    // The launch stage's catalog offers the reservation the plan chose:
    // two NodeClaims run in it, the third on demand.
    let in_reservation: Vec<_> = ec2
        .live_instances()
        .into_iter()
        .filter(|i| i.capacity_reservation_id.as_deref() == Some(RESERVATION))
        .collect();
    assert_eq!(in_reservation.len(), 2);
    let reserved_claims = launched.iter().filter(|c| c.reservation.is_some()).count();
    assert_eq!(reserved_claims, 2);
}

/// A world with one reservation, the ReservedCapacity gate on.
fn reserved_world(reservation: flotilla_core::model::CapacityReservation) -> SimPorts {
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let ec2 = Arc::new(
        Ec2Sim::builder("us-west-2")
            .cluster(CLUSTER)
            .clock(clock.clone())
            .capacity_reservation(reservation)
            .build()
            .expect("simulator"),
    );
    Ports {
        store: Arc::new(MemStore::new()),
        ec2,
        bus: Arc::new(MemBus::new()),
        clock,
        config: Config {
            region: "us-west-2".into(),
            reserved_capacity: true,
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            ..Config::default()
        },
        access: Access::default().allow(CLUSTER, AGENT),
    }
}

/// Launch `n` NodeClaims into the reservation and register their nodes
/// (the agent's heartbeat), so only the reservation policy ends them.
async fn launched_and_registered(p: &SimPorts, n: usize) -> Vec<String> {
    post(p, &reserved_batch(CLUSTER, n)).await;
    drain(p, 1).await;
    let launched = claims_in(p, NodeClaimState::Launched).await;
    assert_eq!(launched.len(), n);
    assert!(launched
        .iter()
        .all(|c| c.reservation.as_deref() == Some(RESERVATION)));
    let nodes: Vec<serde_json::Value> = launched
        .iter()
        .map(|c| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{}", c.name), "labels": {"flotilla.io/nodeclaim": c.name}},
                "status": {"allocatable": {"cpu": "4", "memory": "15Gi", "pods": "58"}}
            })
        })
        .collect();
    let accepted = post(p, &batch(nodes)).await;
    assert_eq!(accepted.registered, n);
    launched.into_iter().map(|c| c.name).collect()
}

async fn actions(p: &SimPorts) -> Vec<serde_json::Value> {
    try_view(p, CLUSTER).await.expect("view").actions
}

async fn reservation_counter(p: &SimPorts) -> i64 {
    use flotilla_ports::Store;
    p.store
        .get(&flotilla_service::keys::reservation(RESERVATION))
        .await
        .expect("get")
        .map_or(0, |i| i.counter)
}

#[tokio::test]
async fn capacity_blocks_drain_ten_minutes_before_ec2_reclaims_then_free_their_slots() {
    // START_MS is 2027-01-15T08:00:00Z; the block ends at 10:00, EC2 starts
    // terminating at 09:30, Flotilla drains from 09:20.
    let p = reserved_world(flotilla_sim::ec2::capacity_block(
        RESERVATION,
        "m5.xlarge",
        "us-west-2a",
        2,
        "2027-01-15T10:00:00Z",
    ));
    let names = launched_and_registered(&p, 2).await;
    assert_eq!(reservation_counter(&p).await, 2);
    let at = |hh_mm: (i64, i64)| START_MS + ((hh_mm.0 - 8) * 3600 + hh_mm.1 * 60) * 1000;

    // 09:19:59: nothing yet.
    p.clock.set_millis(at((9, 20)) - 1000);
    sweep(&p).await;
    assert!(actions(&p).await.is_empty());

    // 09:20: cordon and drain each node, due when EC2 starts terminating.
    p.clock.set_millis(at((9, 20)));
    sweep(&p).await;
    let acts = actions(&p).await;
    assert_eq!(acts.len(), 4, "{acts:#?}");
    for name in &names {
        let node = format!("node-{name}");
        let mut kinds: Vec<&str> = acts
            .iter()
            .filter(|a| a["node"] == node.as_str())
            .filter_map(|a| a["kind"].as_str())
            .collect();
        kinds.sort_unstable();
        assert_eq!(kinds, ["cordon", "drain"], "{node}: {acts:#?}");
    }
    let deadline = (at((9, 30)) / 1000).to_string();
    assert!(
        acts.iter().all(|a| a.to_string().contains(&deadline)),
        "deadline 09:30: {acts:#?}"
    );
    // A second sweep stores nothing new; the counter is untouched.
    sweep(&p).await;
    assert_eq!(actions(&p).await.len(), 4);
    assert_eq!(reservation_counter(&p).await, 2);

    // 10:00: the block ends, EC2 has ended its instances; the slots are
    // freed once, however often the sweep runs.
    p.clock.set_millis(at((10, 0)));
    assert!(p.ec2.expire_reservation(RESERVATION));
    sweep(&p).await;
    sweep(&p).await;
    assert_eq!(reservation_counter(&p).await, 0);
    assert!(claims(&p).await.iter().all(|c| !c.state.is_live()));
}

#[tokio::test]
async fn an_instance_left_by_its_odcr_is_relabelled_on_demand_and_its_slot_freed() {
    let p = reserved_world(flotilla_sim::ec2::odcr(
        RESERVATION,
        "m5.xlarge",
        "us-west-2a",
        1,
    ));
    let names = launched_and_registered(&p, 1).await;
    sweep(&p).await;
    assert!(actions(&p).await.is_empty(), "an active ODCR needs nothing");
    assert_eq!(reservation_counter(&p).await, 1);

    // The ODCR is cancelled; the instance keeps running as on-demand.
    assert!(p.ec2.cancel_reservation(RESERVATION));
    assert_eq!(p.ec2.live_instances().len(), 1);
    let r = sweep(&p).await;
    assert_eq!(r.reservations_freed, names);
    let acts = actions(&p).await;
    assert_eq!(acts.len(), 1, "{acts:#?}");
    let text = acts[0].to_string();
    assert!(text.contains("on-demand"), "{text}");
    assert!(
        text.contains("karpenter.k8s.aws/capacity-reservation-id"),
        "reservation labels removed: {text}"
    );
    assert_eq!(reservation_counter(&p).await, 0);
    // Still live: the node runs on as on-demand capacity.
    assert_eq!(claims_in(&p, NodeClaimState::Registered).await.len(), 1);
    // Idempotent.
    let r = sweep(&p).await;
    assert!(r.reservations_freed.is_empty());
    assert_eq!(actions(&p).await.len(), 1);
    assert_eq!(reservation_counter(&p).await, 0);
}
