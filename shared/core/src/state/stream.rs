//! The agent's side of the change protocol, pure: what intake has
//! acknowledged, and the posts that bring it to the caches' state.
//!
//! The stream remembers, per object sent, the `resourceVersion` and a
//! digest of the document as sent (of a pod: its row, which names its
//! template). A post compares the caches with that: an object whose
//! `resourceVersion` is unchanged is not even serialized; one whose
//! document is unchanged is not sent. Objects gone are sent as deleted.
//!
//! **Templates.** A post carries a template only when intake may not hold
//! it: a row's template travels unless a pod intake holds uses it and
//! still will after the post (unchanged, or changed over the same
//! template: a pod moved to another node). Intake keeps every template a stored row
//! uses (it drops only templates no row uses, when it folds a snapshot),
//! so such a template is held through every part of the post. Anything
//! else (a template last used by a pod this post deletes or moves to
//! another template, or one never sent in this stream) travels with its
//! rows.
//!
//! The first post of a stream is a full resync in parts, every part with
//! the templates its rows use; so is the post after intake answered 409,
//! the post after a delta in parts was only partly delivered (what intake
//! holds is then not what the stream remembers), and a periodic one the
//! caller asks for.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{compact, Changes, ObjectKey, PodRow, Resync, Sequence};

/// One object of the caches, as a post may send it.
pub struct Observed {
    pub key: ObjectKey,
    /// `metadata.resourceVersion` (empty: always compared by content).
    pub version: String,
    /// The document as sent (made only when the version changed).
    pub document: Box<dyn FnOnce() -> Value + Send>,
}

impl Observed {
    /// An object whose document is at hand.
    pub fn of(key: ObjectKey, version: String, document: Value) -> Observed {
        Observed {
            key,
            version,
            document: Box::new(move || document),
        }
    }
}

/// What intake acknowledged of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acked {
    version: String,
    digest: u64,
    /// A pod's template (its id's 64 bits).
    template: Option<u64>,
}

/// The stream of posts of one agent process.
#[derive(Debug, Default)]
pub struct ChangeStream {
    /// This agent process's id: streams are `<base>-<n>`.
    base: String,
    resyncs: u64,
    stream: String,
    /// The last post of the stream intake acknowledged.
    seq: u64,
    /// The post after which intake holds `acked`.
    acked_seq: u64,
    acked: HashMap<ObjectKey, Acked>,
    synced: bool,
}

/// The posts that bring intake to the caches' state.
#[derive(Debug)]
pub struct Prepared {
    pub posts: Vec<(Sequence, Changes)>,
    pub resync: bool,
    acked: HashMap<ObjectKey, Acked>,
}

impl ChangeStream {
    pub fn new(base: String) -> Self {
        ChangeStream {
            base,
            ..ChangeStream::default()
        }
    }

    /// The posts for `observed` (a resync when `resync_due`, or when the
    /// stream needs one), each at most about `limit` bytes of changes.
    pub fn prepare(&mut self, observed: Vec<Observed>, limit: usize, resync_due: bool) -> Prepared {
        let resync = resync_due || !self.synced || self.seq != self.acked_seq;
        let empty = HashMap::new();
        let (mut changes, acked) = diff(if resync { &empty } else { &self.acked }, observed);
        if !resync {
            changes.deleted = self
                .acked
                .keys()
                .filter(|k| !acked.contains_key(*k))
                .cloned()
                .collect();
            changes.deleted.sort();
        }
        let parts = changes.split(limit);
        let posts = if resync {
            self.resyncs = self.resyncs.saturating_add(1);
            self.stream = format!("{}-{}", self.base, self.resyncs);
            self.seq = 0;
            self.acked_seq = 0;
            self.synced = false;
            let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
            let stream = &self.stream;
            parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    let part = u32::try_from(i).unwrap_or(u32::MAX);
                    let resync = Some(Resync { part, parts: n });
                    let seq = Sequence {
                        stream: stream.clone(),
                        seq: 1,
                        resync,
                    };
                    (seq, p)
                })
                .collect()
        } else {
            let (stream, first) = (&self.stream, self.seq.saturating_add(1));
            parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    let seq = Sequence {
                        stream: stream.clone(),
                        seq: first.saturating_add(i as u64),
                        resync: None,
                    };
                    (seq, p)
                })
                .collect()
        };
        Prepared {
            posts,
            resync,
            acked,
        }
    }

    /// Intake acknowledged delta `seq` (one post of a prepared few).
    pub fn delivered(&mut self, seq: &Sequence) {
        if seq.resync.is_none() && seq.stream == self.stream {
            self.seq = seq.seq;
        }
    }

    /// Intake acknowledged every post of `prepared`.
    pub fn delivered_all(&mut self, prepared: Prepared) {
        if let Some((last, _)) = prepared.posts.last() {
            if last.resync.is_some() {
                self.seq = 1;
            } else {
                self.seq = last.seq;
            }
        }
        self.acked_seq = self.seq;
        self.acked = prepared.acked;
        self.synced = true;
    }

    /// Intake answered 409: the next post is a resync.
    pub fn resync_required(&mut self) {
        self.synced = false;
    }

    /// Objects acknowledged (the agent's memory of intake's state).
    pub fn acknowledged(&self) -> usize {
        self.acked.len()
    }

    /// The current stream (empty before the first post).
    pub fn stream(&self) -> &str {
        &self.stream
    }
}

/// A template id's 64 bits (ids are 16 hex digits).
fn template_bits(id: &compact::TemplateId) -> u64 {
    u64::from_str_radix(&id.0, 16).unwrap_or_else(|_| compact::digest(&Value::from(id.0.as_str())))
}

/// What changed in `observed` against `acked`, and the acknowledgements
/// once it is sent. Templates of changed rows travel unless an
/// acknowledged pod uses them and still will (unchanged, or changed over
/// the same template).
fn diff(
    acked: &HashMap<ObjectKey, Acked>,
    observed: Vec<Observed>,
) -> (Changes, HashMap<ObjectKey, Acked>) {
    let mut changes = Changes::default();
    let mut next = HashMap::with_capacity(observed.len());
    let mut held: HashSet<u64> = HashSet::new();
    let mut candidates: HashMap<u64, (compact::TemplateId, Value)> = HashMap::new();
    for o in observed {
        let old = acked.get(&o.key);
        if let Some(a) = old.filter(|a| !o.version.is_empty() && a.version == o.version) {
            held.extend(a.template);
            next.insert(o.key, a.clone());
            continue;
        }
        let doc = (o.document)();
        let (digest, template) = if o.key.is_pod() {
            let Some((id, t, row)) = PodRow::split(doc) else {
                continue;
            };
            let (d, bits) = (row.digest(), template_bits(&id));
            if old.is_none_or(|a| a.digest != d) {
                candidates.entry(bits).or_insert((id, t));
                changes.pods.push(row);
            }
            // Unchanged, or changed but over the same template: the pod
            // keeps the template in intake's state through every part.
            if old.is_some_and(|a| a.template == Some(bits)) {
                held.insert(bits);
            }
            (d, Some(bits))
        } else {
            let d = compact::digest(&doc);
            if old.is_none_or(|a| a.digest != d) {
                changes.objects.push(doc);
            }
            (d, None)
        };
        let version = o.version;
        next.insert(
            o.key,
            Acked {
                version,
                digest,
                template,
            },
        );
    }
    for (bits, (id, t)) in candidates {
        if !held.contains(&bits) {
            changes.templates.insert(id, t);
        }
    }
    (changes, next)
}

#[cfg(test)]
mod tests;
