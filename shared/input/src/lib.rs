//! Reads Kubernetes documents into Flotilla's cluster model
//! ([`flotilla_core::model::ClusterState`]).
//!
//! Each [`Source`] is YAML (multi-document) or JSON (when its first
//! non-space byte is `{` or `[`). Documents may be `kind: List` (as written
//! by `kubectl get -o yaml|json`), core Kubernetes objects (Pod, Deployment,
//! ReplicaSet, StatefulSet, Job, DaemonSet, Node, StorageClass,
//! PersistentVolumeClaim, PersistentVolume, PriorityClass,
//! PodDisruptionBudget), Karpenter objects (NodePool, Provisioner,
//! EC2NodeClass, AWSNodeTemplate, NodeOverlay, NodeClaim) or AWS CLI outputs
//! (`{"InstanceTypes": [...]}`, `{"CapacityReservations": [...]}`).
//! Unknown kinds are skipped with a warning.
//!
//! Workloads are expanded into pending pods with deterministic names:
//!
//! * Deployment `web` in namespace `ns`: `web-<hash>-<i>`, where `<hash>` is
//!   10 lowercase hex digits of the 64-bit FNV-1a hash of `ns/web`
//!   (like the pod-template-hash of a real ReplicaSet, it keeps Deployment
//!   pods apart from StatefulSet/Job pods of the same name);
//! * ReplicaSet and Job: `<name>-<i>`;
//! * StatefulSet: `<name>-<ordinal>` (from `spec.ordinals.start`, default 0),
//!   with PVCs `<template>-<name>-<ordinal>` for its `volumeClaimTemplates`.
//!
//! `i` counts from 0. Document numbers in errors and warnings count from 1.

mod aws;
mod cluster;
mod disruption;
mod error;
mod karpenter;
mod parse;
mod pod;
mod util;
mod workload;

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::model::{namespaced_key, ClusterState, Pod};
use flotilla_core::state::{ClusterCache, PodRow, TemplateId};
use serde_json::Value;

pub use error::InputError;

use util::Ctx;

/// One input file.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// File path (or other label), used in errors and warnings.
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// Largest accepted source, per file.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024 * 1024;

/// Largest total number of pods that workload expansion may create (sum of
/// replicas over all Deployments, ReplicaSets, StatefulSets and Jobs).
pub const MAX_EXPANDED_PODS: usize = 200_000;

/// Largest total number of PersistentVolumeClaims that StatefulSet
/// `volumeClaimTemplates` may create (templates × replicas, summed).
pub const MAX_EXPANDED_CLAIMS: usize = 200_000;

/// Deepest accepted nesting of a document (YAML and JSON parsers enforce
/// this as well; both stop at 128 levels).
pub const MAX_DEPTH: usize = 128;

/// One Kubernetes object with where it came from.
pub(crate) struct Doc<'a> {
    pub file: &'a str,
    /// 1-based document number within the file.
    pub index: usize,
    /// Path prefix inside the document (`items[3].` for List members).
    pub prefix: String,
    pub value: Value,
}

impl Doc<'_> {
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }
}

/// Reads all sources into one cluster state.
pub fn load(sources: &[Source]) -> Result<ClusterState, InputError> {
    let mut state = ClusterState::default();
    let mut docs: Vec<Doc> = Vec::new();
    for src in sources {
        let values = parse::parse_source(src)?;
        read_values(src.name, values, &mut state, &mut docs)?;
    }
    build(docs, state, Vec::new())
}

/// Reads a cluster state kept by changes ([`ClusterCache`]). Bound pods
/// that share a template are read once per template, not once per pod:
/// the state of a large cluster loads in time and memory proportional to
/// its workloads, plus a copy per pod of what differs (name, node, times).
/// The result is the state [`load`] reads from the cache's documents.
pub fn load_cache(cache: ClusterCache) -> Result<ClusterState, InputError> {
    const FILE: &str = "state";
    let mut state = ClusterState::default();
    let mut docs: Vec<Doc> = Vec::new();
    let ClusterCache {
        objects,
        templates,
        pods,
    } = cache;
    let mut values: Vec<Value> = objects.into_values().collect();
    let mut shared: BTreeMap<&TemplateId, Vec<PodRow>> = BTreeMap::new();
    let mut shareable: BTreeMap<&TemplateId, bool> = BTreeMap::new();
    for row in pods.into_values() {
        let Some((id, template)) = templates.get_key_value(&row.template) else {
            return Err(InputError {
                object: Some(format!("Pod {}/{}", row.namespace, row.name)),
                ..InputError::file(FILE, format!("its template {} is not stored", row.template))
            });
        };
        let share = *shareable
            .entry(id)
            .or_insert_with(|| pod::shareable(template));
        if row.node.is_some() && share {
            shared.entry(id).or_default().push(row);
        } else {
            values.push(row.expand(template));
        }
    }
    read_values(FILE, values, &mut state, &mut docs)?;
    let templated: Vec<Templated> = shared
        .into_iter()
        .filter_map(|(id, rows)| {
            let template = templates.get(id)?;
            Some(Templated { template, rows })
        })
        .collect();
    build(docs, state, templated)
}

/// Bound pods sharing one template.
struct Templated<'a> {
    template: &'a Value,
    rows: Vec<PodRow>,
}

/// Sorts `values` (whole documents, AWS CLI outputs) of file `file` into
/// `docs`, the instance types, the capacity reservations and the instances.
fn read_values<'a>(
    file: &'a str,
    values: Vec<Value>,
    state: &mut ClusterState,
    docs: &mut Vec<Doc<'a>>,
) -> Result<(), InputError> {
    for (i, value) in values.into_iter().enumerate() {
        let index = i + 1;
        let ctx = Ctx::new(file, index);
        if let Some(types) = aws::instance_types(&ctx, &value)? {
            state
                .instance_types
                .get_or_insert_with(Vec::new)
                .extend(types);
            continue;
        }
        if let Some(reservations) = aws::capacity_reservations(&ctx, &value)? {
            state.capacity_reservations.extend(reservations);
            continue;
        }
        if let Some(instances) = aws::instances(&ctx, &value)? {
            state.instances.extend(instances);
            continue;
        }
        flatten(file, index, String::new(), value, 0, docs)?;
    }
    Ok(())
}

/// The cluster state of the documents read, and of the templated bound
/// pods of a [`ClusterCache`].
fn build(
    docs: Vec<Doc>,
    mut state: ClusterState,
    templated: Vec<Templated>,
) -> Result<ClusterState, InputError> {
    // First pass: objects others refer to.
    let mut priority_classes: BTreeMap<String, i32> = BTreeMap::new();
    let mut default_priority: Option<i32> = None;
    let mut deployments: BTreeSet<(String, String)> = BTreeSet::new();
    let mut pvc_names: BTreeSet<(String, String)> = BTreeSet::new();
    let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for d in &docs {
        let meta = d.value.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let ns = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        match d.kind() {
            "PriorityClass" => {
                let ctx = Ctx::for_doc(d);
                let (n, v, global_default) = cluster::priority_class(&ctx, d)?;
                if global_default {
                    default_priority = Some(v);
                }
                priority_classes.insert(n, v);
            }
            "Deployment" => {
                deployments.insert((ns.to_string(), name.to_string()));
            }
            "PersistentVolumeClaim" => {
                pvc_names.insert((ns.to_string(), name.to_string()));
            }
            "Namespace" => {
                let ctx = Ctx::for_doc(d);
                let (n, labels) = cluster::namespace(&ctx, d)?;
                namespaces.insert(n, labels);
            }
            _ => {}
        }
    }

    let mut env = workload::Env {
        priority_classes: &priority_classes,
        default_priority: default_priority.unwrap_or(0),
        deployments: &deployments,
        existing_pvcs: &pvc_names,
        namespaces: &namespaces,
        expanded: 0,
        expanded_claims: 0,
    };
    let mut bound: Vec<Pod> = Vec::new();
    let mut daemon_pods: Vec<Pod> = Vec::new();
    let mut class_kubelet: BTreeMap<String, flotilla_core::model::KubeletConfig> = BTreeMap::new();
    for d in &docs {
        let ctx = Ctx::for_doc(d);
        match d.kind() {
            "PriorityClass" | "Namespace" => {}
            "Pod" => {
                if let Some(p) = pod::pod_object(&ctx, d, &env, &mut state, &mut daemon_pods)? {
                    if p.node_name.is_some() {
                        bound.push(p);
                    } else if p.terminating {
                        // Karpenter does not provision for pods being deleted.
                        state.warnings.push(format!(
                            "{}: skipping pending pod {} (being deleted)",
                            ctx.here(),
                            p.key()
                        ));
                    } else {
                        state.pending_pods.push(p);
                    }
                }
            }
            "Deployment" | "ReplicaSet" | "StatefulSet" | "Job" => {
                workload::expand(&ctx, d, &mut env, &mut state)?;
            }
            "DaemonSet" => {
                let ds = workload::daemon_set(&ctx, d, &env, &mut state)?;
                state.daemon_sets.push(ds);
            }
            "Node" => state.nodes.push(cluster::node(&ctx, d)?),
            "StorageClass" => state.storage_classes.push(cluster::storage_class(&ctx, d)?),
            "PersistentVolumeClaim" => state.pvcs.push(cluster::pvc(&ctx, d)?),
            "PersistentVolume" => state.pvs.push(cluster::pv(&ctx, d)?),
            "NodePool" => {
                let (np, overlays) = karpenter::node_pool(&ctx, d, &mut state.warnings)?;
                state.node_pools.push(np);
                state.overlays.extend(overlays);
            }
            "Provisioner" => {
                let (np, overlays) = karpenter::provisioner(&ctx, d)?;
                state.node_pools.push(np);
                state.overlays.extend(overlays);
            }
            "EC2NodeClass" | "AWSNodeTemplate" => {
                let (nc, kubelet) = karpenter::node_class(&ctx, d, &mut state.warnings)?;
                if let Some(k) = kubelet {
                    class_kubelet.insert(nc.name.clone(), k);
                }
                state.node_classes.push(nc);
            }
            "NodeOverlay" => state.overlays.push(karpenter::node_overlay(&ctx, d)?),
            "PodDisruptionBudget" => state.pdbs.push(disruption::pdb(&ctx, d)?),
            "NodeClaim" => state.node_claims.push(disruption::node_claim(&ctx, d)?),
            other => {
                let what = util::describe_object(other, &d.value);
                state.warnings.push(format!(
                    "{} doc {}: skipping unsupported kind {what}",
                    d.file, d.index
                ));
            }
        }
    }
    bound.reserve(templated.iter().map(|t| t.rows.len()).sum());
    for t in templated {
        pod::templated_pods(t.template, t.rows, &env, &mut state, &mut bound)?;
    }

    // A later definition of the same object replaces an earlier one.
    let w = &mut state.warnings;
    dedupe(&mut state.nodes, "Node", |n| n.name.clone(), w);
    dedupe(&mut state.node_pools, "NodePool", |n| n.name.clone(), w);
    dedupe(&mut state.node_classes, "node class", |n| n.name.clone(), w);
    dedupe(
        &mut state.storage_classes,
        "StorageClass",
        |n| n.name.clone(),
        w,
    );
    dedupe(&mut state.pvs, "PersistentVolume", |n| n.name.clone(), w);
    dedupe(
        &mut state.pvcs,
        "PersistentVolumeClaim",
        |n| namespaced_key(&n.namespace, &n.name),
        w,
    );
    dedupe(&mut state.overlays, "NodeOverlay", |n| n.name.clone(), w);
    dedupe(
        &mut state.daemon_sets,
        "DaemonSet",
        |n| namespaced_key(&n.namespace, &n.name),
        w,
    );
    dedupe(&mut state.pdbs, "PodDisruptionBudget", |p| p.key(), w);
    dedupe(&mut state.node_claims, "NodeClaim", |c| c.name.clone(), w);
    expected_allocatable(&mut state);

    daemon_pod_requests(&mut state.daemon_sets, daemon_pods.iter().chain(&bound));

    // Karpenter v1 keeps the kubelet configuration on the EC2NodeClass; a
    // NodePool without its own (v1beta1) kubelet block takes its class's.
    for np in &mut state.node_pools {
        if np.source != flotilla_core::model::NodePoolSource::NodePool
            || np.kubelet != Default::default()
        {
            continue;
        }
        if let Some(k) = np.node_class.as_ref().and_then(|c| class_kubelet.get(c)) {
            np.kubelet = k.clone();
        }
    }

    // Bound pods go to their nodes.
    drop_duplicate_pods(&mut state, &bound);
    let at = node_of_each(&state.nodes, &bound);
    let mut per_node = vec![0usize; state.nodes.len()];
    for &i in at.iter().flatten() {
        per_node[i] += 1;
    }
    for (n, count) in state.nodes.iter_mut().zip(per_node) {
        n.pods.reserve(count);
    }
    for (p, at) in bound.into_iter().zip(at) {
        match at {
            Some(i) => state.nodes[i].pods.push(p),
            None => state.warnings.push(format!(
                "pod {} is bound to node {:?}, which is not in the inputs; ignoring it",
                p.key(),
                p.node_name.as_deref().unwrap_or_default()
            )),
        }
    }
    Ok(state)
}

/// Karpenter's `StateNode.Allocatable()`: until a NodePool's node has
/// initialized (`karpenter.sh/initialized: "true"`), a resource its
/// `status.allocatable` reports as zero, or not at all, is what its NodeClaim
/// (same provider ID, else `status.nodeName`) expects. The kubelet reports
/// extended resources as zero at startup, before their device plugin
/// registers; the node is not taken for one that cannot hold the pods
/// planned onto it.
fn expected_allocatable(state: &mut ClusterState) {
    if state.node_claims.is_empty() {
        return;
    }
    let claims = &state.node_claims;
    let by_id: std::collections::HashMap<&str, usize> = claims
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((c.provider_id.as_deref()?, i)))
        .collect();
    let by_name: std::collections::HashMap<&str, usize> = claims
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((c.node_name.as_deref()?, i)))
        .collect();
    for n in &mut state.nodes {
        if n.initialized() {
            continue;
        }
        let claim = n
            .provider_id
            .as_deref()
            .and_then(|id| by_id.get(id))
            .or_else(|| by_name.get(n.name.as_str()))
            .and_then(|&i| claims.get(i));
        for (r, q) in claim.iter().flat_map(|c| c.allocatable.iter()) {
            if n.allocatable.get(r).is_zero() {
                n.allocatable.set(r, q);
            }
        }
    }
}

/// The index in `nodes` of each bound pod's node (`None`: not in the
/// inputs). Hashed: a million pods over a hundred thousand nodes.
fn node_of_each(nodes: &[flotilla_core::model::Node], bound: &[Pod]) -> Vec<Option<usize>> {
    let by_name: std::collections::HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    bound
        .iter()
        .map(|p| p.node_name.as_deref().and_then(|n| by_name.get(n).copied()))
        .collect()
}

/// The pods a workload expansion made up for pods the inputs also hold:
/// a pending pod given twice is one pod (the last definition); a pending
/// pod that is also bound is the bound one; a Deployment given together
/// with its pods (`kubectl get deploy,pods`) expands only to the replicas
/// its ReplicaSets' pods do not already account for.
fn drop_duplicate_pods(state: &mut ClusterState, bound: &[Pod]) {
    let w = &mut state.warnings;
    dedupe(&mut state.pending_pods, "Pod", |p| p.key(), w);
    let pending: std::collections::HashSet<(&str, &str)> = state
        .pending_pods
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    let running: BTreeSet<String> = bound
        .iter()
        .filter(|p| pending.contains(&(p.namespace.as_str(), p.name.as_str())))
        .map(Pod::key)
        .collect();
    state.pending_pods.retain(|p| !running.contains(&p.key()));
    // Pods of each Deployment among the Pod objects (bound or pending),
    // counted for the Deployments expanded into pending pods only.
    let expanded: BTreeSet<&str> = state
        .pending_pods
        .iter()
        .filter_map(|p| p.owner.as_deref())
        .filter(|o| o.starts_with("Deployment/"))
        .collect();
    let mut present: BTreeMap<String, usize> = BTreeMap::new();
    if !expanded.is_empty() {
        for p in bound.iter().chain(state.pending_pods.iter()) {
            if let Some(d) = deployment_of(p) {
                if expanded.contains(d.as_str()) {
                    *present.entry(d).or_default() += 1;
                }
            }
        }
    }
    for (deployment, mut n) in present {
        let before = state.pending_pods.len();
        let mut keep = vec![true; before];
        for (i, p) in state.pending_pods.iter().enumerate().rev() {
            if n == 0 {
                break;
            }
            if p.owner.as_deref() == Some(deployment.as_str()) {
                keep[i] = false;
                n -= 1;
            }
        }
        let mut it = keep.iter();
        state
            .pending_pods
            .retain(|_| it.next().copied().unwrap_or(true));
        let dropped = before - state.pending_pods.len();
        if dropped > 0 {
            state.warnings.push(format!(
                "{deployment}: {dropped} of its replicas are pods in the inputs already; expanding only the rest"
            ));
        }
    }
}

/// `Deployment/<ns>/<name>` of a pod a Deployment's ReplicaSet owns: the
/// ReplicaSet is named `<name>-<pod-template-hash>`.
fn deployment_of(p: &Pod) -> Option<String> {
    let rs = p.owner.as_deref()?.strip_prefix("ReplicaSet/")?;
    let hash = p.labels.get("pod-template-hash")?;
    let (ns, rs_name) = rs.split_once('/')?;
    let name = rs_name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
    Some(format!("Deployment/{ns}/{name}"))
}

/// Splits `kind: List` documents (recursively) into their items.
fn flatten<'a>(
    file: &'a str,
    index: usize,
    prefix: String,
    value: Value,
    depth: usize,
    out: &mut Vec<Doc<'a>>,
) -> Result<(), InputError> {
    if value.is_null() {
        return Ok(());
    }
    let ctx = Ctx::new(file, index).with_prefix(&prefix);
    let Value::Object(map) = &value else {
        return Err(ctx.err(
            "",
            "document is not a mapping (expected a Kubernetes object)",
        ));
    };
    if map.is_empty() {
        return Ok(());
    }
    let kind = match map.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(_) => return Err(ctx.err("kind", "kind must be a string")),
        None => {
            return Err(ctx.err(
                "",
                "document has no kind (expected a Kubernetes object or an AWS CLI output)",
            ))
        }
    };
    let is_list = kind == "List" || (kind.ends_with("List") && map.contains_key("items"));
    if !is_list {
        out.push(Doc {
            file,
            index,
            prefix,
            value,
        });
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(ctx.err("items", "Lists nested too deeply"));
    }
    let Value::Object(map) = value else {
        return Ok(());
    };
    match map.get("items") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(_)) => {
            let Some(Value::Array(items)) =
                map.into_iter().find(|(k, _)| k == "items").map(|(_, v)| v)
            else {
                return Ok(());
            };
            for (i, item) in items.into_iter().enumerate() {
                flatten(
                    file,
                    index,
                    format!("{prefix}items[{i}]."),
                    item,
                    depth + 1,
                    out,
                )?;
            }
            Ok(())
        }
        Some(_) => Err(ctx.err("items", "items must be a list")),
    }
}

/// Keeps the last of several items with the same key, with a warning.
fn dedupe<T>(
    items: &mut Vec<T>,
    what: &str,
    key: impl Fn(&T) -> String,
    warnings: &mut Vec<String>,
) {
    let mut last: BTreeMap<String, usize> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        last.insert(key(it), i);
    }
    if last.len() == items.len() {
        return;
    }
    let mut i = 0;
    items.retain(|it| {
        let k = key(it);
        let keep = last.get(&k) == Some(&i);
        if !keep {
            warnings.push(format!(
                "{what} {k} is defined more than once; using the last definition"
            ));
        }
        i += 1;
        keep
    });
}

/// A DaemonSet's overhead is its newest pod's requests when the inputs hold
/// one (Karpenter's daemonset cache: a LimitRange or VPA may have changed
/// them), else its template's.
fn daemon_pod_requests<'a>(
    daemon_sets: &mut [flotilla_core::model::DaemonSet],
    pods: impl Iterator<Item = &'a Pod>,
) {
    let mut newest: BTreeMap<&str, &Pod> = BTreeMap::new();
    for p in pods {
        let Some(owner) = p.owner.as_deref().filter(|o| o.starts_with("DaemonSet/")) else {
            continue;
        };
        let slot = newest.entry(owner).or_insert(p);
        if (p.created_at, &p.name) > (slot.created_at, &slot.name) {
            *slot = p;
        }
    }
    for ds in daemon_sets {
        let key = format!("DaemonSet/{}/{}", ds.namespace, ds.name);
        if let Some(p) = newest.get(key.as_str()) {
            ds.pod.requests = p.requests.clone();
        }
    }
}
