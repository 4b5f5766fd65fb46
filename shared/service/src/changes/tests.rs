use flotilla_core::state::{changes::changes_since, Resync};
use flotilla_sim::{block_on, ManualClock, MemBus, MemStore};
use serde_json::{json, Value};

use super::*;

fn meta() -> Value {
    json!({"name": "demo", "endpoint": "https://example", "caBundle": "Y2E=",
           "serviceCidr": "10.100.0.0/16", "kubernetesVersion": "1.33"})
}

fn node(name: &str, claim: Option<&str>) -> Value {
    let mut labels =
        json!({"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "us-west-2a"});
    if let Some(c) = claim {
        labels[crate::records::NODECLAIM_LABEL] = json!(c);
    }
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
           "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"}}})
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Pending"}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"]["phase"] = json!("Running");
    }
    p
}

fn pool() -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
           "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}}})
}

fn body(seq: Sequence, pending: usize, changes: &Changes) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"clusterId": "demo", "cluster": meta(), "sequence": seq,
        "pendingPods": pending, "changes": changes}),
    )
    .unwrap()
}

struct World {
    store: MemStore,
    bus: MemBus,
    clock: ManualClock,
    config: Config,
    access: Access,
}

impl World {
    fn new() -> World {
        World {
            store: MemStore::new(),
            bus: MemBus::new(),
            clock: ManualClock::at_millis(1_800_000_000_000),
            config: Config::default(),
            access: Access::default().allow("demo", "agent"),
        }
    }

    fn post(&self, body: &[u8]) -> Result<ChangesAccepted> {
        let caller = Caller {
            principal: Some("agent".into()),
        };
        self.clock.advance_millis(1000);
        block_on(accept_changes(
            &self.store,
            &self.bus,
            &self.clock,
            &self.config,
            &self.access,
            &caller,
            body,
        ))
    }

    fn state(&self) -> ClusterCache {
        let (_, head) = block_on(read_head(&self.store, "demo")).unwrap();
        let meta: ClusterMeta = serde_json::from_value(meta()).unwrap();
        let mut c = block_on(load_state(&self.store, "demo", &head.state_ref(&meta))).unwrap();
        c.drop_unused_templates();
        c
    }
}

fn seq(n: u64) -> Sequence {
    Sequence {
        stream: "s1".into(),
        seq: n,
        resync: None,
    }
}

fn resync(n: u64, part: u32, parts: u32) -> Sequence {
    Sequence {
        stream: "s1".into(),
        seq: n,
        resync: Some(Resync { part, parts }),
    }
}

#[test]
fn a_resync_in_parts_then_deltas_keep_the_agents_state_and_schedule_pending_pods() {
    let w = World::new();
    let mut docs = vec![pool(), node("n1", Some("claim-1")), node("n2", None)];
    docs.extend((0..40).map(|i| pod(&format!("web-{i}"), Some("n1"))));
    let agent = ClusterCache::from_documents(docs.clone()).unwrap();
    // A delta before any state: resync required.
    let err = w.post(&body(seq(1), 0, &Changes::default())).unwrap_err();
    assert!(matches!(err, ServiceError::ResyncRequired(_)), "{err}");
    let parts = changes_since(&BTreeMap::new(), &agent).split(1_000);
    let n = parts.len() as u32;
    assert!(n >= 3, "{n}");
    // Parts in any order, one of them twice.
    let mut order: Vec<u32> = (0..n).rev().collect();
    order.insert(1, n - 1);
    for (k, i) in order.iter().enumerate() {
        let out = w
            .post(&body(resync(2, *i, n), 0, &parts[*i as usize]))
            .unwrap();
        if k + 1 < order.len() {
            assert!(!out.missing_parts.is_empty());
        }
    }
    assert_eq!(w.state(), agent);
    // The registered node is in the nodes report.
    let report = block_on(crate::intake::nodes_report(&w.store, "demo"))
        .unwrap()
        .unwrap();
    assert_eq!(report.nodes.get("claim-1").map(String::as_str), Some("n1"));

    // A delta with two pending pods is applied and scheduled.
    let mut docs2 = docs.clone();
    docs2.push(pod("new-1", None));
    docs2.push(pod("new-2", None));
    docs2.retain(|d| d["metadata"]["name"] != "web-0" && d["metadata"]["name"] != "n2");
    let now = ClusterCache::from_documents(docs2).unwrap();
    let delta = changes_since(&agent.digests(), &now);
    let out = w.post(&body(seq(3), 2, &delta)).unwrap();
    assert!(out.applied && !out.batch_id.is_empty());
    assert_eq!(w.state(), now);
    let state = block_on(crate::cluster_state::load(&w.store, "demo", &out.batch_id)).unwrap();
    assert_eq!(state.pending_pods.len(), 2);
    assert_eq!(state.nodes.len(), 1);
    assert_eq!(state.nodes[0].pods.len(), 39);
    assert_eq!(state.node_pools.len(), 1);
    // The launch context was written for the batch.
    assert!(w
        .store
        .peek(&keys::context("demo", &out.batch_id))
        .is_some());
    // The retry is acknowledged without effect.
    let again = w.post(&body(seq(3), 2, &delta)).unwrap();
    assert!(!again.applied);
    assert_eq!(w.state(), now);
    // A gap asks for a resync and changes nothing.
    let err = w.post(&body(seq(5), 0, &Changes::default())).unwrap_err();
    assert!(err.to_string().contains("posts 4..5 are missing"), "{err}");
    assert_eq!(w.state(), now);
}

#[test]
fn deltas_are_folded_into_a_snapshot_and_the_state_is_unchanged() {
    let w = World::new();
    let mut docs = vec![pool(), node("n1", None)];
    let agent = ClusterCache::from_documents(docs.clone()).unwrap();
    w.post(&body(
        resync(1, 0, 1),
        0,
        &changes_since(&BTreeMap::new(), &agent),
    ))
    .unwrap();
    let mut acked = agent.digests();
    for i in 0..(MAX_DELTAS as u64 + 3) {
        docs.push(pod(&format!("p{i}"), Some("n1")));
        let now = ClusterCache::from_documents(docs.clone()).unwrap();
        w.post(&body(seq(i + 2), 0, &changes_since(&acked, &now)))
            .unwrap();
        acked = now.digests();
    }
    let (_, head) = block_on(read_head(&w.store, "demo")).unwrap();
    assert!(head.deltas.len() < MAX_DELTAS, "{}", head.deltas.len());
    assert_eq!(w.state(), ClusterCache::from_documents(docs).unwrap());
}

#[test]
fn bad_changes_are_refused_naming_the_object_and_field_and_store_nothing() {
    let w = World::new();
    let bad_pod = {
        let mut p = pod("web-1", None);
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
        p
    };
    let changes = Changes::of_documents(vec![bad_pod]).unwrap();
    let err = w
        .post(&body(resync(1, 0, 1), 1, &changes))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("default/web-1") && err.contains("cpu"),
        "{err}"
    );
    assert!(block_on(read_head(&w.store, "demo")).unwrap().0.is_none());
    let err = w
        .post(br#"{"clusterId": "demo", "cluster": {}, "sequence": {"stream": "s", "seq": 1}, "changes": {}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cluster"), "{err}");
}

/// A row over a template of another workload (`app`).
fn row_of(
    name: &str,
    app: &str,
    node: Option<&str>,
) -> (
    flotilla_core::state::TemplateId,
    Value,
    flotilla_core::state::PodRow,
) {
    let mut p = pod(name, node);
    p["metadata"]["labels"]["app"] = json!(app);
    flotilla_core::state::PodRow::split(p).unwrap()
}

#[test]
fn rows_may_name_templates_intake_holds_and_a_missing_one_asks_for_a_resync() {
    let w = World {
        config: Config {
            state_max_deltas: 1,
            ..Config::default()
        },
        ..World::new()
    };
    // The resync: web-1 over template "a".
    let (a, ta, web1) = row_of("web-1", "a", Some("n1"));
    let first = Changes {
        templates: [(a.clone(), ta.clone())].into(),
        objects: vec![pool(), node("n1", None)],
        pods: vec![web1.clone()],
        deleted: vec![],
    };
    w.post(&body(resync(1, 0, 1), 0, &first)).unwrap();
    let (b, tb, web1_b) = row_of("web-1", "b", Some("n1"));
    let (_, _, web2) = row_of("web-2", "a", Some("n1"));
    let (_, _, web3_b) = row_of("web-3", "b", None);
    // (post, Ok(pods stored after it) or the error's kind)
    let cases: Vec<(Changes, std::result::Result<usize, &str>)> = vec![
        // web-2 over "a", which intake holds: applied.
        (
            Changes {
                pods: vec![web2.clone()],
                ..Changes::default()
            },
            Ok(2),
        ),
        // web-3 over "b", which intake never had: 409.
        (
            Changes {
                pods: vec![web3_b.clone()],
                ..Changes::default()
            },
            Err("resync"),
        ),
        // web-1 moves to "b", carried: applied (and "a" stays: web-2).
        (
            Changes {
                templates: [(b.clone(), tb.clone())].into(),
                pods: vec![web1_b],
                ..Changes::default()
            },
            Ok(2),
        ),
        // web-2 goes; a fold drops "a" (no pod uses it)...
        (
            Changes {
                deleted: vec![web2.key()],
                ..Changes::default()
            },
            Ok(1),
        ),
        // ...so a row over "a" without it is a gap, not a corrupt state.
        (
            Changes {
                pods: vec![web1.clone()],
                ..Changes::default()
            },
            Err("resync"),
        ),
    ];
    let mut n = 1;
    for (changes, want) in cases {
        let got = w.post(&body(seq(n + 1), 0, &changes));
        match (got, want) {
            (Ok(_), Ok(pods)) => {
                n += 1;
                assert_eq!(w.state().pods.len(), pods, "{changes:?}");
            }
            (Err(ServiceError::ResyncRequired(reason)), Err("resync")) => {
                assert!(reason.contains("template"), "{reason}");
            }
            (got, want) => panic!("{changes:?}: {got:?}, wanted {want:?}"),
        }
    }
    // A resync part relies on no stored template.
    let part = Changes {
        pods: vec![web3_b],
        ..Changes::default()
    };
    let err = w.post(&body(resync(1, 0, 2), 0, &part)).unwrap_err();
    assert!(matches!(err, ServiceError::BadRequest(_)), "{err}");
}

/// The change service itself (store, head, blobs, folding) under lost
/// requests, lost answers, duplicates and a restored table: once the agent
/// settles, the stored state is the agent's cache.
mod faults {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Fate {
        Delivered,
        RequestLost,
        AnswerLost,
        Twice,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Pod(u8, Option<u8>),
        DeletePod(u8),
        Node(u8),
        Post(Fate),
        RestoreTable,
    }

    fn op() -> impl Strategy<Value = Op> {
        let fate = prop_oneof![
            4 => Just(Fate::Delivered),
            1 => Just(Fate::RequestLost),
            1 => Just(Fate::AnswerLost),
            1 => Just(Fate::Twice),
        ];
        prop_oneof![
            3 => (any::<u8>(), proptest::option::of(any::<u8>()))
                .prop_map(|(p, n)| Op::Pod(p % 30, n.map(|n| n % 4))),
            1 => any::<u8>().prop_map(|p| Op::DeletePod(p % 30)),
            1 => any::<u8>().prop_map(|n| Op::Node(n % 4)),
            4 => fate.prop_map(Op::Post),
            1 => Just(Op::RestoreTable),
        ]
    }

    struct Agent {
        docs: BTreeMap<String, Value>,
        resyncs: u64,
        stream: String,
        seq: u64,
        acked: BTreeMap<flotilla_core::state::ObjectKey, u64>,
        synced: bool,
    }

    impl Agent {
        fn cache(&self) -> ClusterCache {
            let mut docs = vec![pool()];
            docs.extend(self.docs.values().cloned());
            ClusterCache::from_documents(docs).unwrap()
        }

        fn posts(&mut self) -> Vec<(Sequence, Changes)> {
            let cache = self.cache();
            if !self.synced {
                self.resyncs += 1;
                self.stream = format!("s{}", self.resyncs);
                self.seq = 1;
                let parts = changes_since(&BTreeMap::new(), &cache).split(1_500);
                let n = parts.len() as u32;
                return parts
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let s = Sequence {
                            stream: self.stream.clone(),
                            seq: 1,
                            resync: Some(Resync {
                                part: i as u32,
                                parts: n,
                            }),
                        };
                        (s, p)
                    })
                    .collect();
            }
            let s = Sequence {
                stream: self.stream.clone(),
                seq: self.seq + 1,
                resync: None,
            };
            vec![(s, changes_since(&self.acked, &cache))]
        }

        fn send(&mut self, w: &World, fate: Fate) {
            let cache = self.cache();
            for (s, c) in self.posts() {
                let b = body(s.clone(), 0, &c);
                let answer = match fate {
                    Fate::RequestLost => return,
                    Fate::Twice => {
                        let _ = w.post(&b);
                        w.post(&b)
                    }
                    Fate::Delivered | Fate::AnswerLost => w.post(&b),
                };
                if matches!(fate, Fate::AnswerLost) {
                    return;
                }
                match answer {
                    Ok(_) => {
                        if s.resync.is_none() {
                            self.seq = s.seq;
                        }
                    }
                    Err(ServiceError::ResyncRequired(_)) => {
                        self.synced = false;
                        return;
                    }
                    Err(e) => panic!("intake refused a post: {e}"),
                }
            }
            self.acked = cache.digests();
            self.synced = true;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn the_stored_state_is_the_agents_cache_after_any_faults(ops in proptest::collection::vec(op(), 1..80)) {
            let mut w = World::new();
            let mut agent = Agent {
                docs: BTreeMap::new(),
                resyncs: 0,
                stream: String::new(),
                seq: 0,
                acked: BTreeMap::new(),
                synced: false,
            };
            for op in ops {
                match op {
                    Op::Pod(p, n) => {
                        let name = format!("web-{p}");
                        let node = n.map(|n| format!("n{n}"));
                        agent.docs.insert(name.clone(), pod(&name, node.as_deref()));
                    }
                    Op::DeletePod(p) => {
                        agent.docs.remove(&format!("web-{p}"));
                    }
                    Op::Node(n) => {
                        let name = format!("n{n}");
                        agent.docs.insert(name.clone(), node(&name, Some(&format!("claim-{n}"))));
                    }
                    Op::Post(fate) => agent.send(&w, fate),
                    Op::RestoreTable => w.store = MemStore::new(),
                }
            }
            for _ in 0..3 {
                agent.send(&w, Fate::Delivered);
                if agent.synced {
                    break;
                }
            }
            prop_assert!(agent.synced);
            prop_assert_eq!(w.state(), agent.cache());
        }
    }
}
