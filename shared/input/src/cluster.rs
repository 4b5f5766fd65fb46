//! Cluster objects: Node, StorageClass, PersistentVolumeClaim,
//! PersistentVolume, PriorityClass, Namespace.

use flotilla_core::model::{
    Node, PersistentVolume, PersistentVolumeClaim, StorageClass, VolumeBindingMode,
};
use flotilla_core::requirements::{Requirement, Requirements};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;

use crate::pod::node_selector_term;
use crate::util::{join, resources, taints, Ctx};
use crate::{Doc, InputError};

fn name_of(ctx: &Ctx, name: Option<&String>, kind: &str) -> Result<String, InputError> {
    match name {
        Some(n) if !n.is_empty() => Ok(n.clone()),
        _ => Err(ctx.err("metadata.name", format!("a {kind} needs a name"))),
    }
}

pub(crate) fn node(ctx: &Ctx, d: &Doc) -> Result<Node, InputError> {
    let n: core::Node = ctx.de(&d.value, "")?;
    let name = name_of(ctx, n.metadata.name.as_ref(), "Node")?;
    let spec = n.spec.as_ref();
    let status = n.status.as_ref();
    let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
        Some(a) => resources(ctx, "status.allocatable", Some(a))?,
        None => resources(
            ctx,
            "status.capacity",
            status.and_then(|s| s.capacity.as_ref()),
        )?,
    };
    Ok(Node {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: taints(
            ctx,
            "spec.taints",
            spec.and_then(|s| s.taints.as_ref()),
            false,
        )?,
        allocatable,
        // Cordoned, or being deleted: no new pod goes there (Karpenter
        // skips nodes marked for deletion).
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false)
            || n.metadata.deletion_timestamp.is_some(),
        deleting: n.metadata.deletion_timestamp.is_some(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True"),
        pods: Vec::new(),
        annotations: n.metadata.annotations.clone().unwrap_or_default(),
        created_at: n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        provider_id: spec.and_then(|s| s.provider_id.clone()),
    })
}

pub(crate) fn storage_class(ctx: &Ctx, d: &Doc) -> Result<StorageClass, InputError> {
    let s: storage::StorageClass = ctx.de(&d.value, "")?;
    let name = name_of(ctx, s.metadata.name.as_ref(), "StorageClass")?;
    let binding_mode = match s.volume_binding_mode.as_deref() {
        None | Some("") | Some("Immediate") => VolumeBindingMode::Immediate,
        Some("WaitForFirstConsumer") => VolumeBindingMode::WaitForFirstConsumer,
        Some(o) => {
            return Err(ctx.err(
                "volumeBindingMode",
                format!(
                    "unknown volumeBindingMode {o:?} (expected Immediate or WaitForFirstConsumer)"
                ),
            ))
        }
    };
    let mut allowed_topologies = Vec::new();
    for (i, t) in s.allowed_topologies.iter().flatten().enumerate() {
        let mut reqs = Requirements::new();
        for (j, e) in t.match_label_expressions.iter().flatten().enumerate() {
            let p = format!("allowedTopologies[{i}].matchLabelExpressions[{j}]");
            let r = Requirement::from_parts(&e.key, flotilla_core::Operator::In, e.values.clone())
                .map_err(|err| ctx.err(&p, err))?;
            reqs.add(r);
        }
        allowed_topologies.push(reqs);
    }
    let ann = s.metadata.annotations.as_ref();
    let is_default = ann.is_some_and(|a| {
        a.get("storageclass.kubernetes.io/is-default-class")
            .map(String::as_str)
            == Some("true")
            || a.get("storageclass.beta.kubernetes.io/is-default-class")
                .map(String::as_str)
                == Some("true")
    });
    Ok(StorageClass {
        name,
        provisioner: s.provisioner,
        binding_mode,
        allowed_topologies,
        is_default,
    })
}

pub(crate) fn pvc(ctx: &Ctx, d: &Doc) -> Result<PersistentVolumeClaim, InputError> {
    let c: core::PersistentVolumeClaim = ctx.de(&d.value, "")?;
    let name = name_of(ctx, c.metadata.name.as_ref(), "PersistentVolumeClaim")?;
    let spec = c.spec.as_ref();
    Ok(PersistentVolumeClaim {
        namespace: c
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name,
        storage_class: spec.and_then(|s| s.storage_class_name.clone()),
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        deleting: c.metadata.deletion_timestamp.is_some(),
        lost: c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
    })
}

pub(crate) fn pv(ctx: &Ctx, d: &Doc) -> Result<PersistentVolume, InputError> {
    let v: core::PersistentVolume = ctx.de(&d.value, "")?;
    let name = name_of(ctx, v.metadata.name.as_ref(), "PersistentVolume")?;
    let mut node_affinity = Vec::new();
    let terms = v
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    if let Some(sel) = terms {
        let base = "spec.nodeAffinity.required.nodeSelectorTerms";
        for (i, t) in sel.node_selector_terms.iter().enumerate() {
            node_affinity.push(node_selector_term(ctx, &join(base, &format!("[{i}]")), t)?);
        }
    }
    let local_or_host_path = v
        .spec
        .as_ref()
        .is_some_and(|s| s.local.is_some() || s.host_path.is_some());
    Ok(PersistentVolume {
        name,
        node_affinity,
        local_or_host_path,
        deleting: v.metadata.deletion_timestamp.is_some(),
    })
}

/// (name, value, globalDefault)
pub(crate) fn priority_class(ctx: &Ctx, d: &Doc) -> Result<(String, i32, bool), InputError> {
    let p: scheduling::PriorityClass = ctx.de(&d.value, "")?;
    let name = name_of(ctx, p.metadata.name.as_ref(), "PriorityClass")?;
    Ok((name, p.value.unwrap_or(0), p.global_default == Some(true)))
}

/// A `Namespace`: its name and labels (what a `namespaceSelector` sees,
/// `kubernetes.io/metadata.name` included, as the API server sets it).
pub(crate) fn namespace(
    ctx: &Ctx,
    d: &Doc,
) -> Result<(String, std::collections::BTreeMap<String, String>), InputError> {
    let n: core::Namespace = ctx.de(&d.value, "")?;
    let name = name_of(ctx, n.metadata.name.as_ref(), "Namespace")?;
    let mut labels = n.metadata.labels.unwrap_or_default();
    labels.insert("kubernetes.io/metadata.name".into(), name.clone());
    Ok((name, labels))
}
