//! Loopback fakes: a small Kubernetes API server (LIST, WATCH streams,
//! merge PATCH of nodes, the Eviction subresource with scripted answers,
//! Leases with resourceVersion conflicts) and the intake Function URL
//! (checks the SigV4 header and gzip, validates bodies with
//! `flotilla_service::intake`'s own parsers).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    full(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}),
    )
}

type Handler = Arc<dyn Fn(String, String, hyper::HeaderMap, Bytes) -> Response<Body> + Send + Sync>;

/// Serve `handler` on a loopback port.
async fn serve(handler: Handler) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let method = req.method().to_string();
                        let uri = req.uri().to_string();
                        let headers = req.headers().clone();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        Ok::<_, Infallible>(handler(method, uri, headers, body))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Some(t) = target.as_object_mut() {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// A kind the fake API server serves.
#[derive(Clone, Copy)]
struct Kind {
    prefix: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        prefix: "/api/v1",
        plural: "pods",
        namespaced: true,
    },
    Kind {
        prefix: "/api/v1",
        plural: "nodes",
        namespaced: false,
    },
    Kind {
        prefix: "/api/v1",
        plural: "persistentvolumeclaims",
        namespaced: true,
    },
    Kind {
        prefix: "/api/v1",
        plural: "persistentvolumes",
        namespaced: false,
    },
    Kind {
        prefix: "/apis/apps/v1",
        plural: "daemonsets",
        namespaced: true,
    },
    Kind {
        prefix: "/apis/storage.k8s.io/v1",
        plural: "storageclasses",
        namespaced: false,
    },
    Kind {
        prefix: "/apis/policy/v1",
        plural: "poddisruptionbudgets",
        namespaced: true,
    },
    Kind {
        prefix: "/apis/karpenter.sh/v1",
        plural: "nodepools",
        namespaced: false,
    },
    Kind {
        prefix: "/apis/karpenter.k8s.aws/v1",
        plural: "ec2nodeclasses",
        namespaced: false,
    },
    Kind {
        prefix: "/apis/coordination.k8s.io/v1",
        plural: "leases",
        namespaced: true,
    },
];

#[derive(Default)]
struct ApiState {
    rv: u64,
    /// plural → (namespace, name) → object.
    objects: HashMap<&'static str, BTreeMap<(String, String), Value>>,
    /// plural → (rv, event line).
    history: HashMap<&'static str, Vec<(u64, String)>>,
    watchers: Vec<(&'static str, mpsc::UnboundedSender<Bytes>)>,
    /// "METHOD path?query" of every request.
    log: Vec<String>,
    /// (namespace, name) → status codes the next evictions answer.
    evictions: HashMap<(String, String), VecDeque<u16>>,
    /// (node, patch) of every node PATCH.
    patches: Vec<(String, Value)>,
}

impl ApiState {
    fn emit(&mut self, plural: &'static str, kind: &str, obj: &Value, rv: u64) {
        let line = format!("{}\n", json!({"type": kind, "object": obj}));
        self.history
            .entry(plural)
            .or_default()
            .push((rv, line.clone()));
        self.watchers
            .retain(|(p, tx)| *p != plural || tx.send(Bytes::from(line.clone())).is_ok());
    }

    fn put(&mut self, plural: &'static str, mut obj: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let existed = self
            .objects
            .entry(plural)
            .or_default()
            .insert((ns, name), obj.clone())
            .is_some();
        self.emit(plural, if existed { "MODIFIED" } else { "ADDED" }, &obj, rv);
        obj
    }

    fn delete(&mut self, plural: &'static str, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self
            .objects
            .entry(plural)
            .or_default()
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.emit(plural, "DELETED", &obj, rv);
        Some(obj)
    }
}

/// The fake Kubernetes API server.
#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<ApiState>>,
    pub addr: SocketAddr,
}

fn kind_of(plural: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.plural == plural)
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let state: Arc<Mutex<ApiState>> = Arc::default();
        let s = state.clone();
        let handler: Handler =
            Arc::new(move |method, uri, _headers, body| handle_api(&s, &method, &uri, &body));
        let addr = serve(handler).await;
        FakeApi { state, addr }
    }

    pub fn client(&self) -> kube::Client {
        flotilla_agent::install_crypto_provider();
        let uri: http::Uri = format!("http://{}", self.addr).parse().expect("uri");
        let mut config = kube::Config::new(uri);
        config.read_timeout = Some(Duration::from_secs(600));
        flotilla_agent::kube_client(config).expect("kube client")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ApiState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Create or replace an object (`plural` as in the URL).
    pub fn put(&self, plural: &str, obj: Value) -> Value {
        let kind = kind_of(plural).expect("served kind");
        self.lock().put(kind.plural, obj)
    }

    pub fn delete(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let kind = kind_of(plural).expect("served kind");
        self.lock().delete(kind.plural, ns, name)
    }

    pub fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let kind = kind_of(plural).expect("served kind");
        self.lock()
            .objects
            .get(kind.plural)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    pub fn patches(&self) -> Vec<(String, Value)> {
        self.lock().patches.clone()
    }

    /// The next evictions of `ns/name` answer these codes, in order (then 201).
    pub fn script_evictions(&self, ns: &str, name: &str, codes: &[u16]) {
        self.lock().evictions.insert(
            (ns.to_string(), name.to_string()),
            codes.iter().copied().collect(),
        );
    }
}

fn handle_api(state: &Mutex<ApiState>, method: &str, uri: &str, body: &[u8]) -> Response<Body> {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    st.log.push(format!("{method} {uri}"));
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let Some(kind) = KINDS.iter().find(|k| {
        path.strip_prefix(k.prefix).is_some_and(|rest| {
            let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
            segs.first() == Some(&k.plural)
                || (segs.first() == Some(&"namespaces") && segs.get(2) == Some(&k.plural))
        })
    }) else {
        return status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
        );
    };
    let rest: Vec<&str> = path[kind.prefix.len()..]
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (ns, tail): (Option<&str>, &[&str]) = match rest.as_slice() {
        ["namespaces", ns, tail @ ..] => (Some(*ns), &tail[1..]),
        [_, tail @ ..] => (None, tail),
        [] => (None, &[]),
    };
    let ns_s = ns.unwrap_or("").to_string();
    match (method, tail) {
        ("GET", []) if query_param(query, "watch") == Some("true") => {
            let from: u64 = query_param(query, "resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
            for (rv, line) in st.history.get(kind.plural).into_iter().flatten() {
                if *rv > from {
                    let _ = tx.send(Bytes::from(line.clone()));
                }
            }
            st.watchers.push((kind.plural, tx));
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            let mut r = Response::new(StreamBody::new(stream).boxed());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        ("GET", []) => {
            let items: Vec<Value> = st
                .objects
                .get(kind.plural)
                .map(|m| {
                    m.iter()
                        .filter(|((o_ns, _), _)| ns.is_none_or(|n| n == o_ns))
                        .map(|(_, v)| v.clone())
                        .collect()
                })
                .unwrap_or_default();
            full(
                200,
                &json!({"apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        ("GET", [name]) => match st
            .objects
            .get(kind.plural)
            .and_then(|m| m.get(&(ns_s.clone(), name.to_string())))
        {
            Some(v) => full(200, v),
            None => status(
                404,
                "NotFound",
                &format!("{} {name:?} not found", kind.plural),
            ),
        },
        ("POST", []) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(body) else {
                return status(400, "BadRequest", "invalid JSON");
            };
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if st
                .objects
                .get(kind.plural)
                .is_some_and(|m| m.contains_key(&(ns_s.clone(), name.clone())))
            {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{} {name:?} already exists", kind.plural),
                );
            }
            if let Some(n) = ns {
                obj["metadata"]["namespace"] = json!(n);
            }
            let stored = st.put(kind.plural, obj);
            full(201, &stored)
        }
        ("PUT", [name]) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(body) else {
                return status(400, "BadRequest", "invalid JSON");
            };
            let key = (ns_s.clone(), name.to_string());
            let Some(current) = st.objects.get(kind.plural).and_then(|m| m.get(&key)) else {
                return status(404, "NotFound", "not found");
            };
            if obj["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again");
            }
            if let Some(n) = ns {
                obj["metadata"]["namespace"] = json!(n);
            }
            let stored = st.put(kind.plural, obj);
            full(200, &stored)
        }
        ("PATCH", [name]) => {
            let Ok(patch) = serde_json::from_slice::<Value>(body) else {
                return status(400, "BadRequest", "invalid JSON");
            };
            let key = (ns_s.clone(), name.to_string());
            let Some(mut current) = st
                .objects
                .get(kind.plural)
                .and_then(|m| m.get(&key))
                .cloned()
            else {
                return status(404, "NotFound", "not found");
            };
            if let Some(rv) = patch["metadata"]["resourceVersion"].as_str() {
                if Some(rv) != current["metadata"]["resourceVersion"].as_str() {
                    return status(409, "Conflict", "the object has been modified");
                }
            }
            st.patches.push((name.to_string(), patch.clone()));
            merge(&mut current, &patch);
            let stored = st.put(kind.plural, current);
            full(200, &stored)
        }
        ("POST", [name, "eviction"]) if kind.plural == "pods" => {
            let key = (ns_s.clone(), name.to_string());
            if !st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
                return status(404, "NotFound", &format!("pods {name:?} not found"));
            }
            let code = st
                .evictions
                .get_mut(&key)
                .and_then(|q| q.pop_front())
                .unwrap_or(201);
            if code == 429 {
                return status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                );
            }
            if code >= 300 {
                return status(code, "InternalError", "eviction failed");
            }
            st.delete("pods", &ns_s, name);
            full(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            )
        }
        _ => status(405, "MethodNotAllowed", &format!("{method} {path}")),
    }
}

// ---------------------------------------------------------------------------

#[derive(Default)]
struct IntakeState {
    /// Requests as "METHOD path".
    log: Vec<String>,
    /// Status codes the next POST /batches answer before handling.
    fail_batches: VecDeque<u16>,
    /// Accepted batches: the inflated body.
    batches: Vec<Value>,
    /// Pending pods per accepted batch (as flotilla's parser counted them).
    pending_counts: Vec<usize>,
    /// Per accepted batch, as flotilla's parser read it: the
    /// PodDisruptionBudgets (`ns/name`).
    pdbs: Vec<Vec<String>>,
    /// The `GET /clusters/<id>` answer.
    view: Value,
    acks: Vec<Value>,
    /// Set lastResult to each accepted batch at once.
    complete_batches: bool,
    problems: Vec<String>,
    /// `POST /changes` runs intake's own service over this store.
    store: flotilla_sim::MemStore,
    /// Change posts by outcome: applied, duplicate, resync (409).
    change_posts: BTreeMap<String, usize>,
}

/// The fake intake Function URL.
#[derive(Clone)]
pub struct FakeIntake {
    state: Arc<Mutex<IntakeState>>,
    pub addr: SocketAddr,
}

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| format!("body is not gzip: {e}"))?;
    Ok(out)
}

/// The checks a Function URL with `AWS_IAM` auth would fail first.
fn check_signed(headers: &hyper::HeaderMap) -> Result<(), String> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or("no Authorization header")?;
    let date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or("no x-amz-date header")?;
    let day = date.get(..8).ok_or("bad x-amz-date")?;
    let want = format!(
        "AWS4-HMAC-SHA256 Credential=AKIDTEST/{day}/us-west-2/lambda/aws4_request, SignedHeaders="
    );
    if !auth.starts_with(&want) {
        return Err(format!(
            "Authorization {auth:?} does not start with {want:?}"
        ));
    }
    let signed = auth
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .ok_or("no SignedHeaders")?;
    for h in ["host", "x-amz-date"] {
        if !signed.split(';').any(|s| s == h) {
            return Err(format!("{h} is not signed ({signed})"));
        }
    }
    if headers.contains_key("content-encoding")
        && !signed.split(';').any(|s| s == "content-encoding")
    {
        return Err("content-encoding is not signed".into());
    }
    let sig = auth.split("Signature=").nth(1).ok_or("no Signature")?;
    if sig.len() != 64 || !sig.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("Signature {sig:?} is not 64 hex digits"));
    }
    Ok(())
}

/// Recompute the signature over what arrived (method, path, the signed
/// headers as received, the body as received) with the test secret: it
/// fails if anything signed was changed on the way or left unsigned.
fn verify_signature(
    method: &str,
    uri: &str,
    headers: &hyper::HeaderMap,
    body: &[u8],
) -> Result<(), String> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let h = |name: &str| -> Result<String, String> {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
            .ok_or(format!("header {name} missing"))
    };
    let auth = h("authorization")?;
    let signed = auth
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .ok_or("no SignedHeaders")?
        .to_string();
    let got = auth.split("Signature=").nth(1).ok_or("no Signature")?;
    let dt = k8s_openapi::jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", h("x-amz-date")?)
        .map_err(|e| e.to_string())?;
    let ts = dt
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .map_err(|e| e.to_string())?
        .timestamp();
    let identity = aws_credential_types::Credentials::new(
        "AKIDTEST",
        "secret",
        Some("token".into()),
        None,
        "fake",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-west-2")
        .name("lambda")
        .time(std::time::SystemTime::from(ts))
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let url = format!("http://{}{uri}", h("host")?);
    let mut pairs = Vec::new();
    for name in signed.split(';').filter(|n| *n != "host") {
        pairs.push((name.to_string(), h(name)?));
    }
    let signable = SignableRequest::new(
        method,
        &url,
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (_, want) = sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    if want != got {
        return Err(format!("signature mismatch: got {got}, recomputed {want}"));
    }
    Ok(())
}

impl FakeIntake {
    pub async fn start(view: Value) -> FakeIntake {
        let state = Arc::new(Mutex::new(IntakeState {
            view,
            complete_batches: true,
            ..IntakeState::default()
        }));
        let s = state.clone();
        let handler: Handler = Arc::new(move |method, uri, headers, body| {
            handle_intake(&s, &method, &uri, &headers, &body)
        });
        let addr = serve(handler).await;
        FakeIntake { state, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IntakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn fail_next_batches(&self, codes: &[u16]) {
        self.lock().fail_batches.extend(codes.iter().copied());
    }

    pub fn set_complete_batches(&self, on: bool) {
        self.lock().complete_batches = on;
    }

    pub fn batches(&self) -> Vec<Value> {
        self.lock().batches.clone()
    }

    pub fn pending_counts(&self) -> Vec<usize> {
        self.lock().pending_counts.clone()
    }

    /// The PodDisruptionBudgets intake's parser read from each batch.
    pub fn parsed_pdbs(&self) -> Vec<Vec<String>> {
        self.lock().pdbs.clone()
    }

    pub fn acks(&self) -> Vec<Value> {
        self.lock().acks.clone()
    }

    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Change posts by outcome (`applied`, `duplicate`, `resync`).
    pub fn change_posts(&self) -> BTreeMap<String, usize> {
        self.lock().change_posts.clone()
    }

    /// Forget the stored state (a restored table, a new stack): the next
    /// change post is answered 409.
    pub fn lose_state(&self) {
        self.lock().store = flotilla_sim::MemStore::new();
    }

    pub fn problems(&self) -> Vec<String> {
        self.lock().problems.clone()
    }

    pub fn set_view(&self, view: Value) {
        self.lock().view = view;
    }
}

fn handle_intake(
    state: &Mutex<IntakeState>,
    method: &str,
    uri: &str,
    headers: &hyper::HeaderMap,
    body: &[u8],
) -> Response<Body> {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    st.log.push(format!("{method} {uri}"));
    if let Err(e) =
        check_signed(headers).and_then(|()| verify_signature(method, uri, headers, body))
    {
        st.problems.push(e.clone());
        return full(403, &json!({"error": e}));
    }
    let inflate = |st: &mut IntakeState| -> Result<Vec<u8>, String> {
        if headers
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            != Some("gzip")
        {
            st.problems
                .push("body not sent with Content-Encoding: gzip".into());
            return Err("expected gzip".into());
        }
        gunzip(body).inspect_err(|e| st.problems.push(e.clone()))
    };
    match (method, uri) {
        ("POST", "/batches") => {
            if let Some(code) = st.fail_batches.pop_front() {
                return full(code, &json!({"error": format!("injected {code}")}));
            }
            let raw = match inflate(&mut st) {
                Ok(b) => b,
                Err(e) => return full(400, &json!({"error": e})),
            };
            let config = flotilla_service::Config::default();
            let (req, cluster) = match flotilla_service::intake::parse_batch(&raw, &config) {
                Ok(x) => x,
                Err(e) => {
                    st.problems
                        .push(format!("intake would reject the batch: {e}"));
                    return full(400, &json!({"error": e.to_string()}));
                }
            };
            let n = st.batches.len() + 1;
            let id = format!("b{n}");
            st.batches
                .push(serde_json::from_slice(&raw).unwrap_or_default());
            st.pending_counts.push(cluster.pending_pods.len());
            st.pdbs.push(cluster.pdbs.iter().map(|p| p.key()).collect());
            if st.complete_batches {
                st.view["lastResult"] = json!({"batchId": id});
            }
            full(
                202,
                &json!({"clusterId": req.cluster_id, "batchId": id,
                "pendingPods": cluster.pending_pods.len(), "deduplicated": false, "registered": 0}),
            )
        }
        ("POST", "/changes") => {
            if let Some(code) = st.fail_batches.pop_front() {
                return full(code, &json!({"error": format!("injected {code}")}));
            }
            let raw = match inflate(&mut st) {
                Ok(b) => b,
                Err(e) => return full(400, &json!({"error": e})),
            };
            accept_changes(&mut st, &raw)
        }
        ("GET", path) if path.starts_with("/clusters/") => full(200, &st.view),
        ("POST", path) if path.starts_with("/clusters/") && path.ends_with("/actions") => {
            let raw = match inflate(&mut st) {
                Ok(b) => b,
                Err(e) => return full(400, &json!({"error": e})),
            };
            let req = match flotilla_service::intake::parse_acks(&raw) {
                Ok(r) => r,
                Err(e) => {
                    st.problems
                        .push(format!("intake would reject the acks: {e}"));
                    return full(400, &json!({"error": e.to_string()}));
                }
            };
            let mut acknowledged = 0;
            for a in &req.acks {
                st.acks.push(serde_json::to_value(a).unwrap_or_default());
                // Intake stops listing acknowledged actions.
                if let Some(list) = st.view["actions"].as_array_mut() {
                    let before = list.len();
                    list.retain(|x| x["id"] != json!(a.id));
                    acknowledged += before - list.len();
                }
            }
            full(
                200,
                &json!({"acknowledged": acknowledged, "already": 0, "unknown": []}),
            )
        }
        _ => full(
            404,
            &json!({"error": format!("no route for {method} {uri}")}),
        ),
    }
}

/// `POST /changes` through intake's own service (over an in-memory
/// store). Every post that changes the stored state is recorded as a batch
/// holding the whole state's documents, as `POST /batches` would have.
fn accept_changes(st: &mut IntakeState, raw: &[u8]) -> Response<Body> {
    use flotilla_service::changes;
    let cluster = serde_json::from_slice::<Value>(raw)
        .ok()
        .and_then(|v| v["clusterId"].as_str().map(str::to_string))
        .unwrap_or_default();
    let access = flotilla_service::intake::Access::default().allow(&cluster, "*");
    let caller = flotilla_service::intake::Caller {
        principal: Some("agent".into()),
    };
    let config = flotilla_service::Config::default();
    let clock =
        flotilla_sim::ManualClock::at_millis(1_800_000_000_000 + st.log.len() as i64 * 1000);
    let bus = flotilla_sim::MemBus::new();
    let out = flotilla_sim::block_on(changes::accept_changes(
        &st.store, &bus, &clock, &config, &access, &caller, raw,
    ));
    let accepted = match out {
        Ok(a) => a,
        Err(flotilla_service::ServiceError::ResyncRequired(m)) => {
            *st.change_posts.entry("resync".into()).or_default() += 1;
            return full(409, &json!({"error": m, "resyncRequired": true}));
        }
        Err(e) => {
            st.problems
                .push(format!("intake would reject the changes: {e}"));
            return full(400, &json!({"error": e.to_string()}));
        }
    };
    let complete = accepted.applied && accepted.missing_parts.is_empty();
    let outcome = if complete {
        "applied"
    } else if accepted.applied {
        "part"
    } else {
        "duplicate"
    };
    *st.change_posts.entry(outcome.into()).or_default() += 1;
    if complete {
        let (_, head) =
            flotilla_sim::block_on(changes::read_head(&st.store, &cluster)).expect("head");
        let meta = head.cluster.clone().expect("cluster facts");
        let state_ref = flotilla_service::records::StateRef {
            cluster: meta.clone(),
            snapshot: head.snapshot.clone(),
            deltas: head.deltas.clone(),
        };
        let cache = flotilla_sim::block_on(changes::load_state(&st.store, &cluster, &state_ref))
            .expect("stored state");
        let parsed = flotilla_input::load_cache(cache.clone()).expect("stored state loads");
        let n = st.batches.len() + 1;
        st.batches
            .push(json!({"clusterId": cluster, "cluster": meta, "documents": cache.documents()}));
        st.pending_counts.push(parsed.pending_pods.len());
        st.pdbs.push(parsed.pdbs.iter().map(|p| p.key()).collect());
        if st.complete_batches && !accepted.batch_id.is_empty() {
            st.view["lastResult"] = json!({"batchId": format!("b{n}")});
        }
    }
    full(202, &serde_json::to_value(&accepted).unwrap_or_default())
}

/// Poll `f` every 20 ms for at most `secs` seconds.
pub async fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if tokio::time::Instant::now() > until {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------

/// One permission: (API group, resource, verb, namespace of a Role or
/// `None` for the ClusterRole, resource names or empty for any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    pub names: Vec<String>,
}

/// The permissions `infra/agent/rbac.yaml` grants.
pub fn rbac_grants() -> Vec<Grant> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../infra/agent/rbac.yaml"
    ))
    .expect("infra/agent/rbac.yaml");
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("rbac.yaml document");
        let kind = v["kind"].as_str().unwrap_or("");
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        let namespace = (kind == "Role").then(|| {
            v["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string()
        });
        for rule in v["rules"].as_array().expect("rules") {
            let strs = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for g in strs("apiGroups") {
                for r in strs("resources") {
                    for verb in strs("verbs") {
                        out.push(Grant {
                            group: g.clone(),
                            resource: r.clone(),
                            verb,
                            namespace: namespace.clone(),
                            names: strs("resourceNames"),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The permission a logged request ("METHOD path?query") needs:
/// (group, resource, verb, namespace, name).
pub type Need = (String, String, String, Option<String>, Option<String>);

pub fn needed(request: &str) -> Option<Need> {
    let (method, uri) = request.split_once(' ')?;
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", g, _v, rest @ ..] => (g.to_string(), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (r.to_string(), None, None),
        [r, n] => (r.to_string(), Some(n.to_string()), None),
        [r, n, s] => (r.to_string(), Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    let resource = match sub {
        Some(s) => format!("{resource}/{s}"),
        None => resource,
    };
    let verb = match (method, name.is_some()) {
        ("GET", false) if query.contains("watch=true") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", _) => "delete",
        _ => return None,
    };
    Some((group, resource, verb.to_string(), ns, name))
}

/// Whether `grants` allow `request`; `None` if the path is not an API path.
pub fn allowed(grants: &[Grant], request: &str) -> Option<bool> {
    let (group, resource, verb, ns, name) = needed(request)?;
    Some(grants.iter().any(|g| {
        g.group == group
            && g.resource == resource
            && g.verb == verb
            && (g.namespace.is_none() || g.namespace == ns)
            // resourceNames never restrict create, list or watch calls in
            // our grants; a named grant needs the named object.
            && (g.names.is_empty() || name.as_ref().is_some_and(|n| g.names.contains(n)))
    }))
}
