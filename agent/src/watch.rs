//! The agent's view of the cluster: one kube-rs reflector per kind (a LIST
//! once, then a WATCH from its resourceVersion, re-listed only when the
//! watch expires), never a polling LIST.
//!
//! Pods and Nodes are watched but not reflected: each event's object is
//! reduced to what the agent sends and plans by as it arrives
//! ([`crate::pods`], [`crate::nodes`]). DaemonSets, StorageClasses, PVCs, PVs and (`policy/v1`, all
//! namespaces) PodDisruptionBudgets are typed; the
//! Karpenter kinds (NodePools, Provisioners, EC2NodeClasses,
//! AWSNodeTemplates, NodeOverlays) are `DynamicObject`s, and a CRD that is
//! not installed (404 on its LIST) counts as empty rather than blocking.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use crate::batch::PendingDoc;
use crate::changes::Observed;
use crate::docs;
use crate::metrics::Metrics;
use crate::nodes::Nodes;
use crate::plan::{NodeFacts, PodFacts};
use crate::pods::Pods;
use flotilla_core::state::ObjectKey;

/// The Karpenter kinds read as dynamic objects: (group, version, kind,
/// plural).
pub const CUSTOM_KINDS: &[(&str, &str, &str, &str)] = &[
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.sh", "v1alpha5", "Provisioner", "provisioners"),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses"),
    (
        "karpenter.k8s.aws",
        "v1alpha1",
        "AWSNodeTemplate",
        "awsnodetemplates",
    ),
    ("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays"),
];

pub fn custom_resources() -> Vec<ApiResource> {
    CUSTOM_KINDS
        .iter()
        .map(|(g, v, k, p)| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p))
        .collect()
}

/// Where a kind's reflector stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncState {
    /// The first LIST has not completed.
    Pending,
    Synced,
    /// The API server does not serve the kind (CRD not installed).
    Missing,
}

type SyncMap = Arc<Mutex<BTreeMap<String, SyncState>>>;

/// The pods (reduced) and the reflector stores.
#[derive(Clone)]
pub struct Cache {
    pub pods: Pods,
    pub nodes: Nodes,
    pub daemon_sets: Store<DaemonSet>,
    pub storage_classes: Store<StorageClass>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub pvs: Store<PersistentVolume>,
    /// Read by disruption (which nodes can go without breaking a budget).
    pub pdbs: Store<PodDisruptionBudget>,
    pub custom: Vec<(ApiResource, Store<DynamicObject>)>,
    sync: SyncMap,
}

/// The cluster as one batch needs it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Serialized NodePools, EC2NodeClasses, overlays, Nodes, bound pods,
    /// DaemonSets, volumes and PodDisruptionBudgets, in a deterministic
    /// order.
    pub context: Vec<Vec<u8>>,
    /// Serialized unschedulable pods, by key.
    pub pending: Vec<PendingDoc>,
}

fn mark(sync: &SyncMap, kind: &str, state: SyncState) {
    let mut m = sync.lock().unwrap_or_else(|e| e.into_inner());
    let entry = m.entry(kind.to_string()).or_insert(SyncState::Pending);
    // A kind that synced once stays usable (its store keeps the last state
    // while the watch is re-established).
    if !(*entry == SyncState::Synced && state == SyncState::Missing) {
        *entry = state;
    }
}

/// Drive one reflector stream, recording its sync state.
fn drive<K, S>(
    kind: String,
    stream: S,
    sync: SyncMap,
    mut on_event: impl FnMut(Event<K>) + Send + 'static,
) -> JoinHandle<()>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    mark(&sync, &kind, SyncState::Pending);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(ev) => {
                    if matches!(ev, Event::InitDone) {
                        mark(&sync, &kind, SyncState::Synced);
                        tracing::debug!(kind = %kind, "cache synced");
                    }
                    on_event(ev);
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                    mark(&sync, &kind, SyncState::Missing);
                    tracing::debug!(kind = %kind, "not served by the API server; treated as empty");
                }
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; retrying"),
            }
        }
    })
}

/// Drop what no decision reads, to keep the stores small.
fn slim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Of a pod, keep what scheduling and draining read ([`docs::pod_document`]
/// sends no more): container env, commands, probes, mounts and statuses
/// are often most of a pod (dropped before the pod is serialized).
pub(crate) fn slim_pod(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.env = None;
            c.env_from = None;
            c.command = None;
            c.args = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.security_context = None;
        }
        spec.ephemeral_containers = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
    }
}

fn typed<K>(
    client: &Client,
    kind: &str,
    sync: &SyncMap,
    config: &watcher::Config,
    on_event: impl FnMut(Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(Api::<K>::all(client.clone()), config.clone())
        .default_backoff()
        .modify(slim)
        .reflect(writer);
    (
        reader,
        drive(kind.to_string(), stream, sync.clone(), on_event),
    )
}

use kube::runtime::watcher::watcher;

/// Watch the pods into `pods`, bumping `changes` whenever a pod becomes
/// unschedulable.
fn watch_pods(
    client: &Client,
    sync: &SyncMap,
    config: &watcher::Config,
    pods: Pods,
    changes: signal::Sender<u64>,
    metrics: Option<Arc<Metrics>>,
) -> JoinHandle<()> {
    let stream = watcher(Api::<Pod>::all(client.clone()), config.clone()).default_backoff();
    let on_event = move |e: Event<Pod>| {
        let (applied, pending) = {
            let mut store = pods.lock();
            (store.on_event(e), store.pending())
        };
        if applied.became_pending {
            changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        if let Some(m) = &metrics {
            m.pods_pending
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
        }
    };
    drive("Pod".to_string(), stream, sync.clone(), on_event)
}

/// Start every reflector. Returns the cache, a counter bumped whenever a
/// pod becomes unschedulable, and the tasks.
pub fn start(
    client: Client,
    metrics: Option<Arc<Metrics>>,
) -> (Cache, signal::Receiver<u64>, Vec<JoinHandle<()>>) {
    let sync: SyncMap = Arc::default();
    let config = watcher::Config::default();
    let (changes_tx, changes_rx) = signal::channel(0u64);
    let mut tasks = Vec::new();
    let pods = Pods::default();
    tasks.push(watch_pods(
        &client,
        &sync,
        &config,
        pods.clone(),
        changes_tx,
        metrics,
    ));
    let nodes = Nodes::default();
    let writer = nodes.clone();
    let stream = watcher(Api::<Node>::all(client.clone()), config.clone()).default_backoff();
    tasks.push(drive("Node".into(), stream, sync.clone(), move |e| {
        writer.on_event(e)
    }));
    let (daemon_sets, t) = typed::<DaemonSet>(&client, "DaemonSet", &sync, &config, |_| {});
    tasks.push(t);
    let (storage_classes, t) =
        typed::<StorageClass>(&client, "StorageClass", &sync, &config, |_| {});
    tasks.push(t);
    let (pvcs, t) =
        typed::<PersistentVolumeClaim>(&client, "PersistentVolumeClaim", &sync, &config, |_| {});
    tasks.push(t);
    let (pvs, t) = typed::<PersistentVolume>(&client, "PersistentVolume", &sync, &config, |_| {});
    tasks.push(t);
    let (pdbs, t) =
        typed::<PodDisruptionBudget>(&client, "PodDisruptionBudget", &sync, &config, |_| {});
    tasks.push(t);
    let mut custom = Vec::new();
    for ar in custom_resources() {
        let writer = reflector::store::Writer::new(ar.clone());
        let reader = writer.as_reader();
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        let stream = watcher(api, config.clone())
            .default_backoff()
            .modify(slim)
            .reflect(writer);
        tasks.push(drive(ar.kind.clone(), stream, sync.clone(), |_| {}));
        custom.push((ar, reader));
    }
    (
        Cache {
            pods,
            nodes,
            daemon_sets,
            storage_classes,
            pvcs,
            pvs,
            pdbs,
            custom,
            sync,
        },
        changes_rx,
        tasks,
    )
}

fn sorted<K: Resource + ResourceExt + Clone + 'static>(store: &Store<K>) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut v = store.state();
    v.sort_by_key(|o| (o.namespace(), o.name_any()));
    v
}

fn to_bytes(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

impl Cache {
    /// A cache over these pods and nodes (every other kind empty), every
    /// kind synced: what the watches would hold (benchmarks, tests).
    pub fn of(pods: Pods, nodes: Nodes) -> Cache {
        let sync: SyncMap = Arc::default();
        let kinds = [
            "Pod",
            "Node",
            "DaemonSet",
            "StorageClass",
            "PersistentVolumeClaim",
        ];
        let more = ["PersistentVolume", "PodDisruptionBudget"];
        for kind in kinds.into_iter().chain(more) {
            mark(&sync, kind, SyncState::Synced);
        }
        Cache {
            pods,
            nodes,
            daemon_sets: reflector::store().0,
            storage_classes: reflector::store().0,
            pvcs: reflector::store().0,
            pvs: reflector::store().0,
            pdbs: reflector::store().0,
            custom: Vec::new(),
            sync,
        }
    }

    /// Every kind's state.
    pub fn sync_states(&self) -> BTreeMap<String, SyncState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every core kind listed, and every Karpenter kind listed or absent.
    pub fn is_ready(&self) -> bool {
        self.sync_states()
            .values()
            .all(|s| *s != SyncState::Pending)
            && !self.sync_states().is_empty()
    }

    /// Wait until [`Cache::is_ready`], checking every `every`.
    pub async fn wait_ready(&self, every: std::time::Duration) {
        while !self.is_ready() {
            tokio::time::sleep(every).await;
        }
    }

    /// The batch contents right now.
    pub fn snapshot(&self) -> Snapshot {
        let mut context = Vec::new();
        for (ar, store) in &self.custom {
            for o in sorted(store) {
                let v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                context.push(to_bytes(&docs::object_document(
                    v,
                    Some(&ar.api_version),
                    Some(&ar.kind),
                )));
            }
        }
        self.nodes.lock().documents(&mut context);
        let mut pending = Vec::new();
        self.pods.lock().documents(&mut context, &mut pending);
        fn typed_docs<K>(out: &mut Vec<Vec<u8>>, store: &Store<K>, api_version: &str, kind: &str)
        where
            K: Resource<DynamicType = ()> + serde::Serialize + Clone + 'static,
        {
            for o in sorted(store) {
                let v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                out.push(to_bytes(&docs::object_document(
                    v,
                    Some(api_version),
                    Some(kind),
                )));
            }
        }
        typed_docs(&mut context, &self.daemon_sets, "apps/v1", "DaemonSet");
        typed_docs(
            &mut context,
            &self.storage_classes,
            "storage.k8s.io/v1",
            "StorageClass",
        );
        typed_docs(&mut context, &self.pvcs, "v1", "PersistentVolumeClaim");
        typed_docs(&mut context, &self.pvs, "v1", "PersistentVolume");
        for pdb in sorted(&self.pdbs) {
            context.push(to_bytes(&docs::pdb_document(&pdb)));
        }
        Snapshot { context, pending }
    }

    /// Every object a post by changes sends ([`crate::changes`]): the same
    /// objects as [`Cache::snapshot`] (pods: the unschedulable and the
    /// bound ones), each with its `resourceVersion` and how to make its
    /// document; and the number of unschedulable pods.
    /// Pods are taken from their store a chunk at a time, as the iterator
    /// is read ([`Pods::observed`]).
    pub fn observed(&self) -> (impl Iterator<Item = Observed> + Send + '_, usize) {
        fn key_of<K: ResourceExt>(kind: &str, o: &K) -> (ObjectKey, String) {
            let ns = o.namespace().unwrap_or_default();
            (
                ObjectKey::new(kind, &ns, &o.name_any()),
                o.resource_version().unwrap_or_default(),
            )
        }
        fn typed<K>(
            out: &mut Vec<Observed>,
            store: &Store<K>,
            api_version: &'static str,
            kind: &'static str,
        ) where
            K: Resource<DynamicType = ()> + serde::Serialize + Clone + Send + Sync + 'static,
        {
            for o in store.state() {
                let (key, version) = key_of(kind, o.as_ref());
                out.push(Observed {
                    key,
                    version,
                    document: Box::new(move || {
                        let v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                        docs::object_document(v, Some(api_version), Some(kind))
                    }),
                });
            }
        }
        let mut head = Vec::new();
        for (ar, store) in &self.custom {
            for o in store.state() {
                let (key, version) = key_of(&ar.kind, o.as_ref());
                let (api_version, kind) = (ar.api_version.clone(), ar.kind.clone());
                head.push(Observed {
                    key,
                    version,
                    document: Box::new(move || {
                        let v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                        docs::object_document(v, Some(&api_version), Some(&kind))
                    }),
                });
            }
        }
        self.nodes.lock().observed(&mut head);
        let pending = self.pods.lock().pending();
        let mut out = Vec::new();
        typed(&mut out, &self.daemon_sets, "apps/v1", "DaemonSet");
        typed(
            &mut out,
            &self.storage_classes,
            "storage.k8s.io/v1",
            "StorageClass",
        );
        typed(&mut out, &self.pvcs, "v1", "PersistentVolumeClaim");
        typed(&mut out, &self.pvs, "v1", "PersistentVolume");
        for pdb in self.pdbs.state() {
            let (key, version) = key_of("PodDisruptionBudget", pdb.as_ref());
            out.push(Observed {
                key,
                version,
                document: Box::new(move || docs::pdb_document(&pdb)),
            });
        }
        let all = head.into_iter().chain(self.pods.observed()).chain(out);
        (all, pending)
    }

    /// The nodes as the action planner sees them.
    pub fn node_facts(&self) -> Vec<NodeFacts> {
        self.nodes.lock().facts()
    }

    /// Bound pods as the drain sees them.
    pub fn pod_facts(&self) -> Vec<PodFacts> {
        self.pods.lock().facts(None)
    }

    /// Bound pods on `nodes` as the drain sees them.
    pub fn pod_facts_on(&self, nodes: &std::collections::BTreeSet<String>) -> Vec<PodFacts> {
        self.pods.lock().facts(Some(nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_pods_keep_what_scheduling_and_draining_read() {
        let mut p = docs::tests::pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx",
                "env": [{"name": "A", "value": "b"}], "command": ["sh"],
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "nginx",
                "imageID": "x", "ready": true, "restartCount": 0}]}
        }));
        let before = docs::pod_document(&p);
        slim_pod(&mut p);
        let c = &p.spec.as_ref().expect("spec").containers[0];
        assert!(c.env.is_none() && c.command.is_none());
        assert!(p
            .status
            .as_ref()
            .expect("status")
            .container_statuses
            .is_none());
        // What is sent is unchanged.
        assert_eq!(docs::pod_document(&p), before);
    }

    #[test]
    fn custom_kinds_are_the_karpenter_crds() {
        let r = custom_resources();
        assert_eq!(r[0].api_version, "karpenter.sh/v1");
        assert_eq!(r[0].plural, "nodepools");
        assert_eq!(r[2].kind, "EC2NodeClass");
        assert_eq!(r[2].group, "karpenter.k8s.aws");
    }
}
