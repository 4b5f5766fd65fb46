//! The agent's memory at scale: its watch cache filled with a generated
//! cluster (`flotilla_bench::cluster_docs`: nodes, Deployments' bound pods,
//! pending pods), each object handed to the node and pod stores as the
//! watches' initial LISTs hand them, then a
//! full resync prepared by its change stream and encoded post by post, as
//! the agent does. Prints one JSON line: the peak RSS (`VmHWM`) after the
//! cache is filled and after the resync, the resync's parts, bytes and
//! time.
//!
//! `cargo run --release -p flotilla-agent --example memory -- [--nodes N] [--pods N] [--pending N] [--apps N]`

use std::time::{Duration, Instant};

use flotilla_agent::changes::{self, ChangeStream};
use flotilla_agent::nodes::Nodes;
use flotilla_agent::pods::Pods;
use flotilla_agent::watch::Cache;
use flotilla_bench::cluster_docs::{self, Shape};
use flotilla_bench::measure::peak_rss_kib;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use serde_json::{json, Value};

fn args() -> Shape {
    let mut shape = Shape {
        nodes: 5_000,
        bound_pods: 50_000,
        pending_pods: 0,
        apps: 500,
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: memory [--nodes N] [--pods N] [--pending N] [--apps N]");
            std::process::exit(2)
        });
        match k.as_str() {
            "--nodes" => shape.nodes = v,
            "--pods" => shape.bound_pods = v,
            "--pending" => shape.pending_pods = v,
            "--apps" => shape.apps = v,
            _ => {
                eprintln!("unknown argument {k}");
                std::process::exit(2)
            }
        }
    }
    shape
}

fn mib() -> f64 {
    peak_rss_kib().map_or(0.0, |k| k as f64 / 1024.0)
}

/// A generated document as the API server would send it (a
/// resourceVersion).
fn typed<K: serde::de::DeserializeOwned>(mut doc: Value, version: usize) -> K {
    doc["metadata"]["resourceVersion"] = json!(version.to_string());
    serde_json::from_value(doc).unwrap_or_else(|e| {
        eprintln!("a generated document does not parse: {e}");
        std::process::exit(1)
    })
}

/// A generated pod as the API server would send it: with what every real
/// pod carries and the agent does not send (a uid, the service account
/// token volume of random name and its mount, env, a probe), so that the
/// figures include reducing them.
fn api_pod(mut doc: Value, version: usize) -> Pod {
    let token = format!(
        "kube-api-access-{:05x}",
        version.wrapping_mul(2_654_435_761) & 0xfffff
    );
    doc["metadata"]["uid"] = json!(format!("5e1f0000-0000-0000-0000-{version:012}"));
    doc["spec"]["volumes"] = json!([{"name": token, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]);
    if let Some(c) = doc["spec"]["containers"].get_mut(0) {
        c["image"] = json!("registry.example.com/app:1.2.3");
        c["env"] = json!([{"name": "LOG_LEVEL", "value": "info"}]);
        c["readinessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080}});
        c["volumeMounts"] = json!([{"name": token, "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    }
    typed(doc, version)
}

fn main() {
    let shape = args();
    let start_mib = mib();
    let pods = Pods::default();
    let nodes = Nodes::default();
    let t = Instant::now();
    nodes.on_event(Event::Init);
    for i in 0..shape.nodes {
        let node: Node = typed(cluster_docs::node(i), i);
        nodes.on_event(Event::InitApply(node));
    }
    nodes.on_event(Event::InitDone);
    pods.on_event(Event::Init);
    for (i, at) in cluster_docs::placements(shape).into_iter().enumerate() {
        let pod = api_pod(cluster_docs::bound_pod(i, at), i);
        pods.on_event(Event::InitApply(pod));
    }
    for i in 0..shape.pending_pods {
        let pod = api_pod(cluster_docs::pending_pod(i % 20, i), i);
        pods.on_event(Event::InitApply(pod));
    }
    pods.on_event(Event::InitDone);
    let pod_templates = pods.lock().templates();
    let fill_s = t.elapsed().as_secs_f64();
    let cache = Cache::of(pods, nodes);
    let cache_mib = mib();

    // A full resync, as the agent posts it (one body at a time).
    let t = Instant::now();
    let mut stream = ChangeStream::new("bench".into(), Duration::from_secs(3600));
    let (observed, pending) = cache.observed();
    let limit = 6 * 1024 * 1024 - 64 * 1024;
    let mut prepared = stream.prepare(observed, limit, tokio::time::Instant::now());
    let (mut bytes, mut rows, mut templates) = (0usize, 0usize, 0usize);
    let parts = prepared.parts();
    for i in 0..parts {
        let Some(part) = prepared.take_part(i) else {
            break;
        };
        bytes += changes::body("bench", b"{}", &part.sequence, pending, &part.changes).len();
        rows += part.pods;
        templates += part.templates;
    }
    stream.delivered_all(prepared, tokio::time::Instant::now());
    println!(
        "{}",
        json!({"nodes": shape.nodes, "boundPods": shape.bound_pods, "pendingPods": shape.pending_pods,
            "startRssMib": start_mib, "fillSeconds": fill_s, "cacheRssMib": cache_mib, "podTemplates": pod_templates,
            "resync": {"parts": parts, "bytes": bytes, "podRows": rows, "templates": templates,
                       "seconds": t.elapsed().as_secs_f64()},
            "acknowledged": stream.acknowledged(), "peakRssMib": mib()})
    );
}
