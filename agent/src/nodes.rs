//! The nodes the agent keeps: each node's document as sent
//! ([`docs::node_document`], serialized) and what the action planner reads
//! ([`NodeFacts`]), never the API server's `Node`.
//!
//! A relist (`Init` .. `InitDone`) updates the nodes in place and at its
//! end drops the nodes it did not list.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_core::state::ObjectKey;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::Event;
use serde_json::Value;

use crate::changes::Observed;
use crate::docs;
use crate::plan::{NodeFacts, Taint};

#[derive(Debug, Clone)]
struct Entry {
    version: Box<str>,
    /// The listing that last saw the node ([`NodeStore::epoch`]).
    seen: u32,
    /// The document as sent, serialized (a fraction of its tree's size).
    document: Arc<[u8]>,
    facts: NodeFacts,
}

/// The nodes, reduced, by name.
#[derive(Debug, Default)]
pub struct NodeStore {
    nodes: BTreeMap<String, Entry>,
    /// Bumped at every `Init`: a relist drops at `InitDone` the nodes
    /// whose `seen` is older.
    epoch: u32,
}

impl NodeStore {
    /// Apply one watch event.
    pub fn on_event(&mut self, event: Event<Node>) {
        match event {
            Event::Apply(n) | Event::InitApply(n) => self.apply(n),
            Event::Delete(n) => {
                self.nodes.remove(n.metadata.name.as_deref().unwrap_or(""));
            }
            Event::Init => self.epoch = self.epoch.wrapping_add(1),
            Event::InitDone => {
                let epoch = self.epoch;
                self.nodes.retain(|_, e| e.seen == epoch);
            }
        }
    }

    fn apply(&mut self, mut node: Node) {
        let Some(name) = node.metadata.name.clone().filter(|n| !n.is_empty()) else {
            return;
        };
        node.metadata.managed_fields = None;
        // The document keeps only the Ready condition's type and status
        // (`docs::node_document`): the conditions stay until it is made.
        if let Some(s) = node.status.as_mut() {
            s.images = None;
        }
        let document = serde_json::to_vec(&docs::node_document(&node)).unwrap_or_default();
        let entry = Entry {
            version: node
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default()
                .into(),
            seen: self.epoch,
            document: document.into(),
            facts: facts(name.clone(), &node),
        };
        self.nodes.insert(name, entry);
    }

    /// Nodes kept.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node as a post by changes sends it, in name order.
    pub fn observed(&self, out: &mut Vec<Observed>) {
        for (name, e) in &self.nodes {
            let document = e.document.clone();
            out.push(Observed {
                key: ObjectKey::new("Node", "", name),
                version: e.version.to_string(),
                document: Box::new(move || {
                    serde_json::from_slice::<Value>(&document).unwrap_or(Value::Null)
                }),
            });
        }
    }

    /// Every node's document, serialized, in name order (a batch post's
    /// context).
    pub fn documents(&self, context: &mut Vec<Vec<u8>>) {
        context.extend(self.nodes.values().map(|e| e.document.to_vec()));
    }

    /// The nodes as the action planner sees them, in name order.
    pub fn facts(&self) -> Vec<NodeFacts> {
        self.nodes.values().map(|e| e.facts.clone()).collect()
    }
}

/// What the action planner reads of `node`.
fn facts(name: String, n: &Node) -> NodeFacts {
    let spec = n.spec.as_ref();
    NodeFacts {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| Taint {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect: t.effect.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        provider_id: spec.and_then(|s| s.provider_id.clone()),
        resource_version: n.metadata.resource_version.clone(),
    }
}

/// The node store, shared by the node watch (the writer) and the agent's
/// readers.
#[derive(Debug, Clone, Default)]
pub struct Nodes(Arc<Mutex<NodeStore>>);

impl Nodes {
    pub fn lock(&self) -> MutexGuard<'_, NodeStore> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply one watch event.
    pub fn on_event(&self, event: Event<Node>) {
        self.lock().on_event(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, version: &str, labels: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "resourceVersion": version, "labels": labels,
                "creationTimestamp": "2026-11-25T05:00:00Z",
                "managedFields": [{"manager": "kubelet"}],
                "annotations": {"karpenter.sh/do-not-disrupt": "true", "big": "x"}},
            "spec": {"providerID": format!("aws:///us-west-2a/i-{name}"), "unschedulable": true,
                "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "e", "effect": "NoExecute"}]},
            "status": {"allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"},
                "images": [{"names": ["a"], "sizeBytes": 1}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                    "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
                    "operatingSystem": "linux", "osImage": "", "systemUUID": ""}}
        }))
        .unwrap_or_default()
    }

    /// What the node reflector gave: facts and documents as the old
    /// `Cache::node_facts`, `Cache::observed` and `Cache::snapshot` made
    /// them from the typed node.
    #[test]
    fn what_is_sent_and_planned_is_what_the_typed_nodes_gave() {
        let nodes = [
            node("b", "2", json!({"x": "1"})),
            node("a", "1", json!({"flotilla.io/nodeclaim": "c-1"})),
        ];
        let mut s = NodeStore::default();
        for n in &nodes {
            s.on_event(Event::Apply(n.clone()));
        }
        let f = s.facts();
        assert_eq!(f[0].name, "a");
        assert_eq!(
            f[0].labels.get("flotilla.io/nodeclaim").map(String::as_str),
            Some("c-1")
        );
        assert!(f[0].unschedulable);
        assert_eq!(f[0].provider_id.as_deref(), Some("aws:///us-west-2a/i-a"));
        assert_eq!(f[0].resource_version.as_deref(), Some("1"));
        assert_eq!(f[0].taints.len(), 2);
        assert_eq!(
            (f[0].taints[1].key.as_str(), f[0].taints[1].value.as_str()),
            ("e", "")
        );
        let mut observed = Vec::new();
        s.observed(&mut observed);
        let mut context = Vec::new();
        s.documents(&mut context);
        for ((o, bytes), n) in observed
            .into_iter()
            .zip(context)
            .zip([&nodes[1], &nodes[0]])
        {
            let old = docs::node_document(n);
            assert_eq!(
                o.key,
                ObjectKey::new("Node", "", n.metadata.name.as_deref().unwrap_or(""))
            );
            assert_eq!(
                Some(o.version.as_str()),
                n.metadata.resource_version.as_deref()
            );
            let new = (o.document)();
            assert_eq!(new, old);
            assert_eq!(bytes, serde_json::to_vec(&old).unwrap_or_default());
            assert!(new["status"].get("images").is_none());
            assert_eq!(
                new["status"]["conditions"],
                json!([{"type": "Ready", "status": "True"}])
            );
        }
    }

    #[test]
    fn a_relist_drops_the_nodes_it_did_not_list() {
        let mut s = NodeStore::default();
        s.on_event(Event::Apply(node("a", "1", json!({}))));
        s.on_event(Event::Apply(node("b", "1", json!({}))));
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(node("b", "2", json!({}))));
        assert_eq!(s.len(), 2);
        s.on_event(Event::InitDone);
        let f = s.facts();
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].name.as_str(), f[0].resource_version.as_deref()),
            ("b", Some("2"))
        );
        s.on_event(Event::Delete(node("b", "3", json!({}))));
        assert!(s.is_empty());
    }
}
