//! Prometheus metrics and the `/healthz`, `/readyz`, `/metrics` server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub kind: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    /// Batches posted, by outcome (`accepted`, `forbidden` (403: the
    /// agent's IAM permission or cluster mapping), `rejected` (other 4xx),
    /// `failed`).
    pub batches: Family<OutcomeLabel, Counter>,
    /// Pods pending (unschedulable) right now.
    pub pods_pending: Gauge,
    /// Uncompressed batch body size.
    pub batch_bytes: Histogram,
    /// Retried intake requests.
    pub retries: Counter,
    /// Intake requests refused with 403, any route.
    pub intake_forbidden: Counter,
    /// Actions applied, by kind and outcome.
    pub actions: Family<ActionLabel, Counter>,
    /// Seconds from an action's creation to its acknowledgement.
    pub action_latency: Family<KindLabel, Histogram>,
    /// Evictions refused (a PodDisruptionBudget said not now).
    pub evictions_blocked: Counter,
    /// Nodes given their NodeClaim's labels and taints.
    pub nodes_registered: Counter,
    /// 1 while this replica leads.
    pub leader: Gauge,
    ready: AtomicBool,
    alive_at: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("flotilla_agent");
        let batches = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "batches_posted",
            "Batches posted to intake",
            batches.clone(),
        );
        let pods_pending = Gauge::default();
        registry.register(
            "pods_pending",
            "Unschedulable pods seen",
            pods_pending.clone(),
        );
        let batch_bytes = Histogram::new(exponential_buckets(1024.0, 4.0, 9));
        registry.register(
            "batch_bytes",
            "Uncompressed batch body size",
            batch_bytes.clone(),
        );
        let retries = Counter::default();
        registry.register("intake_retries", "Intake requests retried", retries.clone());
        let intake_forbidden = Counter::default();
        registry.register(
            "intake_forbidden",
            "Intake requests refused with 403 (the agent's IAM permissions or cluster mapping)",
            intake_forbidden.clone(),
        );
        let actions = Family::<ActionLabel, Counter>::default();
        registry.register("actions_applied", "Actions acknowledged", actions.clone());
        let action_latency = Family::<KindLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 2.0, 12))
        });
        registry.register(
            "action_latency_seconds",
            "From an action's creation to its acknowledgement",
            action_latency.clone(),
        );
        let evictions_blocked = Counter::default();
        registry.register(
            "evictions_blocked",
            "Evictions refused with 429 (PodDisruptionBudget)",
            evictions_blocked.clone(),
        );
        let nodes_registered = Counter::default();
        registry.register(
            "nodes_registered",
            "Nodes given their NodeClaim's labels and taints",
            nodes_registered.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica leads", leader.clone());
        Metrics {
            registry,
            batches,
            pods_pending,
            batch_bytes,
            retries,
            intake_forbidden,
            actions,
            action_latency,
            evictions_blocked,
            nodes_registered,
            leader,
            ready: AtomicBool::new(false),
            alive_at: AtomicI64::new(unix_now()),
        }
    }

    pub fn batch(&self, outcome: &str) {
        self.batches
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// The caches have synced.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The main loop is turning.
    pub fn tick(&self) {
        self.alive_at.store(unix_now(), Ordering::Relaxed);
    }

    /// Alive: the main loop turned within the last two minutes.
    pub fn is_alive(&self) -> bool {
        unix_now() - self.alive_at.load(Ordering::Relaxed) < 120
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn respond(metrics: &Metrics, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/healthz" if metrics.is_alive() => (StatusCode::OK, "text/plain", "ok".to_string()),
        "/healthz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "main loop stalled".to_string(),
        ),
        "/readyz" if metrics.is_ready() => (StatusCode::OK, "text/plain", "ready".to_string()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "caches not synced".to_string(),
        ),
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// Serve `/healthz`, `/readyz` and `/metrics` on `listener` until the task
/// is dropped.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let r = respond(&metrics, req.uri().path());
                async move { Ok::<_, Infallible>(r) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "metrics connection");
            }
        });
    }
}

/// Bind `addr` and serve in the background.
pub async fn spawn_server(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((local, tokio::spawn(serve(listener, metrics))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_encode_with_the_agent_prefix() {
        let m = Metrics::new();
        m.batch("accepted");
        m.pods_pending.set(3);
        let text = m.encode();
        assert!(
            text.contains("flotilla_agent_batches_posted_total{outcome=\"accepted\"} 1"),
            "{text}"
        );
        assert!(text.contains("flotilla_agent_pods_pending 3"), "{text}");
        assert_eq!(
            respond(&m, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        m.set_ready(true);
        assert_eq!(respond(&m, "/readyz").status(), StatusCode::OK);
        assert_eq!(respond(&m, "/healthz").status(), StatusCode::OK);
        assert_eq!(respond(&m, "/nope").status(), StatusCode::NOT_FOUND);
    }
}
