//! The cluster's state as the agent's watch caches hold it, kept by
//! changes instead of whole copies: the objects scheduling and disruption
//! read, with pods stored compactly as shared templates plus one small row
//! per pod ([`compact`]), changed by sequenced posts ([`changes`]).
//!
//! Pure data: the agent builds [`changes::Changes`] from its caches,
//! intake checks their sequence ([`changes::admit`]) and applies them to a
//! [`ClusterCache`], and the schedule and disruption stages expand the
//! cache into documents (or straight into the scheduling model, through
//! `flotilla-input`).

pub mod changes;
pub mod compact;
pub mod stream;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use changes::{admit, Admission, Changes, Head, Resync, Sequence};
pub use compact::{PodRow, TemplateId};

/// `Kind/namespace/name` of an object (`Kind//name` when cluster-scoped):
/// what identifies it across changes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjectKey(pub String);

impl ObjectKey {
    pub fn new(kind: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey(format!("{kind}/{namespace}/{name}"))
    }

    /// The key of a Kubernetes document: its `kind`, `metadata.namespace`
    /// (empty when absent) and `metadata.name`. `None` without a kind or a
    /// name.
    pub fn of(doc: &Value) -> Option<ObjectKey> {
        let kind = doc.get("kind").and_then(Value::as_str)?;
        let meta = doc.get("metadata")?;
        let name = meta.get("name").and_then(Value::as_str)?;
        let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() || name.is_empty() {
            return None;
        }
        Some(ObjectKey::new(kind, ns, name))
    }

    /// The key of a pod.
    pub fn pod(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey::new("Pod", namespace, name)
    }

    pub fn is_pod(&self) -> bool {
        self.0.starts_with("Pod/")
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why changes could not be applied. Nothing is applied then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("changes.objects[{index}]: {reason}")]
    Object { index: usize, reason: String },
    #[error(
        "changes.pods[{index}] ({pod}): template {template} is neither in this post nor stored"
    )]
    MissingTemplate {
        index: usize,
        pod: String,
        template: String,
    },
    #[error("changes.pods[{index}] ({pod}): {reason}")]
    Pod {
        index: usize,
        pod: String,
        reason: String,
    },
    #[error("changes.templates.{template}: {reason}")]
    Template { template: String, reason: String },
}

/// The templates a state holds: id → the namespace of their pods.
pub type TemplateIndex = BTreeMap<TemplateId, String>;

/// A cluster's current objects: every object but pods whole, pods as
/// rows over shared templates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterCache {
    #[serde(default, deserialize_with = "bulk_map")]
    pub objects: BTreeMap<ObjectKey, Value>,
    #[serde(default, deserialize_with = "bulk_map")]
    pub templates: BTreeMap<TemplateId, Value>,
    #[serde(default, deserialize_with = "bulk_map")]
    pub pods: BTreeMap<ObjectKey, PodRow>,
}

/// A map read as its entries, then built at once: a stored map comes in
/// key order, which the bulk build takes in linear time instead of one
/// descent per entry (a million pod rows). A repeated key keeps its last
/// value, as a map read entry by entry does.
fn bulk_map<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    struct Entries<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> serde::de::Visitor<'de>
        for Entries<K, V>
    {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(entry) = map.next_entry::<K, V>()? {
                entries.push(entry);
            }
            Ok(entries.into_iter().collect())
        }
    }
    d.deserialize_map(Entries(std::marker::PhantomData))
}

impl ClusterCache {
    /// A cache holding `documents` (Lists flattened; a later document of
    /// the same key replaces an earlier one). Documents without a kind or
    /// name are reported by index.
    pub fn from_documents(documents: Vec<Value>) -> Result<ClusterCache, StateError> {
        let mut cache = ClusterCache::default();
        let changes = Changes::of_documents(flatten(documents))?;
        cache.apply(&changes)?;
        Ok(cache)
    }

    /// Apply one post's changes: every object, template and pod is checked
    /// first, so an invalid post changes nothing. Applying the same
    /// changes twice gives the same cache.
    pub fn apply(&mut self, changes: &Changes) -> Result<(), StateError> {
        changes.validate(|id| self.templates.get(id).map(compact::template_namespace))?;
        for (id, t) in &changes.templates {
            self.templates
                .entry(id.clone())
                .or_insert_with(|| t.clone());
        }
        for doc in &changes.objects {
            if let Some(key) = ObjectKey::of(doc) {
                self.objects.insert(key, doc.clone());
            }
        }
        for row in &changes.pods {
            self.pods.insert(row.key(), row.clone());
        }
        for key in &changes.deleted {
            if key.is_pod() {
                self.pods.remove(key);
            } else {
                self.objects.remove(key);
            }
        }
        Ok(())
    }

    /// Every template's id with the namespace of its pods: what intake
    /// checks a post's rows against.
    pub fn template_index(&self) -> TemplateIndex {
        self.templates
            .iter()
            .map(|(id, t)| (id.clone(), compact::template_namespace(t).to_string()))
            .collect()
    }

    /// Drop the templates no pod uses any more (after deletions).
    pub fn drop_unused_templates(&mut self) {
        let used: BTreeSet<&TemplateId> = self.pods.values().map(|r| &r.template).collect();
        self.templates.retain(|id, _| used.contains(id));
    }

    /// The number of pods without a node (pending).
    pub fn pending_pods(&self) -> usize {
        self.pods.values().filter(|r| r.node.is_none()).count()
    }

    /// Every object as a whole document (pods expanded), in key order:
    /// what `flotilla plan` would read. Large caches are better loaded
    /// through `flotilla_input::load_cache`, which does not expand bound
    /// pods.
    pub fn documents(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self.objects.values().cloned().collect();
        for row in self.pods.values() {
            if let Some(t) = self.templates.get(&row.template) {
                out.push(row.expand(t));
            }
        }
        out
    }

    /// Every object's key with a stable 64-bit hash of its content (pods
    /// by template and row): what the agent compares with what intake
    /// acknowledged to find what changed.
    pub fn digests(&self) -> BTreeMap<ObjectKey, u64> {
        let mut out = BTreeMap::new();
        for (k, v) in &self.objects {
            out.insert(k.clone(), compact::digest(v));
        }
        for (k, r) in &self.pods {
            out.insert(k.clone(), r.digest());
        }
        out
    }
}

/// Lists' items in place of the Lists.
pub fn flatten(documents: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(documents.len());
    let mut stack: Vec<Value> = documents.into_iter().rev().collect();
    while let Some(d) = stack.pop() {
        let is_list = d
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k == "List" || k.ends_with("List"));
        match (is_list, d) {
            (true, Value::Object(mut o)) => {
                if let Some(Value::Array(items)) = o.remove("items") {
                    stack.extend(items.into_iter().rev());
                }
            }
            (_, d) => out.push(d),
        }
    }
    out
}

#[cfg(test)]
mod tests;
