//! An in-process pipeline over the simulator: the stage services wired
//! through an in-memory bus, with a manual clock.

#![allow(dead_code)]

use std::sync::Arc;

use flotilla_ports::Event;
use flotilla_service::intake::{self, Accepted, Access, Caller, ClusterView};
use flotilla_service::records::{NodeClaimRecord, NodeClaimState};
use flotilla_service::schedule;
use flotilla_service::{sweep, Config, Ports};
use flotilla_sim::{Ec2Sim, ManualClock, MemBus, MemStore};

pub type SimPorts = Ports<Arc<MemStore>, Arc<Ec2Sim>, Arc<MemBus>, Arc<ManualClock>>;

pub const CLUSTER: &str = "demo";
pub const START_MS: i64 = 1_800_000_000_000;
/// The agent's IAM principal, mapped to [`CLUSTER`] (access is deny by
/// default).
pub const AGENT: &str = "arn:aws:sts::123456789012:assumed-role/flotilla-agent/session";

pub fn world() -> SimPorts {
    world_with(|b| b)
}

pub fn world_with(
    f: impl FnOnce(flotilla_sim::Ec2SimBuilder) -> flotilla_sim::Ec2SimBuilder,
) -> SimPorts {
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let ec2 = f(Ec2Sim::builder("us-west-2")
        .cluster(CLUSTER)
        .clock(clock.clone()))
    .build()
    .expect("simulator");
    let config = Config {
        region: "us-west-2".into(),
        node_role: Some("KarpenterNodeRole-demo".into()),
        instance_profile: Some("flotilla-nodes".into()),
        ..Config::default()
    };
    Ports {
        store: Arc::new(MemStore::new()),
        ec2: Arc::new(ec2),
        bus: Arc::new(MemBus::new()),
        clock,
        config,
        access: Access::default().allow(CLUSTER, AGENT),
    }
}

pub fn node_pool_and_class() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}
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
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}]
            }
        }),
    ]
}

pub fn pods(prefix: &str, n: usize, cpu: &str, memory: &str) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{prefix}-{i}"), "namespace": "default"},
                "spec": {"containers": [{"name": "app", "image": "app",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
            })
        })
        .collect()
}

pub fn batch(documents: Vec<serde_json::Value>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "clusterId": CLUSTER,
        "cluster": {
            "name": CLUSTER,
            "endpoint": "https://EXAMPLE.gr7.us-west-2.eks.amazonaws.com",
            "caBundle": "LS0tLS1CRUdJTg==",
            "serviceCidr": "10.100.0.0/16",
            "kubernetesVersion": "1.33"
        },
        "documents": documents,
    }))
    .expect("json")
}

/// The agent's signed identity ([`AGENT`]).
pub fn agent() -> Caller {
    Caller {
        principal: Some(AGENT.into()),
    }
}

/// Intake's answer to the agent posting `body`.
pub async fn try_post(p: &SimPorts, body: &[u8]) -> flotilla_service::Result<Accepted> {
    intake::accept(
        &p.store,
        &p.bus,
        &p.clock,
        &p.config,
        &p.access,
        &agent(),
        body,
    )
    .await
}

pub async fn post(p: &SimPorts, body: &[u8]) -> Accepted {
    try_post(p, body).await.expect("accepted")
}

/// Intake's answer to the agent's `GET /clusters/<cluster>`.
pub async fn try_view(p: &SimPorts, cluster: &str) -> flotilla_service::Result<ClusterView> {
    intake::cluster_view(&p.store, &p.clock, &p.config, &p.access, &agent(), cluster).await
}

/// Deliver one event to its stage, as the Lambdas would (the schedule
/// stage's batching wait advances the manual clock). Returns the error of
/// a failed invocation (the platform would redeliver).
pub async fn deliver(p: &SimPorts, event: &Event) -> Result<(), String> {
    let clock = p.clock.clone();
    flotilla_service::local::dispatch(p, event, &move |ms| {
        clock.advance_millis(ms);
    })
    .await
    .map_err(|e| e.to_string())
}

/// Deliver everything on the bus (and what that produces) until it is
/// quiet; `copies` deliveries of each event (duplicate delivery). Failed
/// invocations are redelivered up to 5 times.
pub async fn drain(p: &SimPorts, copies: usize) {
    for _ in 0..1000 {
        let events = p.bus.take();
        if events.is_empty() {
            return;
        }
        for e in &events {
            for _ in 0..copies {
                let mut tries = 0;
                while let Err(err) = deliver(p, e).await {
                    tries += 1;
                    assert!(tries < 5, "{} failed 5 times: {err}", e.detail_type);
                }
            }
        }
    }
    panic!("the bus never went quiet");
}

pub async fn sweep(p: &SimPorts) -> sweep::SweepReport {
    sweep::sweep(&p.store, &p.ec2, &p.bus, &p.clock, &p.config)
        .await
        .expect("sweep")
}

pub async fn claims(p: &SimPorts) -> Vec<NodeClaimRecord> {
    schedule::node_claims(&p.store, CLUSTER)
        .await
        .expect("claims")
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

pub async fn claims_in(p: &SimPorts, state: NodeClaimState) -> Vec<NodeClaimRecord> {
    claims(p)
        .await
        .into_iter()
        .filter(|c| c.state == state)
        .collect()
}
