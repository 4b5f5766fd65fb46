//! The pods the agent keeps: what it sends of each and what the drain
//! reads, never the API server's `Pod`.
//!
//! Each watch event's pod is reduced as it arrives. An unschedulable pod
//! keeps its document as sent ([`docs::pod_document`]; there are few). A
//! bound pod is split as the change stream sends it
//! ([`PodRow::split`]): its template (everything but name, node and
//! timestamps) is interned by id and shared, counted, by every pod that
//! has it, and the pod keeps only its row and what the drain reads
//! ([`PodFacts`]). Expanding a row over its template gives back the
//! document byte for byte. Any other pod (finished, or not yet looked at
//! by the scheduler) is neither sent nor drained, and is not kept.
//!
//! A relist (`Init` .. `InitDone`) updates the pods in place and at its
//! end drops the pods it did not list.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_core::state::compact;
use flotilla_core::state::{ObjectKey, PodRow, TemplateId};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::watcher::Event;
use serde_json::Value;

use crate::batch::PendingDoc;
use crate::changes::Observed;
use crate::docs;
use crate::plan::PodFacts;

/// `namespace/name` of a pod (namespace `default` when absent), ordered by
/// namespace, then name (neither holds a `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodKey(Box<str>);

impl PodKey {
    pub fn new(namespace: &str, name: &str) -> PodKey {
        PodKey(format!("{namespace}/{name}").into_boxed_str())
    }

    /// The key of `pod` ([`docs::pod_key`]).
    pub fn of(pod: &Pod) -> PodKey {
        PodKey(docs::pod_key(pod).into_boxed_str())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn parts(&self) -> (&str, &str) {
        self.0.split_once('/').unwrap_or((&self.0, ""))
    }

    pub fn namespace(&self) -> &str {
        self.parts().0
    }

    pub fn name(&self) -> &str {
        self.parts().1
    }
}

impl Ord for PodKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl PartialOrd for PodKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A template as the change stream sends it, with its id.
#[derive(Debug, PartialEq)]
pub struct Template {
    pub id: TemplateId,
    /// The id's 64 bits (what the interner is keyed by).
    bits: u64,
    pub document: Value,
}

/// A bound pod's row (its template shared) and what the drain reads.
#[derive(Debug, Clone)]
struct Bound {
    template: Arc<Template>,
    node: Arc<str>,
    /// `metadata.creationTimestamp`, `status.startTime`,
    /// `metadata.deletionTimestamp` (sent as they serialize).
    created: Option<Time>,
    started: Option<Time>,
    deleting: Option<Time>,
    /// Not a DaemonSet pod, not a mirror pod.
    evictable: bool,
    /// Being deleted.
    terminating: bool,
    do_not_disrupt_until: Option<i64>,
}

/// What is kept of one pod.
#[derive(Debug, Clone)]
enum Kept {
    Bound(Bound),
    /// Unschedulable: its document as sent.
    Pending(Arc<Value>),
}

#[derive(Debug, Clone)]
struct Entry {
    version: Box<str>,
    /// The listing that last saw the pod ([`PodStore::epoch`]).
    seen: u32,
    kept: Kept,
}

/// An interned template and the number of pods that have it.
#[derive(Debug)]
struct Interned {
    template: Arc<Template>,
    pods: usize,
}

/// What one watch event did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// A pod became unschedulable (opens a batching window).
    pub became_pending: bool,
}

/// The pods, reduced, by key.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: BTreeMap<PodKey, Entry>,
    templates: HashMap<u64, Interned>,
    /// Node names, shared by their pods.
    nodes: HashMap<Arc<str>, usize>,
    pending: usize,
    /// Bumped at every `Init`: a relist drops at `InitDone` the pods whose
    /// `seen` is older.
    epoch: u32,
}

impl PodStore {
    /// Apply one watch event.
    pub fn on_event(&mut self, event: Event<Pod>) -> Applied {
        match event {
            Event::Apply(p) | Event::InitApply(p) => self.apply(p),
            Event::Delete(p) => {
                self.remove(&PodKey::of(&p));
                Applied::default()
            }
            Event::Init => {
                self.epoch = self.epoch.wrapping_add(1);
                Applied::default()
            }
            Event::InitDone => {
                self.drop_unlisted();
                Applied::default()
            }
        }
    }

    fn apply(&mut self, mut pod: Pod) -> Applied {
        let key = PodKey::of(&pod);
        let version: Box<str> = pod
            .metadata
            .resource_version
            .take()
            .unwrap_or_default()
            .into();
        let Some(kept) = self.reduce(pod) else {
            self.remove(&key);
            return Applied::default();
        };
        let pending = matches!(kept, Kept::Pending(_));
        let entry = Entry {
            version,
            seen: self.epoch,
            kept,
        };
        let was_pending = match self.pods.insert(key, entry) {
            Some(old) => self.release(old.kept),
            None => false,
        };
        self.pending += usize::from(pending);
        Applied {
            became_pending: pending && !was_pending,
        }
    }

    /// Forget `key`'s pod.
    fn remove(&mut self, key: &PodKey) {
        if let Some(old) = self.pods.remove(key) {
            self.release(old.kept);
        }
    }

    /// At the end of a relist: drop the pods it did not list.
    fn drop_unlisted(&mut self) {
        let epoch = self.epoch;
        let gone: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(_, e)| e.seen != epoch)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// Undo what keeping `kept` counted. True when it was pending.
    fn release(&mut self, kept: Kept) -> bool {
        match kept {
            Kept::Pending(_) => {
                self.pending = self.pending.saturating_sub(1);
                true
            }
            Kept::Bound(b) => {
                self.unintern(&b.template);
                if let Some(n) = self.nodes.get_mut(&b.node) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.nodes.remove(&b.node);
                    }
                }
                false
            }
        }
    }

    /// What is kept of `pod`: `None` when it is neither unschedulable nor
    /// bound, or has no name.
    fn reduce(&mut self, mut pod: Pod) -> Option<Kept> {
        if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
            return None;
        }
        crate::watch::slim_pod(&mut pod);
        pod.metadata.managed_fields = None;
        if docs::is_unschedulable(&pod) {
            return Some(Kept::Pending(Arc::new(docs::pod_document(&pod))));
        }
        let node = docs::bound_node(&pod)?.to_string();
        let (id, template, row) = PodRow::split(docs::pod_document(&pod))?;
        let evictable = !docs::is_daemon_pod(&pod) && !docs::is_mirror_pod(&pod);
        let do_not_disrupt_until = pod.metadata.annotations.as_ref().and_then(|a| {
            let started = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second());
            flotilla_core::disruption::do_not_disrupt_until(a, started)
        });
        let mut bound = Bound {
            template: self.intern(id, template),
            node: self.node(&node),
            created: pod.metadata.creation_timestamp.take(),
            started: pod.status.as_mut().and_then(|s| s.start_time.take()),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            deleting: pod.metadata.deletion_timestamp.take(),
            evictable,
            do_not_disrupt_until,
        };
        if bound.row(&row.namespace, &row.name) != row {
            // The times do not serialize back as sent (never from the API
            // server): the document is kept whole.
            bound.whole(row, self);
        }
        Some(Kept::Bound(bound))
    }

    /// One pod less has `template` (when interned).
    fn unintern(&mut self, template: &Arc<Template>) {
        let bits = template.bits;
        if let Some(i) = self.templates.get_mut(&bits) {
            if Arc::ptr_eq(&i.template, template) {
                i.pods = i.pods.saturating_sub(1);
                if i.pods == 0 {
                    self.templates.remove(&bits);
                }
            }
        }
    }

    /// The shared name of `node`, counted.
    fn node(&mut self, node: &str) -> Arc<str> {
        let name = match self.nodes.get_key_value(node) {
            Some((name, _)) => name.clone(),
            None => Arc::from(node),
        };
        *self.nodes.entry(name.clone()).or_insert(0) += 1;
        name
    }

    /// The shared template with this id and content, counted. Another
    /// content under the same id (a hash collision) gets a template of
    /// its own, not shared.
    fn intern(&mut self, id: TemplateId, document: Value) -> Arc<Template> {
        let bits = u64::from_str_radix(&id.0, 16).unwrap_or_else(|_| compact::digest(&document));
        match self.templates.get_mut(&bits) {
            Some(i) if i.template.document == document => {
                i.pods += 1;
                i.template.clone()
            }
            Some(_) => Arc::new(Template { id, bits, document }),
            None => {
                let template = Arc::new(Template { id, bits, document });
                let interned = Interned {
                    template: template.clone(),
                    pods: 1,
                };
                self.templates.insert(bits, interned);
                template
            }
        }
    }

    /// Pods kept.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Unschedulable pods.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Templates interned (shared by bound pods).
    pub fn templates(&self) -> usize {
        self.templates.len()
    }

    /// Every kept pod as a post by changes sends it (in key order), and
    /// the number of unschedulable ones.
    pub fn observed(&self, out: &mut Vec<Observed>) -> usize {
        self.observed_after(None, usize::MAX, out);
        self.pending
    }

    /// At most `n` pods as a post by changes sends them, in key order
    /// from the one after `after`; the last one's key when more may follow.
    pub fn observed_after(
        &self,
        after: Option<&PodKey>,
        n: usize,
        out: &mut Vec<Observed>,
    ) -> Option<PodKey> {
        let range = match after {
            Some(k) => self.pods.range::<PodKey, _>((Excluded(k), Unbounded)),
            None => self.pods.range::<PodKey, _>(..),
        };
        let mut taken = 0;
        let mut last = None;
        for (key, e) in range.take(n) {
            out.push(observed(key, e));
            (taken, last) = (taken + 1, Some(key));
        }
        last.filter(|_| taken == n).cloned()
    }

    /// The unschedulable pods' documents and the bound pods' documents, in
    /// key order (a batch post's pending pods and context).
    pub fn documents(&self, context: &mut Vec<Vec<u8>>, pending: &mut Vec<PendingDoc>) {
        for (key, e) in &self.pods {
            match &e.kept {
                Kept::Pending(doc) => pending.push(PendingDoc {
                    key: key.as_str().to_string(),
                    json: serde_json::to_vec(doc.as_ref()).unwrap_or_default(),
                }),
                Kept::Bound(b) => {
                    let doc = b.document(key.name());
                    context.push(serde_json::to_vec(&doc).unwrap_or_default());
                }
            }
        }
    }

    /// Bound pods as the drain sees them, in key order: those on
    /// `nodes`, or all with `None`.
    pub fn facts(&self, nodes: Option<&BTreeSet<String>>) -> Vec<PodFacts> {
        self.pods
            .iter()
            .filter_map(|(key, e)| match &e.kept {
                Kept::Bound(b) if nodes.is_none_or(|n| n.contains(&*b.node)) => Some(PodFacts {
                    namespace: key.namespace().to_string(),
                    name: key.name().to_string(),
                    node: b.node.to_string(),
                    evictable: b.evictable,
                    terminating: b.terminating,
                    do_not_disrupt_until: b.do_not_disrupt_until,
                }),
                _ => None,
            })
            .collect()
    }
}

/// A kept pod as a post by changes sends it.
fn observed(key: &PodKey, e: &Entry) -> Observed {
    let document: flotilla_core::state::stream::Document = match &e.kept {
        Kept::Pending(doc) => {
            let doc = doc.clone();
            Box::new(move || doc.as_ref().clone())
        }
        Kept::Bound(b) => {
            let (b, name) = (b.clone(), key.name().to_string());
            Box::new(move || b.document(&name))
        }
    };
    Observed {
        key: ObjectKey::pod(key.namespace(), key.name()),
        version: e.version.to_string(),
        document,
    }
}

impl Bound {
    /// Keep the whole document instead of `row` over a shared template: a
    /// template of its own holding the timestamps, which the row then
    /// leaves as they are.
    fn whole(&mut self, row: PodRow, store: &mut PodStore) {
        (self.created, self.started, self.deleting) = (None, None, None);
        let document = row.expand(&self.template.document);
        let shared = std::mem::replace(
            &mut self.template,
            Arc::new(Template {
                id: row.template,
                bits: 0,
                document,
            }),
        );
        store.unintern(&shared);
    }

    /// The pod's row.
    fn row(&self, namespace: &str, name: &str) -> PodRow {
        let value = |t: &Option<Time>| t.as_ref().and_then(|t| serde_json::to_value(t).ok());
        PodRow {
            template: self.template.id.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: Some(self.node.to_string()),
            created: value(&self.created),
            started: value(&self.started),
            deleting: value(&self.deleting),
        }
    }

    /// The pod's document as sent.
    fn document(&self, name: &str) -> Value {
        let ns = compact::template_namespace(&self.template.document);
        self.row(ns, name).expand(&self.template.document)
    }
}

/// The pod store, shared by the pod watch (the writer) and the agent's
/// readers.
#[derive(Debug, Clone, Default)]
pub struct Pods(Arc<Mutex<PodStore>>);

/// Pods a chunk of [`Pods::observed`] takes under the lock.
const OBSERVED_CHUNK: usize = 4096;

impl Pods {
    /// Every kept pod as a post by changes sends it, in key order, taken
    /// [`OBSERVED_CHUNK`] at a time: the store is locked for a chunk, not
    /// for the whole walk, and only a chunk is made at once. Pods changed
    /// behind the walk are seen by the next post.
    pub fn observed(&self) -> impl Iterator<Item = Observed> + Send + '_ {
        let mut after: Option<PodKey> = None;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut chunk = Vec::with_capacity(OBSERVED_CHUNK);
            after = self
                .lock()
                .observed_after(after.as_ref(), OBSERVED_CHUNK, &mut chunk);
            done = after.is_none();
            Some(chunk)
        })
        .flatten()
    }

    pub fn lock(&self) -> MutexGuard<'_, PodStore> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply one watch event.
    pub fn on_event(&self, event: Event<Pod>) -> Applied {
        self.lock().on_event(event)
    }
}

#[cfg(test)]
mod tests;
