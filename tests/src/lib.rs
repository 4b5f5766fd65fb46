//! Cross-crate test support: a local moto server standing in for DynamoDB,
//! EC2 and EventBridge.
//!
//! [`Moto::start`] runs `moto_server` (moto 5.2.5, installed by
//! `cargo xtask test` into `~/.cache/flotilla/venv`) on a free port of
//! 127.0.0.1 as a child process and kills it when dropped. Every test starts
//! its own server, so tests are isolated and run in parallel (nextest runs
//! each test in its own process).
//!
//! The binary is `$FLOTILLA_MOTO_SERVER`, else
//! `~/.cache/flotilla/venv/bin/moto_server`. A missing binary is a test
//! failure that says how to install it, never a silent skip.
//!
//! moto's server handles requests on threads with no lock around a
//! conditional update's read-check-write, so two racing `UpdateItem`s can
//! both pass a condition that real DynamoDB would let only one pass (real
//! DynamoDB serialises writes to an item). The server is therefore started
//! through the venv's `python` with [`SERIAL_MOTO`]: moto's own WSGI app
//! behind one lock, so requests still arrive concurrently (the client's
//! races are real) but each is applied atomically, as DynamoDB does.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod counted;

pub use flotilla_aws::SdkConfig;

/// A running moto server; killed on drop.
pub struct Moto {
    child: Child,
    port: u16,
}

/// moto's server with every request applied under one lock (see the module
/// documentation). Arguments: host, port.
pub const SERIAL_MOTO: &str = r#"
import sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()
def serial(environ, start_response):
    with lock:
        return list(app(environ, start_response))
run_simple(sys.argv[1], int(sys.argv[2]), serial, threaded=True, request_handler=MotoRequestHandler)
"#;

/// The moto server binary.
pub fn moto_server_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOTILLA_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
    PathBuf::from(home)
        .join(".cache")
        .join("flotilla")
        .join("venv")
        .join("bin")
        .join("moto_server")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free TCP port on 127.0.0.1")
}

fn http_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req =
        format!("GET /moto-api/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read(&mut buf)
        .is_ok_and(|n| n >= 12 && buf.starts_with(b"HTTP/1."))
}

impl Moto {
    /// Starts a fresh server and waits until it answers HTTP.
    pub fn start() -> Moto {
        Moto::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Moto::start`], with what went wrong as an error.
    pub fn try_start() -> Result<Moto, String> {
        let bin = moto_server_path();
        if !bin.exists() {
            return Err(format!(
                "moto_server not found at {} (set FLOTILLA_MOTO_SERVER or run `cargo xtask test`, \
                 which installs moto[server]==5.2.5 into ~/.cache/flotilla/venv)",
                bin.display()
            ));
        }
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            // The venv's python sits beside moto_server.
            let python = bin.with_file_name("python");
            let mut child = Command::new(&python)
                .args(["-c", SERIAL_MOTO, "127.0.0.1", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {} (moto's server): {e}", python.display()))?;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    // Most likely the port was taken in between: try another.
                    last_err = format!("moto_server on port {port} exited with {status}");
                    break;
                }
                if http_ok(port) {
                    return Ok(Moto { child, port });
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "moto_server on port {port} did not answer within 60 s"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(format!("could not start moto_server: {last_err}"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An SDK configuration for this server: region us-east-1, static test
    /// credentials.
    pub async fn config(&self) -> SdkConfig {
        flotilla_aws::static_config(&self.endpoint(), "us-east-1", "testing", "testing").await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A name unique within this process (tables, buses, templates).
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// The `events/` folder of the repository.
pub fn events_dir() -> PathBuf {
    repo_root().join("events")
}

/// `infra/template.yaml`, parsed (CloudFormation's short-form tags such as
/// `!Ref` stay tagged values).
pub fn sam_template() -> serde_yaml_ng::Value {
    let path = repo_root().join("infra").join("template.yaml");
    let text = std::fs::read_to_string(&path).expect("infra/template.yaml");
    serde_yaml_ng::from_str(&text).expect("template.yaml is YAML")
}

/// The value at `key` of a YAML mapping.
pub fn yaml_get<'a>(v: &'a serde_yaml_ng::Value, key: &str) -> Option<&'a serde_yaml_ng::Value> {
    v.as_mapping()?
        .get(serde_yaml_ng::Value::String(key.to_string()))
}

/// A batch for `cluster`: one NodePool (amd64, spot or on-demand), one
/// EC2NodeClass selecting subnets and security groups tagged
/// `karpenter.sh/discovery=<discovery>`, and `pods` pods cycling through
/// four sizes.
pub fn sample_batch(cluster: &str, discovery: &str, pods: usize) -> serde_json::Value {
    let mut docs = vec![
        serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                ]
            }}}
        }),
        serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole-demo",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": discovery}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": discovery}}]
            }
        }),
    ];
    let sizes = [
        ("250m", "512Mi"),
        ("1", "2Gi"),
        ("2", "4Gi"),
        ("500m", "3Gi"),
    ];
    for i in 0..pods {
        let (cpu, mem) = sizes[i % sizes.len()];
        docs.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("app-{i}"), "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "app",
                "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
        }));
    }
    serde_json::json!({
        "clusterId": cluster,
        "cluster": {
            "name": cluster,
            "endpoint": "https://EXAMPLE.gr7.us-west-2.eks.amazonaws.com",
            "caBundle": "LS0tLS1CRUdJTg==",
            "serviceCidr": "10.100.0.0/16",
            "kubernetesVersion": "1.33"
        },
        "documents": docs,
    })
}

/// A Function URL request like `events/intake-post.json`, with this
/// method, path and (plain, not base64) body.
pub fn url_request(
    method: &str,
    path: &str,
    body: Option<String>,
) -> aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest {
    let mut v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(events_dir().join("intake-post.json")).expect("events/intake-post.json"),
    )
    .expect("sample event is JSON");
    v["rawPath"] = serde_json::json!(path);
    v["requestContext"]["http"]["method"] = serde_json::json!(method);
    v["requestContext"]["http"]["path"] = serde_json::json!(path);
    v["body"] = body.map_or(serde_json::Value::Null, serde_json::Value::String);
    v["isBase64Encoded"] = serde_json::json!(false);
    if let Some(h) = v.get_mut("headers").and_then(|h| h.as_object_mut()) {
        h.remove("content-encoding");
    }
    serde_json::from_value(v).expect("Function URL request")
}

/// A `POST` the agent makes (its `body` gzip'd, `Content-Encoding: gzip`)
/// as a Function URL delivers it: base64-encoded, as Lambda passes binary
/// bodies.
pub fn gzip_url_request(
    path: &str,
    body: &[u8],
) -> aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest {
    use base64::Engine;
    let gz = flotilla_service::codec::gzip(body);
    let mut req = url_request("POST", path, None);
    req.body = Some(base64::engine::general_purpose::STANDARD.encode(gz));
    req.is_base64_encoded = true;
    req.headers.insert(
        "content-encoding",
        aws_lambda_events::http::HeaderValue::from_static("gzip"),
    );
    req
}

/// One of Flotilla's own events as EventBridge delivers it to a Lambda.
pub fn bridge(
    e: &flotilla_ports::Event,
) -> aws_lambda_events::event::eventbridge::EventBridgeEvent<serde_json::Value> {
    serde_json::from_value(serde_json::json!({
        "version": "0", "id": "00000000-0000-0000-0000-000000000000",
        "detail-type": e.detail_type, "source": "flotilla",
        "account": "123456789012", "time": "2027-01-15T08:00:00Z", "region": "us-west-2",
        "resources": [],
        "detail": serde_json::from_str::<serde_json::Value>(&e.detail).expect("detail"),
    }))
    .expect("EventBridge event")
}

/// Ports over the EC2 simulator (instant fleets for `cluster`), an in-memory
/// bus and a manual clock, with `store` and the demo's node role and
/// instance profile: the world the pipeline and load suites run in.
pub type SimPorts<S> = flotilla_service::Ports<
    S,
    std::sync::Arc<flotilla_sim::Ec2Sim>,
    std::sync::Arc<flotilla_sim::MemBus>,
    std::sync::Arc<flotilla_sim::ManualClock>,
>;

/// The agent role whose sessions sign the sample requests of `events/`
/// (`userArn` of `intake-post.json`): a `ClusterPrincipals` entry.
pub const SAMPLE_AGENT: &str = "arn:aws:sts::123456789012:assumed-role/flotilla-agent/*";

/// See [`SimPorts`]. `cluster` is granted to [`SAMPLE_AGENT`] (intake
/// denies clusters nobody was granted).
pub fn sim_ports<S>(store: S, cluster: &str) -> SimPorts<S> {
    use std::sync::Arc;
    let clock = Arc::new(flotilla_sim::ManualClock::at_millis(1_800_000_000_000));
    let ec2 = flotilla_sim::Ec2Sim::builder("us-west-2")
        .cluster(cluster)
        .clock(clock.clone())
        .build()
        .expect("simulator");
    flotilla_service::Ports {
        store,
        ec2: Arc::new(ec2),
        bus: Arc::new(flotilla_sim::MemBus::new()),
        clock,
        config: flotilla_service::Config {
            region: "us-west-2".into(),
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            ..flotilla_service::Config::default()
        },
        access: flotilla_service::intake::Access::default().allow(cluster, SAMPLE_AGENT),
    }
}
