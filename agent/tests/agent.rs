//! The agent against a loopback fake API server and a fake intake: watch →
//! batch → signed gzip'd post, retries, actions and registrations, drains
//! that respect a PodDisruptionBudget, and leader handover.

mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use common::{eventually, FakeApi, FakeIntake};
use flotilla_agent::config::{ClusterMeta, Protocol, Settings};
use flotilla_agent::intake::{IntakeClient, RetryPolicy};
use flotilla_agent::leader::LeaseLock;
use flotilla_agent::metrics::Metrics;
use flotilla_agent::run::{self, unix_now, Agent};
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn retry() -> RetryPolicy {
    RetryPolicy {
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(40),
        max_times: 4,
        timeout: Duration::from_secs(10),
    }
}

fn settings() -> Settings {
    Settings {
        idle: Duration::from_millis(50),
        max: Duration::from_millis(400),
        heartbeat: Duration::from_secs(30),
        results: Duration::from_millis(100),
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        lease_retry: Duration::from_millis(100),
        part_hold: Duration::from_secs(2),
        retry: retry(),
        ..Settings::default()
    }
}

fn intake_client(intake: &FakeIntake) -> IntakeClient {
    flotilla_agent::install_crypto_provider();
    let creds = Credentials::new("AKIDTEST", "secret", Some("token".into()), None, "test");
    IntakeClient::new(
        &intake.url(),
        "us-west-2",
        SharedCredentialsProvider::new(creds),
        retry(),
    )
    .expect("intake client")
}

fn meta() -> ClusterMeta {
    ClusterMeta {
        name: "demo".into(),
        endpoint: "https://EXAMPLE.gr7.us-west-2.eks.amazonaws.com".into(),
        ca_bundle: "LS0tLS1CRUdJTg==".into(),
        service_cidr: "10.100.0.0/16".into(),
        kubernetes_version: "1.33".into(),
    }
}

struct Running {
    task: JoinHandle<anyhow::Result<()>>,
    stop: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

impl Running {
    async fn shutdown(self) {
        self.stop.send_replace(true);
        let r = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the agent stops within 5 s")
            .expect("agent task");
        r.expect("agent ran cleanly");
    }
}

fn start(api: &FakeApi, intake: &FakeIntake, identity: &str, settings: Settings) -> Running {
    let metrics = Arc::new(Metrics::new());
    let agent = Agent {
        cluster_id: "demo".into(),
        cluster: meta(),
        settings,
        client: api.client(),
        intake: intake_client(intake),
        metrics: metrics.clone(),
        identity: identity.into(),
        lease_namespace: "flotilla-system".into(),
        lease_name: "flotilla-agent".into(),
    };
    let (stop, rx) = watch::channel(false);
    Running {
        task: tokio::spawn(run::run(agent, rx)),
        stop,
        metrics,
    }
}

fn node(name: &str, extra_labels: Value) -> Value {
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": "us-west-2a",
        "node.kubernetes.io/instance-type": "m5.large",
    });
    common::merge(&mut labels, &extra_labels);
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
            "managedFields": [{"manager": "kubelet"}]},
        "spec": {"providerID": format!("aws:///us-west-2a/i-0{name}")},
        "status": {"allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"},
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "images": [{"names": ["big"], "sizeBytes": 1}]}
    })
}

fn pending_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx",
            "env": [{"name": "A", "value": "b"}],
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

fn bound_pod(name: &str, node: &str, daemon: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx",
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]},
        "status": {"phase": "Running"}
    });
    if daemon {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": "logs", "uid": "u1", "controller": true}]);
    }
    p
}

/// NodePool, EC2NodeClass, a node with a pod, a DaemonSet, a StorageClass.
fn cluster(api: &FakeApi) {
    api.put(
        "nodepools",
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]}}}}),
    );
    api.put(
        "ec2nodeclasses",
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole-demo",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]},
            "status": {"subnets": []}}),
    );
    api.put("nodes", node("n1", json!({})));
    api.put("pods", bound_pod("running-0", "n1", false));
    api.put(
        "daemonsets",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "logs", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "logs"}},
                "template": {"metadata": {"labels": {"app": "logs"}},
                    "spec": {"containers": [{"name": "logs", "image": "fluent-bit",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}),
    );
    api.put(
        "storageclasses",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}),
    );
}

fn empty_view() -> Value {
    json!({"clusterId": "demo", "nodeClaims": [], "actions": []})
}

fn lists(api: &FakeApi, collection: &str) -> usize {
    api.log()
        .iter()
        .filter(|l| l.starts_with(&format!("GET {collection}?")) && !l.contains("watch=true"))
        .count()
}

fn watches(api: &FakeApi, collection: &str) -> usize {
    api.log()
        .iter()
        .filter(|l| l.starts_with(&format!("GET {collection}?")) && l.contains("watch=true"))
        .count()
}

fn lease_holder(api: &FakeApi) -> Option<String> {
    api.get("leases", "flotilla-system", "flotilla-agent")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_are_watched_batched_and_posted_signed_and_gzipped() {
    let api = FakeApi::start().await;
    let intake = FakeIntake::start(empty_view()).await;
    cluster(&api);
    api.put("pods", pending_pod("web-0"));
    api.put("pods", pending_pod("web-1"));
    let agent = start(&api, &intake, "agent-a", settings());

    eventually(10, "the first batch", || {
        (!intake.batches().is_empty()).then_some(())
    })
    .await;
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());
    assert_eq!(intake.pending_counts()[0], 2);
    let first = &intake.batches()[0];
    assert_eq!(first["clusterId"], "demo");
    assert_eq!(first["cluster"]["serviceCidr"], "10.100.0.0/16");
    let kinds: Vec<&str> = first["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    for k in [
        "NodePool",
        "EC2NodeClass",
        "Node",
        "Pod",
        "DaemonSet",
        "StorageClass",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    // Trimmed: no managedFields, node images, container env or CRD status.
    let text = first.to_string();
    for gone in ["managedFields", "\"images\"", "\"env\"", "\"subnets\""] {
        assert!(!text.contains(gone), "{gone} sent");
    }

    // A new pending pod opens a window: a second batch with all three.
    api.put("pods", pending_pod("web-2"));
    eventually(10, "a batch with the new pod", || {
        intake.pending_counts().contains(&3).then_some(())
    })
    .await;
    // A pod getting scheduled is no reason to post.
    let posted = intake.batches().len();
    let mut bound = pending_pod("web-0");
    bound["spec"]["nodeName"] = json!("n1");
    bound["status"] = json!({"phase": "Running"});
    api.put("pods", bound);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(intake.batches().len(), posted);

    // Informers: one LIST per kind, then watches; no polling.
    for c in [
        "/api/v1/pods",
        "/api/v1/nodes",
        "/apis/karpenter.sh/v1/nodepools",
        "/apis/apps/v1/daemonsets",
    ] {
        assert_eq!(lists(&api, c), 1, "LISTs of {c}: {:?}", api.log());
        assert!(watches(&api, c) >= 1, "no WATCH of {c}");
    }
    // CRDs the cluster does not have (Provisioner, NodeOverlay) did not
    // block the agent.
    assert!(api.log().iter().any(|l| l.contains("/provisioners")));

    let text = agent.metrics.encode();
    assert!(
        text.contains("flotilla_agent_batches_posted_total{outcome=\"accepted\"}"),
        "{text}"
    );
    assert!(text.contains("flotilla_agent_pods_pending 2"), "{text}");
    assert_eq!(lease_holder(&api).as_deref(), Some("agent-a"));
    agent.shutdown().await;
    // Released on the way out.
    assert_eq!(lease_holder(&api), None);
}

fn pdb(name: &str, allowed: u32) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 2,
            "expectedPods": 3, "observedGeneration": 1,
            "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                "message": "", "lastTransitionTime": "2026-11-25T06:00:00Z"}]}
    })
}

/// What the disruption stage reads goes out with every post: the
/// PodDisruptionBudgets (watched in all namespaces, with the controller's
/// counts), the pods' do-not-disrupt / deletion-cost annotations and
/// creation / start times, and the nodes' do-not-disrupt and template-hash
/// annotations; every other annotation is still left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdbs_and_what_disruption_reads_go_out_with_every_post() {
    let api = FakeApi::start().await;
    let intake = FakeIntake::start(empty_view()).await;
    cluster(&api);
    api.put("poddisruptionbudgets", pdb("web", 1));
    let mut n2 = node("n2", json!({"karpenter.sh/nodepool": "default"}));
    n2["metadata"]["creationTimestamp"] = json!("2026-11-25T05:00:00Z");
    n2["metadata"]["annotations"] = json!({
        "karpenter.sh/do-not-disrupt": "true",
        "karpenter.sh/nodepool-hash": "4011458921795164453",
        "karpenter.sh/nodepool-hash-version": "flotilla-v1",
        "node.alpha.kubernetes.io/ttl": "0"});
    api.put("nodes", n2);
    let mut pinned = bound_pod("batch-0", "n2", false);
    pinned["metadata"]["creationTimestamp"] = json!("2026-11-25T05:10:00Z");
    pinned["metadata"]["annotations"] = json!({
        "karpenter.sh/do-not-disrupt": "true",
        "controller.kubernetes.io/pod-deletion-cost": "-5",
        "prometheus.io/scrape": "true"});
    pinned["status"]["startTime"] = json!("2026-11-25T05:10:03Z");
    pinned["status"]["podIP"] = json!("10.0.0.9");
    api.put("pods", pinned);
    api.put("pods", pending_pod("web-0"));
    let agent = start(&api, &intake, "agent-a", settings());

    eventually(10, "the first batch", || {
        (!intake.batches().is_empty()).then_some(())
    })
    .await;
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());
    let doc = |batch: &Value, kind: &str, name: &str| -> Value {
        batch["documents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name} in {batch}"))
    };
    let first = intake.batches()[0].clone();
    assert_eq!(
        doc(&first, "PodDisruptionBudget", "web"),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3}})
    );
    let pod = doc(&first, "Pod", "batch-0");
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"karpenter.sh/do-not-disrupt": "true",
            "controller.kubernetes.io/pod-deletion-cost": "-5"})
    );
    assert_eq!(pod["metadata"]["creationTimestamp"], "2026-11-25T05:10:00Z");
    assert_eq!(
        pod["status"],
        json!({"phase": "Running", "startTime": "2026-11-25T05:10:03Z"})
    );
    let node = doc(&first, "Node", "n2");
    assert_eq!(
        node["metadata"]["annotations"],
        json!({"karpenter.sh/do-not-disrupt": "true",
            "karpenter.sh/nodepool-hash": "4011458921795164453",
            "karpenter.sh/nodepool-hash-version": "flotilla-v1"})
    );
    assert_eq!(
        node["metadata"]["creationTimestamp"],
        "2026-11-25T05:00:00Z"
    );
    // Nodes without such annotations send none.
    assert!(doc(&first, "Node", "n1")["metadata"]
        .get("annotations")
        .is_none());
    // Intake reads the budget.
    assert_eq!(intake.parsed_pdbs()[0], vec!["default/web".to_string()]);

    // The budget changes and a second one appears: the next post carries both,
    // as they are now (the watch, not a re-list).
    api.put("poddisruptionbudgets", pdb("web", 0));
    let mut other = pdb("db", 0);
    other["metadata"]["namespace"] = json!("data");
    api.put("poddisruptionbudgets", other);
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.put("pods", pending_pod("web-1"));
    eventually(10, "a batch with the new pod", || {
        intake.pending_counts().contains(&2).then_some(())
    })
    .await;
    let last = intake.batches().last().cloned().expect("a batch");
    assert_eq!(
        doc(&last, "PodDisruptionBudget", "web")["status"]["disruptionsAllowed"],
        0
    );
    assert_eq!(
        doc(&last, "PodDisruptionBudget", "db")["metadata"]["namespace"],
        "data"
    );
    assert_eq!(
        intake.parsed_pdbs().last().cloned().unwrap_or_default(),
        vec!["data/db".to_string(), "default/web".to_string()]
    );
    // One LIST of PodDisruptionBudgets in all namespaces, then a WATCH.
    let c = "/apis/policy/v1/poddisruptionbudgets";
    assert_eq!(lists(&api, c), 1, "{:?}", api.log());
    assert!(watches(&api, c) >= 1, "no WATCH of {c}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_is_counted_and_its_pods_go_out_with_the_next_post() {
    let api = FakeApi::start().await;
    let intake = FakeIntake::start(empty_view()).await;
    cluster(&api);
    api.put("pods", pending_pod("web-0"));
    api.put("pods", pending_pod("web-1"));
    // The Function URL refuses the first post (a missing permission,
    // fixed meanwhile); nothing changes in the cluster afterwards, and the
    // heartbeat (30 s) is far off.
    intake.fail_next_batches(&[403]);
    let agent = start(&api, &intake, "agent-a", settings());

    // Intake has the body before the agent has read the answer and
    // counted it: wait for both.
    eventually(10, "the post after the refusal, counted", || {
        (!intake.batches().is_empty()
            && agent
                .metrics
                .encode()
                .contains("flotilla_agent_batches_posted_total{outcome=\"accepted\"} 1"))
        .then_some(())
    })
    .await;
    let posts = intake
        .log()
        .iter()
        .filter(|l| *l == "POST /changes")
        .count();
    assert_eq!(posts, 2, "{:?}", intake.log());
    // The next successful post carries the refused post's pods.
    assert_eq!(intake.pending_counts(), [2]);
    let text = agent.metrics.encode();
    for line in [
        "flotilla_agent_batches_posted_total{outcome=\"forbidden\"} 1",
        "flotilla_agent_batches_posted_total{outcome=\"accepted\"} 1",
        "flotilla_agent_intake_forbidden_total 1",
        // 403 is final for the request: not retried within it.
        "flotilla_agent_intake_retries_total 0",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_5xx_and_throttling_are_retried_and_4xx_is_not() {
    let intake = FakeIntake::start(empty_view()).await;
    let metrics = Arc::new(Metrics::new());
    let client = intake_client(&intake).with_metrics(metrics.clone());
    let meta = serde_json::to_vec(&meta()).expect("meta");
    let body = flotilla_agent::batch::assemble("demo", &meta, &[], &[], 1 << 20)
        .expect("body")
        .body;

    intake.fail_next_batches(&[503, 429, 500]);
    let accepted = client
        .post_batch(&body)
        .await
        .expect("accepted after retries");
    assert_eq!(accepted.cluster_id, "demo");
    let posts = |i: &FakeIntake| i.log().iter().filter(|l| *l == "POST /batches").count();
    assert_eq!(posts(&intake), 4);
    assert!(metrics
        .encode()
        .contains("flotilla_agent_intake_retries_total 3"));

    intake.fail_next_batches(&[400]);
    let e = client.post_batch(&body).await.expect_err("400 is final");
    assert_eq!(e.status(), Some(400));
    assert_eq!(posts(&intake), 5);

    // Past the retry budget: the error comes back.
    intake.fail_next_batches(&[503; 5]);
    let e = client.post_batch(&body).await.expect_err("gives up");
    assert_eq!(e.status(), Some(503));
    assert_eq!(posts(&intake), 10);
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());

    // The fake recomputes the signature: a wrong secret is refused (403,
    // not retried).
    let forged = IntakeClient::new(
        &intake.url(),
        "us-west-2",
        SharedCredentialsProvider::new(Credentials::new(
            "AKIDTEST",
            "not-the-secret",
            Some("token".into()),
            None,
            "test",
        )),
        retry(),
    )
    .expect("client");
    let e = forged.post_batch(&body).await.expect_err("refused");
    assert_eq!(e.status(), Some(403));
    assert_eq!(posts(&intake), 11);
    assert!(
        intake
            .problems()
            .iter()
            .any(|p| p.contains("signature mismatch")),
        "{:?}",
        intake.problems()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_and_actions_are_applied_then_acknowledged() {
    let api = FakeApi::start().await;
    cluster(&api);
    api.put("nodes", node("n2", json!({})));
    api.put(
        "nodes",
        node(
            "n3",
            json!({"karpenter.sh/capacity-type": "reserved",
                "karpenter.k8s.aws/capacity-reservation-id": "cr-1",
                "karpenter.k8s.aws/capacity-reservation-type": "default"}),
        ),
    );
    let now = unix_now();
    let action = |id: &str, kind: &str, node: &str| {
        json!({"id": id, "kind": kind, "node": node, "reservationId": "cr-1",
            "deadline": now + 600, "reason": "test", "createdAt": now - 5})
    };
    let mut relabel = action("b2", "relabel", "n3");
    relabel["setLabels"] = json!({"karpenter.sh/capacity-type": "on-demand"});
    relabel["removeLabels"] = json!([
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type"
    ]);
    let view = json!({
        "clusterId": "demo",
        "nodeClaims": [{"name": "c1", "nodePool": "default", "state": "Launched",
            "instanceId": "i-0n2", "labels": {"team": "a"},
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], "pods": 1},
            {"name": "c9", "nodePool": "default", "state": "Pending", "labels": {}, "pods": 1}],
        "actions": [action("a1", "cordon", "n1"), relabel, action("c3", "freeReservation", "n3"),
            {"id": "d4", "kind": "explode"}]
    });
    let intake = FakeIntake::start(view).await;
    let agent = start(&api, &intake, "agent-a", settings());

    eventually(10, "four acks", || (intake.acks().len() >= 4).then_some(())).await;
    let acks = intake.acks();
    let outcome = |id: &str| {
        acks.iter()
            .find(|a| a["id"] == id)
            .map(|a| a["outcome"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(outcome("a1").as_deref(), Some("done"));
    assert_eq!(outcome("b2").as_deref(), Some("done"));
    assert_eq!(outcome("c3").as_deref(), Some("skipped"));
    assert_eq!(outcome("d4").as_deref(), Some("skipped"));

    let n1 = api.get("nodes", "", "n1").expect("n1");
    assert_eq!(n1["spec"]["unschedulable"], true);
    let n3 = api.get("nodes", "", "n3").expect("n3");
    assert_eq!(
        n3["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "on-demand"
    );
    assert!(n3["metadata"]["labels"]
        .get("karpenter.k8s.aws/capacity-reservation-id")
        .is_none());
    assert!(n3["metadata"]["labels"]
        .get("karpenter.k8s.aws/capacity-reservation-type")
        .is_none());
    // The node of NodeClaim c1 (found by instance id) got its labels and taints.
    let n2 = eventually(5, "n2 registered", || {
        api.get("nodes", "", "n2")
            .filter(|n| n["metadata"]["labels"]["flotilla.io/registered"] == "true")
    })
    .await;
    assert_eq!(n2["metadata"]["labels"]["team"], "a");
    assert_eq!(n2["metadata"]["labels"]["flotilla.io/nodeclaim"], "c1");
    assert_eq!(
        n2["spec"]["taints"],
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    );

    // Nothing is applied or acknowledged twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(intake.acks().len(), 4);
    let n2_patches = api.patches().iter().filter(|(n, _)| n == "n2").count();
    assert_eq!(n2_patches, 1);
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());
    let text = agent.metrics.encode();
    assert!(
        text.contains("flotilla_agent_actions_applied_total{kind=\"cordon\",outcome=\"done\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("flotilla_agent_action_latency_seconds_count{kind=\"cordon\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("flotilla_agent_nodes_registered_total 1"),
        "{text}"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drains_respect_pod_disruption_budgets_until_the_deadline() {
    let api = FakeApi::start().await;
    cluster(&api);
    api.put("nodes", node("n2", json!({})));
    // n1: web-0 refused twice by its PDB, then evicted; the DaemonSet pod stays.
    api.put("pods", bound_pod("web-0", "n1", false));
    api.put("pods", bound_pod("logs-n1", "n1", true));
    api.script_evictions("default", "web-0", &[429, 429]);
    // n2: its PDB never allows it; the deadline passes.
    api.put("pods", bound_pod("db-0", "n2", false));
    api.script_evictions("default", "db-0", &[429; 1000]);
    let now = unix_now();
    let view = json!({"clusterId": "demo", "nodeClaims": [], "actions": [
        {"id": "aa", "kind": "drain", "node": "n1", "reservationId": "cr-1", "deadline": now + 120,
         "reason": "capacity block ends", "createdAt": now},
        {"id": "bb", "kind": "drain", "node": "n2", "reservationId": "cr-1", "deadline": now + 3,
         "reason": "capacity block ends", "createdAt": now}]});
    let intake = FakeIntake::start(view).await;
    // running-0 on n1 is evicted at the first try.
    let agent = start(&api, &intake, "agent-a", settings());

    eventually(10, "both drains acknowledged", || {
        (intake.acks().len() >= 2).then_some(())
    })
    .await;
    let acks = intake.acks();
    let aa = acks.iter().find(|a| a["id"] == "aa").expect("aa");
    assert_eq!(aa["outcome"], "done", "{aa}");
    let bb = acks.iter().find(|a| a["id"] == "bb").expect("bb");
    assert_eq!(bb["outcome"], "failed", "{bb}");
    assert!(
        bb["message"]
            .as_str()
            .unwrap_or("")
            .contains("default/db-0"),
        "{bb}"
    );

    let evictions = |pod: &str| {
        api.log()
            .iter()
            .filter(|l| {
                l.starts_with(&format!(
                    "POST /api/v1/namespaces/default/pods/{pod}/eviction"
                ))
            })
            .count()
    };
    assert_eq!(evictions("web-0"), 3);
    assert_eq!(evictions("running-0"), 1);
    assert_eq!(evictions("logs-n1"), 0);
    assert!(evictions("db-0") >= 1);
    assert!(api.get("pods", "default", "web-0").is_none());
    assert!(api.get("pods", "default", "logs-n1").is_some());
    assert!(api.get("pods", "default", "db-0").is_some());
    for n in ["n1", "n2"] {
        assert_eq!(
            api.get("nodes", "", n).expect("node")["spec"]["unschedulable"],
            true
        );
    }
    // Counted once intake's answer to the ack is in.
    eventually(5, "the failed drain counted", || {
        agent
            .metrics
            .encode()
            .contains("flotilla_agent_actions_applied_total{kind=\"drain\",outcome=\"failed\"} 1")
            .then_some(())
    })
    .await;
    agent.shutdown().await;

    // Least privilege: infra/agent/rbac.yaml allows every call the agent
    // made (informers, cordon patches, evictions, the Lease), and this run
    // used every permission it grants.
    let grants = common::rbac_grants();
    let mut used = std::collections::BTreeSet::new();
    for request in api.log() {
        let Some(ok) = common::allowed(&grants, &request) else {
            panic!("not an API call: {request}");
        };
        assert!(ok, "rbac.yaml does not allow {request}");
        let (group, resource, verb, _, _) = common::needed(&request).expect("needed");
        used.insert((group, resource, verb));
    }
    // The CRDs this fake cluster lacks are listed (404) but never watched.
    let listed: Vec<_> = used
        .iter()
        .filter(|(_, _, v)| v == "list")
        .map(|(g, r, _)| (g.clone(), r.clone(), "watch".to_string()))
        .collect();
    used.extend(listed);
    let granted: std::collections::BTreeSet<_> = grants
        .iter()
        .map(|g| (g.group.clone(), g.resource.clone(), g.verb.clone()))
        .collect();
    assert_eq!(
        granted,
        used,
        "granted but never used: {:?}",
        granted.difference(&used).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_renewed_is_taken_over_after_its_duration_and_not_before() {
    let api = FakeApi::start().await;
    let leases = || kube::Api::<Lease>::namespaced(api.client(), "flotilla-system");
    let a = LeaseLock::new(leases(), "flotilla-agent", "a", Duration::from_secs(1));
    let b = LeaseLock::new(leases(), "flotilla-agent", "b", Duration::from_secs(1));
    assert!(a.try_acquire_or_renew().await.expect("a"));
    assert!(!b.try_acquire_or_renew().await.expect("b"));
    // a renews for a while: b never takes over.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(a.try_acquire_or_renew().await.expect("a renews"));
        assert!(!b.try_acquire_or_renew().await.expect("b follows"));
    }
    // a stops (crashed): b takes over once the record is unchanged for 1 s.
    let t0 = tokio::time::Instant::now();
    loop {
        if b.try_acquire_or_renew().await.expect("b") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "b never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "took over after {:?}",
        t0.elapsed()
    );
    assert_eq!(lease_holder(&api).as_deref(), Some("b"));
    // a comes back: it follows.
    assert!(!a.try_acquire_or_renew().await.expect("a"));
    let lease = api
        .get("leases", "flotilla-system", "flotilla-agent")
        .expect("lease");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_posts_and_the_follower_takes_over_on_shutdown() {
    let api = FakeApi::start().await;
    cluster(&api);
    api.put("pods", pending_pod("web-0"));
    let intake_a = FakeIntake::start(empty_view()).await;
    let intake_b = FakeIntake::start(empty_view()).await;
    // A lease long enough to tell a release (at once) from an expiry.
    let settings = || Settings {
        lease_duration: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(5),
        ..settings()
    };
    let a = start(&api, &intake_a, "agent-a", settings());
    eventually(10, "a leads and posts", || {
        (!intake_a.batches().is_empty()).then_some(())
    })
    .await;
    let b = start(&api, &intake_b, "agent-b", settings());
    // b syncs its caches and follows: a new pending pod is posted by a only.
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.put("pods", pending_pod("web-1"));
    eventually(10, "a posts the new pod", || {
        intake_a.pending_counts().contains(&2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(intake_b.batches().is_empty(), "the follower posted");
    assert!(
        intake_b.log().is_empty(),
        "the follower called intake: {:?}",
        intake_b.log()
    );

    // a shuts down and releases the lease: b leads at once and posts.
    let t0 = tokio::time::Instant::now();
    a.shutdown().await;
    eventually(5, "b posts", || {
        (!intake_b.batches().is_empty()).then_some(())
    })
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "handover took {:?}",
        t0.elapsed()
    );
    assert_eq!(lease_holder(&api).as_deref(), Some("agent-b"));
    assert_eq!(intake_b.pending_counts()[0], 2);
    assert!(b.metrics.encode().contains("flotilla_agent_leader 1"));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_over_the_body_limit_go_in_parts_each_after_the_previous_result() {
    // Whole batches (`FLOTILLA_INTAKE_PROTOCOL=batches`).
    let settings = || Settings {
        protocol: Protocol::Batches,
        ..settings()
    };
    let api = FakeApi::start().await;
    cluster(&api);
    for i in 0..5 {
        api.put("pods", pending_pod(&format!("web-{i}")));
    }
    // First, everything in one body, to measure it.
    let intake = FakeIntake::start(empty_view()).await;
    let agent = start(&api, &intake, "agent-a", settings());
    eventually(10, "one batch", || {
        (!intake.batches().is_empty()).then_some(())
    })
    .await;
    agent.shutdown().await;
    let whole = intake.batches()[0].clone();
    let whole_len = serde_json::to_vec(&whole).expect("json").len();
    let pod_lens: Vec<usize> = whole["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .filter(|d| d["kind"] == "Pod" && d["spec"].get("nodeName").is_none())
        .map(|d| serde_json::to_vec(d).expect("json").len() + 1)
        .collect();
    assert_eq!(pod_lens.len(), 5);
    // Room for two pending pods per body.
    let limit =
        whole_len - pod_lens.iter().sum::<usize>() + 2 * pod_lens.iter().max().unwrap_or(&0) + 2;

    let intake = FakeIntake::start(empty_view()).await;
    let agent = start(
        &api,
        &intake,
        "agent-a",
        Settings {
            max_body_bytes: limit,
            ..settings()
        },
    );
    eventually(10, "three parts", || {
        (intake.batches().len() >= 3).then_some(())
    })
    .await;
    agent.shutdown().await;
    assert_eq!(intake.pending_counts()[..3], [2, 2, 1]);
    let mut names: Vec<String> = intake.batches()[..3]
        .iter()
        .flat_map(|b| b["documents"].as_array().cloned().unwrap_or_default())
        .filter(|d| d["kind"] == "Pod" && d["spec"].get("nodeName").is_none())
        .filter_map(|d| d["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    assert_eq!(names, ["web-0", "web-1", "web-2", "web-3", "web-4"]);
    for b in intake.batches() {
        assert!(serde_json::to_vec(&b).expect("json").len() <= limit);
    }
    // Each next part only after the previous part's result was read.
    let log = intake.log();
    let posts: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, l)| *l == "POST /batches")
        .map(|(i, _)| i)
        .collect();
    for w in posts.windows(2).take(2) {
        assert!(
            log[w[0]..w[1]].iter().any(|l| l == "GET /clusters/demo"),
            "{log:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_larger_than_a_body_goes_by_changes_a_resync_in_parts_then_deltas() {
    let api = FakeApi::start().await;
    cluster(&api);
    for i in 0..60 {
        api.put("pods", bound_pod(&format!("web-{i}"), "ip-10-0-1-1", false));
    }
    api.put("pods", pending_pod("pending-0"));
    let intake = FakeIntake::start(empty_view()).await;
    // A body far smaller than the cluster.
    let limit = 4 * 1024;
    let agent = start(
        &api,
        &intake,
        "agent-a",
        Settings {
            max_body_bytes: limit,
            ..settings()
        },
    );
    eventually(10, "the resync", || {
        (!intake.batches().is_empty()).then_some(())
    })
    .await;
    let first = intake.batches()[0].clone();
    let pods = |b: &Value| {
        b["documents"]
            .as_array()
            .map(|d| d.iter().filter(|d| d["kind"] == "Pod").count())
            .unwrap_or(0)
    };
    // The 61 pods above and the cluster's own.
    let n0 = pods(&first);
    assert!(n0 >= 61, "{n0}");
    assert_eq!(intake.pending_counts()[0], 1);
    let posts = intake.change_posts();
    assert!(posts.get("part").copied().unwrap_or(0) >= 1, "{posts:?}");

    // One pod more: a delta, not the cluster again.
    api.put("pods", pending_pod("pending-1"));
    eventually(10, "the delta", || {
        intake.pending_counts().contains(&2).then_some(())
    })
    .await;
    let last = intake.batches().last().cloned().unwrap_or_default();
    assert_eq!(pods(&last), n0 + 1);

    // Intake loses its state: 409, and the agent sends everything again.
    intake.lose_state();
    api.put("pods", pending_pod("pending-2"));
    eventually(10, "the resync after the 409", || {
        (intake.change_posts().get("resync").copied().unwrap_or(0) >= 1
            && intake.pending_counts().contains(&3))
        .then_some(())
    })
    .await;
    let last = intake.batches().last().cloned().unwrap_or_default();
    assert_eq!(pods(&last), n0 + 2);
    assert!(intake.problems().is_empty(), "{:?}", intake.problems());
    agent.shutdown().await;
}
