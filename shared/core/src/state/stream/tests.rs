use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::state::{Changes, ClusterCache};
use std::collections::{HashMap, HashSet};

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

/// Every part of `p`, read back.
fn posts(p: &mut Prepared) -> Vec<(Sequence, Changes)> {
    p.decode_all().expect("parts are Changes")
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
        let mut p = s.prepare(observed(&base), 1 << 20, false);
        assert!(p.resync);
        assert_eq!(
            posts(&mut p)[0].1.templates.len(),
            2,
            "a resync carries every template"
        );
        s.delivered_all(p);
        let mut p = s.prepare(observed(&now), 1 << 20, false);
        assert!(!p.resync);
        let sent: Vec<Value> = posts(&mut p)[0].1.templates.values().cloned().collect();
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
    assert!(p.parts() > 1);
    s.delivered(&p.sequences()[0]);
    // The rest was not delivered: intake holds neither the old state nor
    // the new one.
    let p = s.prepare(observed(&many), 600, false);
    assert!(p.resync);
    assert_eq!(p.sequences()[0].stream, "a-2");
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
                let mut p = s.prepare(observed(&now), limit, false);
                if p.resync {
                    intake = ClusterCache::default();
                }
                for (seq, changes) in &posts(&mut p) {
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

/// The stream as it was: every changed document kept as a tree in one
/// [`Changes`], cut by [`Changes::split`]. The incremental parts must
/// equal its parts serialized, byte for byte.
#[derive(Default)]
struct Reference {
    /// Key → (version, digest, template).
    acked: HashMap<ObjectKey, (String, u64, Option<u64>)>,
}

impl Reference {
    fn posts(&mut self, observed: Vec<Observed>, limit: usize, resync: bool) -> Vec<Vec<u8>> {
        let empty = HashMap::new();
        let acked = if resync { &empty } else { &self.acked };
        let mut changes = Changes::default();
        let mut next = HashMap::new();
        let mut held = HashSet::new();
        let mut candidates = HashMap::new();
        for o in observed {
            let old = acked.get(&o.key);
            if let Some(a) = old.filter(|a| !o.version.is_empty() && a.0 == o.version) {
                held.extend(a.2);
                next.insert(o.key, a.clone());
                continue;
            }
            let doc = (o.document)();
            let (digest, template) = if o.key.is_pod() {
                let Some((id, t, row)) = PodRow::split(doc) else {
                    continue;
                };
                let (d, bits) = (row.digest(), template_bits(&id));
                if old.is_none_or(|a| a.1 != d) {
                    candidates.entry(bits).or_insert((id, t));
                    changes.pods.push(row);
                }
                if old.is_some_and(|a| a.2 == Some(bits)) {
                    held.insert(bits);
                }
                (d, Some(bits))
            } else {
                let d = compact::digest(&doc);
                if old.is_none_or(|a| a.1 != d) {
                    changes.objects.push(doc);
                }
                (d, None)
            };
            next.insert(o.key, (o.version, digest, template));
        }
        for (bits, (id, t)) in candidates {
            if !held.contains(&bits) {
                changes.templates.insert(id, t);
            }
        }
        if !resync {
            changes.deleted = acked
                .keys()
                .filter(|k| !next.contains_key(*k))
                .cloned()
                .collect();
            changes.deleted.sort();
        }
        self.acked = next;
        let parts = changes.split(limit);
        parts
            .iter()
            .map(|p| serde_json::to_vec(p).expect("serializes"))
            .collect()
    }
}

/// One generated object: kind (0 node, 1 bound pod, 2 pending pod, 3
/// other), its number, its content's variant, its version.
type Gen = (u8, u16, u8, u8);

/// Names that order differently escaped and not, and need escaping.
const ODD: [&str; 4] = ["a\"b", "a\\b", "a!", "zü"];

fn generated(objects: &[Gen]) -> Vec<Observed> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &(kind, n, variant, version) in objects {
        let name = match n % 23 {
            0..4 => format!("{}{n}", ODD[usize::from(n % 4)]),
            _ => format!("obj-{n}"),
        };
        let ns = ["default", "kube-system", "a\"ns"][usize::from(variant % 3)];
        let (key, doc) = match kind % 4 {
            0 => (
                ObjectKey::new("Node", "", &name),
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                    "labels": {"zone": variant % 4}}, "status": {"pad": "x".repeat(usize::from(variant) * 7)}}),
            ),
            3 => (
                ObjectKey::new("PodDisruptionBudget", ns, &name),
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": ns}, "spec": {"maxUnavailable": variant}}),
            ),
            k => {
                let mut p = pod(&name, variant % 5, (k == 1).then_some("n1"));
                p["metadata"]["namespace"] = json!(ns);
                if variant % 7 == 0 {
                    p["metadata"]["creationTimestamp"] =
                        json!(format!("2024-01-0{}T00:00:00Z", 1 + variant % 9));
                }
                (ObjectKey::pod(ns, &name), p)
            }
        };
        if !seen.insert(key.clone()) {
            continue;
        }
        let version = match version % 5 {
            0 => String::new(),
            1 => format!("v{version}"),
            2 => format!("0{version}"),
            _ => version.to_string(),
        };
        out.push(Observed::of(key, version, doc));
    }
    out
}

fn gen() -> impl Strategy<Value = Gen> {
    (0u8..4, 0u16..300, any::<u8>(), any::<u8>())
}

/// The incremental parts against the reference's, post after post (a
/// resync, deltas over the acknowledged state).
fn same_as_reference(steps: Vec<(Vec<Gen>, usize, bool)>) -> Result<(), TestCaseError> {
    let mut s = ChangeStream::new("a".into());
    let mut old = Reference::default();
    for (objects, limit, due) in steps {
        let mut p = s.prepare(generated(&objects), limit, due);
        let want = old.posts(generated(&objects), limit, p.resync);
        let got: Vec<Vec<u8>> = (0..p.parts())
            .filter_map(|i| p.take_part(i))
            .map(|part| part.changes)
            .collect();
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(String::from_utf8_lossy(g), String::from_utf8_lossy(w));
        }
        prop_assert!(p.take_part(0).is_none(), "a part is built once");
        s.delivered_all(p);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn parts_equal_the_old_parts_byte_for_byte(
        steps in prop::collection::vec(
            (prop::collection::vec(gen(), 0..120),
             prop_oneof![Just(200usize), Just(1500), Just(1 << 20)],
             prop::bool::weighted(0.2)),
            1..5),
    ) {
        same_as_reference(steps)?;
    }
}

#[test]
fn a_generated_cluster_resyncs_as_before_within_the_limit_and_deterministically() {
    let objects: Vec<Gen> = (0..3000u16)
        .map(|i| {
            (
                (i % 7 % 4) as u8,
                i,
                (i.wrapping_mul(31) % 251) as u8,
                (i % 250) as u8,
            )
        })
        .collect();
    let limit = 16 * 1024;
    let run = || {
        let mut s = ChangeStream::new("a".into());
        let mut p = s.prepare(generated(&objects), limit, true);
        (0..p.parts())
            .filter_map(|i| p.take_part(i))
            .map(|part| part.changes)
            .collect::<Vec<_>>()
    };
    let parts = run();
    assert!(parts.len() > 10, "{} parts", parts.len());
    assert_eq!(parts, run(), "deterministic");
    let want = Reference::default().posts(generated(&objects), limit, true);
    assert_eq!(parts, want);
    // The largest object is far under the limit: no part exceeds it.
    for p in &parts {
        assert!(p.len() <= limit, "{} bytes", p.len());
    }
}

#[test]
fn versions_compare_as_their_bits() {
    assert_eq!(version_bits(""), 0);
    assert_eq!(version_bits("0"), 1);
    assert_eq!(version_bits("41"), 42);
    // Not canonical numbers: hashed, and apart from the numbers.
    for v in ["041", "v1", "18446744073709551615", "-1"] {
        assert!(version_bits(v) >= 1 << 63, "{v}");
    }
    assert_ne!(version_bits("041"), version_bits("41"));
    assert_ne!(version_bits("a"), version_bits("b"));
}
