use super::*;
use crate::docs::tests::{pending, pod};
use serde_json::json;

fn bound(name: &str, node: &str, app: &str) -> Pod {
    pod(json!({
        "metadata": {"name": name, "namespace": "shop", "resourceVersion": "1",
            "creationTimestamp": "2026-11-25T06:00:00Z", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Running", "startTime": "2026-11-25T06:00:05Z"}
    }))
}

fn versioned(mut p: Pod, version: &str) -> Pod {
    p.metadata.resource_version = Some(version.into());
    p
}

fn keys(s: &PodStore) -> Vec<&str> {
    s.pods.keys().map(PodKey::as_str).collect()
}

#[test]
fn only_pods_becoming_unschedulable_open_a_window() {
    let mut s = PodStore::default();
    let a = pending("a");
    let opened = |s: &mut PodStore, e| s.on_event(e).became_pending;
    assert!(!opened(&mut s, Event::Init));
    assert!(opened(&mut s, Event::InitApply(a.clone())));
    assert!(!opened(&mut s, Event::InitDone));
    // The same pod updated (the scheduler rewrites its condition): no new window.
    assert!(!opened(&mut s, Event::Apply(a.clone())));
    let mut on_node = a.clone();
    if let Some(spec) = on_node.spec.as_mut() {
        spec.node_name = Some("n1".into());
    }
    assert!(!opened(&mut s, Event::Apply(on_node)));
    assert_eq!(s.pending(), 0);
    assert!(opened(&mut s, Event::Apply(pending("b"))));
    // A relist that lists a pending again and no longer shows b: a is
    // pending anew (it was bound), b is forgotten.
    s.on_event(Event::Init);
    assert!(opened(&mut s, Event::InitApply(a.clone())));
    // Listed twice in one relist (a page boundary): no second window.
    assert!(!opened(&mut s, Event::InitApply(a.clone())));
    s.on_event(Event::InitDone);
    assert_eq!(s.pending(), 1);
    assert_eq!(keys(&s), ["default/a"]);
    s.on_event(Event::Delete(a));
    assert_eq!(s.pending(), 0);
    assert!(s.is_empty());
}

#[test]
fn a_relist_drops_the_pods_it_did_not_list() {
    let mut s = PodStore::default();
    for p in [bound("a", "n1", "web"), bound("b", "n2", "web")] {
        s.on_event(Event::Apply(p));
    }
    s.on_event(Event::Apply(bound("c", "n1", "db")));
    s.on_event(Event::Apply(pending("d")));
    assert_eq!((s.len(), s.templates(), s.pending()), (4, 2, 1));
    s.on_event(Event::Init);
    s.on_event(Event::InitApply(versioned(bound("a", "n1", "web"), "7")));
    s.on_event(Event::InitApply(pending("d")));
    // Mid-relist, the pods not yet listed are still there.
    assert_eq!(s.len(), 4);
    s.on_event(Event::InitDone);
    assert_eq!(keys(&s), ["default/d", "shop/a"]);
    // db's template went with c; n2 with b.
    assert_eq!((s.templates(), s.pending(), s.nodes.len()), (1, 1, 1));
    assert_eq!(&*s.pods[&PodKey::new("shop", "a")].version, "7");
    // A pod applied after the relist is kept through the next one's start.
    s.on_event(Event::Apply(bound("e", "n3", "web")));
    assert_eq!(s.len(), 3);
}

#[test]
fn a_template_is_freed_with_its_last_pod() {
    let mut s = PodStore::default();
    let (a, b) = (bound("a", "n1", "web"), bound("b", "n2", "web"));
    s.on_event(Event::Apply(a.clone()));
    s.on_event(Event::Apply(b.clone()));
    assert_eq!(s.templates(), 1);
    let shared = |s: &PodStore| s.templates.values().map(|i| i.pods).collect::<Vec<_>>();
    assert_eq!(shared(&s), [2]);
    // The same pod again (a new version): still two pods on it.
    s.on_event(Event::Apply(versioned(a.clone(), "2")));
    assert_eq!(shared(&s), [2]);
    s.on_event(Event::Delete(a));
    assert_eq!(shared(&s), [1]);
    // A pod that finishes is no longer kept.
    let mut done = b.clone();
    if let Some(st) = done.status.as_mut() {
        st.phase = Some("Succeeded".into());
    }
    s.on_event(Event::Apply(done));
    assert!(s.is_empty());
    assert_eq!((s.templates(), s.nodes.len()), (0, 0));
    // Deleting a pod never kept changes nothing.
    s.on_event(Event::Delete(b));
    assert!(s.is_empty());
}

#[test]
fn a_pod_that_changes_template_moves_to_the_new_one() {
    let mut s = PodStore::default();
    s.on_event(Event::Apply(bound("a", "n1", "web")));
    s.on_event(Event::Apply(bound("b", "n1", "web")));
    let before = s.pods[&PodKey::new("shop", "a")].clone();
    // a relabelled: a template of its own; web's stays for b.
    s.on_event(Event::Apply(bound("a", "n1", "api")));
    assert_eq!(s.templates(), 2);
    let after = &s.pods[&PodKey::new("shop", "a")];
    let id = |e: &Entry| match &e.kept {
        Kept::Bound(b) => Some(b.template.id.clone()),
        Kept::Pending(_) => None,
    };
    assert_ne!(id(&before), id(after));
    let mut observed = Vec::new();
    s.observed(&mut observed);
    let doc = observed.remove(0);
    assert_eq!((doc.document)()["metadata"]["labels"]["app"], "api");
    // b relabelled too: web's template is gone, both pods share api's.
    s.on_event(Event::Apply(bound("b", "n2", "api")));
    assert_eq!(s.templates(), 1);
    assert_eq!(s.templates.values().map(|i| i.pods).sum::<usize>(), 2);
    // A bound pod that goes back to pending (never from the API server,
    // but the store must count it) leaves its template.
    let mut back = pending("a");
    back.metadata.namespace = Some("shop".into());
    s.on_event(Event::Apply(back));
    assert_eq!((s.templates(), s.pending()), (1, 1));
}

#[test]
fn a_colliding_template_is_kept_apart() {
    let mut s = PodStore::default();
    let id = TemplateId("00000000000000ff".into());
    let first = s.intern(id.clone(), json!({"a": 1}));
    let other = s.intern(id.clone(), json!({"a": 2}));
    let again = s.intern(id, json!({"a": 1}));
    assert!(Arc::ptr_eq(&first, &again));
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(other.document, json!({"a": 2}));
    assert_eq!(
        s.templates.values().map(|i| i.pods).collect::<Vec<_>>(),
        [2]
    );
    // Releasing the collision leaves the interned one counted as it was.
    s.unintern(&other);
    assert_eq!(
        s.templates.values().map(|i| i.pods).collect::<Vec<_>>(),
        [2]
    );
    s.unintern(&first);
    s.unintern(&again);
    assert_eq!(s.templates(), 0);
}

#[test]
fn keys_order_by_namespace_then_name() {
    let mut k = [
        PodKey::new("a-b", "c"),
        PodKey::new("a", "z"),
        PodKey::new("b", "a"),
    ];
    k.sort();
    let names: Vec<&str> = k.iter().map(PodKey::as_str).collect();
    assert_eq!(names, ["a/z", "a-b/c", "b/a"]);
    assert_eq!((k[1].namespace(), k[1].name()), ("a-b", "c"));
}

/// Pods of every shape the reduction distinguishes: bound or pending or
/// neither, finished, being deleted, DaemonSet and mirror pods, the
/// annotations disruption reads, with and without times, namespaces,
/// containers' extras, shared and own templates.
fn table() -> Vec<Pod> {
    let annotations = [
        json!(null),
        json!({"karpenter.sh/do-not-disrupt": "true", "prometheus.io/scrape": "true"}),
        json!({"karpenter.sh/do-not-disrupt": "1h"}),
        json!({"karpenter.sh/do-not-evict": "true",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        json!({"kubernetes.io/config.mirror": "abc"}),
    ];
    let owners = [
        json!(null),
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1",
            "controller": true}]),
        json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u2",
            "controller": true}]),
    ];
    let states = [
        (
            "bound",
            json!({"phase": "Running", "startTime": "2026-11-25T06:00:05Z",
            "podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "x",
                "ready": true, "restartCount": 0}]}),
        ),
        ("bound", json!({"phase": "Pending"})),
        (
            "bound",
            json!({"phase": "Succeeded", "startTime": "2026-11-25T06:00:05Z"}),
        ),
        (
            "none",
            json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
            {"type": "Ready", "status": "False"}]}),
        ),
        ("none", json!({"phase": "Pending"})),
        ("none", json!({"phase": "Failed"})),
        (
            "",
            json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
        ),
    ];
    let mut out = Vec::new();
    let mut i = 0usize;
    for (a, ann) in annotations.iter().enumerate() {
        for owner in &owners {
            for (node, status) in &states {
                for variant in 0..4usize {
                    i += 1;
                    out.push(table_pod(i, a, ann, owner, node, status, variant));
                }
            }
        }
    }
    out
}

fn table_pod(
    i: usize,
    a: usize,
    annotations: &Value,
    owners: &Value,
    node: &str,
    status: &Value,
    variant: usize,
) -> Pod {
    let mut meta = json!({"name": format!("p{i}"), "resourceVersion": format!("{}", 100 + i),
        "uid": format!("uid-{i}"), "managedFields": [{"manager": "kubelet"}],
        "labels": {"app": format!("app-{}", a % 2)}, "generateName": "p-"});
    if variant != 1 {
        meta["namespace"] = json!(["shop", "team-a", "shop"][variant % 3]);
    }
    if variant != 2 {
        meta["creationTimestamp"] = json!(format!("2026-11-2{}T06:00:00Z", i % 5));
    }
    if variant == 3 {
        meta["deletionTimestamp"] = json!("2026-11-25T07:00:00Z");
    }
    for (k, v) in [("annotations", annotations), ("ownerReferences", owners)] {
        if !v.is_null() {
            meta[k] = v.clone();
        }
    }
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx",
        "env": [{"name": "A", "value": "b"}], "command": ["sh"],
        "ports": [{"containerPort": 80, "hostPort": 80}],
        "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [{"name": "i", "image": "busybox", "restartPolicy": "Always",
            "args": ["x"]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]});
    if !node.is_empty() {
        spec["nodeName"] = json!(format!("{node}-{}", i % 3));
    }
    pod(json!({"metadata": meta, "spec": spec, "status": status}))
}

/// The old path: the reflector's slimmed pods, sent as documents.
fn old_stripped(p: &Pod) -> Pod {
    let mut p = p.clone();
    p.metadata.managed_fields = None;
    crate::watch::slim_pod(&mut p);
    p
}

/// What `Cache::observed` sent of these pods before: (key, version,
/// document) of the unschedulable and bound pods, and how many are
/// unschedulable.
fn old_observed(pods: &[Pod]) -> (Vec<(ObjectKey, String, Value)>, usize) {
    let mut out = Vec::new();
    let mut pending = 0;
    for p in pods.iter().map(old_stripped) {
        let unschedulable = docs::is_unschedulable(&p);
        if !unschedulable && docs::bound_node(&p).is_none() {
            continue;
        }
        pending += usize::from(unschedulable);
        let ns = p.metadata.namespace.clone().unwrap_or("default".into());
        let name = p.metadata.name.clone().unwrap_or_default();
        let version = p.metadata.resource_version.clone().unwrap_or_default();
        out.push((ObjectKey::pod(&ns, &name), version, docs::pod_document(&p)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    (out, pending)
}

/// What `Cache::pod_facts` gave for these pods before.
fn old_facts(pods: &[Pod]) -> Vec<PodFacts> {
    let mut out: Vec<PodFacts> = pods
        .iter()
        .map(old_stripped)
        .filter_map(|p| {
            let node = docs::bound_node(&p)?;
            Some(PodFacts {
                namespace: p.metadata.namespace.clone().unwrap_or("default".into()),
                name: p.metadata.name.clone().unwrap_or_default(),
                node: node.to_string(),
                evictable: !docs::is_daemon_pod(&p) && !docs::is_mirror_pod(&p),
                terminating: p.metadata.deletion_timestamp.is_some(),
                do_not_disrupt_until: p.metadata.annotations.as_ref().and_then(|a| {
                    let started = p
                        .status
                        .as_ref()
                        .and_then(|s| s.start_time.as_ref())
                        .map(|t| t.0.as_second());
                    flotilla_core::disruption::do_not_disrupt_until(a, started)
                }),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// What `Cache::snapshot` gave for these pods before: the bound pods'
/// documents (context) and the unschedulable ones, by (namespace, name).
fn old_documents(pods: &[Pod]) -> (Vec<Vec<u8>>, Vec<PendingDoc>) {
    let mut sorted: Vec<Pod> = pods.iter().map(old_stripped).collect();
    sorted.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    let (mut context, mut pending) = (Vec::new(), Vec::new());
    for p in &sorted {
        let json = serde_json::to_vec(&docs::pod_document(p)).unwrap_or_default();
        if docs::is_unschedulable(p) {
            pending.push(PendingDoc {
                key: docs::pod_key(p),
                json,
            });
        } else if docs::bound_node(p).is_some() {
            context.push(json);
        }
    }
    (context, pending)
}

fn store_of(pods: &[Pod]) -> PodStore {
    let mut s = PodStore::default();
    s.on_event(Event::Init);
    for p in pods {
        s.on_event(Event::InitApply(p.clone()));
    }
    s.on_event(Event::InitDone);
    s
}

fn new_observed(s: &PodStore) -> (Vec<(ObjectKey, String, Value)>, usize) {
    let mut observed = Vec::new();
    let pending = s.observed(&mut observed);
    let out = observed
        .into_iter()
        .map(|o| (o.key, o.version, (o.document)()))
        .collect();
    (out, pending)
}

#[test]
fn what_is_sent_and_drained_is_what_the_typed_pods_gave() {
    let pods = table();
    assert!(pods.len() > 400);
    let s = store_of(&pods);
    let (old, new) = (old_observed(&pods), new_observed(&s));
    assert!(old.1 > 0 && old.0.len() > old.1);
    assert_eq!(old.0.len(), new.0.len());
    for (o, n) in old.0.iter().zip(&new.0) {
        assert_eq!(o, n);
        // Byte for byte, as posted.
        let bytes = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
        assert_eq!(bytes(&o.2), bytes(&n.2));
    }
    assert_eq!(old.1, new.1);
    assert_eq!(old_facts(&pods), s.facts(None));
    let on: BTreeSet<String> = ["bound-1".to_string()].into();
    let mut some = old_facts(&pods);
    some.retain(|f| f.node == "bound-1");
    assert!(!some.is_empty());
    assert_eq!(some, s.facts(Some(&on)));
    let (mut context, mut pending) = (Vec::new(), Vec::new());
    s.documents(&mut context, &mut pending);
    let (old_context, old_pending) = old_documents(&pods);
    assert_eq!(old_context, context);
    assert_eq!(
        old_pending
            .iter()
            .map(|p| (&p.key, &p.json))
            .collect::<Vec<_>>(),
        pending
            .iter()
            .map(|p| (&p.key, &p.json))
            .collect::<Vec<_>>()
    );
    // Pods of one workload share a template.
    assert!(s.templates() < s.len() / 2, "{} templates", s.templates());
}

#[test]
fn the_pods_as_a_change_stream_sends_them_are_unchanged() {
    use flotilla_core::state::stream::ChangeStream;
    let pods = table();
    let old: Vec<Observed> = old_observed(&pods)
        .0
        .into_iter()
        .map(|(k, v, d)| Observed::of(k, v, d))
        .collect();
    let mut new = Vec::new();
    store_of(&pods).observed(&mut new);
    let posts = |o: Vec<Observed>| {
        let mut p = ChangeStream::new("s".into()).prepare(o, 1 << 16, true);
        (0..p.parts())
            .filter_map(|i| p.take_part(i))
            .map(|part| part.changes)
            .collect::<Vec<_>>()
    };
    assert_eq!(posts(old), posts(new));
}

#[test]
fn pods_taken_a_chunk_at_a_time_are_every_pod_in_key_order() {
    let pods = Pods::default();
    pods.on_event(Event::Init);
    let n = OBSERVED_CHUNK * 2 + 3;
    for i in 0..n {
        pods.on_event(Event::InitApply(bound(
            &format!("p{i}"),
            &format!("n{}", i % 7),
            "web",
        )));
    }
    pods.on_event(Event::InitDone);
    let mut whole = Vec::new();
    pods.lock().observed(&mut whole);
    let chunked: Vec<_> = pods
        .observed()
        .map(|o| (o.key, o.version, (o.document)()))
        .collect();
    let whole: Vec<_> = whole
        .into_iter()
        .map(|o| (o.key, o.version, (o.document)()))
        .collect();
    assert_eq!(chunked.len(), n);
    assert_eq!(chunked, whole);
    // A chunk boundary exactly at the end.
    let mut out = Vec::new();
    let s = pods.lock();
    let last = s.observed_after(None, n, &mut out);
    assert!(last.is_some(), "a full chunk: more may follow");
    assert!(s.observed_after(last.as_ref(), n, &mut out).is_none());
    assert_eq!(out.len(), n);
}
