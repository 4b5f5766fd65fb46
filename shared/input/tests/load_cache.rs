//! The state kept by changes loads to what its documents load to.

use flotilla_core::model::ClusterState;
use flotilla_core::state::ClusterCache;
use serde_json::{json, Value};

fn node(name: &str, zone: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "creationTimestamp": "2026-11-26T09:00:00Z",
        "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone,
                   "node.kubernetes.io/instance-type": "m6i.large", "karpenter.sh/nodepool": "default"}},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"}}})
}

fn pod(name: &str, app: &str, node: Option<&str>, extra: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": app},
                     "creationTimestamp": format!("2026-11-26T10:{:02}:00Z", name.len() % 60),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                                          "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}],
                 "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                     "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]},
        "status": {"phase": "Pending"}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-26T11:00:00Z"});
    }
    if let (Some(o), Some(e)) = (p["spec"].as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    p
}

fn documents() -> Vec<Value> {
    let mut docs = vec![
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": []}}}}),
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
               "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                        "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}}),
    ];
    for i in 0..12 {
        docs.push(node(
            &format!("n{i}"),
            ["us-west-2a", "us-west-2b", "us-west-2c"][i % 3],
        ));
    }
    for i in 0..60 {
        let app = ["web", "api", "db"][i % 3];
        docs.push(pod(
            &format!("{app}-{i}"),
            app,
            Some(&format!("n{}", i % 12)),
            json!({}),
        ));
    }
    // Ephemeral volumes name a claim after the pod: never shared.
    for i in 0..3 {
        docs.push(pod(
            &format!("eph-{i}"),
            "eph",
            Some("n1"),
            json!({"volumes": [{"name": "scratch",
            "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
        ));
    }
    // Being deleted, finished, bound to an unknown node, pending.
    let mut gone = pod("web-gone", "web", Some("n2"), json!({}));
    gone["metadata"]["deletionTimestamp"] = json!("2026-11-26T12:00:00Z");
    docs.push(gone);
    let mut done = pod("job-1", "job", Some("n3"), json!({}));
    done["status"]["phase"] = json!("Succeeded");
    docs.push(done);
    docs.push(pod("lost-1", "web", Some("nowhere"), json!({})));
    for i in 0..5 {
        docs.push(pod(&format!("pending-{i}"), "web", None, json!({})));
    }
    docs
}

/// The state, with each node's pods in key order (the two paths read
/// bound pods in different orders).
fn normalized(mut s: ClusterState) -> String {
    for n in &mut s.nodes {
        n.pods.sort_by_key(|p| p.key());
    }
    s.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    s.pending_pods.sort_by_key(|p| p.key());
    s.pvcs
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    s.warnings.clear();
    format!("{s:?}")
}

#[test]
fn the_cache_loads_to_what_its_documents_load_to() {
    let cache = ClusterCache::from_documents(documents()).unwrap();
    assert!(
        cache.templates.len() < cache.pods.len() / 4,
        "{} templates",
        cache.templates.len()
    );
    let list = json!({"apiVersion": "v1", "kind": "List", "items": cache.documents()});
    let bytes = serde_json::to_vec(&list).unwrap();
    let direct = flotilla_input::load(&[flotilla_input::Source {
        name: "docs",
        bytes: &bytes,
    }])
    .unwrap();
    let cached = flotilla_input::load_cache(cache.clone()).unwrap();
    let bound: usize = cached.nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(
        bound,
        60 + 3 + 1,
        "web-gone is bound and counted as terminating"
    );
    assert_eq!(cached.pending_pods.len(), 5);
    assert_eq!(cached.pvcs.len(), 3);
    assert_eq!(normalized(cached), normalized(direct));
}

#[test]
fn a_row_whose_template_is_missing_is_an_error_naming_the_pod() {
    let mut cache = ClusterCache::from_documents(documents()).unwrap();
    cache.templates.clear();
    let err = flotilla_input::load_cache(cache.clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("(Pod shop/") && err.contains("is not stored"),
        "{err}"
    );
}
