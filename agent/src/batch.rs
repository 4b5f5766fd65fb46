//! Batching decisions (pure): when to post, and what fits in one body.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Intake's default body limit (`Config::max_body_bytes`: 6 MiB, checked
/// after inflating), less a margin. Gzip keeps the request well under
/// Lambda's 6 MB payload limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 6 * 1024 * 1024 - 64 * 1024;

/// Karpenter-style batching window: fire once no change arrived for
/// `idle`, or once the first change of the window is `max` old. A post
/// that failed schedules its retry ([`Window::retry_at`]): the pending pods
/// wait for it, not for the next change or heartbeat.
#[derive(Debug, Clone)]
pub struct Window {
    idle: Duration,
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
    retry: Option<Instant>,
}

impl Window {
    pub fn new(idle: Duration, max: Duration) -> Self {
        Window {
            idle,
            max,
            first: None,
            last: None,
            retry: None,
        }
    }

    /// A relevant change (a pod became pending, a node registered...).
    pub fn observe(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Fire at `at` at the earliest (a failed post's retry): changes
    /// arriving before then wait for it too.
    pub fn retry_at(&mut self, at: Instant) {
        self.retry = Some(at);
    }

    /// When the window closes, if it is open.
    pub fn deadline(&self) -> Option<Instant> {
        let window = match (self.first, self.last) {
            (Some(first), Some(last)) => Some((last + self.idle).min(first + self.max)),
            _ => None,
        };
        match (window, self.retry) {
            (Some(w), Some(r)) => Some(w.max(r)),
            (w, r) => w.or(r),
        }
    }

    pub fn is_due(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }

    pub fn is_open(&self) -> bool {
        self.first.is_some() || self.retry.is_some()
    }

    /// Close the window (the batch was taken).
    pub fn reset(&mut self) {
        self.first = None;
        self.last = None;
        self.retry = None;
    }
}

/// How long to wait before posting again after `failures` failed posts in
/// a row: `min`, doubling, at most `cap`.
pub fn retry_delay(failures: u32, min: Duration, cap: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    min.saturating_mul(factor).min(cap)
}

/// A serialized pending pod.
#[derive(Debug, Clone)]
pub struct PendingDoc {
    /// `namespace/name`.
    pub key: String,
    pub json: Vec<u8>,
}

/// One request body and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub body: Vec<u8>,
    /// Keys of the pending pods in the body.
    pub included: Vec<String>,
    /// Pending pods left for a later part (did not fit).
    pub deferred: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BatchError {
    #[error("the cluster state without pending pods is {bytes} bytes; the body limit is {limit}")]
    ContextTooLarge { bytes: usize, limit: usize },
}

/// Assemble `{"clusterId", "cluster", "documents": [...]}` from
/// pre-serialized parts: every context document (NodePools, nodes, bound
/// pods, ...) and as many pending pods as fit under `limit` bytes, in the
/// order given. The body is exactly intake's `BatchRequest`.
pub fn assemble(
    cluster_id: &str,
    cluster_meta: &[u8],
    context: &[Vec<u8>],
    pending: &[PendingDoc],
    limit: usize,
) -> Result<Assembled, BatchError> {
    let id = serde_json::to_vec(cluster_id).unwrap_or_default();
    let mut body = Vec::with_capacity(limit.min(1 << 20));
    body.extend_from_slice(b"{\"clusterId\":");
    body.extend_from_slice(&id);
    body.extend_from_slice(b",\"cluster\":");
    body.extend_from_slice(cluster_meta);
    body.extend_from_slice(b",\"documents\":[");
    let mut first = true;
    let mut push = |body: &mut Vec<u8>, doc: &[u8]| {
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(doc);
    };
    for d in context {
        push(&mut body, d);
    }
    const CLOSE: usize = 2; // "]}"
    if body.len() + CLOSE > limit {
        return Err(BatchError::ContextTooLarge {
            bytes: body.len() + CLOSE,
            limit,
        });
    }
    let mut included = Vec::new();
    let mut deferred = 0;
    for p in pending {
        if body.len() + 1 + p.json.len() + CLOSE > limit {
            deferred += 1;
            continue;
        }
        push(&mut body, &p.json);
        included.push(p.key.clone());
    }
    body.extend_from_slice(b"]}");
    Ok(Assembled {
        body,
        included,
        deferred,
    })
}

/// Order pending pods for the next body: never-sent first, then the
/// longest ago sent, then by key (so that, when not all fit, every pod
/// gets its turn over successive parts).
pub fn order_pending(pending: &mut [PendingDoc], last_sent: &HashMap<String, Instant>) {
    pending.sort_by(|a, b| {
        let ta = last_sent.get(&a.key);
        let tb = last_sent.get(&b.key);
        match (ta, tb) {
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => x.cmp(y).then_with(|| a.key.cmp(&b.key)),
            (None, None) => a.key.cmp(&b.key),
        }
    });
}

/// Gzip a body (intake inflates `Content-Encoding: gzip`).
pub fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4 + 64),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_fires_after_idle_or_at_the_latest_after_max() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(1), Duration::from_secs(10));
        assert_eq!(w.deadline(), None);
        assert!(!w.is_due(t0 + Duration::from_secs(100)));
        w.observe(t0);
        assert_eq!(w.deadline(), Some(t0 + Duration::from_secs(1)));
        // A change every 500 ms keeps it open, but never past 10 s.
        for i in 1..40 {
            let t = t0 + Duration::from_millis(500 * i);
            assert!(!w.is_due(t) || t >= t0 + Duration::from_secs(10), "{i}");
            w.observe(t);
        }
        assert_eq!(w.deadline(), Some(t0 + Duration::from_secs(10)));
        assert!(w.is_due(t0 + Duration::from_secs(10)));
        w.reset();
        assert!(!w.is_open());
        w.observe(t0 + Duration::from_secs(20));
        assert!(!w.is_due(t0 + Duration::from_millis(20_999)));
        assert!(w.is_due(t0 + Duration::from_millis(21_000)));
    }

    #[test]
    fn a_failed_post_is_retried_with_backoff_whatever_changes_arrive() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Window::new(s(1), s(10));
        // A retry alone opens the window.
        w.retry_at(t0 + s(4));
        assert!(w.is_open());
        assert_eq!(w.deadline(), Some(t0 + s(4)));
        // A change before it does not post sooner; one after it is normal.
        w.observe(t0 + s(1));
        assert_eq!(w.deadline(), Some(t0 + s(4)));
        w.observe(t0 + s(5));
        assert_eq!(w.deadline(), Some(t0 + s(6)));
        w.reset();
        assert!(!w.is_open());
        assert_eq!(w.deadline(), None);

        let (min, cap) = (Duration::from_millis(500), s(60));
        let delays: Vec<Duration> = [1, 2, 3, 8, 9, 40, u32::MAX]
            .iter()
            .map(|&f| retry_delay(f, min, cap))
            .collect();
        assert_eq!(
            delays,
            [
                Duration::from_millis(500),
                s(1),
                s(2),
                s(60),
                s(60),
                s(60),
                s(60)
            ]
        );
        assert_eq!(retry_delay(0, min, cap), min);
    }

    fn pod(key: &str, size: usize) -> PendingDoc {
        let pad = "x".repeat(size);
        PendingDoc {
            key: key.into(),
            json: format!(r#"{{"kind":"Pod","metadata":{{"name":"{key}"}},"pad":"{pad}"}}"#)
                .into_bytes(),
        }
    }

    #[test]
    fn bodies_are_valid_batch_requests_under_the_limit() {
        let meta = br#"{"name":"demo"}"#;
        let ctx = vec![br#"{"kind":"NodePool"}"#.to_vec()];
        let pods: Vec<PendingDoc> = (0..10).map(|i| pod(&format!("p{i}"), 100)).collect();
        let all = assemble("demo", meta, &ctx, &pods, 1 << 20).unwrap();
        assert_eq!(all.included.len(), 10);
        assert_eq!(all.deferred, 0);
        let v: serde_json::Value = serde_json::from_slice(&all.body).unwrap();
        assert_eq!(v["clusterId"], "demo");
        assert_eq!(v["documents"].as_array().unwrap().len(), 11);

        // A limit that holds the context and about half the pods.
        let limit = all.body.len() / 2 + 100;
        let part = assemble("demo", meta, &ctx, &pods, limit).unwrap();
        assert!(part.body.len() <= limit, "{} > {limit}", part.body.len());
        assert_eq!(part.included.len() + part.deferred, 10);
        assert!(part.deferred > 0 && !part.included.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&part.body).unwrap();
        assert_eq!(
            v["documents"].as_array().unwrap().len(),
            1 + part.included.len()
        );
        // Nothing fits besides the context: an error, not a silent drop.
        assert_eq!(
            assemble("demo", meta, &ctx, &pods, 20),
            Err(BatchError::ContextTooLarge {
                bytes: 80,
                limit: 20
            })
        );
        // No pods at all (a heartbeat).
        let hb = assemble("demo", meta, &[], &[], 1000).unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&hb.body).unwrap()["documents"],
            serde_json::json!([])
        );
    }

    #[test]
    fn pods_left_out_go_first_next_time() {
        let t0 = Instant::now();
        let mut pods: Vec<PendingDoc> = ["c", "a", "b", "d"].iter().map(|k| pod(k, 10)).collect();
        let mut sent = HashMap::new();
        sent.insert("a".to_string(), t0);
        sent.insert("b".to_string(), t0 + Duration::from_secs(1));
        order_pending(&mut pods, &sent);
        let keys: Vec<&str> = pods.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["c", "d", "a", "b"]);
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read;
        let body = br#"{"clusterId":"demo"}"#.repeat(100);
        let z = gzip(&body);
        assert!(z.len() < body.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
    }
}
