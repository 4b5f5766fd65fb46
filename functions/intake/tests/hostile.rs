//! Hostile input at the intake Function URL: whatever arrives, the handler
//! answers with a clear 4xx (never a panic, never a 5xx), with memory
//! bounded by the body cap enforced before parsing or inflating, and a
//! request signed for one cluster can neither read nor write another's
//! state.

use std::io::Write as _;
use std::sync::Arc;

use aws_lambda_events::event::lambda_function_urls::{
    LambdaFunctionUrlRequest, LambdaFunctionUrlResponse,
};
use base64::Engine;
use flotilla_ports::Event;
use flotilla_service::intake::Access;
use flotilla_service::{Config, Ports};
use flotilla_sim::{block_on, Ec2Sim, ManualClock, MemBus, MemStore};
use proptest::prelude::*;

type SimPorts = Ports<Arc<MemStore>, Arc<Ec2Sim>, Arc<MemBus>, Arc<ManualClock>>;

const AGENT_A: &str = "arn:aws:sts::123456789012:assumed-role/agent-a/session";
const AGENT_B: &str = "arn:aws:sts::123456789012:assumed-role/agent-b/session";

/// `demo` granted to agent A (intake denies clusters nobody was granted).
fn granted() -> Access {
    Access::default().allow("demo", AGENT_A)
}

fn ports(access: Access) -> SimPorts {
    let clock = Arc::new(ManualClock::at_millis(1_800_000_000_000));
    let ec2 = Ec2Sim::builder("us-west-2")
        .cluster("demo")
        .clock(clock.clone())
        .build()
        .expect("simulator");
    Ports {
        store: Arc::new(MemStore::new()),
        ec2: Arc::new(ec2),
        bus: Arc::new(MemBus::new()),
        clock,
        config: Config {
            region: "us-west-2".into(),
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            max_body_bytes: 256 * 1024,
            ..Config::default()
        },
        access,
    }
}

/// A Function URL request like `events/intake-post.json`.
fn request(
    method: &str,
    path: &str,
    body: &[u8],
    principal: Option<&str>,
) -> LambdaFunctionUrlRequest {
    let mut req: LambdaFunctionUrlRequest =
        serde_json::from_str(include_str!("../../../events/intake-post.json"))
            .expect("sample event parses");
    req.raw_path = Some(path.to_string());
    req.request_context.http.method = Some(method.to_string());
    req.request_context.http.path = Some(path.to_string());
    req.is_base64_encoded = true;
    req.body = Some(base64::engine::general_purpose::STANDARD.encode(body));
    match principal {
        Some(p) => {
            if let Some(iam) = req
                .request_context
                .authorizer
                .as_mut()
                .and_then(|a| a.iam.as_mut())
            {
                iam.user_arn = Some(p.to_string());
            }
        }
        None => req.request_context.authorizer = None,
    }
    req
}

fn post(p: &SimPorts, body: &[u8]) -> LambdaFunctionUrlResponse {
    block_on(flotilla_fn_intake::handle(
        p,
        &request("POST", "/batches", body, Some(AGENT_A)),
    ))
}

fn error_of(r: &LambdaFunctionUrlResponse) -> String {
    let body: serde_json::Value =
        serde_json::from_str(r.body.as_deref().unwrap_or("")).expect("JSON error body");
    body["error"].as_str().unwrap_or_default().to_string()
}

fn cluster_meta() -> serde_json::Value {
    serde_json::json!({
        "name": "demo",
        "endpoint": "https://EXAMPLE.gr7.us-west-2.eks.amazonaws.com",
        "caBundle": "LS0tLS1CRUdJTg==",
        "serviceCidr": "10.100.0.0/16",
        "kubernetesVersion": "1.33"
    })
}

fn node_pool(labels: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {
            "metadata": {"labels": labels},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            }
        }}
    })
}

fn node_class() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole-demo",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]
        }
    })
}

fn pod(name: &str, cpu: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "app",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    })
}

fn batch(cluster: &str, documents: Vec<serde_json::Value>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "clusterId": cluster,
        "cluster": cluster_meta(),
        "documents": documents,
    }))
    .expect("json")
}

fn good_batch(cluster: &str) -> Vec<u8> {
    batch(
        cluster,
        vec![
            node_pool(serde_json::json!({})),
            node_class(),
            pod("web-0", serde_json::json!("500m")),
        ],
    )
}

fn assert_bad_request(r: &LambdaFunctionUrlResponse, mentions: &[&str]) {
    let e = error_of(r);
    assert_eq!(
        r.status_code, 400,
        "expected a 400 mentioning {mentions:?}, got: {e}"
    );
    for m in mentions {
        assert!(e.contains(m), "error {e:?} does not mention {m:?}");
    }
}

#[test]
fn oversized_bodies_are_refused_before_parsing_or_inflating() {
    let p = ports(granted());
    let limit = p.config.max_body_bytes;
    // Not even JSON: refused for its size (413), so it was never parsed.
    let r = post(&p, &vec![b'x'; limit + 1]);
    assert_eq!(r.status_code, 413, "{}", error_of(&r));
    assert!(error_of(&r).contains("limit"));
    // A gzip bomb: 64 MiB of zeros in a few KB, stopped at the limit.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..64 {
        gz.write_all(&[0u8; 1 << 20]).expect("gzip");
    }
    let bomb = gz.finish().expect("gzip");
    assert!(bomb.len() < 128 * 1024);
    let mut req = request("POST", "/batches", &bomb, Some(AGENT_A));
    req.headers.insert(
        "content-encoding",
        aws_lambda_events::http::HeaderValue::from_static("gzip"),
    );
    let r = block_on(flotilla_fn_intake::handle(&p, &req));
    assert_eq!(r.status_code, 413, "{}", error_of(&r));
    assert!(p.store.is_empty() && p.bus.is_empty());
}

#[test]
fn deeply_nested_documents_are_a_clear_400() {
    let p = ports(granted());
    let depth = 100_000;
    let mut body = String::from(r#"{"clusterId":"demo","cluster":"#);
    body.push_str(&cluster_meta().to_string());
    body.push_str(r#","documents":["#);
    body.push_str(&"[".repeat(depth));
    body.push_str(&"]".repeat(depth));
    body.push_str("]}");
    let r = post(&p, body.as_bytes());
    assert_bad_request(&r, &["documents", "recursion limit"]);
    // Nested just within serde_json's limit: still refused by the loader's
    // own depth limit, naming the document.
    let mut doc = serde_json::json!("leaf");
    for _ in 0..120 {
        doc = serde_json::json!({ "a": doc });
    }
    let mut pod = pod("deep", serde_json::json!("1"));
    pod["metadata"]["annotations"] = serde_json::json!({ "x": doc.to_string() });
    pod["spec"]["extra"] = doc;
    let r = post(
        &p,
        &batch(
            "demo",
            vec![node_pool(serde_json::json!({})), node_class(), pod],
        ),
    );
    assert!(
        matches!(r.status_code, 202 | 400),
        "{} {}",
        r.status_code,
        error_of(&r)
    );
}

#[test]
fn invalid_utf8_and_non_json_are_clear_400s() {
    let p = ports(granted());
    let mut body = good_batch("demo");
    let at = body.len() / 2;
    body[at] = 0xff;
    assert_bad_request(&post(&p, &body), &["batch"]);
    assert_bad_request(&post(&p, b"clusterId: demo\n"), &["batch"]);
    assert_bad_request(&post(&p, b""), &["empty"]);
    assert!(p.store.is_empty());
}

#[test]
fn huge_counts_and_quantities_name_their_field() {
    let p = ports(granted());
    let base = || vec![node_pool(serde_json::json!({})), node_class()];
    // A Deployment asking for two billion replicas.
    let mut docs = base();
    docs.push(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "huge", "namespace": "default"},
        "spec": {"replicas": 2_000_000_000i64,
            "selector": {"matchLabels": {"app": "huge"}},
            "template": {"metadata": {"labels": {"app": "huge"}},
                "spec": {"containers": [{"name": "app", "image": "app",
                    "resources": {"requests": {"cpu": "1"}}}]}}}
    }));
    assert_bad_request(&post(&p, &batch("demo", docs)), &["spec.replicas", "huge"]);
    // Quantities past f64 and i64.
    for q in ["1e400", "99999999999999999999999999Ei", "NaN", "-1"] {
        let mut docs = base();
        docs.push(pod("q", serde_json::json!(q)));
        let r = post(&p, &batch("demo", docs));
        assert_bad_request(&r, &["cpu"]);
    }
    assert!(p.bus.is_empty(), "nothing accepted");
    // A vanishingly small one is rounded up to the smallest unit, as the
    // API server does: accepted.
    let mut docs = base();
    docs.push(pod("q", serde_json::json!("1e-400")));
    assert_eq!(post(&p, &batch("demo", docs)).status_code, 202);
    // A number literal too big for any integer type as a replica count.
    let mut docs = base();
    docs.push(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"replicas": 1e300,
            "selector": {"matchLabels": {"app": "big"}},
            "template": {"metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "app", "image": "app"}]}}}
    }));
    assert_bad_request(&post(&p, &batch("demo", docs)), &["replicas"]);
}

#[test]
fn label_values_that_could_inject_into_user_data_are_refused() {
    let p = ports(granted());
    for value in [
        "a\nb",
        "x\"; reboot; \"",
        "$(reboot)",
        "`reboot`",
        "a' --node-labels=evil='1",
        "${HOME}",
    ] {
        let docs = vec![
            node_pool(serde_json::json!({ "team": value })),
            node_class(),
            pod("web", serde_json::json!("1")),
        ];
        let r = post(&p, &batch("demo", docs));
        assert_bad_request(&r, &["team"]);
        // A pod asking for such a label as a node selector cannot pass it
        // on either.
        let mut selecting = pod("sel", serde_json::json!("1"));
        selecting["spec"]["nodeSelector"] = serde_json::json!({ "team": value });
        let docs = vec![node_pool(serde_json::json!({})), node_class(), selecting];
        let r = post(&p, &batch("demo", docs));
        assert_bad_request(&r, &["team"]);
    }
    assert!(p.bus.is_empty(), "nothing accepted");
}

/// Deliver everything on the bus until it is quiet.
fn drain(p: &SimPorts) {
    for _ in 0..100 {
        let events: Vec<Event> = p.bus.take();
        if events.is_empty() {
            return;
        }
        for e in &events {
            let clock = p.clock.clone();
            block_on(flotilla_service::local::dispatch(p, e, &move |ms| {
                clock.advance_millis(ms);
            }))
            .expect("stage");
        }
    }
    panic!("the bus never went quiet");
}

#[test]
fn accepted_labels_reach_user_data_only_as_validated_values() {
    let p = ports(granted());
    let docs = vec![
        node_pool(serde_json::json!({ "team": "payments-1.a_b" })),
        node_class(),
        pod("web", serde_json::json!("1")),
    ];
    assert_eq!(post(&p, &batch("demo", docs)).status_code, 202);
    drain(&p);
    let names = p.ec2.launch_template_names();
    assert!(!names.is_empty(), "launched");
    for n in names {
        let t = p.ec2.launch_template(&n).expect("template");
        // Plain text here; the EC2 adapter base64-encodes it.
        let user_data = &t.user_data;
        assert!(user_data.contains("team=payments-1.a_b"), "{user_data}");
    }
}

#[test]
fn without_cluster_principals_every_cluster_is_refused_naming_the_parameter() {
    let p = ports(Access::default());
    let before = p.store.dump();
    for r in [
        post(&p, &good_batch("demo")),
        block_on(flotilla_fn_intake::handle(
            &p,
            &request("GET", "/clusters/demo", b"", Some(AGENT_A)),
        )),
    ] {
        assert_eq!(r.status_code, 403, "{}", error_of(&r));
        let e = error_of(&r);
        assert!(
            e.contains("ClusterPrincipals") && e.contains("FLOTILLA_CLUSTER_PRINCIPALS"),
            "{e}"
        );
    }
    assert_eq!(p.store.dump(), before, "a refused post writes nothing");
}

#[test]
fn a_batch_for_another_eks_cluster_is_a_400_naming_both() {
    let mut p = ports(granted());
    p.config.cluster_name = Some("prod".into());
    let before = p.store.dump();
    let r = post(&p, &good_batch("demo"));
    assert_eq!(r.status_code, 400, "{}", error_of(&r));
    let e = error_of(&r);
    assert!(
        e.contains("cluster.name") && e.contains("\"demo\"") && e.contains("\"prod\""),
        "{e}"
    );
    assert_eq!(p.store.dump(), before, "a refused post writes nothing");
    p.config.cluster_name = Some("demo".into());
    assert_eq!(post(&p, &good_batch("demo")).status_code, 202);
}

#[test]
fn a_caller_of_one_cluster_can_neither_write_nor_read_another() {
    let access = Access {
        clusters: [
            ("demo".to_string(), vec![AGENT_A.to_string()]),
            (
                "other".to_string(),
                vec!["arn:aws:sts::123456789012:assumed-role/agent-b/*".to_string()],
            ),
        ]
        .into_iter()
        .collect(),
    };
    let p = ports(access);
    let call = |method: &str, path: &str, body: &[u8], who: Option<&str>| {
        block_on(flotilla_fn_intake::handle(
            &p,
            &request(method, path, body, who),
        ))
    };
    // B posts for its own cluster; A may not post for it, nor read it.
    assert_eq!(
        call("POST", "/batches", &good_batch("other"), Some(AGENT_B)).status_code,
        202
    );
    let before = p.store.dump();
    let r = call("POST", "/batches", &good_batch("other"), Some(AGENT_A));
    assert_eq!(r.status_code, 403, "{}", error_of(&r));
    assert!(error_of(&r).contains("other"));
    assert_eq!(p.store.dump(), before, "a refused post writes nothing");
    let r = call("GET", "/clusters/other", b"", Some(AGENT_A));
    assert_eq!(r.status_code, 403, "{}", error_of(&r));
    assert!(!r.body.unwrap_or_default().contains("nodeClaims"));
    // Unsigned callers and clusters nobody is mapped to: refused.
    assert_eq!(
        call("POST", "/batches", &good_batch("demo"), None).status_code,
        403
    );
    assert_eq!(call("GET", "/clusters/demo", b"", None).status_code, 403);
    assert_eq!(
        call("POST", "/batches", &good_batch("third"), Some(AGENT_A)).status_code,
        403
    );
    // The body cannot smuggle another cluster's id past the check either:
    // A's own cluster works, the id in the body is what is checked.
    assert_eq!(
        call("POST", "/batches", &good_batch("demo"), Some(AGENT_A)).status_code,
        202
    );
    assert_eq!(
        call("GET", "/clusters/demo", b"", Some(AGENT_A)).status_code,
        200
    );
    // Prefix rules match whole path segments only when written so.
    let r = call(
        "GET",
        "/clusters/other",
        b"",
        Some("arn:aws:sts::123456789012:assumed-role/agent-bb/session"),
    );
    assert_eq!(r.status_code, 403);
    // Path traversal in the cluster id of a GET.
    assert_eq!(
        call("GET", "/clusters/..%2Fother", b"", Some(AGENT_A)).status_code,
        400
    );
}

/// Arbitrary JSON values, nested a few levels.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        ".{0,12}".prop_map(serde_json::Value::String),
        prop_oneof![
            Just("Pod"),
            Just("NodePool"),
            Just("EC2NodeClass"),
            Just("List"),
            Just("Deployment"),
            Just("1e400"),
            Just("v1"),
            Just("karpenter.sh/v1"),
        ]
        .prop_map(|s| serde_json::json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("kind".to_string()),
                    Just("apiVersion".to_string()),
                    Just("metadata".to_string()),
                    Just("spec".to_string()),
                    Just("name".to_string()),
                    Just("items".to_string()),
                    Just("containers".to_string()),
                    Just("resources".to_string()),
                    Just("requests".to_string()),
                    Just("replicas".to_string()),
                    "[a-z]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_4xx_never_a_panic(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let p = ports(granted());
        let r = post(&p, &body);
        prop_assert!(matches!(r.status_code, 400 | 413), "{} {}", r.status_code, error_of(&r));
        prop_assert!(!error_of(&r).is_empty());
    }

    #[test]
    fn arbitrary_documents_are_accepted_or_refused_with_a_reason(
        docs in prop::collection::vec(json_value(), 0..6),
        with_pool in any::<bool>(),
    ) {
        let p = ports(granted());
        let mut documents = Vec::new();
        if with_pool {
            documents.push(node_pool(serde_json::json!({})));
            documents.push(node_class());
        }
        documents.extend(docs);
        let r = post(&p, &batch("demo", documents));
        prop_assert!(matches!(r.status_code, 202 | 400), "{} {}", r.status_code, error_of(&r));
        if r.status_code == 400 {
            prop_assert!(!error_of(&r).is_empty());
        }
    }

    #[test]
    fn arbitrary_envelopes_are_refused_with_a_reason(envelope in json_value()) {
        let p = ports(granted());
        let body = serde_json::to_vec(&envelope).expect("json");
        let r = post(&p, &body);
        prop_assert_eq!(r.status_code, 400, "{}", error_of(&r));
    }
}
