//! Workloads (Deployment, ReplicaSet, StatefulSet, Job) expanded into
//! pending pods; DaemonSets kept as templates.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::model::{ClusterState, DaemonSet, PersistentVolumeClaim};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::pod::{convert, name_pod};
use crate::util::{fnv1a, Ctx};
use crate::{Doc, InputError, MAX_EXPANDED_CLAIMS, MAX_EXPANDED_PODS};

/// What converters need to know about the other inputs.
pub(crate) struct Env<'a> {
    pub priority_classes: &'a BTreeMap<String, i32>,
    /// Value of the `globalDefault` PriorityClass, else 0.
    pub default_priority: i32,
    /// `(namespace, name)` of Deployments in the inputs.
    pub deployments: &'a BTreeSet<(String, String)>,
    /// `(namespace, name)` of PersistentVolumeClaims in the inputs.
    pub existing_pvcs: &'a BTreeSet<(String, String)>,
    /// Labels of the `Namespace` objects in the inputs, by name (for pod
    /// affinity terms' `namespaceSelector`).
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// Pods created by expansion so far.
    pub expanded: usize,
    /// PersistentVolumeClaims created from `volumeClaimTemplates` so far.
    pub expanded_claims: usize,
}

/// A StatefulSet volume claim template: (name, storage class).
type ClaimTemplate = (String, Option<String>);

struct Workload<'a> {
    kind: &'static str,
    meta: &'a meta::ObjectMeta,
    template: &'a core::PodTemplateSpec,
    count: usize,
}

fn count(ctx: &Ctx, field: &str, n: Option<i32>, default: i32) -> Result<usize, InputError> {
    let n = n.unwrap_or(default);
    usize::try_from(n).map_err(|_| ctx.err(field, format!("{field} must not be negative, got {n}")))
}

fn template<'a>(
    ctx: &Ctx,
    t: Option<&'a core::PodTemplateSpec>,
) -> Result<&'a core::PodTemplateSpec, InputError> {
    t.ok_or_else(|| ctx.err("spec.template", "the workload needs a pod template"))
}

/// Expands a Deployment, ReplicaSet, StatefulSet or Job into pending pods.
pub(crate) fn expand(
    ctx: &Ctx,
    d: &Doc,
    env: &mut Env,
    state: &mut ClusterState,
) -> Result<(), InputError> {
    match d.kind() {
        "Deployment" => {
            let w: apps::Deployment = ctx.de(&d.value, "")?;
            let spec = &w.spec;
            let n = count(ctx, "spec.replicas", spec.replicas, 1)?;
            let ns = w.metadata.namespace.as_deref().unwrap_or("default");
            let name = w.metadata.name.as_deref().unwrap_or_default();
            let hash = format!("{:010x}", fnv1a(&format!("{ns}/{name}")) & 0xff_ffff_ffff);
            let wl = Workload {
                kind: "Deployment",
                meta: &w.metadata,
                template: &spec.template,
                count: n,
            };
            emit(
                ctx,
                &wl,
                "spec.replicas",
                env,
                state,
                |i| format!("{name}-{hash}-{i}"),
                None,
            )
        }
        "ReplicaSet" => {
            let w: apps::ReplicaSet = ctx.de(&d.value, "")?;
            let ns = w.metadata.namespace.as_deref().unwrap_or("default");
            let owner = w
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Deployment" && o.controller == Some(true));
            if let Some(o) = owner {
                if env.deployments.contains(&(ns.to_string(), o.name.clone())) {
                    state.warnings.push(format!(
                        "{}: skipping ReplicaSet owned by Deployment {ns}/{}, which is expanded instead",
                        ctx.here(),
                        o.name
                    ));
                    return Ok(());
                }
            }
            let spec = &w.spec;
            let n = count(ctx, "spec.replicas", spec.replicas, 1)?;
            let name = w.metadata.name.as_deref().unwrap_or_default();
            let wl = Workload {
                kind: "ReplicaSet",
                meta: &w.metadata,
                template: template(ctx, spec.template.as_ref())?,
                count: n,
            };
            emit(
                ctx,
                &wl,
                "spec.replicas",
                env,
                state,
                |i| format!("{name}-{i}"),
                None,
            )
        }
        "StatefulSet" => {
            let w: apps::StatefulSet = ctx.de(&d.value, "")?;
            let spec = &w.spec;
            let n = count(ctx, "spec.replicas", spec.replicas, 1)?;
            let start = count(
                ctx,
                "spec.ordinals.start",
                spec.ordinals.as_ref().and_then(|o| o.start),
                0,
            )?;
            let name = w.metadata.name.as_deref().unwrap_or_default();
            let wl = Workload {
                kind: "StatefulSet",
                meta: &w.metadata,
                template: &spec.template,
                count: n,
            };
            let claims: Vec<ClaimTemplate> = spec
                .volume_claim_templates
                .iter()
                .flatten()
                .map(|t| {
                    (
                        t.metadata.name.clone().unwrap_or_default(),
                        t.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
                    )
                })
                .collect();
            emit(
                ctx,
                &wl,
                "spec.replicas",
                env,
                state,
                |i| format!("{name}-{}", i + start),
                Some((&claims, start)),
            )
        }
        _ => {
            let w: batch::Job = ctx.de(&d.value, "")?;
            let Some(spec) = w.spec.as_ref() else {
                return Err(ctx.err("spec", "a Job needs a spec"));
            };
            let mut n = count(ctx, "spec.parallelism", spec.parallelism, 1)?;
            if let Some(c) = spec.completions {
                n = n.min(count(ctx, "spec.completions", Some(c), 1)?);
            }
            if spec.suspend == Some(true) {
                n = 0;
            }
            let name = w.metadata.name.as_deref().unwrap_or_default();
            let wl = Workload {
                kind: "Job",
                meta: &w.metadata,
                template: &spec.template,
                count: n,
            };
            emit(
                ctx,
                &wl,
                "spec.parallelism",
                env,
                state,
                |i| format!("{name}-{i}"),
                None,
            )
        }
    }
}

fn emit(
    ctx: &Ctx,
    w: &Workload,
    count_field: &str,
    env: &mut Env,
    state: &mut ClusterState,
    pod_name: impl Fn(usize) -> String,
    claims: Option<(&[ClaimTemplate], usize)>,
) -> Result<(), InputError> {
    let ns = w.meta.namespace.clone().unwrap_or_else(|| "default".into());
    let name = w.meta.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(ctx.err("metadata.name", format!("a {} needs a name", w.kind)));
    }
    if env.expanded.saturating_add(w.count) > MAX_EXPANDED_PODS {
        return Err(ctx.err(
            count_field,
            format!(
                "{count_field} is {}, which brings the expanded pods to {}, more than the limit of {MAX_EXPANDED_PODS}",
                w.count,
                env.expanded.saturating_add(w.count)
            ),
        ));
    }
    env.expanded += w.count;
    if let Some((claims, _)) = claims {
        let total = env
            .expanded_claims
            .saturating_add(claims.len().saturating_mul(w.count));
        if total > MAX_EXPANDED_CLAIMS {
            return Err(ctx.err(
                "spec.volumeClaimTemplates",
                format!(
                    "{} volumeClaimTemplates × {} replicas bring the expanded PersistentVolumeClaims to {total}, more than the limit of {MAX_EXPANDED_CLAIMS}",
                    claims.len(),
                    w.count
                ),
            ));
        }
        env.expanded_claims = total;
    }
    let spec = w
        .template
        .spec
        .as_ref()
        .ok_or_else(|| ctx.err("spec.template.spec", "the pod template needs a spec"))?;
    let mut base = convert(
        ctx,
        &ns,
        w.template.metadata.as_ref(),
        "spec.template.metadata",
        spec,
        "spec.template.spec",
        env,
        &mut state.warnings,
    )?;
    base.owner = Some(format!("{}/{ns}/{name}", w.kind));
    base.node_name = None;
    for i in 0..w.count {
        let mut p = base.clone();
        let pname = pod_name(i);
        name_pod(&mut p, &pname, spec, &mut state.pvcs, env.existing_pvcs);
        if let Some((claims, start)) = claims {
            for (tmpl, sc) in claims {
                let claim = format!("{tmpl}-{name}-{}", i + start);
                if !env.existing_pvcs.contains(&(ns.clone(), claim.clone())) {
                    state.pvcs.push(PersistentVolumeClaim {
                        namespace: ns.clone(),
                        name: claim.clone(),
                        storage_class: sc.clone(),
                        volume_name: None,
                        deleting: false,
                        lost: false,
                    });
                }
                p.pvc_names.push(claim);
            }
        }
        state.pending_pods.push(p);
    }
    Ok(())
}

/// A DaemonSet with its pod template converted.
pub(crate) fn daemon_set(
    ctx: &Ctx,
    d: &Doc,
    env: &Env,
    state: &mut ClusterState,
) -> Result<DaemonSet, InputError> {
    let w: apps::DaemonSet = ctx.de(&d.value, "")?;
    let spec = &w.spec;
    let ns = w
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = w.metadata.name.clone().unwrap_or_default();
    let pspec = spec
        .template
        .spec
        .as_ref()
        .ok_or_else(|| ctx.err("spec.template.spec", "the pod template needs a spec"))?;
    let mut pod = convert(
        ctx,
        &ns,
        spec.template.metadata.as_ref(),
        "spec.template.metadata",
        pspec,
        "spec.template.spec",
        env,
        &mut state.warnings,
    )?;
    pod.name = name.clone();
    pod.owner = Some(format!("DaemonSet/{ns}/{name}"));
    Ok(DaemonSet {
        namespace: ns,
        name,
        pod,
    })
}
