//! What a prepared post sends, kept compact until each part is built:
//! the parts cut as [`Changes::split`] cuts them, and each part's JSON
//! written, byte for byte, as serializing its [`Changes`] writes it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use serde::Serialize;
use serde_json::Value;

use super::{Acked, Document};
use crate::state::changes::{template_len, Cutter, Field};
use crate::state::compact::{self, PodRow, TemplateId};
use crate::state::{Changes, ObjectKey, Sequence};

/// A template of changed rows.
pub(super) struct TemplateOut {
    id: TemplateId,
    /// Its JSON (emptied when it does not travel).
    json: Box<[u8]>,
    /// Whether it travels: no acknowledged pod keeps it in intake.
    travels: bool,
    /// [`template_len`].
    entry_len: usize,
    /// `{"t":ID,"ns":NS,"n":`: how its rows' JSON starts.
    prefix: Box<[u8]>,
    namespace: String,
}

impl TemplateOut {
    pub(super) fn new(id: TemplateId, template: &Value) -> Self {
        let namespace = compact::template_namespace(template).to_string();
        let mut prefix = b"{\"t\":".to_vec();
        prefix.extend_from_slice(&to_json(&id));
        prefix.extend_from_slice(b",\"ns\":");
        prefix.extend_from_slice(&to_json(&namespace));
        prefix.extend_from_slice(b",\"n\":");
        TemplateOut {
            entry_len: template_len(&id, template),
            id,
            json: to_json(template).into(),
            travels: true,
            prefix: prefix.into(),
            namespace,
        }
    }

    /// An acknowledged pod keeps it in intake: it does not travel.
    pub(super) fn held(&mut self) {
        self.travels = false;
        self.json = Box::default();
    }
}

/// A changed pod's row, serialized: without its template's prefix (it
/// starts with the name), or whole (it starts with `{`) when it does not
/// start with the prefix.
pub(super) struct RowOut {
    template: u64,
    json: Box<[u8]>,
}

impl RowOut {
    pub(super) fn new(template: u64, t: &TemplateOut, json: &[u8]) -> Self {
        let json = json.strip_prefix(&*t.prefix).unwrap_or(json);
        RowOut {
            template,
            json: json.into(),
        }
    }

    fn whole(&self) -> bool {
        self.json.first() == Some(&b'{')
    }

    fn len(&self, t: &TemplateOut) -> usize {
        if self.whole() {
            self.json.len()
        } else {
            t.prefix.len() + self.json.len()
        }
    }

    /// Namespace and name: what orders the rows of a template.
    fn order<'a>(&'a self, t: &'a TemplateOut) -> (Cow<'a, str>, Cow<'a, str>) {
        if self.whole() {
            return match serde_json::from_slice::<PodRow>(&self.json) {
                Ok(r) => (Cow::Owned(r.namespace), Cow::Owned(r.name)),
                Err(_) => (Cow::Borrowed(""), Cow::Borrowed("")),
            };
        }
        (Cow::Borrowed(&t.namespace), leading_string(&self.json))
    }
}

/// The JSON string `json` starts with, unescaped.
fn leading_string(json: &[u8]) -> Cow<'_, str> {
    let body = json.get(1..).unwrap_or_default();
    if let Some(end) = body.iter().position(|b| *b == b'"' || *b == b'\\') {
        if body[end] == b'"' {
            if let Ok(s) = std::str::from_utf8(&body[..end]) {
                return Cow::Borrowed(s);
            }
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json).into_iter::<String>();
    Cow::Owned(de.next().and_then(Result::ok).unwrap_or_default())
}

/// A changed object other than a pod: how to make it, and its length.
pub(super) struct ObjectOut {
    /// Taken when its part is built.
    pub(super) document: Option<Document>,
    pub(super) len: usize,
}

/// Everything a post sends, in the order [`Changes::split`] sends it.
#[derive(Default)]
pub(super) struct Items {
    pub(super) deleted: Vec<ObjectKey>,
    pub(super) objects: Vec<ObjectOut>,
    pub(super) rows: Vec<RowOut>,
    /// The templates of the rows, by their id's 64 bits.
    pub(super) templates: HashMap<u64, TemplateOut>,
}

/// One part: ranges of the items, and the templates it carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PartPlan {
    deleted: Range<usize>,
    objects: Range<usize>,
    rows: Range<usize>,
    /// By id.
    templates: Vec<u64>,
    built: bool,
}

impl Items {
    /// Rows by template, then namespace and name (as [`Changes::split`]
    /// orders them: template ids are 16 hex digits, their bits order as
    /// they do). The rows come mostly in order within a template (the
    /// caches' key order): each template's are sorted only when not.
    fn sort_rows(&mut self) {
        self.rows.sort_by_key(|r| r.template);
        let templates = &self.templates;
        for group in self.rows.chunk_by_mut(|a, b| a.template == b.template) {
            let Some(t) = group.first().and_then(|r| templates.get(&r.template)) else {
                continue;
            };
            if !group.is_sorted_by(|a, b| a.order(t) <= b.order(t)) {
                group.sort_by(|a, b| a.order(t).cmp(&b.order(t)));
            }
        }
    }

    /// Cut into parts of at most `limit` bytes of JSON each, as
    /// [`Changes::split`] cuts them.
    pub(super) fn plan(&mut self, limit: usize) -> Vec<PartPlan> {
        self.sort_rows();
        let mut parts = vec![PartPlan::default()];
        let mut cut = Cutter::new(limit);
        for (i, key) in self.deleted.iter().enumerate() {
            let new = cut.add(Field::Deleted, to_json(key).len(), None);
            extend(&mut part(&mut parts, new).deleted, i);
        }
        for (i, o) in self.objects.iter().enumerate() {
            let new = cut.add(Field::Objects, o.len, None);
            extend(&mut part(&mut parts, new).objects, i);
        }
        for (i, row) in self.rows.iter().enumerate() {
            let Some(t) = self.templates.get(&row.template) else {
                continue;
            };
            let travels = t.travels.then_some((&row.template, t.entry_len));
            let new = cut.add(Field::Pods, row.len(t), travels);
            let p = part(&mut parts, new);
            extend(&mut p.rows, i);
            if t.travels && p.templates.last() != Some(&row.template) {
                p.templates.push(row.template);
            }
        }
        parts
    }
}

/// The part the next item goes in: a new one when `new`.
fn part(parts: &mut Vec<PartPlan>, new: bool) -> &mut PartPlan {
    if new || parts.is_empty() {
        parts.push(PartPlan::default());
    }
    let last = parts.len() - 1;
    &mut parts[last]
}

/// Item `i` joins a part's range of its kind.
fn extend(range: &mut Range<usize>, i: usize) {
    if range.start == range.end {
        *range = i..i + 1;
    } else {
        range.end = i + 1;
    }
}

/// The posts that bring intake to the caches' state, built one part at a
/// time ([`Prepared::take_part`]).
pub struct Prepared {
    pub resync: bool,
    sequences: Vec<Sequence>,
    plans: Vec<PartPlan>,
    items: Items,
    acked: HashMap<ObjectKey, Acked>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("resync", &self.resync)
            .field("sequences", &self.sequences)
            .field("plans", &self.plans)
            .finish_non_exhaustive()
    }
}

/// One post's changes, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub sequence: Sequence,
    /// The [`Changes`], serialized.
    pub changes: Vec<u8>,
    pub templates: usize,
    pub objects: usize,
    pub pods: usize,
    pub deleted: usize,
}

impl Part {
    /// The changes, read back (for tests and tools).
    pub fn decode(&self) -> Result<Changes, serde_json::Error> {
        serde_json::from_slice(&self.changes)
    }
}

impl Prepared {
    pub(super) fn new(
        resync: bool,
        sequences: Vec<Sequence>,
        plans: Vec<PartPlan>,
        items: Items,
        acked: HashMap<ObjectKey, Acked>,
    ) -> Self {
        Prepared {
            resync,
            sequences,
            plans,
            items,
            acked,
        }
    }

    /// The number of posts.
    pub fn parts(&self) -> usize {
        self.plans.len()
    }

    /// The posts' sequences, in order.
    pub fn sequences(&self) -> &[Sequence] {
        &self.sequences
    }

    /// Post `i`: its changes' JSON, built now; what it was built from is
    /// freed. `None` when there is no such post, or it was taken already.
    pub fn take_part(&mut self, i: usize) -> Option<Part> {
        let sequence = self.sequences.get(i)?.clone();
        let plan = self.plans.get_mut(i).filter(|p| !p.built)?;
        plan.built = true;
        let plan = plan.clone();
        let mut out = Vec::new();
        let mut w = Fields::new(&mut out);
        self.items.write_templates(&plan, &mut w);
        self.items.write_objects(&plan, &mut w);
        self.items.write_rows(&plan, &mut w);
        self.items.write_deleted(&plan, &mut w);
        w.end();
        Some(Part {
            sequence,
            changes: out,
            templates: plan.templates.len(),
            objects: plan.objects.len(),
            pods: plan.rows.len(),
            deleted: plan.deleted.len(),
        })
    }

    /// Every post not taken yet, read back (for tests and tools).
    pub fn decode_all(&mut self) -> Result<Vec<(Sequence, Changes)>, serde_json::Error> {
        (0..self.parts())
            .filter_map(|i| self.take_part(i))
            .map(|p| Ok((p.sequence.clone(), p.decode()?)))
            .collect()
    }

    /// The last post's sequence and the acknowledgements once every post
    /// is delivered.
    pub(super) fn into_acked(self) -> (Option<Sequence>, HashMap<ObjectKey, Acked>) {
        (self.sequences.into_iter().last(), self.acked)
    }
}

impl Items {
    fn write_templates(&self, plan: &PartPlan, w: &mut Fields) {
        let mut ts: Vec<&TemplateOut> = plan
            .templates
            .iter()
            .filter_map(|b| self.templates.get(b))
            .collect();
        ts.sort_by(|a, b| a.id.cmp(&b.id));
        w.open(b"\"templates\":{", ts.is_empty());
        for (i, t) in ts.iter().enumerate() {
            w.comma(i);
            w.out.extend_from_slice(&to_json(&t.id));
            w.out.push(b':');
            w.out.extend_from_slice(&t.json);
        }
        w.close(b'}', ts.is_empty());
    }

    fn write_objects(&mut self, plan: &PartPlan, w: &mut Fields) {
        let objects = self
            .objects
            .get_mut(plan.objects.clone())
            .unwrap_or_default();
        w.open(b"\"objects\":[", objects.is_empty());
        for (i, o) in objects.iter_mut().enumerate() {
            w.comma(i);
            let doc = o.document.take().map_or(Value::Null, |d| d());
            // Into a Vec: cannot fail (documents have string keys).
            let _ = serde_json::to_writer(&mut *w.out, &doc);
        }
        w.close(b']', objects.is_empty());
    }

    fn write_rows(&mut self, plan: &PartPlan, w: &mut Fields) {
        let rows = self.rows.get_mut(plan.rows.clone()).unwrap_or_default();
        w.open(b"\"pods\":[", rows.is_empty());
        for (i, row) in rows.iter_mut().enumerate() {
            w.comma(i);
            if !row.whole() {
                if let Some(t) = self.templates.get(&row.template) {
                    w.out.extend_from_slice(&t.prefix);
                }
            }
            w.out.extend_from_slice(&std::mem::take(&mut row.json));
        }
        w.close(b']', rows.is_empty());
    }

    fn write_deleted(&self, plan: &PartPlan, w: &mut Fields) {
        let deleted = self.deleted.get(plan.deleted.clone()).unwrap_or_default();
        w.open(b"\"deleted\":[", deleted.is_empty());
        for (i, key) in deleted.iter().enumerate() {
            w.comma(i);
            w.out.extend_from_slice(&to_json(key));
        }
        w.close(b']', deleted.is_empty());
    }
}

/// A JSON object's fields, written one after the other (empty ones left
/// out, as `skip_serializing_if` leaves them).
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    any: bool,
}

impl<'a> Fields<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Fields { out, any: false }
    }

    fn open(&mut self, head: &[u8], skip: bool) {
        if skip {
            return;
        }
        if self.any {
            self.out.push(b',');
        }
        self.any = true;
        self.out.extend_from_slice(head);
    }

    fn comma(&mut self, i: usize) {
        if i > 0 {
            self.out.push(b',');
        }
    }

    fn close(&mut self, end: u8, skip: bool) {
        if !skip {
            self.out.push(end);
        }
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}
