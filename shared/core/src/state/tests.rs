use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::changes::{changes_since, Receiving};
use super::*;

fn pod(ns: &str, name: &str, app: &str, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app},
                     "creationTimestamp": format!("2026-11-26T10:00:{:02}Z", name.len() % 60)},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Pending"}
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-26T10:01:00Z"});
    }
    p
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
}

#[test]
fn a_pod_split_into_template_and_row_expands_to_the_same_document() {
    let cases = [
        pod("default", "web-1", "web", None),
        pod("shop", "web-2", "web", Some("n1")),
        json!({"kind": "Pod", "metadata": {"name": "bare"}}),
        json!({"kind": "Pod", "metadata": {"name": "gone", "namespace": "a",
               "deletionTimestamp": "2026-11-26T10:00:00Z"}, "spec": {"nodeName": "n"},
               "status": {"startTime": "2026-11-26T10:00:00Z"}}),
    ];
    for p in cases {
        let (id, t, row) = PodRow::split(p.clone()).expect("named");
        assert_eq!(compact::template_id(&t), id);
        assert_eq!(row.expand(&t), p, "{p}");
    }
    assert!(PodRow::split(json!({"kind": "Pod", "metadata": {}})).is_none());
}

#[test]
fn pods_of_one_workload_share_one_template() {
    let docs: Vec<Value> = (0..100)
        .map(|i| {
            pod(
                "default",
                &format!("web-{i}"),
                "web",
                Some(&format!("n{}", i % 7)),
            )
        })
        .collect();
    let (templates, rows) = compact::compact_pods(docs);
    assert_eq!(rows.len(), 100);
    // Creation times differ by name length: two templates would be wrong.
    assert_eq!(templates.len(), 1);
}

#[test]
fn applying_changes_twice_is_applying_them_once() {
    let docs = vec![
        node("n1"),
        pod("default", "a", "web", Some("n1")),
        pod("default", "b", "web", None),
    ];
    let changes = Changes::of_documents(docs.clone()).unwrap();
    let mut once = ClusterCache::default();
    once.apply(&changes).unwrap();
    let mut twice = once.clone();
    twice.apply(&changes).unwrap();
    assert_eq!(once, twice);
    assert_eq!(once.pending_pods(), 1);
    let mut expected = docs;
    expected.sort_by_key(|d| ObjectKey::of(d).unwrap());
    let mut got = once.documents();
    got.sort_by_key(|d| ObjectKey::of(d).unwrap());
    assert_eq!(got, expected);
}

#[test]
fn invalid_changes_change_nothing_and_name_the_field() {
    let mut cache = ClusterCache::from_documents(vec![node("n1")]).unwrap();
    let before = cache.clone();
    let (_, _, row) = PodRow::split(pod("default", "a", "web", None)).unwrap();
    let bad = Changes {
        objects: vec![node("n2")],
        pods: vec![row],
        ..Changes::default()
    };
    let err = cache.apply(&bad).unwrap_err();
    assert!(
        err.to_string()
            .contains("changes.pods[0] (default/a): template"),
        "{err}"
    );
    assert_eq!(cache, before);
    let err = cache
        .apply(&Changes {
            objects: vec![json!({"kind": "Node"})],
            ..Changes::default()
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "changes.objects[0]: needs a kind and metadata.name"
    );
    let (id, mut t, row) = PodRow::split(pod("default", "a", "web", None)).unwrap();
    t["metadata"]["labels"]["app"] = json!("other");
    let forged = Changes {
        templates: [(id, t)].into(),
        pods: vec![row],
        ..Changes::default()
    };
    assert!(cache
        .apply(&forged)
        .unwrap_err()
        .to_string()
        .contains("not the hash"));
}

#[test]
fn split_parts_stay_under_the_limit_and_carry_their_templates() {
    let mut docs: Vec<Value> = (0..50).map(|i| node(&format!("n{i}"))).collect();
    docs.extend((0..500).map(|i| {
        pod(
            "default",
            &format!("p{i}"),
            &format!("app{}", i % 9),
            Some("n1"),
        )
    }));
    let all = Changes::of_documents(docs).unwrap();
    let whole = ClusterCache::from_documents(ClusterCache::default().documents()).unwrap();
    assert!(whole.objects.is_empty());
    let parts = all.clone().split(8 * 1024);
    assert!(parts.len() > 5, "{}", parts.len());
    let mut cache = ClusterCache::default();
    for p in &parts {
        assert!(serde_json::to_vec(p).unwrap().len() <= 9 * 1024);
        // Each part applies on its own (its templates travel with it).
        p.validate(|_| None).unwrap();
        cache.apply(p).unwrap();
    }
    let mut direct = ClusterCache::default();
    direct.apply(&all).unwrap();
    assert_eq!(cache, direct);
}

#[test]
fn changes_since_what_was_acknowledged_bring_the_old_state_to_the_new() {
    let old = ClusterCache::from_documents(vec![
        node("n1"),
        node("n2"),
        pod("default", "a", "web", None),
        pod("default", "b", "web", Some("n1")),
    ])
    .unwrap();
    let new = ClusterCache::from_documents(vec![
        node("n1"),
        pod("default", "a", "web", Some("n1")),
        pod("default", "c", "db", None),
    ])
    .unwrap();
    let delta = changes_since(&old.digests(), &new);
    assert_eq!(delta.objects.len(), 0);
    assert_eq!(delta.pods.len(), 2);
    assert_eq!(delta.deleted.len(), 2);
    let mut got = old.clone();
    got.apply(&delta).unwrap();
    got.drop_unused_templates();
    assert_eq!(got, new);
    assert!(changes_since(&new.digests(), &new).is_empty());
}

fn seq(stream: &str, n: u64) -> Sequence {
    Sequence {
        stream: stream.into(),
        seq: n,
        resync: None,
    }
}

fn part(stream: &str, n: u64, part: u32, parts: u32) -> Sequence {
    Sequence {
        stream: stream.into(),
        seq: n,
        resync: Some(Resync { part, parts }),
    }
}

#[test]
fn admission_by_sequence() {
    let head = Head {
        stream: "s".into(),
        seq: 5,
        last_hash: "h5".into(),
        receiving: None,
        ..Head::default()
    };
    let rx = Head {
        receiving: Some(Receiving {
            stream: "t".into(),
            seq: 9,
            parts: 3,
            received: [0, 2].into(),
        }),
        ..head.clone()
    };
    let empty = Head::default();
    let gap = |r: &Admission| matches!(r, Admission::ResyncRequired { .. });
    type Case<'a> = (&'a str, &'a Head, Sequence, fn(&Admission) -> bool);
    let cases: Vec<Case> = vec![
        ("next delta", &head, seq("s", 6), |a| *a == Admission::Apply),
        ("retried delta", &head, seq("s", 5), |a| {
            *a == Admission::Duplicate
        }),
        ("old delta", &head, seq("s", 2), |a| {
            *a == Admission::Duplicate
        }),
        ("gap", &head, seq("s", 7), gap),
        ("other stream", &head, seq("t", 6), gap),
        ("nothing stored", &empty, seq("s", 1), gap),
        ("seq 0", &head, seq("s", 0), gap),
        ("first part", &head, part("t", 9, 0, 3), |a| {
            *a == Admission::Part { complete: false }
        }),
        ("single part", &empty, part("t", 1, 0, 1), |a| {
            *a == Admission::Part { complete: true }
        }),
        ("last missing part", &rx, part("t", 9, 1, 3), |a| {
            *a == Admission::Part { complete: true }
        }),
        ("part again", &rx, part("t", 9, 0, 3), |a| {
            *a == Admission::Part { complete: false }
        }),
        ("older resync's part", &rx, part("t", 8, 1, 3), |a| {
            *a == Admission::Duplicate
        }),
        ("applied resync's part", &head, part("s", 4, 0, 2), |a| {
            *a == Admission::Duplicate
        }),
        ("bad part", &head, part("s", 9, 3, 3), gap),
        ("too many parts", &head, part("s", 9, 0, 20_000), gap),
    ];
    for (name, head, s, ok) in cases {
        let hash = if name == "same number, other content" {
            "other"
        } else {
            "h5"
        };
        let got = admit(head, &s, hash);
        assert!(ok(&got), "{name}: {got:?}");
    }
}

/// A simulated agent and intake: the agent's cache changes at random,
/// posts are lost, duplicated, delayed and reordered, and the state intake
/// keeps always equals, once the posts settle, the agent's cache.
mod faults {
    use super::*;

    #[derive(Default)]
    struct Intake {
        head: Head,
        state: ClusterCache,
        parts: BTreeMap<u32, Changes>,
    }

    impl Intake {
        fn post(&mut self, s: &Sequence, c: &Changes) -> Result<(), ()> {
            let hash = format!("{:x}", compact::digest(&serde_json::to_value(c).unwrap()));
            let a = admit(&self.head, s, &hash);
            match &a {
                Admission::Apply => self.state.apply(c).map_err(|_| ())?,
                Admission::Part { complete } => {
                    let r = s.resync.unwrap();
                    let fresh = self
                        .head
                        .receiving
                        .as_ref()
                        .is_none_or(|rx| rx.seq != s.seq || rx.stream != s.stream);
                    if fresh {
                        self.parts.clear();
                    }
                    self.parts.insert(r.part, c.clone());
                    if *complete {
                        let mut st = ClusterCache::default();
                        for p in self.parts.values() {
                            st.apply(p).map_err(|_| ())?;
                        }
                        self.state = st;
                        self.parts.clear();
                    }
                }
                Admission::Duplicate => {}
                Admission::ResyncRequired { .. } => return Err(()),
            }
            self.head = self.head.after(s, &a, &hash);
            Ok(())
        }
    }

    /// What happens to one post on the way.
    #[derive(Debug, Clone, Copy)]
    enum Fate {
        Delivered,
        /// The request never reaches intake.
        RequestLost,
        /// Intake applies it; the answer never reaches the agent.
        AnswerLost,
    }

    #[derive(Debug, Clone)]
    enum Op {
        AddPod(u8, u8),
        BindPod(u8, u8),
        DeletePod(u8),
        AddNode(u8),
        DeleteNode(u8),
        Post { fate: Fate, dup: bool, delay: bool },
        DeliverDelayed,
        RestoreTable,
        RestartAgent,
    }

    fn op() -> impl Strategy<Value = Op> {
        let fate = prop_oneof![
            Just(Fate::Delivered),
            Just(Fate::RequestLost),
            Just(Fate::AnswerLost)
        ];
        prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::AddPod(a % 40, b % 4)),
            (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::BindPod(a % 40, b % 6)),
            any::<u8>().prop_map(|a| Op::DeletePod(a % 40)),
            any::<u8>().prop_map(|a| Op::AddNode(a % 6)),
            any::<u8>().prop_map(|a| Op::DeleteNode(a % 6)),
            (fate, any::<bool>(), any::<bool>()).prop_map(|(fate, dup, delay)| Op::Post {
                fate,
                dup,
                delay
            }),
            Just(Op::DeliverDelayed),
            Just(Op::RestoreTable),
            Just(Op::RestartAgent),
        ]
    }

    /// The agent's side, as `flotilla-agent` does it: every resync starts
    /// a new stream (numbered from 1); a delta's number is taken only once
    /// intake acknowledged it.
    struct Agent {
        docs: BTreeMap<ObjectKey, Value>,
        base: String,
        resyncs: u32,
        stream: String,
        acked: BTreeMap<ObjectKey, u64>,
        seq: u64,
        synced: bool,
    }

    impl Agent {
        fn cache(&self) -> ClusterCache {
            ClusterCache::from_documents(self.docs.values().cloned().collect()).unwrap()
        }

        fn posts(&mut self) -> Vec<(Sequence, Changes)> {
            let cache = self.cache();
            if !self.synced {
                self.resyncs += 1;
                self.stream = format!("{}.{}", self.base, self.resyncs);
                self.seq = 1;
                let parts = changes_since(&BTreeMap::new(), &cache).split(600);
                let n = parts.len() as u32;
                return parts
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| (part(&self.stream, self.seq, i as u32, n), p))
                    .collect();
            }
            vec![(
                seq(&self.stream, self.seq + 1),
                changes_since(&self.acked, &cache),
            )]
        }

        /// Send `posts` (stopping at the first failure); whether all were
        /// acknowledged.
        fn send(
            &mut self,
            intake: &mut Intake,
            posts: Vec<(Sequence, Changes)>,
            fate: Fate,
            dup: bool,
        ) -> bool {
            for (s, c) in posts {
                let answer = match fate {
                    Fate::RequestLost => return false,
                    Fate::Delivered | Fate::AnswerLost => {
                        let first = intake.post(&s, &c);
                        if dup {
                            intake.post(&s, &c)
                        } else {
                            first
                        }
                    }
                };
                if matches!(fate, Fate::AnswerLost) {
                    return false;
                }
                if answer.is_err() {
                    self.synced = false;
                    return false;
                }
                if s.resync.is_none() {
                    self.seq = s.seq;
                }
            }
            self.acked = self.cache().digests();
            self.synced = true;
            true
        }
    }

    fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut agent = Agent {
            docs: BTreeMap::new(),
            base: "agent-0".into(),
            resyncs: 0,
            stream: String::new(),
            acked: BTreeMap::new(),
            seq: 0,
            synced: false,
        };
        let mut intake = Intake::default();
        let mut delayed: Vec<(Sequence, Changes)> = Vec::new();
        let mut restarts = 0;
        for op in ops {
            match op {
                Op::AddPod(p, app) => {
                    let d = pod("default", &format!("p{p}"), &format!("a{app}"), None);
                    agent.docs.insert(ObjectKey::of(&d).unwrap(), d);
                }
                Op::BindPod(p, n) => {
                    let k = ObjectKey::pod("default", &format!("p{p}"));
                    if let Some(d) = agent.docs.get_mut(&k) {
                        d["spec"]["nodeName"] = json!(format!("n{n}"));
                    }
                }
                Op::DeletePod(p) => {
                    agent
                        .docs
                        .remove(&ObjectKey::pod("default", &format!("p{p}")));
                }
                Op::AddNode(n) => {
                    let d = node(&format!("n{n}"));
                    agent.docs.insert(ObjectKey::of(&d).unwrap(), d);
                }
                Op::DeleteNode(n) => {
                    agent
                        .docs
                        .remove(&ObjectKey::new("Node", "", &format!("n{n}")));
                }
                Op::Post { fate, dup, delay } => {
                    let posts = agent.posts();
                    if delay {
                        delayed.extend(posts.clone());
                    }
                    agent.send(&mut intake, posts, fate, dup);
                }
                Op::DeliverDelayed => {
                    for (s, c) in std::mem::take(&mut delayed) {
                        // Its answer goes to a request long given up.
                        let _ = intake.post(&s, &c);
                    }
                }
                Op::RestoreTable => intake = Intake::default(),
                Op::RestartAgent => {
                    restarts += 1;
                    agent.base = format!("agent-{restarts}");
                    agent.resyncs = 0;
                    agent.acked.clear();
                    agent.seq = 0;
                    agent.synced = false;
                }
            }
        }
        // Settle: the agent posts until intake acknowledges.
        for _ in 0..3 {
            let posts = agent.posts();
            if agent.send(&mut intake, posts, Fate::Delivered, false) {
                break;
            }
        }
        let mut got = intake.state.clone();
        got.drop_unused_templates();
        prop_assert_eq!(got, agent.cache());
        Ok(())
    }

    /// A resync part delivered late, after the stream it started had moved
    /// on (and a stale resync of an older stream before it), changes
    /// nothing: found by the property below.
    #[test]
    fn a_late_resync_part_of_a_replaced_stream_is_a_duplicate() {
        let post = |fate, delay| Op::Post {
            fate,
            dup: false,
            delay,
        };
        let ops = vec![
            post(Fate::RequestLost, true),
            post(Fate::Delivered, true),
            post(Fate::RequestLost, true),
            Op::AddPod(0, 0),
            post(Fate::Delivered, false),
            Op::DeliverDelayed,
        ];
        if let Err(e) = run(ops) {
            panic!("{e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn the_stored_state_equals_the_agents_cache_after_any_faults(ops in prop::collection::vec(op(), 1..60)) {
            run(ops)?;
        }
    }
}

#[test]
fn a_stored_cache_reads_back_whole_in_any_key_order_and_the_last_repeat_wins() {
    let json = r#"{"objects": {"Node/b": {"v": 2}, "Node/a": {"v": 1}, "Node/b": {"v": 3}},
        "templates": {}, "pods": {}}"#;
    let cache: ClusterCache = serde_json::from_str(json).unwrap();
    let got: Vec<(&str, &Value)> = cache
        .objects
        .iter()
        .map(|(k, v)| (k.0.as_str(), v))
        .collect();
    assert_eq!(
        got,
        [
            ("Node/a", &serde_json::json!({"v": 1})),
            ("Node/b", &serde_json::json!({"v": 3}))
        ]
    );
    let round: ClusterCache = serde_json::from_slice(&serde_json::to_vec(&cache).unwrap()).unwrap();
    assert_eq!(round, cache);
}
