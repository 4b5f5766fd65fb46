//! The agent's side of the change protocol, pure: what intake has
//! acknowledged, and the posts that bring it to the caches' state.
//!
//! The stream remembers, per object sent, 24 bytes: the `resourceVersion`
//! (as 64 bits, [`version_bits`]), a digest of the document as sent (of a
//! pod: its row, which names its template) and a pod's template. A post
//! compares the caches with that: an object whose `resourceVersion` is
//! unchanged is not even serialized; one whose document is unchanged is
//! not sent. Objects gone are sent as deleted.
//!
//! **Memory.** [`ChangeStream::prepare`] reads the caches once, as an
//! iterator (the caller may hand them over a chunk at a time), and keeps
//! of each object to send only what makes its part: a pod's row as
//! serialized (less the prefix its template fixes), each template once,
//! and for other objects the closure that makes the document (called
//! again when its part is built) and its length. A part's JSON is built
//! when the caller takes it ([`Prepared::take_part`]), byte for byte what
//! serializing its [`Changes`] gives, and what it was built from is freed
//! then.
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

use super::{compact, ObjectKey, PodRow, Resync, Sequence};

mod plan;

use plan::{Items, ObjectOut, RowOut, TemplateOut};
pub use plan::{Part, Prepared};

/// How an object's document is made: called when the post is prepared
/// (to compare it) and again when its part is built (to send it), with
/// the same result (it holds what it needs: a snapshot).
pub type Document = Box<dyn Fn() -> Value + Send + Sync>;

/// One object of the caches, as a post may send it.
pub struct Observed {
    pub key: ObjectKey,
    /// `metadata.resourceVersion` (empty: always compared by content).
    pub version: String,
    /// The document as sent (made only when the version changed).
    pub document: Document,
}

impl Observed {
    /// An object whose document is at hand.
    pub fn of(key: ObjectKey, version: String, document: Value) -> Observed {
        Observed {
            key,
            version,
            document: Box::new(move || document.clone()),
        }
    }
}

/// What intake acknowledged of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Acked {
    /// [`version_bits`] of its `resourceVersion`.
    version: u64,
    digest: u64,
    /// A pod's template (its id's 64 bits); 0 for other objects.
    template: u64,
}

/// A `resourceVersion` as 64 bits: 0 when empty (always compared by
/// content); one more than the number when it is a decimal number
/// (what the API server sends); otherwise a hash with the top bit set. Two
/// versions of an object compare equal only when they are (or, for
/// versions that are not numbers, with a chance of 2^-63).
fn version_bits(version: &str) -> u64 {
    const HASHED: u64 = 1 << 63;
    if version.is_empty() {
        return 0;
    }
    let canonical = version.bytes().all(|b| b.is_ascii_digit())
        && (version == "0" || !version.starts_with('0'));
    match version.parse::<u64>() {
        Ok(n) if canonical && n < HASHED - 1 => n + 1,
        _ => compact::fnv(version.as_bytes()) | HASHED,
    }
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

impl ChangeStream {
    pub fn new(base: String) -> Self {
        ChangeStream {
            base,
            ..ChangeStream::default()
        }
    }

    /// The posts for `observed` (a resync when `resync_due`, or when the
    /// stream needs one), each at most about `limit` bytes of changes.
    pub fn prepare(
        &mut self,
        observed: impl IntoIterator<Item = Observed>,
        limit: usize,
        resync_due: bool,
    ) -> Prepared {
        let resync = resync_due || !self.synced || self.seq != self.acked_seq;
        if resync {
            // A resync reads nothing of what intake held, and until it is
            // delivered the next post is a resync too: free it now.
            self.acked = HashMap::new();
            self.synced = false;
        }
        let observed = observed.into_iter();
        let mut diff = Diff::new(&self.acked, observed.size_hint().0);
        for o in observed {
            diff.observe(o);
        }
        let (mut items, next) = diff.finish();
        if !resync {
            items.deleted = self
                .acked
                .keys()
                .filter(|k| !next.contains_key(*k))
                .cloned()
                .collect();
            items.deleted.sort();
        }
        let plans = items.plan(limit);
        let sequences = self.sequences(resync, plans.len());
        Prepared::new(resync, sequences, plans, items, next)
    }

    /// The sequences of the `n` posts of a resync or a delta.
    fn sequences(&mut self, resync: bool, n: usize) -> Vec<Sequence> {
        if resync {
            self.resyncs = self.resyncs.saturating_add(1);
            self.stream = format!("{}-{}", self.base, self.resyncs);
            self.seq = 0;
            self.acked_seq = 0;
            self.synced = false;
            let parts = u32::try_from(n).unwrap_or(u32::MAX);
            return (0..n)
                .map(|i| Sequence {
                    stream: self.stream.clone(),
                    seq: 1,
                    resync: Some(Resync {
                        part: u32::try_from(i).unwrap_or(u32::MAX),
                        parts,
                    }),
                })
                .collect();
        }
        let first = self.seq.saturating_add(1);
        (0..n)
            .map(|i| Sequence {
                stream: self.stream.clone(),
                seq: first.saturating_add(i as u64),
                resync: None,
            })
            .collect()
    }

    /// Intake acknowledged delta `seq` (one post of a prepared few).
    pub fn delivered(&mut self, seq: &Sequence) {
        if seq.resync.is_none() && seq.stream == self.stream {
            self.seq = seq.seq;
        }
    }

    /// Intake acknowledged every post of `prepared`.
    pub fn delivered_all(&mut self, prepared: Prepared) {
        let (last, acked) = prepared.into_acked();
        if let Some(last) = last {
            if last.resync.is_some() {
                self.seq = 1;
            } else {
                self.seq = last.seq;
            }
        }
        self.acked_seq = self.seq;
        self.acked = acked;
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

/// What changed in the observed objects against `acked`, and the
/// acknowledgements once it is sent. Templates of changed rows travel
/// unless an acknowledged pod uses them and still will (unchanged, or
/// changed over the same template).
struct Diff<'a> {
    acked: &'a HashMap<ObjectKey, Acked>,
    next: HashMap<ObjectKey, Acked>,
    held: HashSet<u64>,
    items: Items,
    /// The document being compared, serialized.
    buf: Vec<u8>,
}

impl<'a> Diff<'a> {
    fn new(acked: &'a HashMap<ObjectKey, Acked>, objects: usize) -> Self {
        Diff {
            acked,
            next: HashMap::with_capacity(objects),
            held: HashSet::new(),
            items: Items::default(),
            buf: Vec::new(),
        }
    }

    fn observe(&mut self, o: Observed) {
        let Observed {
            key,
            version,
            document,
        } = o;
        let version = version_bits(&version);
        let old = self.acked.get(&key).copied();
        if let Some(a) = old.filter(|a| version != 0 && a.version == version) {
            if key.is_pod() {
                self.held.insert(a.template);
            }
            self.next.insert(key, a);
            return;
        }
        let doc = document();
        let acked = if key.is_pod() {
            match self.pod(doc, old) {
                Some(a) => a,
                None => return,
            }
        } else {
            self.object(&doc, document, old)
        };
        self.next.insert(key, Acked { version, ..acked });
    }

    /// A pod's row, kept serialized when it changed (`None`: no name).
    fn pod(&mut self, doc: Value, old: Option<Acked>) -> Option<Acked> {
        let (id, t, row) = PodRow::split(doc)?;
        let bits = template_bits(&id);
        self.serialize(&row);
        let digest = compact::fnv(&self.buf);
        if old.is_none_or(|a| a.digest != digest) {
            let template = self
                .items
                .templates
                .entry(bits)
                .or_insert_with(|| TemplateOut::new(id, &t));
            let row = RowOut::new(bits, template, &self.buf);
            self.items.rows.push(row);
        }
        // Unchanged, or changed but over the same template: the pod
        // keeps the template in intake's state through every part.
        if old.is_some_and(|a| a.template == bits) {
            self.held.insert(bits);
        }
        Some(Acked {
            version: 0,
            digest,
            template: bits,
        })
    }

    /// An object other than a pod, kept as how to make it when changed.
    fn object(&mut self, doc: &Value, document: Document, old: Option<Acked>) -> Acked {
        self.serialize(doc);
        let digest = compact::fnv(&self.buf);
        if old.is_none_or(|a| a.digest != digest) {
            self.items.objects.push(ObjectOut {
                document: Some(document),
                len: self.buf.len(),
            });
        }
        Acked {
            version: 0,
            digest,
            template: 0,
        }
    }

    fn serialize<T: serde::Serialize>(&mut self, v: &T) {
        self.buf.clear();
        // Writing into a Vec fails only for maps with non-string keys,
        // which no document has.
        let _ = serde_json::to_writer(&mut self.buf, v);
    }

    fn finish(mut self) -> (Items, HashMap<ObjectKey, Acked>) {
        for bits in &self.held {
            if let Some(t) = self.items.templates.get_mut(bits) {
                t.held();
            }
        }
        (self.items, self.next)
    }
}

#[cfg(test)]
mod tests;
