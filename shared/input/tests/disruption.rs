//! What disruption reads: PodDisruptionBudgets, NodeClaims, pod times,
//! NodePool budgets and termination grace periods, template hashes — each
//! field parsed, and each error naming the object and the field.

use std::collections::BTreeMap;

use flotilla_core::model::{
    Budget, ClusterState, DisruptionReason as R, IntOrPercent as IoP, NodeClaimObject,
};
use flotilla_input::{load, InputError, Source};

fn load_str(text: &str) -> Result<ClusterState, InputError> {
    load(&[Source {
        name: "in.yaml",
        bytes: text.as_bytes(),
    }])
}

fn ok(text: &str) -> ClusterState {
    match load_str(text) {
        Ok(s) => s,
        Err(e) => panic!("unexpected error: {e}\n{text}"),
    }
}

fn err(text: &str) -> InputError {
    match load_str(text) {
        Ok(_) => panic!("expected an error for\n{text}"),
        Err(e) => e,
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// 2024-01-07T00:00:00Z
const JAN7: i64 = 1_704_585_600;

fn pdb_doc(api: &str, spec: &str, status: &str) -> String {
    format!(
        "apiVersion: {api}\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: shop}}\nspec: {spec}\n{status}"
    )
}

#[test]
fn pdb_fields() {
    struct Case {
        api: &'static str,
        spec: &'static str,
        status: &'static str,
        min: Option<IoP>,
        max: Option<IoP>,
        allowed: Option<u32>,
        /// (pod labels, selected?)
        selects: &'static [(&'static [(&'static str, &'static str)], bool)],
    }
    const WEB: &[(&str, &str)] = &[("app", "web")];
    const DB: &[(&str, &str)] = &[("app", "db")];
    const NONE: &[(&str, &str)] = &[];
    let cases = [
        Case {
            api: "policy/v1",
            spec: "{selector: {matchLabels: {app: web}}, minAvailable: 2}",
            status: "status: {disruptionsAllowed: 1, currentHealthy: 3}",
            min: Some(IoP::Int(2)),
            max: None,
            allowed: Some(1),
            selects: &[(WEB, true), (DB, false), (NONE, false)],
        },
        Case {
            api: "policy/v1",
            spec: "{selector: {matchExpressions: [{key: app, operator: In, values: [web, db]}]}, maxUnavailable: 25%}",
            status: "",
            min: None,
            max: Some(IoP::Percent(25)),
            allowed: None,
            selects: &[(WEB, true), (DB, true), (NONE, false)],
        },
        Case {
            api: "policy/v1",
            spec: "{selector: {}, maxUnavailable: 0}",
            status: "status: {}",
            min: None,
            max: Some(IoP::Int(0)),
            allowed: None,
            selects: &[(WEB, true), (NONE, true)],
        },
        Case {
            // policy/v1: a missing selector selects no pod.
            api: "policy/v1",
            spec: "{minAvailable: 100%}",
            status: "status: {disruptionsAllowed: 0}",
            min: Some(IoP::Percent(100)),
            max: None,
            allowed: Some(0),
            selects: &[(WEB, false), (NONE, false)],
        },
        Case {
            // policy/v1beta1: an empty selector selects no pod either.
            api: "policy/v1beta1",
            spec: "{selector: {}, minAvailable: 0%}",
            status: "",
            min: Some(IoP::Percent(0)),
            max: None,
            allowed: None,
            selects: &[(WEB, false), (NONE, false)],
        },
        Case {
            api: "policy/v1beta1",
            spec: "{selector: {matchLabels: {app: db}}}",
            status: "",
            min: None,
            max: None,
            allowed: None,
            selects: &[(WEB, false), (DB, true)],
        },
    ];
    for c in cases {
        let doc = pdb_doc(c.api, c.spec, c.status);
        let s = ok(&doc);
        assert_eq!(s.pdbs.len(), 1, "{doc}");
        let p = &s.pdbs[0];
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("shop", "web"));
        assert_eq!(p.key(), "shop/web");
        assert_eq!(p.min_available, c.min, "{doc}");
        assert_eq!(p.max_unavailable, c.max, "{doc}");
        assert_eq!(p.disruptions_allowed, c.allowed, "{doc}");
        for (l, want) in c.selects {
            assert_eq!(p.selector.matches(&labels(l)), *want, "{doc}: {l:?}");
        }
        assert!(
            !s.warnings.iter().any(|w| w.contains("unsupported kind")),
            "{:?}",
            s.warnings
        );
    }
    let s = ok("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {}\n");
    assert_eq!(s.pdbs[0].namespace, "default");
}

#[test]
fn pdb_errors_name_object_and_field() {
    let cases: &[(&str, &str, &str, &str)] = &[
        // (spec, status, path, message)
        (
            "{minAvailable: -1}",
            "",
            "spec.minAvailable",
            "must not be negative",
        ),
        (
            "{maxUnavailable: -3}",
            "",
            "spec.maxUnavailable",
            "must not be negative",
        ),
        (
            "{minAvailable: 150%}",
            "",
            "spec.minAvailable",
            "not between 0% and 100%",
        ),
        (
            "{maxUnavailable: abc}",
            "",
            "spec.maxUnavailable",
            "expected a count",
        ),
        (
            "{maxUnavailable: \"5\"}",
            "",
            "spec.maxUnavailable",
            "expected a count",
        ),
        (
            "{maxUnavailable: 1.5%}",
            "",
            "spec.maxUnavailable",
            "expected a count",
        ),
        (
            "{maxUnavailable: \"%\"}",
            "",
            "spec.maxUnavailable",
            "expected a count",
        ),
        ("{minAvailable: 99999999999}", "", "spec.minAvailable", ""),
        (
            "{minAvailable: 1, maxUnavailable: 1}",
            "",
            "spec.maxUnavailable",
            "mutually exclusive",
        ),
        (
            "{minAvailable: 1}",
            "status: {disruptionsAllowed: -1}",
            "status.disruptionsAllowed",
            "non-negative",
        ),
        (
            "{minAvailable: 1}",
            "status: {disruptionsAllowed: many}",
            "status.disruptionsAllowed",
            "non-negative",
        ),
        ("{minAvailable: 1}", "status: [1]", "status", "mapping"),
        (
            "{selector: {matchExpressions: [{key: a, operator: Near}]}}",
            "",
            "spec.selector.matchExpressions[0].operator",
            "unknown selector operator",
        ),
        (
            "{selector: {matchExpressions: [{key: a, operator: In}]}}",
            "",
            "spec.selector.matchExpressions[0].values",
            "needs values",
        ),
        (
            "{selector: {matchLabels: [a]}}",
            "",
            "spec.selector.matchLabels",
            "",
        ),
    ];
    for (spec, status, path, msg) in cases {
        let doc = pdb_doc("policy/v1", spec, status);
        let e = err(&doc);
        assert_eq!(
            e.object.as_deref(),
            Some("PodDisruptionBudget shop/web"),
            "{doc}: {e}"
        );
        assert_eq!(e.path.as_deref(), Some(*path), "{doc}: {e}");
        assert!(e.message.contains(msg), "{doc}: {e}");
        assert_eq!(e.document, Some(1));
    }
    let e = err(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {namespace: a}\nspec: {}\n",
    );
    assert_eq!(e.path.as_deref(), Some("metadata.name"), "{e}");
}

fn claim_doc(body: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: default-abcde\n{body}"
    )
}

#[test]
fn node_claim_fields() {
    let full = claim_doc(
        r#"  labels: {karpenter.sh/nodepool: default, karpenter.sh/capacity-type: spot}
  annotations: {karpenter.sh/nodepool-hash: "123", karpenter.sh/nodepool-hash-version: v3}
  creationTimestamp: "2024-01-07T00:00:00Z"
spec:
  expireAfter: 720h
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
status:
  nodeName: ip-10-0-0-1.ec2.internal
  providerID: aws:///us-west-2a/i-0123456789abcdef0
  conditions:
  - {type: Launched, status: "True", lastTransitionTime: "2024-01-07T00:00:10Z"}
  - {type: Consolidatable, status: "True", lastTransitionTime: "2024-01-07T01:00:00Z", reason: Consolidatable}
  - {type: Drifted, status: "True", lastTransitionTime: "2024-01-07T02:00:00Z"}
"#,
    );
    let cases: Vec<(String, NodeClaimObject)> = vec![
        (
            full,
            NodeClaimObject {
                name: "default-abcde".into(),
                node_pool: Some("default".into()),
                node_name: Some("ip-10-0-0-1.ec2.internal".into()),
                provider_id: Some("aws:///us-west-2a/i-0123456789abcdef0".into()),
                labels: labels(&[
                    ("karpenter.sh/nodepool", "default"),
                    ("karpenter.sh/capacity-type", "spot"),
                ]),
                annotations: labels(&[
                    ("karpenter.sh/nodepool-hash", "123"),
                    ("karpenter.sh/nodepool-hash-version", "v3"),
                ]),
                created_at: Some(JAN7),
                consolidatable_since: Some(JAN7 + 3600),
                drifted: true,
                drifted_since: Some(JAN7 + 7200),
                expire_after_seconds: Some(720 * 3600),
                ..Default::default()
            },
        ),
        (
            claim_doc(
                "spec: {expireAfter: Never}\nstatus:\n  conditions:\n  - {type: Consolidatable, status: \"False\", lastTransitionTime: \"2024-01-07T01:00:00Z\"}\n  - {type: Drifted, status: Unknown}\n",
            ),
            NodeClaimObject {
                name: "default-abcde".into(),
                ..Default::default()
            },
        ),
        (
            claim_doc("status: {nodeName: \"\", providerID: \"\"}\n"),
            NodeClaimObject {
                name: "default-abcde".into(),
                ..Default::default()
            },
        ),
        (
            claim_doc(""),
            NodeClaimObject {
                name: "default-abcde".into(),
                ..Default::default()
            },
        ),
        (
            // What the scheduler reads of an in-flight NodeClaim.
            claim_doc(
                "  deletionTimestamp: \"2024-01-07T00:00:00Z\"\nspec:\n  requirements:\n  - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}\n  taints: [{key: dedicated, value: gpu, effect: NoSchedule}]\n  startupTaints: [{key: init, effect: NoSchedule}]\nstatus:\n  allocatable: {cpu: 3920m, pods: \"58\"}\n",
            ),
            NodeClaimObject {
                name: "default-abcde".into(),
                requirements: flotilla_core::requirements::Requirements::from_iter_reqs([
                    flotilla_core::requirements::Requirement::in_values(
                        "topology.kubernetes.io/zone",
                        ["us-west-2a"],
                    ),
                ]),
                taints: vec![flotilla_core::model::Taint {
                    key: "dedicated".into(),
                    value: "gpu".into(),
                    effect: flotilla_core::model::TaintEffect::NoSchedule,
                }],
                allocatable: flotilla_core::resources::Resources::new()
                    .with("cpu", flotilla_core::Quantity::parse("3920m").unwrap())
                    .with("pods", flotilla_core::Quantity::parse("58").unwrap()),
                deleting: true,
                ..Default::default()
            },
        ),
        (
            // v1beta1 NodeClaims have no expireAfter.
            "apiVersion: karpenter.sh/v1beta1\nkind: NodeClaim\nmetadata: {name: c, labels: {karpenter.sh/nodepool: p}}\nspec: {}\n".into(),
            NodeClaimObject {
                name: "c".into(),
                node_pool: Some("p".into()),
                labels: labels(&[("karpenter.sh/nodepool", "p")]),
                ..Default::default()
            },
        ),
    ];
    for (doc, want) in cases {
        let s = ok(&doc);
        assert_eq!(s.node_claims, vec![want], "{doc}");
        assert!(
            !s.warnings.iter().any(|w| w.contains("unsupported kind")),
            "{:?}",
            s.warnings
        );
    }
}

#[test]
fn node_claim_errors_name_object_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("spec: {expireAfter: 1d}\n", "spec.expireAfter", "invalid duration"),
        ("spec: {expireAfter: 5}\n", "spec.expireAfter", "duration string"),
        ("spec: [x]\n", "spec", "mapping"),
        (
            "status: {conditions: [{type: Consolidatable, status: \"True\", lastTransitionTime: yesterday}]}\n",
            "status.conditions[0].lastTransitionTime",
            "",
        ),
        ("status: {conditions: [{status: \"True\"}]}\n", "status.conditions[0]", "type"),
        ("status: {nodeName: 5}\n", "status.nodeName", ""),
    ];
    for (body, path, msg) in cases {
        let doc = claim_doc(body);
        let e = err(&doc);
        assert_eq!(
            e.object.as_deref(),
            Some("NodeClaim default-abcde"),
            "{doc}: {e}"
        );
        assert_eq!(e.path.as_deref(), Some(*path), "{doc}: {e}");
        assert!(e.message.contains(msg), "{doc}: {e}");
    }
    let e = err("apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {}\n");
    assert_eq!(e.path.as_deref(), Some("metadata.name"), "{e}");
}

#[test]
fn pod_times_and_termination() {
    let pod = |meta: &str, status: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\nstatus: {{allocatable: {{cpu: '4', pods: '10'}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: a{meta}}}\nspec: {{nodeName: n1, containers: [{{name: c}}]}}\n{status}"
        )
    };
    // (metadata extra, status, created_at, terminating)
    let cases: &[(&str, &str, Option<i64>, bool)] = &[
        ("", "", None, false),
        (", creationTimestamp: '2024-01-07T00:00:00Z'", "", Some(JAN7), false),
        (
            ", creationTimestamp: '2024-01-07T00:00:00Z'",
            "status: {phase: Running, startTime: '2024-01-07T00:05:00Z'}",
            Some(JAN7 + 300),
            false,
        ),
        (
            // A start before the creation (clock skew): the later wins.
            ", creationTimestamp: '2024-01-07T00:05:00Z'",
            "status: {startTime: '2024-01-07T00:00:00Z'}",
            Some(JAN7 + 300),
            false,
        ),
        ("", "status: {startTime: '2024-01-07T00:00:00Z'}", Some(JAN7), false),
        (
            ", creationTimestamp: '2024-01-07T00:00:00Z', deletionTimestamp: '2024-01-07T01:00:00Z'",
            "",
            Some(JAN7),
            true,
        ),
    ];
    for (meta, status, created, terminating) in cases {
        let doc = pod(meta, status);
        let s = ok(&doc);
        let p = &s.nodes[0].pods[0];
        assert_eq!(p.created_at, *created, "{doc}");
        assert_eq!(p.terminating, *terminating, "{doc}");
    }
    let e = err(&pod(", creationTimestamp: soon", ""));
    assert_eq!(e.path.as_deref(), Some("metadata.creationTimestamp"), "{e}");
    assert_eq!(e.object.as_deref(), Some("Pod a/p"));
    // Pods of workloads are new: no times, not terminating.
    let s = ok("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, creationTimestamp: '2024-01-07T00:00:00Z'}\nspec:\n  replicas: 2\n  selector: {}\n  template:\n    metadata: {creationTimestamp: null}\n    spec: {containers: [{name: c}]}\n");
    assert_eq!(s.pending_pods.len(), 2);
    assert!(s
        .pending_pods
        .iter()
        .all(|p| p.created_at.is_none() && !p.terminating));
}

fn pool_doc(disruption: &str, template_spec_extra: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: np}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n{template_spec_extra}  {disruption}\n"
    )
}

fn budget(nodes: IoP, reasons: &[R], schedule: Option<&str>, duration: Option<u64>) -> Budget {
    Budget {
        nodes,
        reasons: reasons.to_vec(),
        schedule: schedule.map(str::to_string),
        duration_seconds: duration,
    }
}

#[test]
fn budgets_are_parsed() {
    let default = vec![Budget::default_budget()];
    let cases: Vec<(&str, Vec<Budget>)> = vec![
        ("", default.clone()),
        ("disruption: {}", default.clone()),
        ("disruption: {budgets: null}", default.clone()),
        ("disruption: {budgets: []}", vec![]),
        (
            "disruption: {budgets: [{nodes: '0'}, {nodes: '5'}, {nodes: 100%}, {nodes: 0%}, {nodes: 7}]}",
            vec![
                budget(IoP::Int(0), &[], None, None),
                budget(IoP::Int(5), &[], None, None),
                budget(IoP::Percent(100), &[], None, None),
                budget(IoP::Percent(0), &[], None, None),
                budget(IoP::Int(7), &[], None, None),
            ],
        ),
        (
            // `nodes` defaults to 10% (the CRD's default).
            "disruption: {budgets: [{reasons: [Drifted]}]}",
            vec![budget(IoP::Percent(10), &[R::Drifted], None, None)],
        ),
        (
            "disruption: {budgets: [{nodes: '1', reasons: [Empty, Underutilized, Drifted, Empty]}]}",
            vec![budget(
                IoP::Int(1),
                &[R::Empty, R::Underutilized, R::Drifted],
                None,
                None,
            )],
        ),
        (
            "disruption: {budgets: [{nodes: '0', schedule: '@daily', duration: 10m}, {nodes: 20%, schedule: '0 9 * * mon-fri', duration: 1h30m, reasons: [Underutilized]}]}",
            vec![
                budget(IoP::Int(0), &[], Some("@daily"), Some(600)),
                budget(
                    IoP::Percent(20),
                    &[R::Underutilized],
                    Some("0 9 * * mon-fri"),
                    Some(5400),
                ),
            ],
        ),
    ];
    for (d, want) in cases {
        let doc = pool_doc(d, "");
        let s = ok(&doc);
        assert_eq!(s.node_pools[0].disruption.budgets, want, "{doc}");
    }
    // Provisioners get the default budget.
    let s = ok("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {consolidation: {enabled: true}}\n");
    assert_eq!(s.node_pools[0].disruption.budgets, default);
}

#[test]
fn budget_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "{nodes: 101%}",
            "spec.disruption.budgets[0].nodes",
            "not between 0% and 100%",
        ),
        (
            "{nodes: '-1'}",
            "spec.disruption.budgets[0].nodes",
            "expected a count",
        ),
        (
            "{nodes: -1}",
            "spec.disruption.budgets[0].nodes",
            "must not be negative",
        ),
        (
            "{nodes: 10.5%}",
            "spec.disruption.budgets[0].nodes",
            "expected a count",
        ),
        (
            "{nodes: ten}",
            "spec.disruption.budgets[0].nodes",
            "expected a count",
        ),
        (
            "{nodes: '99999999999'}",
            "spec.disruption.budgets[0].nodes",
            "too large",
        ),
        (
            "{reasons: [Expired]}",
            "spec.disruption.budgets[0].reasons[0]",
            "unknown disruption reason \"Expired\"",
        ),
        (
            "{reasons: [Empty, drifted]}",
            "spec.disruption.budgets[0].reasons[1]",
            "expected Empty, Drifted or Underutilized",
        ),
        (
            "{schedule: '@daily'}",
            "spec.disruption.budgets[0].duration",
            "needs a duration",
        ),
        (
            "{duration: 1h}",
            "spec.disruption.budgets[0].schedule",
            "needs a schedule",
        ),
        (
            "{schedule: '61 * * * *', duration: 1h}",
            "spec.disruption.budgets[0].schedule",
            "minute field",
        ),
        (
            "{schedule: '0 0 * * tue-mon', duration: 1h}",
            "spec.disruption.budgets[0].schedule",
            "beginning of range (2) beyond end of range (1)",
        ),
        (
            "{schedule: '* * * *', duration: 1h}",
            "spec.disruption.budgets[0].schedule",
            "has 4 fields",
        ),
        (
            "{schedule: '@wrongly', duration: 1h}",
            "spec.disruption.budgets[0].schedule",
            "unknown cron macro",
        ),
        (
            "{schedule: '@daily', duration: 1d}",
            "spec.disruption.budgets[0].duration",
            "invalid duration",
        ),
        (
            "{schedule: '@daily', duration: -1h}",
            "spec.disruption.budgets[0].duration",
            "invalid duration",
        ),
        (
            "{schedule: '@daily', duration: Never}",
            "spec.disruption.budgets[0].duration",
            "not Never",
        ),
        (
            "{node: 1}",
            "spec.disruption.budgets[0].node",
            "unknown field `node`",
        ),
    ];
    for (b, path, msg) in cases {
        let doc = pool_doc(&format!("disruption: {{budgets: [{b}]}}"), "");
        let e = err(&doc);
        assert_eq!(e.object.as_deref(), Some("NodePool np"), "{doc}: {e}");
        assert_eq!(e.path.as_deref(), Some(*path), "{doc}: {e}");
        assert!(e.message.contains(msg), "{doc}: {e}");
    }
    // The index names the bad budget.
    let e = err(&pool_doc(
        "disruption: {budgets: [{nodes: '1'}, {nodes: '2', reasons: [Bad]}]}",
        "",
    ));
    assert_eq!(
        e.path.as_deref(),
        Some("spec.disruption.budgets[1].reasons[0]"),
        "{e}"
    );
}

#[test]
fn termination_grace_period() {
    let cases: &[(&str, Option<u64>)] = &[
        ("", None),
        ("      terminationGracePeriod: 48h\n", Some(48 * 3600)),
        ("      terminationGracePeriod: 1h30m\n", Some(5400)),
        ("      terminationGracePeriod: 0s\n", Some(0)),
    ];
    for (extra, want) in cases {
        let s = ok(&pool_doc("", extra));
        assert_eq!(
            s.node_pools[0].disruption.termination_grace_period_seconds, *want,
            "{extra}"
        );
    }
    for extra in [
        "      terminationGracePeriod: Never\n",
        "      terminationGracePeriod: 2d\n",
    ] {
        let e = err(&pool_doc("", extra));
        assert_eq!(
            e.path.as_deref(),
            Some("spec.template.spec.terminationGracePeriod"),
            "{e}"
        );
        assert_eq!(e.object.as_deref(), Some("NodePool np"));
    }
}

#[test]
fn template_hashes() {
    let hash = |doc: &str| ok(doc).node_pools[0].template_hash.clone();
    let base = hash(&pool_doc("", ""));
    assert!(base.as_ref().is_some_and(|h| h.len() == 16), "{base:?}");
    // (NodePool, same hash as the base?)
    let cases: Vec<(String, bool)> = vec![
        (pool_doc("disruption: {budgets: [{nodes: '0'}], consolidateAfter: 5m}", ""), true),
        (
            pool_doc("", "").replace("requirements: []", "requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]"),
            true,
        ),
        (pool_doc("", "      expireAfter: 720h\n"), true),
        (pool_doc("", "      expireAfter: 43200m\n"), true),
        (pool_doc("", "      expireAfter: Never\n"), false),
        (pool_doc("", "      terminationGracePeriod: 1h\n"), false),
        (pool_doc("", "      taints: [{key: a, effect: NoSchedule}]\n"), false),
        (pool_doc("", "").replace("name: default}", "name: other}"), false),
        // The JSON spelling of the same NodePool.
        (
            r#"{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "np"},
                "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"name": "default", "kind": "EC2NodeClass", "group": "karpenter.k8s.aws"}}}}}"#
                .into(),
            true,
        ),
    ];
    for (doc, same) in cases {
        assert_eq!(hash(&doc) == base, same, "{doc}");
    }
    // v1beta1 keeps expireAfter under disruption: same node, same hash.
    let beta = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    spec:\n      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: default}\n      requirements: []\n  disruption: {expireAfter: 720h}\n";
    assert_eq!(hash(beta), base);
    assert_ne!(hash(&beta.replace("720h", "24h")), base);

    // Node classes: selectors are dynamic, the rest is not.
    let class = |spec: &str| {
        ok(&format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec: {spec}\n"
        ))
        .node_classes[0]
            .template_hash
            .clone()
    };
    let c = class("{role: R, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {a: b}}]}");
    assert!(c.is_some());
    assert_eq!(class("{role: R, amiSelectorTerms: [{alias: al2023@v20240807}], subnetSelectorTerms: [{id: subnet-1}]}"), c);
    assert_ne!(
        class("{role: R, amiSelectorTerms: [{alias: bottlerocket@latest}]}"),
        c
    );
    assert_ne!(
        class("{role: R2, amiSelectorTerms: [{alias: al2023@latest}]}"),
        c
    );

    // Provisioners too.
    let prov = |spec: &str| {
        ok(&format!(
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {{name: p}}\nspec: {spec}\n"
        ))
        .node_pools[0]
            .template_hash
            .clone()
    };
    let p = prov("{labels: {a: b}, weight: 3}");
    assert!(p.is_some());
    assert_eq!(prov("{labels: {a: b}, ttlSecondsUntilExpired: 60}"), p);
    assert_ne!(prov("{labels: {a: c}}"), p);
}

#[test]
fn duplicates_keep_the_last_definition() {
    let doc = format!(
        "{}\n---\n{}\n---\n{}\n---\n{}",
        pdb_doc("policy/v1", "{minAvailable: 1}", ""),
        pdb_doc("policy/v1", "{minAvailable: 2}", ""),
        claim_doc("spec: {expireAfter: 1h}\n"),
        claim_doc("spec: {expireAfter: 2h}\n"),
    );
    let s = ok(&doc);
    assert_eq!(s.pdbs.len(), 1);
    assert_eq!(s.pdbs[0].min_available, Some(IoP::Int(2)));
    assert_eq!(s.node_claims.len(), 1);
    assert_eq!(s.node_claims[0].expire_after_seconds, Some(7200));
    for w in [
        "PodDisruptionBudget shop/web is defined more than once; using the last definition",
        "NodeClaim default-abcde is defined more than once; using the last definition",
    ] {
        assert!(s.warnings.iter().any(|x| x == w), "{:?}", s.warnings);
    }
    // Same name, different namespaces: two PDBs.
    let s = ok(&format!(
        "{}\n---\n{}",
        pdb_doc("policy/v1", "{minAvailable: 1}", ""),
        pdb_doc("policy/v1", "{minAvailable: 1}", "")
            .replace("namespace: shop", "namespace: other")
    ));
    assert_eq!(s.pdbs.len(), 2);
}

/// `kubectl get pdb,nodeclaims -o json` lists load like single objects.
#[test]
fn lists() {
    let s = ok(r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "a", "namespace": "n"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"x": "y"}}},
         "status": {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
         "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": "np"}},
         "status": {"nodeName": "n1"}}]}"#);
    assert_eq!(s.pdbs[0].key(), "n/a");
    assert_eq!(s.pdbs[0].disruptions_allowed, Some(1));
    assert_eq!(s.node_claims[0].node_name.as_deref(), Some("n1"));
    let e = err(r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "a", "namespace": "n"}, "spec": {"maxUnavailable": "x"}}]}"#);
    assert_eq!(
        e.path.as_deref(),
        Some("items[0].spec.maxUnavailable"),
        "{e}"
    );
}

/// Karpenter's `StateNode.Allocatable()`: until a NodePool's node has
/// initialized, a resource its status reports as zero (or omits) is the
/// one its NodeClaim expects.
#[test]
fn uninitialized_node_takes_its_node_claims_allocatable() {
    struct Case {
        name: &'static str,
        node_labels: &'static str,
        provider_id: &'static str,
        /// The NodeClaim's `status` (its `allocatable` is always cpu 4,
        /// memory 8Gi, gpu 2; the node's cpu 1, gpu 0, no memory).
        claim_status: &'static str,
        /// The node's cpu, memory and gpu once loaded.
        want: (&'static str, &'static str, &'static str),
    }
    let cases = [
        Case {
            name: "not initialized, matched by nodeName: zeroes and gaps filled, the rest kept",
            node_labels: "{karpenter.sh/nodepool: default}",
            provider_id: "",
            claim_status: "nodeName: n1",
            want: ("1", "8Gi", "2"),
        },
        Case {
            name: "matched by provider ID",
            node_labels: "{karpenter.sh/nodepool: default}",
            provider_id: "providerID: aws:///us-west-2a/i-1",
            claim_status: "providerID: aws:///us-west-2a/i-1",
            want: ("1", "8Gi", "2"),
        },
        Case {
            name: "initialized: the node's status as it is",
            node_labels: "{karpenter.sh/nodepool: default, karpenter.sh/initialized: 'true'}",
            provider_id: "",
            claim_status: "nodeName: n1",
            want: ("1", "0", "0"),
        },
        Case {
            name: "not a NodePool's node: as it is",
            node_labels: "{}",
            provider_id: "",
            claim_status: "nodeName: n1",
            want: ("1", "0", "0"),
        },
        Case {
            name: "no NodeClaim of its own: as it is",
            node_labels: "{karpenter.sh/nodepool: default}",
            provider_id: "",
            claim_status: "nodeName: other",
            want: ("1", "0", "0"),
        },
    ];
    for c in cases {
        let text = format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n1, labels: {}}}\nspec: {{{}}}\n\
             status: {{allocatable: {{cpu: '1', nvidia.com/gpu: '0'}}}}\n---\n\
             apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: c1}}\n\
             status: {{{}, allocatable: {{cpu: '4', memory: 8Gi, nvidia.com/gpu: '2'}}}}\n",
            c.node_labels, c.provider_id, c.claim_status
        );
        let s = ok(&text);
        let a = &s.nodes[0].allocatable;
        let got = [a.get("cpu"), a.get("memory"), a.get("nvidia.com/gpu")].map(|q| q.to_string());
        assert_eq!(got, [c.want.0, c.want.1, c.want.2], "{}", c.name);
    }
}

/// A node's `Ready` condition: `True` is Ready, `False` and `Unknown` are
/// not, no Ready condition (or none at all) is not reported.
#[test]
fn node_ready_condition() {
    let cases = [
        ("", None),
        ("  conditions: []\n", None),
        (
            "  conditions:\n  - {type: MemoryPressure, status: 'False'}\n",
            None,
        ),
        (
            "  conditions:\n  - {type: Ready, status: 'True'}\n",
            Some(true),
        ),
        (
            "  conditions:\n  - {type: Ready, status: 'False'}\n",
            Some(false),
        ),
        (
            "  conditions:\n  - {type: Ready, status: Unknown}\n",
            Some(false),
        ),
    ];
    for (conditions, want) in cases {
        let doc = format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\nstatus:\n  allocatable: {{cpu: '1'}}\n{conditions}"
        );
        let s = ok(&doc);
        assert_eq!(s.nodes[0].ready, want, "{conditions:?}");
    }
}

fn class_doc(status: &str) -> String {
    format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n{status}"
    )
}

/// What the cloud-provider drift checks read: an EC2NodeClass's resolved
/// status, a NodeClaim's `status.imageID`, and `describe-instances`.
#[test]
fn node_class_status_image_ids_and_instances() {
    let s = ok(&class_doc(
        "status:\n  amis:\n  - id: ami-arm\n    name: al2023-arm\n    requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]\n  - id: ami-x86\n  subnets: [{id: subnet-a, zone: us-west-2a}, {id: subnet-b}]\n  securityGroups: [{id: sg-1, name: nodes}]\n  conditions: [{type: Ready, status: \"True\"}]\n",
    ));
    let st = &s.node_classes[0].status;
    let amis: Vec<(&str, bool)> = st
        .amis
        .iter()
        .map(|a| {
            let arm = a.requirements.allows("kubernetes.io/arch", "arm64")
                && !a.requirements.allows("kubernetes.io/arch", "amd64");
            (a.id.as_str(), arm)
        })
        .collect();
    assert_eq!(amis, [("ami-arm", true), ("ami-x86", false)]);
    assert!(st.amis[1].requirements.is_empty());
    assert_eq!(st.subnets, ["subnet-a", "subnet-b"]);
    assert_eq!(st.security_groups, ["sg-1"]);
    // No status: unknown.
    assert_eq!(
        ok(&class_doc("")).node_classes[0].status,
        Default::default()
    );

    let s = ok(&claim_doc(
        "status: {imageID: ami-x86, providerID: \"aws:///us-west-2a/i-1\"}\n",
    ));
    assert_eq!(s.node_claims[0].image_id.as_deref(), Some("ami-x86"));
    assert_eq!(
        ok(&claim_doc("status: {imageID: \"\"}\n")).node_claims[0].image_id,
        None
    );

    let s = ok(r#"{"Reservations": [{"Instances": [
        {"InstanceId": "i-1", "ImageId": "ami-x86", "SubnetId": "subnet-a",
         "SecurityGroups": [{"GroupId": "sg-2", "GroupName": "b"}, {"GroupId": "sg-1", "GroupName": "a"}],
         "State": {"Name": "running"}},
        {"InstanceId": "i-2"}]}]}"#);
    let i1 = &s.instances["i-1"];
    assert_eq!(i1.image_id.as_deref(), Some("ami-x86"));
    assert_eq!(i1.subnet_id.as_deref(), Some("subnet-a"));
    assert_eq!(i1.security_group_ids, ["sg-1", "sg-2"]);
    assert_eq!(s.instances["i-2"], Default::default());
}

#[test]
fn node_class_status_errors_name_object_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("status: {amis: [{name: x}]}\n", "status.amis[0]", "id"),
        ("status: {amis: [{id: \"\"}]}\n", "status.amis[0].id", "empty"),
        (
            "status: {amis: [{id: ami-1, requirements: [{key: kubernetes.io/arch, operator: Near, values: [a]}]}]}\n",
            "status.amis[0].requirements[0]",
            "",
        ),
        ("status: {subnets: [{id: 5}]}\n", "status.subnets[0].id", ""),
        ("status: {securityGroups: [{id: \"\"}]}\n", "status.securityGroups[0].id", "empty"),
        ("status: {subnets: subnet-a}\n", "status.subnets", ""),
    ];
    for (body, path, msg) in cases {
        let doc = class_doc(body);
        let e = err(&doc);
        assert_eq!(
            e.object.as_deref(),
            Some("EC2NodeClass default"),
            "{doc}: {e}"
        );
        assert!(
            e.path.as_deref().is_some_and(|p| p.starts_with(path)),
            "{doc}: {e}"
        );
        assert!(e.message.contains(msg), "{doc}: {e}");
    }
    let e = err(r#"{"Reservations": [{"Instances": [{"ImageId": "ami-1"}]}]}"#);
    assert!(
        e.path
            .as_deref()
            .is_some_and(|p| p.starts_with("Reservations[0].Instances[0]")),
        "{e}"
    );
    let e = err(r#"{"Reservations": [{"Instances": [{"InstanceId": ""}]}]}"#);
    assert_eq!(
        e.path.as_deref(),
        Some("Reservations[0].Instances[0].InstanceId"),
        "{e}"
    );
}
