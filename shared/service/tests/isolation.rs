//! One deployment, one EKS cluster, its own instances: launches carry the
//! stack's and the cluster's tags, the sweep collects only this stack's
//! leaked instances (draining registered nodes first, never stopping at one
//! refused termination), intake refuses clusters nobody was granted and
//! batches for another EKS cluster; the legacy AWSNodeTemplate launches with
//! the deployment's instance profile; a missing spot service-linked role
//! fails the NodeClaim with the command that fixes it. EC2 notices about
//! another stack's or untagged instances change nothing; the agent's nodes
//! report is never overwritten by an older post.

mod common;

use std::collections::BTreeMap;

use common::*;
use flotilla_core::launch::launch_template::{TAG_EKS_CLUSTER_NAME, TAG_NODECLAIM};
use flotilla_ports::{InstanceState, PortError};
use flotilla_service::intake::{self, Access};
use flotilla_service::records::{NodeClaimRecord, NodeClaimState};
use flotilla_service::sweep::{
    of_this_stack, on_ec2_notice, Ec2Notice, SweepReport, CLUSTER_ID_TAG, LEAK_GRACE_SECS,
    STACK_TAG,
};
use flotilla_service::{ServiceError, LOCAL_STACK_ID};
use flotilla_sim::{ops, Phase};

const STACK: &str = "arn:aws:cloudformation:us-west-2:123456789012:stack/flotilla/1111";
const OTHER_STACK: &str = "arn:aws:cloudformation:us-west-2:123456789012:stack/flotilla/2222";

fn stack_world() -> SimPorts {
    let mut p = world();
    p.config.stack_id = STACK.into();
    p
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The agent's heartbeat: no pending pods, these nodes (node name,
/// NodeClaim label).
async fn heartbeat(p: &SimPorts, nodes: &[(&str, &str)]) {
    let docs = nodes
        .iter()
        .map(|(name, claim)| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"flotilla.io/nodeclaim": claim}},
                "status": {"allocatable": {"cpu": "8", "memory": "30Gi", "pods": "58"}}
            })
        })
        .collect();
    post(p, &batch(docs)).await;
}

/// An instance of this stack for `cluster`'s NodeClaim `claim` that no
/// live NodeClaim owns (a leak), in us-west-2a. Returns its id.
fn leak(p: &SimPorts, cluster: &str, claim: &str) -> String {
    p.ec2.run_instance(
        "m5.large",
        "us-west-2a",
        tags(&[
            (STACK_TAG, STACK),
            (CLUSTER_ID_TAG, cluster),
            (TAG_NODECLAIM, claim),
        ]),
    )
}

fn running(p: &SimPorts, id: &str) -> bool {
    p.ec2
        .live_instances()
        .iter()
        .any(|i| i.id == id && i.state == InstanceState::Running)
}

#[tokio::test]
async fn launches_carry_the_stack_and_cluster_name_tags() {
    let p = stack_world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 4, "2", "4Gi"));
    post(&p, &batch(docs.clone())).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    assert!(!launched.is_empty());
    for i in p.ec2.live_instances() {
        assert_eq!(i.tags.get(STACK_TAG).map(String::as_str), Some(STACK));
        assert_eq!(
            i.tags.get(TAG_EKS_CLUSTER_NAME).map(String::as_str),
            Some(CLUSTER)
        );
        assert_eq!(
            i.tags.get(CLUSTER_ID_TAG).map(String::as_str),
            Some(CLUSTER)
        );
    }
    let names = p.ec2.launch_template_names();
    for n in &names {
        let lt = p.ec2.launch_template(n).expect("template");
        assert_eq!(lt.tags.get(STACK_TAG).map(String::as_str), Some(STACK));
        assert_eq!(
            lt.tags.get(TAG_EKS_CLUSTER_NAME).map(String::as_str),
            Some(CLUSTER)
        );
    }
    // Another stack launching the same NodeClaims in the same region gets
    // launch templates of its own (names are content-addressed, the stack
    // tag included): neither uses nor deletes the other's.
    let mut other = world();
    other.config.stack_id = OTHER_STACK.into();
    post(&other, &batch(docs)).await;
    drain(&other, 1).await;
    let theirs = other.ec2.launch_template_names();
    assert!(!theirs.is_empty());
    assert!(
        theirs.iter().all(|n| !names.contains(n)),
        "{names:?} {theirs:?}"
    );
}

#[test]
fn only_instances_tagged_with_this_stack_are_its_own() {
    let p = stack_world();
    let instance = |t: BTreeMap<String, String>| flotilla_ports::Instance {
        id: "i-0123456789abcdef0".into(),
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        state: InstanceState::Running,
        lifecycle: "on-demand".into(),
        launch_time: 0,
        capacity_reservation_id: None,
        tags: t,
    };
    assert!(of_this_stack(
        &instance(tags(&[(STACK_TAG, STACK)])),
        &p.config
    ));
    assert!(!of_this_stack(
        &instance(tags(&[(STACK_TAG, OTHER_STACK)])),
        &p.config
    ));
    assert!(!of_this_stack(
        &instance(tags(&[(CLUSTER_ID_TAG, CLUSTER)])),
        &p.config
    ));
    assert_eq!(world().config.stack_id, LOCAL_STACK_ID);
}

#[tokio::test]
async fn the_sweep_never_touches_another_stacks_or_untagged_instances() {
    let p = stack_world();
    heartbeat(&p, &[]).await;
    let zone = "us-west-2a";
    let foreign = [
        p.ec2.run_instance(
            "m5.large",
            zone,
            tags(&[
                (STACK_TAG, OTHER_STACK),
                (CLUSTER_ID_TAG, CLUSTER),
                (TAG_NODECLAIM, "theirs-1"),
            ]),
        ),
        p.ec2.run_instance(
            "m5.large",
            zone,
            tags(&[(CLUSTER_ID_TAG, CLUSTER), (TAG_NODECLAIM, "old-1")]),
        ),
        p.ec2.run_instance("m5.large", zone, BTreeMap::new()),
    ];
    let ours = leak(&p, CLUSTER, "lost-1");
    p.clock.advance_secs(LEAK_GRACE_SECS + 60);
    let r = sweep(&p).await;
    assert_eq!(r.leaked_terminated, vec![ours.clone()]);
    assert!(!running(&p, &ours));
    for id in &foreign {
        assert!(running(&p, id), "{id} was touched: {r:?}");
    }
    // An unknown cluster's instances too: only this stack's are collected.
    let theirs = p.ec2.run_instance(
        "m5.large",
        zone,
        tags(&[(STACK_TAG, OTHER_STACK), (CLUSTER_ID_TAG, "elsewhere")]),
    );
    p.clock.advance_secs(LEAK_GRACE_SECS + 60);
    let r = sweep(&p).await;
    assert!(r.leaked_terminated.is_empty(), "{r:?}");
    assert!(running(&p, &theirs));
}

#[tokio::test]
async fn a_leaked_instance_whose_node_registered_is_drained_first() {
    let p = stack_world();
    let (a, b) = (leak(&p, CLUSTER, "lost-a"), leak(&p, CLUSTER, "lost-b"));
    heartbeat(&p, &[("ip-a", "lost-a"), ("ip-b", "lost-b")]).await;
    p.clock.advance_secs(LEAK_GRACE_SECS + 60);
    let r = sweep(&p).await;
    assert!(r.leaked_terminated.is_empty(), "{r:?}");
    assert_eq!(r.leaked_draining.len(), 2, "{r:?}");
    assert_eq!(r.actions, 2);
    assert!(running(&p, &a) && running(&p, &b));
    // The next sweep stores nothing again and still waits.
    let r = sweep(&p).await;
    assert_eq!((r.actions, r.leaked_draining.len()), (0, 2), "{r:?}");

    let view = try_view(&p, CLUSTER).await.expect("view");
    let drain_of = |node: &str| {
        view.actions
            .iter()
            .find(|a| a["node"] == node && a["kind"] == "drain")
            .and_then(|a| a["id"].as_str())
            .expect("a drain action for the node")
            .to_string()
    };
    // The agent drained ip-a: its instance goes.
    let body = serde_json::json!({"acks": [{"id": drain_of("ip-a"), "outcome": "done"}]});
    intake::acknowledge(
        &p.store,
        &p.clock,
        &p.access,
        &agent(),
        CLUSTER,
        body.to_string().as_bytes(),
    )
    .await
    .expect("ack");
    let r = sweep(&p).await;
    assert_eq!(r.leaked_terminated, vec![a.clone()]);
    assert!(!running(&p, &a) && running(&p, &b));
    // ip-b leaves the cluster (the agent's next post no longer shows it).
    heartbeat(&p, &[("ip-a", "lost-a")]).await;
    let r = sweep(&p).await;
    assert_eq!(r.leaked_terminated, vec![b.clone()]);
    assert!(!running(&p, &b));
}

#[tokio::test]
async fn a_refused_termination_is_reported_and_the_sweep_goes_on() {
    let p = stack_world();
    heartbeat(&p, &[]).await;
    let ids: Vec<String> = (0..2)
        .map(|n| leak(&p, CLUSTER, &format!("lost-{n}")))
        .collect();
    p.clock.advance_secs(LEAK_GRACE_SECS + 60);
    p.ec2.faults().script(
        ops::EC2_TERMINATE_INSTANCES,
        Phase::BeforeEffect,
        PortError::Rejected("UnauthorizedOperation: not authorized".into()),
    );
    let r = sweep(&p).await;
    assert_eq!(r.termination_errors.len(), 1, "{r:?}");
    assert!(r.termination_errors[0].contains("UnauthorizedOperation"));
    assert_eq!(
        r.leaked_terminated.len(),
        1,
        "the other instance still goes"
    );
    let r = sweep(&p).await;
    assert!(r.termination_errors.is_empty());
    assert_eq!(r.leaked_terminated.len(), 1);
    assert!(ids.iter().all(|id| !running(&p, id)));
}

#[tokio::test]
async fn clusters_nobody_was_granted_are_refused_naming_the_parameter() {
    let mut p = world();
    p.access = Access::default();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 1, "1", "1Gi"));
    let e = try_post(&p, &batch(docs)).await.unwrap_err();
    let ServiceError::Forbidden(m) = &e else {
        panic!("{e}");
    };
    for part in ["ClusterPrincipals", "FLOTILLA_CLUSTER_PRINCIPALS", CLUSTER] {
        assert!(m.contains(part), "{m}");
    }
    // A mapped cluster, another principal: refused too.
    p.access = Access::default().allow(CLUSTER, "arn:aws:iam::123456789012:role/someone-else");
    let e = try_view(&p, CLUSTER).await.unwrap_err();
    assert!(matches!(e, ServiceError::Forbidden(_)), "{e}");
}

#[tokio::test]
async fn a_batch_for_another_eks_cluster_is_refused_at_intake() {
    let mut p = world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 1, "1", "1Gi"));
    // Registered for EKS cluster "demo" while the stack had no name set.
    post(&p, &batch(docs.clone())).await;
    p.config.cluster_name = Some("prod".into());
    let e = try_post(&p, &batch(docs.clone())).await.unwrap_err();
    let ServiceError::BadRequest(m) = &e else {
        panic!("{e}");
    };
    for part in ["cluster.name", "\"demo\"", "\"prod\"", "ClusterName"] {
        assert!(m.contains(part), "{m}");
    }
    // GET for the cluster id bound to "demo" is refused as well.
    let e = try_view(&p, CLUSTER).await.unwrap_err();
    let ServiceError::BadRequest(m) = &e else {
        panic!("{e}");
    };
    assert!(m.contains("\"demo\"") && m.contains("\"prod\""), "{m}");
    // The stack's own cluster name is accepted.
    p.config.cluster_name = Some(CLUSTER.into());
    post(&p, &batch(docs)).await;
    try_view(&p, CLUSTER).await.expect("view");
}

fn legacy_docs() -> Vec<serde_json::Value> {
    let mut docs = vec![
        serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "metadata": {"name": "legacy-team"},
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}
                ],
                "providerRef": {"name": "legacy"}
            }
        }),
        serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
            "metadata": {"name": "legacy"},
            "spec": {
                "subnetSelector": {"karpenter.sh/discovery": CLUSTER},
                "securityGroupSelector": {"karpenter.sh/discovery": CLUSTER},
                "amiFamily": "Bottlerocket"
            }
        }),
    ];
    docs.extend(pods("reports", 2, "1", "2Gi"));
    docs
}

#[tokio::test]
async fn an_aws_node_template_without_a_profile_uses_the_deployments() {
    let p = world();
    post(&p, &batch(legacy_docs())).await;
    drain(&p, 1).await;
    let all = claims(&p).await;
    assert!(!all.is_empty());
    for c in &all {
        assert_eq!(c.state, NodeClaimState::Launched, "{:?}", c.reason);
    }
    let names = p.ec2.launch_template_names();
    assert!(!names.is_empty());
    for n in names {
        let lt = p.ec2.launch_template(&n).expect("template");
        assert_eq!(lt.iam_instance_profile, "flotilla-nodes");
    }

    // Without a default profile the NodeClaim fails, naming the field.
    let mut p = world();
    p.config.instance_profile = None;
    post(&p, &batch(legacy_docs())).await;
    drain(&p, 1).await;
    let failed = claims_in(&p, NodeClaimState::Failed).await;
    assert!(!failed.is_empty());
    let reason = failed[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("spec.instanceProfile"), "{reason}");
}

#[tokio::test]
async fn a_missing_spot_service_linked_role_fails_with_the_fix() {
    let p = world();
    p.ec2.set_spot_service_linked_role(false);
    let mut docs = node_pool_and_class();
    docs[0]["spec"]["template"]["spec"]["requirements"][1]["values"] = serde_json::json!(["spot"]);
    docs.extend(pods("web", 1, "1", "1Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let failed = claims_in(&p, NodeClaimState::Failed).await;
    assert!(!failed.is_empty(), "{:?}", claims(&p).await);
    let reason = failed[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("AWSServiceRoleForEC2Spot"), "{reason}");
    assert!(
        reason.contains("aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"),
        "{reason}"
    );
    assert!(p.ec2.live_instances().is_empty());
}

#[tokio::test]
async fn without_the_agents_report_the_sweep_waits_before_collecting() {
    let p = stack_world();
    // A cluster the agent never reported on (a replaced table, or an agent
    // gone for good): this stack's leaked instance of it.
    let id = leak(&p, "unreported", "lost-1");
    p.clock.advance_secs(LEAK_GRACE_SECS + 60);
    let r = sweep(&p).await;
    assert!(r.leaked_terminated.is_empty(), "{r:?}");
    assert_eq!(r.leaked_draining, vec![format!("unreported/{id}")]);
    p.clock.advance_secs(5 * 60);
    assert!(sweep(&p).await.leaked_terminated.is_empty());
    // No agent for 10 minutes: taken for gone.
    p.clock.advance_secs(6 * 60);
    assert_eq!(sweep(&p).await.leaked_terminated, vec![id.clone()]);
    assert!(!running(&p, &id));
}

/// Every per-instance notice the sweep acts on, about `id`.
fn notices_about(id: &str) -> Vec<Ec2Notice> {
    let i = || id.to_string();
    vec![
        Ec2Notice::SpotInterruption { instance_id: i() },
        Ec2Notice::ReservationInterruption { instance_id: i() },
        Ec2Notice::Rebalance { instance_id: i() },
        Ec2Notice::StateChange {
            instance_id: i(),
            state: "shutting-down".into(),
        },
        Ec2Notice::StateChange {
            instance_id: i(),
            state: "terminated".into(),
        },
    ]
}

/// A stack world with one batch planned and launched: the world and its
/// NodeClaims in `Launched`.
async fn launched_world() -> (SimPorts, Vec<NodeClaimRecord>) {
    let p = stack_world();
    let mut docs = node_pool_and_class();
    docs.extend(pods("web", 4, "2", "4Gi"));
    post(&p, &batch(docs)).await;
    drain(&p, 1).await;
    let launched = claims_in(&p, NodeClaimState::Launched).await;
    (p, launched)
}

/// The sweep's answer to a spot interruption notice about `instance_id`.
async fn spot_interruption(p: &SimPorts, instance_id: String) -> SweepReport {
    on_ec2_notice(
        &p.store,
        &p.ec2,
        &p.bus,
        &p.clock,
        &p.config,
        &Ec2Notice::SpotInterruption { instance_id },
    )
    .await
    .expect("notice")
}

#[tokio::test]
async fn ec2_notices_about_another_stacks_or_untagged_instances_change_nothing() {
    let (p, launched) = launched_world().await;
    let ours = launched[0].clone();
    // Instances naming this cluster and one of its live NodeClaims (a
    // replaced stack or a restored table launched the same names), from
    // another stack and without a stack tag.
    let foreign = [
        p.ec2.run_instance(
            "m5.large",
            "us-west-2a",
            tags(&[
                (STACK_TAG, OTHER_STACK),
                (CLUSTER_ID_TAG, CLUSTER),
                (TAG_NODECLAIM, &ours.name),
            ]),
        ),
        p.ec2.run_instance(
            "m5.large",
            "us-west-2a",
            tags(&[(CLUSTER_ID_TAG, CLUSTER), (TAG_NODECLAIM, &ours.name)]),
        ),
    ];
    let table = p.store.dump();
    let instances = p.ec2.live_instances();
    for id in &foreign {
        for notice in notices_about(id) {
            let r = on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &notice)
                .await
                .expect("notice");
            assert_eq!(r, SweepReport::default(), "{notice:?}");
            // No action, no ICE entry, no NodeClaim ended: the table as it
            // was; no instance terminated; nothing announced.
            assert!(p.store.dump() == table, "{notice:?} wrote to the table");
            assert_eq!(p.ec2.live_instances(), instances, "{notice:?}");
            assert!(p.bus.take().is_empty(), "{notice:?}");
        }
    }
    assert_eq!(
        claims_in(&p, NodeClaimState::Launched).await.len(),
        launched.len()
    );
    // The same notice about this stack's instance of that NodeClaim is
    // acted on (cordon + drain).
    let own = ours.instance.expect("instance").instance_id;
    let r = spot_interruption(&p, own).await;
    assert_eq!(r.actions, 2, "{r:?}");
}

/// An instance launched before the stack tag existed is still handled when
/// it is exactly the instance its NodeClaim recorded: upgrading a stack
/// does not cost its running nodes their interruption handling.
#[tokio::test]
async fn a_notice_about_a_nodeclaims_own_instance_without_the_stack_tag_is_acted_on() {
    let (p, launched) = launched_world().await;
    let own = launched[0].instance.clone().expect("instance").instance_id;
    assert!(p.ec2.remove_tag(&own, STACK_TAG));
    let r = spot_interruption(&p, own).await;
    assert_eq!(
        r.actions, 2,
        "cordon + drain of the NodeClaim's own node: {r:?}"
    );
}

fn node(name: &str, claim: &str) -> flotilla_core::model::Node {
    flotilla_core::model::Node {
        name: name.into(),
        labels: tags(&[("flotilla.io/nodeclaim", claim)]),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_older_nodes_report_never_overwrites_a_newer_one() {
    let p = stack_world();
    // A post read at START_MS, written after a later one (a slow
    // invocation): its clock is behind.
    let earlier = flotilla_sim::ManualClock::at_millis(START_MS);
    p.clock.advance_secs(30);
    let newer = [node("ip-a", "claim-a"), node("ip-b", "claim-b")];
    intake::record_nodes(&p.store, &p.clock, CLUSTER, &newer)
        .await
        .expect("recorded");
    let key = flotilla_service::keys::nodes(CLUSTER);
    let stored = p.store.peek(&key).expect("a report");
    let report = intake::nodes_report(&p.store, CLUSTER)
        .await
        .expect("read")
        .expect("a report");
    assert_eq!(report.at, START_MS + 30_000);
    assert_eq!(report.nodes.len(), 2);

    intake::record_nodes(&p.store, &earlier, CLUSTER, &newer[..1])
        .await
        .expect("recorded");
    assert_eq!(
        p.store.peek(&key),
        Some(stored.clone()),
        "an older post won"
    );

    // The same nodes again, later: not rewritten (the report keeps the
    // post that first showed them).
    p.clock.advance_secs(60);
    intake::record_nodes(&p.store, &p.clock, CLUSTER, &newer)
        .await
        .expect("recorded");
    assert_eq!(p.store.peek(&key), Some(stored.clone()), "rewritten");

    // A newer post with other nodes replaces it.
    intake::record_nodes(&p.store, &p.clock, CLUSTER, &newer[1..])
        .await
        .expect("recorded");
    let report = intake::nodes_report(&p.store, CLUSTER)
        .await
        .expect("read")
        .expect("a report");
    assert_eq!(report.at, START_MS + 90_000);
    assert_eq!(
        report.nodes.into_iter().collect::<Vec<_>>(),
        vec![("claim-b".to_string(), "ip-b".to_string())]
    );
}
