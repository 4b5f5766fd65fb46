//! Pods as shared templates plus per-pod rows.
//!
//! Pods of one workload differ, as far as anything Flotilla reads goes,
//! only in their name, their node and their timestamps. A template is a
//! pod document without those five fields (`metadata.name`,
//! `metadata.creationTimestamp`, `metadata.deletionTimestamp`,
//! `spec.nodeName`, `status.startTime`), identified by a hash of its
//! content; a row holds the five fields and the template's id. Expanding
//! a row over its template gives back exactly the pod document it came
//! from, so nothing a scheduling rule reads is lost: pods that differ in
//! anything else (a StatefulSet pod's own claim, an extra label) simply
//! get templates of their own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ObjectKey;

/// A template's id: 16 hex digits of a hash of its canonical JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TemplateId(pub String);

impl std::fmt::Display for TemplateId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One pod: its template and what differs from the template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodRow {
    #[serde(rename = "t")]
    pub template: TemplateId,
    /// `metadata.namespace` of the template (`default` when absent): part
    /// of the pod's key.
    #[serde(rename = "ns")]
    pub namespace: String,
    #[serde(rename = "n")]
    pub name: String,
    /// `spec.nodeName`; `None` while the pod is pending.
    #[serde(rename = "node", default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `metadata.creationTimestamp`.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub created: Option<Value>,
    /// `status.startTime`.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Value>,
    /// `metadata.deletionTimestamp`.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub deleting: Option<Value>,
}

/// Where each per-pod field lives in a pod document.
const META_FIELDS: [&str; 3] = ["name", "creationTimestamp", "deletionTimestamp"];

impl PodRow {
    pub fn key(&self) -> ObjectKey {
        ObjectKey::pod(&self.namespace, &self.name)
    }

    /// Split a pod document into its template (with id) and row. `None`
    /// when it has no `metadata.name`.
    pub fn split(mut pod: Value) -> Option<(TemplateId, Value, PodRow)> {
        let meta = pod.get_mut("metadata").and_then(Value::as_object_mut)?;
        let name = match meta.remove("name") {
            Some(Value::String(n)) if !n.is_empty() => n,
            _ => return None,
        };
        let created = meta.remove("creationTimestamp");
        let deleting = meta.remove("deletionTimestamp");
        let namespace = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let node = match pod
            .get_mut("spec")
            .and_then(Value::as_object_mut)
            .and_then(|s| s.remove("nodeName"))
        {
            Some(Value::String(n)) if !n.is_empty() => Some(n),
            Some(Value::String(_)) | None => None,
            // A nodeName that is not a string stays in the template (and
            // the loader reports it).
            Some(other) => {
                if let Some(s) = pod.get_mut("spec").and_then(Value::as_object_mut) {
                    s.insert("nodeName".into(), other);
                }
                None
            }
        };
        let started = pod
            .get_mut("status")
            .and_then(Value::as_object_mut)
            .and_then(|s| s.remove("startTime"));
        let id = template_id(&pod);
        let row = PodRow {
            template: id.clone(),
            namespace,
            name,
            node,
            created,
            started,
            deleting,
        };
        Some((id, pod, row))
    }

    /// The pod document: the template with this row's fields put back.
    pub fn expand(&self, template: &Value) -> Value {
        let mut pod = template.clone();
        let Some(o) = pod.as_object_mut() else {
            return pod;
        };
        let meta = o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            let values = [
                Some(Value::String(self.name.clone())),
                self.created.clone(),
                self.deleting.clone(),
            ];
            for (field, value) in META_FIELDS.iter().zip(values) {
                if let Some(v) = value {
                    m.insert((*field).into(), v);
                }
            }
        }
        if let Some(node) = &self.node {
            let spec = o.entry("spec").or_insert_with(|| Value::Object(Map::new()));
            if let Some(s) = spec.as_object_mut() {
                s.insert("nodeName".into(), Value::String(node.clone()));
            }
        }
        if let Some(started) = &self.started {
            let status = o
                .entry("status")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(s) = status.as_object_mut() {
                s.insert("startTime".into(), started.clone());
            }
        }
        pod
    }

    /// A stable hash of the row (its template by id).
    pub fn digest(&self) -> u64 {
        hash_json(self)
    }
}

/// The id of a template: a hash of its canonical JSON (object keys
/// sorted, as `serde_json` without `preserve_order` keeps them).
pub fn template_id(template: &Value) -> TemplateId {
    TemplateId(format!("{:016x}", digest(template)))
}

/// The namespace of a template's pods (`default` when absent).
pub fn template_namespace(template: &Value) -> &str {
    template
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// A stable 64-bit hash of a document's canonical JSON.
pub fn digest(doc: &Value) -> u64 {
    hash_json(doc)
}

/// 64-bit FNV-1a of `v`'s JSON, hashed as it is written (no buffer).
fn hash_json<T: Serialize + ?Sized>(v: &T) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    // Writing into the hasher cannot fail.
    let _ = serde_json::to_writer(&mut h, v);
    h.0
}

/// 64-bit FNV-1a of `bytes` (of a document's JSON: its [`digest`]).
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.add(bytes);
    h.0
}

/// 64-bit FNV-1a as an [`std::io::Write`].
struct Fnv(u64);

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl std::io::Write for Fnv {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.add(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Pods as templates and rows: `pods` split, templates shared.
pub fn compact_pods(
    pods: impl IntoIterator<Item = Value>,
) -> (BTreeMap<TemplateId, Value>, Vec<PodRow>) {
    let mut templates = BTreeMap::new();
    let mut rows = Vec::new();
    for pod in pods {
        if let Some((id, t, row)) = PodRow::split(pod) {
            templates.entry(id).or_insert(t);
            rows.push(row);
        }
    }
    (templates, rows)
}
