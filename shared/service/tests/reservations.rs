//! Capacity reservations across concurrent scheduling runs: the counter in
//! the store is the source of truth, so however many clusters race for a
//! reservation of N instances, exactly N NodeClaims hold it.

mod common;

use std::sync::Arc;

use common::*;
use flotilla_service::intake::{self, Access, Caller};
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
    let world = |_: usize| Ports {
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
        access: Access::default(),
    };
    let worlds: Vec<Arc<SimPorts>> = (0..CLUSTERS).map(|i| Arc::new(world(i))).collect();
    for (i, p) in worlds.iter().enumerate() {
        intake::accept(
            &p.store,
            &p.bus,
            &p.clock,
            &p.config,
            &p.access,
            &Caller { principal: None },
            &reserved_batch(&format!("c{i}"), 2),
        )
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
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let ec2 = Arc::new(
        Ec2Sim::builder("us-west-2")
            .cluster(CLUSTER)
            .clock(clock.clone())
            .capacity_reservation(flotilla_sim::ec2::odcr(
                RESERVATION,
                "m5.xlarge",
                "us-west-2a",
                2,
            ))
            .build()
            .expect("simulator"),
    );
    let p = Ports {
        store: Arc::new(MemStore::new()),
        ec2: ec2.clone(),
        bus: Arc::new(MemBus::new()),
        clock,
        config: Config {
            region: "us-west-2".into(),
            reserved_capacity: true,
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            ..Config::default()
        },
        access: Access::default(),
    };
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
