//! Disruption semantics, one test per rule, on the embedded us-west-2
//! catalog (real types and prices).

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::catalog::CapacityType;
use crate::model::*;
use crate::quantity::Quantity;
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::Resources;

const NOW: i64 = 1_800_000_000;
const DAY: i64 = 86_400;

fn catalog() -> Catalog {
    Catalog::embedded("us-west-2").expect("embedded catalog")
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("quantity")
}

fn res(cpu: &str, mem: &str, pods: &str) -> Resources {
    Resources::new()
        .with("cpu", q(cpu))
        .with("memory", q(mem))
        .with("pods", q(pods))
}

fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
    Pod {
        name: name.into(),
        created_at: Some(NOW - DAY),
        ..Pod::from(PodTemplate {
            namespace: "default".into(),
            labels: [(
                "app".to_string(),
                name.trim_end_matches(char::is_numeric).to_string(),
            )]
            .into(),
            requests: res(cpu, mem, "1"),
            owner: Some(format!("ReplicaSet/default/{name}")),
            ..PodTemplate::default()
        })
    }
}

fn daemon(node: &str) -> Pod {
    Pod {
        name: format!("aws-node-{node}"),
        created_at: Some(NOW - DAY),
        ..Pod::from(PodTemplate {
            namespace: "kube-system".into(),
            requests: res("50m", "64Mi", "1"),
            owner: Some("DaemonSet/kube-system/aws-node".into()),
            ..PodTemplate::default()
        })
    }
}

/// Allocatable as EKS reports it for the few types the tests use.
fn allocatable(ty: &str) -> Resources {
    match ty {
        "m5.large" => res("1930m", "7Gi", "29"),
        "m5.xlarge" => res("3920m", "14Gi", "58"),
        "m5.2xlarge" => res("7910m", "29Gi", "58"),
        "c5.xlarge" => res("3920m", "6Gi", "58"),
        _ => res("1930m", "3Gi", "29"),
    }
}

fn node(name: &str, ty: &str, zone: &str, ct: &str, pods: Vec<Pod>) -> Node {
    let mut all = vec![daemon(name)];
    all.extend(pods.into_iter().map(|mut p| {
        p.node_name = Some(name.into());
        p
    }));
    Node {
        name: name.into(),
        labels: [
            (labels::NODEPOOL, "default"),
            (labels::INSTANCE_TYPE, ty),
            (labels::ZONE, zone),
            (labels::CAPACITY_TYPE, ct),
            (labels::HOSTNAME, name),
            (labels::ARCH, "amd64"),
            (labels::OS, "linux"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        allocatable: allocatable(ty),
        created_at: Some(NOW - 2 * DAY),
        pods: all,
        ..Node::default()
    }
}

fn pool() -> NodePool {
    let mut p = NodePool::new(
        "default",
        Requirements::from_iter_reqs([
            Requirement::new(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]).expect("req"),
            Requirement::new(labels::INSTANCE_FAMILY, Operator::In, &["m5", "c5"]).expect("req"),
            Requirement::new(labels::ARCH, Operator::In, &["amd64"]).expect("req"),
            Requirement::new(labels::NODEPOOL, Operator::In, &["default"]).expect("req"),
        ]),
    );
    p.disruption.consolidation_policy = Some("WhenEmptyOrUnderutilized".into());
    p.disruption.consolidate_after_seconds = Some(0);
    p.disruption.expire_after_seconds = Some(30 * DAY as u64);
    p.disruption.budgets = vec![Budget {
        nodes: IntOrPercent::Percent(100),
        ..Budget::default_budget()
    }];
    p
}

fn cluster(nodes: Vec<Node>) -> ClusterState {
    ClusterState {
        nodes,
        node_pools: vec![pool()],
        ..ClusterState::default()
    }
}

fn run(s: &ClusterState) -> Disruptions {
    disrupt(
        s,
        &catalog(),
        &DisruptOptions {
            now: NOW,
            ..DisruptOptions::default()
        },
    )
}

fn reasons(d: &Disruptions) -> Vec<(DisruptionReason, Vec<String>)> {
    d.decisions
        .iter()
        .map(|d| (d.reason, d.nodes.clone()))
        .collect()
}

#[test]
fn an_empty_node_goes_after_consolidate_after() {
    let busy = node(
        "busy",
        "m5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![pod("web1", "3", "8Gi")],
    );
    let mut s = cluster(vec![
        busy,
        node("idle", "m5.xlarge", "us-west-2a", "on-demand", vec![]),
    ]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Empty, vec!["idle".to_string()])]
    );
    assert!(d.decisions[0].price.before > 0.1 && d.decisions[0].price.after == 0.0);
    assert!(d.decisions[0].replacements.is_empty() && d.decisions[0].moves.is_empty());
    // Not before consolidateAfter has passed since the last change.
    s.node_pools[0].disruption.consolidate_after_seconds = Some(2 * DAY as u64 + 1);
    assert!(run(&s).decisions.is_empty());
    // consolidateAfter: Never.
    s.node_pools[0].disruption.consolidate_after_seconds = None;
    assert!(run(&s).decisions.is_empty());
}

#[test]
fn budgets_limit_empty_nodes_and_say_so() {
    let mut s = cluster(
        (0..3)
            .map(|i| {
                node(
                    &format!("idle-{i}"),
                    "m5.xlarge",
                    "us-west-2a",
                    "on-demand",
                    vec![],
                )
            })
            .collect(),
    );
    s.node_pools[0].disruption.budgets = vec![Budget {
        nodes: IntOrPercent::Int(1),
        ..Budget::default_budget()
    }];
    let d = run(&s);
    assert_eq!(d.decisions.len(), 1);
    assert_eq!(d.decisions[0].nodes.len(), 1);
    assert_eq!(d.blocked.len(), 2);
    assert!(d.blocked[0].reason.contains("budget") && d.blocked[0].reason.contains("default"));
    // A node already disrupting uses the budget up.
    let opts = DisruptOptions {
        now: NOW,
        disrupting: [("idle-0".to_string(), DisruptionReason::Empty)].into(),
        ..DisruptOptions::default()
    };
    assert!(disrupt(&s, &catalog(), &opts).decisions.is_empty());
}

#[test]
fn underutilized_nodes_are_consolidated_and_save_money() {
    let s = cluster(vec![
        node(
            "a",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "500m", "1Gi")],
        ),
        node(
            "b",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("api1", "500m", "1Gi")],
        ),
        node(
            "c",
            "m5.xlarge",
            "us-west-2b",
            "on-demand",
            vec![pod("db1", "500m", "1Gi")],
        ),
    ]);
    let d = run(&s);
    assert!(!d.decisions.is_empty(), "{d:#?}");
    let before: f64 = d.decisions.iter().map(|d| d.price.before).sum();
    let after: f64 = d.decisions.iter().map(|d| d.price.after).sum();
    assert!(after < before, "{d:#?}");
    assert!(d
        .decisions
        .iter()
        .all(|d| d.reason == DisruptionReason::Underutilized));
    // Every moved pod has a destination that is not removed.
    let removed: Vec<&String> = d.decisions.iter().flat_map(|d| &d.nodes).collect();
    for m in d.decisions.iter().flat_map(|d| &d.moves) {
        assert!(!removed.contains(&&m.to), "{m:?}");
    }
}

#[test]
fn do_not_disrupt_and_pdbs_block_and_are_named() {
    let mut keep = pod("keep1", "500m", "1Gi");
    keep.annotations
        .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
    let guarded = pod("guarded1", "500m", "1Gi");
    let s = ClusterState {
        pdbs: vec![PodDisruptionBudget {
            namespace: "default".into(),
            name: "guarded-pdb".into(),
            selector: LabelSelector {
                match_labels: [("app".to_string(), "guarded".to_string())].into(),
                match_expressions: vec![],
            },
            min_available: Some(IntOrPercent::Int(1)),
            max_unavailable: None,
            disruptions_allowed: None,
        }],
        ..cluster(vec![
            node("a", "m5.xlarge", "us-west-2a", "on-demand", vec![keep]),
            node("b", "m5.xlarge", "us-west-2a", "on-demand", vec![guarded]),
        ])
    };
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{d:#?}");
    let why: BTreeMap<&str, &str> = d
        .blocked
        .iter()
        .map(|b| (b.node.as_str(), b.reason.as_str()))
        .collect();
    assert!(
        why["a"].contains("default/keep1") && why["a"].contains(labels::DO_NOT_DISRUPT),
        "{why:?}"
    );
    assert!(why["b"].contains("default/guarded-pdb"), "{why:?}");
}

#[test]
fn expired_nodes_are_replaced_whatever_blocks_them() {
    let mut keep = pod("keep1", "3", "8Gi");
    keep.annotations
        .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
    let mut old = node("old", "m5.xlarge", "us-west-2a", "on-demand", vec![keep]);
    old.created_at = Some(NOW - 31 * DAY);
    let s = cluster(vec![old]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Expired, vec!["old".to_string()])]
    );
    assert_eq!(d.decisions[0].replacements.len(), 1);
    assert_eq!(d.decisions[0].moves.len(), 1);
}

#[test]
fn drifted_nodes_are_replaced_within_budget() {
    // The pool allows on-demand only; the node is spot.
    let mut s = cluster(vec![node(
        "spot",
        "m5.xlarge",
        "us-west-2a",
        "spot",
        vec![pod("web1", "3", "8Gi")],
    )]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Drifted, vec!["spot".to_string()])]
    );
    let r = &d.decisions[0].replacements[0];
    assert_eq!(
        r.price.capacity_type,
        crate::catalog::CapacityType::OnDemand
    );
    // A budget of 0 for Drifted blocks it, and says so.
    s.node_pools[0].disruption.budgets.push(Budget {
        nodes: IntOrPercent::Int(0),
        reasons: vec![DisruptionReason::Drifted],
        ..Budget::default_budget()
    });
    let d = run(&s);
    assert!(d.decisions.is_empty());
    assert!(d.blocked[0].reason.contains("Drifted"), "{:?}", d.blocked);
}

#[test]
fn template_hash_drift_only_for_our_hashes() {
    let mut n = node(
        "n",
        "m5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![pod("web1", "3", "8Gi")],
    );
    n.annotations
        .insert(labels::NODEPOOL_HASH.into(), "111".into());
    let mut s = cluster(vec![n]);
    s.node_pools[0].template_hash = Some("222".into());
    // Without our hash version the hash is someone else's: not compared.
    assert!(run(&s).decisions.is_empty());
    s.nodes[0].annotations.insert(
        hash::NODEPOOL_HASH_VERSION.into(),
        hash::HASH_VERSION.into(),
    );
    assert_eq!(
        reasons(&run(&s)),
        vec![(DisruptionReason::Drifted, vec!["n".to_string()])]
    );
}

/// Each recorded hash is compared under its own version annotation only:
/// the EC2NodeClass hash under `ec2nodeclass-hash-version`, the NodePool
/// hash under `nodepool-hash-version`, on the node or on its NodeClaim.
#[test]
fn template_hashes_are_compared_under_their_own_version_annotations() {
    use hash::{HASH_VERSION as OURS, NODECLASS_HASH_VERSION as CV, NODEPOOL_HASH_VERSION as PV};
    use labels::{NODECLASS_HASH as CH, NODEPOOL_HASH as PH};
    type Ann<'a> = &'a [(&'a str, &'a str)];
    // (case, node annotations, NodeClaim annotations, drifted)
    let cases: [(&str, Ann, Ann, bool); 10] = [
        (
            "stale class hash, class version",
            &[(CH, "old"), (CV, OURS)],
            &[],
            true,
        ),
        (
            "stale class hash, pool version only",
            &[(CH, "old"), (PV, OURS)],
            &[],
            false,
        ),
        (
            "stale class hash, both versions",
            &[(CH, "old"), (CV, OURS), (PV, OURS)],
            &[],
            true,
        ),
        (
            "stale class hash, Karpenter's version",
            &[(CH, "old"), (CV, "v3")],
            &[],
            false,
        ),
        (
            "current class hash, class version",
            &[(CH, "c-now"), (CV, OURS)],
            &[],
            false,
        ),
        (
            "stale pool hash, pool version",
            &[(PH, "old"), (PV, OURS)],
            &[],
            true,
        ),
        (
            "stale pool hash, class version only",
            &[(PH, "old"), (CV, OURS)],
            &[],
            false,
        ),
        (
            "stale class hash on the NodeClaim",
            &[],
            &[(CH, "old"), (CV, OURS)],
            true,
        ),
        (
            "class hash on the node, version on the NodeClaim",
            &[(CH, "old")],
            &[(CV, OURS)],
            false,
        ),
        (
            "current hashes on the node, stale class hash on the NodeClaim",
            &[(CH, "c-now"), (CV, OURS)],
            &[(CH, "old"), (CV, OURS)],
            false,
        ),
    ];
    let ann = |a: Ann| -> BTreeMap<String, String> {
        a.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    for (case, on_node, on_claim, want) in cases {
        let mut n = node(
            "n",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "3", "8Gi")],
        );
        n.annotations = ann(on_node);
        let mut s = cluster(vec![n]);
        s.node_pools[0].template_hash = Some("p-now".into());
        s.node_pools[0].node_class = Some("default".into());
        s.node_classes.push(NodeClass {
            name: "default".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: None,
            spec: serde_json::Value::Null,
            template_hash: Some("c-now".into()),
            status: Default::default(),
        });
        s.node_claims.push(NodeClaimObject {
            name: "n-claim".into(),
            node_pool: Some("default".into()),
            node_name: Some("n".into()),
            annotations: ann(on_claim),
            ..NodeClaimObject::default()
        });
        let got = reasons(&run(&s));
        let drifted = got == vec![(DisruptionReason::Drifted, vec!["n".to_string()])];
        assert_eq!(drifted, want, "{case}: {got:?}");
    }
}

/// One cloud-provider drift case: the node class's resolved status, the
/// NodeClaim's `status.imageID`, what EC2 says of the instance, and the
/// detail expected (`None`: not drifted).
struct CloudCase {
    case: &'static str,
    amis: &'static [(&'static str, &'static str)],
    subnets: &'static [&'static str],
    groups: &'static [&'static str],
    claim_image: Option<&'static str>,
    instance: Option<(
        Option<&'static str>,
        Option<&'static str>,
        &'static [&'static str],
    )>,
    want: Option<&'static str>,
}

const INSTANCE: &str = "i-0123456789abcdef0";

fn cloud_state(c: &CloudCase) -> ClusterState {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut n = node(
        "n",
        "m5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![pod("web1", "3", "8Gi")],
    );
    n.provider_id = Some(format!("aws:///us-west-2a/{INSTANCE}"));
    let mut s = cluster(vec![n]);
    s.node_pools[0].node_class = Some("default".into());
    let amis = c
        .amis
        .iter()
        .map(|(id, arch)| NodeClassAmi {
            id: id.to_string(),
            requirements: Requirements::from_iter_reqs([Requirement::in_values(
                labels::ARCH,
                [*arch],
            )]),
        })
        .collect();
    s.node_classes.push(NodeClass {
        name: "default".into(),
        kind: "EC2NodeClass".into(),
        ami_family: AmiFamily::AL2023,
        root_volume_size: None,
        volumes: None,
        spec: serde_json::Value::Null,
        template_hash: None,
        status: NodeClassStatus {
            amis,
            subnets: strings(c.subnets),
            security_groups: strings(c.groups),
        },
    });
    s.node_claims.push(NodeClaimObject {
        name: "n-claim".into(),
        node_pool: Some("default".into()),
        node_name: Some("n".into()),
        image_id: c.claim_image.map(str::to_string),
        ..NodeClaimObject::default()
    });
    if let Some((image, subnet, groups)) = c.instance {
        s.instances.insert(
            INSTANCE.into(),
            InstanceFacts {
                image_id: image.map(str::to_string),
                subnet_id: subnet.map(str::to_string),
                security_group_ids: strings(groups),
            },
        );
    }
    s
}

/// Karpenter's cloud-provider drift: the AMI (among those serving the
/// node's architecture), the subnet and the security groups, each against
/// the node class's resolved status; unknown on either side is no drift.
#[test]
fn cloud_provider_drift_compares_the_instance_with_the_resolved_node_class() {
    const AMD: &[(&str, &str)] = &[("ami-new", "amd64"), ("ami-arm", "arm64")];
    const SUBNETS: &[&str] = &["subnet-a", "subnet-b"];
    const SGS: &[&str] = &["sg-1", "sg-2"];
    let base = CloudCase {
        case: "",
        amis: AMD,
        subnets: SUBNETS,
        groups: SGS,
        claim_image: Some("ami-new"),
        instance: Some((Some("ami-new"), Some("subnet-a"), &["sg-2", "sg-1"])),
        want: None,
    };
    let cases = [
        CloudCase { case: "everything current", ..base },
        CloudCase {
            case: "a newer AMI was released",
            claim_image: Some("ami-old"),
            want: Some("NodeClaim n-claim runs image ami-old, no longer among EC2NodeClass default's AMIs (ami-new)"),
            ..base
        },
        CloudCase {
            case: "its image serves another architecture only",
            amis: &[("ami-new", "amd64"), ("ami-old", "arm64")],
            claim_image: Some("ami-old"),
            want: Some("runs image ami-old, no longer among EC2NodeClass default's AMIs (ami-new)"),
            ..base
        },
        CloudCase {
            case: "no AMI serves its architecture",
            amis: &[("ami-arm", "arm64")],
            want: Some("runs image ami-new, no longer among EC2NodeClass default's AMIs (none serves its instance type)"),
            ..base
        },
        CloudCase { case: "no resolved AMIs", amis: &[], claim_image: Some("ami-old"), ..base },
        CloudCase {
            case: "image unknown",
            claim_image: None,
            instance: Some((None, Some("subnet-a"), SGS)),
            ..base
        },
        CloudCase {
            case: "image from the instance",
            claim_image: None,
            instance: Some((Some("ami-old"), Some("subnet-a"), SGS)),
            want: Some("runs image ami-old"),
            ..base
        },
        CloudCase {
            case: "subnet no longer selected",
            instance: Some((Some("ami-new"), Some("subnet-gone"), SGS)),
            want: Some("NodeClaim n-claim's instance is in subnet subnet-gone, no longer among EC2NodeClass default's subnets (subnet-a, subnet-b)"),
            ..base
        },
        CloudCase { case: "no resolved subnets", subnets: &[], instance: Some((None, Some("subnet-gone"), SGS)), ..base },
        CloudCase { case: "subnet unknown", instance: Some((None, None, SGS)), ..base },
        CloudCase {
            case: "a security group more",
            instance: Some((None, Some("subnet-a"), &["sg-1", "sg-2", "sg-3"])),
            want: Some("NodeClaim n-claim's instance has security groups sg-1, sg-2, sg-3, not EC2NodeClass default's (sg-1, sg-2)"),
            ..base
        },
        CloudCase {
            case: "a security group fewer",
            instance: Some((None, Some("subnet-a"), &["sg-1"])),
            want: Some("has security groups sg-1, not"),
            ..base
        },
        CloudCase { case: "no resolved security groups", groups: &[], instance: Some((None, Some("subnet-a"), &["sg-9"])), ..base },
        CloudCase { case: "security groups unknown", instance: Some((None, Some("subnet-a"), &[])), ..base },
        CloudCase { case: "instance unknown", instance: None, ..base },
    ];
    for c in &cases {
        let d = run(&cloud_state(c));
        let got: Vec<(DisruptionReason, Option<&str>)> = d
            .decisions
            .iter()
            .map(|x| (x.reason, x.detail.as_deref()))
            .collect();
        match c.want {
            None => assert!(got.is_empty(), "{}: {got:?}", c.case),
            Some(w) => {
                assert_eq!(got.len(), 1, "{}: {got:?}", c.case);
                assert_eq!(got[0].0, DisruptionReason::Drifted, "{}", c.case);
                assert!(
                    got[0].1.is_some_and(|g| g.contains(w)),
                    "{}: {got:?}",
                    c.case
                );
            }
        }
    }
}

/// The status a resolved node class reports: one AMI per architecture and
/// variant, with requirements that tell GPU types from the others.
#[test]
fn a_resolved_node_class_reports_its_status() {
    use crate::launch::nodeclass::{AmiVariant, ResolvedImage};
    let spec = crate::launch::nodeclass::Ec2NodeClassSpec::default();
    let image = |id: &str, arch: &str, variant| ResolvedImage {
        id: id.into(),
        name: id.into(),
        architecture: arch.into(),
        creation_date: "2026-01-01T00:00:00Z".into(),
        variant,
    };
    let r = crate::launch::nodeclass::ResolvedNodeClass {
        name: "default".into(),
        spec,
        subnets: vec![],
        security_groups: vec![],
        images: vec![
            image("ami-std", "amd64", AmiVariant::Standard),
            image("ami-gpu", "amd64", AmiVariant::Nvidia),
        ],
    };
    let status = r.status();
    let mut s = cloud_state(&CloudCase {
        case: "",
        amis: &[],
        subnets: &[],
        groups: &[],
        claim_image: Some("ami-gpu"),
        instance: None,
        want: None,
    });
    s.node_classes[0].status = status;
    // An m5.xlarge (no GPU) on the NVIDIA AMI: not among those serving it.
    let d = run(&s);
    assert_eq!(
        d.decisions[0].detail.as_deref(),
        Some("NodeClaim n-claim runs image ami-gpu, no longer among EC2NodeClass default's AMIs (ami-std)")
    );
    s.node_claims[0].image_id = Some("ami-std".into());
    assert!(run(&s).decisions.is_empty());
}

#[test]
fn nodes_of_no_pool_are_never_disrupted_but_take_pods() {
    let mut other = node("static", "m5.2xlarge", "us-west-2a", "on-demand", vec![]);
    other.labels.remove(labels::NODEPOOL);
    let s = cluster(vec![
        other,
        node(
            "a",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "1", "2Gi")],
        ),
    ]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Underutilized, vec!["a".to_string()])]
    );
    assert_eq!(d.decisions[0].moves[0].to, "static");
    assert!(d.decisions[0].replacements.is_empty());
}

#[test]
fn a_pod_that_fits_nowhere_blocks_drift() {
    let mut s = cluster(vec![node(
        "spot",
        "m5.xlarge",
        "us-west-2a",
        "spot",
        vec![pod("web1", "3", "8Gi")],
    )]);
    s.nodes[0].pods[1]
        .node_selector
        .add(Requirement::new("example.com/rack", Operator::In, &["r1"]).expect("req"));
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{d:#?}");
    assert!(
        d.blocked[0].reason.contains("default/web1"),
        "{:?}",
        d.blocked
    );
}

#[test]
fn reserved_capacity_counts_free() {
    let mut s = cluster(vec![
        node(
            "res",
            "m5.xlarge",
            "us-west-2a",
            "reserved",
            vec![pod("web1", "1", "2Gi")],
        ),
        node(
            "od",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("api1", "1", "2Gi")],
        ),
    ]);
    s.node_pools[0].requirements.remove(labels::CAPACITY_TYPE);
    s.node_pools[0].requirements.add(
        Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            &["on-demand", "reserved"],
        )
        .expect("req"),
    );
    let d = run(&s);
    // The on-demand node's pod moves onto the free reserved node, never
    // the other way round.
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Underutilized, vec!["od".to_string()])]
    );
    assert_eq!(d.decisions[0].moves[0].to, "res");
}

#[test]
fn deterministic_and_stable_once_applied() {
    let mut nodes = Vec::new();
    for i in 0..12 {
        let ty = ["m5.xlarge", "m5.2xlarge", "c5.xlarge", "m5.large"][i % 4];
        let zone = ["us-west-2a", "us-west-2b", "us-west-2c"][i % 3];
        let pods = (0..(i % 5))
            .map(|k| {
                pod(
                    &format!("app{i}x{k}"),
                    ["250m", "500m", "1"][k % 3],
                    ["512Mi", "1Gi", "2Gi"][k % 3],
                )
            })
            .collect();
        nodes.push(node(&format!("n{i:02}"), ty, zone, "on-demand", pods));
    }
    let s = cluster(nodes);
    let first = run(&s);
    assert_eq!(first, run(&s));
    assert!(!first.decisions.is_empty());
    for d in &first.decisions {
        eprintln!(
            "round1 {:?} {:?} {:?} -> {:?}",
            d.reason,
            d.nodes,
            d.price,
            d.replacements
                .iter()
                .map(|r| (&r.name, &r.price.instance_type, r.pods.len()))
                .collect::<Vec<_>>()
        );
    }
    // A node that received pods in a run is not removed in the same run
    // (its pods would move twice), so a later run may take it in a group
    // the first could not see. What must hold: each round is
    // deterministic, lowers the cluster's price, and the rounds reach a
    // fixed point (a run that decides nothing) within a few rounds.
    let price = |s: &ClusterState| -> f64 {
        s.nodes
            .iter()
            .filter_map(|n| super::price::node_cost(&catalog(), &[], &n.labels))
            .map(|c| c.dollars)
            .sum()
    };
    let mut state = apply(&s, &first);
    let mut last_price = price(&state);
    assert!(last_price < price(&s), "the first round saves");
    let mut fixed = false;
    for round in 2..=4 {
        let d = run(&state);
        assert_eq!(d, run(&state), "round {round} is deterministic");
        if d.decisions.is_empty() {
            fixed = true;
            break;
        }
        state = apply(&state, &d);
        let p = price(&state);
        assert!(
            p < last_price,
            "round {round} saves: {p} !< {last_price}: {d:#?}"
        );
        last_price = p;
    }
    assert!(fixed, "no fixed point within 4 rounds");
}

/// The cluster after `d`: removed nodes gone, pods where they moved,
/// replacements as nodes of their cheapest offering.
pub(crate) fn apply(s: &ClusterState, d: &Disruptions) -> ClusterState {
    let mut out = s.clone();
    let removed: Vec<&String> = d.decisions.iter().flat_map(|d| &d.nodes).collect();
    let mut moved: BTreeMap<String, Pod> = BTreeMap::new();
    for n in s.nodes.iter().filter(|n| removed.contains(&&n.name)) {
        for p in &n.pods {
            moved.insert(p.key(), p.clone());
        }
    }
    out.nodes.retain(|n| !removed.contains(&&n.name));
    for dec in &d.decisions {
        for r in &dec.replacements {
            let mut n = node(
                &r.name,
                &r.price.instance_type,
                &r.price.zone,
                r.price.capacity_type.as_str(),
                vec![],
            );
            n.allocatable = r.resources.allocatable.clone();
            n.created_at = Some(NOW);
            n.pods[0].created_at = Some(NOW);
            out.nodes.push(n);
        }
        for m in &dec.moves {
            if let (Some(mut p), Some(n)) = (
                moved.remove(&m.pod),
                out.nodes.iter_mut().find(|n| n.name == m.to),
            ) {
                p.node_name = Some(n.name.clone());
                p.created_at = Some(NOW);
                n.pods.push(p);
            }
        }
    }
    out
}

#[test]
fn replacements_of_one_run_take_their_own_pods() {
    // Two expired nodes whose pods need a replacement each: the second
    // simulation names its NodeClaim `default-1` again, while the first
    // decision's replacement already is node `default-1` of the working
    // state. Each decision's moves must still name its own replacement.
    let c = catalog();
    let nodes = (0..2)
        .map(|i| {
            let pods = (0..3)
                .map(|k| pod(&format!("big{i}x{k}"), "2500m", "4Gi"))
                .collect();
            let mut n = node(
                &format!("old-{i}"),
                "m5.2xlarge",
                "us-west-2a",
                "on-demand",
                pods,
            );
            n.created_at = Some(NOW - 31 * DAY);
            n
        })
        .collect();
    let opts = DisruptOptions {
        now: NOW,
        ..DisruptOptions::default()
    };
    let out = disrupt(&cluster(nodes), &c, &opts);
    let expired: Vec<&Decision> = out
        .decisions
        .iter()
        .filter(|d| d.reason == DisruptionReason::Expired)
        .collect();
    assert_eq!(expired.len(), 2, "{out:?}");
    let mut names = BTreeSet::new();
    for d in expired {
        assert!(!d.replacements.is_empty(), "{d:?}");
        for r in &d.replacements {
            assert!(names.insert(r.name.clone()), "{} named twice", r.name);
            let mut moved: Vec<&str> = d
                .moves
                .iter()
                .filter(|m| m.to == r.name)
                .map(|m| m.pod.as_str())
                .collect();
            moved.sort();
            let mut pods: Vec<&str> = r.pods.iter().map(String::as_str).collect();
            pods.sort();
            assert_eq!(moved, pods, "{}: moves and pods differ", r.name);
            assert!(!moved.is_empty(), "{}", r.name);
        }
    }
}

#[test]
fn nominated_nodes_are_neither_candidates_nor_destinations_nor_counted() {
    // `repl` is an in-flight decision's replacement, empty until the pods
    // it was launched for arrive; `busy` could move onto it.
    let s = cluster(vec![
        node("repl", "m5.xlarge", "us-west-2a", "on-demand", vec![]),
        node(
            "busy",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("api", "1", "2Gi")],
        ),
    ]);
    let plain = run(&s);
    assert!(
        plain.decisions.iter().any(|d| d.nodes == ["repl"]),
        "without the pipeline's knowledge the empty node goes: {plain:#?}"
    );
    let opts = DisruptOptions {
        now: NOW,
        nominated: ["repl".to_string()].into(),
        ..DisruptOptions::default()
    };
    let d = disrupt(&s, &catalog(), &opts);
    for dec in &d.decisions {
        assert!(!dec.nodes.iter().any(|n| n == "repl"), "{d:#?}");
        assert!(dec.moves.iter().all(|m| m.to != "repl"), "{d:#?}");
    }
}

/// Two `m5.large`s (one 5 GiB pod each) cost exactly one `m5.xlarge`:
/// only their second root volume makes replacing them pay.
fn two_large_nodes_with_roots_of(gib: u64) -> ClusterState {
    let mut s = cluster(vec![
        node(
            "a",
            "m5.large",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "1200m", "5Gi")],
        ),
        node(
            "b",
            "m5.large",
            "us-west-2a",
            "on-demand",
            vec![pod("api1", "1200m", "5Gi")],
        ),
    ]);
    s.node_pools[0].node_class = Some("nc".into());
    s.node_classes.push(NodeClass {
        name: "nc".into(),
        kind: "EC2NodeClass".into(),
        ami_family: AmiFamily::AL2023,
        root_volume_size: None,
        volumes: Some(vec![crate::catalog::ebs::EbsVolume::gp3("/dev/xvda", gib)]),
        spec: serde_json::Value::Null,
        template_hash: None,
        status: Default::default(),
    });
    s
}

#[test]
fn volumes_are_priced_into_consolidation_and_reported_beside_the_instances() {
    let vol = |gib: f64| gib * 0.08 / crate::catalog::ebs::HOURS_PER_MONTH;
    // 1 GiB roots: one m5.xlarge saves $0.0001/h, under 1%: nothing.
    let d = run(&two_large_nodes_with_roots_of(1));
    assert!(d.decisions.is_empty(), "{d:#?}");
    // 100 GiB roots: the second volume is 5% of what the two nodes cost.
    let d = run(&two_large_nodes_with_roots_of(100));
    assert_eq!(
        reasons(&d),
        vec![(
            DisruptionReason::Underutilized,
            vec!["a".to_string(), "b".to_string()]
        )],
        "{d:#?}"
    );
    let dec = &d.decisions[0];
    assert_eq!(dec.replacements.len(), 1);
    assert_eq!(dec.replacements[0].price.instance_type, "m5.xlarge");
    let p = dec.price;
    // `before` / `after` keep their meaning: the instances.
    assert!(
        (p.before - 0.192).abs() < 1e-6 && (p.after - 0.192).abs() < 1e-6,
        "{p:?}"
    );
    assert!((p.volumes_before - 2.0 * vol(100.0)).abs() < 1e-6, "{p:?}");
    assert!((p.volumes_after - vol(100.0)).abs() < 1e-6, "{p:?}");
    assert!((p.total_before - (p.before + p.volumes_before)).abs() < 2e-6);
    assert!((p.total_after - (p.after + p.volumes_after)).abs() < 2e-6);
    assert!((dec.replacements[0].volume_price - vol(100.0)).abs() < 1e-6);
}

#[test]
fn a_node_without_node_class_is_priced_with_al2023_default_root() {
    let s = cluster(vec![node(
        "idle",
        "m5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![],
    )]);
    let d = run(&s);
    let p = d.decisions[0].price;
    assert!(
        (p.volumes_before - 20.0 * 0.08 / 730.0).abs() < 1e-6,
        "{p:?}"
    );
    assert_eq!((p.after, p.volumes_after, p.total_after), (0.0, 0.0, 0.0));
}

/// A NodePool offering spot and on-demand; `families: false` lifts the
/// m5/c5 restriction (burstable types come in).
fn spot_pool(families: bool) -> NodePool {
    let mut np = pool();
    np.requirements.remove(labels::CAPACITY_TYPE);
    np.requirements.add(
        Requirement::new(labels::CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]).expect("req"),
    );
    if !families {
        np.requirements.remove(labels::INSTANCE_FAMILY);
    }
    np
}

/// A cluster of one m5.2xlarge `big` on capacity type `ct` running `pods`,
/// in `pool`, and the one decision its run must take: `big`
/// Underutilized (`case` names the table row in failures).
fn big_node_replaced(
    case: usize,
    pods: Vec<Pod>,
    ct: &str,
    pool: NodePool,
) -> (ClusterState, Decision) {
    let mut s = cluster(vec![node("big", "m5.2xlarge", "us-west-2a", ct, pods)]);
    s.node_pools = vec![pool];
    let mut d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Underutilized, vec!["big".to_string()])],
        "case {case}: {d:#?}"
    );
    let decision = d.decisions.remove(0);
    (s, decision)
}

#[test]
fn a_node_whose_pods_the_scheduler_spreads_is_replaced_by_one_packed_node() {
    // (pods, cpu, memory, m5/c5 only, replacements): the default plan for
    // the pods spreads them over several cheap spot NodeClaims, more than
    // the one node removed; packed (Karpenter's first fit) they take one,
    // unless a split saves 5% of the node's price more (case 1: two
    // t3a.medium instead of one t3a.xlarge).
    let cases: &[(usize, &str, &str, bool, usize)] = &[
        (6, "1", "2Gi", false, 1),
        (6, "500m", "1Gi", false, 2),
        (6, "200m", "1500Mi", true, 1),
        (8, "250m", "1Gi", true, 1),
    ];
    for (i, &(n, cpu, mem, families, want)) in cases.iter().enumerate() {
        let pods: Vec<Pod> = (0..n).map(|k| pod(&format!("w{k}"), cpu, mem)).collect();
        let pending = ClusterState {
            pending_pods: pods.clone(),
            node_pools: vec![spot_pool(families)],
            ..ClusterState::default()
        };
        let spread = crate::scheduler::schedule(&pending, &catalog(), &Default::default());
        assert!(spread.node_claims.len() > 1, "case {i}: {spread:#?}");
        let (_, decision) = big_node_replaced(i, pods, "on-demand", spot_pool(families));
        assert_eq!(decision.replacements.len(), want, "case {i}: {decision:#?}");
        assert!(
            decision.price.after < decision.price.before,
            "case {i}: {decision:#?}"
        );
        let to = &decision.replacements[0].name;
        assert_eq!(decision.moves.len(), n, "case {i}: {decision:#?}");
        assert!(
            want > 1 || decision.moves.iter().all(|m| &m.to == to),
            "case {i}"
        );
    }
}

#[test]
fn a_node_is_split_only_when_several_nodes_save_five_percent_more() {
    // (pods, cpu, memory, capacity type of the m5.2xlarge, replacements):
    // twelve small pods fit four t3a.medium spot nodes for half the price
    // of the one t3a.2xlarge spot node that packs them (a split); six
    // 1-cpu pods gain nothing by splitting (one node); on a spot node the
    // split is taken when every replacement keeps 15 cheaper types.
    let cases: &[(usize, &str, &str, &str, usize)] = &[
        (12, "500m", "1Gi", "on-demand", 4),
        (6, "1", "2Gi", "on-demand", 1),
        (12, "500m", "1Gi", "spot", 4),
    ];
    for (i, &(n, cpu, mem, ct, want)) in cases.iter().enumerate() {
        let pods: Vec<Pod> = (0..n).map(|k| pod(&format!("w{k}"), cpu, mem)).collect();
        let (s, decision) = big_node_replaced(i, pods, ct, spot_pool(false));
        assert_eq!(decision.replacements.len(), want, "case {i}: {decision:#?}");
        assert_eq!(decision.moves.len(), n, "case {i}");
        let saving = decision.price.before - decision.price.after;
        assert!(
            saving > decision.price.before * 0.05,
            "case {i}: {decision:#?}"
        );
        // Spot to spot: each replacement keeps its 15 cheapest types, and
        // whichever of them EC2 launches, the split still saves.
        let cat = catalog();
        let spot_price = |t: &str| {
            cat.get(t)
                .into_iter()
                .flat_map(|e| e.offerings.iter())
                .filter(|o| {
                    o.capacity_type == crate::catalog::CapacityType::Spot && o.zone == "us-west-2a"
                })
                .map(|o| o.price)
                .fold(0.0, f64::max)
        };
        let mut worst = decision.price.volumes_after;
        for r in &decision.replacements {
            if ct == "spot" {
                assert_eq!(r.instance_types.len(), 15, "case {i}: {r:#?}");
                worst += r
                    .instance_types
                    .iter()
                    .map(|t| spot_price(t))
                    .fold(0.0, f64::max);
            }
        }
        if ct == "spot" {
            assert!(worst < decision.price.total_before, "case {i}: {worst}");
        }
        // Carried out, the split is stable: nothing more to decide.
        let mut after = s.clone();
        after.nodes.clear();
        for (k, r) in decision.replacements.iter().enumerate() {
            let on: Vec<Pod> = decision
                .moves
                .iter()
                .filter(|m| m.to == r.name)
                .map(|m| pod(m.pod.trim_start_matches("default/"), cpu, mem))
                .collect();
            let ty = r.instance_types[0].as_str();
            let mut nd = node(&format!("r{k}"), ty, "us-west-2a", "spot", on);
            nd.allocatable = r.resources.allocatable.clone();
            after.nodes.push(nd);
        }
        let again = run(&after);
        assert!(again.decisions.is_empty(), "case {i}: {again:#?}");
    }
}

#[test]
fn no_decision_removes_more_nodes_than_one_transaction_takes() {
    // 150 nodes of one small pod each, whose pods all fit on a large node
    // of no pool, a 100% budget: all 150 go, in decisions of at most
    // MAX_DECISION_NODES (the disrupt stage writes a decision and one
    // marker per node in one DynamoDB transaction of at most 100 writes).
    let mut nodes: Vec<Node> = (0..150)
        .map(|i| {
            let p = pod(&format!("w{i}"), "50m", "64Mi");
            node(
                &format!("n{i:03}"),
                "m5.large",
                "us-west-2a",
                "on-demand",
                vec![p],
            )
        })
        .collect();
    let mut big = node("big", "m5.2xlarge", "us-west-2a", "on-demand", vec![]);
    big.labels.remove(labels::NODEPOOL);
    big.allocatable = res("64", "256Gi", "250");
    nodes.push(big);
    let d = run(&cluster(nodes));
    let removed: usize = d.decisions.iter().map(|x| x.nodes.len()).sum();
    assert_eq!(removed, 150, "{:#?}", reasons(&d));
    assert!(
        d.decisions
            .iter()
            .all(|x| x.nodes.len() <= super::MAX_DECISION_NODES),
        "{:#?}",
        reasons(&d)
    );
    for x in &d.decisions {
        assert!(x.moves.iter().all(|m| m.to == "big"));
        assert_eq!(x.moves.len(), x.nodes.len(), "each part moves its own pods");
    }
}

#[test]
fn spot_nodes_merge_only_when_whatever_ec2_launches_saves() {
    // (spot m5.large nodes, each running one 1200m / 5Gi pod that fits in
    // no other's room; nodes merged per decision): three merge onto one
    // spot NodeClaim whose 15 cheapest types all cost less than the three;
    // six, as two such threes. Two or four would save at the cheapest
    // type that holds their pods, but not at the dearest of its 15
    // cheapest (Karpenter's spot-to-spot flexibility), so they stay.
    let cases: &[(usize, &[usize])] = &[(3, &[3]), (6, &[3, 3]), (2, &[]), (4, &[])];
    let cat = catalog();
    for &(k, want) in cases {
        let pods = |i: usize| pod(&format!("w{i}x"), "1200m", "5Gi");
        let nodes: Vec<Node> = (0..k)
            .map(|i| {
                node(
                    &format!("s{i}"),
                    "m5.large",
                    "us-west-2a",
                    "spot",
                    vec![pods(i)],
                )
            })
            .collect();
        let mut s = cluster(nodes);
        s.node_pools = vec![spot_pool(false)];
        let d = run(&s);
        let merged: Vec<usize> = d.decisions.iter().map(|x| x.nodes.len()).collect();
        assert_eq!(merged, want, "{k} nodes: {d:#?}");
        for x in &d.decisions {
            assert_eq!(x.reason, DisruptionReason::Underutilized);
            let mut worst = x.price.volumes_after;
            for r in &x.replacements {
                assert_eq!(r.capacity_types, vec![CapacityType::Spot], "{r:#?}");
                assert_eq!(r.instance_types.len(), 15, "{r:#?}");
                worst += r
                    .instance_types
                    .iter()
                    .map(|t| {
                        let offers = cat.get(t).into_iter().flat_map(|e| e.offerings.iter());
                        offers
                            .filter(|o| {
                                o.capacity_type == CapacityType::Spot && r.zones.contains(&o.zone)
                            })
                            .map(|o| o.price)
                            .fold(f64::INFINITY, f64::min)
                    })
                    .fold(0.0, f64::max);
            }
            assert!(worst < x.price.total_before, "{k} nodes: {worst} {x:#?}");
        }
        if want.is_empty() {
            // Not for want of a cheaper node: planned afresh, packed onto
            // the fewest NodeClaims, their pods cost less than the nodes.
            let pending = ClusterState {
                pending_pods: (0..k).map(pods).collect(),
                node_pools: vec![spot_pool(false)],
                ..ClusterState::default()
            };
            let opts = crate::scheduler::SchedulerOptions {
                pack_fewest_nodes: true,
                ..Default::default()
            };
            let plan = crate::scheduler::schedule(&pending, &cat, &opts);
            let m5_large = cat.get("m5.large").expect("m5.large").offerings.iter();
            let spot = m5_large
                .filter(|o| o.capacity_type == CapacityType::Spot && o.zone == "us-west-2a")
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min);
            let volumes = plan.node_claims.first().map_or(0.0, |c| c.volume_price);
            let before = k as f64 * (spot + volumes);
            assert!(
                plan.summary.total_hourly_price < before,
                "{k} nodes: {plan:#?}"
            );
        }
    }
}

/// A PDB `default/api` over the pods labelled `app: api`.
fn api_pdb(max_unavailable: Option<u32>, status: Option<u32>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        namespace: "default".into(),
        name: "api".into(),
        selector: LabelSelector {
            match_labels: [("app".to_string(), "api".to_string())].into(),
            match_expressions: vec![],
        },
        min_available: None,
        max_unavailable: max_unavailable.map(IntOrPercent::Int),
        disruptions_allowed: status,
    }
}

/// Pods of `default/api` the graceful decisions of `d` evict.
fn api_evictions(d: &Disruptions) -> usize {
    d.decisions
        .iter()
        .filter(|x| !x.reason.is_forceful())
        .flat_map(|x| &x.moves)
        .filter(|m| m.pod.starts_with("default/api"))
        .count()
}

/// The nodes of the graceful decisions of `d`, sorted.
fn graceful_nodes(d: &Disruptions) -> Vec<&str> {
    let mut v: Vec<&str> = d
        .decisions
        .iter()
        .filter(|x| !x.reason.is_forceful())
        .flat_map(|x| x.nodes.iter().map(String::as_str))
        .collect();
    v.sort_unstable();
    v
}

/// (api pods per node, maxUnavailable, status, budget %, nodes
/// disrupted, a node blocked by the PDB, `n00` among them)
type PdbCase = (
    &'static [usize],
    Option<u32>,
    Option<u32>,
    u32,
    usize,
    bool,
    bool,
);

#[test]
fn pdb_allowances_bound_all_graceful_decisions_of_a_run() {
    // As Karpenter (`CanEvictPods`), a node may be disrupted while every
    // PDB covering its pods allows an eviction, however many of its pods
    // it covers: the nodes of one decision drain through the Eviction API,
    // one eviction at a time as the PDB allows (three nodes, 100%:
    // /tmp/audit18/d.yaml, two removed at once). Run-wide, a decision then
    // uses up its pods' allowance (at most what is left), and a later
    // candidate whose PDB has nothing left is blocked, named (twenty
    // nodes, 10%: d2.yaml, one decision).
    let cases: [PdbCase; 7] = [
        (&[1; 3], Some(1), None, 100, 2, false, false),
        (&[1; 20], Some(1), Some(1), 10, 1, true, false),
        (&[1; 6], Some(2), None, 100, 5, false, false),
        (&[1; 6], None, Some(3), 100, 5, false, false),
        (&[2; 4], Some(1), None, 100, 2, true, false),
        (&[2; 4], Some(3), None, 100, 2, true, false),
        // Two replicas on n00 under an allowance of one: n00 is
        // disrupted (onto n01 and n02); n01's replica finds the allowance
        // used up.
        (&[2, 1, 0], None, Some(1), 100, 1, true, true),
    ];
    for (case, &(per_node, max, status, pct, want, pdb_blocks, n00)) in cases.iter().enumerate() {
        let mut s = pdb_cluster(per_node, max, status, pct);
        if n00 {
            // The other nodes fuller: n00 goes first, onto n02 (which
            // stays: do-not-disrupt); n01 has no room for its pods.
            for (i, n) in s.nodes.iter_mut().enumerate().skip(1) {
                let cpu = if i == 1 { "1300m" } else { "900m" };
                let mut filler = pod(&format!("filler{i}"), cpu, "512Mi");
                filler.node_name = Some(n.name.clone());
                if i == 2 {
                    filler
                        .annotations
                        .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
                }
                n.pods.push(filler);
            }
        }
        let d = run(&s);
        let nodes = graceful_nodes(&d);
        assert_eq!(nodes.len(), want, "case {case}: {d:#?}");
        if n00 {
            assert_eq!(nodes, ["n00"], "case {case}: {d:#?}");
            assert_eq!(api_evictions(&d), per_node[0], "case {case}: {d:#?}");
        }
        // Where the allowance ran out, a node left is blocked by the PDB,
        // named.
        let named: Vec<&str> = d
            .blocked
            .iter()
            .filter(|b| b.reason.contains("PodDisruptionBudget default/api"))
            .map(|b| b.node.as_str())
            .collect();
        assert_eq!(!named.is_empty(), pdb_blocks, "case {case}: {d:#?}");
        assert!(named.iter().all(|b| !nodes.contains(b)), "case {case}");
        if n00 {
            assert_eq!(named, ["n01"], "case {case}: {d:#?}");
        }
    }
}

/// Nodes `n00`.. (m5.large) holding `per_node[i]` pods of `default/api`
/// each, under [`api_pdb`], in a pool whose budget allows `pct`% of nodes.
fn pdb_cluster(
    per_node: &[usize],
    max: Option<u32>,
    status: Option<u32>,
    pct: u32,
) -> ClusterState {
    let nodes: Vec<Node> = per_node
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let pods = (0..k)
                .map(|j| pod(&format!("api{i}x{j}"), "300m", "512Mi"))
                .map(|mut p| {
                    p.labels.insert("app".into(), "api".into());
                    p
                })
                .collect();
            node(
                &format!("n{i:02}"),
                "m5.large",
                "us-west-2a",
                "on-demand",
                pods,
            )
        })
        .collect();
    let mut s = ClusterState {
        pdbs: vec![api_pdb(max, status)],
        ..cluster(nodes)
    };
    s.node_pools[0].disruption.budgets[0].nodes = IntOrPercent::Percent(pct);
    s
}

#[test]
fn drift_respects_allowances_used_by_earlier_decisions() {
    // Two drifted spot nodes (the pool allows on-demand only), each with
    // one api pod; the PDB allows one eviction: one is replaced, the
    // other blocked, naming the PDB.
    let api = |name: &str| {
        let mut p = pod(name, "3", "8Gi"); // two do not fit on one node
        p.labels.insert("app".into(), "api".into());
        p
    };
    let s = ClusterState {
        pdbs: vec![api_pdb(None, Some(1))],
        ..cluster(vec![
            node("d0", "m5.xlarge", "us-west-2a", "spot", vec![api("api0")]),
            node("d1", "m5.xlarge", "us-west-2a", "spot", vec![api("api1")]),
        ])
    };
    let d = run(&s);
    assert_eq!(api_evictions(&d), 1, "{d:#?}");
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Drifted, vec!["d0".to_string()])]
    );
    let why = &d
        .blocked
        .iter()
        .find(|b| b.node == "d1")
        .expect("d1 blocked")
        .reason;
    assert!(
        why.contains("PodDisruptionBudget default/api") && why.contains("this run"),
        "{why}"
    );
}

#[test]
fn a_spot_node_without_spot_to_spot_flexibility_is_reported() {
    // A spot m5.xlarge with a 1-cpu pod in a spot pool of m5.large and
    // m5.xlarge only: the one cheaper type is not the 15 Karpenter needs
    // (/tmp/audit18/j.yaml). Blocked, saying why.
    let mut s = cluster(vec![node(
        "s1",
        "m5.xlarge",
        "us-west-2a",
        "spot",
        vec![pod("web1", "1", "1Gi")],
    )]);
    let mut np = spot_pool(false);
    np.requirements.remove(labels::CAPACITY_TYPE);
    np.requirements
        .add(Requirement::new(labels::CAPACITY_TYPE, Operator::In, &["spot"]).expect("req"));
    np.requirements.add(
        Requirement::new(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["m5.large", "m5.xlarge"],
        )
        .expect("req"),
    );
    s.node_pools = vec![np];
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{d:#?}");
    assert_eq!(d.blocked.len(), 1, "{d:#?}");
    let why = &d.blocked[0].reason;
    // m5.large, and m5.xlarge in a zone where spot costs less.
    let found = why
        .strip_prefix("spot-to-spot consolidation needs at least 15 cheaper instance types; ")
        .and_then(|r| r.strip_suffix(" found"))
        .and_then(|n| n.parse::<usize>().ok());
    assert!(found.is_some_and(|n| (1..15).contains(&n)), "{why}");
}

#[test]
fn nodes_already_disrupting_use_up_their_pods_pdb_allowances() {
    // (PDB status disruptionsAllowed, `d0` already disrupting, `d1`
    // decided): d0's api pod is being evicted by a decision in flight, so
    // a PDB allowing one eviction has none left for d1 (drifted).
    let cases = [(1, false, true), (1, true, false), (2, true, true)];
    for (allowed, in_flight, want) in cases {
        let api = |name: &str| {
            let mut p = pod(name, "3", "8Gi");
            p.labels.insert("app".into(), "api".into());
            p
        };
        let s = ClusterState {
            pdbs: vec![api_pdb(None, Some(allowed))],
            ..cluster(vec![
                node(
                    "d0",
                    "m5.xlarge",
                    "us-west-2a",
                    "on-demand",
                    vec![api("api0")],
                ),
                node("d1", "m5.xlarge", "us-west-2a", "spot", vec![api("api1")]),
            ])
        };
        let mut opts = DisruptOptions {
            now: NOW,
            ..DisruptOptions::default()
        };
        if in_flight {
            opts.disrupting = [("d0".to_string(), DisruptionReason::Underutilized)].into();
        }
        let d = disrupt(&s, &catalog(), &opts);
        let decided = d.decisions.iter().any(|x| x.nodes == ["d1"]);
        assert_eq!(
            decided, want,
            "allowed {allowed}, in flight {in_flight}: {d:#?}"
        );
        if !want {
            let why = d.blocked.iter().find(|b| b.node == "d1");
            assert!(
                why.is_some_and(|b| b.reason.contains("PodDisruptionBudget default/api")),
                "{d:#?}"
            );
        }
    }
}

fn startup_taint() -> Taint {
    Taint {
        key: "example.com/booting".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }
}

/// How a test node stands: Ready, NotReady, or with its NodePool's startup
/// taint still on it (not initialized).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Health {
    Ready,
    NotReady,
    Booting,
    Deleting,
}

fn with_health(mut n: Node, h: Health) -> Node {
    match h {
        Health::Ready => n.ready = Some(true),
        Health::NotReady => n.ready = Some(false),
        Health::Booting => {
            n.ready = Some(true);
            n.taints.push(startup_taint());
        }
        Health::Deleting => {
            n.ready = Some(true);
            n.deleting = true;
            n.unschedulable = true;
        }
    }
    n
}

/// Nodes that are not Ready or not initialized are no candidates of
/// graceful disruption (reported blocked) and receive no moved pods;
/// forceful reasons act on them all the same.
#[test]
fn unready_nodes_are_held_from_graceful_disruption_but_not_from_forceful() {
    // (case, health, created days ago, interrupted, want: reason or None, blocked sentence part)
    type Case<'a> = (
        &'a str,
        Health,
        i64,
        bool,
        Option<DisruptionReason>,
        &'a str,
    );
    let cases: [Case; 6] = [
        (
            "empty and Ready",
            Health::Ready,
            2,
            false,
            Some(DisruptionReason::Empty),
            "",
        ),
        (
            "empty and NotReady",
            Health::NotReady,
            2,
            false,
            None,
            "not Ready",
        ),
        (
            "empty, startup taint left",
            Health::Booting,
            2,
            false,
            None,
            "not initialized",
        ),
        (
            "NotReady and expired",
            Health::NotReady,
            40,
            false,
            Some(DisruptionReason::Expired),
            "",
        ),
        (
            "booting and interrupted",
            Health::Booting,
            2,
            true,
            Some(DisruptionReason::Interrupted),
            "",
        ),
        (
            "NotReady and interrupted",
            Health::NotReady,
            2,
            true,
            Some(DisruptionReason::Interrupted),
            "",
        ),
    ];
    for (case, health, age_days, interrupted, want, blocked) in cases {
        let mut n = with_health(
            node("n", "m5.xlarge", "us-west-2a", "on-demand", vec![]),
            health,
        );
        n.created_at = Some(NOW - age_days * DAY);
        let mut s = cluster(vec![n]);
        s.node_pools[0].startup_taints = vec![startup_taint()];
        let opts = DisruptOptions {
            now: NOW,
            interrupted: if interrupted {
                ["n".to_string()].into()
            } else {
                BTreeSet::new()
            },
            ..DisruptOptions::default()
        };
        let d = disrupt(&s, &catalog(), &opts);
        let got: Vec<DisruptionReason> = d.decisions.iter().map(|d| d.reason).collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "{case}: {d:?}");
        if !blocked.is_empty() {
            assert!(
                d.blocked
                    .iter()
                    .any(|b| b.node == "n" && b.reason.contains(blocked)),
                "{case}: {:?}",
                d.blocked
            );
        }
    }
}

/// A pod of an underutilized node does not move onto a node that is not
/// Ready or not initialized: the decision would rely on it.
#[test]
fn unready_nodes_receive_no_moved_pods() {
    for (health, moved) in [
        (Health::Ready, true),
        (Health::NotReady, false),
        (Health::Booting, false),
    ] {
        let big = with_health(
            node(
                "big",
                "m5.2xlarge",
                "us-west-2a",
                "on-demand",
                vec![pod("api1", "4", "8Gi")],
            ),
            health,
        );
        let small = node(
            "small",
            "m5.large",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "500m", "1Gi")],
        );
        let mut s = cluster(vec![big, small]);
        s.node_pools[0].startup_taints = vec![startup_taint()];
        let d = run(&s);
        let onto_big = d
            .decisions
            .iter()
            .flat_map(|d| &d.moves)
            .any(|m| m.to == "big");
        assert_eq!(onto_big, moved, "{health:?}: {d:#?}");
    }
}

/// Budgets, Karpenter's way: nodes not initialized are not counted; nodes
/// NotReady or being deleted count against the allowance.
#[test]
fn budgets_count_not_ready_and_deleting_nodes_and_skip_uninitialized_ones() {
    use IntOrPercent::{Int, Percent};
    // (case, budget, others beside 4 empty Ready nodes, empty nodes removed)
    type Case<'a> = (&'a str, IntOrPercent, &'a [Health], usize);
    let cases: [Case; 7] = [
        ("nothing else", Int(2), &[], 2),
        ("one NotReady", Int(2), &[Health::NotReady], 1),
        (
            "two NotReady",
            Int(2),
            &[Health::NotReady, Health::NotReady],
            0,
        ),
        ("one being deleted", Int(2), &[Health::Deleting], 1),
        ("one booting", Int(2), &[Health::Booting], 2),
        (
            "50% of 4 initialized (2 booting not counted)",
            Percent(50),
            &[Health::Booting, Health::Booting],
            2,
        ),
        (
            "50% of 5, one NotReady",
            Percent(50),
            &[Health::NotReady],
            2,
        ),
    ];
    for (case, budget, others, want) in cases {
        let mut nodes: Vec<Node> = (0..4)
            .map(|i| {
                with_health(
                    node(
                        &format!("e{i}"),
                        "m5.xlarge",
                        "us-west-2a",
                        "on-demand",
                        vec![],
                    ),
                    Health::Ready,
                )
            })
            .collect();
        for (i, h) in others.iter().enumerate() {
            let busy = node(
                &format!("o{i}"),
                "m5.xlarge",
                "us-west-2a",
                "on-demand",
                vec![pod(&format!("db{i}"), "3", "8Gi")],
            );
            nodes.push(with_health(busy, *h));
        }
        let mut s = cluster(nodes);
        s.node_pools[0].startup_taints = vec![startup_taint()];
        s.node_pools[0].disruption.budgets = vec![Budget {
            nodes: budget,
            ..Budget::default_budget()
        }];
        let d = run(&s);
        let removed: usize = d
            .decisions
            .iter()
            .filter(|d| d.reason == DisruptionReason::Empty)
            .map(|d| d.nodes.len())
            .sum();
        assert_eq!(removed, want, "{case}: {d:#?}");
    }
}

/// Drifted nodes are taken as Karpenter's `Drift.ComputeCommands` takes
/// them: empty ones first, then earliest drift first (the `Drifted`
/// condition's time), whatever their age.
#[test]
fn drifted_nodes_go_empty_first_then_earliest_drift_first() {
    let one_at_a_time = |s: &mut ClusterState| {
        let d = &mut s.node_pools[0].disruption;
        d.consolidate_after_seconds = None; // no Empty: both drift
        d.budgets = vec![Budget {
            nodes: IntOrPercent::Int(1),
            ..Budget::default_budget()
        }];
    };
    // Both spot in an on-demand pool; the empty one is the younger.
    let mut s = cluster(vec![
        node(
            "busy",
            "m5.xlarge",
            "us-west-2a",
            "spot",
            vec![pod("web1", "1", "1Gi")],
        ),
        node("idle", "m5.xlarge", "us-west-2a", "spot", vec![]),
    ]);
    s.nodes[1].created_at = Some(NOW - DAY);
    one_at_a_time(&mut s);
    assert_eq!(
        reasons(&run(&s)),
        vec![(DisruptionReason::Drifted, vec!["idle".to_string()])]
    );
    // Two busy nodes drifted by their NodeClaims: b, launched later,
    // drifted earlier.
    let mut s = cluster(vec![
        node(
            "a",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "1", "1Gi")],
        ),
        node(
            "b",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("api1", "1", "1Gi")],
        ),
    ]);
    s.nodes[1].created_at = Some(NOW - DAY);
    for (n, t) in [("a", NOW - 60), ("b", NOW - 3_600)] {
        s.node_claims.push(NodeClaimObject {
            name: format!("{n}-claim"),
            node_pool: Some("default".into()),
            node_name: Some(n.into()),
            drifted: true,
            drifted_since: Some(t),
            ..NodeClaimObject::default()
        });
    }
    one_at_a_time(&mut s);
    assert_eq!(
        reasons(&run(&s)),
        vec![(DisruptionReason::Drifted, vec!["b".to_string()])]
    );
}

/// `Consolidatable=True` on a NodeClaim means consolidatable now:
/// Karpenter's nodeclaim controller sets it once `consolidateAfter` has
/// passed since the last pod event, so it is not waited for again from the
/// condition's time.
#[test]
fn consolidatable_condition_is_not_waited_for_again() {
    let mut s = cluster(vec![node(
        "idle",
        "m5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![],
    )]);
    s.node_pools[0].disruption.consolidate_after_seconds = Some(300);
    s.node_claims.push(NodeClaimObject {
        name: "idle-claim".into(),
        node_pool: Some("default".into()),
        node_name: Some("idle".into()),
        consolidatable_since: Some(NOW - 60),
        ..NodeClaimObject::default()
    });
    assert_eq!(
        reasons(&run(&s)),
        vec![(DisruptionReason::Empty, vec!["idle".to_string()])]
    );
}

/// A NodePool that says nothing of capacity types launches on-demand, but
/// its spot nodes have not drifted (Karpenter's requirement drift reads the
/// NodePool's own requirements): removing `capacity-type In [spot]` does
/// not replace every spot node with on-demand.
#[test]
fn the_on_demand_default_does_not_drift_spot_nodes() {
    let mut s = cluster(vec![node(
        "spot",
        "m5.xlarge",
        "us-west-2a",
        "spot",
        vec![pod("web1", "3", "8Gi")],
    )]);
    // The pool's capacity-type requirement is the input's default.
    s.node_pools[0].default_capacity_type = true;
    let d = run(&s);
    assert!(
        !d.decisions
            .iter()
            .any(|x| x.reason == DisruptionReason::Drifted),
        "{:?}",
        reasons(&d)
    );
    // Given by the NodePool itself, it drifts them.
    s.node_pools[0].default_capacity_type = false;
    assert_eq!(
        reasons(&run(&s)),
        vec![(DisruptionReason::Drifted, vec!["spot".to_string()])]
    );
}

/// A static NodePool's nodes (`spec.replicas`) are no candidates of
/// emptiness, drift or underutilized consolidation (Karpenter's
/// `OwnedByStaticNodePool`).
#[test]
fn static_node_pools_are_not_consolidated_or_drifted() {
    let mut s = cluster(vec![
        node("idle", "m5.xlarge", "us-west-2a", "on-demand", vec![]),
        node("spot", "m5.xlarge", "us-west-2a", "spot", vec![]),
        node(
            "light",
            "m5.2xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "100m", "128Mi")],
        ),
    ]);
    assert!(!run(&s).decisions.is_empty());
    s.node_pools[0].replicas = Some(3);
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{:?}", reasons(&d));
}

/// A node whose NodeClaim is being deleted (`metadata.deletionTimestamp`)
/// is being deleted, as Karpenter's `StateNode.MarkedForDeletion` has it:
/// no candidate, no destination, and counted as disrupting against its
/// NodePool's budget (suite_test.go: Candidate Filtering / should not
/// consider candidates that are deleting).
#[test]
fn a_deleting_node_claim_makes_its_node_deleting() {
    let empty = |name: &str| {
        with_health(
            node(name, "m5.xlarge", "us-west-2a", "on-demand", vec![]),
            Health::Ready,
        )
    };
    let claim = |node: &str, deleting: bool| NodeClaimObject {
        name: format!("nc-{node}"),
        node_pool: Some("default".into()),
        node_name: Some(node.into()),
        deleting,
        ..NodeClaimObject::default()
    };
    // (case, e0's claim deleting, budget, removed, e0 removed)
    let cases = [
        ("no claim deleting", false, 2, 2, true),
        (
            "e0's claim deleting: no candidate, 1 of 2 left",
            true,
            2,
            1,
            false,
        ),
        ("e0's claim deleting, budget 1 used up", true, 1, 0, false),
    ];
    for (case, deleting, budget, want, e0) in cases {
        let mut s = cluster(vec![empty("e0"), empty("e1"), empty("e2")]);
        s.node_claims = vec![
            claim("e0", deleting),
            claim("e1", false),
            claim("e2", false),
        ];
        s.node_pools[0].disruption.budgets = vec![Budget {
            nodes: IntOrPercent::Int(budget),
            ..Budget::default_budget()
        }];
        let d = run(&s);
        let removed: Vec<&String> = d
            .decisions
            .iter()
            .filter(|d| d.reason == DisruptionReason::Empty)
            .flat_map(|d| &d.nodes)
            .collect();
        assert_eq!(removed.len(), want, "{case}: {d:#?}");
        assert_eq!(removed.iter().any(|n| *n == "e0"), e0, "{case}: {d:#?}");
    }
}

/// Drift is Karpenter's eventual disruption (`EventualDisruptionClass`):
/// where a terminationGracePeriod bounds the drain (the NodeClaim's, else
/// the NodePool's), do-not-disrupt pods and PDBs do not keep a drifted node
/// and the decision carries that period; without one they do, and
/// do-not-disrupt on the node always does. Consolidation is graceful either
/// way (suite_test.go: Candidate Filtering / should consider candidates
/// that have do-not-disrupt (PDB-blocked) pods scheduled with a
/// terminationGracePeriod set for eventual disruption).
#[test]
fn drift_with_a_grace_period_goes_past_pod_blockers() {
    // (case, blocker, claim's grace, pool's grace, want: drifted and its grace)
    type Case<'a> = (&'a str, &'a str, Option<u64>, Option<u64>, Option<u64>);
    let cases: [Case; 8] = [
        (
            "do-not-disrupt pod, claim's grace",
            "pod",
            Some(300),
            None,
            Some(300),
        ),
        (
            "do-not-disrupt pod, pool's grace",
            "pod",
            None,
            Some(600),
            Some(600),
        ),
        ("claim's grace wins", "pod", Some(300), Some(600), Some(300)),
        ("do-not-disrupt pod, no grace", "pod", None, None, None),
        ("PDB, claim's grace", "pdb", Some(300), None, Some(300)),
        ("PDB, no grace", "pdb", None, None, None),
        ("node annotation, grace", "node", Some(300), Some(300), None),
        ("nothing, no grace", "", None, None, Some(0)),
    ];
    for (case, blocker, claim_grace, pool_grace, want) in cases {
        let mut p = pod("api1", "500m", "1Gi");
        if blocker == "pod" {
            p.annotations
                .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
        }
        let mut n = node("n", "m5.xlarge", "us-west-2a", "on-demand", vec![p]);
        if blocker == "node" {
            n.annotations
                .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
        }
        let mut s = cluster(vec![n]);
        if blocker == "pdb" {
            s.pdbs.push(api_pdb(Some(0), None));
        }
        s.node_pools[0].disruption.termination_grace_period_seconds = pool_grace;
        s.node_claims.push(NodeClaimObject {
            name: "n-claim".into(),
            node_pool: Some("default".into()),
            node_name: Some("n".into()),
            drifted: true,
            termination_grace_period_seconds: claim_grace,
            ..NodeClaimObject::default()
        });
        let d = run(&s);
        let drift = d
            .decisions
            .iter()
            .find(|x| x.reason == DisruptionReason::Drifted && x.nodes == ["n"]);
        match want {
            None => {
                assert!(drift.is_none(), "{case}: {d:#?}");
                assert!(d.blocked.iter().any(|b| b.node == "n"), "{case}: {d:#?}");
            }
            Some(g) => {
                let drift = drift.unwrap_or_else(|| panic!("{case}: {d:#?}"));
                assert_eq!(
                    drift.termination_grace_period_seconds,
                    (g > 0).then_some(g),
                    "{case}"
                );
                // A pod the blocker holds waits for the deadline: no
                // capacity is made for it (Karpenter's
                // IsCurrentlyReschedulable; drift_test.go: should not create
                // replacements for drifted nodes that have pods with the
                // blocking PDBs when the NodePool's TerminationGracePeriod
                // is not nil).
                let moved = usize::from(blocker.is_empty());
                assert_eq!(drift.replacements.len(), moved, "{case}: {drift:#?}");
                assert_eq!(drift.moves.len(), moved, "{case}: {drift:#?}");
            }
        }
    }
}

/// Karpenter orders consolidation candidates by price per disruption cost
/// (its pods' eviction costs): of two equally priced, equally used nodes
/// whose pods fit on each other, the one with fewer pods goes (Karpenter
/// `consolidation_test.go` "Delete / can delete nodes"). Before, the tie
/// went by name and moved two pods instead of one.
#[test]
fn of_equally_used_nodes_the_one_with_fewer_pods_is_deleted() {
    let s = cluster(vec![
        node(
            "a-two-pods",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "0", "0"), pod("web2", "0", "0")],
        ),
        node(
            "b-one-pod",
            "m5.xlarge",
            "us-west-2a",
            "on-demand",
            vec![pod("web3", "0", "0")],
        ),
    ]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(
            DisruptionReason::Underutilized,
            vec!["b-one-pod".to_string()]
        )]
    );
    assert!(d.decisions[0].replacements.is_empty());
}

/// Karpenter's consolidation simulations place no moved pod on a node
/// still under its NodePool's consolidateAfter (`IsUnderConsolidateAfter`:
/// its last pod event is more recent than consolidateAfter). Before, a node
/// whose pods had just changed still received the pods of a removed node
/// (consolidation_test.go "Delete / should not consolidate pods onto a
/// destination node that is under its consolidateAfter window").
#[test]
fn a_node_under_consolidate_after_receives_no_moved_pods() {
    let mut settling = pod("web2", "100m", "128Mi");
    settling.created_at = Some(NOW - 30);
    let mut s = cluster(vec![
        node(
            "settling",
            "c5.large",
            "us-west-2a",
            "on-demand",
            vec![settling],
        ),
        node(
            "source",
            "c5.large",
            "us-west-2a",
            "on-demand",
            vec![pod("web1", "100m", "128Mi")],
        ),
    ]);
    s.node_pools[0].disruption.consolidate_after_seconds = Some(60);
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{:?}", reasons(&d));
    // Once the window has passed, one of them goes onto the other.
    let later = disrupt(
        &s,
        &catalog(),
        &DisruptOptions {
            now: NOW + 120,
            ..DisruptOptions::default()
        },
    );
    assert_eq!(later.decisions.len(), 1, "{:?}", reasons(&later));
    assert!(later.decisions[0].replacements.is_empty());
}

/// The embedded catalog cut to `types`, each with the on-demand offerings
/// `offers(type)` gives (zone, price).
fn priced_catalog(types: &[&str], offers: impl Fn(&str) -> Vec<(&'static str, f64)>) -> Catalog {
    let mut cat = catalog();
    cat.entries
        .retain(|e| types.contains(&e.info.name.as_str()));
    for e in &mut cat.entries {
        let template = e.offerings[0].clone();
        e.offerings = offers(&e.info.name)
            .into_iter()
            .map(|(zone, price)| crate::catalog::Offering {
                zone: zone.into(),
                capacity_type: CapacityType::OnDemand,
                price,
                reservation: None,
                ..template.clone()
            })
            .collect();
    }
    cat
}

/// Karpenter keeps a replacement's instance type only when its worst
/// launch price (`Offerings.WorstLaunchPrice`: the dearest offering it may
/// launch as, in the zones the replacement allows) is below the nodes'
/// price. A type cheaper in one zone and dearer in another is not taken:
/// EC2 may launch it in the dear zone (consolidation_test.go "Replace /
/// won't replace node if any spot replacement is more expensive"). Before,
/// the cheapest offering was compared, and the planned type was kept
/// whatever it cost.
#[test]
fn a_replacement_type_dearer_in_one_of_its_zones_is_not_cheaper() {
    let s = cluster(vec![node(
        "n",
        "c5.xlarge",
        "us-west-2a",
        "on-demand",
        vec![pod("web1", "100m", "128Mi")],
    )]);
    let opts = DisruptOptions {
        now: NOW,
        ..DisruptOptions::default()
    };
    let cat = priced_catalog(&["c5.large", "c5.xlarge"], |t| {
        if t == "c5.xlarge" {
            vec![("us-west-2a", 0.5)]
        } else {
            vec![("us-west-2a", 0.6), ("us-west-2b", 0.2)]
        }
    });
    let d = disrupt(&s, &cat, &opts);
    assert!(d.decisions.is_empty(), "{:?}", d.decisions);
    // Cheaper in every zone: replaced.
    let cat = priced_catalog(&["c5.large", "c5.xlarge"], |t| {
        if t == "c5.xlarge" {
            vec![("us-west-2a", 0.5)]
        } else {
            vec![("us-west-2a", 0.4), ("us-west-2b", 0.2)]
        }
    });
    let d = disrupt(&s, &cat, &opts);
    assert_eq!(d.decisions.len(), 1, "{:?}", d.blocked);
    assert_eq!(d.decisions[0].replacements.len(), 1);
}

/// Karpenter's `RemoveInstanceTypeOptionsByPriceAndMinValues`: the
/// instance types left once the dearer ones are dropped must still meet the
/// NodePool's `minValues`, else there is no consolidation
/// (consolidation_test.go "Replace / Consolidation should fail if
/// filterByPrice breaks the minimum requirement from the NodePools").
/// Before, the replacement was cut to the cheaper types whatever its
/// `minValues`.
#[test]
fn a_replacement_cut_to_cheaper_types_keeps_min_values() {
    // Cheaper than c5.2xlarge among m5/c5: c5.large, m5.large, c5.xlarge,
    // m5.xlarge (4 types).
    let mut s = cluster(vec![node(
        "n",
        "c5.2xlarge",
        "us-west-2a",
        "on-demand",
        vec![pod("web1", "100m", "128Mi")],
    )]);
    s.node_pools[0]
        .min_values
        .insert(labels::INSTANCE_TYPE.to_string(), 5);
    let d = run(&s);
    assert!(d.decisions.is_empty(), "{:?}", d.decisions);
    s.node_pools[0]
        .min_values
        .insert(labels::INSTANCE_TYPE.to_string(), 4);
    let d = run(&s);
    assert_eq!(d.decisions.len(), 1, "{:?}", d.blocked);
    assert_eq!(d.decisions[0].replacements[0].instance_types.len(), 4);
}

/// A replace set is not taken when its most wasteful node alone saves as
/// much: the other nodes would be replaced for nothing. Karpenter's
/// multi-node consolidation launches at most one NodeClaim, so nodes that
/// need their own replacement (a zonal spread, or pods that do not share a
/// node) are left to single-node consolidation of the wasteful one
/// (consolidation_test.go "Topology Consideration / can replace node
/// maintaining zonal topology spread"). Before, the sizes compared
/// stopped at two nodes, and the pair was taken.
#[test]
fn a_replace_set_is_not_taken_when_one_node_saves_as_much() {
    // Each pod is pinned to its node's zone: neither moves to the other
    // node, and the pair would need a NodeClaim per zone.
    let pinned = |name: &str, zone: &str| {
        let mut p = pod(name, "1500m", "1Gi");
        p.node_selector =
            Requirements::from_iter_reqs([
                Requirement::new(labels::ZONE, Operator::In, &[zone]).expect("req")
            ]);
        p
    };
    let s = cluster(vec![
        node(
            "big",
            "m5.2xlarge",
            "us-west-2a",
            "on-demand",
            vec![pinned("web1", "us-west-2a")],
        ),
        node(
            "small",
            "c5.large",
            "us-west-2b",
            "on-demand",
            vec![pinned("api1", "us-west-2b")],
        ),
    ]);
    let d = run(&s);
    assert_eq!(
        reasons(&d),
        vec![(DisruptionReason::Underutilized, vec!["big".to_string()])],
        "{:#?}",
        d.decisions
    );
    assert_eq!(d.decisions[0].replacements.len(), 1);
}
