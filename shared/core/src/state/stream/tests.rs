use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::state::ClusterCache;

/// A pod of workload `app` on `node` (pending without).
fn pod(name: &str, app: u8, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

/// The caches: pods by name (workload, node).
type Pods = Vec<(String, u8, Option<String>)>;

fn observed(pods: &Pods) -> Vec<Observed> {
    pods.iter()
        .map(|(name, app, node)| {
            let doc = pod(name, *app, node.as_deref());
            // No resourceVersion: compared by content.
            Observed::of(ObjectKey::pod("default", name), String::new(), doc)
        })
        .collect()
}

fn cache_of(pods: &Pods) -> ClusterCache {
    let docs = pods
        .iter()
        .map(|(n, a, node)| pod(n, *a, node.as_deref()))
        .collect();
    ClusterCache::from_documents(docs).expect("valid pods")
}

fn pods(list: &[(&str, u8, Option<&str>)]) -> Pods {
    list.iter()
        .map(|(n, a, node)| (n.to_string(), *a, node.map(str::to_string)))
        .collect()
}

#[test]
fn a_template_travels_unless_an_unchanged_acknowledged_pod_uses_it() {
    let base = pods(&[
        ("a1", 1, Some("n1")),
        ("a2", 1, Some("n1")),
        ("b1", 2, Some("n1")),
    ]);
    // (what the caches then hold, the templates the delta carries: apps)
    let cases: Vec<(Pods, Vec<u8>)> = vec![
        // Nothing changed.
        (base.clone(), vec![]),
        // A new pod of a workload intake holds unchanged pods of.
        (
            [base.clone(), pods(&[("a3", 1, Some("n2"))])].concat(),
            vec![],
        ),
        // A new workload.
        ([base.clone(), pods(&[("c1", 3, None)])].concat(), vec![3]),
        // b1 (its template's only pod) moves: it keeps the template.
        (
            pods(&[
                ("a1", 1, Some("n1")),
                ("a2", 1, Some("n1")),
                ("b1", 2, Some("n2")),
            ]),
            vec![],
        ),
        // b1 changes workload, b2 is new in b1's old one: both travel (a
        // fold between the parts may drop b1's old template).
        (
            pods(&[
                ("a1", 1, Some("n1")),
                ("a2", 1, Some("n1")),
                ("b1", 3, Some("n1")),
                ("b2", 2, None),
            ]),
            vec![2, 3],
        ),
        // b1 deleted and b2 added: b2's template travels (a fold may have
        // dropped it once b1 was gone).
        (
            pods(&[
                ("a1", 1, Some("n1")),
                ("a2", 1, Some("n1")),
                ("b2", 2, Some("n1")),
            ]),
            vec![2],
        ),
        // Every pod of workload 1 moves, one more comes.
        (
            pods(&[
                ("a1", 1, Some("n2")),
                ("a2", 1, Some("n2")),
                ("a3", 1, None),
                ("b1", 2, Some("n1")),
            ]),
            vec![],
        ),
        // Every pod of workload 1 goes, one more comes.
        (pods(&[("a3", 1, None), ("b1", 2, Some("n1"))]), vec![1]),
    ];
    for (now, apps) in cases {
        let mut s = ChangeStream::new("a".into());
        let p = s.prepare(observed(&base), 1 << 20, false);
        assert!(p.resync);
        assert_eq!(
            p.posts[0].1.templates.len(),
            2,
            "a resync carries every template"
        );
        s.delivered_all(p);
        let p = s.prepare(observed(&now), 1 << 20, false);
        assert!(!p.resync);
        let sent: Vec<Value> = p.posts[0].1.templates.values().cloned().collect();
        let want: Vec<Value> = apps.iter().map(|a| json!(a)).collect();
        let mut got: Vec<Value> = sent
            .iter()
            .map(|t| t["metadata"]["labels"]["app"].clone())
            .collect();
        got.sort_by_key(|v| v.as_u64());
        assert_eq!(got, want, "{now:?}");
    }
}

#[test]
fn a_delta_delivered_in_part_is_followed_by_a_resync() {
    let mut s = ChangeStream::new("a".into());
    let p = s.prepare(observed(&pods(&[("a1", 1, None)])), 1 << 20, false);
    s.delivered_all(p);
    let many: Pods = (0..40)
        .map(|i| (format!("p{i}"), 1, Some("n".into())))
        .collect();
    let p = s.prepare(observed(&many), 600, false);
    assert!(p.posts.len() > 1);
    s.delivered(&p.posts[0].0);
    // The rest was not delivered: intake holds neither the old state nor
    // the new one.
    let p = s.prepare(observed(&many), 600, false);
    assert!(p.resync);
    assert_eq!(p.posts[0].0.stream, "a-2");
}

#[derive(Debug, Clone)]
enum Op {
    /// Set pod `i` to workload `app` on node `node` (pending: 0).
    Set {
        i: u8,
        app: u8,
        node: u8,
    },
    Delete {
        i: u8,
    },
    /// Post, in parts of about `limit` bytes.
    Post {
        limit: usize,
    },
    Resync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..4, 0u8..3).prop_map(|(i, app, node)| Op::Set { i, app, node }),
        2 => (0u8..8).prop_map(|i| Op::Delete { i }),
        3 => prop_oneof![Just(300usize), Just(1 << 20)].prop_map(|limit| Op::Post { limit }),
        1 => Just(Op::Resync),
    ]
}

/// Intake as far as templates go: a state that applies posts against the
/// templates it holds and drops unused ones when it folds (here after
/// every post: the most it may drop).
fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut now: Pods = Vec::new();
    let mut s = ChangeStream::new("a".into());
    let mut intake = ClusterCache::default();
    for op in ops {
        match op {
            Op::Set { i, app, node } => {
                let name = format!("p{i}");
                now.retain(|(n, _, _)| *n != name);
                let node = (node > 0).then(|| format!("n{node}"));
                now.push((name, app, node));
            }
            Op::Delete { i } => now.retain(|(n, _, _)| *n != format!("p{i}")),
            Op::Resync => s.resync_required(),
            Op::Post { limit } => {
                let p = s.prepare(observed(&now), limit, false);
                if p.resync {
                    intake = ClusterCache::default();
                }
                for (seq, changes) in &p.posts {
                    let applied = intake.apply(changes);
                    prop_assert!(applied.is_ok(), "{:?}", applied);
                    s.delivered(seq);
                    intake.drop_unused_templates();
                }
                s.delivered_all(p);
                intake.drop_unused_templates();
                let mut want = cache_of(&now);
                want.drop_unused_templates();
                prop_assert_eq!(&intake, &want);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn intake_holds_every_template_a_post_leaves_out(ops in prop::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}
