//! Posting the cluster by changes (`POST /changes`): what intake has
//! acknowledged, and the posts that bring it to the watch caches' state.
//!
//! The agent remembers, per object it sent, the `resourceVersion` and a
//! digest of the document as sent. A post compares the caches with that:
//! an object whose `resourceVersion` is unchanged is not even serialized;
//! one whose document (as sent: stripped, pods as template + row) is
//! unchanged is not sent. Objects gone from the caches are sent as
//! deleted. The first post of a stream is a full resync in parts; so is
//! the post after intake answered 409 (a gap, a restored table, a new
//! stack) and, every [`ChangeStream::resync_every`], a periodic one that
//! repairs anything unnoticed. See `flotilla_core::state`.

use std::time::Duration;

use flotilla_core::state::stream;
use flotilla_core::state::Sequence;
use tokio::time::Instant;

pub use flotilla_core::state::stream::{Observed, Part, Prepared};

/// The agent's side of the change protocol: the pure stream
/// ([`flotilla_core::state::stream`]) and the periodic resync's clock.
#[derive(Debug)]
pub struct ChangeStream {
    inner: stream::ChangeStream,
    pub resync_every: Duration,
    last_resync: Option<Instant>,
}

impl ChangeStream {
    pub fn new(base: String, resync_every: Duration) -> Self {
        ChangeStream {
            inner: stream::ChangeStream::new(base),
            resync_every,
            last_resync: None,
        }
    }

    /// The posts for `observed` (a resync when due), each at most about
    /// `limit` bytes of changes.
    pub fn prepare(
        &mut self,
        observed: impl IntoIterator<Item = Observed>,
        limit: usize,
        now: Instant,
    ) -> Prepared {
        let due = self
            .last_resync
            .is_none_or(|t| now.duration_since(t) >= self.resync_every);
        self.inner.prepare(observed, limit, due)
    }

    /// Intake acknowledged `seq`.
    pub fn delivered(&mut self, seq: &Sequence) {
        self.inner.delivered(seq);
    }

    /// Intake acknowledged every post of `prepared`.
    pub fn delivered_all(&mut self, prepared: Prepared, now: Instant) {
        if prepared.resync {
            self.last_resync = Some(now);
        }
        self.inner.delivered_all(prepared);
    }

    /// Intake answered 409: the next post is a resync.
    pub fn resync_required(&mut self) {
        self.inner.resync_required();
    }

    /// Objects acknowledged (the agent's memory of intake's state).
    pub fn acknowledged(&self) -> usize {
        self.inner.acknowledged()
    }
}

/// The body of `POST /changes` (`flotilla_service::changes::ChangeRequest`)
/// around a part's changes, serialized ([`Part::changes`]).
pub fn body(
    cluster_id: &str,
    meta: &[u8],
    sequence: &Sequence,
    pending_pods: usize,
    changes: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(changes.len() + meta.len() + 256);
    out.extend_from_slice(b"{\"clusterId\":");
    out.extend_from_slice(&serde_json::to_vec(cluster_id).unwrap_or_default());
    out.extend_from_slice(b",\"cluster\":");
    out.extend_from_slice(meta);
    out.extend_from_slice(b",\"sequence\":");
    out.extend_from_slice(&serde_json::to_vec(sequence).unwrap_or_default());
    out.extend_from_slice(format!(",\"pendingPods\":{pending_pods},\"changes\":").as_bytes());
    out.extend_from_slice(changes);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::state::{Changes, ObjectKey, Resync};
    use serde_json::{json, Value};

    fn obs(kind: &str, name: &str, version: &str, extra: Value) -> Observed {
        let doc = json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": if kind == "Pod" { "default" } else { "" }},
            "spec": extra});
        let key = if kind == "Pod" {
            ObjectKey::pod("default", name)
        } else {
            ObjectKey::new(kind, "", name)
        };
        Observed::of(key, version.into(), doc)
    }

    /// Every part of `p`: sequence and changes.
    fn posts(p: &mut Prepared) -> Vec<(Sequence, Changes)> {
        p.decode_all().expect("parts are Changes")
    }

    #[test]
    fn a_stream_starts_with_a_resync_then_sends_only_what_changed() {
        let t0 = Instant::now();
        let mut s = ChangeStream::new("a".into(), Duration::from_secs(3600));
        let p = s.prepare(
            vec![
                obs("Node", "n1", "1", json!({})),
                obs("Pod", "p1", "1", json!({"x": 1})),
            ],
            1 << 20,
            t0,
        );
        assert!(p.resync);
        assert_eq!(p.parts(), 1);
        assert_eq!(p.sequences()[0].stream, "a-1");
        assert_eq!(p.sequences()[0].resync, Some(Resync { part: 0, parts: 1 }));
        s.delivered_all(p, t0);
        // Same versions: an empty delta (the heartbeat).
        let mut p = s.prepare(
            vec![
                obs("Node", "n1", "1", json!({})),
                obs("Pod", "p1", "1", json!({"x": 1})),
            ],
            1 << 20,
            t0,
        );
        assert!(!p.resync);
        let sent = posts(&mut p);
        assert!(sent[0].1.is_empty());
        assert_eq!(sent[0].0.seq, 2);
        // A new version with the same document is not sent; a changed pod
        // is; a node gone is deleted.
        let mut p = s.prepare(
            vec![
                obs("Pod", "p1", "2", json!({"x": 1})),
                obs("Pod", "p2", "1", json!({})),
            ],
            1 << 20,
            t0,
        );
        let sent = posts(&mut p);
        let c = &sent[0].1;
        assert_eq!(c.pods.len(), 1);
        assert_eq!(c.pods[0].name, "p2");
        assert_eq!(c.deleted, vec![ObjectKey::new("Node", "", "n1")]);
        // Not delivered: the same changes again, with the same number.
        let mut p = s.prepare(
            vec![
                obs("Pod", "p1", "2", json!({"x": 1})),
                obs("Pod", "p2", "1", json!({})),
            ],
            1 << 20,
            t0,
        );
        let sent = posts(&mut p);
        assert_eq!(sent[0].0.seq, 2);
        assert_eq!(sent[0].1.pods.len(), 1);
        s.delivered(&sent[0].0);
        s.delivered_all(p, t0);
        // A 409: a resync on a new stream.
        s.resync_required();
        let p = s.prepare(vec![obs("Pod", "p2", "1", json!({}))], 1 << 20, t0);
        assert!(p.resync);
        assert_eq!(p.sequences()[0].stream, "a-2");
        // And the periodic one.
        s.delivered_all(p, t0);
        let p = s.prepare(vec![], 1 << 20, t0 + Duration::from_secs(3600));
        assert!(p.resync);
    }
}
