//! What one post changes, and the order posts must come in.
//!
//! The agent numbers its posts per *stream*: a stream starts with a full
//! resync (`resync`: part `i` of `n`, all with sequence number 1) that
//! replaces the state, and each later delta must carry the next number.
//! Every resync starts a new stream (the agent's start id and a counter),
//! so a resync is never mistaken for a retry of earlier posts, whatever
//! answers the agent missed. Intake keeps a [`Head`] per cluster and [`admit`]s every post
//! against it: a post already applied is acknowledged again without effect
//! (a retry), a post after a gap, from another stream, or over a state
//! intake does not have (a restored table, a new stack) is answered with
//! "resync required", and the agent sends everything again.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compact::{self, PodRow, TemplateId};
use super::{ObjectKey, StateError};

/// Added, modified and deleted objects. Pods come as rows, with the
/// templates the rows use that intake may not have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Changes {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub templates: BTreeMap<TemplateId, Value>,
    /// Added or modified objects other than pods, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Value>,
    /// Added or modified pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodRow>,
    /// Deleted objects and pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<ObjectKey>,
}

impl Changes {
    /// Every document as added (pods compacted). Documents without kind
    /// or name are refused by index.
    pub fn of_documents(documents: Vec<Value>) -> Result<Changes, StateError> {
        let mut out = Changes::default();
        for (index, doc) in documents.into_iter().enumerate() {
            if ObjectKey::of(&doc).is_none() {
                return Err(StateError::Object {
                    index,
                    reason: "needs a kind and metadata.name".into(),
                });
            }
            if doc.get("kind").and_then(Value::as_str) == Some("Pod") {
                match PodRow::split(doc) {
                    Some((id, t, row)) => {
                        out.templates.entry(id).or_insert(t);
                        out.pods.push(row);
                    }
                    None => {
                        return Err(StateError::Object {
                            index,
                            reason: "a Pod needs metadata.name".into(),
                        })
                    }
                }
            } else {
                out.objects.push(doc);
            }
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.pods.is_empty() && self.deleted.is_empty()
    }

    /// Every object and row well-formed, every row's template present
    /// (here or `held`: the namespace of a template intake holds) and of
    /// the row's namespace.
    pub fn validate<'a>(
        &self,
        held: impl Fn(&TemplateId) -> Option<&'a str>,
    ) -> Result<(), StateError> {
        self.check(held, false).map(|_| ())
    }

    /// What can be checked of a post alone: [`Changes::validate`], except
    /// that rows may name templates the post does not carry. Returns those
    /// templates (the ones intake must hold to apply the post).
    pub fn validate_alone(&self) -> Result<BTreeSet<TemplateId>, StateError> {
        self.check(|_| None, true)
    }

    fn check<'a>(
        &self,
        held: impl Fn(&TemplateId) -> Option<&'a str>,
        allow_missing: bool,
    ) -> Result<BTreeSet<TemplateId>, StateError> {
        for (id, t) in &self.templates {
            if compact::template_id(t) != *id {
                return Err(StateError::Template {
                    template: id.0.clone(),
                    reason: "its id is not the hash of its content".into(),
                });
            }
        }
        self.check_objects()?;
        let mut missing = BTreeSet::new();
        for (index, row) in self.pods.iter().enumerate() {
            let pod = crate::model::namespaced_key(&row.namespace, &row.name);
            let ns = match self.templates.get(&row.template) {
                Some(t) => Some(compact::template_namespace(t)),
                None => held(&row.template),
            };
            let ns = match ns {
                Some(ns) => ns,
                None if allow_missing => {
                    missing.insert(row.template.clone());
                    &row.namespace
                }
                None => {
                    return Err(StateError::MissingTemplate {
                        index,
                        pod,
                        template: row.template.0.clone(),
                    })
                }
            };
            if row.name.is_empty() || ns != row.namespace {
                return Err(StateError::Pod {
                    index,
                    pod,
                    reason: format!("needs a name, and the namespace of its template ({ns})"),
                });
            }
        }
        Ok(missing)
    }

    fn check_objects(&self) -> Result<(), StateError> {
        for (index, doc) in self.objects.iter().enumerate() {
            match ObjectKey::of(doc) {
                Some(k) if k.is_pod() => {
                    return Err(StateError::Object {
                        index,
                        reason: "pods are sent as rows (changes.pods)".into(),
                    })
                }
                Some(_) => {}
                None => {
                    return Err(StateError::Object {
                        index,
                        reason: "needs a kind and metadata.name".into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Cut into parts whose JSON is at most `limit` bytes each (see
    /// [`Cutter`]), every part with the templates its rows use. An object
    /// larger than the limit gets a part of its own.
    pub fn split(mut self, limit: usize) -> Vec<Changes> {
        // Rows of one template together: each template travels in as few
        // parts as possible.
        self.pods.sort_by(|a, b| {
            (&a.template, &a.namespace, &a.name).cmp(&(&b.template, &b.namespace, &b.name))
        });
        let mut parts = vec![Changes::default()];
        let mut cut = Cutter::new(limit);
        for key in self.deleted {
            if cut.add(Field::Deleted, json_len(&key), None) {
                parts.push(Changes::default());
            }
            if let Some(p) = parts.last_mut() {
                p.deleted.push(key);
            }
        }
        for doc in self.objects {
            if cut.add(Field::Objects, json_len(&doc), None) {
                parts.push(Changes::default());
            }
            if let Some(p) = parts.last_mut() {
                p.objects.push(doc);
            }
        }
        for row in self.pods {
            let template = self.templates.get(&row.template);
            let travels = template.map(|t| (&row.template, template_len(&row.template, t)));
            if cut.add(Field::Pods, json_len(&row), travels) {
                parts.push(Changes::default());
            }
            if let Some(p) = parts.last_mut() {
                if let Some(t) = template {
                    if !p.templates.contains_key(&row.template) {
                        p.templates.insert(row.template.clone(), t.clone());
                    }
                }
                p.pods.push(row);
            }
        }
        parts
    }
}

fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// A template's entry in `templates` (`"ID":{...}`), less the comma.
pub(crate) fn template_len(id: &TemplateId, template: &Value) -> usize {
    json_len(id) + 1 + json_len(template)
}

/// A field of [`Changes`], in the order they serialize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Templates,
    Objects,
    Pods,
    Deleted,
}

impl Field {
    /// `"name":[` and the closing bracket.
    fn overhead(self) -> usize {
        let name = match self {
            Field::Templates => "templates",
            Field::Objects => "objects",
            Field::Pods => "pods",
            Field::Deleted => "deleted",
        };
        name.len() + 5
    }
}

/// Where [`Changes::split`] cuts, item after item: a new part when the
/// next item (with its field's name, the comma before it, and the template
/// it needs if the part lacks it) would take the part's JSON over the
/// limit, unless the part is empty. Rows of a template come together, so
/// a part holds a template when the last template it took is that one.
#[derive(Debug)]
pub(crate) struct Cutter<K> {
    limit: usize,
    size: usize,
    /// The fields the part has so far.
    fields: Vec<Field>,
    template: Option<K>,
}

impl<K: PartialEq + Clone> Cutter<K> {
    pub(crate) fn new(limit: usize) -> Self {
        Cutter {
            limit,
            size: 2,
            fields: Vec::new(),
            template: None,
        }
    }

    /// Add an item of `len` bytes of JSON to `field` (a row with the
    /// template that travels with it: key and [`template_len`]). True
    /// when it starts a new part.
    pub(crate) fn add(&mut self, field: Field, len: usize, template: Option<(&K, usize)>) -> bool {
        let new = !self.fields.is_empty()
            && self.size.saturating_add(self.need(field, len, template)) > self.limit;
        if new {
            (self.size, self.fields, self.template) = (2, Vec::new(), None);
        }
        self.size = self.size.saturating_add(self.need(field, len, template));
        if !self.fields.contains(&field) {
            self.fields.push(field);
        }
        if let Some((k, _)) = template {
            if self.template.as_ref() != Some(k) {
                self.template = Some(k.clone());
                if !self.fields.contains(&Field::Templates) {
                    self.fields.push(Field::Templates);
                }
            }
        }
        new
    }

    /// What the item adds to the part (a comma counted before every item
    /// and field, the first ones included: a few bytes over, never under).
    fn need(&self, field: Field, len: usize, template: Option<(&K, usize)>) -> usize {
        let opened = |f: Field| {
            if self.fields.contains(&f) {
                0
            } else {
                f.overhead() + 1
            }
        };
        let mut need = len + 1 + opened(field);
        if let Some((k, t_len)) = template {
            if self.template.as_ref() != Some(k) {
                need += t_len + 1 + opened(Field::Templates);
            }
        }
        need
    }
}

/// What changed between what intake acknowledged (`acked`: key → digest)
/// and the agent's cache now.
pub fn changes_since(acked: &BTreeMap<ObjectKey, u64>, now: &super::ClusterCache) -> Changes {
    let mut out = Changes::default();
    for (key, doc) in &now.objects {
        if acked.get(key) != Some(&compact::digest(doc)) {
            out.objects.push(doc.clone());
        }
    }
    for (key, row) in &now.pods {
        if acked.get(key) != Some(&row.digest()) {
            if let Some(t) = now.templates.get(&row.template) {
                out.templates.insert(row.template.clone(), t.clone());
            }
            out.pods.push(row.clone());
        }
    }
    for key in acked.keys() {
        let present = if key.is_pod() {
            now.pods.contains_key(key)
        } else {
            now.objects.contains_key(key)
        };
        if !present {
            out.deleted.push(key.clone());
        }
    }
    out
}

/// Where a post stands in its stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sequence {
    /// The agent's stream (a new one with every resync).
    pub stream: String,
    /// The post's number in the stream, from 1.
    pub seq: u64,
    /// Set on the parts of a full resync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<Resync>,
}

/// Part `part` (from 0) of the `parts` of a full resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resync {
    pub part: u32,
    pub parts: u32,
}

/// Most parts a resync may have (each up to the 6 MiB body limit).
pub const MAX_RESYNC_PARTS: u32 = 10_000;

/// What intake holds for a cluster: the stream and the last post applied,
/// and a resync being received.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    #[serde(default)]
    pub stream: String,
    /// The last post applied (0: none; the state is empty).
    #[serde(default)]
    pub seq: u64,
    /// A hash of the last post applied: the same number again with other
    /// content is not a retry (the agent did not learn that the post was
    /// applied, and recomputed it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_hash: String,
    /// A resync whose parts are arriving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiving: Option<Receiving>,
    /// The last streams a resync replaced, with the last post applied in
    /// each (the latest `RETIRED_STREAMS`): a late resync part of one of
    /// them is a duplicate, not a new state. Added after the first release
    /// (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredStream>,
}

/// A stream a resync replaced, and the last post applied in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetiredStream {
    pub stream: String,
    pub seq: u64,
}

/// How many replaced streams a head remembers.
pub const RETIRED_STREAMS: usize = 8;

/// A resync being received.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receiving {
    pub stream: String,
    pub seq: u64,
    pub parts: u32,
    pub received: BTreeSet<u32>,
}

impl Receiving {
    /// The parts not received yet.
    pub fn missing(&self) -> Vec<u32> {
        (0..self.parts)
            .filter(|p| !self.received.contains(p))
            .collect()
    }
}

/// What to do with a post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The next delta: apply it; the head moves to its sequence.
    Apply,
    /// Already applied (a retry, or a post overtaken by a resync):
    /// acknowledge, change nothing.
    Duplicate,
    /// A resync part to keep; `complete` when it is the last one missing,
    /// and the resync's parts then replace the state.
    Part { complete: bool },
    /// Intake cannot apply it: the agent must send everything again.
    ResyncRequired { reason: String },
}

/// Check a post's place against the cluster's head; `hash` identifies its
/// content.
pub fn admit(head: &Head, seq: &Sequence, hash: &str) -> Admission {
    if seq.seq == 0 {
        return Admission::ResyncRequired {
            reason: "sequence numbers start at 1".into(),
        };
    }
    let same_stream = head.stream == seq.stream && head.seq > 0;
    if let Some(r) = seq.resync {
        if r.parts == 0 || r.parts > MAX_RESYNC_PARTS || r.part >= r.parts {
            return Admission::ResyncRequired {
                reason: format!(
                    "resync part {} of {}: parts must be 1..={MAX_RESYNC_PARTS}, part below them",
                    r.part, r.parts
                ),
            };
        }
        if same_stream && seq.seq <= head.seq {
            return Admission::Duplicate;
        }
        // A part delivered late, of a stream a resync has since replaced:
        // taking it would bring back the older state.
        let retired = head
            .retired
            .iter()
            .any(|r| r.stream == seq.stream && seq.seq <= r.seq);
        if retired {
            return Admission::Duplicate;
        }
        let received = match &head.receiving {
            Some(rx) if rx.stream == seq.stream && rx.seq == seq.seq && rx.parts == r.parts => {
                &rx.received
            }
            Some(rx) if rx.stream == seq.stream && rx.seq > seq.seq => {
                return Admission::Duplicate;
            }
            _ => &BTreeSet::new(),
        };
        let complete = (0..r.parts).all(|p| p == r.part || received.contains(&p));
        return Admission::Part { complete };
    }
    if !same_stream {
        return Admission::ResyncRequired {
            reason: if head.seq == 0 {
                "no state is stored for this cluster".into()
            } else {
                format!(
                    "the stored state is of another agent stream ({})",
                    head.stream
                )
            },
        };
    }
    if seq.seq == head.seq && !head.last_hash.is_empty() && head.last_hash != hash {
        return Admission::ResyncRequired {
            reason: format!(
                "post {} was applied with other content (its answer was lost?)",
                seq.seq
            ),
        };
    }
    match seq.seq.cmp(&head.seq.saturating_add(1)) {
        std::cmp::Ordering::Less => Admission::Duplicate,
        std::cmp::Ordering::Equal => Admission::Apply,
        std::cmp::Ordering::Greater => Admission::ResyncRequired {
            reason: format!(
                "post {} follows {}: posts {}..{} are missing",
                seq.seq,
                head.seq,
                head.seq.saturating_add(1),
                seq.seq
            ),
        },
    }
}

impl Head {
    /// The streams remembered once a resync of `stream` replaces this
    /// head's: the current one joins them (when it is another and holds
    /// posts), the oldest beyond `RETIRED_STREAMS` are forgotten.
    fn retired_after(&self, stream: &str) -> Vec<RetiredStream> {
        let mut retired: Vec<RetiredStream> = self
            .retired
            .iter()
            .filter(|r| r.stream != stream && r.stream != self.stream)
            .cloned()
            .collect();
        if self.seq > 0 && self.stream != stream {
            retired.push(RetiredStream {
                stream: self.stream.clone(),
                seq: self.seq,
            });
        }
        let extra = retired.len().saturating_sub(RETIRED_STREAMS);
        retired.drain(..extra);
        retired
    }

    /// The head after an admitted post of content `hash`.
    pub fn after(&self, seq: &Sequence, admission: &Admission, hash: &str) -> Head {
        match (admission, seq.resync) {
            (Admission::Apply, _) => Head {
                stream: self.stream.clone(),
                seq: seq.seq,
                last_hash: hash.to_string(),
                receiving: self.receiving.clone(),
                retired: self.retired.clone(),
            },
            (Admission::Part { complete: true }, _) => Head {
                stream: seq.stream.clone(),
                seq: seq.seq,
                last_hash: String::new(),
                receiving: None,
                retired: self.retired_after(&seq.stream),
            },
            (Admission::Part { complete: false }, Some(r)) => {
                let mut rx = match &self.receiving {
                    Some(rx)
                        if rx.stream == seq.stream && rx.seq == seq.seq && rx.parts == r.parts =>
                    {
                        rx.clone()
                    }
                    _ => Receiving {
                        stream: seq.stream.clone(),
                        seq: seq.seq,
                        parts: r.parts,
                        received: BTreeSet::new(),
                    },
                };
                rx.received.insert(r.part);
                Head {
                    receiving: Some(rx),
                    ..self.clone()
                }
            }
            _ => self.clone(),
        }
    }
}
